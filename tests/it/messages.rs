//! Messages end to end: every basic property, empty, binary and large bodies, non-ASCII
//! names, all byte-exact through both `basic.consume` and `basic.get`; and the body size
//! limit (406 on the channel, the connection survives).

use crate::common;
use common::connect;

use common::TestServer;
use relaymq::client::{
    Channel, ClientError, ConsumeOptions, ConsumerEvent, Delivery, GetMessage, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn declare(ch: &Channel, name: &str) {
    ch.queue_declare(name, QueueDeclareOptions::default())
        .expect("declare");
}

/// Publishes to `queue` through the default exchange and takes it back with `basic.get`.
fn via_get(ch: &Channel, queue: &str, props: &BasicProperties, body: &[u8]) -> GetMessage {
    ch.basic_publish("", queue, false, props, body)
        .expect("publish");
    let m = ch.basic_get(queue, true).expect("get").expect("a message");
    assert_eq!(m.message_count, 0);
    m
}

/// Publishes to `queue` through the default exchange and receives it with a consumer.
fn via_consume(ch: &Channel, queue: &str, props: &BasicProperties, body: &[u8]) -> Delivery {
    let consumer = ch
        .basic_consume(queue, ConsumeOptions::default())
        .expect("consume");
    ch.basic_publish("", queue, false, props, body)
        .expect("publish");
    let d = match consumer.recv_timeout(WAIT).expect("delivery") {
        ConsumerEvent::Delivery(d) => d,
        other => panic!("expected a delivery, got {other:?}"),
    };
    ch.basic_ack(d.delivery_tag, false).expect("ack");
    consumer.cancel().expect("cancel");
    d
}

/// Sends `body` with `props` both ways through `queue` and checks both copies are exact.
fn assert_round_trips(queue: &str, props: &BasicProperties, body: &[u8]) {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, queue);
    let got = via_get(&ch, queue, props, body);
    assert_eq!(got.routing_key, queue);
    assert_eq!(got.exchange, "");
    assert_eq!(&got.properties, props);
    assert!(
        got.body == body,
        "get: body differs ({} bytes)",
        got.body.len()
    );
    let delivered = via_consume(&ch, queue, props, body);
    assert_eq!(delivered.routing_key, queue);
    assert_eq!(delivered.exchange, "");
    assert!(!delivered.redelivered);
    assert_eq!(&delivered.properties, props);
    assert!(
        delivered.body == body,
        "consume: body differs ({} bytes)",
        delivered.body.len()
    );
    assert_eq!(
        ch.queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            }
        )
        .unwrap()
        .message_count,
        0
    );
}

fn every_property() -> BasicProperties {
    let nested: FieldTable = [
        ("inner-string".to_string(), FieldValue::string("ünïcødé")),
        ("inner-i64".to_string(), FieldValue::I64(-1)),
        (
            "deeper".to_string(),
            FieldValue::Table(
                [("leaf".to_string(), FieldValue::Bool(false))]
                    .into_iter()
                    .collect(),
            ),
        ),
    ]
    .into_iter()
    .collect();
    let headers: FieldTable = [
        ("bool", FieldValue::Bool(true)),
        ("i8", FieldValue::I8(-128)),
        ("u8", FieldValue::U8(255)),
        ("i16", FieldValue::I16(-32768)),
        ("u16", FieldValue::U16(65535)),
        ("i32", FieldValue::I32(i32::MIN)),
        ("u32", FieldValue::U32(u32::MAX)),
        ("i64", FieldValue::I64(i64::MIN)),
        ("f32", FieldValue::F32(1.5)),
        ("f64", FieldValue::F64(-2.25e300)),
        ("decimal", FieldValue::Decimal(2, 31415)),
        ("string", FieldValue::string("text")),
        (
            "binary-string",
            FieldValue::LongString(vec![0, 0xff, 0xfe, 0]),
        ),
        ("bytes", FieldValue::Bytes(vec![0, 1, 2, 0, 255])),
        (
            "array",
            FieldValue::Array(vec![
                FieldValue::I32(1),
                FieldValue::string("two"),
                FieldValue::Array(vec![FieldValue::Void]),
                FieldValue::Table(nested.clone()),
            ]),
        ),
        ("timestamp", FieldValue::Timestamp(1_700_000_000)),
        ("table", FieldValue::Table(nested)),
        ("void", FieldValue::Void),
        ("empty-array", FieldValue::Array(Vec::new())),
        ("empty-table", FieldValue::Table(FieldTable::new())),
        ("ключ", FieldValue::string("значение")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    BasicProperties {
        content_type: Some("application/json".into()),
        content_encoding: Some("gzip".into()),
        headers: Some(headers),
        delivery_mode: Some(2),
        priority: Some(9),
        correlation_id: Some("corr-42".into()),
        reply_to: Some("amq.gen-replies".into()),
        expiration: Some("60000".into()),
        message_id: Some("msg-ü-1".into()),
        timestamp: Some(1_700_000_123),
        kind: Some("order.created".into()),
        user_id: Some("guest".into()),
        app_id: Some("relaymq-tests".into()),
        cluster_id: None,
    }
}

#[test]
fn every_basic_property_round_trips() {
    assert_round_trips("props", &every_property(), b"with every property");
}

#[test]
fn absent_properties_stay_absent() {
    let sparse = BasicProperties {
        message_id: Some("only this".into()),
        ..BasicProperties::default()
    };
    assert_round_trips("sparse", &sparse, b"m");
    assert_round_trips("none", &BasicProperties::default(), b"m");
}

#[test]
fn an_empty_header_table_is_kept_distinct_from_no_headers() {
    let empty = BasicProperties {
        headers: Some(FieldTable::new()),
        ..BasicProperties::default()
    };
    assert_round_trips("empty-headers", &empty, b"m");
}

#[test]
fn an_empty_body_round_trips() {
    assert_round_trips("empty", &BasicProperties::default(), b"");
}

#[test]
fn a_body_with_nul_bytes_round_trips() {
    let body: Vec<u8> = vec![0, 0, b'a', 0, 0xff, 0, b'\n', 0, 0];
    assert_round_trips("nul", &BasicProperties::default(), &body);
    let all_bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    assert_round_trips("all-bytes", &BasicProperties::default(), &all_bytes);
}

#[test]
fn a_10_mib_body_round_trips_in_several_frames() {
    let body: Vec<u8> = (0..10 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let server = TestServer::start();
    let conn = connect(&server);
    assert!(
        (conn.frame_max() as usize) * 4 < body.len(),
        "the body must need many frames"
    );
    drop(conn);
    assert_round_trips("big", &every_property(), &body);
}

#[test]
fn a_non_ascii_queue_name_round_trips() {
    let props = BasicProperties {
        reply_to: Some("ответ.🐇".into()),
        ..BasicProperties::default()
    };
    assert_round_trips("очередь.キュー.🐇", &props, "тело".as_bytes());
}

fn small_limit_server(max: usize) -> TestServer {
    TestServer::start_with(|c| c.broker.limits.message_bytes_max = max)
}

/// Publishes an oversized body and checks the refusal and that nothing else broke.
fn assert_oversized_refused(body_len: usize) {
    const MAX: usize = 1024;
    let server = small_limit_server(MAX);
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "limited");
    let props = BasicProperties::default();
    ch.basic_publish("", "limited", false, &props, &vec![7u8; body_len])
        .unwrap();
    // The refusal closes the channel; the next request on it reports it.
    match ch.basic_get("limited", true) {
        Err(ClientError::ChannelClosed { code: 406, text }) => {
            assert!(text.contains(&MAX.to_string()), "{text}")
        }
        other => panic!("expected channel.close 406, got {other:?}"),
    }
    assert!(!ch.is_open());
    assert!(conn.is_open());
    // The connection goes on: the queue is empty, a body of exactly the limit is taken.
    let ch = conn.open_channel().unwrap();
    assert!(ch.basic_get("limited", true).unwrap().is_none());
    let at_limit = vec![8u8; MAX];
    let got = via_get(&ch, "limited", &props, &at_limit);
    assert_eq!(got.body, at_limit);
}

#[test]
fn a_body_one_byte_over_the_maximum_is_refused_with_406_and_the_connection_survives() {
    assert_oversized_refused(1025);
}

#[test]
fn a_body_far_over_the_maximum_is_refused_with_406_and_the_connection_survives() {
    // Larger than the limit plus any properties: the server refuses it while reading,
    // without assembling it.
    assert_oversized_refused(3 * 1024 * 1024);
}
