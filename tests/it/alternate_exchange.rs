//! The exchange argument `alternate-exchange` (RabbitMQ's extension): a message the
//! exchange's own bindings do not match goes to the alternate exchange, which may have its
//! own. Needed to import real RabbitMQ definitions (issue 8 part 5).

use crate::common;

use common::TestServer;
use relaymq::client::{Channel, ClientError, Connection, ExchangeDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::{Duration, Instant};

fn exchange(ch: &Channel, name: &str, kind: &str, ae: Option<&str>) {
    let mut arguments = FieldTable::new();
    if let Some(ae) = ae {
        arguments.insert("alternate-exchange".into(), FieldValue::string(ae));
    }
    ch.exchange_declare(
        name,
        kind,
        ExchangeDeclareOptions {
            arguments,
            ..Default::default()
        },
    )
    .unwrap();
}

fn queue(ch: &Channel, name: &str, exchange: &str, key: &str) {
    ch.queue_declare(name, Default::default()).unwrap();
    ch.queue_bind(name, exchange, key, FieldTable::new())
        .unwrap();
}

fn publish(ch: &Channel, exchange: &str, key: &str, body: &str) {
    ch.basic_publish(
        exchange,
        key,
        false,
        &BasicProperties::default(),
        body.as_bytes(),
    )
    .unwrap();
}

/// The bodies in `queue` after the publishes settle (a `basic.get` round trip orders them).
fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).unwrap() {
        out.push(String::from_utf8(m.body).unwrap());
    }
    out
}

#[test]
fn unmatched_messages_go_to_the_alternate_exchange_and_its_own() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    exchange(&ch, "last", "fanout", None);
    exchange(&ch, "parking", "direct", Some("last"));
    exchange(&ch, "in", "direct", Some("parking"));
    exchange(&ch, "fan-target", "direct", None);
    queue(&ch, "main", "in", "main");
    queue(&ch, "parked", "parking", "park");
    queue(&ch, "lost", "last", "");
    ch.exchange_bind("fan-target", "in", "to-exchange", FieldTable::new())
        .unwrap();

    publish(&ch, "in", "main", "matched");
    publish(&ch, "in", "park", "unmatched, matched by the alternate");
    publish(&ch, "in", "nobody", "unmatched twice");
    // A binding to an exchange matched: the alternate is not used even though that
    // exchange routes nowhere (RabbitMQ's rule: only when the bindings match nothing).
    publish(&ch, "in", "to-exchange", "matched an exchange");
    let deadline = Instant::now() + Duration::from_secs(10);
    while ch
        .queue_declare("lost", Default::default())
        .unwrap()
        .message_count
        < 1
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(bodies(&ch, "main"), ["matched"]);
    assert_eq!(
        bodies(&ch, "parked"),
        ["unmatched, matched by the alternate"]
    );
    assert_eq!(bodies(&ch, "lost"), ["unmatched twice"]);
}

#[test]
fn a_cycle_of_alternates_ends_and_a_bad_value_is_refused() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    exchange(&ch, "a", "direct", Some("b"));
    exchange(&ch, "b", "direct", Some("a"));
    publish(&ch, "a", "k", "dropped");
    // Still serving: the cycle did not hang the publish path.
    ch.queue_declare("probe", Default::default()).unwrap();

    let mut arguments = FieldTable::new();
    arguments.insert("alternate-exchange".into(), FieldValue::I64(5));
    let err = ch
        .exchange_declare(
            "bad",
            "direct",
            ExchangeDeclareOptions {
                arguments,
                ..Default::default()
            },
        )
        .unwrap_err();
    match err {
        ClientError::ChannelClosed { code: 406, text } => {
            assert!(text.contains("alternate-exchange"), "{text}")
        }
        other => panic!("expected 406, got {other:?}"),
    }
}
