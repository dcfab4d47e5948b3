//! `relaymq-bench` against an in-process server: tiny runs of several configurations
//! with `--json` deliver exactly what the configuration implies and leave no queue
//! behind; usage errors exit 2. Speed is never asserted.

use crate::common;

use common::bench::{assert_queues_gone, bench, count, json_of, BENCH};
use common::TestServer;
use std::process::Command;

/// Runs a configuration with `--json` and returns the parsed object.
fn run_json(server: &TestServer, args: &[&str]) -> serde_json::Value {
    let uri = format!("relaymq://{}", server.addr_string());
    let mut all = vec!["--uri", uri.as_str()];
    all.extend_from_slice(args);
    let v = json_of(&all);
    for key in [
        "published_per_s",
        "confirmed_per_s",
        "delivered_per_s",
        "server_rss_bytes",
        "messages_published",
        "messages_delivered",
        "seconds",
    ] {
        assert!(v.get(key).is_some(), "{args:?}: key {key} in {v}");
    }
    for key in ["p50", "p99", "p999", "max"] {
        assert!(
            v["latency_us"][key].is_number(),
            "{args:?}: latency_us.{key}"
        );
    }
    v
}

/// Runs `args`, checks the published and delivered counts and that the queues are gone.
fn check(server: &TestServer, args: &[&str], published: u64, delivered: u64, queues: usize) {
    let v = run_json(server, args);
    assert_eq!(count(&v, "messages_published"), published, "{args:?}: {v}");
    assert_eq!(count(&v, "messages_delivered"), delivered, "{args:?}: {v}");
    assert_queues_gone(server, queues);
}

#[test]
fn default_configuration() {
    let server = TestServer::start();
    let v = run_json(&server, &["--count", "3000"]);
    assert_eq!(count(&v, "messages_delivered"), 3000);
    // The server runs in this test's process, which the tool finds by its port.
    assert!(count(&v, "server_rss_bytes") > 0, "{v}");
    assert_queues_gone(&server, 1);
}

#[test]
fn persistent_with_confirms() {
    let server = TestServer::start();
    let v = run_json(
        &server,
        &["--count", "2000", "--persistent", "--confirm", "64"],
    );
    assert_eq!(count(&v, "messages_delivered"), 2000);
    assert_eq!(count(&v, "messages_confirmed"), 2000);
    assert_queues_gone(&server, 1);
}

#[test]
fn multiple_acks_with_prefetch_and_several_clients() {
    let server = TestServer::start();
    check(
        &server,
        &["--count", "3000", "--multi-ack", "10", "--prefetch", "100"],
        3000,
        3000,
        1,
    );
    check(
        &server,
        &[
            "--count",
            "3001",
            "--producers",
            "2",
            "--consumers",
            "4",
            "--queues",
            "2",
            "--size",
            "100",
        ],
        3001,
        3001,
        2,
    );
}

#[test]
fn no_ack() {
    let server = TestServer::start();
    check(&server, &["--count", "3000", "--no-ack"], 3000, 3000, 1);
}

#[test]
fn fanout_delivers_to_every_queue() {
    let server = TestServer::start();
    check(
        &server,
        &[
            "--count",
            "2000",
            "--exchange-type",
            "fanout",
            "--queues",
            "3",
            "--consumers",
            "3",
        ],
        2000,
        6000,
        3,
    );
}

#[test]
fn topic_and_headers_with_dummy_bindings() {
    let server = TestServer::start();
    check(
        &server,
        &[
            "--count",
            "2000",
            "--exchange-type",
            "topic",
            "--bindings",
            "1000",
            "--queues",
            "2",
            "--consumers",
            "2",
        ],
        2000,
        2000,
        2,
    );
    check(
        &server,
        &[
            "--count",
            "1000",
            "--exchange-type",
            "headers",
            "--bindings",
            "10",
            "--queues",
            "2",
            "--consumers",
            "2",
        ],
        1000,
        1000,
        2,
    );
    check(
        &server,
        &["--count", "1000", "--exchange-type", "direct"],
        1000,
        1000,
        1,
    );
}

#[test]
fn paced_rate() {
    let server = TestServer::start();
    check(&server, &["--rate", "2000", "--count", "500"], 500, 500, 1);
}

#[test]
fn duration_run_publishes_and_delivers_the_same() {
    let server = TestServer::start();
    let v = run_json(&server, &["--duration", "1", "--rate", "1000"]);
    let published = count(&v, "messages_published");
    assert!(published > 0);
    assert_eq!(count(&v, "messages_delivered"), published);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["--producers", "0"][..],
        &["--size", "8"],
        &["--duration", "1", "--count", "5"],
        &["--exchange-type", "nope"],
        &["--bindings", "5"],
        &["--no-ack", "--multi-ack", "5"],
        &["--frobnicate"],
        &["--uri", "localhost:5673"],
        &["--client-lib", "--uri", "amqp://127.0.0.1:5672"],
        &[
            "idle",
            "--uri",
            "amqp://127.0.0.1:5672",
            "--connections",
            "3",
        ],
        &[
            "recovery", "--server", "x", "--count", "5", "--fsync", "bogus",
        ],
        &[
            "recovery",
            "--server",
            "x",
            "--count",
            "5",
            "--fsync",
            "interval:0",
        ],
    ] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

#[test]
fn an_unreachable_server_fails_the_run() {
    // A port nothing listens on: bind, take the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let uri = format!("relaymq://127.0.0.1:{port}");
    let out = bench(&["--uri", &uri, "--count", "10"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect"), "{err}");
}

/// The bench's own native connection is the default; `--client-lib` runs the same
/// workloads through the `relaymq::client` library (confirms, manual acks, no-ack).
#[test]
fn the_client_library_runs_the_same_workloads() {
    let server = TestServer::start();
    check(
        &server,
        &["--count", "2000", "--client-lib", "--no-ack"],
        2000,
        2000,
        1,
    );
    let v = run_json(
        &server,
        &[
            "--count",
            "2000",
            "--client-lib",
            "--persistent",
            "--confirm",
            "64",
            "--multi-ack",
            "10",
        ],
    );
    assert_eq!(count(&v, "messages_delivered"), 2000, "{v}");
    assert_eq!(count(&v, "messages_confirmed"), 2000, "{v}");
    assert_queues_gone(&server, 1);
}

/// Bodies larger than a frame reach the lean consumer joined, with their stamp intact.
#[test]
fn bodies_larger_than_a_frame() {
    let server = TestServer::start();
    check(
        &server,
        &["--count", "50", "--size", "300000", "--confirm", "8"],
        50,
        50,
        1,
    );
}

/// A publish batch is capped in bytes, not only in messages: 1,000 bodies of 20 KB would
/// be a 20 MB payload, over the server's 16 MiB message limit.
#[test]
fn bodies_larger_than_the_message_limit_over_a_batch() {
    let server = TestServer::start();
    check(
        &server,
        &["--count", "2000", "--size", "20000"],
        2000,
        2000,
        1,
    );
}

/// Ctrl-C (SIGINT) stops the run, deletes the queues and still prints what was measured;
/// the run fails (exit 1) saying why.
#[test]
fn an_interrupted_run_cleans_up_and_reports() {
    let server = TestServer::start();
    let child = Command::new(BENCH)
        .args(["--uri", &format!("relaymq://{}", server.addr_string())])
        .args(["--duration", "60", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until the queue exists and messages flow.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let conn = relaymq::client::Connection::connect(&server.addr_string()).unwrap();
        let ch = conn.open_channel().unwrap();
        let passive = relaymq::client::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        if ch.queue_declare("relaymq-bench.q.0", passive).is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON summary");
    assert!(count(&v, "messages_published") > 0, "{v}");
    assert_queues_gone(&server, 1);
}
