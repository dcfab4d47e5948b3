//! Queue length limits (issue 4, part 3; dead-lettering of what they drop is tested in
//! tests/it/dead_letter.rs): `x-max-length` and
//! `x-max-length-bytes` with `x-overflow` `drop-head` (default) and `reject-publish`, as
//! RabbitMQ applies them: only ready messages count, checked on publish.

use crate::common;

use common::{ServerProcess, TestServer};
use relaymq::client::{Channel, Connection, ConsumeOptions, ConsumerEvent, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::Duration;

fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).unwrap() {
        out.push(String::from_utf8(m.body).unwrap());
        assert!(out.len() < 100);
    }
    out
}

fn publish(ch: &Channel, queue: &str, body: &str, persistent: bool) {
    let props = BasicProperties {
        delivery_mode: persistent.then_some(2),
        ..BasicProperties::default()
    };
    ch.basic_publish("", queue, false, &props, body.as_bytes())
        .unwrap();
}

#[test]
fn drop_head_keeps_the_newest_messages() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "dh", false, &[("x-max-length", FieldValue::I64(3))]);
    for i in 1..=5 {
        publish(&ch, "dh", &i.to_string(), false);
    }
    assert_eq!(bodies(&ch, "dh"), ["3", "4", "5"]);
}

#[test]
fn reject_publish_nacks_what_does_not_fit_and_keeps_the_oldest() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(
        &ch,
        "rp",
        false,
        &[
            ("x-max-length", FieldValue::I64(3)),
            ("x-overflow", FieldValue::string("reject-publish")),
        ],
    );
    ch.confirm_select().unwrap();
    let mut acked = Vec::new();
    for i in 1..=5 {
        publish(&ch, "rp", &i.to_string(), false);
        acked.push(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    }
    assert_eq!(acked, [true, true, true, false, false]);
    assert_eq!(bodies(&ch, "rp"), ["1", "2", "3"]);
}

#[test]
fn a_byte_limit_counts_body_bytes() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(
        &ch,
        "bytes",
        false,
        &[("x-max-length-bytes", FieldValue::I64(10))],
    );
    for body in ["aaaa", "bbbb", "cccc", "dddd"] {
        publish(&ch, "bytes", body, false);
    }
    assert_eq!(bodies(&ch, "bytes"), ["cccc", "dddd"]);
}

#[test]
fn only_ready_messages_count_toward_the_limit() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "ready", false, &[("x-max-length", FieldValue::I64(2))]);
    let consumer_ch = conn.open_channel().unwrap();
    consumer_ch.basic_qos(2, false).unwrap();
    let consumer = consumer_ch
        .basic_consume("ready", ConsumeOptions::default())
        .unwrap();
    for i in 1..=4 {
        publish(&ch, "ready", &i.to_string(), false);
    }
    for expected in ["1", "2"] {
        match consumer.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConsumerEvent::Delivery(d) => assert_eq!(d.body, expected.as_bytes()),
            other => panic!("{other:?}"),
        }
    }
    consumer.cancel().unwrap();
    // Two unacked with the consumer, two ready: nothing was dropped.
    assert_eq!(bodies(&ch, "ready"), ["3", "4"]);
}

#[test]
fn invalid_limits_are_refused_with_406() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    for (i, args) in [
        vec![("x-max-length", FieldValue::I64(-1))],
        vec![("x-max-length-bytes", FieldValue::string("ten"))],
        vec![("x-overflow", FieldValue::string("drop-tail"))],
    ]
    .into_iter()
    .enumerate()
    {
        let ch = conn.open_channel().unwrap();
        let options = QueueDeclareOptions {
            arguments: args
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect::<FieldTable>(),
            ..QueueDeclareOptions::default()
        };
        let err = ch.queue_declare(&format!("bad{i}"), options).unwrap_err();
        assert_eq!(err.reply_code(), Some(406), "{err}");
    }
}

#[test]
fn messages_dropped_from_a_durable_queue_stay_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(
        &ch,
        "durable.dh",
        true,
        &[("x-max-length", FieldValue::I64(2))],
    );
    ch.confirm_select().unwrap();
    for i in 1..=4 {
        publish(&ch, "durable.dh", &i.to_string(), true);
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    conn.close().unwrap();
    assert!(server.terminate().success());
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    assert_eq!(bodies(&ch, "durable.dh"), ["3", "4"]);
    // The limit itself survived the restart with the queue's arguments.
    for i in 5..=7 {
        publish(&ch, "durable.dh", &i.to_string(), true);
    }
    assert_eq!(bodies(&ch, "durable.dh"), ["6", "7"]);
    conn.close().unwrap();
    assert!(server.terminate().success());
}
