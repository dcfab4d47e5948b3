//! `relaymq-bench idle`: the server's memory per idle connection.
//!
//! Opens `--connections` native connections (protocol header, `connection.open`, one
//! `channel.open`, each answered before the connection counts), holds them idle for
//! `--duration` seconds and reports the server's RSS before opening them and at the end
//! of the hold, and their difference per connection.
//!
//! The connections are raw sockets, not [`relaymq::client::Connection`]s: a client
//! connection has a reader and a heartbeat thread, and 10,000 of them would measure this
//! tool rather than the server. One thread sends the heartbeats of every connection (when
//! the server negotiates them) and drains what the server sends; a connection the server
//! closes during the hold fails the run.

use super::args::{parse_uri, Target};
use super::report::mib;
use super::rss;
use super::{BenchError, EXIT_RUN_FAILED, EXIT_USAGE};
use relaymq::limits::FRAME_BYTES_HANDSHAKE;
use relaymq::native::frame::{self, FrameType};
use relaymq::native::{Method, PROTOCOL_HEADER};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The word that selects this subcommand: `relaymq-bench idle …`.
pub const SUBCOMMAND: &str = "idle";

/// Usage of `relaymq-bench idle`.
pub const USAGE: &str = "\
relaymq-bench idle: the server's RSS per idle native connection

USAGE: relaymq-bench idle --connections N [OPTIONS]

OPTIONS:
  --connections N     connections to open and hold (handshake and one channel each)
  --uri URI           relaymq://[USER:PASS@]HOST:PORT[/VHOST]
                      [default: relaymq://127.0.0.1:5673]
  --duration SECONDS  how long to hold them once all are open [default: 10]
  --json              print one JSON object at the end, nothing else
  -h, --help          print this help

The server must run on this machine (its RSS is read from /proc). This process needs
N + 64 file descriptors (ulimit -n).

EXIT CODES: 0 ok, 1 the run failed (a connection refused or closed), 2 usage error
";

/// Most connections `--connections` accepts (the server's `CONNECTIONS_MAX`).
pub const CONNECTIONS_MAX: usize = 65_536;

/// Default hold, seconds.
pub const HOLD_DEFAULT_S: u64 = 10;

/// Threads opening connections in parallel (each waits for its handshakes).
const OPENER_THREADS: usize = 8;

/// File descriptors this process needs besides the connections (stdio, `/proc` reads,
/// the RSS probe).
const FDS_SPARE: u64 = 64;

/// Time allowed for one connection's TCP connect and each handshake reply.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval of the RSS samples and of the check that every connection is still open.
const TICK: Duration = Duration::from_secs(1);

/// Request id of `connection.open`.
const OPEN_REQUEST_ID: u32 = 1;

/// Request id of `channel.open`.
const CHANNEL_OPEN_REQUEST_ID: u32 = 2;

/// The channel each connection opens.
const CHANNEL: u16 = 1;

/// Bytes read at once while draining a held connection.
const DRAIN_BUFFER_BYTES: usize = 4096;

/// Parsed flags of `relaymq-bench idle`.
#[derive(Clone, Debug)]
pub struct IdleOptions {
    /// The server.
    pub target: Target,
    /// Connections to open.
    pub connections: usize,
    /// Hold once all are open, seconds.
    pub hold_s: u64,
    /// One JSON object at the end.
    pub json: bool,
}

/// Figures of an idle run.
#[derive(Clone, Debug)]
pub struct IdleReport {
    /// Connections opened and held.
    pub connections: usize,
    /// Server RSS before the first connection, bytes (`None`: server not found).
    pub rss_before_bytes: Option<u64>,
    /// Server RSS at the end of the hold, bytes.
    pub rss_after_bytes: Option<u64>,
    /// Highest RSS sampled while the connections were held, bytes.
    pub rss_peak_bytes: Option<u64>,
    /// Seconds taken to open every connection.
    pub open_seconds: f64,
    /// Seconds held.
    pub hold_seconds: f64,
}

impl IdleReport {
    /// (after − before) / connections, bytes; `None` without both samples.
    pub fn rss_per_connection_bytes(&self) -> Option<u64> {
        let (b, a) = (self.rss_before_bytes?, self.rss_after_bytes?);
        Some(a.saturating_sub(b) / self.connections.max(1) as u64)
    }

    /// The JSON object `--json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "connections": self.connections,
            "server_rss_before_bytes": self.rss_before_bytes,
            "server_rss_after_bytes": self.rss_after_bytes,
            "server_rss_peak_bytes": self.rss_peak_bytes,
            "rss_per_connection_bytes": self.rss_per_connection_bytes(),
            "connections_per_s": (self.connections as f64 / self.open_seconds.max(1e-9)).round(),
            "open_seconds": self.open_seconds,
            "hold_seconds": self.hold_seconds,
        })
    }

    /// The text summary.
    pub fn to_text(&self) -> String {
        let show = |b: Option<u64>| {
            b.map_or("unknown (server not found)".into(), |b| {
                format!("{b} bytes ({})", mib(b))
            })
        };
        let per = self
            .rss_per_connection_bytes()
            .map_or("unknown".into(), |b| {
                format!("{b} bytes ({:.1} KiB)", b as f64 / 1024.0)
            });
        format!(
            "{} idle connections opened in {:.2} s, held {:.1} s\n\
             server RSS before: {}\nserver RSS after:  {}\nserver RSS peak:   {}\n\
             per connection:    {per}",
            self.connections,
            self.open_seconds,
            self.hold_seconds,
            show(self.rss_before_bytes),
            show(self.rss_after_bytes),
            show(self.rss_peak_bytes),
        )
    }
}

/// Runs `relaymq-bench idle` with the arguments after `idle`; returns the exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            let _ = write!(io::stdout(), "{USAGE}");
            return 0;
        }
        Err(e) => {
            eprintln!("error: {}", e.message());
            if e.exit_code() == EXIT_USAGE {
                eprintln!("usage: relaymq-bench idle --connections N [OPTIONS] (try --help)");
            }
            return e.exit_code();
        }
    };
    match run(&opts) {
        Ok(r) => {
            let out = if opts.json {
                r.to_json().to_string()
            } else {
                r.to_text()
            };
            let _ = writeln!(io::stdout(), "{out}");
            0
        }
        Err(e) => {
            eprintln!("error: the idle run failed: {e}");
            EXIT_RUN_FAILED
        }
    }
}

/// The value of the flag just read.
fn value(parser: &mut lexopt::Parser) -> Result<OsString, BenchError> {
    parser.value().map_err(|e| BenchError::Usage(e.to_string()))
}

/// Parses the flags after `idle`; `None` for `--help`.
///
/// # Errors
/// [`BenchError::Usage`] for a bad or missing flag.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<IdleOptions>, BenchError> {
    use lexopt::prelude::*;
    let usage = |e: String| BenchError::Usage(e);
    let mut uri = "relaymq://127.0.0.1:5673".to_string();
    let mut connections = None;
    let mut hold_s = HOLD_DEFAULT_S;
    let mut json = false;
    let mut parser = lexopt::Parser::from_args(args);
    let number = |flag: &str, v: OsString| -> Result<u64, BenchError> {
        let t = v.to_string_lossy().into_owned();
        t.parse()
            .map_err(|_| usage(format!("--{flag}: '{t}' is not a valid number")))
    };
    while let Some(arg) = parser.next().map_err(|e| usage(e.to_string()))? {
        match arg {
            Long("uri") => uri = value(&mut parser)?.to_string_lossy().into_owned(),
            Long("connections") => {
                let n = number("connections", value(&mut parser)?)?;
                if n == 0 || n > CONNECTIONS_MAX as u64 {
                    return Err(usage(format!(
                        "--connections must be between 1 and {CONNECTIONS_MAX}"
                    )));
                }
                connections = Some(n as usize);
            }
            Long("duration") => hold_s = number("duration", value(&mut parser)?)?,
            Long("json") => json = true,
            Short('h') | Long("help") => return Ok(None),
            _ => return Err(usage(arg.unexpected().to_string())),
        }
    }
    let connections = connections.ok_or_else(|| usage("--connections N is required".into()))?;
    let target = parse_uri(&uri)?;
    if target.protocol != super::uri::Protocol::Native {
        return Err(usage(
            "idle opens native connections: give a relaymq:// --uri".into(),
        ));
    }
    Ok(Some(IdleOptions {
        target,
        connections,
        hold_s,
        json,
    }))
}

/// The soft limit on open files of this process, from `/proc/self/limits`.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// Opens the connections, holds them and measures.
///
/// # Errors
/// Why the run failed: too few file descriptors, a refused handshake, a connection the
/// server closed during the hold.
pub fn run(opts: &IdleOptions) -> Result<IdleReport, String> {
    let needed = opts.connections as u64 + FDS_SPARE;
    if let Some(limit) = open_files_limit() {
        if limit < needed {
            return Err(format!(
                "{} connections need {needed} file descriptors, the soft limit is {limit}: \
                 raise it (ulimit -n {needed}) or open fewer",
                opts.connections
            ));
        }
    }
    let pid = rss::find_server_pid(&opts.target.addr);
    let sample = || pid.and_then(rss::rss_bytes);
    let rss_before_bytes = sample();
    let started = Instant::now();
    let (conns, heartbeat_s) = open_all(opts)?;
    let open_seconds = started.elapsed().as_secs_f64();
    let held_from = Instant::now();
    let mut rss_peak_bytes = sample();
    let heartbeat_every = (heartbeat_s > 0).then(|| Duration::from_secs(heartbeat_s.into()) / 2);
    let mut last_heartbeat = Instant::now();
    let hold = Duration::from_secs(opts.hold_s);
    let mut conns = conns;
    while held_from.elapsed() < hold {
        std::thread::sleep(TICK.min(hold.saturating_sub(held_from.elapsed())));
        let beat = heartbeat_every.is_some_and(|h| last_heartbeat.elapsed() >= h);
        if beat {
            last_heartbeat = Instant::now();
        }
        check_held(&mut conns, beat)?;
        rss_peak_bytes = rss_peak_bytes.max(sample());
    }
    let rss_after_bytes = sample();
    rss_peak_bytes = rss_peak_bytes.max(rss_after_bytes);
    let hold_seconds = held_from.elapsed().as_secs_f64();
    drop(conns);
    Ok(IdleReport {
        connections: opts.connections,
        rss_before_bytes,
        rss_after_bytes,
        rss_peak_bytes,
        open_seconds,
        hold_seconds,
    })
}

/// Opens every connection on [`OPENER_THREADS`] threads; returns them (non-blocking) and
/// the negotiated heartbeat interval in seconds.
fn open_all(opts: &IdleOptions) -> Result<(Vec<TcpStream>, u16), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let threads = OPENER_THREADS.min(opts.connections);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let next = Arc::clone(&next);
            let opts = opts.clone();
            std::thread::spawn(move || -> Result<(Vec<TcpStream>, u16), String> {
                let mut mine = Vec::new();
                let mut heartbeat_s = 0;
                while next.fetch_add(1, Ordering::Relaxed) < opts.connections {
                    let (s, h) =
                        open_one(&opts.target).map_err(|e| format!("opening a connection: {e}"))?;
                    mine.push(s);
                    heartbeat_s = h;
                }
                Ok((mine, heartbeat_s))
            })
        })
        .collect();
    let mut all = Vec::with_capacity(opts.connections);
    let mut heartbeat_s = 0;
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(Ok((mine, hb))) => {
                all.extend(mine);
                heartbeat_s = heartbeat_s.max(hb);
            }
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some("an opener thread panicked".into()),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok((all, heartbeat_s)),
    }
}

/// One connection: header, `connection.open`, `channel.open`, each answered.
fn open_one(target: &Target) -> Result<(TcpStream, u16), String> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(target.addr.as_str())
        .map_err(|e| format!("{}: {e}", target.addr))?
        .next()
        .ok_or_else(|| format!("{}: no address", target.addr))?;
    let mut s = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)
        .map_err(|e| format!("cannot connect to {}: {e}", target.addr))?;
    let io = |e: io::Error| e.to_string();
    s.set_nodelay(true).map_err(io)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
    let mut out = PROTOCOL_HEADER.to_vec();
    let open = Method::Open {
        user: target.user.clone(),
        password: target.password.clone(),
        vhost: target.vhost.clone(),
        frame_max: 0,
        heartbeat_s: 0,
        channel_max: 0,
        client_name: "relaymq-bench idle".into(),
    };
    frame::write_method(&mut out, 0, FRAME_BYTES_HANDSHAKE, |b| {
        open.encode(OPEN_REQUEST_ID, b)
    });
    s.write_all(&out).map_err(io)?;
    let mut buf = Vec::new();
    let heartbeat_s = match read_method(&mut s, &mut buf)? {
        (0, OPEN_REQUEST_ID, Method::OpenOk { heartbeat_s, .. }) => heartbeat_s,
        other => return Err(refusal("connection.open", other)),
    };
    out.clear();
    frame::write_method(&mut out, CHANNEL, FRAME_BYTES_HANDSHAKE, |b| {
        Method::ChannelOpen.encode(CHANNEL_OPEN_REQUEST_ID, b)
    });
    s.write_all(&out).map_err(io)?;
    match read_method(&mut s, &mut buf)? {
        (CHANNEL, CHANNEL_OPEN_REQUEST_ID, Method::Ok) => {}
        other => return Err(refusal("channel.open", other)),
    }
    s.set_nonblocking(true).map_err(io)?;
    Ok((s, heartbeat_s))
}

fn refusal(what: &str, (ch, rid, m): (u16, u32, Method)) -> String {
    match m {
        Method::Close {
            reply_code,
            reply_text,
            ..
        }
        | Method::ChannelClose {
            reply_code,
            reply_text,
            ..
        } => format!("{what} refused: {reply_code} {reply_text}"),
        other => format!(
            "{what}: unexpected {} (channel {ch}, request {rid})",
            other.name()
        ),
    }
}

/// Reads until one whole method frame is buffered (skipping heartbeats) and decodes it.
fn read_method(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(u16, u32, Method), String> {
    loop {
        match frame::check(buf, FRAME_BYTES_HANDSHAKE).map_err(|e| e.to_string())? {
            Some((h, n)) => {
                let payload = buf[frame::FRAME_HEADER_BYTES..n].to_vec();
                buf.drain(..n);
                if h.frame_type == FrameType::Heartbeat {
                    continue;
                }
                let (rid, m) = Method::decode(&payload).map_err(|e| e.to_string())?;
                return Ok((h.channel, rid, m));
            }
            None => {
                let mut chunk = [0u8; DRAIN_BUFFER_BYTES];
                let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("the server closed the connection during the handshake".into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Drains what the server sent to each held connection (heartbeats) and, with `beat`,
/// sends each a heartbeat.
///
/// # Errors
/// When the server closed a connection (EOF, reset, or anything but heartbeats).
fn check_held(conns: &mut [TcpStream], beat: bool) -> Result<(), String> {
    let mut hb = Vec::new();
    frame::write_heartbeat(&mut hb);
    let mut chunk = [0u8; DRAIN_BUFFER_BYTES];
    for (i, s) in conns.iter_mut().enumerate() {
        loop {
            match s.read(&mut chunk) {
                Ok(0) => return Err(format!("the server closed connection {i} while idle")),
                Ok(n) => {
                    if chunk[..n].chunks(hb.len()).any(|c| c != hb.as_slice()) {
                        return Err(format!(
                            "the server sent connection {i} something other than heartbeats \
                             (probably a connection.close)"
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(format!("connection {i}: {e}")),
            }
        }
        if beat {
            // 8 bytes on an otherwise silent socket: never a partial write in practice;
            // a full buffer would mean the server stopped reading, which is a failure.
            match s.write(&hb) {
                Ok(n) if n == hb.len() => {}
                Ok(_) => return Err(format!("connection {i}: partial heartbeat write")),
                Err(e) => return Err(format!("connection {i}: sending a heartbeat: {e}")),
            }
        }
    }
    Ok(())
}
