//! The unacked browser (docs/http-api.md §3.5, "Unacked deliveries"): the deliveries of a
//! queue awaiting their ack, per consumer and for `basic.get`, oldest first with how long
//! each has been out, over HTTP, the native protocol and `relaymq-cli unacked`.

use crate::common;
use common::{connect, TestServer};
use relaymq::client::{Channel, ConsumeOptions, Consumer, ConsumerEvent, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// Time between the deliveries of the test, so their ages differ measurably.
const STEP: Duration = Duration::from_millis(60);

fn publish(ch: &Channel, body: &str) {
    ch.basic_publish("", "q", false, &BasicProperties::default(), body.as_bytes())
        .expect("publish");
}

/// The next delivery of `consumer`: (delivery tag, body).
fn next(consumer: &Consumer) -> (u64, String) {
    match consumer.recv_timeout(WAIT).expect("a delivery") {
        ConsumerEvent::Delivery(d) => (d.delivery_tag, String::from_utf8(d.body).unwrap()),
        other => panic!("{other:?}"),
    }
}

fn consume(ch: &Channel, tag: &str) -> Consumer {
    ch.basic_qos(2, false).unwrap();
    let options = ConsumeOptions {
        consumer_tag: tag.into(),
        ..ConsumeOptions::default()
    };
    ch.basic_consume("q", options).unwrap()
}

fn column<'a>(rows: &'a Value, key: &str) -> Vec<&'a Value> {
    rows.as_array()
        .expect("an array")
        .iter()
        .map(|r| &r[key])
        .collect()
}

#[test]
fn unacked_deliveries_are_listed_oldest_first_per_consumer_and_get() {
    let server = TestServer::with_api();
    let api = server.api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    publish(&ch, "m1");
    publish(&ch, "m2");
    common::wait_until(WAIT, "two ready", || {
        api.get_ok("/queues/%2F/q")["messages_ready"] == json!(2)
    });
    let getter = conn.open_channel().unwrap();
    let got = getter.basic_get("q", false).unwrap().expect("m1");
    assert_eq!(got.body, b"m1");
    std::thread::sleep(STEP);

    let ch1 = conn.open_channel().unwrap();
    let c1 = consume(&ch1, "c1");
    assert_eq!(next(&c1).1, "m2");
    std::thread::sleep(STEP);
    publish(&ch, "m3");
    assert_eq!(next(&c1).1, "m3");
    std::thread::sleep(STEP);

    let other = connect(&server);
    let ch2 = other.open_channel().unwrap();
    let c2 = consume(&ch2, "c2");
    for body in ["m4", "m5", "m6"] {
        publish(&ch, body);
    }
    assert_eq!(next(&c2).1, "m4");
    assert_eq!(next(&c2).1, "m5");
    // m6 waits: both consumers are at their prefetch of 2, and it is not listed.

    let reply = api.get("/queues/%2F/q/unacked");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let rows = reply.json();
    let payloads: Vec<&Value> = column(&rows, "payload");
    assert_eq!(
        payloads,
        [
            &json!("m1"),
            &json!("m2"),
            &json!("m3"),
            &json!("m4"),
            &json!("m5")
        ]
    );
    let tags = column(&rows, "consumer_tag");
    assert_eq!(
        tags,
        [
            &Value::Null,
            &json!("c1"),
            &json!("c1"),
            &json!("c2"),
            &json!("c2")
        ]
    );
    let ages: Vec<u64> = column(&rows, "out_for_ms")
        .iter()
        .map(|v| v.as_u64().expect("out_for_ms"))
        .collect();
    assert!(
        ages.windows(2).all(|w| w[0] >= w[1]),
        "oldest first: {ages:?}"
    );
    let step = STEP.as_millis() as u64;
    assert!(ages[0] >= ages[1] + step / 2, "the get is older: {ages:?}");
    assert!(
        ages[1] >= ages[3] + step,
        "c1's are older than c2's: {ages:?}"
    );
    let first = &rows[0];
    assert_eq!(first["delivery_tag"], json!(got.delivery_tag));
    assert_eq!(
        (
            first["redelivered"].clone(),
            first["delivery_count"].clone()
        ),
        (json!(false), json!(1))
    );
    assert_eq!(first["payload_bytes"], json!(2));
    assert!(first["delivered_at"].as_str().unwrap().ends_with("+00:00"));
    let details = &rows[3]["channel_details"];
    assert_eq!(details["user"], json!("guest"));
    assert_eq!(details["peer_host"], json!("127.0.0.1"));
    assert!(details["connection_name"]
        .as_str()
        .unwrap()
        .contains(" -> "));
    assert_eq!(
        details["name"],
        json!(format!(
            "{} ({})",
            details["connection_name"].as_str().unwrap(),
            details["number"]
        ))
    );

    let two = api
        .get("/queues/%2F/q/unacked?limit=2&encoding=base64")
        .json();
    assert_eq!(column(&two, "payload"), [&json!("bTE="), &json!("bTI=")]);
    let over = api.get("/queues/%2F/q/unacked?limit=1001");
    assert_eq!(over.status, 400, "{}", over.text());
    assert!(over.text().contains("1000"), "{}", over.text());
    assert_eq!(api.get("/queues/%2F/absent/unacked").status, 404);
    assert_eq!(api.post("/queues/%2F/q/unacked", &json!({})).status, 405);

    // The same answer over the native protocol and the CLI.
    let native: Value =
        serde_json::from_str(&ch.queue_unacked("q", "{\"limit\": 5}").unwrap()).unwrap();
    assert_eq!(column(&native, "payload"), payloads);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args([
            "--addr",
            &server.addr_string(),
            "unacked",
            "q",
            "--limit",
            "3",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("basic.get ") && lines[0].ends_with(": m1"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("c1 ") && lines[1].ends_with(": m2"),
        "{text}"
    );

    // Acked deliveries leave the list; m6 goes to c1 once it has room.
    ch1.basic_ack(2, true).unwrap();
    getter.basic_ack(got.delivery_tag, false).unwrap();
    assert_eq!(next(&c1).1, "m6");
    common::wait_until(WAIT, "acked deliveries gone", || {
        let rows = api.get_ok("/queues/%2F/q/unacked");
        column(&rows, "payload") == [&json!("m4"), &json!("m5"), &json!("m6")]
    });
}

#[test]
fn listing_unacked_deliveries_needs_read_permission() {
    let server = TestServer::with_api();
    let api = server.api();
    connect(&server)
        .open_channel()
        .unwrap()
        .queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!(
        api.put(
            "/users/writer",
            &json!({"password": "pw", "tags": "management"})
        )
        .status,
        201
    );
    assert_eq!(
        api.put(
            "/permissions/%2F/writer",
            &json!({"configure": ".*", "write": ".*", "read": "^$"}),
        )
        .status,
        201
    );
    let writer = common::http::Api::as_user(server.http_addr(), "writer", "pw");
    assert_eq!(writer.get("/queues/%2F/q/unacked").status, 401);
    assert_eq!(api.get("/queues/%2F/q/unacked").json(), json!([]));
}
