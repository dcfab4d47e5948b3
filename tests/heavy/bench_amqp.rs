//! `relaymq-bench --uri amqp://…` and `relaymq-bench compare` against an in-process
//! server's AMQP 0-9-1 listener: tiny runs deliver exactly what the configuration implies
//! and leave no queue behind; a bad URI exits 2, a refused login exits 1 with the
//! server's reason. No RabbitMQ needed; speed is never asserted.

use crate::common;

use common::bench::{assert_queues_gone, bench, count, json_of};
use common::TestServer;

fn amqp_uri(server: &TestServer) -> String {
    let addr = server.handle.amqp_addr().expect("the AMQP listener is on");
    format!("amqp://guest:guest@{addr}/%2F")
}

/// Runs `args` over AMQP; checks the counts, the latency figures and that the queues
/// are gone; returns the object.
fn check(
    server: &TestServer,
    args: &[&str],
    published: u64,
    delivered: u64,
    queues: usize,
) -> serde_json::Value {
    let uri = amqp_uri(server);
    let mut all = vec!["--uri", uri.as_str()];
    all.extend_from_slice(args);
    let v = json_of(&all);
    assert_eq!(count(&v, "messages_published"), published, "{args:?}: {v}");
    assert_eq!(count(&v, "messages_delivered"), delivered, "{args:?}: {v}");
    for key in ["p50", "p99", "p999", "max"] {
        assert!(
            v["latency_us"][key].as_f64().is_some_and(|l| l > 0.0),
            "{args:?}: latency_us.{key} in {v}"
        );
    }
    assert_queues_gone(server, queues);
    v
}

#[test]
fn transient_no_ack() {
    let server = TestServer::start();
    let v = check(&server, &["--count", "3000", "--no-ack"], 3000, 3000, 1);
    // The server runs in this test's process, which the tool finds by the AMQP port.
    assert!(count(&v, "server_rss_bytes") > 0, "{v}");
}

#[test]
fn persistent_with_confirms() {
    let server = TestServer::start();
    let v = check(
        &server,
        &[
            "--count",
            "2000",
            "--persistent",
            "--confirm",
            "64",
            "--producers",
            "2",
        ],
        2000,
        2000,
        1,
    );
    assert_eq!(count(&v, "messages_confirmed"), 2000);
}

#[test]
fn manual_acks_with_multiple_and_prefetch() {
    let server = TestServer::start();
    check(
        &server,
        &["--count", "3001", "--multi-ack", "10", "--prefetch", "100"],
        3001,
        3001,
        1,
    );
    // Each delivery acked alone, two queues, bodies split over several body frames.
    check(
        &server,
        &[
            "--count",
            "300",
            "--queues",
            "2",
            "--consumers",
            "2",
            "--size",
            "300000",
        ],
        300,
        300,
        2,
    );
}

#[test]
fn fanout_to_several_queues_and_headers_routing() {
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
}

#[test]
fn compare_native_and_amqp_of_one_server() {
    let server = TestServer::start();
    let native = format!("relaymq://{}", server.addr_string());
    let amqp = amqp_uri(&server);
    let v = json_of(&[
        "compare",
        native.as_str(),
        amqp.as_str(),
        "--count",
        "2000",
        "--confirm",
        "100",
    ]);
    let runs = v["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("runs in {v}"));
    assert_eq!(runs.len(), 2, "{v}");
    assert!(runs[0]["uri"].as_str().unwrap().starts_with("relaymq://"));
    assert!(runs[1]["uri"].as_str().unwrap().starts_with("amqp://"));
    assert!(
        !v.to_string().contains("guest:guest"),
        "no password in the output"
    );
    for run in runs {
        assert!(run["error"].is_null(), "{run}");
        assert_eq!(count(run, "messages_published"), 2000, "{run}");
        assert_eq!(count(run, "messages_confirmed"), 2000, "{run}");
        assert_eq!(count(run, "messages_delivered"), 2000, "{run}");
        assert!(run["ratio"]["delivered_per_s"].is_number(), "{run}");
    }
    assert_eq!(runs[0]["ratio"]["delivered_per_s"].as_f64(), Some(1.0));
    assert_queues_gone(&server, 1);
}

#[test]
fn compare_prints_a_table_and_fails_with_a_failed_run() {
    let server = TestServer::start();
    let amqp = amqp_uri(&server);
    let bad = format!(
        "amqp://guest:wrong@{}",
        server.handle.amqp_addr().expect("AMQP listener")
    );
    let out = bench(&["compare", amqp.as_str(), bad.as_str(), "--count", "500"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("delivered/s vs first"), "{stdout}");
    assert!(stdout.contains("1.00x"), "{stdout}");
    assert!(stdout.contains("FAILED"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 of 2 runs failed"), "{stderr}");
}

#[test]
fn bad_amqp_uris_and_compare_usage_exit_2() {
    for args in [
        &["--uri", "amqp://"][..],
        &["--uri", "amqp://127.0.0.1:0"],
        &["--uri", "amqp://127.0.0.1:nope"],
        &["--uri", "amqp://127.0.0.1/%zz"],
        &["--uri", "amqps://127.0.0.1:5671"],
        &["compare", "amqp://127.0.0.1:5672"],
        &["compare"],
        &["compare", "amqp://127.0.0.1", "amqp://bad:0"],
        &["compare", "amqp://a", "amqp://b", "--uri", "amqp://c"],
    ] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

#[test]
fn a_wrong_password_fails_with_the_servers_reason() {
    let server = TestServer::start();
    let uri = format!(
        "amqp://guest:wrong@{}",
        server.handle.amqp_addr().expect("AMQP listener")
    );
    let out = bench(&["--uri", &uri, "--count", "10"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("403") && err.contains("ACCESS_REFUSED"),
        "{err}"
    );
}

#[test]
fn an_unknown_vhost_and_a_non_amqp_port_fail_the_run() {
    let server = TestServer::start();
    let addr = server.handle.amqp_addr().expect("AMQP listener");
    let out = bench(&["--uri", &format!("amqp://{addr}/nope"), "--count", "10"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("530") && err.contains("vhost"), "{err}");
    // The native port spoken to in AMQP: an error, not a hang or a panic.
    let out = bench(&[
        "--uri",
        &format!("amqp://{}", server.addr_string()),
        "--count",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("AMQP 0-9-1"), "{err}");
}
