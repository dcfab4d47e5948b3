//! Issue 8 part 2 (configuration) and the systemd notifications of part 1, against the real
//! `relaymq-server` binary: precedence flags > `RELAYMQ_SERVER_*` > `--config` file >
//! defaults (shown by `--print-config` and by behaviour), errors naming the key and its
//! source, secrets hidden, SIGHUP reloading a limit and the log level (a bad file changing
//! nothing), and `READY=1` / `RELOADING=1` / `STOPPING=1` on `NOTIFY_SOCKET`.

use crate::common;

use common::Raw;
use relaymq::native::Method;
use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SERVER: &str = env!("CARGO_BIN_EXE_relaymq-server");

/// A `relaymq-server` command with no `RELAYMQ_SERVER_*` variable inherited and the
/// metrics listener off (parallel tests must not collide on 15692).
fn server_cmd() -> Command {
    let mut cmd = Command::new(SERVER);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("RELAYMQ_SERVER_") {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("NOTIFY_SOCKET");
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs a command that exits by itself (bounded: 20 s).
fn run_bounded(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server binary runs");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("relaymq-server did not exit within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `--print-config` line of `key` (starting with `key = `).
fn line_of<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find(|l| {
            l.starts_with(&format!("{key} = "))
                // A secret is printed on a comment line.
                || l.starts_with(&format!("# {key} = \"<hidden>\""))
        })
        .unwrap_or_else(|| panic!("no line for {key} in\n{printed}"))
}

/// A running server started with `--config`, its stderr in a log file.
struct Daemon {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Daemon {
    /// Starts the server on free loopback ports with `config` and `more` flags, `env`
    /// variables, and waits (≤ 20 s) for its ready file.
    fn start(dir: &Path, config: &Path, more: &[&str], env: &[(&str, &str)]) -> Daemon {
        let ready = dir.join("ready.json");
        let _ = std::fs::remove_file(&ready);
        let log = dir.join("server.log");
        let mut cmd = server_cmd();
        cmd.arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--amqp-listen", "off"])
            .args([
                "--http-listen",
                "off",
                "--metrics-listen",
                "off",
                "--ready-file",
            ])
            .arg(&ready)
            .args(more)
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("server starts");
        let mut daemon = Daemon {
            child,
            addr: "127.0.0.1:1".parse().unwrap(),
            log,
        };
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    if let Some(a) = v["listen"].as_str() {
                        daemon.addr = a.parse().expect("address");
                        return daemon;
                    }
                }
            }
            if let Some(status) = daemon.child.try_wait().expect("wait") {
                panic!(
                    "server exited during start-up ({status}): {}",
                    daemon.log_text()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "server not ready within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Waits (≤ 20 s) until the log holds `needle` at least `count` times.
    fn wait_log(&self, needle: &str, count: usize) {
        let started = Instant::now();
        while self.log_text().matches(needle).count() < count {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "log lacks {count} x [{needle}]:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and waits (≤ 20 s) for exit 0.
    fn stop(mut self) {
        self.signal("TERM");
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "exit {status}: {}", self.log_text());
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no exit within 20 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Native handshake as guest: `Ok` with the open connection, or the close reply code.
fn open(addr: SocketAddr) -> Result<Raw, u16> {
    let mut raw = Raw::connect_bare(addr);
    match raw.open_as("guest", "guest", "/") {
        Method::OpenOk { .. } => Ok(raw),
        Method::Close { reply_code, .. } => Err(reply_code),
        other => panic!("expected open-ok or close, got {other:?}"),
    }
}

#[test]
fn print_config_shows_the_source_of_each_value_and_hides_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relaymq.toml");
    std::fs::write(
        &file,
        "max-connections = 10\nmax-queues-per-vhost = 11\nheartbeat = 12\n\
         default-pass = \"file-secret\"\nsegment-bytes = \"64KiB\"\n",
    )
    .unwrap();
    let o = run_bounded(
        server_cmd()
            .arg("--config")
            .arg(&file)
            .args(["--max-connections", "30", "--print-config"])
            .env("RELAYMQ_SERVER_MAX_CONNECTIONS", "20")
            .env("RELAYMQ_SERVER_MAX_QUEUES_PER_VHOST", "21")
            .env("RELAYMQ_SERVER_DEFAULT_PASS", "env-secret"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let printed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        line_of(&printed, "max-connections"),
        "max-connections = 30  # flag --max-connections"
    );
    assert_eq!(
        line_of(&printed, "max-queues-per-vhost"),
        "max-queues-per-vhost = 21  # env RELAYMQ_SERVER_MAX_QUEUES_PER_VHOST"
    );
    assert_eq!(line_of(&printed, "heartbeat"), "heartbeat = 12  # file");
    assert_eq!(
        line_of(&printed, "segment-bytes"),
        "segment-bytes = \"64KiB\"  # file"
    );
    assert_eq!(
        line_of(&printed, "frame-max"),
        "frame-max = \"128KiB\"  # default"
    );
    assert_eq!(
        line_of(&printed, "default-pass"),
        "# default-pass = \"<hidden>\"  # env RELAYMQ_SERVER_DEFAULT_PASS (hidden: set it yourself)"
    );
    assert!(!printed.contains("secret"), "{printed}");
    assert!(printed.contains(&format!("# config file: {}", file.display())));
    // Valid TOML: pasted into a file it starts a server with the same values.
    let table: toml::Table = printed.parse().expect("--print-config is TOML");
    assert_eq!(table["max-connections"].as_integer(), Some(30));
    // Every setting printed is documented in --help as a flag.
    let help = run_bounded(server_cmd().arg("--help"));
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for key in table.keys() {
        assert!(help.contains(&format!("--{key} ")), "--help lacks --{key}");
    }
    for key in ["metrics-listen", "config", "print-config", "tls-cert"] {
        assert!(help.contains(&format!("--{key}")), "--help lacks --{key}");
    }
    assert!(
        help.contains("RELAYMQ_SERVER_") && help.contains("SIGHUP"),
        "{help}"
    );
}

#[test]
fn bad_configuration_stops_the_start_naming_the_key_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("relaymq.toml");
    let try_start = |contents: &str, env: &[(&str, &str)], flags: &[&str]| -> String {
        std::fs::write(&file, contents).unwrap();
        let mut cmd = server_cmd();
        cmd.arg("--config")
            .arg(&file)
            .args(["--listen", "127.0.0.1:0", "--amqp-listen", "off"])
            .args([
                "--http-listen",
                "off",
                "--metrics-listen",
                "off",
                "--data-dir",
            ])
            .arg(&data)
            .args(flags);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = run_bounded(&mut cmd);
        assert_eq!(o.status.code(), Some(2), "{contents} {env:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let path = file.display().to_string();
    let err = try_start("max-conections = 10\n", &[], &[]);
    assert!(
        err.contains("unknown key 'max-conections'") && err.contains(&path),
        "{err}"
    );
    let err = try_start("max-connections = \"many\"\n", &[], &[]);
    assert!(
        err.contains(&format!("{path}: max-connections: expected an integer")),
        "{err}"
    );
    let err = try_start("amqp-listen = \"everywhere\"\n", &[], &[]);
    assert!(
        err.contains(&format!("{path}: amqp-listen: 'everywhere'")),
        "{err}"
    );
    let err = try_start("max-connections = 0\n", &[], &[]);
    // Named as the file writes it, not as a flag.
    assert!(
        err.contains("max-connections: 0 is out of range")
            && !err.contains("--max-connections")
            && err.contains(&path),
        "{err}"
    );
    let err = try_start("listen = [\n", &[], &[]);
    assert!(
        err.contains("not valid TOML") && err.contains(&path),
        "{err}"
    );
    let err = try_start("", &[("RELAYMQ_SERVER_MAX_CONECTIONS", "5")], &[]);
    assert!(err.contains("RELAYMQ_SERVER_MAX_CONECTIONS"), "{err}");
    let err = try_start("", &[("RELAYMQ_SERVER_LOG_LEVEL", "loud")], &[]);
    assert!(
        err.contains("RELAYMQ_SERVER_LOG_LEVEL: must be one of"),
        "{err}"
    );
    let err = try_start("", &[], &["--workers", "0"]);
    assert!(err.contains("--workers: must be from 1 to 1024"), "{err}");
    let err = try_start("tls-cert = \"/c.pem\"\n", &[], &[]);
    assert!(err.contains("--tls-cert needs --tls-key"), "{err}");
    // A watermark of 2 is 2 bytes, not 2 GiB nor 200%: refused, showing both forms, from
    // a flag, the environment and the file alike.
    let both_forms = |err: &str| err.contains("0.4") && err.contains("1GiB");
    let err = try_start("", &[], &["--memory-high-watermark", "2"]);
    assert!(
        err.contains("--memory-high-watermark") && err.contains("2 bytes") && both_forms(&err),
        "{err}"
    );
    let err = try_start(
        "",
        &[("RELAYMQ_SERVER_MEMORY_HIGH_WATERMARK", "32MiB")],
        &[],
    );
    assert!(
        err.contains("RELAYMQ_SERVER_MEMORY_HIGH_WATERMARK") && both_forms(&err),
        "{err}"
    );
    let err = try_start("memory-high-watermark = 2\n", &[], &[]);
    assert!(err.contains(&path) && both_forms(&err), "{err}");
    let err = try_start("memory-high-watermark = 1.5\n", &[], &[]);
    assert!(err.contains(&path) && both_forms(&err), "{err}");
    let err = try_start("", &[], &["--max-message-bytes", "16XB"]);
    assert!(err.contains("--max-message-bytes: '16XB'"), "{err}");
    std::fs::remove_file(&file).unwrap();
    let o = run_bounded(
        server_cmd()
            .arg("--config")
            .arg(&file)
            .args(["--data-dir"])
            .arg(&data),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&path),
        "{}",
        text(&o)
    );
    assert!(
        !data.exists(),
        "nothing is created before the configuration is good"
    );
}

/// Sizes take RabbitMQ's units wherever a setting is a number of bytes, and a bare
/// watermark up to 1.0 is a fraction, above it bytes.
#[test]
fn sizes_take_units_and_watermarks_both_forms() {
    let print = |flags: &[&str], file: &str| -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relaymq.toml");
        std::fs::write(&path, file).unwrap();
        let o = run_bounded(
            server_cmd()
                .arg("--config")
                .arg(&path)
                .args(flags)
                .arg("--print-config"),
        );
        assert!(o.status.success(), "{flags:?}: {}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let printed = print(
        &[
            "--max-message-bytes",
            "32MiB",
            "--frame-max",
            "64KiB",
            "--memory-high-watermark",
            "1",
        ],
        "max-name-bytes = \"200\"\nmax-outbound-bytes = \"100MB\"\n",
    );
    assert_eq!(
        line_of(&printed, "max-message-bytes"),
        "max-message-bytes = \"32MiB\"  # flag --max-message-bytes"
    );
    assert_eq!(
        line_of(&printed, "frame-max"),
        "frame-max = \"64KiB\"  # flag --frame-max"
    );
    assert_eq!(
        line_of(&printed, "max-name-bytes"),
        "max-name-bytes = 200  # file"
    );
    assert_eq!(
        line_of(&printed, "max-outbound-bytes"),
        "max-outbound-bytes = \"100MB\"  # file"
    );
    assert_eq!(
        line_of(&printed, "memory-high-watermark"),
        "memory-high-watermark = 1.0  # flag --memory-high-watermark"
    );
    let printed = print(
        &[],
        "memory-high-watermark = \"2GB\"\nmax-message-bytes = 1048576\n",
    );
    assert_eq!(
        line_of(&printed, "memory-high-watermark"),
        "memory-high-watermark = \"2GB\"  # file"
    );
    assert_eq!(
        line_of(&printed, "max-message-bytes"),
        "max-message-bytes = \"1MiB\"  # file"
    );
    // RabbitMQ 4.x's default.
    let printed = print(&[], "");
    assert_eq!(
        line_of(&printed, "memory-high-watermark"),
        "memory-high-watermark = 0.6  # default"
    );
}

#[test]
fn precedence_shows_in_behaviour_and_check_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data-from-file");
    let file = dir.path().join("relaymq.toml");
    std::fs::write(
        &file,
        format!(
            "max-connections = 3\ndata-dir = {:?}\nworkers = 2\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    // The file says 3, the environment 1: the environment wins.
    let d = Daemon::start(
        dir.path(),
        &file,
        &[],
        &[("RELAYMQ_SERVER_MAX_CONNECTIONS", "1")],
    );
    let _first = open(d.addr).expect("first connection");
    assert_eq!(open(d.addr).err(), Some(530), "env max-connections 1");
    d.stop();
    assert!(data.join("meta.db").exists(), "data-dir came from the file");
    // A flag beats both: 2 connections.
    let d = Daemon::start(
        dir.path(),
        &file,
        &["--max-connections", "2"],
        &[("RELAYMQ_SERVER_MAX_CONNECTIONS", "1")],
    );
    let _first = open(d.addr).expect("first connection");
    let _second = open(d.addr).expect("second connection (flag 2 beats env 1)");
    assert_eq!(open(d.addr).err(), Some(530), "flag max-connections 2");
    d.stop();
    // --check takes data-dir from the file.
    let o = run_bounded(server_cmd().arg("--config").arg(&file).arg("--check"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn sighup_reloads_limits_and_log_level_and_a_bad_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relaymq.toml");
    std::fs::write(&file, "max-connections = 1\nlog-level = \"info\"\n").unwrap();
    let data = dir.path().join("data");
    let d = Daemon::start(
        dir.path(),
        &file,
        &["--data-dir", data.to_str().unwrap(), "--heartbeat", "30"],
        &[],
    );
    let _first = open(d.addr).expect("first connection");
    assert_eq!(open(d.addr).err(), Some(530), "max-connections 1");
    assert!(
        !d.log_text().contains("accepted from"),
        "no debug lines at info"
    );

    // Raise the limit and the log level; a restart-only change and a flag-set value too.
    std::fs::write(
        &file,
        "max-connections = 2\nlog-level = \"debug\"\nworkers = 7\nheartbeat = 5\n",
    )
    .unwrap();
    d.signal("HUP");
    d.wait_log("config reload: max-connections 1 -> 2", 1);
    let log = d.log_text();
    assert!(
        log.contains("config reload: log-level info -> debug"),
        "{log}"
    );
    assert!(
        log.contains("config reload: workers changed") && log.contains("needs a restart"),
        "{log}"
    );
    assert!(
        !log.contains("config reload: heartbeat"),
        "the flag --heartbeat still wins: {log}"
    );
    let _second = open(d.addr).expect("second connection after the reload");
    d.wait_log("accepted from", 1);
    assert_eq!(open(d.addr).err(), Some(530), "max-connections 2");

    // A bad file (one unknown key beside a higher limit and a quieter level): logged,
    // nothing changes: still 2 connections, still debug.
    std::fs::write(
        &file,
        "max-connections = 3\nlog-level = \"error\"\nmax-conections = 3\n",
    )
    .unwrap();
    d.signal("HUP");
    d.wait_log("config reload failed, nothing changed", 1);
    assert!(d.log_text().contains("max-conections"), "{}", d.log_text());
    let before = d.log_text().matches("accepted from").count();
    assert_eq!(open(d.addr).err(), Some(530), "the limit is still 2");
    d.wait_log("accepted from", before + 1);
    std::fs::write(&file, "max-connections = [\n").unwrap();
    d.signal("HUP");
    d.wait_log("config reload failed, nothing changed", 2);
    assert!(d.log_text().contains("not valid TOML"), "{}", d.log_text());

    // Quieter, then louder again: the reload that makes the log more verbose is logged
    // too (its lines are written at the more verbose of the two levels).
    std::fs::write(&file, "max-connections = 2\nlog-level = \"error\"\n").unwrap();
    d.signal("HUP");
    d.wait_log("config reload: log-level debug -> error", 1);
    std::fs::write(&file, "max-connections = 2\nlog-level = \"info\"\n").unwrap();
    d.signal("HUP");
    d.wait_log("config reload: log-level error -> info", 1);
    d.stop();
}

/// Reads datagrams from `sock` until one contains `needle` (≤ 20 s); returns it.
fn expect_notify(sock: &UnixDatagram, needle: &str) -> String {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no notification with {needle} within 20 s"
        );
        match sock.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                if msg.lines().any(|l| l == needle) {
                    return msg;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
}

#[test]
fn systemd_is_told_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let file = dir.path().join("relaymq.toml");
    std::fs::write(&file, "max-connections = 5\n").unwrap();
    let ready = dir.path().join("ready.json");
    let mut child = server_cmd()
        .arg("--config")
        .arg(&file)
        .args(["--listen", "127.0.0.1:0", "--amqp-listen", "off"])
        .args([
            "--metrics-listen",
            "off",
            "--http-listen",
            "off",
            "--log-level",
            "warn",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--ready-file")
        .arg(&ready)
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(Stdio::piped())
        .spawn()
        .expect("server starts");
    let guard = KillOnDrop(&mut child);
    let msg = expect_notify(&sock, "READY=1");
    assert!(msg.contains("STATUS="), "{msg}");
    // READY=1 comes after the listeners are bound: the native one answers now.
    let addr: SocketAddr = {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&ready).expect("ready file")).unwrap();
        v["listen"].as_str().unwrap().parse().unwrap()
    };
    drop(open(addr).expect("the server answers once READY=1 is sent"));
    let pid = guard.0.id().to_string();
    let kill = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success())
    };
    kill("-HUP");
    let msg = expect_notify(&sock, "RELOADING=1");
    assert!(msg.contains("MONOTONIC_USEC="), "{msg}");
    expect_notify(&sock, "READY=1");
    kill("-TERM");
    expect_notify(&sock, "STOPPING=1");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = guard.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = guard.0.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "{status}: {err}");
}

/// Kills and reaps the child if the test fails half-way.
struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
