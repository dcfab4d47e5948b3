//! `x-delivery-limit` (issue 4, part 4): a message returned to its queue more than the
//! limit is dead-lettered (reason `delivery_limit`) or dropped; requeued messages carry
//! `x-delivery-count`; counts survive a restart.

use crate::common;

use common::{ServerProcess, TestServer};
use relaymq::client::{Channel, Connection, GetMessage, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};

fn limited(ch: &Channel, name: &str, durable: bool, limit: i64, dlq: Option<&str>) {
    let mut args = FieldTable::new();
    args.insert("x-delivery-limit".into(), FieldValue::I64(limit));
    if let Some(dlq) = dlq {
        args.insert("x-dead-letter-exchange".into(), FieldValue::string(""));
        args.insert("x-dead-letter-routing-key".into(), FieldValue::string(dlq));
    }
    let options = QueueDeclareOptions {
        durable,
        arguments: args,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

fn plain(ch: &Channel, name: &str, durable: bool) {
    let options = QueueDeclareOptions {
        durable,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

fn delivery_count(m: &GetMessage) -> Option<i64> {
    m.properties
        .headers
        .as_ref()
        .and_then(|h| h.get("x-delivery-count"))
        .and_then(FieldValue::as_i64)
}

/// Takes the message and nacks it with requeue; returns what was taken.
fn nack_requeue(ch: &Channel, queue: &str) -> GetMessage {
    let m = ch.basic_get(queue, false).unwrap().expect("a message");
    ch.basic_nack(m.delivery_tag, false, true).unwrap();
    m
}

#[test]
fn a_message_nacked_with_requeue_three_times_under_limit_two_is_dead_lettered() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    plain(&ch, "dlq", false);
    limited(&ch, "work", false, 2, Some("dlq"));
    ch.basic_publish("", "work", false, &BasicProperties::default(), b"poison")
        .unwrap();
    let first = nack_requeue(&ch, "work");
    assert_eq!(delivery_count(&first), None, "first delivery: no count yet");
    let second = nack_requeue(&ch, "work");
    assert_eq!(delivery_count(&second), Some(1));
    assert!(second.redelivered);
    let third = nack_requeue(&ch, "work");
    assert_eq!(delivery_count(&third), Some(2));
    assert!(
        ch.basic_get("work", true).unwrap().is_none(),
        "not requeued a third time"
    );
    let dead = ch.basic_get("dlq", true).unwrap().expect("dead-lettered");
    assert_eq!(dead.body, b"poison");
    let headers = dead.properties.headers.unwrap();
    let reason = match headers.get("x-death") {
        Some(FieldValue::Array(items)) => match &items[0] {
            FieldValue::Table(t) => t
                .get("reason")
                .and_then(FieldValue::as_str)
                .map(String::from),
            _ => None,
        },
        _ => None,
    };
    assert_eq!(reason.as_deref(), Some("delivery_limit"));
}

#[test]
fn without_a_dead_letter_exchange_a_message_past_the_limit_is_dropped() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    limited(&ch, "work", false, 1, None);
    ch.basic_publish("", "work", false, &BasicProperties::default(), b"m")
        .unwrap();
    nack_requeue(&ch, "work");
    nack_requeue(&ch, "work");
    assert!(ch.basic_get("work", true).unwrap().is_none());
}

#[test]
fn an_invalid_delivery_limit_is_refused_with_406() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let mut args = FieldTable::new();
    args.insert("x-delivery-limit".into(), FieldValue::I64(-1));
    let options = QueueDeclareOptions {
        arguments: args,
        ..QueueDeclareOptions::default()
    };
    let err = ch.queue_declare("bad", options).unwrap_err();
    assert_eq!(err.reply_code(), Some(406), "{err}");
}

#[test]
fn delivery_counts_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    plain(&ch, "dlq", true);
    limited(&ch, "work", true, 2, Some("dlq"));
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    ch.basic_publish("", "work", false, &props, b"m").unwrap();
    nack_requeue(&ch, "work");
    nack_requeue(&ch, "work");
    conn.close().unwrap();
    assert!(server.terminate().success());
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    // Two deliveries before the restart: the first delivery after it still says so, and
    // the third return is past the limit.
    let third = nack_requeue(&ch, "work");
    assert!(third.redelivered);
    assert_eq!(delivery_count(&third), Some(2));
    assert!(ch.basic_get("work", true).unwrap().is_none());
    assert!(
        ch.basic_get("dlq", true).unwrap().is_some(),
        "dead-lettered after the restart"
    );
    conn.close().unwrap();
    assert!(server.terminate().success());
}
