//! Issue 8 part 3: the server logs one line per event on stderr — start-up, recovery,
//! listeners, connections opened and closed with peer and user, channel and connection
//! errors with reply codes, shutdown — and never a password. Drives the real binary and
//! reads what an operator would read in the journal.

mod common;

use common::ServerProcess;
use relaymq::client::{ConnectOptions, Connection};
use std::time::{Duration, Instant};

/// A password that must never appear in the log.
const WRONG_PASSWORD: &str = "s3cret-never-logged";

/// Waits (≤ 10 s) until the log holds a line containing every one of `parts`; returns it.
fn wait_for_line(log: &std::path::Path, parts: &[&str]) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no log line with {parts:?} in:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let relaymq::protocol::Method::OpenOk { connection_id, .. } =
        raw.open_as("guest", "guest", "/")
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
