//! Issue 8 part 3: the server logs one line per event on stderr — start-up, recovery,
//! listeners, connections opened and closed with peer and user, channel and connection
//! errors with reply codes, shutdown — and never a password. Drives the real binary and
//! reads what an operator would read in the journal.

use crate::common;

use common::ServerProcess;
use relaymq::client::{ConnectOptions, Connection, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A password that must never appear in the log.
const WRONG_PASSWORD: &str = "s3cret-never-logged";

/// Waits (≤ 10 s) until the log holds a line containing every one of `parts`; returns it.
fn wait_for_line(log: &std::path::Path, parts: &[&str]) -> String {
    common::wait_for_line(log, parts, Duration::from_secs(10))
}

#[test]
fn the_log_tells_an_operator_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = ServerProcess::start_logged(&dir.path().join("data"), &[], &log);

    // Start-up: version, pid, data directory; recovery report; each listener.
    let pid = server.child.id().to_string();
    wait_for_line(
        &log,
        &["INFO", "starting", &format!("pid {pid}"), "fsync always"],
    );
    wait_for_line(&log, &["INFO", "recovered 1 vhosts"]);
    wait_for_line(
        &log,
        &[
            "INFO",
            "listening on",
            &server.addr_string(),
            "native protocol",
        ],
    );

    // A client that opens, hits a channel error and closes properly.
    let conn = Connection::connect(&server.addr_string()).expect("guest connects");
    let ch = conn.open_channel().expect("channel");
    let err = ch.basic_get("no-such-queue", true).unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
    let opened = wait_for_line(&log, &["opened", "user 'guest'", "vhost '/'"]);
    let id = opened
        .split("connection ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("connection id in the open line")
        .to_string();
    let channel_error = wait_for_line(
        &log,
        &[
            "WARN",
            &format!("connection {id} "),
            "user 'guest'",
            "channel 1",
            "NOT_FOUND (404)",
            "no-such-queue",
        ],
    );
    assert!(channel_error.contains("queue.get") || channel_error.contains("basic.get"));
    conn.close().expect("close");
    wait_for_line(
        &log,
        &[
            "INFO",
            &format!("connection {id} "),
            "user 'guest'",
            "closed by the client",
        ],
    );

    // A client that drops its socket without connection.close.
    let mut raw = common::Raw::connect_bare(server.addr);
    let relaymq::native::Method::OpenOk { connection_id, .. } = raw.open_as("guest", "guest", "/")
    else {
        panic!("guest could not open")
    };
    drop(raw);
    wait_for_line(
        &log,
        &[
            "WARN",
            &format!("connection {connection_id} "),
            "user 'guest'",
            "without connection.close",
        ],
    );

    // A refused login: the reply code and the user, never the password.
    let refused = Connection::connect_with(ConnectOptions {
        password: WRONG_PASSWORD.into(),
        ..ConnectOptions::new(server.addr_string())
    });
    assert!(refused.is_err());
    wait_for_line(
        &log,
        &[
            "WARN",
            "closing connection",
            "ACCESS_REFUSED (403)",
            "'guest'",
        ],
    );

    // Shutdown.
    let status = server.terminate();
    assert!(status.success(), "{status}");
    wait_for_line(&log, &["INFO", "shutdown complete"]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains(WRONG_PASSWORD),
        "a password was logged:\n{text}"
    );
}

/// The log lines holding every one of `parts`.
fn lines_with<'a>(text: &'a str, parts: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .collect()
}

/// The connection id of a line `… connection 11 (…`.
fn connection_id(line: &str) -> String {
    line.split("connection ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("connection id in the line")
        .to_string()
}

/// Connects to `addr`, sends `bytes` and reads until the server closes (≤ 20 s); returns
/// the local port, which the server's lines name as the peer.
fn send_and_read_to_eof(addr: SocketAddr, bytes: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let port = s.local_addr().unwrap().port();
    s.write_all(bytes).expect("send");
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    port
}

fn persistent() -> BasicProperties {
    BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    }
}

/// Declares durable queue `name` and publishes `n` persistent messages to it, confirmed.
fn fill(conn: &Connection, name: &str, n: usize) {
    let ch = conn.open_channel().expect("channel");
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, durable).expect("declare");
    ch.confirm_select().expect("confirms");
    for i in 0..n {
        ch.basic_publish("", name, false, &persistent(), format!("m{i}").as_bytes())
            .expect("publish");
    }
    assert!(ch
        .wait_for_confirms(Duration::from_secs(20))
        .expect("confirms"));
}

#[test]
fn connections_the_server_closes_are_not_logged_as_closed_by_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = ServerProcess::start_logged(
        &dir.path().join("data"),
        &["--handshake-timeout-ms", "250"],
        &log,
    );
    let amqp: SocketAddr = server.ready["amqp_listen"]
        .as_str()
        .expect("AMQP listener")
        .parse()
        .unwrap();

    // Bad protocol headers on either port: the server answers with its own and closes.
    let mut server_closed = Vec::new();
    let headers: [(SocketAddr, &[u8]); 5] = [
        (server.addr, b"GET / HTTP/1.0\r\n\r\n"),
        (amqp, b"GET / HTTP/1.0\r\n\r\n"),
        (server.addr, b"AMQP\x01\x01\x00\x0a"),
        (amqp, b"AMQP\x01\x01\x00\x0a"),
        (
            amqp,
            &[0x9c, 0x3e, 0x01, 0xf7, 0x55, 0x00, 0xa2, 0x17, 0x68],
        ),
    ];
    for (addr, bytes) in headers {
        let port = send_and_read_to_eof(addr, bytes);
        let line = wait_for_line(
            &log,
            &[
                "WARN",
                &format!("(127.0.0.1:{port})"),
                "protocol header",
                "and closing",
            ],
        );
        server_closed.push(connection_id(&line));
    }

    // A client that sends nothing: the server closes it at the handshake timeout.
    let port = send_and_read_to_eof(server.addr, b"");
    let line = wait_for_line(
        &log,
        &[
            "WARN",
            "closing connection",
            &format!("(127.0.0.1:{port})"),
            "handshake not completed within 250 ms",
        ],
    );
    server_closed.push(connection_id(&line));

    // A port probe that hangs up first is still the client's close.
    let probe = TcpStream::connect(server.addr).unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    wait_for_line(
        &log,
        &[
            "INFO",
            &format!("(127.0.0.1:{port})"),
            "closed by the client during the handshake",
        ],
    );

    // After a graceful shutdown every event has been handled: none of the server's own
    // closes was logged as the client's.
    assert!(server.terminate().success());
    let text = std::fs::read_to_string(&log).unwrap();
    for id in &server_closed {
        let wrong = lines_with(
            &text,
            &[&format!("connection {id} ("), "closed by the client"],
        );
        assert!(wrong.is_empty(), "connection {id}: {wrong:?}\n{text}");
    }
}

#[test]
fn shutdown_complete_is_the_last_line_and_the_ready_file_is_gone_by_then() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let ready = dir.path().join("ready.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-server"))
        .args(["--listen", "127.0.0.1:0", "--amqp-listen", "off"])
        .args([
            "--metrics-listen",
            "off",
            "--http-listen",
            "off",
            "--log-level",
            "info",
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--ready-file")
        .arg(&ready)
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("server starts");
    let started = Instant::now();
    let addr = loop {
        let text = std::fs::read_to_string(&ready).unwrap_or_default();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            if let Some(a) = v["listen"].as_str() {
                break a.to_string();
            }
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("no ready file within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let conn = Connection::connect(&addr).expect("connect");
    fill(&conn, "kept", 3);
    conn.close().unwrap();

    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    wait_for_line(&log, &["INFO", "shutdown complete"]);
    // Removed before the last line is written (a graceful shutdown, unlike a crash).
    assert!(!ready.exists(), "the ready file outlived the shutdown");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("server did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");

    // The I/O thread's part does not claim completion; the last line does.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let io_done = lines
        .iter()
        .position(|l| l.contains("shutdown: every connection closed"))
        .unwrap_or_else(|| panic!("no I/O-thread shutdown line:\n{text}"));
    let complete = lines_with(&text, &["shutdown complete"]);
    assert_eq!(complete.len(), 1, "{text}");
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("INFO") && l.contains("shutdown complete")),
        "shutdown complete is not the last line:\n{text}"
    );
    assert!(io_done < lines.len() - 1, "{text}");
}

#[test]
fn recovery_is_one_info_line_not_one_per_queue() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first_log = dir.path().join("first.log");
    let server = ServerProcess::start_logged(&data, &[], &first_log);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    fill(&conn, "rq.a", 2);
    fill(&conn, "rq.b", 3);
    fill(&conn, "rq.empty", 0);
    conn.close().unwrap();
    assert!(server.terminate().success());

    let log = dir.path().join("second.log");
    let server = ServerProcess::start_logged(&data, &[], &log);
    let summary = wait_for_line(&log, &["INFO", "recovery done in", " ms: "]);
    assert!(
        summary.ends_with(": 5 persistent messages in 2 of 3 durable queues"),
        "{summary}"
    );
    assert!(server.terminate().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines_with(&text, &["INFO", "queue 'rq.", "persistent messages"]).is_empty(),
        "per-queue recovery lines at info:\n{text}"
    );
}

#[test]
fn admin_changes_are_logged_once_naming_the_administrator() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = ServerProcess::start_logged(&dir.path().join("data"), &[], &log);
    let admin = Connection::connect(&server.addr_string()).unwrap();

    admin.declare_vhost("tenant").unwrap();
    wait_for_line(&log, &["INFO", "vhost 'tenant' created by 'guest'"]);
    wait_for_line(
        &log,
        &[
            "INFO",
            "permissions of user 'guest' in vhost 'tenant' set by 'guest'",
            "creator",
        ],
    );
    let tenant = Connection::connect_with(ConnectOptions {
        vhost: "tenant".into(),
        ..ConnectOptions::new(server.addr_string())
    })
    .unwrap();
    fill(&tenant, "work", 2);
    admin.delete_vhost("tenant").unwrap();
    wait_for_line(
        &log,
        &[
            "INFO",
            "vhost 'tenant' deleted by 'guest'",
            "1 queues with 2 messages",
            "1 connections closed",
        ],
    );
    drop(tenant);

    admin
        .add_user("bob", "bob-password", &["monitoring"])
        .unwrap();
    admin
        .set_permissions("bob", "/", "^bob\\.", ".*", ".*")
        .unwrap();
    admin.set_user_tags("bob", &["management"]).unwrap();
    admin
        .set_policy("/", "ttl", "^t\\.", r#"{"message-ttl": 1000}"#, 0, "queues")
        .unwrap();
    admin.clear_policy("/", "ttl").unwrap();
    admin
        .set_memory_high_watermark(relaymq::client::MemoryWatermark::Relative(0.9))
        .unwrap();
    admin.set_disk_free_limit(1024 * 1024).unwrap();
    admin.delete_user("bob").unwrap();
    wait_for_line(&log, &["INFO", "user 'bob' deleted by 'guest'"]);
    admin.close().unwrap();
    assert!(server.terminate().success());

    let text = std::fs::read_to_string(&log).unwrap();
    let once = |what: &str, by: &str| {
        let lines = lines_with(&text, &[what]);
        assert_eq!(lines.len(), 1, "{what}: {lines:?}\n{text}");
        assert!(lines[0].contains(by), "{}", lines[0]);
    };
    once("user 'bob' created", "by 'guest' (tags [monitoring])");
    once(
        "permissions of user 'bob' in vhost '/' set",
        "by 'guest' (configure '^bob\\.', write '.*', read '.*')",
    );
    once("tags of user 'bob' set to [management]", "by 'guest'");
    once("policy 'ttl' in vhost '/' set", "by 'guest'");
    once("policy 'ttl' in vhost '/' cleared", "by 'guest'");
    once("user 'bob' deleted", "by 'guest'");
    once("memory high watermark set to 0.9", "by 'guest'");
    once("disk free limit set to 1MiB", "by 'guest'");
    assert!(!text.contains("bob-password"), "a password was logged");
}

#[test]
fn a_stale_ready_file_is_removed_before_recovery() {
    // A ready file left by a crashed run: a script waiting for it must not proceed while
    // the next run recovers. This run recovers, then cannot bind its listener (the port
    // is held here) and exits without writing a ready file of its own, so the stale one
    // is either still there (removed too late or never) or gone (removed at start-up).
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    fill(&conn, "sr.q", 2);
    conn.close().unwrap();
    server.kill9();

    let ready = dir.path().join("ready.json");
    let stale = r#"{"listen": "127.0.0.1:1"}"#;
    std::fs::write(&ready, stale).unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().to_string();
    let log = dir.path().join("server.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-server"))
        .args(["--listen", &taken, "--amqp-listen", "off"])
        .args([
            "--metrics-listen",
            "off",
            "--http-listen",
            "off",
            "--log-level",
            "info",
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--ready-file")
        .arg(&ready)
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("server starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the server neither failed nor exited within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(held);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(text.contains("cannot listen on"), "{text}");
    assert!(
        !ready.exists(),
        "the stale ready file outlived the start-up:\n{text}"
    );
    // Removed before the queues were recovered, not after.
    let lines: Vec<&str> = text.lines().collect();
    let removed = lines
        .iter()
        .position(|l| l.contains("INFO") && l.contains("removed the ready file"))
        .unwrap_or_else(|| panic!("no line about the stale ready file:\n{text}"));
    let recovered = lines
        .iter()
        .position(|l| l.contains("recovery done in") && l.contains(": 2 persistent messages"))
        .unwrap_or_else(|| panic!("no recovery summary:\n{text}"));
    assert!(removed < recovered, "{text}");
}
