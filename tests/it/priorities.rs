//! Priority queues (issue 4, part 6): with `x-max-priority`, higher-priority messages are
//! delivered first, FIFO within a priority; priorities above the maximum count as the
//! maximum; a durable priority queue recovers in the same order.

use crate::common;

use common::{ServerProcess, TestServer};
use relaymq::client::{Channel, Connection, ConsumeOptions, ConsumerEvent, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::Duration;

fn declare(ch: &Channel, name: &str, durable: bool, max_priority: Option<FieldValue>) {
    let mut arguments = FieldTable::new();
    if let Some(p) = max_priority {
        arguments.insert("x-max-priority".into(), p);
    }
    let options = QueueDeclareOptions {
        durable,
        arguments,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

/// Publishes `(body, priority)` pairs to `queue`.
fn publish(ch: &Channel, queue: &str, messages: &[(&str, Option<u8>)], persistent: bool) {
    for (body, priority) in messages {
        let props = BasicProperties {
            priority: *priority,
            delivery_mode: persistent.then_some(2),
            ..BasicProperties::default()
        };
        ch.basic_publish("", queue, false, &props, body.as_bytes())
            .expect("publish");
    }
}

fn drain(ch: &Channel, queue: &str) -> Vec<String> {
    std::iter::from_fn(|| ch.basic_get(queue, true).expect("get"))
        .map(|m| String::from_utf8(m.body).expect("utf-8"))
        .collect()
}

const MIXED: [(&str, Option<u8>); 7] = [
    ("p1-a", Some(1)),
    ("p9-a", Some(9)),
    ("none", None),
    ("p5", Some(5)),
    ("p9-b", Some(9)),
    ("p1-b", Some(1)),
    ("p0", Some(0)),
];

const EXPECTED: [&str; 7] = ["p9-a", "p9-b", "p5", "p1-a", "p1-b", "none", "p0"];

#[test]
fn higher_priorities_first_fifo_within_a_priority() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "pq", false, Some(FieldValue::U8(10)));
    publish(&ch, "pq", &MIXED, false);
    assert_eq!(drain(&ch, "pq"), EXPECTED);

    // Without x-max-priority the priority property is ignored: plain FIFO.
    declare(&ch, "plain", false, None);
    publish(&ch, "plain", &MIXED, false);
    let fifo: Vec<&str> = MIXED.iter().map(|(b, _)| *b).collect();
    assert_eq!(drain(&ch, "plain"), fifo);
}

#[test]
fn a_consumer_gets_nine_before_one_and_requeues_keep_the_order() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "pq", false, Some(FieldValue::I64(9)));
    publish(&ch, "pq", &[("one", Some(1)), ("nine", Some(9))], false);
    // A nacked 9 goes back ahead of the 1.
    let nine = ch.basic_get("pq", false).unwrap().expect("message");
    assert_eq!(nine.body, b"nine");
    ch.basic_nack(nine.delivery_tag, false, true).unwrap();

    ch.basic_qos(1, false).unwrap();
    let consumer = ch.basic_consume("pq", ConsumeOptions::default()).unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        match consumer.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConsumerEvent::Delivery(d) => {
                got.push((String::from_utf8(d.body).unwrap(), d.redelivered));
                ch.basic_ack(d.delivery_tag, false).unwrap();
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        got,
        [("nine".to_string(), true), ("one".to_string(), false)]
    );
}

#[test]
fn priorities_above_the_maximum_count_as_the_maximum() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "pq", false, Some(FieldValue::I64(3)));
    publish(
        &ch,
        "pq",
        &[("p3", Some(3)), ("p200", Some(200)), ("p2", Some(2))],
        false,
    );
    assert_eq!(drain(&ch, "pq"), ["p3", "p200", "p2"]);
}

#[test]
fn invalid_max_priorities_are_refused_with_406() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    for value in [
        FieldValue::I64(256),
        FieldValue::I64(-1),
        FieldValue::string("10"),
    ] {
        let ch = conn.open_channel().unwrap();
        let mut arguments = FieldTable::new();
        arguments.insert("x-max-priority".into(), value.clone());
        let err = ch
            .queue_declare(
                "pq",
                QueueDeclareOptions {
                    arguments,
                    ..QueueDeclareOptions::default()
                },
            )
            .unwrap_err();
        assert_eq!(err.reply_code(), Some(406), "{value:?}: {err}");
        assert!(err.to_string().contains("x-max-priority"), "{err}");
    }
    // The limits themselves are fine; 0 is a queue with one priority, as in RabbitMQ.
    let ch = conn.open_channel().unwrap();
    declare(&ch, "p0", false, Some(FieldValue::I64(0)));
    declare(&ch, "p255", false, Some(FieldValue::I64(255)));
    publish(&ch, "p0", &[("a", Some(1)), ("b", Some(9))], false);
    assert_eq!(drain(&ch, "p0"), ["a", "b"]);
}

#[test]
fn a_durable_priority_queue_recovers_in_the_same_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "pq", true, Some(FieldValue::I64(10)));
    publish(&ch, "pq", &MIXED, true);
    conn.close().unwrap();
    assert!(server.terminate().success());

    // Once with bodies in memory, once with every body paged out.
    for budget in ["64MiB", "0"] {
        let server = ServerProcess::start(&data, &["--queue-memory-bytes", budget]);
        let conn = Connection::connect(&server.addr_string()).unwrap();
        let ch = conn.open_channel().unwrap();
        let got: Vec<String> = std::iter::from_fn(|| ch.basic_get("pq", false).unwrap())
            .map(|m| String::from_utf8(m.body).unwrap())
            .collect();
        assert_eq!(got, EXPECTED, "budget {budget}");
        // Not acked: the channel closes and they go back for the next round.
        conn.close().unwrap();
        assert!(server.terminate().success());
    }
}

#[test]
fn a_full_priority_queue_drops_its_lowest_priority_first() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let mut arguments = FieldTable::new();
    arguments.insert("x-max-priority".into(), FieldValue::I64(9));
    arguments.insert("x-max-length".into(), FieldValue::I64(2));
    let options = QueueDeclareOptions {
        arguments,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("pq", options).unwrap();
    publish(
        &ch,
        "pq",
        &[
            ("p9", Some(9)),
            ("p1", Some(1)),
            ("p5", Some(5)),
            ("p1-late", Some(1)),
        ],
        false,
    );
    // drop-head drops the oldest message of the lowest priority, keeping the urgent ones.
    assert_eq!(drain(&ch, "pq"), ["p9", "p5"]);
}
