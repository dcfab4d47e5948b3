//! All lifecycle state of a durable queue survives a crash (`kill -9`) and restart
//! (issue 4, acceptance): its arguments (dead-letter exchange, TTL, length limit, delivery
//! limit, priorities), each message's priority, deadline and delivery count.

use crate::common;

use common::ServerProcess;
use relaymq::client::{Channel, Connection, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::{Duration, Instant};

fn declare(ch: &Channel, name: &str, args: &[(&str, FieldValue)]) {
    let mut arguments = FieldTable::new();
    for (k, v) in args {
        arguments.insert((*k).into(), v.clone());
    }
    let options = QueueDeclareOptions {
        durable: true,
        arguments,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

fn publish(ch: &Channel, body: &str, priority: u8, expiration: Option<&str>) {
    let props = BasicProperties {
        delivery_mode: Some(2),
        priority: Some(priority),
        expiration: expiration.map(str::to_string),
        ..BasicProperties::default()
    };
    ch.basic_publish("", "work", false, &props, body.as_bytes())
        .expect("publish");
}

fn reason(m: &relaymq::client::GetMessage) -> String {
    let headers = m.properties.headers.as_ref().expect("headers");
    headers
        .get("x-first-death-reason")
        .and_then(FieldValue::as_str)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn every_lifecycle_setting_and_message_state_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    declare(&ch, "dlq", &[]);
    declare(
        &ch,
        "work",
        &[
            ("x-dead-letter-exchange", FieldValue::string("")),
            ("x-dead-letter-routing-key", FieldValue::string("dlq")),
            ("x-max-priority", FieldValue::I64(9)),
            ("x-max-length", FieldValue::I64(4)),
            ("x-delivery-limit", FieldValue::I64(1)),
            ("x-message-ttl", FieldValue::I64(600_000)),
        ],
    );
    let published = Instant::now();
    publish(&ch, "low", 1, None);
    publish(&ch, "high", 9, None);
    publish(&ch, "soon", 5, Some("2000"));
    publish(&ch, "mid", 5, None);
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    // "high" is delivered once and returned: one delivery of its limit of 1 is used.
    let high = ch.basic_get("work", false).unwrap().expect("high");
    assert_eq!(high.body, b"high");
    ch.basic_nack(high.delivery_tag, false, true).unwrap();
    // Make sure the broker handled the nack before the crash.
    assert_eq!(
        ch.queue_declare(
            "work",
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            }
        )
        .unwrap()
        .message_count,
        4
    );
    server.kill9();

    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    // The length limit still holds: a fifth message drops the oldest lowest priority.
    publish(&ch, "new", 9, None);
    // The TTL counted from the first publish, not from the restart.
    let dlq_bodies = |ch: &Channel| -> Vec<(String, String)> {
        std::iter::from_fn(|| ch.basic_get("dlq", true).unwrap())
            .map(|m| (String::from_utf8(m.body.clone()).unwrap(), reason(&m)))
            .collect()
    };
    let mut dead = dlq_bodies(&ch);
    while !dead.iter().any(|(b, _)| b == "soon") {
        assert!(
            published.elapsed() < Duration::from_secs(10),
            "'soon' never expired"
        );
        std::thread::sleep(Duration::from_millis(20));
        dead.extend(dlq_bodies(&ch));
    }
    assert!(published.elapsed() >= Duration::from_millis(2000));
    dead.sort();
    assert_eq!(
        dead,
        [
            ("low".to_string(), "maxlen".to_string()),
            ("soon".to_string(), "expired".to_string())
        ]
    );
    // Priority order survived; "high" comes back redelivered with its count, and one
    // more return takes it past its delivery limit.
    let first = ch.basic_get("work", false).unwrap().expect("high again");
    assert_eq!(first.body, b"high");
    assert!(first.redelivered);
    ch.basic_nack(first.delivery_tag, false, true).unwrap();
    let rest: Vec<String> = std::iter::from_fn(|| ch.basic_get("work", true).unwrap())
        .map(|m| String::from_utf8(m.body).unwrap())
        .collect();
    assert_eq!(rest, ["new", "mid"]);
    let dead = dlq_bodies(&ch);
    assert_eq!(dead, [("high".to_string(), "delivery_limit".to_string())]);
    conn.close().unwrap();
    assert!(server.terminate().success());
}
