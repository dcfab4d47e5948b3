//! Delayed delivery: the pika scenario (`tests/interop/delayed_message.py`: the
//! `x-delayed-message` exchange as code written for RabbitMQ's plugin uses it, and a quorum
//! queue's delayed retry), and what needs a real server: held messages wait on disk across
//! a kill -9 and arrive at their due times, a delay past the plugin's 2^32 − 1 ms stays
//! held, the HTTP API and the metrics show the waiting count and the next due time,
//! deleting the exchange discards its messages and files, and a transient exchange's files
//! go at the next start; the delayed-retry policy keys with RabbitMQ 4.3's refusals and
//! what a queue with delayed retry lists.

use crate::common;

use common::http::{request, Api};
use common::{eventually, ServerProcess, TestServer};
use relaymq::client::{Connection, ExchangeDeclareOptions, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use serde_json::json;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest the pika scenario may run before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest wait for something that must happen.
const WAIT: Duration = Duration::from_secs(20);
/// The delays of the messages held across the kill, in ms.
const DELAYS_MS: [i64; 3] = [2500, 3000, 3500];
/// A delay past the plugin's maximum (2^32 − 1 ms, which it delivers at once): 2^33 ms.
const FAR_DELAY_MS: i64 = 1 << 33;

#[test]
fn pika_delayed_message_exchange_and_quorum_delayed_retry() {
    common::pika_scenario("delayed_delivery", "delayed_message", CHILD_TIMEOUT);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn delayed(delay_ms: i64, persistent: bool) -> BasicProperties {
    let mut headers = FieldTable::new();
    headers.insert("x-delay".into(), FieldValue::I64(delay_ms));
    BasicProperties {
        headers: Some(headers),
        delivery_mode: Some(if persistent { 2 } else { 1 }),
        ..BasicProperties::default()
    }
}

fn declare_delayed(ch: &relaymq::client::Channel, name: &str, durable: bool) {
    let mut arguments = FieldTable::new();
    arguments.insert("x-delayed-type".into(), FieldValue::string("direct"));
    ch.exchange_declare(
        name,
        "x-delayed-message",
        ExchangeDeclareOptions {
            durable,
            arguments,
            ..ExchangeDeclareOptions::default()
        },
    )
    .expect("declare x-delayed-message");
}

fn http_addr(server: &ServerProcess, key: &str) -> SocketAddr {
    server.ready[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} in the ready file: {}", server.ready))
        .parse()
        .unwrap()
}

/// The queue directories of the data directory (queues and delayed exchanges' stores).
fn store_dirs(data: &Path) -> usize {
    std::fs::read_dir(data.join("queues"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn metric(metrics: SocketAddr, line_start: &str) -> Option<String> {
    let page = request(metrics, "GET", "/metrics", None, None, &[]).text();
    page.lines()
        .find(|l| l.starts_with(line_start))
        .map(str::to_string)
}

#[test]
fn held_messages_wait_on_disk_across_kill_9_and_arrive_at_their_due_times() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flags = [
        "--fsync",
        "always",
        "--http-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let server = ServerProcess::start(&data, &flags);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let stores_before = store_dirs(&data);
    declare_delayed(&ch, "later", true);
    declare_delayed(&ch, "transient", false);
    assert_eq!(
        store_dirs(&data),
        stores_before + 2,
        "each delayed exchange has a store of its own"
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("later-q", durable.clone()).unwrap();
    ch.queue_bind("later-q", "later", "k", FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    let published = now_ms();
    for (i, delay) in DELAYS_MS.iter().enumerate() {
        ch.basic_publish(
            "later",
            "k",
            false,
            &delayed(*delay, true),
            format!("m{i}").as_bytes(),
        )
        .unwrap();
    }
    ch.basic_publish("later", "k", false, &delayed(FAR_DELAY_MS, true), b"far")
        .unwrap();
    ch.basic_publish("transient", "k", false, &delayed(60_000, true), b"gone")
        .unwrap();
    assert!(
        ch.wait_for_confirms(WAIT).unwrap(),
        "held messages are confirmed"
    );
    let api = Api::guest(http_addr(&server, "http_listen"));
    let x = api.get_ok("/exchanges/%2F/later");
    assert_eq!(x["type"], "x-delayed-message");
    assert_eq!(x["messages_delayed"], DELAYS_MS.len() + 1, "{x}");
    let next = x["next_delayed_at"].as_u64().expect("next_delayed_at");
    let first_due = published + DELAYS_MS[0] as u64;
    assert!(
        next >= first_due && next < first_due + 5_000,
        "next_delayed_at {next}, first due {first_due}"
    );
    let metrics = http_addr(&server, "metrics_listen");
    let line = metric(
        metrics,
        "relaymq_exchange_messages_delayed{vhost=\"/\",exchange=\"later\"}",
    )
    .expect("the waiting count in the metrics");
    assert!(line.ends_with(" 4"), "{line}");
    assert!(metric(metrics, "relaymq_exchange_next_delayed_at_seconds{").is_some());
    drop(conn);
    server.kill9();
    // `--check` reads the exchange's store as a queue's and calls only the transient
    // exchange's directory an orphan.
    let check = common::run_check(&data);
    assert_eq!(check.code, 0, "{check}");
    assert!(
        check.stdout.contains("later (x-delayed-message exchange)"),
        "{check}"
    );
    assert_eq!(
        check.stdout.matches("orphan directory").count(),
        1,
        "{check}"
    );

    let server = ServerProcess::start(&data, &flags);
    // The transient exchange is gone, and its store with it.
    assert_eq!(
        store_dirs(&data),
        stores_before + 2,
        "later's store and later-q's"
    );
    let api = Api::guest(http_addr(&server, "http_listen"));
    assert_eq!(api.get("/exchanges/%2F/transient").status, 404);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let mut arrived: Vec<(Vec<u8>, u64, Option<i64>)> = Vec::new();
    let deadline = Instant::now() + WAIT;
    while arrived.len() < DELAYS_MS.len() {
        assert!(
            Instant::now() < deadline,
            "held messages arrived: {arrived:?}"
        );
        match ch.basic_get("later-q", true).unwrap() {
            Some(m) => {
                let header = m
                    .properties
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("x-delay"))
                    .and_then(FieldValue::as_i64);
                arrived.push((m.body, now_ms(), header));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    for (i, (body, at, header)) in arrived.iter().enumerate() {
        assert_eq!(body, format!("m{i}").as_bytes(), "due order");
        let due = published + DELAYS_MS[i] as u64;
        assert!(*at >= due, "m{i} arrived {} ms early", due - at);
        assert_eq!(*header, Some(-DELAYS_MS[i]), "m{i}'s x-delay negated");
    }
    // The far one waits on.
    let x = api.get_ok("/exchanges/%2F/later");
    assert_eq!(x["messages_delayed"], 1, "{x}");
    let far_due = x["next_delayed_at"].as_u64().unwrap();
    assert!(far_due >= published + FAR_DELAY_MS as u64, "{far_due}");
    // Deleting the exchange discards it with the exchange's files.
    ch.exchange_delete("later", false).unwrap();
    assert_eq!(store_dirs(&data), stores_before + 1, "later-q's store only");
    drop(conn);
    server.kill9();
    let server = ServerProcess::start(&data, &flags);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    assert!(ch.basic_get("later-q", true).unwrap().is_none());
    drop(conn);
    assert!(server.terminate().success());
}

#[test]
fn delayed_retry_policies_are_checked_and_listed() {
    let server = TestServer::with_api();
    let api = server.api();
    let refused = |definition: serde_json::Value| {
        let r = api.put(
            "/policies/%2F/retry",
            &json!({"pattern": "^retry", "apply-to": "queues", "definition": definition}),
        );
        assert_eq!(r.status, 400, "{}", r.text());
        r.json()["reason"].as_str().unwrap().to_string()
    };
    assert_eq!(
        refused(json!({"delayed-retry-type": "all"})),
        "Validation failed: delayed-retry-min is required when delayed-retry-type is all"
    );
    assert_eq!(
        refused(json!({"delayed-retry-min": 500, "delayed-retry-max": 100})),
        "Validation failed: delayed-retry-max (100) must not be smaller than \
         delayed-retry-min (500)"
    );
    let r = api.put(
        "/policies/%2F/retry",
        // RabbitMQ 3.12+'s `quorum_queues`: quorum queues only.
        &json!({"pattern": "^retry", "apply-to": "quorum_queues",
                "definition": {"delayed-retry-type": "all", "delayed-retry-min": 60000}}),
    );
    assert!(r.status == 201 || r.status == 204, "{}", r.text());
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type".into(), FieldValue::string("quorum"));
    ch.queue_declare(
        "retry-q",
        QueueDeclareOptions {
            durable: true,
            arguments,
            ..QueueDeclareOptions::default()
        },
    )
    .unwrap();
    ch.basic_publish("", "retry-q", false, &BasicProperties::default(), b"job")
        .unwrap();
    let m = eventually(WAIT, "the job", || ch.basic_get("retry-q", false).unwrap());
    let rejected = now_ms();
    ch.basic_reject(m.delivery_tag, true).unwrap();
    // (The reject has no reply: wait until the queue has taken it.)
    let q = eventually(WAIT, "the rejected job waiting", || {
        let q = api.get_ok("/queues/%2F/retry-q");
        (q["messages_unacknowledged"] == 0).then_some(q)
    });
    assert_eq!(
        q["delayed_retry"], "all (min: 60000ms, max: 60000ms)",
        "{q}"
    );
    assert_eq!(q["messages_delayed"], 1, "{q}");
    assert_eq!(q["messages"], 1, "a waiting message is in the queue");
    assert_eq!(q["messages_ready"], 0, "not ready yet");
    let next = q["next_delayed_at"].as_u64().expect("next_delayed_at");
    assert!(
        next >= rejected + 60_000 && next < rejected + 70_000,
        "{next}"
    );
    assert!(ch.basic_get("retry-q", false).unwrap().is_none());
    // Purging the queue takes the waiting message too.
    assert_eq!(ch.queue_purge("retry-q").unwrap(), 1);
    let q = api.get_ok("/queues/%2F/retry-q");
    assert_eq!(q["messages_delayed"], 0, "{q}");
}
