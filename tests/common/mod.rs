//! Shared helpers for the integration tests (`tests/it/`, `tests/heavy/`): an in-process
//! server on 127.0.0.1:0, the server binary as a child process, a raw protocol connection
//! for tests that must send exact (or broken) frames, connecting, waiting and declaring;
//! the external clients (`clients`) and RabbitMQ's recorded management API replies
//! (`golden`).

#![allow(dead_code, reason = "each test binary uses a part of the helpers")]

pub mod amqp_raw;
pub mod bench;
pub mod clients;
pub mod golden;
pub mod http;

use relaymq::native::frame::{self, Payload, FRAME_HEADER_BYTES};
use relaymq::native::{FrameAssembler, Method, PROTOCOL_HEADER};
use relaymq::server::{self, ServerConfig, ServerHandle};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A server on a free loopback port with its own temporary data directory.
pub struct TestServer {
    pub handle: ServerHandle,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::start_with(|_| {})
    }

    pub fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            amqp_listen: Some("127.0.0.1:0".parse().unwrap()),
            data_dir: dir.path().join("data"),
            workers: 2,
            // Off unless a test asks: every server would else bind 127.0.0.1:15692.
            metrics_listen: None,
            http_listen: None,
            ..ServerConfig::default()
        };
        adjust(&mut config);
        let handle = server::start(config).expect("server starts");
        TestServer { handle, dir }
    }

    /// A server with the management HTTP API on a free loopback port.
    pub fn with_api() -> TestServer {
        TestServer::start_with(|c| c.http_listen = Some("127.0.0.1:0".parse().unwrap()))
    }

    /// The management API's address (the server must have it on).
    pub fn http_addr(&self) -> SocketAddr {
        self.handle.http_addr().expect("the HTTP API is on")
    }

    /// The management API as `guest`.
    pub fn api(&self) -> http::Api {
        http::Api::guest(self.http_addr())
    }

    pub fn addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    pub fn addr_string(&self) -> String {
        self.addr().to_string()
    }
}

/// A raw native-protocol connection: exact frames in, decoded frames out.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
    asm: FrameAssembler,
    pub frame_max: u32,
    next_request: u32,
}

impl Raw {
    /// Connects without sending anything.
    pub fn connect_bare(addr: SocketAddr) -> Raw {
        Raw::from_stream(TcpStream::connect(addr).expect("connect"))
    }

    /// Wraps a connected socket (e.g. one bound to a chosen source address).
    pub fn from_stream(stream: TcpStream) -> Raw {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw {
            stream,
            buf: Vec::new(),
            asm: FrameAssembler::new(64 << 20),
            frame_max: 128 * 1024,
            next_request: 1,
        }
    }

    /// Sends the header and `connection.open` as `user`; returns the reply (`OpenOk` or
    /// `Close`).
    pub fn open_as(&mut self, user: &str, password: &str, vhost: &str) -> Method {
        self.stream.write_all(&PROTOCOL_HEADER).unwrap();
        let (_, _, reply) = self.call(
            0,
            Method::Open {
                user: user.into(),
                password: password.into(),
                vhost: vhost.into(),
                frame_max: 0,
                heartbeat_s: 0,
                channel_max: 0,
                client_name: "raw-test".into(),
            },
        );
        if let Method::OpenOk { frame_max, .. } = reply {
            self.frame_max = frame_max;
        }
        reply
    }

    /// Connects, sends the header and `connection.open` as guest, expects `open-ok`.
    pub fn connect(addr: SocketAddr) -> Raw {
        let mut raw = Raw::connect_bare(addr);
        raw.stream.write_all(&PROTOCOL_HEADER).unwrap();
        let (_, _, reply) = raw.call(
            0,
            Method::Open {
                user: "guest".into(),
                password: "guest".into(),
                vhost: "/".into(),
                frame_max: 0,
                heartbeat_s: 0,
                channel_max: 0,
                client_name: "raw-test".into(),
            },
        );
        match reply {
            Method::OpenOk { frame_max, .. } => raw.frame_max = frame_max,
            other => panic!("expected open-ok, got {other:?}"),
        }
        raw
    }

    pub fn send(&mut self, channel: u16, request_id: u32, method: &Method) {
        let mut out = Vec::new();
        frame::write_method(&mut out, channel, self.frame_max, |b| {
            method.encode(request_id, b)
        });
        self.stream.write_all(&out).expect("send");
    }

    /// Sends a request with a fresh id and returns the next frame that is not a push.
    pub fn call(&mut self, channel: u16, method: Method) -> (u16, u32, Method) {
        let rid = self.next_request;
        self.next_request += 1;
        self.send(channel, rid, &method);
        loop {
            let (ch, id, m) = self.recv().expect("reply");
            if id == rid || matches!(m, Method::Close { .. }) {
                return (ch, id, m);
            }
        }
    }

    /// The next method frame (heartbeats skipped), or `None` at EOF.
    pub fn recv(&mut self) -> Option<(u16, u32, Method)> {
        loop {
            if let Some((h, n)) = frame::check(&self.buf, 64 << 20).expect("valid frame") {
                let payload = self.buf[FRAME_HEADER_BYTES..n].to_vec();
                self.buf.drain(..n);
                if h.frame_type == frame::FrameType::Heartbeat {
                    continue;
                }
                match self.asm.push(&h, &payload).expect("assemble") {
                    None => continue,
                    Some(Payload::Whole(ch, p)) => {
                        let (rid, m) = Method::decode(p).expect("decode");
                        return Some((ch, rid, m));
                    }
                    Some(Payload::Joined(ch, p)) => {
                        let (rid, m) = Method::decode(&p).expect("decode");
                        return Some((ch, rid, m));
                    }
                    Some(Payload::Oversized { .. }) => panic!("oversized"),
                }
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                // A read with a timeout fails with EINTR after the process was stopped and
                // continued (signal(7)); nothing was lost, read again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Reads until EOF; returns every method received.
    pub fn drain_to_eof(&mut self) -> Vec<Method> {
        let mut v = Vec::new();
        while let Some((_, _, m)) = self.recv() {
            v.push(m);
        }
        v
    }
}

/// A real `relaymq-server` process (for restart and crash tests).
pub struct ServerProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub data_dir: std::path::PathBuf,
    /// The ready file's JSON (`listen`, `amqp_listen`, `metrics_listen`, ...).
    pub ready: serde_json::Value,
}

impl ServerProcess {
    /// Starts the built binary on a free loopback port with `data_dir`, waiting (≤ 20 s)
    /// for its ready file. `extra` are more flags (a repeated flag overrides); the
    /// metrics listener is off unless `extra` gives `--metrics-listen`.
    pub fn start(data_dir: &std::path::Path, extra: &[&str]) -> ServerProcess {
        ServerProcess::spawn(data_dir, extra, std::process::Stdio::inherit(), None)
    }

    /// As [`ServerProcess::start`], the server's open-files limit (soft and hard) set to
    /// `nofile` first (`ulimit -n` in a shell that then execs the server), its log going
    /// to `log` at info.
    pub fn start_with_nofile(
        data_dir: &std::path::Path,
        extra: &[&str],
        nofile: u64,
        log: &std::path::Path,
    ) -> ServerProcess {
        let file = std::fs::File::create(log).expect("log file");
        let mut flags = vec!["--log-level", "info"];
        flags.extend_from_slice(extra);
        ServerProcess::spawn(
            data_dir,
            &flags,
            std::process::Stdio::from(file),
            Some(nofile),
        )
    }

    /// As [`ServerProcess::start`] with `--log-level info`, the server's log (stderr)
    /// going to the file `log` (created or truncated), for tests that read what the
    /// server reported.
    pub fn start_logged(
        data_dir: &std::path::Path,
        extra: &[&str],
        log: &std::path::Path,
    ) -> ServerProcess {
        let file = std::fs::File::create(log).expect("log file");
        let mut flags = vec!["--log-level", "info"];
        flags.extend_from_slice(extra);
        ServerProcess::spawn(data_dir, &flags, std::process::Stdio::from(file), None)
    }

    // The child is reaped by `Drop`, `terminate` or `kill9`, which clippy cannot see.
    #[allow(
        clippy::zombie_processes,
        reason = "reaped by Drop, terminate or kill9"
    )]
    fn spawn(
        data_dir: &std::path::Path,
        extra: &[&str],
        stderr: std::process::Stdio,
        nofile: Option<u64>,
    ) -> ServerProcess {
        let ready = data_dir.with_extension(format!("ready-{}", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let server = env!("CARGO_BIN_EXE_relaymq-server");
        let mut command = match nofile {
            None => std::process::Command::new(server),
            Some(n) => {
                // `exec` keeps the pid: kill9 and terminate reach the server itself.
                let mut c = std::process::Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(server);
                c
            }
        };
        let mut child = command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--amqp-listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--log-level")
            .arg("warn")
            // Off unless `extra` turns them on (a repeated flag overrides): every server
            // would else bind the defaults 127.0.0.1:15692 and 127.0.0.1:15672.
            .arg("--metrics-listen")
            .arg("off")
            .args(["--http-listen", "off"])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("server binary starts");
        let started = std::time::Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    if let Some(addr) = v["listen"].as_str() {
                        let _ = std::fs::remove_file(&ready);
                        return ServerProcess {
                            child,
                            addr: addr.parse().expect("address in ready file"),
                            data_dir: data_dir.to_path_buf(),
                            ready: v.clone(),
                        };
                    }
                }
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not become ready within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// The management API as `guest` (the server must have been started with
    /// `--http-listen`: its address is read from the ready file).
    pub fn api(&self) -> http::Api {
        let addr = self.ready["http_listen"]
            .as_str()
            .expect("the HTTP API is on (--http-listen)");
        http::Api::guest(addr.parse().expect("address in ready file"))
    }

    /// SIGTERM, then waits (≤ 20 s); returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        wait_bounded(&mut self.child)
    }

    /// SIGKILL (a crash), then reaps the process.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `relaymq-server --check --data-dir <data_dir>` printed, and its exit code.
pub struct CheckRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for CheckRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `relaymq-server --check` on `data_dir` (bounded: the check of a test directory
/// takes well under a second).
pub fn run_check(data_dir: &std::path::Path) -> CheckRun {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-server"))
        .arg("--check")
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("relaymq-server --check runs");
    CheckRun {
        code: out.status.code().expect("exit code, not a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("server did not exit within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The byte ranges of the records of a segment file's bytes (`docs/storage.md` §2: a
/// 24-byte header whose bytes 16..20 are the big-endian payload length, the payload, a
/// 4-byte CRC), for tests that damage one on purpose. Stops at the first byte that does
/// not start a whole record.
pub fn record_spans(segment: &[u8]) -> Vec<std::ops::Range<usize>> {
    const HEADER: usize = 24;
    let mut spans = Vec::new();
    let mut at = 0;
    while segment.len() >= at + HEADER && &segment[at..at + 4] == b"RMQR" {
        let len = u32::from_be_bytes(segment[at + 16..at + 20].try_into().unwrap()) as usize;
        let end = at + HEADER + len + 4;
        if end > segment.len() {
            break;
        }
        spans.push(at..end);
        at = end;
    }
    spans
}

/// The segment files `queue_data.N` of a queue directory, by increasing `N`.
pub fn segment_files(queue_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut segments: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(queue_dir)
        .expect("queue directory")
        .map(|e| e.expect("entry").path())
        .filter_map(|p| {
            let n = p
                .file_name()?
                .to_str()?
                .strip_prefix("queue_data.")?
                .parse()
                .ok()?;
            Some((n, p))
        })
        .collect();
    segments.sort();
    segments.into_iter().map(|(_, p)| p).collect()
}

/// The directory of the durable queue `name` of vhost `/` in a stopped data directory
/// (its id read from `meta.db` by the `--check` code).
pub fn queue_dir(data_dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let report = relaymq::storage::check::check_data_dir(data_dir).expect("checkable");
    let q = report
        .queues
        .iter()
        .find(|q| q.vhost == "/" && q.name == name)
        .unwrap_or_else(|| panic!("queue {name:?} not in meta.db"));
    data_dir.join("queues").join(&q.id)
}

/// How long [`connect`] waits for the server to answer each step of the handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// A native client connection to `server` as `guest` on vhost `/`.
pub fn connect(server: &TestServer) -> relaymq::client::Connection {
    let mut options = relaymq::client::ConnectOptions::new(server.addr_string());
    options.timeout = CONNECT_TIMEOUT;
    relaymq::client::Connection::connect_with(options).expect("connect")
}

/// Runs `relaymq-cli --addr ADDR ARGS…` as `guest`; its standard output, after checking
/// it succeeded.
pub fn cli_ok(addr: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args(["--addr", addr])
        .args(args)
        .output()
        .expect("relaymq-cli runs");
    assert!(
        out.status.success(),
        "relaymq-cli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `f` every 20 ms until it returns `Some`, and returns that; panics naming `what`
/// when `limit` passes first.
pub fn eventually<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `done` every 20 ms until it is true; panics naming `what` when `limit` passes
/// first.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    eventually(limit, what, || done().then_some(()))
}

/// The first line of the log file `log` that contains every one of `parts`, waiting up to
/// `limit` for it to be written; panics with the whole log when it is not.
pub fn wait_for_line(log: &std::path::Path, parts: &[&str], limit: Duration) -> String {
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.to_string();
        }
        assert!(
            started.elapsed() < limit,
            "no log line with {parts:?} in:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Declares the queue `name` on `ch` (`durable` or not) with the given `x-…` arguments.
pub fn declare_queue(
    ch: &relaymq::client::Channel,
    name: &str,
    durable: bool,
    args: &[(&str, relaymq::types::FieldValue)],
) {
    let options = relaymq::client::QueueDeclareOptions {
        durable,
        arguments: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..relaymq::client::QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

/// Opens channel `ch` on a raw native connection and declares the transient queue
/// `queue` on it, asserting both succeed.
pub fn raw_channel_with_queue(raw: &mut Raw, ch: u16, queue: &str) {
    assert_eq!(raw.call(ch, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(
        ch,
        Method::QueueDeclare {
            queue: queue.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: relaymq::types::FieldTable::new(),
        },
    );
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
}

/// A native connection to `server` whose every call may take up to `timeout` (crash tests,
/// where a call can meet a server under load).
pub fn connect_process(server: &ServerProcess, timeout: Duration) -> relaymq::client::Connection {
    relaymq::client::Connection::connect_with(relaymq::client::ConnectOptions {
        timeout,
        ..relaymq::client::ConnectOptions::new(server.addr_string())
    })
    .expect("connect")
}

/// Ready messages of `queue` (a passive declare on `ch`); `u32::MAX` when the queue
/// does not exist (the channel is then closed by the server).
pub fn ready_messages(ch: &relaymq::client::Channel, queue: &str) -> u32 {
    let passive = relaymq::client::QueueDeclareOptions {
        passive: true,
        ..relaymq::client::QueueDeclareOptions::default()
    };
    ch.queue_declare(queue, passive)
        .map_or(u32::MAX, |ok| ok.message_count)
}

/// Takes every message of `queue` (no-ack gets), handing each to `each`; returns how many
/// it took.
pub fn drain_each(
    ch: &relaymq::client::Channel,
    queue: &str,
    mut each: impl FnMut(relaymq::client::GetMessage),
) -> usize {
    let mut taken = 0;
    while let Some(m) = ch.basic_get(queue, true).unwrap() {
        each(m);
        taken += 1;
    }
    taken
}

/// Takes every message of `queue` (no-ack gets), counting each (text) body in `seen`;
/// returns how many it took.
pub fn drain_counting(
    ch: &relaymq::client::Channel,
    queue: &str,
    seen: &mut std::collections::HashMap<String, usize>,
) -> usize {
    drain_each(ch, queue, |m| {
        *seen
            .entry(String::from_utf8(m.body).expect("text body"))
            .or_default() += 1;
    })
}

/// The next number of a small deterministic generator (SplitMix64) whose state is `seed`:
/// the seeded choices of the crash tests (kill moments, delays), repeatable from the seed.
pub fn splitmix64(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed for a randomised test: the environment variable `var` when it holds a number
/// (to repeat a run), else the clock's nanoseconds.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
}

/// Runs `tests/interop/<name>.py <amqp-port> [args]` against `server` (killed after
/// `timeout`) and returns its output, printing its stdout; panics with the output unless
/// it exits 0. The caller checked [`clients::pika_available`].
pub fn run_pika(
    server: &TestServer,
    name: &str,
    args: &[&str],
    timeout: Duration,
) -> clients::Output {
    let port = server
        .handle
        .amqp_addr()
        .expect("the test server listens for AMQP 0-9-1")
        .port();
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(format!("{name}.py"));
    let out = clients::run_bounded_for(
        timeout,
        std::process::Command::new("python3")
            // No __pycache__ in the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg("-u")
            .arg(script)
            .arg(port.to_string())
            .args(args),
    );
    assert!(out.success, "pika scenario {name} failed: {out}");
    print!("{}", out.stdout);
    out
}

/// Runs one pika scenario against a fresh server (skipped or failed without pika, as
/// [`clients::pika_available`] says); `what` names the test in the skip notice.
pub fn pika_scenario(what: &str, name: &str, timeout: Duration) {
    if !clients::pika_available(&format!("{what} pika scenario {name}")) {
        return;
    }
    let server = TestServer::start();
    run_pika(&server, name, &[], timeout);
}
