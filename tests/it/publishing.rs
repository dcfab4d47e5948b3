//! Publishing with RabbitMQ's semantics: missing and internal exchanges, mandatory
//! returns, publisher confirms, and what a batch does when one of its messages fails.
//! Frame order (return before confirm, confirm before channel.close) is observed with raw
//! frames; the rest goes through the client library.

use crate::common;
use common::connect;

use common::{Raw, TestServer};
use relaymq::client::{
    Channel, ClientError, Connection, ExchangeDeclareOptions, PublishMessage, QueueDeclareOptions,
};
use relaymq::native::Method;
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(queue, QueueDeclareOptions::default())
        .expect("queue.declare");
}

/// Ready messages of `queue` (a passive declare on a fresh channel).
fn ready_count(conn: &Connection, queue: &str) -> u32 {
    let ch = conn.open_channel().unwrap();
    ch.queue_declare(
        queue,
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
    )
    .expect("passive declare")
    .message_count
}

fn message(exchange: &str, routing_key: &str, body: &str) -> PublishMessage {
    PublishMessage {
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory: false,
        properties: BasicProperties::default(),
        body: body.as_bytes().to_vec(),
    }
}

fn expect_channel_closed(result: Result<impl std::fmt::Debug, ClientError>, code: u16) -> String {
    match result {
        Err(ClientError::ChannelClosed { code: c, text }) if c == code => text,
        other => panic!("expected channel.close {code}, got {other:?}"),
    }
}

#[test]
fn publishing_to_a_missing_exchange_closes_the_channel_with_404() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.basic_publish(
        "no-such-exchange",
        "k",
        false,
        &BasicProperties::default(),
        b"x",
    )
    .unwrap();
    let text = expect_channel_closed(ch.basic_qos(0, false), 404);
    assert_eq!(text, "no exchange 'no-such-exchange' in vhost '/'");
    assert!(conn.is_open(), "a channel error leaves the connection open");
    declare(&conn.open_channel().unwrap(), "still-works");
}

#[test]
fn an_unroutable_mandatory_message_comes_back_with_312_no_route_body_and_properties() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let mut headers = FieldTable::new();
    headers.insert("trace".into(), FieldValue::string("abc"));
    let props = BasicProperties {
        content_type: Some("text/plain".into()),
        message_id: Some("id-7".into()),
        delivery_mode: Some(2),
        headers: Some(headers),
        ..Default::default()
    };
    ch.basic_publish("amq.direct", "nobody-listens", true, &props, b"lost?")
        .unwrap();

    let returned = ch.returns().recv_timeout(WAIT).expect("basic.return");
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.reply_text, "NO_ROUTE");
    assert_eq!(returned.exchange, "amq.direct");
    assert_eq!(returned.routing_key, "nobody-listens");
    assert_eq!(returned.properties, props);
    assert_eq!(returned.body, b"lost?");
    assert!(ch.is_open());
}

#[test]
fn an_unroutable_message_without_mandatory_is_dropped_silently() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let props = BasicProperties::default();
    ch.basic_publish("", "nowhere", false, &props, b"first")
        .unwrap();
    assert!(
        ch.wait_for_confirms(WAIT).unwrap(),
        "a dropped message is still confirmed"
    );
    // Returns arrive in publish order: once the mandatory one is back, a return for the
    // first one would have come before it.
    ch.basic_publish("", "nowhere", true, &props, b"second")
        .unwrap();
    let returned = ch.returns().recv_timeout(WAIT).expect("basic.return");
    assert_eq!(returned.body, b"second");
    assert!(ch.returns().try_recv().is_err());
    assert!(ch.is_open());
}

#[test]
fn publisher_confirms_acknowledge_every_one_of_1000_messages() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "confirmed");
    ch.confirm_select().unwrap();
    for i in 0..1000 {
        ch.basic_publish(
            "",
            "confirmed",
            false,
            &BasicProperties::default(),
            format!("m{i}").as_bytes(),
        )
        .unwrap();
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(60)).unwrap());
    assert_eq!(ready_count(&conn, "confirmed"), 1000);
}

#[test]
fn a_failing_message_in_a_publish_frame_confirms_the_ones_before_it_and_discards_the_rest() {
    const N: usize = 10;
    const K: usize = 6; // 1-based position of the message sent to a missing exchange
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    common::raw_channel_with_queue(&mut raw, 1, "batch");
    assert_eq!(raw.call(1, Method::ConfirmSelect).2, Method::Ok);

    let messages = (1..=N)
        .map(|i| {
            let exchange = if i == K { "missing" } else { "" };
            message(exchange, "batch", &format!("m{i}"))
        })
        .collect();
    raw.send(1, 77, &Method::Publish { messages });

    let (ch, rid, ack) = raw.recv().expect("confirm");
    assert_eq!((ch, rid), (1, 0), "a confirm is a push");
    assert_eq!(
        ack,
        Method::Ack {
            delivery_tag: (K - 1) as u64,
            multiple: true
        }
    );
    let (ch, rid, close) = raw.recv().expect("channel.close");
    assert_eq!(
        (ch, rid),
        (1, 77),
        "the close carries the publish's request id"
    );
    assert!(
        matches!(
            close,
            Method::ChannelClose { reply_code: 404, ref reply_text, method_id: 0x0054 }
                if reply_text == "no exchange 'missing' in vhost '/'"
        ),
        "{close:?}"
    );
    raw.send(1, 0, &Method::CloseOk);

    assert_eq!(raw.call(2, Method::ChannelOpen).2, Method::Ok);
    let (_, _, declared) = raw.call(
        2,
        Method::QueueDeclare {
            queue: "batch".into(),
            passive: true,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(
        matches!(declared, Method::QueueDeclareOk { message_count, .. } if message_count == (K - 1) as u32),
        "{declared:?}"
    );
}

#[test]
fn publish_batch_stops_at_a_message_for_a_missing_exchange_and_keeps_the_earlier_ones() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "batch");
    ch.confirm_select().unwrap();
    let messages: Vec<PublishMessage> = (1..=10)
        .map(|i| {
            message(
                if i == 4 { "missing" } else { "" },
                "batch",
                &format!("m{i}"),
            )
        })
        .collect();
    ch.publish_batch(&messages).unwrap();

    let text = expect_channel_closed(ch.wait_for_confirms(WAIT), 404);
    assert!(text.contains("no exchange 'missing'"), "{text}");
    let check = conn.open_channel().unwrap();
    let mut got = Vec::new();
    while let Some(m) = check.basic_get("batch", true).unwrap() {
        got.push(String::from_utf8(m.body).unwrap());
    }
    assert_eq!(got, ["m1", "m2", "m3"]);
}

#[test]
fn under_confirms_the_return_of_a_mandatory_unroutable_message_precedes_its_ack() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    assert_eq!(raw.call(1, Method::ConfirmSelect).2, Method::Ok);
    let mut m = message("", "nowhere", "bounce");
    m.mandatory = true;
    raw.send(1, 0, &Method::Publish { messages: vec![m] });

    let (_, _, first) = raw.recv().expect("frame");
    assert!(
        matches!(first, Method::Return { reply_code: 312, ref body, .. } if body == b"bounce"),
        "expected basic.return first, got {first:?}"
    );
    let (_, _, second) = raw.recv().expect("frame");
    assert_eq!(
        second,
        Method::Ack {
            delivery_tag: 1,
            multiple: true
        }
    );
}

#[test]
fn publishing_to_an_internal_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare(
        "inner",
        "fanout",
        ExchangeDeclareOptions {
            internal: true,
            ..Default::default()
        },
    )
    .unwrap();
    declare(&ch, "behind");
    ch.queue_bind("behind", "inner", "", FieldTable::new())
        .unwrap();

    ch.basic_publish("inner", "", false, &BasicProperties::default(), b"x")
        .unwrap();
    let text = expect_channel_closed(ch.basic_qos(0, false), 403);
    assert_eq!(
        text,
        "cannot publish to internal exchange 'inner' in vhost '/'"
    );
    assert_eq!(ready_count(&conn, "behind"), 0);
}

#[test]
fn a_user_id_that_is_not_the_authenticated_user_is_refused_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "u");
    let as_user = |u: &str| BasicProperties {
        user_id: Some(u.into()),
        ..BasicProperties::default()
    };
    ch.basic_publish("", "u", false, &as_user("guest"), b"mine")
        .unwrap();
    ch.basic_publish("", "u", false, &as_user("bob"), b"forged")
        .unwrap();
    let err = ch.basic_get("u", true).unwrap_err();
    assert_eq!(err.reply_code(), Some(406), "{err}");
    assert!(
        err.to_string()
            .contains("user_id property set to 'bob' but authenticated user was 'guest'"),
        "{err}"
    );
    assert_eq!(
        ready_count(&conn, "u"),
        1,
        "only the valid one was published"
    );
}
