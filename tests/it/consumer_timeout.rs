//! The consumer timeout (issue 4, part 5): a delivery not acked within `x-consumer-timeout`
//! (or the server's `--consumer-timeout-ms`) is requeued with `redelivered = true` and its
//! consumer is cancelled by the server, while the channel stays usable; a late ack of the
//! timed-out delivery is ignored rather than a channel error.
//!
//! Timeouts here are short (hundreds of ms); waits for what must happen are bounded by
//! [`WAIT`], far above them, so a slow machine does not fail the tests.

use crate::common;
use common::connect;

use common::amqp_raw::Raw;
use common::TestServer;
use relaymq::amqp::AmqpMethod;
use relaymq::client::{
    Channel, ClientError, ConsumeOptions, Consumer, ConsumerEvent, Delivery, GetMessage,
    QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::Duration;

/// Longest wait for something that must happen.
const WAIT: Duration = Duration::from_secs(10);

/// How long a test watches for a timeout that must not happen: many times the short
/// server default the tests that turn the timeout off run with.
const QUIET: Duration = Duration::from_millis(1500);

/// A short server default, for the tests that check it applies or is overridden, in ms.
const SHORT_DEFAULT_MS: u64 = 200;

/// Declares `name` with `args` (and `auto_delete`).
fn declare_with(ch: &Channel, name: &str, auto_delete: bool, args: &[(&str, FieldValue)]) {
    let options = QueueDeclareOptions {
        auto_delete,
        arguments: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("queue.declare");
}

/// Declares `name` with `x-consumer-timeout` = `ms`, or without the argument.
fn declare(ch: &Channel, name: &str, timeout_ms: Option<i64>) {
    let args: Vec<(&str, FieldValue)> = timeout_ms
        .map(|ms| ("x-consumer-timeout", FieldValue::I64(ms)))
        .into_iter()
        .collect();
    declare_with(ch, name, false, &args);
}

fn publish(ch: &Channel, queue: &str, body: &[u8]) {
    ch.basic_publish("", queue, false, &BasicProperties::default(), body)
        .expect("publish");
}

fn consume(ch: &Channel, queue: &str, tag: &str) -> Consumer {
    let options = ConsumeOptions {
        consumer_tag: tag.into(),
        ..ConsumeOptions::default()
    };
    ch.basic_consume(queue, options).expect("basic.consume")
}

fn next_delivery(c: &Consumer) -> Delivery {
    match c.recv_timeout(WAIT) {
        Ok(ConsumerEvent::Delivery(d)) => d,
        other => panic!("expected a delivery for {}, got {other:?}", c.tag()),
    }
}

fn expect_server_cancel(c: &Consumer) {
    match c.recv_timeout(WAIT) {
        Ok(ConsumerEvent::Cancelled) => {}
        other => panic!("expected the server to cancel {}, got {other:?}", c.tag()),
    }
}

/// Calls `f` until it returns something, for at most [`WAIT`].
/// Gets the next message of `queue` (manual ack) once there is one.
fn get_eventually(ch: &Channel, queue: &str) -> GetMessage {
    common::eventually(WAIT, &format!("a message in '{queue}'"), || {
        ch.basic_get(queue, false).expect("basic.get")
    })
}

/// Shows the channel is open and serving: a declare, publish and get on it work.
fn assert_usable(ch: &Channel) {
    declare(ch, "probe", None);
    publish(ch, "probe", b"probe");
    let got = ch
        .basic_get("probe", true)
        .expect("basic.get on the channel");
    assert_eq!(got.expect("the probe message").body, b"probe");
}

#[test]
fn a_consumer_that_never_acks_loses_its_delivery_to_another_consumer_and_is_cancelled() {
    let server = TestServer::start();
    let conn_a = connect(&server);
    let ch_a = conn_a.open_channel().unwrap();
    declare(&ch_a, "work", Some(1000));
    let a = consume(&ch_a, "work", "a");
    publish(&ch_a, "work", b"job");
    let first = next_delivery(&a);
    assert_eq!(
        (first.body.as_slice(), first.redelivered),
        (&b"job"[..], false)
    );

    let conn_b = connect(&server);
    let ch_b = conn_b.open_channel().unwrap();
    let b = consume(&ch_b, "work", "b");
    let again = next_delivery(&b);
    assert_eq!(again.body, b"job");
    assert!(again.redelivered, "redelivered after the timeout");
    expect_server_cancel(&a);

    // Only the consumer was cancelled: A's channel serves on.
    assert_usable(&ch_a);
    // Its tag is free again: cancelling it is harmless and it can be reused.
    ch_a.basic_cancel("a")
        .expect("cancel of a timed-out consumer");
    let a_again = consume(&ch_a, "work", "a");
    ch_b.basic_ack(again.delivery_tag, false).unwrap();
    a_again.cancel().unwrap();
    let counts = ch_b
        .queue_declare(
            "work",
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(counts.message_count, 0, "acked by B");
}

#[test]
fn a_late_ack_of_a_timed_out_delivery_is_ignored_not_a_channel_error() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "work", Some(300));
    let c = consume(&ch, "work", "slow");
    publish(&ch, "work", b"job");
    let d = next_delivery(&c);
    expect_server_cancel(&c);

    ch.basic_ack(d.delivery_tag, false).unwrap();
    assert_usable(&ch);
    // The message was requeued, not acked by the late ack.
    let back = get_eventually(&ch, "work");
    assert_eq!(back.body, b"job");
    assert!(back.redelivered);
    ch.basic_ack(back.delivery_tag, false).unwrap();
    assert_usable(&ch);

    // A tag that was never delivered is still a channel error.
    ch.basic_ack(999, false).unwrap();
    match ch.basic_get("work", true) {
        Err(ClientError::ChannelClosed { code: 406, text }) => {
            assert!(text.contains("unknown delivery tag 999"), "{text}")
        }
        other => panic!("expected channel.close 406, got {other:?}"),
    }
}

#[test]
fn the_server_default_applies_to_queues_without_the_argument() {
    let server = TestServer::start_with(|c| c.broker.consumer_timeout_ms = SHORT_DEFAULT_MS);
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "work", None);
    let c = consume(&ch, "work", "slow");
    publish(&ch, "work", b"job");
    next_delivery(&c);
    expect_server_cancel(&c);
    let back = get_eventually(&ch, "work");
    assert_eq!(back.body, b"job");
    assert!(back.redelivered);
}

/// Holds one delivery from `queue` unacked for [`QUIET`]: no cancel may come. Then acks it.
fn assert_no_timeout(ch: &Channel, queue: &str) {
    let c = consume(ch, queue, "patient");
    publish(ch, queue, b"job");
    let d = next_delivery(&c);
    match c.recv_timeout(QUIET) {
        Err(e) if e.is_timeout() => {}
        other => panic!("expected no cancel while the delivery is held, got {other:?}"),
    }
    ch.basic_ack(d.delivery_tag, false).unwrap();
    c.cancel().unwrap();
    let counts = ch
        .queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(counts.message_count, 0, "acked in time, not requeued");
}

#[test]
fn x_consumer_timeout_0_turns_the_timeout_off_for_its_queue() {
    let server = TestServer::start_with(|c| c.broker.consumer_timeout_ms = SHORT_DEFAULT_MS);
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "patient", Some(0));
    assert_no_timeout(&ch, "patient");
    // The short default does apply elsewhere on the same server.
    declare(&ch, "impatient", None);
    let c = consume(&ch, "impatient", "slow");
    publish(&ch, "impatient", b"job");
    next_delivery(&c);
    expect_server_cancel(&c);
}

#[test]
fn a_server_default_of_0_turns_the_timeout_off() {
    let server = TestServer::start_with(|c| c.broker.consumer_timeout_ms = 0);
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "work", None);
    assert_no_timeout(&ch, "work");
}

#[test]
fn a_basic_get_delivery_not_acked_in_time_is_requeued() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch_a = conn.open_channel().unwrap();
    let ch_b = conn.open_channel().unwrap();
    declare(&ch_a, "work", Some(300));
    publish(&ch_a, "work", b"job");
    let first = ch_a.basic_get("work", false).unwrap().expect("the message");
    assert!(!first.redelivered);
    let back = get_eventually(&ch_b, "work");
    assert_eq!(back.body, b"job");
    assert!(back.redelivered, "requeued after the timeout");
    ch_a.basic_ack(first.delivery_tag, false).unwrap();
    assert_usable(&ch_a);
    ch_b.basic_ack(back.delivery_tag, false).unwrap();
    assert_usable(&ch_b);
}

#[test]
fn an_auto_delete_queue_whose_last_consumer_times_out_is_deleted() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare_with(
        &ch,
        "temp",
        true,
        &[("x-consumer-timeout", FieldValue::I64(300))],
    );
    let c = consume(&ch, "temp", "only");
    publish(&ch, "temp", b"job");
    next_delivery(&c);
    expect_server_cancel(&c);
    common::eventually(WAIT, "the auto-delete queue deleted", || {
        let probe = conn.open_channel().unwrap();
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        match probe.queue_declare("temp", passive) {
            Err(e) if e.reply_code() == Some(404) => Some(()),
            Ok(_) => None,
            Err(e) => panic!("passive declare: {e}"),
        }
    });
    assert_usable(&ch);
}

#[test]
fn a_timed_out_delivery_past_its_delivery_limit_is_dead_lettered() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", None);
    declare_with(
        &ch,
        "work",
        false,
        &[
            ("x-consumer-timeout", FieldValue::I64(300)),
            ("x-delivery-limit", FieldValue::I64(0)),
            ("x-dead-letter-exchange", FieldValue::string("")),
            ("x-dead-letter-routing-key", FieldValue::string("dlq")),
        ],
    );
    let c = consume(&ch, "work", "slow");
    publish(&ch, "work", b"poison");
    next_delivery(&c);
    expect_server_cancel(&c);
    let dead = get_eventually(&ch, "dlq");
    assert_eq!(dead.body, b"poison");
    let reason = match dead
        .properties
        .headers
        .as_ref()
        .and_then(|h| h.get("x-death"))
    {
        Some(FieldValue::Array(items)) => match items.first() {
            Some(FieldValue::Table(t)) => t.get("reason").and_then(FieldValue::as_str),
            _ => None,
        },
        _ => None,
    };
    assert_eq!(reason, Some("delivery_limit"));
    assert!(
        ch.basic_get("work", true).unwrap().is_none(),
        "not requeued"
    );
}

#[test]
fn an_invalid_x_consumer_timeout_is_refused_with_406_naming_it_and_a_valid_one_accepted() {
    let server = TestServer::start();
    let conn = connect(&server);
    for bad in [FieldValue::string("1000"), FieldValue::I64(-1)] {
        let ch = conn.open_channel().unwrap();
        let options = QueueDeclareOptions {
            arguments: FieldTable::from([("x-consumer-timeout".to_string(), bad.clone())]),
            ..QueueDeclareOptions::default()
        };
        let err = ch.queue_declare("bad", options).unwrap_err();
        assert_eq!(err.reply_code(), Some(406), "{bad:?}: {err}");
        let text = err.reply_text().unwrap_or_default();
        assert!(text.contains("'x-consumer-timeout'"), "{bad:?}: {text}");
    }
    // A valid one is accepted (it was refused as unsupported before it was implemented).
    let ch = conn.open_channel().unwrap();
    declare(&ch, "good", Some(1000));
}

/// An AMQP 0-9-1 connection consuming `queue` on channel 1 with manual acks (tag `c`),
/// announcing `capabilities` in `connection.start-ok`; returns it once the first delivery
/// arrived.
fn amqp_consumer_with_a_delivery(server: &TestServer, queue: &str, capabilities: &[&str]) -> Raw {
    let addr = server.handle.amqp_addr().expect("AMQP listener");
    let mut r = Raw::open_with_capabilities(addr, capabilities);
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(
        1,
        &AmqpMethod::BasicConsume {
            queue: queue.into(),
            consumer_tag: "c".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::BasicConsumeOk { .. }))
    ));
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::BasicDeliver { .. }))
    ));
    r
}

#[test]
fn an_amqp_client_without_consumer_cancel_notify_has_its_channel_closed_with_rabbitmqs_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "work", Some(300));
    publish(&ch, "work", b"job");
    let mut r = amqp_consumer_with_a_delivery(&server, "work", &[]);
    match r.recv() {
        Some((
            1,
            AmqpMethod::ChannelClose {
                reply_code,
                reply_text,
                ..
            },
        )) => {
            assert_eq!(reply_code, 406);
            assert_eq!(
                reply_text,
                "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout \
                 value used: 300 ms. This timeout value can be configured, see consumers doc \
                 guide to learn more"
            );
        }
        other => panic!("expected channel.close 406, got {other:?}"),
    }
    // The channel's delivery went back to the queue; the connection serves on.
    let again = get_eventually(&ch, "work");
    assert!(again.redelivered);
    r.method(1, &AmqpMethod::ChannelCloseOk {});
    r.method(2, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((2, AmqpMethod::ChannelOpenOk {}))));
}

#[test]
fn an_amqp_client_with_consumer_cancel_notify_gets_basic_cancel_and_keeps_its_channel() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "work", Some(300));
    publish(&ch, "work", b"job");
    let mut r = amqp_consumer_with_a_delivery(&server, "work", &["consumer_cancel_notify"]);
    match r.recv() {
        Some((1, AmqpMethod::BasicCancel { consumer_tag, .. })) => assert_eq!(consumer_tag, "c"),
        other => panic!("expected basic.cancel, got {other:?}"),
    }
    r.method(
        1,
        &AmqpMethod::BasicQos {
            prefetch_size: 0,
            prefetch_count: 1,
            global: false,
        },
    );
    assert!(matches!(r.recv(), Some((1, AmqpMethod::BasicQosOk {}))));
}
