//! The scenarios of issue 6 that `relaymq-bench` runs over the native protocol, each at a
//! tiny size: 1→1→1 no-ack, persistent with 4 confirming producers, paced, fanout to 10
//! queues, topic with many bindings, publish-only (queued), idle connections, recovery
//! after kill -9, delayed delivery (`delayed`), the null relay, and `scripts/bench.sh
//! --quick` for one scenario. Every
//! test asserts behaviour (exit code, JSON fields, counts that must agree), never timing.

use crate::common;

use common::bench::{bench, count, json_of, BENCH};
use common::TestServer;
use std::process::Command;

const SERVER: &str = env!("CARGO_BIN_EXE_relaymq-server");

/// Runs a message scenario against `server` and returns its JSON summary.
fn run(server: &TestServer, args: &[&str]) -> serde_json::Value {
    let uri = format!("relaymq://{}", server.addr_string());
    let mut all = vec!["--uri", uri.as_str()];
    all.extend_from_slice(args);
    json_of(&all)
}

/// Published, confirmed and delivered counts.
fn counts(v: &serde_json::Value) -> (u64, u64, u64) {
    (
        count(v, "messages_published"),
        count(v, "messages_confirmed"),
        count(v, "messages_delivered"),
    )
}

#[test]
fn one_producer_one_queue_one_consumer_no_ack() {
    let server = TestServer::start();
    let v = run(&server, &["--no-ack", "--count", "3000"]);
    assert_eq!(counts(&v), (3000, 0, 3000), "{v}");
    assert!(v["latency_us"]["p99"].is_number(), "{v}");
}

#[test]
fn persistent_four_producers_with_256_confirms_in_flight() {
    let server = TestServer::start();
    let v = run(
        &server,
        &[
            "--persistent",
            "--producers",
            "4",
            "--confirm",
            "256",
            "--count",
            "4000",
        ],
    );
    assert_eq!(counts(&v), (4000, 4000, 4000), "{v}");
}

#[test]
fn fixed_rate() {
    let server = TestServer::start();
    let v = run(&server, &["--rate", "2000", "--count", "2000"]);
    assert_eq!(counts(&v), (2000, 0, 2000), "{v}");
}

#[test]
fn fanout_to_ten_queues_with_ten_consumers() {
    let server = TestServer::start();
    let v = run(
        &server,
        &[
            "--exchange-type",
            "fanout",
            "--queues",
            "10",
            "--consumers",
            "10",
            "--count",
            "2000",
        ],
    );
    assert_eq!(
        counts(&v),
        (2000, 0, 20_000),
        "every queue gets every message: {v}"
    );
}

#[test]
fn topic_exchange_with_many_bindings() {
    let server = TestServer::start();
    let v = run(
        &server,
        &[
            "--exchange-type",
            "topic",
            "--bindings",
            "2000",
            "--no-ack",
            "--count",
            "2000",
        ],
    );
    assert_eq!(counts(&v), (2000, 0, 2000), "{v}");
}

#[test]
fn queued_only_reports_the_server_rss_with_the_queue_full() {
    let server = TestServer::start();
    let v = run(&server, &["--consumers", "0", "--count", "5000"]);
    assert_eq!(counts(&v), (5000, 0, 0), "{v}");
    // The server runs in this test's process, which the tool finds by its port.
    assert!(count(&v, "server_rss_bytes") > 0, "{v}");
}

#[test]
fn idle_connections() {
    let server = TestServer::start();
    let uri = format!("relaymq://{}", server.addr_string());
    let v = json_of(&[
        "idle",
        "--uri",
        &uri,
        "--connections",
        "50",
        "--duration",
        "1",
    ]);
    assert_eq!(count(&v, "connections"), 50, "{v}");
    let before = count(&v, "server_rss_before_bytes");
    let after = count(&v, "server_rss_after_bytes");
    assert!(before > 0, "{v}");
    assert_eq!(
        count(&v, "rss_per_connection_bytes"),
        after.saturating_sub(before) / 50,
        "{v}"
    );
}

#[test]
fn idle_usage_errors_exit_2() {
    for args in [
        &["idle"][..],
        &["idle", "--connections", "0"],
        &["idle", "--connections", "5", "--frobnicate"],
        &["recovery", "--count", "10"],
        &[
            "recovery",
            "--server",
            "/nonexistent/relaymq-server",
            "--count",
            "10",
        ],
        &["recovery", "--server", SERVER],
        &["delayed", "--size", "8"],
        &["delayed", "--rate", "1000000", "--window", "3600"],
        &["delayed", "--uri", "amqp://127.0.0.1:5672"],
        // Lateness compares one clock with itself: loopback only.
        &["delayed", "--uri", "relaymq://192.0.2.1:5673"],
    ] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

/// `relaymq-bench delayed` at a tiny size: every message due arrives once, none before its
/// due time, still carrying its (negated) delay; the memory run finds every held message
/// and both RSS readings; the exchanges and the queue are gone afterwards.
#[test]
fn delayed_delivery_lateness_and_memory() {
    let server = TestServer::start();
    let uri = format!("relaymq://{}", server.addr_string());
    let v = json_of(&[
        "delayed",
        "--uri",
        &uri,
        "--rate",
        "500",
        "--window",
        "2",
        "--lead-ms",
        "1000",
        "--waiting",
        "3000",
        "--wait-delay-s",
        "600",
    ]);
    let a = &v["accuracy"];
    assert_eq!(count(a, "published"), 1000, "{v}");
    assert_eq!(count(a, "received"), 1000, "{v}");
    for key in ["lost", "early", "duplicates", "not_delayed"] {
        assert_eq!(count(a, key), 0, "{key}: {v}");
    }
    let l = &a["lateness_ms"];
    for key in ["p50", "p90", "p99", "p999", "max"] {
        assert!(l[key].as_f64().is_some_and(|x| x >= 0.0), "{key}: {v}");
    }
    assert!(l["p50"].as_f64() <= l["max"].as_f64(), "{v}");
    let m = &v["memory"];
    assert_eq!(count(m, "waiting"), 3000, "{v}");
    // The server runs in this test's process, which the tool finds by its port.
    assert!(count(m, "server_rss_before_bytes") > 0, "{v}");
    assert!(count(m, "server_rss_after_bytes") > 0, "{v}");
    assert!(m["publish_seconds"].is_number(), "{v}");

    let conn = relaymq::client::Connection::connect(&server.addr_string()).expect("connect");
    for exchange in ["relaymq-bench.delayed", "relaymq-bench.delayed.waiting"] {
        let ch = conn.open_channel().expect("channel");
        let passive = relaymq::client::ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let r = ch.exchange_declare(exchange, "x-delayed-message", passive);
        assert_eq!(
            r.err().and_then(|e| e.reply_code()),
            Some(404),
            "{exchange}"
        );
    }
    let ch = conn.open_channel().expect("channel");
    let passive = relaymq::client::QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let r = ch.queue_declare("relaymq-bench.delayed.q", passive);
    assert_eq!(r.err().and_then(|e| e.reply_code()), Some(404));

    // Either run alone.
    let v = json_of(&["delayed", "--uri", &uri, "--rate", "0", "--waiting", "100"]);
    assert!(v["accuracy"].is_null(), "{v}");
    assert_eq!(count(&v["memory"], "waiting"), 100, "{v}");
}

/// Runs `relaymq-bench recovery … --json` with `args`; returns its pid and its JSON, after
/// checking it exited 0 and that every key of `numbers` is a number.
fn recovery(args: &[&str], numbers: &[&str]) -> (u32, serde_json::Value) {
    let child = Command::new(BENCH)
        .args(["recovery", "--server", SERVER])
        .args(args)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("relaymq-bench runs");
    let pid = child.id();
    let out = child.wait_with_output().expect("relaymq-bench ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    for key in numbers {
        assert!(v[*key].is_number(), "{key} in {v}");
    }
    (pid, v)
}

/// Many queues under a low open-files limit: the messages spread over them all come back,
/// and the declare time and both RSS readings are reported.
#[test]
fn recovery_spreads_messages_over_many_queues_under_a_low_nofile() {
    let (_, v) = recovery(
        &["--count", "1500", "--queues", "300", "--nofile", "256"],
        &[
            "declare_seconds",
            "server_rss_before_kill_bytes",
            "server_rss_after_restart_bytes",
        ],
    );
    assert_eq!(count(&v, "queues"), 300, "{v}");
    assert_eq!(count(&v, "nofile"), 256, "{v}");
    assert_eq!(count(&v, "messages_after_restart"), 1500, "{v}");
}

#[test]
fn recovery_after_kill_9_finds_every_message() {
    let (pid, v) = recovery(
        &["--count", "2000"],
        &[
            "restart_to_first_get_ms",
            "restart_to_connect_ms",
            "restart_to_ready_file_ms",
        ],
    );
    assert_eq!(count(&v, "messages"), 2000, "{v}");
    assert_eq!(count(&v, "messages_after_restart"), 2000, "{v}");
    assert!(
        v["restart_to_connect_ms"].as_f64() <= v["restart_to_first_get_ms"].as_f64(),
        "connected before the first get: {v}"
    );
    // The temporary data directory is gone.
    let prefix = format!("relaymq-bench-recovery-{pid}-");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .expect("temp dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn null_relay_forwards_everything_and_reports_no_server_rss() {
    let v = json_of(&["--null-relay", "--no-ack", "--count", "3000"]);
    assert_eq!(counts(&v), (3000, 0, 3000), "{v}");
    assert_eq!(v["null_relay"], serde_json::Value::Bool(true), "{v}");
    assert!(v["server_rss_bytes"].is_null(), "{v}");
}

#[test]
fn null_relay_confirms_acks_and_exchanges() {
    let v = json_of(&[
        "--null-relay",
        "--producers",
        "4",
        "--confirm",
        "64",
        "--count",
        "4000",
    ]);
    assert_eq!(counts(&v), (4000, 4000, 4000), "{v}");
    let v = json_of(&[
        "--null-relay",
        "--exchange-type",
        "fanout",
        "--queues",
        "3",
        "--consumers",
        "3",
        "--count",
        "1000",
    ]);
    assert_eq!(counts(&v), (1000, 0, 3000), "{v}");
    let v = json_of(&[
        "--null-relay",
        "--exchange-type",
        "headers",
        "--queues",
        "2",
        "--consumers",
        "4",
        "--producers",
        "2",
        "--count",
        "1000",
    ]);
    assert_eq!(counts(&v), (1000, 0, 1000), "{v}");
    let v = json_of(&[
        "--null-relay",
        "--exchange-type",
        "topic",
        "--bindings",
        "100",
        "--count",
        "1000",
    ]);
    assert_eq!(counts(&v), (1000, 0, 1000), "{v}");
}

/// A port free now (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn bench_script_quick_runs_one_scenario() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().expect("temp dir");
    let results = dir.path().join("results.tsv");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/bench.sh"))
        .args(["--quick", "--only", "native-1-1-1-no-ack"])
        .arg("--results")
        .arg(&results)
        .args(["--native-port", &free_port().to_string()])
        .args(["--amqp-port", &free_port().to_string()])
        .env("RELAYMQ_BIN_SERVER", SERVER)
        .env("RELAYMQ_BIN_BENCH", BENCH)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench.sh failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&results).expect("results file");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let (name, json) = lines[0].split_once('\t').expect("NAME<TAB>JSON");
    assert_eq!(name, "native-1-1-1-no-ack");
    let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
    assert_eq!(
        count(&v, "messages_published"),
        count(&v, "messages_delivered"),
        "{v}"
    );
    assert!(stdout.contains("native-1-1-1-no-ack"), "{stdout}");
}

/// `relaymq-bench http-api` starts a server, declares its queues and reports every figure
/// of the management API's speed and memory; a bad flag is a usage error.
#[test]
fn http_api_reports_latencies_and_memory() {
    let out = Command::new(BENCH)
        .args([
            "http-api",
            "--server",
            SERVER,
            "--queues",
            "300",
            "--requests",
            "5",
            "--json",
        ])
        .output()
        .expect("relaymq-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    assert_eq!(v["queues"], 300);
    for key in [
        "overview_median_ms",
        "queues_page_median_ms",
        "queues_page_p99_ms",
        "queues_unpaginated_ms",
        "queues_unpaginated_server_rss_growth_bytes",
        "rate_history_bytes",
    ] {
        assert!(v[key].is_number(), "{key} in {v}");
    }
    // 300 queues listed whole: each row is a few hundred bytes of JSON.
    assert!(
        v["queues_unpaginated_bytes"].as_u64().unwrap() > 300 * 500,
        "{v}"
    );
    for args in [
        &["http-api"][..],
        &["http-api", "--server", SERVER, "--requests", "0"],
    ] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
