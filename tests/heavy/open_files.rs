//! The file-descriptor budget (docs/operations.md, "Open files"): with `ulimit -n 256`,
//! 2,000 durable queues, each holding a persistent message, are declared, published to,
//! consumed from, survive a kill -9 and a restart, while other clients keep connecting;
//! the process never holds more descriptors than its limit, and `status` shows the split.
//! Before the budget each durable queue held two files open for its whole life, and the
//! 120th queue (at 256 descriptors) failed with 541 "Too many open files", closing the
//! declaring connection.

use crate::common;

use common::ServerProcess;
use relaymq::client::{Connection, QueueDeclareOptions};
use relaymq::native::PublishMessage;
use relaymq::types::{BasicProperties, FieldValue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The open-files limit the server runs under, in file descriptors.
const NOFILE: u64 = 256;

/// Durable queues declared, each with one persistent message.
const QUEUES: usize = 2_000;

/// How long the publisher's confirms may take, on a loaded machine.
const CONFIRM_DEADLINE: Duration = Duration::from_secs(120);

fn queue(i: usize) -> String {
    format!("fd-q.{i}")
}

fn status_i64(conn: &Connection, key: &str) -> i64 {
    match conn.status().expect("status").get(key) {
        Some(FieldValue::I64(v)) => *v,
        other => panic!("status {key}: {other:?}"),
    }
}

/// Clients that keep connecting while the test runs: each opens a connection and a
/// channel, asks for `status`, and closes. Every one must succeed.
struct Connector {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, Vec<String>)>,
}

impl Connector {
    fn start(addr: String) -> Connector {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let (mut ok, mut errors) = (0, Vec::new());
            while !flag.load(Ordering::Relaxed) {
                let attempt = Connection::connect(&addr).and_then(|c| {
                    let ch = c.open_channel()?;
                    c.status()?;
                    ch.close()?;
                    c.close()
                });
                match attempt {
                    Ok(()) => ok += 1,
                    Err(e) => errors.push(e.to_string()),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (ok, errors)
        });
        Connector { stop, thread }
    }

    /// Stops and returns how many connected (all of them, or the test fails).
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let (ok, errors) = self.thread.join().expect("connector thread");
        assert!(errors.is_empty(), "connections failed: {errors:?}");
        assert!(ok > 0, "no connection was tried");
        ok
    }
}

#[test]
fn two_thousand_durable_queues_run_and_recover_under_ulimit_256() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let server = ServerProcess::start_with_nofile(&data, &[], NOFILE, &log);
    let conn = Connection::connect(&server.addr_string()).expect("connect");
    assert_eq!(status_i64(&conn, "fd_total"), NOFILE as i64);
    let sockets_total = status_i64(&conn, "sockets_total");
    let store_total = status_i64(&conn, "store_files_total");
    assert!(
        sockets_total > 100 && store_total >= 16,
        "{sockets_total} {store_total}"
    );

    let connector = Connector::start(server.addr_string());
    let ch = conn.open_channel().unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    for i in 0..QUEUES {
        ch.queue_declare(&queue(i), durable.clone())
            .unwrap_or_else(|e| panic!("declare {}: {e}", queue(i)));
    }
    let persistent = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    ch.confirm_select().unwrap();
    let batch: Vec<PublishMessage> = (0..QUEUES)
        .map(|i| PublishMessage {
            exchange: String::new(),
            routing_key: queue(i),
            mandatory: true,
            properties: persistent.clone(),
            body: format!("message of {}", queue(i)).into_bytes(),
        })
        .collect();
    ch.publish_batch(&batch).unwrap();
    assert!(
        ch.wait_for_confirms(CONFIRM_DEADLINE).unwrap(),
        "a persistent publish was nacked"
    );
    assert!(status_i64(&conn, "fd_used") <= NOFILE as i64);
    assert!(status_i64(&conn, "store_files_used") <= store_total);

    // Consumed from: the even queues' messages are taken and acked.
    for i in (0..QUEUES).step_by(2) {
        let m = ch
            .basic_get(&queue(i), false)
            .unwrap()
            .unwrap_or_else(|| panic!("{} is empty", queue(i)));
        assert_eq!(m.body, format!("message of {}", queue(i)).into_bytes());
        ch.basic_ack(m.delivery_tag, false).unwrap();
    }
    // The acks are processed (a request after them on the same connection). Their
    // settle entries are written lazily, so kill -9 may bring some of those messages
    // back, redelivered (at-least-once, as RabbitMQ): checked below.
    assert_eq!(
        status_i64(&conn, "messages"),
        (QUEUES / 2) as i64,
        "acks processed"
    );
    let connected = connector.finish();
    assert!(connected > 1, "{connected}");
    drop(ch);
    drop(conn);
    server.kill9();

    // Restarted under the same limit: every queue is back, every odd one with its
    // message (confirmed, never consumed: none may be lost), an even one empty or with
    // its consumed message back, redelivered; while clients connect.
    let first_log = log.with_extension("first.log");
    std::fs::rename(&log, &first_log).unwrap();
    let server = ServerProcess::start_with_nofile(&data, &[], NOFILE, &log);
    let connector = Connector::start(server.addr_string());
    let conn = Connection::connect(&server.addr_string()).expect("connect");
    let ch = conn.open_channel().unwrap();
    let problems = || {
        let text = std::fs::read_to_string(&first_log).unwrap_or_default()
            + &std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(status_i64(&conn, "queues"), QUEUES as i64, "{}", problems());
    let held = status_i64(&conn, "messages");
    assert!(
        (QUEUES / 2) as i64 <= held && held <= QUEUES as i64,
        "{held} messages: {}",
        problems()
    );
    let mut came_back = 0;
    for i in 0..QUEUES {
        let m = ch.basic_get(&queue(i), false).unwrap();
        match (i % 2, m) {
            (0, None) => {}
            (parity, Some(m)) => {
                assert_eq!(m.body, format!("message of {}", queue(i)).into_bytes());
                if parity == 0 {
                    assert!(m.redelivered, "{} came back not redelivered", queue(i));
                    came_back += 1;
                }
                ch.basic_ack(m.delivery_tag, false).unwrap();
            }
            (_, None) => panic!("{}: a confirmed message was lost", queue(i)),
        }
    }
    assert_eq!(held, (QUEUES / 2 + came_back) as i64);
    assert!(status_i64(&conn, "fd_used") <= NOFILE as i64);
    connector.finish();
    assert_eq!(status_i64(&conn, "messages"), 0);
    let log_text = std::fs::read_to_string(&first_log).unwrap();
    assert!(
        log_text.contains("file descriptors: limit 256"),
        "the split is logged at start"
    );
    assert!(!log_text.contains("Too many open files"), "{log_text}");
}

/// Client sockets have their part of the limit: under `ulimit -n 128` the split leaves 53
/// of them, 47 for connections and 6 for handshakes (docs/operations.md, "Open files").
/// The 48th connection completes its handshake and is refused with 530 and RabbitMQ's
/// text; sockets past the 53 are closed at accept (logged); the open connections keep
/// working, and a connection closed makes room for a new one. `status` shows the part
/// and its use.
#[test]
fn connections_past_the_sockets_part_are_refused_and_the_others_go_on() {
    const LOW_NOFILE: u64 = 128;
    const SOCKETS: usize = 53;
    const CONNECTIONS: usize = 47;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = ServerProcess::start_with_nofile(&dir.path().join("data"), &[], LOW_NOFILE, &log);
    let mut open: Vec<Connection> = (0..CONNECTIONS)
        .map(|i| {
            Connection::connect(&server.addr_string())
                .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    assert_eq!(status_i64(&open[0], "sockets_total"), SOCKETS as i64);
    assert_eq!(status_i64(&open[0], "sockets_used"), CONNECTIONS as i64);
    let e = Connection::connect(&server.addr_string()).expect_err("one connection too many");
    assert_eq!(e.reply_code(), Some(530), "{e}");
    assert!(
        e.to_string().contains("connection limit (47) is reached"),
        "{e}"
    );
    // Sockets that never finish their handshake: 6 fit beside the 47 connections; the
    // next is closed at once.
    let raw: Vec<std::net::TcpStream> = (0..SOCKETS - CONNECTIONS)
        .map(|_| std::net::TcpStream::connect(server.addr).unwrap())
        .collect();
    let mut extra = std::net::TcpStream::connect(server.addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut extra, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the socket past the part was closed at accept");
    for (i, c) in open.iter().enumerate() {
        let ch = c
            .open_channel()
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        ch.queue_declare("still-here", QueueDeclareOptions::default())
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
    }
    drop(raw);
    open.pop().unwrap().close().unwrap();
    let again = Connection::connect(&server.addr_string()).expect("room again");
    assert!(again.status().is_ok());
    // The refusal at accept is logged within a second (the I/O thread's tick).
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("closed 1 connections at accept") {
            assert!(
                text.contains("all 53 client sockets the open-files limit leaves are in use"),
                "{text}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "refusal not logged: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
