//! `relaymq-bench recovery`: how long a server takes to serve again after a crash with
//! many persistent messages queued.
//!
//! Starts `--server` itself on a fresh temporary data directory and a free loopback port
//! (`--listen 127.0.0.1:PORT --amqp-listen off --ready-file …`; under `--nofile N` as its
//! open-files limit), declares `--queues` durable queues (`relaymq-bench.recovery`, or
//! `relaymq-bench.recovery.0` … with more than one; timed), fills them with `--count`
//! persistent messages spread round-robin (several producers, batches, publisher
//! confirms), kills the server with SIGKILL, starts it again on the same directory and
//! port, and measures from the second spawn to:
//!
//! - the ready file appearing (`restart_to_ready_file_ms`),
//! - a client's handshake completing (`restart_to_connect_ms`),
//! - `basic.get` on the first queue returning a message (`restart_to_first_get_ms`:
//!   "serving again").
//!
//! The server must then hold exactly `--count` messages (`status`'s `messages`, ready and
//! unacked, the fetched one included), else the run fails. The server's RSS is read once
//! filled (before the kill) and once serving again. The servers' output
//! goes to `server.log` in the temporary directory, which is removed at the end.

use super::report::mib;
use super::rss;
use super::{BenchError, EXIT_RUN_FAILED, EXIT_USAGE};
use relaymq::client::{
    ClientError, ConnectOptions, Connection, PublishMessage, QueueDeclareOptions,
};
use relaymq::types::BasicProperties;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The word that selects this subcommand: `relaymq-bench recovery …`.
pub const SUBCOMMAND: &str = "recovery";

/// Usage of `relaymq-bench recovery`.
pub const USAGE: &str = "\
relaymq-bench recovery: time for a server to serve again after kill -9

USAGE: relaymq-bench recovery --server PATH --count N [OPTIONS]

OPTIONS:
  --server PATH       the relaymq-server binary to start (twice)
  --count N           persistent messages to queue before the kill
  --queues N          durable queues, the messages spread round-robin over them
                      [default: 1]
  --size BYTES        body size [default: 16]
  --fsync MODE        the server's --fsync (always|interval:MS|never) [default: always]
  --nofile N          run the server with this open-files limit (ulimit -n) [default:
                      this process's]
  --json              print one JSON object at the end, nothing else
  -h, --help          print this help

The server runs on a temporary data directory and a free 127.0.0.1 port, both removed
or released at the end.

EXIT CODES: 0 ok, 1 the run failed (server did not start, messages missing after the
restart), 2 usage error
";

/// The durable queue filled before the kill.
pub const QUEUE: &str = "relaymq-bench.recovery";

/// Most messages `--count` accepts (a `basic.get-ok` counts them in a `u32`).
pub const COUNT_MAX: u64 = u32::MAX as u64;

/// Most queues `--queues` accepts (the server's default `--max-queues-per-vhost`).
pub const QUEUES_MAX: usize = 100_000;

/// Connections declaring the queues at once (each a disjoint range, in order).
const DECLARE_CONNECTIONS: usize = 4;

/// Largest `--size`, bytes (the server's default message limit, 16 MiB).
pub const BODY_BYTES_MAX: usize = 16 << 20;

/// Default `--size`, bytes.
pub const BODY_BYTES_DEFAULT: usize = 16;

/// Producers filling the queue, each on its own connection (the group commit shares
/// fsyncs between them).
const FILL_PRODUCERS: usize = 4;

/// Messages per publish batch while filling.
const FILL_BATCH_MESSAGES: usize = 500;

/// Unconfirmed messages each filling producer allows.
const FILL_CONFIRM_WINDOW: usize = 4_000;

/// Time allowed for confirms while filling.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(60);

/// Time allowed for a server start (first start, or the restart to serve again).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Pause between two looks at the ready file, the port and the queue after a spawn.
const POLL: Duration = Duration::from_millis(1);

/// Timeout of one connection attempt while the server restarts.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Parsed flags of `relaymq-bench recovery`.
#[derive(Clone, Debug)]
pub struct RecoveryOptions {
    /// The `relaymq-server` binary.
    pub server: PathBuf,
    /// Persistent messages to queue.
    pub count: u64,
    /// Durable queues the messages are spread over.
    pub queues: usize,
    /// The server's open-files limit (`ulimit -n`), when set.
    pub nofile: Option<u64>,
    /// Body size, bytes.
    pub size: usize,
    /// The server's `--fsync` mode.
    pub fsync: String,
    /// One JSON object at the end.
    pub json: bool,
}

/// Figures of a recovery run.
#[derive(Clone, Debug)]
pub struct RecoveryReport {
    /// Messages queued and confirmed before the kill.
    pub messages: u64,
    /// Durable queues declared.
    pub queues: usize,
    /// The server's open-files limit, when set.
    pub nofile: Option<u64>,
    /// Seconds taken to declare the queues.
    pub declare_seconds: f64,
    /// RSS of the first server once filled, bytes.
    pub server_rss_before_kill_bytes: Option<u64>,
    /// Body size, bytes.
    pub size: usize,
    /// Seconds taken to fill the queue (publish with confirms).
    pub fill_seconds: f64,
    /// From the restart's spawn to the ready file, ms.
    pub restart_to_ready_file_ms: f64,
    /// From the restart's spawn to a completed handshake, ms.
    pub restart_to_connect_ms: f64,
    /// From the restart's spawn to the first message fetched, ms.
    pub restart_to_first_get_ms: f64,
    /// Messages in the queue after the restart.
    pub messages_after_restart: u64,
    /// RSS of the restarted server once serving, bytes.
    pub server_rss_after_restart_bytes: Option<u64>,
}

impl RecoveryReport {
    /// The JSON object `--json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "messages": self.messages,
            "queues": self.queues,
            "nofile": self.nofile,
            "declare_seconds": self.declare_seconds,
            "server_rss_before_kill_bytes": self.server_rss_before_kill_bytes,
            "size_bytes": self.size,
            "fill_seconds": self.fill_seconds,
            "restart_to_ready_file_ms": self.restart_to_ready_file_ms,
            "restart_to_connect_ms": self.restart_to_connect_ms,
            "restart_to_first_get_ms": self.restart_to_first_get_ms,
            "messages_after_restart": self.messages_after_restart,
            "server_rss_after_restart_bytes": self.server_rss_after_restart_bytes,
        })
    }

    /// The text summary.
    pub fn to_text(&self) -> String {
        let rss =
            |b: Option<u64>| b.map_or("unknown".into(), |b| format!("{b} bytes ({})", mib(b)));
        format!(
            "{} durable queues declared in {:.2} s{}\n\
             {} persistent messages of {} bytes queued in {:.2} s, then kill -9\n\
             server RSS before the kill: {}\n\
             restart → ready file: {:.1} ms\nrestart → connected:  {:.1} ms\n\
             restart → first get:  {:.1} ms\nmessages after restart: {}\n\
             server RSS after restart: {}",
            self.queues,
            self.declare_seconds,
            self.nofile
                .map_or(String::new(), |n| format!(" (server under ulimit -n {n})")),
            self.messages,
            self.size,
            self.fill_seconds,
            rss(self.server_rss_before_kill_bytes),
            self.restart_to_ready_file_ms,
            self.restart_to_connect_ms,
            self.restart_to_first_get_ms,
            self.messages_after_restart,
            rss(self.server_rss_after_restart_bytes),
        )
    }
}

/// Runs `relaymq-bench recovery` with the arguments after `recovery`; returns the exit
/// code.
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
                eprintln!(
                    "usage: relaymq-bench recovery --server PATH --count N [OPTIONS] (try --help)"
                );
            }
            return e.exit_code();
        }
    };
    let (report, failure) = match run(&opts) {
        Ok(r) => (Some(r), None),
        Err((why, r)) => (r.map(|b| *b), Some(why)),
    };
    if let Some(r) = report {
        let out = if opts.json {
            r.to_json().to_string()
        } else {
            r.to_text()
        };
        let _ = writeln!(io::stdout(), "{out}");
    }
    match failure {
        None => 0,
        Some(why) => {
            eprintln!("error: the recovery run failed: {why}");
            EXIT_RUN_FAILED
        }
    }
}

/// The value of the flag just read.
fn value(parser: &mut lexopt::Parser) -> Result<OsString, BenchError> {
    parser.value().map_err(|e| BenchError::Usage(e.to_string()))
}

/// Parses the flags after `recovery`; `None` for `--help`.
///
/// # Errors
/// [`BenchError::Usage`] for a bad or missing flag.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
) -> Result<Option<RecoveryOptions>, BenchError> {
    use lexopt::prelude::*;
    let usage = |e: String| BenchError::Usage(e);
    let mut server = None;
    let mut count = None;
    let mut queues = 1;
    let mut nofile = None;
    let mut size = BODY_BYTES_DEFAULT;
    let mut fsync = "always".to_string();
    let mut json = false;
    let mut parser = lexopt::Parser::from_args(args);
    let number = |flag: &str, v: OsString| -> Result<u64, BenchError> {
        let t = v.to_string_lossy().into_owned();
        t.parse()
            .map_err(|_| usage(format!("--{flag}: '{t}' is not a valid number")))
    };
    while let Some(arg) = parser.next().map_err(|e| usage(e.to_string()))? {
        match arg {
            Long("server") => server = Some(PathBuf::from(value(&mut parser)?)),
            Long("count") => {
                let n = number("count", value(&mut parser)?)?;
                if n == 0 || n > COUNT_MAX {
                    return Err(usage(format!("--count must be between 1 and {COUNT_MAX}")));
                }
                count = Some(n);
            }
            Long("queues") => {
                let n = number("queues", value(&mut parser)?)?;
                if n == 0 || n > QUEUES_MAX as u64 {
                    return Err(usage(format!(
                        "--queues must be between 1 and {QUEUES_MAX}"
                    )));
                }
                queues = n as usize;
            }
            Long("nofile") => {
                let n = number("nofile", value(&mut parser)?)?;
                if n == 0 {
                    return Err(usage("--nofile must be above 0".into()));
                }
                nofile = Some(n);
            }
            Long("size") => {
                let n = number("size", value(&mut parser)?)?;
                if n == 0 || n > BODY_BYTES_MAX as u64 {
                    return Err(usage(format!(
                        "--size must be between 1 and {BODY_BYTES_MAX}"
                    )));
                }
                size = n as usize;
            }
            Long("fsync") => {
                fsync = value(&mut parser)?.to_string_lossy().into_owned();
                let interval_ok = fsync
                    .strip_prefix("interval:")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .is_some_and(|ms| ms > 0);
                if !(fsync == "always" || fsync == "never" || interval_ok) {
                    return Err(usage(format!(
                        "--fsync: '{fsync}' is not always, never or interval:MS (MS > 0)"
                    )));
                }
            }
            Long("json") => json = true,
            Short('h') | Long("help") => return Ok(None),
            _ => return Err(usage(arg.unexpected().to_string())),
        }
    }
    let server = server.ok_or_else(|| usage("--server PATH is required".into()))?;
    if !server.is_file() {
        return Err(usage(format!(
            "--server {}: no such file",
            server.display()
        )));
    }
    let count = count.ok_or_else(|| usage("--count N is required".into()))?;
    Ok(Some(RecoveryOptions {
        server,
        count,
        queues,
        nofile,
        size,
        fsync,
        json,
    }))
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn create() -> io::Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "relaymq-bench-recovery-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server process, SIGKILLed on drop.
struct Server(Child);

impl Server {
    fn kill(mut self) -> io::Result<()> {
        self.0.kill()?;
        self.0.wait().map(|_| ())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where one run's servers live.
struct Setup<'a> {
    opts: &'a RecoveryOptions,
    dir: &'a Path,
    addr: String,
}

impl Setup<'_> {
    fn ready_file(&self) -> PathBuf {
        self.dir.join("ready.json")
    }

    /// Spawns the server; its stdout and stderr go to `server.log`.
    fn spawn(&self) -> Result<Server, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .map_err(|e| format!("server.log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("server.log: {e}"))?;
        let mut command = match self.opts.nofile {
            None => Command::new(&self.opts.server),
            Some(n) => {
                // `exec` keeps the pid: the kill and the RSS reading reach the server.
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&self.opts.server);
                c
            }
        };
        command
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen", &self.addr, "--amqp-listen", "off"])
            .args(["--metrics-listen", "off", "--http-listen", "off"])
            .arg("--ready-file")
            .arg(self.ready_file())
            .args(["--fsync", &self.opts.fsync, "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map(Server)
            .map_err(|e| format!("cannot start {}: {e}", self.opts.server.display()))
    }

    /// The end of `server.log`, for an error message.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// Fails when the server has exited.
    fn check_alive(&self, server: &mut Server) -> Result<(), String> {
        match server.0.try_wait() {
            Ok(Some(status)) => Err(format!(
                "the server exited ({status}); its log ends with:\n{}",
                self.log_tail()
            )),
            _ => Ok(()),
        }
    }

    fn connect(&self, timeout: Duration) -> Result<Connection, ClientError> {
        Connection::connect_with(ConnectOptions {
            addr: self.addr.clone(),
            timeout,
            client_name: "relaymq-bench recovery".into(),
            ..ConnectOptions::default()
        })
    }
}

/// Ends a step early after Ctrl-C: the caller's error path kills the servers and removes
/// the temporary directory.
fn stop_if_interrupted() -> Result<(), String> {
    if super::interrupt::interrupted() {
        return Err("interrupted (Ctrl-C)".into());
    }
    Ok(())
}

/// A free loopback port: bound, read, released (the server binds it with SO_REUSEADDR).
fn free_addr() -> Result<String, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.to_string())
}

/// Runs the scenario; `Err` holds why it failed, with the figures when there are some.
pub fn run(
    opts: &RecoveryOptions,
) -> Result<RecoveryReport, (String, Option<Box<RecoveryReport>>)> {
    let dir = TempDir::create().map_err(|e| (format!("temporary directory: {e}"), None))?;
    let setup = Setup {
        opts,
        dir: &dir.0,
        addr: free_addr().map_err(|e| (format!("finding a free port: {e}"), None))?,
    };
    let mut first = setup.spawn().map_err(|e| (e, None))?;
    wait_ready(&setup, &mut first).map_err(|e| (format!("first start: {e}"), None))?;
    let declare_from = Instant::now();
    declare(&setup, opts).map_err(|e| (format!("declaring the queues: {e}"), None))?;
    let declare_seconds = declare_from.elapsed().as_secs_f64();
    let fill_from = Instant::now();
    fill(&setup, opts).map_err(|e| (format!("filling the queues: {e}"), None))?;
    let fill_seconds = fill_from.elapsed().as_secs_f64();
    let server_rss_before_kill_bytes = rss::rss_bytes(first.0.id());
    first
        .kill()
        .map_err(|e| (format!("killing the server: {e}"), None))?;
    let _ = std::fs::remove_file(setup.ready_file());

    let spawned = Instant::now();
    let mut second = setup.spawn().map_err(|e| (e, None))?;
    let r = serve_again(&setup, &mut second, spawned)
        .map_err(|e| (format!("after the restart: {e}"), None))?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let report = RecoveryReport {
        messages: opts.count,
        queues: opts.queues,
        nofile: opts.nofile,
        declare_seconds,
        server_rss_before_kill_bytes,
        size: opts.size,
        fill_seconds,
        restart_to_ready_file_ms: ms(r.ready_file),
        restart_to_connect_ms: ms(r.connect),
        restart_to_first_get_ms: ms(r.first_get),
        messages_after_restart: r.messages,
        server_rss_after_restart_bytes: rss::rss_bytes(second.0.id()),
    };
    drop(second);
    drop(dir);
    if report.messages_after_restart != opts.count {
        let why = format!(
            "the server holds {} messages after the restart, {} were confirmed",
            report.messages_after_restart, opts.count
        );
        return Err((why, Some(Box::new(report))));
    }
    Ok(report)
}

/// Waits for the ready file of a server's first start.
fn wait_ready(setup: &Setup<'_>, server: &mut Server) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !setup.ready_file().exists() {
        stop_if_interrupted()?;
        setup.check_alive(server)?;
        if Instant::now() >= deadline {
            return Err(format!(
                "no ready file within {} s",
                START_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// The name of queue `i` of `queues`: [`QUEUE`] alone, or `QUEUE.i`.
fn queue_name(queues: usize, i: usize) -> String {
    if queues == 1 {
        QUEUE.to_string()
    } else {
        format!("{QUEUE}.{i}")
    }
}

/// Declares the durable queues from [`DECLARE_CONNECTIONS`] connections, each a
/// contiguous range in order.
fn declare(setup: &Setup<'_>, opts: &RecoveryOptions) -> Result<(), String> {
    let connections = DECLARE_CONNECTIONS.min(opts.queues);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..connections)
            .map(|c| {
                let from = opts.queues * c / connections;
                let to = opts.queues * (c + 1) / connections;
                scope.spawn(move || -> Result<(), String> {
                    let conn = setup
                        .connect(CONFIRM_TIMEOUT)
                        .map_err(|e| format!("connect: {e}"))?;
                    let ch = conn.open_channel().map_err(|e| e.to_string())?;
                    let durable = QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    };
                    for i in from..to {
                        if i % 1000 == 0 {
                            stop_if_interrupted()?;
                        }
                        let name = queue_name(opts.queues, i);
                        ch.queue_declare(&name, durable.clone())
                            .map_err(|e| format!("{name}: {e}"))?;
                    }
                    ch.close().map_err(|e| e.to_string())?;
                    conn.close().map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a declarer panicked".into()))
            })
            .collect::<Result<Vec<()>, String>>()
    })?;
    Ok(())
}

/// Messages the server holds (`status`'s `messages`: ready and unacked, all queues).
fn messages_held(conn: &Connection) -> Result<u64, String> {
    match conn.status().map_err(|e| e.to_string())?.get("messages") {
        Some(relaymq::types::FieldValue::I64(n)) => Ok(u64::try_from(*n).unwrap_or(0)),
        other => Err(format!("status has no message count: {other:?}")),
    }
}

/// Fills the queues with `count` confirmed persistent messages from [`FILL_PRODUCERS`]
/// producers, round-robin over the queues.
fn fill(setup: &Setup<'_>, opts: &RecoveryOptions) -> Result<(), String> {
    let conn = setup
        .connect(CONFIRM_TIMEOUT)
        .map_err(|e| format!("connect: {e}"))?;
    let producers = FILL_PRODUCERS.min(opts.count as usize).max(1);
    let result = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|i| {
                let share = opts.count / producers as u64
                    + u64::from((i as u64) < opts.count % producers as u64);
                let first = (opts.count / producers as u64) * i as u64
                    + (i as u64).min(opts.count % producers as u64);
                scope.spawn(move || fill_one(setup, opts, first, share))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a producer panicked".into()))
            })
            .collect::<Result<Vec<()>, String>>()
    });
    result?;
    // The restart must find what the server says it holds now.
    let held = messages_held(&conn)?;
    if held != opts.count {
        return Err(format!("{held} messages queued, {} confirmed", opts.count));
    }
    conn.close().map_err(|e| e.to_string())
}

/// One filling producer: messages `first .. first + count` of `--size` bytes, message
/// `k` to queue `k % --queues`, with confirms.
fn fill_one(
    setup: &Setup<'_>,
    opts: &RecoveryOptions,
    first: u64,
    count: u64,
) -> Result<(), String> {
    let size = opts.size;
    let conn = setup
        .connect(CONFIRM_TIMEOUT)
        .map_err(|e| format!("connect: {e}"))?;
    let fail = |e: ClientError| e.to_string();
    let ch = conn.open_channel().map_err(fail)?;
    ch.confirm_select().map_err(fail)?;
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    let mut sent = 0u64;
    let mut batch = Vec::with_capacity(FILL_BATCH_MESSAGES);
    while sent < count {
        stop_if_interrupted()?;
        let n = (count - sent).min(FILL_BATCH_MESSAGES as u64);
        let (_, all_acked) = ch
            .wait_for_confirms_at_most(FILL_CONFIRM_WINDOW - n as usize, CONFIRM_TIMEOUT)
            .map_err(fail)?;
        if !all_acked {
            return Err("the server nacked a publish".into());
        }
        batch.clear();
        for k in 0..n {
            let mut body = vec![0u8; size];
            let number = first + sent + k;
            let seq = number.to_be_bytes();
            let len = body.len().min(seq.len());
            body[..len].copy_from_slice(&seq[seq.len() - len..]);
            batch.push(PublishMessage {
                exchange: String::new(),
                routing_key: queue_name(opts.queues, (number % opts.queues as u64) as usize),
                mandatory: false,
                properties: props.clone(),
                body,
            });
        }
        ch.publish_batch(&batch).map_err(fail)?;
        sent += n;
    }
    if !ch.wait_for_confirms(CONFIRM_TIMEOUT).map_err(fail)? {
        return Err("the server nacked a publish".into());
    }
    ch.close().map_err(fail)?;
    conn.close().map_err(fail)
}

/// When the restarted server reached each stage, from its spawn.
struct Restarted {
    ready_file: Duration,
    connect: Duration,
    first_get: Duration,
    messages: u64,
}

/// Polls the ready file, the port and the queue until a message is fetched.
fn serve_again(
    setup: &Setup<'_>,
    server: &mut Server,
    spawned: Instant,
) -> Result<Restarted, String> {
    let deadline = spawned + START_TIMEOUT;
    let mut ready_file = None;
    let mut connected: Option<(Connection, Duration)> = None;
    loop {
        stop_if_interrupted()?;
        if Instant::now() >= deadline {
            return Err(format!(
                "not serving {QUEUE} within {} s",
                START_TIMEOUT.as_secs()
            ));
        }
        if ready_file.is_none() && setup.ready_file().exists() {
            ready_file = Some(spawned.elapsed());
        }
        match &connected {
            None => match setup.connect(CONNECT_ATTEMPT_TIMEOUT) {
                Ok(c) => connected = Some((c, spawned.elapsed())),
                Err(_) => {
                    setup.check_alive(server)?;
                    std::thread::sleep(POLL);
                }
            },
            Some((conn, connect)) => {
                let ch = conn.open_channel().map_err(|e| e.to_string())?;
                let got = ch.basic_get(&queue_name(setup.opts.queues, 0), false);
                let first_get = spawned.elapsed();
                let messages = match got {
                    // Ready and unacked, the message just fetched included.
                    Ok(Some(_)) => messages_held(conn)?,
                    // Recovery is over before the listener opens: an empty queue is lost
                    // messages, not a queue still loading.
                    Ok(None) => 0,
                    // Not declared (yet): look again.
                    Err(e) if e.reply_code() == Some(404) => {
                        std::thread::sleep(POLL);
                        continue;
                    }
                    Err(e) => return Err(format!("basic.get: {e}")),
                };
                // The ready file is written right after the listener is bound.
                let ready_file = match ready_file {
                    Some(d) => d,
                    None => wait_ready_file(setup, spawned, deadline)?,
                };
                return Ok(Restarted {
                    ready_file,
                    connect: *connect,
                    first_get,
                    messages,
                });
            }
        }
    }
}

fn wait_ready_file(
    setup: &Setup<'_>,
    spawned: Instant,
    deadline: Instant,
) -> Result<Duration, String> {
    while !setup.ready_file().exists() {
        if Instant::now() >= deadline {
            return Err("no ready file".into());
        }
        std::thread::sleep(POLL);
    }
    Ok(spawned.elapsed())
}
