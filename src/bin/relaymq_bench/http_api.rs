//! `relaymq-bench http-api`: the management HTTP API's speed and memory with many queues.
//!
//! Starts `--server` on a temporary data directory with the API on a free loopback port,
//! declares `--queues` queues over the native protocol, then measures, each over
//! `--requests` requests on fresh connections (as `curl` and most scripts make them):
//!
//! - `GET /api/overview` (median and 99th percentile, ms);
//! - `GET /api/queues?page=1&page_size=100` (the same);
//! - one unpaginated `GET /api/queues`: its time, size, and how much the server's RSS grew
//!   while it was written (sampled every [`RSS_SAMPLE_INTERVAL`]).
//!
//! And, in this process, the memory of the message-rate history for `--queues` queues
//! once full (10 minutes of samples: [`relaymq::broker::rates::RATE_HISTORY_SAMPLES`]),
//! as the rates module counts it and as this process's RSS grows.

use super::report::mib;
use super::rss;
use super::{BenchError, EXIT_RUN_FAILED, EXIT_USAGE};
use relaymq::client::{ConnectOptions, Connection, QueueDeclareOptions};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The word that selects this subcommand: `relaymq-bench http-api …`.
pub const SUBCOMMAND: &str = "http-api";

/// Usage of `relaymq-bench http-api`.
pub const USAGE: &str = "\
relaymq-bench http-api: the management HTTP API's speed and memory with many queues

USAGE: relaymq-bench http-api --server PATH [OPTIONS]

OPTIONS:
  --server PATH       the relaymq-server binary to start
  --queues N          queues to declare before measuring [default: 10000]
  --requests N        requests per measured endpoint [default: 200]
  --json              print one JSON object at the end, nothing else
  -h, --help          print this help

The server runs on a temporary data directory and free 127.0.0.1 ports, removed or
released at the end.

EXIT CODES: 0 ok, 1 the run failed (the server did not start, a request failed), 2 usage
error
";

/// Default `--queues`.
pub const QUEUES_DEFAULT: usize = 10_000;

/// Default `--requests`.
pub const REQUESTS_DEFAULT: usize = 200;

/// Interval of the RSS samples taken while the unpaginated list is written.
pub const RSS_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);

/// Time allowed for the server to write its ready file.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Time allowed for one HTTP answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Parsed flags.
#[derive(Debug, Clone)]
struct Options {
    server: PathBuf,
    queues: usize,
    requests: usize,
    json: bool,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Options>, BenchError> {
    use lexopt::prelude::*;
    let usage = |m: String| BenchError::Usage(m);
    let mut p = lexopt::Parser::from_args(args);
    let (mut server, mut queues, mut requests, mut json) =
        (None, QUEUES_DEFAULT, REQUESTS_DEFAULT, false);
    while let Some(arg) = p.next().map_err(|e| usage(e.to_string()))? {
        match arg {
            Long("server") => {
                server = Some(PathBuf::from(p.value().map_err(|e| usage(e.to_string()))?))
            }
            Long("queues") => {
                queues = p
                    .value()
                    .map_err(|e| usage(e.to_string()))?
                    .parse()
                    .map_err(|e: lexopt::Error| usage(format!("--queues: {e}")))?
            }
            Long("requests") => {
                requests = p
                    .value()
                    .map_err(|e| usage(e.to_string()))?
                    .parse()
                    .map_err(|e: lexopt::Error| usage(format!("--requests: {e}")))?
            }
            Long("json") => json = true,
            Short('h') | Long("help") => return Ok(None),
            other => return Err(usage(other.unexpected().to_string())),
        }
    }
    let server = server.ok_or_else(|| usage("--server PATH is required".into()))?;
    if requests == 0 {
        return Err(usage("--requests must be at least 1".into()));
    }
    Ok(Some(Options {
        server,
        queues,
        requests,
        json,
    }))
}

/// Latencies of one endpoint, ms.
#[derive(Debug, Clone, Copy)]
struct Latency {
    median_ms: f64,
    p99_ms: f64,
}

fn latency(mut ms: Vec<f64>) -> Latency {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Latency {
        median_ms: at(0.5),
        p99_ms: at(0.99),
    }
}

/// One GET on a new connection: (status, body, elapsed).
fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, Vec<u8>, Duration)> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    s.set_nodelay(true)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nConnection: close\r\n\r\n"
    )?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let elapsed = started.elapsed();
    let status = all
        .get(9..12)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    Ok((status, all, elapsed))
}

/// `--requests` GETs of `path`, each answered 200.
fn measure(addr: SocketAddr, path: &str, n: usize) -> Result<Latency, String> {
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let (status, body, t) = get(addr, path).map_err(|e| format!("GET {path}: {e}"))?;
        if status != 200 {
            return Err(format!(
                "GET {path}: {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        ms.push(t.as_secs_f64() * 1000.0);
    }
    Ok(latency(ms))
}

/// The server process, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(opts: &Options, dir: &Path) -> Result<(Server, SocketAddr, SocketAddr), String> {
    let ready = dir.join("ready.json");
    let child = Command::new(&opts.server)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen", "127.0.0.1:0", "--amqp-listen", "off"])
        .args(["--metrics-listen", "off", "--http-listen", "127.0.0.1:0"])
        .args(["--max-queues-per-vhost", &(opts.queues + 16).to_string()])
        .arg("--ready-file")
        .arg(&ready)
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", opts.server.display()))?;
    let mut server = Server(child);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                let addr = |k: &str| v[k].as_str().and_then(|a| a.parse::<SocketAddr>().ok());
                if let (Some(native), Some(http)) = (addr("listen"), addr("http_listen")) {
                    return Ok((server, native, http));
                }
            }
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(format!("the server exited: {status}"));
        }
        if Instant::now() >= deadline {
            return Err("no ready file".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn declare(native: SocketAddr, queues: usize) -> Result<Duration, String> {
    let started = Instant::now();
    let conn = Connection::connect_with(ConnectOptions::new(native.to_string()))
        .map_err(|e| format!("connect: {e}"))?;
    let ch = conn.open_channel().map_err(|e| format!("channel: {e}"))?;
    for i in 0..queues {
        ch.queue_declare(
            &format!("bench.http.{i:06}"),
            QueueDeclareOptions::default(),
        )
        .map_err(|e| format!("declare: {e}"))?;
    }
    Ok(started.elapsed())
}

/// The unpaginated list: (elapsed, bytes, server RSS growth while it was written).
fn unpaginated(http: SocketAddr, pid: u32) -> Result<(Duration, usize, u64), String> {
    let before = rss::rss_bytes(pid).unwrap_or(0);
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(r) = rss::rss_bytes(pid) {
                    peak.fetch_max(r, Ordering::Relaxed);
                }
                std::thread::sleep(RSS_SAMPLE_INTERVAL);
            }
        })
    };
    let answer = get(http, "/api/queues");
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let (status, body, t) = answer.map_err(|e| format!("GET /api/queues: {e}"))?;
    if status != 200 {
        return Err(format!("GET /api/queues: {status}"));
    }
    Ok((
        t,
        body.len(),
        peak.load(Ordering::Relaxed).saturating_sub(before),
    ))
}

/// The rate history of `queues` queues once full, in this process: (bytes the rates
/// module counts, this process's RSS growth).
fn history(queues: usize) -> Result<(usize, u64), String> {
    use relaymq::broker::rates::{RATE_HISTORY_SAMPLES, RATE_SAMPLE_INTERVAL_MS};
    let broker = relaymq::broker::Broker::new(relaymq::broker::BrokerConfig::default());
    let vh = broker
        .vhost("/")
        .ok_or("a new broker has no default vhost")?;
    for i in 0..queues {
        let spec = relaymq::broker::QueueSpec {
            name: format!("history.{i}"),
            ..Default::default()
        };
        let _ = vh.declare_queue(&spec, 1);
    }
    let me = std::process::id();
    let before = rss::rss_bytes(me).unwrap_or(0);
    for i in 0..=RATE_HISTORY_SAMPLES as u64 {
        broker
            .rates()
            .sample(&broker, 1_000 + i * RATE_SAMPLE_INTERVAL_MS);
    }
    let after = rss::rss_bytes(me).unwrap_or(0);
    Ok((
        broker.rates().history_footprint().1,
        after.saturating_sub(before),
    ))
}

fn run(opts: &Options) -> Result<serde_json::Value, String> {
    let dir = std::env::temp_dir().join(format!("relaymq-bench-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = (|| {
        let (server, native, http) = start(opts, &dir)?;
        let declare_time = declare(native, opts.queues)?;
        let overview = measure(http, "/api/overview", opts.requests)?;
        let page = measure(http, "/api/queues?page=1&page_size=100", opts.requests)?;
        let sorted = measure(
            http,
            "/api/queues?page=1&page_size=100&sort=messages",
            opts.requests.min(20),
        )?;
        let (all_time, all_bytes, all_rss) = unpaginated(http, server.0.id())?;
        drop(server);
        let (history_bytes, history_rss) = history(opts.queues)?;
        Ok(serde_json::json!({
            "queues": opts.queues,
            "requests": opts.requests,
            "declare_s": declare_time.as_secs_f64(),
            "overview_median_ms": overview.median_ms,
            "overview_p99_ms": overview.p99_ms,
            "queues_page_median_ms": page.median_ms,
            "queues_page_p99_ms": page.p99_ms,
            "queues_page_sorted_by_messages_median_ms": sorted.median_ms,
            "queues_unpaginated_ms": all_time.as_secs_f64() * 1000.0,
            "queues_unpaginated_bytes": all_bytes,
            "queues_unpaginated_server_rss_growth_bytes": all_rss,
            "rate_history_bytes": history_bytes,
            "rate_history_rss_growth_bytes": history_rss,
        }))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Runs `relaymq-bench http-api ARGS…`; the process's exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            let _ = write!(io::stdout(), "{USAGE}");
            return 0;
        }
        Err(e) => {
            eprintln!("error: {}", e.message());
            eprintln!("usage: relaymq-bench http-api --server PATH [OPTIONS] (try --help)");
            return EXIT_USAGE;
        }
    };
    match run(&opts) {
        Ok(v) => {
            let out = if opts.json {
                v.to_string()
            } else {
                let mb = |k: &str| mib(v[k].as_u64().unwrap_or(0));
                format!(
                    "{} queues (declared in {:.1} s)\n\
                     GET /api/overview: median {:.2} ms, p99 {:.2} ms\n\
                     GET /api/queues?page=1&page_size=100: median {:.2} ms, p99 {:.2} ms (sorted by messages: median {:.2} ms)\n\
                     GET /api/queues (all): {:.0} ms, {} bytes, server RSS +{}\n\
                     rate history, full: {} counted, RSS +{}",
                    opts.queues,
                    v["declare_s"].as_f64().unwrap_or(0.0),
                    v["overview_median_ms"].as_f64().unwrap_or(0.0),
                    v["overview_p99_ms"].as_f64().unwrap_or(0.0),
                    v["queues_page_median_ms"].as_f64().unwrap_or(0.0),
                    v["queues_page_p99_ms"].as_f64().unwrap_or(0.0),
                    v["queues_page_sorted_by_messages_median_ms"].as_f64().unwrap_or(0.0),
                    v["queues_unpaginated_ms"].as_f64().unwrap_or(0.0),
                    v["queues_unpaginated_bytes"],
                    mb("queues_unpaginated_server_rss_growth_bytes"),
                    mb("rate_history_bytes"),
                    mb("rate_history_rss_growth_bytes"),
                )
            };
            let _ = writeln!(io::stdout(), "{out}");
            0
        }
        Err(e) => {
            eprintln!("error: the http-api run failed: {e}");
            EXIT_RUN_FAILED
        }
    }
}
