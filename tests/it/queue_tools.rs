//! The queue tools beyond RabbitMQ's API (docs/http-api.md, "Beyond RabbitMQ"): peek reads
//! ready messages without consuming them (plain, priority and paged-out queues), replay
//! moves dead letters back to where they died or to an exchange.

use crate::common;
use common::{connect, TestServer};
use relaymq::client::{Channel, ConsumeOptions, ConsumerEvent};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn declare(ch: &Channel, name: &str, durable: bool, args: &[(&str, FieldValue)]) {
    common::declare_queue(ch, name, durable, args);
}

fn publish(ch: &Channel, queue: &str, body: &str, props: BasicProperties) {
    ch.basic_publish("", queue, false, &props, body.as_bytes())
        .expect("publish");
}

fn payloads(items: &Value) -> Vec<String> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| m["payload"].as_str().expect("text payload").to_string())
        .collect()
}

fn queue_row(server: &TestServer, q: &str) -> Value {
    server.api().get_ok(&format!("/queues/%2F/{q}"))
}

/// Ready messages of `q` as the API counts them.
fn ready(server: &TestServer, q: &str) -> u64 {
    queue_row(server, q)["messages_ready"].as_u64().unwrap()
}

/// Waits until `q` has `n` ready messages (publishes have no reply).
fn wait_ready(server: &TestServer, q: &str, n: u64) {
    let deadline = std::time::Instant::now() + WAIT;
    while ready(server, q) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{n} messages in '{q}'"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn peek_reads_without_consuming_and_consumers_see_first_deliveries_in_order() {
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "q", false, &[]);
    for body in ["one", "two", "three"] {
        publish(&ch, "q", body, BasicProperties::default());
    }
    wait_ready(&server, "q", 3);
    let api = server.api();
    let first = api.post("/queues/%2F/q/peek", &json!({"count": 10}));
    assert_eq!(first.status, 200, "{}", first.text());
    let first = first.json();
    let second = api.post("/queues/%2F/q/peek", &json!({})).json();
    assert_eq!(first, second, "a peek changes nothing");
    assert_eq!(payloads(&first), ["one", "two", "three"]);
    for (i, m) in first.as_array().unwrap().iter().enumerate() {
        assert_eq!(m["position"], json!(i));
        assert_eq!(m["redelivered"], json!(false));
        assert_eq!(m["delivery_count"], json!(0));
        assert_eq!(m["message_count"], json!(2 - i));
        assert_eq!(m["payload_encoding"], json!("string"));
        assert_eq!(m["routing_key"], json!("q"));
    }
    let tail = api
        .post("/queues/%2F/q/peek", &json!({"offset": 1, "count": 1}))
        .json();
    assert_eq!(payloads(&tail), ["two"]);
    let row = queue_row(&server, "q");
    assert_eq!(row["messages_ready"], json!(3));
    assert_eq!(row["messages_unacknowledged"], json!(0));
    let stats = &row["message_stats"];
    for counter in ["deliver_get", "get", "get_no_ack", "redeliver"] {
        assert!(
            stats[counter].as_u64().unwrap_or(0) == 0,
            "{counter} counted a peek: {stats}"
        );
    }

    let consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    for expected in ["one", "two", "three"] {
        let d = match consumer.recv_timeout(WAIT).expect("delivery") {
            ConsumerEvent::Delivery(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(d.body, expected.as_bytes());
        assert!(!d.redelivered, "a peeked message is not redelivered");
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
}

#[test]
fn peek_follows_priority_order_and_refuses_bad_requests() {
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "pq", false, &[("x-max-priority", FieldValue::I64(5))]);
    for (body, p) in [("low", 1), ("high", 5), ("mid", 3), ("none", 0)] {
        let props = BasicProperties {
            priority: Some(p),
            ..BasicProperties::default()
        };
        publish(&ch, "pq", body, props);
    }
    wait_ready(&server, "pq", 4);
    let api = server.api();
    let peeked = api.post("/queues/%2F/pq/peek", &json!({})).json();
    assert_eq!(payloads(&peeked), ["high", "mid", "low", "none"]);
    let got = api
        .post(
            "/queues/%2F/pq/get",
            &json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}),
        )
        .json();
    assert_eq!(
        got[0]["payload"],
        json!("high"),
        "peek showed the delivery order"
    );

    let bad = api.post("/queues/%2F/pq/peek", &json!({"count": -1}));
    assert_eq!(bad.status, 400, "{}", bad.text());
    let over = api.post("/queues/%2F/pq/peek", &json!({"count": 1001}));
    assert_eq!(over.status, 400, "{}", over.text());
    let b64 = api
        .post(
            "/queues/%2F/pq/peek",
            &json!({"count": 1, "encoding": "base64", "truncate": 2}),
        )
        .json();
    assert_eq!(b64[0]["payload"], json!("bWk="), "'mi' of 'mid'");
    assert_eq!(b64[0]["payload_bytes"], json!(3));
    assert_eq!(api.post("/queues/%2F/nope/peek", &json!({})).status, 404);
    assert_eq!(api.post("/queues/nope/pq/peek", &json!({})).status, 404);
    assert_eq!(api.get("/queues/%2F/pq/peek").status, 405);
}

#[test]
fn peek_reads_paged_out_bodies_from_the_store_without_paging_them_in() {
    let server = TestServer::start_with(|c| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        c.broker.queue_memory_bytes = 1000;
    });
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "big", true, &[]);
    let persistent = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    let bodies: Vec<String> = (0..20)
        .map(|i| format!("{i:03}{}", "x".repeat(400)))
        .collect();
    for b in &bodies {
        publish(&ch, "big", b, persistent.clone());
    }
    wait_ready(&server, "big", 20);
    let before = queue_row(&server, "big");
    let paged = before["messages_paged_out"].as_u64().unwrap();
    assert!(paged >= 15, "most are paged out: {paged}");
    let peeked = server
        .api()
        .post("/queues/%2F/big/peek", &json!({"count": 20}))
        .json();
    assert_eq!(payloads(&peeked), bodies);
    let after = queue_row(&server, "big");
    for field in ["messages_paged_out", "message_bytes_ram", "messages_ready"] {
        assert_eq!(before[field], after[field], "{field} changed");
    }
}

fn dlx_args() -> Vec<(&'static str, FieldValue)> {
    vec![
        ("x-dead-letter-exchange", FieldValue::string("")),
        ("x-dead-letter-routing-key", FieldValue::string("dlq")),
    ]
}

/// Publishes `body` to `q` and rejects it without requeue: it lands in `dlq`.
fn dead_letter(ch: &Channel, q: &str, body: &str) {
    publish(ch, q, body, BasicProperties::default());
    let m = ch.basic_get(q, false).unwrap().expect("a message");
    ch.basic_reject(m.delivery_tag, false).unwrap();
}

fn death_queue(m: &Value) -> Value {
    m["properties"]["headers"]["x-death"][0]["queue"].clone()
}

#[test]
fn replay_to_origin_sends_each_dead_letter_back_where_it_died_with_its_history() {
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "q1", false, &dlx_args());
    declare(&ch, "q2", false, &dlx_args());
    dead_letter(&ch, "q1", "from q1");
    dead_letter(&ch, "q2", "from q2");
    dead_letter(&ch, "q1", "from q1 again");
    publish(&ch, "dlq", "never died", BasicProperties::default());
    let api = server.api();
    wait_ready(&server, "dlq", 4);
    let reply = api.post("/queues/%2F/dlq/replay", &json!({"target": "origin"}));
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json(),
        json!({"moved": 3, "skipped": 1, "errors": []})
    );
    let q1 = api.post("/queues/%2F/q1/peek", &json!({})).json();
    assert_eq!(payloads(&q1), ["from q1", "from q1 again"]);
    assert_eq!(death_queue(&q1[0]), json!("q1"), "x-death kept: {}", q1[0]);
    assert_eq!(
        q1[0]["properties"]["headers"]["x-death"][0]["count"],
        json!(1)
    );
    assert_eq!(q1[0]["exchange"], json!(""));
    assert_eq!(q1[0]["routing_key"], json!("q1"));
    let q2 = api.post("/queues/%2F/q2/peek", &json!({})).json();
    assert_eq!(payloads(&q2), ["from q2"]);
    let left = api.post("/queues/%2F/dlq/peek", &json!({})).json();
    assert_eq!(payloads(&left), ["never died"], "skipped, not lost");

    // Dead again: the (q1, rejected) entry counts 2.
    let m = ch.basic_get("q1", false).unwrap().unwrap();
    ch.basic_reject(m.delivery_tag, false).unwrap();
    wait_ready(&server, "dlq", 2);
    let again = api
        .post("/queues/%2F/dlq/peek", &json!({"offset": 1}))
        .json();
    assert_eq!(
        again[0]["properties"]["headers"]["x-death"][0]["count"],
        json!(2)
    );
}

#[test]
fn replay_to_an_exchange_or_a_queue_moves_the_selected_messages_and_reports_refusals() {
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "src", false, &[]);
    declare(&ch, "dst", false, &[]);
    declare(
        &ch,
        "full",
        false,
        &[
            ("x-max-length", FieldValue::I64(0)),
            ("x-overflow", FieldValue::string("reject-publish")),
        ],
    );
    ch.exchange_declare("x", "direct", Default::default())
        .unwrap();
    ch.queue_bind("dst", "x", "k", FieldTable::new()).unwrap();
    for body in ["m0", "m1", "m2", "m3"] {
        publish(&ch, "src", body, BasicProperties::default());
    }
    wait_ready(&server, "src", 4);
    let api = server.api();
    let reply = api
        .post(
            "/queues/%2F/src/replay",
            &json!({"target": "exchange", "exchange": "x", "routing_key": "k", "positions": [1, 3, 9]}),
        )
        .json();
    assert_eq!(reply["moved"], json!(2));
    assert_eq!(reply["errors"][0]["position"], json!(9));
    let dst = api.post("/queues/%2F/dst/peek", &json!({})).json();
    assert_eq!(payloads(&dst), ["m1", "m3"]);
    assert_eq!(dst[0]["exchange"], json!("x"));
    assert_eq!(dst[0]["routing_key"], json!("k"));
    let src = api.post("/queues/%2F/src/peek", &json!({})).json();
    assert_eq!(payloads(&src), ["m0", "m2"]);

    let refused = api
        .post(
            "/queues/%2F/src/replay",
            &json!({"target": "queue", "queue": "full", "count": 1}),
        )
        .json();
    assert_eq!(refused["moved"], json!(0));
    assert_eq!(refused["errors"][0]["position"], json!(0));
    assert!(refused["errors"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("full"));
    let missing = api
        .post(
            "/queues/%2F/src/replay",
            &json!({"target": "queue", "queue": "nowhere"}),
        )
        .json();
    assert_eq!(missing["moved"], json!(0));
    assert_eq!(missing["errors"].as_array().unwrap().len(), 2);
    let src = api.post("/queues/%2F/src/peek", &json!({})).json();
    assert_eq!(
        payloads(&src),
        ["m0", "m2"],
        "refused messages stay, in order"
    );
    assert_eq!(src[0]["redelivered"], json!(false));

    let moved = api
        .post(
            "/queues/%2F/src/replay",
            &json!({"target": "queue", "queue": "dst"}),
        )
        .json();
    assert_eq!(moved, json!({"moved": 2, "skipped": 0, "errors": []}));
    assert_eq!(ready(&server, "src"), 0);
    assert_eq!(ready(&server, "dst"), 4);
    let bad = api.post("/queues/%2F/src/replay", &json!({"target": "moon"}));
    assert_eq!(bad.status, 400);
}

#[test]
fn search_finds_messages_by_body_header_and_property_page_by_page() {
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "s", false, &[]);
    for i in 0..600 {
        let mut headers = FieldTable::new();
        headers.insert("order".into(), FieldValue::I64(i));
        let props = BasicProperties {
            headers: Some(headers),
            correlation_id: Some(format!("corr-{i}")),
            ..BasicProperties::default()
        };
        let body = if i % 100 == 7 {
            format!("Needle {i}")
        } else {
            format!("hay {i}")
        };
        publish(&ch, "s", &body, props);
    }
    wait_ready(&server, "s", 600);
    let api = server.api();
    let search = |body: Value| {
        let r = api.post("/queues/%2F/s/search", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let all = search(json!({"query": "needle", "ignore_case": true, "limit": 100}));
    assert_eq!(all["scanned"], json!(600));
    assert_eq!(all["next_offset"], Value::Null);
    assert_eq!(all["ready"], json!(600));
    let positions: Vec<u64> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, [7, 107, 207, 307, 407, 507]);
    assert!(search(json!({"query": "needle"}))["items"]
        .as_array()
        .unwrap()
        .is_empty());

    let page = search(json!({"query": "Needle", "limit": 2}));
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_offset"], json!(108));
    let next = search(json!({"query": "Needle", "limit": 2, "offset": 108}));
    assert_eq!(next["items"][0]["position"], json!(207));

    let by_header = search(json!({"query": "599", "in": ["headers"]}));
    assert_eq!(by_header["items"][0]["position"], json!(599));
    assert_eq!(by_header["items"].as_array().unwrap().len(), 1);
    let by_property = search(json!({"query": "corr-42", "in": ["properties"], "truncate": 3}));
    let items = by_property["items"].as_array().unwrap();
    assert_eq!(items.len(), 11, "corr-42 and corr-420 to corr-429");
    assert_eq!(items[0]["payload"], json!("hay"));
    assert_eq!(ready(&server, "s"), 600, "a search consumes nothing");
    let bad = api.post("/queues/%2F/s/search", &json!({"query": ""}));
    assert_eq!(bad.status, 400);
}

/// Runs `relaymq-cli` as `guest`; its standard output, after checking it succeeded.
fn cli(server: &TestServer, args: &[&str]) -> String {
    common::cli_ok(&server.addr_string(), args)
}

#[test]
fn the_cli_peeks_searches_and_replays_over_the_native_protocol() {
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "work", false, &dlx_args());
    dead_letter(&ch, "work", "first");
    dead_letter(&ch, "work", "second");
    wait_ready(&server, "dlq", 2);

    assert_eq!(cli(&server, &["peek", "dlq"]), "first\nsecond\n");
    assert_eq!(cli(&server, &["peek", "dlq", "--offset", "1"]), "second\n");
    let json: Value =
        serde_json::from_str(&cli(&server, &["peek", "dlq", "--count", "1", "--json"])).unwrap();
    assert_eq!(json[0]["position"], json!(0));
    assert_eq!(
        json[0]["properties"]["headers"]["x-death"][0]["queue"],
        json!("work")
    );
    assert_eq!(
        cli(
            &server,
            &["search", "dlq", "SEC", "--ignore-case", "--in", "body"]
        ),
        "1: second\nscanned 2 of 2 ready; end\n"
    );
    assert_eq!(ready(&server, "dlq"), 2, "peek and search consume nothing");

    assert_eq!(
        cli(&server, &["replay", "dlq", "--to-origin", "--count", "1"]),
        "moved 1, skipped 0, refused 0\n"
    );
    assert_eq!(
        cli(&server, &["replay", "dlq", "--to-queue", "nowhere"]),
        "moved 0, skipped 0, refused 1\nposition 0: no queue 'nowhere' in vhost '/'\n"
    );
    assert_eq!(cli(&server, &["peek", "work"]), "first\n");
    assert_eq!(cli(&server, &["peek", "dlq"]), "second\n");

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args([
            "--addr",
            &server.addr_string(),
            "peek",
            "dlq",
            "--count",
            "5000",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("count must be between 0 and 1000"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn a_peek_or_search_of_large_messages_stops_at_its_byte_budget() {
    use relaymq::broker::queue::inspect::PEEK_BODY_BYTES_MAX;
    let server = TestServer::with_api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "big", false, &[]);
    // Four bodies of 6 MiB: three reach the 16 MiB budget.
    let body = "x".repeat(PEEK_BODY_BYTES_MAX * 3 / 8);
    for _ in 0..4 {
        publish(&ch, "big", &body, BasicProperties::default());
    }
    wait_ready(&server, "big", 4);
    let api = server.api();
    let peeked = api.post(
        "/queues/%2F/big/peek",
        &json!({"count": 10, "truncate": 10}),
    );
    assert_eq!(peeked.status, 200, "{}", peeked.text());
    let items = peeked.json();
    let positions: Vec<u64> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, [0, 1, 2], "the fourth is past the budget");
    // The rest is one more page away.
    let rest = api.post(
        "/queues/%2F/big/peek",
        &json!({"offset": 3, "truncate": 10}),
    );
    assert_eq!(rest.json()[0]["position"], json!(3));
    let found = api
        .post(
            "/queues/%2F/big/search",
            &json!({"query": "xxx", "truncate": 10}),
        )
        .json();
    assert_eq!(found["items"].as_array().unwrap().len(), 3, "{found}");
    assert_eq!(found["next_offset"], json!(3));
}
