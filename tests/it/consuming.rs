//! Consuming with RabbitMQ's semantics, through the client library: round-robin between
//! consumers, prefetch (per consumer and per channel), acknowledgements, nack/reject/recover
//! and requeueing, cancel, exclusive consumers, consumer tags, `basic.get` and delivery tags.
//!
//! Negative checks ("nothing more arrives") first make a round trip on the consumer's own
//! connection: the server writes everything it dispatched before the reply, and the client
//! routes frames in order, so once the round trip returns any delivery the server sent is
//! already in the consumer's stream.

use crate::common;
use common::connect;

use common::TestServer;
use relaymq::client::{
    Channel, ClientError, Connection, ConsumeOptions, Consumer, ConsumerEvent, Delivery, ListKind,
    QueueDeclareOptions,
};
use relaymq::types::BasicProperties;
use std::time::Duration;

/// Longest wait for something that must arrive.
const WAIT: Duration = Duration::from_secs(10);
/// Wait for something that must not arrive, after a round trip made it impossible.
const QUIET: Duration = Duration::from_millis(100);

fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(queue, QueueDeclareOptions::default())
        .expect("queue.declare");
}

/// Publishes `m{from}` … `m{to - 1}` to `queue` through the default exchange.
fn publish_range(ch: &Channel, queue: &str, from: usize, to: usize) {
    for i in from..to {
        ch.basic_publish(
            "",
            queue,
            false,
            &BasicProperties::default(),
            format!("m{i}").as_bytes(),
        )
        .expect("publish");
    }
}

fn consume(ch: &Channel, queue: &str) -> Consumer {
    ch.basic_consume(queue, ConsumeOptions::default())
        .expect("basic.consume")
}

fn body(d: &Delivery) -> String {
    String::from_utf8(d.body.clone()).expect("utf-8 body")
}

fn next_delivery(c: &Consumer) -> Delivery {
    match c.recv_timeout(WAIT) {
        Ok(ConsumerEvent::Delivery(d)) => d,
        other => panic!("expected a delivery for {}, got {other:?}", c.tag()),
    }
}

fn next_deliveries(c: &Consumer, n: usize) -> Vec<Delivery> {
    (0..n).map(|_| next_delivery(c)).collect()
}

fn bodies(ds: &[Delivery]) -> Vec<String> {
    ds.iter().map(body).collect()
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

/// A round trip on the connection: everything the server sent before is routed.
fn round_trip(conn: &Connection) {
    conn.status().expect("status");
}

fn assert_no_delivery(c: &Consumer) {
    match c.recv_timeout(QUIET) {
        Err(e) if e.is_timeout() => {}
        other => panic!("expected nothing for {}, got {other:?}", c.tag()),
    }
}

/// (messages_ready, messages_unacknowledged) of `queue`, as `list queues` reports them.
fn queue_counts(conn: &Connection, queue: &str) -> (i64, i64) {
    let rows = conn.list(ListKind::Queues).expect("list queues");
    let row = rows
        .iter()
        .find(|r| r.get("name").and_then(|v| v.as_str()) == Some(queue))
        .unwrap_or_else(|| panic!("queue {queue} not listed: {rows:?}"));
    let field = |k: &str| row.get(k).and_then(|v| v.as_i64()).expect(k);
    (field("messages_ready"), field("messages_unacknowledged"))
}

fn expect_channel_closed(result: Result<impl std::fmt::Debug, ClientError>, code: u16) -> String {
    match result {
        Err(ClientError::ChannelClosed { code: c, text }) if c == code => text,
        other => panic!("expected channel.close {code}, got {other:?}"),
    }
}

#[test]
fn messages_are_spread_round_robin_between_the_consumers_of_a_queue() {
    let server = TestServer::start();
    let conn = connect(&server);
    let publisher = conn.open_channel().unwrap();
    declare(&publisher, "work");
    let (ch_a, ch_b) = (conn.open_channel().unwrap(), conn.open_channel().unwrap());
    let a = consume(&ch_a, "work");
    let b = consume(&ch_b, "work");

    publish_range(&publisher, "work", 0, 10);
    let got_a = bodies(&next_deliveries(&a, 5));
    let got_b = bodies(&next_deliveries(&b, 5));
    round_trip(&conn);
    assert_no_delivery(&a);
    assert_no_delivery(&b);

    let evens: Vec<String> = (0..10).step_by(2).map(|i| format!("m{i}")).collect();
    let odds: Vec<String> = (1..10).step_by(2).map(|i| format!("m{i}")).collect();
    assert!(
        (got_a == evens && got_b == odds) || (got_a == odds && got_b == evens),
        "deliveries do not alternate: a = {got_a:?}, b = {got_b:?}"
    );
}

#[test]
fn prefetch_one_holds_back_a_consumer_that_does_not_ack() {
    let server = TestServer::start();
    let conn = connect(&server);
    let publisher = conn.open_channel().unwrap();
    declare(&publisher, "jobs");
    let (ch_slow, ch_fast) = (conn.open_channel().unwrap(), conn.open_channel().unwrap());
    ch_slow.basic_qos(1, false).unwrap();
    ch_fast.basic_qos(1, false).unwrap();
    let slow = consume(&ch_slow, "jobs");
    let fast = consume(&ch_fast, "jobs");

    publish_range(&publisher, "jobs", 0, 10);
    let mut fast_got = Vec::new();
    for _ in 0..9 {
        let d = next_delivery(&fast);
        ch_fast.basic_ack(d.delivery_tag, false).unwrap();
        fast_got.push(body(&d));
    }
    let first = next_delivery(&slow);
    round_trip(&conn);
    assert_no_delivery(&slow);
    assert_no_delivery(&fast);

    let mut all = fast_got.clone();
    all.push(body(&first));
    all.sort_by_key(|s| s[1..].parse::<u32>().unwrap());
    assert_eq!(
        all,
        names(0..10),
        "every message went to exactly one consumer"
    );
    assert_eq!(
        queue_counts(&conn, "jobs"),
        (0, 1),
        "only the slow one's message is unacked"
    );
}

#[test]
fn global_prefetch_limits_all_consumers_of_the_channel_together() {
    let server = TestServer::start();
    let conn = connect(&server);
    let publisher = conn.open_channel().unwrap();
    declare(&publisher, "q1");
    declare(&publisher, "q2");
    let ch = conn.open_channel().unwrap();
    ch.basic_qos(3, true).unwrap();
    let c1 = consume(&ch, "q1");
    let c2 = consume(&ch, "q2");

    for i in 0..5 {
        publish_range(&publisher, "q1", i, i + 1);
        publish_range(&publisher, "q2", i, i + 1);
    }
    round_trip(&conn);
    let drain = |c: &Consumer| {
        let mut v = Vec::new();
        while let Ok(ConsumerEvent::Delivery(d)) = c.recv_timeout(QUIET) {
            v.push(d);
        }
        v
    };
    let (got1, got2) = (drain(&c1), drain(&c2));
    assert_eq!(
        got1.len() + got2.len(),
        3,
        "channel-wide limit: q1 got {:?}, q2 got {:?}",
        bodies(&got1),
        bodies(&got2)
    );
    assert!(
        !got1.is_empty() && !got2.is_empty(),
        "both consumers share the limit"
    );

    // One ack makes room for exactly one more delivery on the channel.
    ch.basic_ack(got1[0].delivery_tag, false).unwrap();
    round_trip(&conn);
    let (more1, more2) = (drain(&c1), drain(&c2));
    assert_eq!(more1.len() + more2.len(), 1);
}

#[test]
fn prefetch_zero_means_unlimited_unacked_deliveries() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "firehose");
    ch.basic_qos(0, false).unwrap();
    ch.basic_qos(0, true).unwrap();
    let c = consume(&ch, "firehose");

    publish_range(&ch, "firehose", 0, 500);
    let got = next_deliveries(&c, 500);
    assert_eq!(bodies(&got), names(0..500));
    assert_eq!(queue_counts(&conn, "firehose"), (0, 500));
}

#[test]
fn a_nacked_message_is_requeued_at_its_original_position_and_marked_redelivered() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "orders");
    ch.basic_qos(2, false).unwrap();
    publish_range(&ch, "orders", 0, 5);
    let c = consume(&ch, "orders");

    let first = next_deliveries(&c, 2);
    assert_eq!(bodies(&first), ["m0", "m1"]);
    assert!(first.iter().all(|d| !d.redelivered));
    ch.basic_nack(first[0].delivery_tag, false, true).unwrap();

    let again = next_delivery(&c);
    assert_eq!(body(&again), "m0", "m0 goes back ahead of m2");
    assert!(again.redelivered);
    ch.basic_ack(again.delivery_tag, false).unwrap();
    ch.basic_ack(first[1].delivery_tag, false).unwrap();
    let mut rest = next_deliveries(&c, 2);
    ch.basic_ack(rest[1].delivery_tag, true).unwrap();
    rest.push(next_delivery(&c));
    assert_eq!(bodies(&rest), ["m2", "m3", "m4"]);
    assert!(rest.iter().all(|d| !d.redelivered));
}

#[test]
fn a_multiple_nack_requeues_in_the_original_order() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "batch");
    ch.basic_qos(3, false).unwrap();
    publish_range(&ch, "batch", 0, 6);
    let c = consume(&ch, "batch");

    let first = next_deliveries(&c, 3);
    assert_eq!(bodies(&first), ["m0", "m1", "m2"]);
    ch.basic_nack(first[2].delivery_tag, true, true).unwrap();

    let again = next_deliveries(&c, 3);
    assert_eq!(bodies(&again), ["m0", "m1", "m2"]);
    assert!(again.iter().all(|d| d.redelivered));
    ch.basic_ack(again[2].delivery_tag, true).unwrap();
    let rest = next_deliveries(&c, 3);
    assert_eq!(bodies(&rest), ["m3", "m4", "m5"]);
    assert!(rest.iter().all(|d| !d.redelivered));
}

#[test]
fn reject_with_requeue_puts_the_message_back_for_redelivery() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "r");
    publish_range(&ch, "r", 0, 2);

    let m = ch.basic_get("r", false).unwrap().expect("m0");
    assert_eq!((m.body.as_slice(), m.redelivered), (&b"m0"[..], false));
    ch.basic_reject(m.delivery_tag, true).unwrap();

    let again = ch.basic_get("r", false).unwrap().expect("m0 again");
    assert_eq!(again.body, b"m0");
    assert!(again.redelivered);
    assert_eq!(again.message_count, 1);
}

#[test]
fn reject_without_requeue_drops_the_message() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "r");
    publish_range(&ch, "r", 0, 2);

    let m = ch.basic_get("r", false).unwrap().expect("m0");
    ch.basic_reject(m.delivery_tag, false).unwrap();

    let next = ch.basic_get("r", true).unwrap().expect("m1");
    assert_eq!(next.body, b"m1", "m0 is gone");
    assert!(!next.redelivered);
    assert!(ch.basic_get("r", true).unwrap().is_none());
    assert_eq!(queue_counts(&conn, "r"), (0, 0));
}

#[test]
fn recover_redelivers_every_unacked_message_marked_redelivered() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "rec");
    publish_range(&ch, "rec", 0, 3);
    let c = consume(&ch, "rec");
    let first = next_deliveries(&c, 3);
    assert_eq!(
        first.iter().map(|d| d.delivery_tag).collect::<Vec<_>>(),
        [1, 2, 3]
    );

    ch.basic_recover(true).unwrap();
    let again = next_deliveries(&c, 3);
    assert_eq!(bodies(&again), ["m0", "m1", "m2"]);
    assert!(again.iter().all(|d| d.redelivered));
    assert_eq!(
        again.iter().map(|d| d.delivery_tag).collect::<Vec<_>>(),
        [4, 5, 6],
        "redeliveries get new tags"
    );
    ch.basic_ack(6, true).unwrap();
    assert_eq!(queue_counts(&conn, "rec"), (0, 0));
}

#[test]
fn ack_multiple_acks_every_delivery_up_to_the_tag() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "am");
    publish_range(&ch, "am", 0, 5);
    let c = consume(&ch, "am");
    let got = next_deliveries(&c, 5);

    ch.basic_ack(got[2].delivery_tag, true).unwrap();
    assert_eq!(queue_counts(&conn, "am"), (0, 2));
    // Only the two not covered by the ack come back.
    ch.basic_recover(true).unwrap();
    let again = next_deliveries(&c, 2);
    assert_eq!(bodies(&again), ["m3", "m4"]);
    round_trip(&conn);
    assert_no_delivery(&c);
}

#[test]
fn ack_multiple_with_tag_zero_acks_every_unacked_delivery() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "a0");
    publish_range(&ch, "a0", 0, 4);
    let c = consume(&ch, "a0");
    next_deliveries(&c, 4);

    ch.basic_ack(0, true).unwrap();
    assert_eq!(queue_counts(&conn, "a0"), (0, 0));
    assert!(ch.is_open());
}

#[test]
fn acking_an_unknown_delivery_tag_closes_the_channel_with_406_but_not_the_connection() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "u");

    ch.basic_ack(42, false).unwrap();
    let text = expect_channel_closed(ch.basic_qos(0, false), 406);
    assert!(text.contains("unknown delivery tag 42"), "{text}");
    assert!(!ch.is_open());

    assert!(conn.is_open());
    let other = conn.open_channel().unwrap();
    publish_range(&other, "u", 0, 1);
    assert!(other.basic_get("u", true).unwrap().is_some());
}

#[test]
fn acking_the_same_delivery_twice_closes_the_channel_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "twice");
    publish_range(&ch, "twice", 0, 1);
    let m = ch.basic_get("twice", false).unwrap().expect("message");

    ch.basic_ack(m.delivery_tag, false).unwrap();
    ch.basic_ack(m.delivery_tag, false).unwrap();
    let text = expect_channel_closed(ch.basic_qos(0, false), 406);
    assert!(
        text.contains(&format!("unknown delivery tag {}", m.delivery_tag)),
        "{text}"
    );
    assert!(conn.is_open());
    assert_eq!(
        queue_counts(&conn, "twice"),
        (0, 0),
        "the first ack counted"
    );
}

#[test]
fn a_multiple_ack_of_a_tag_that_is_not_unacked_is_a_406_and_acks_nothing() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "am406");
    publish_range(&ch, "am406", 0, 3);
    let c = consume(&ch, "am406");
    let got = next_deliveries(&c, 3);
    assert_eq!(got.last().unwrap().delivery_tag, 3);

    // Tag 99 was never delivered: RabbitMQ refuses the whole ack.
    ch.basic_ack(99, true).unwrap();
    let text = expect_channel_closed(ch.basic_qos(0, false), 406);
    assert!(text.contains("unknown delivery tag 99"), "{text}");
    // Nothing was acked: the channel's close requeued all three.
    assert_eq!(queue_counts(&conn, "am406"), (3, 0));
}

#[test]
fn a_multiple_ack_of_an_already_acked_tag_is_a_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "am406b");
    publish_range(&ch, "am406b", 0, 4);
    let c = consume(&ch, "am406b");
    next_deliveries(&c, 4);

    ch.basic_ack(3, false).unwrap();
    ch.basic_ack(3, true).unwrap();
    let text = expect_channel_closed(ch.basic_qos(0, false), 406);
    assert!(text.contains("unknown delivery tag 3"), "{text}");
    assert_eq!(
        queue_counts(&conn, "am406b"),
        (3, 0),
        "only the single ack of tag 3 counted; 1, 2 and 4 were requeued"
    );
}

#[test]
fn nack_multiple_with_tag_zero_requeues_every_unacked_delivery() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "n0");
    publish_range(&ch, "n0", 0, 3);
    let c = consume(&ch, "n0");
    next_deliveries(&c, 3);

    ch.basic_nack(0, true, true).unwrap();
    let again = next_deliveries(&c, 3);
    assert_eq!(bodies(&again), ["m0", "m1", "m2"]);
    assert!(again.iter().all(|d| d.redelivered));

    // And without requeue, tag 0 drops them all.
    ch.basic_nack(0, true, false).unwrap();
    assert_eq!(queue_counts(&conn, "n0"), (0, 0));
}

#[test]
fn closing_a_consumers_connection_requeues_its_unacked_messages_to_another_consumer() {
    let server = TestServer::start();
    let conn_a = connect(&server);
    let ch_a = conn_a.open_channel().unwrap();
    declare(&ch_a, "handover");
    publish_range(&ch_a, "handover", 0, 3);
    let a = consume(&ch_a, "handover");
    let got_a = next_deliveries(&a, 3);
    assert!(got_a.iter().all(|d| !d.redelivered));

    let conn_b = connect(&server);
    let ch_b = conn_b.open_channel().unwrap();
    let b = consume(&ch_b, "handover");
    round_trip(&conn_b);
    assert_no_delivery(&b);

    drop(a);
    drop(ch_a);
    conn_a.close().unwrap();
    let got_b = next_deliveries(&b, 3);
    assert_eq!(bodies(&got_b), ["m0", "m1", "m2"]);
    assert!(got_b.iter().all(|d| d.redelivered));
}

#[test]
fn closing_a_consumers_channel_requeues_its_unacked_messages_to_another_consumer() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch_a = conn.open_channel().unwrap();
    declare(&ch_a, "handover");
    publish_range(&ch_a, "handover", 0, 3);
    let a = consume(&ch_a, "handover");
    next_deliveries(&a, 3);

    let ch_b = conn.open_channel().unwrap();
    let b = consume(&ch_b, "handover");
    ch_a.close().unwrap();
    let got_b = next_deliveries(&b, 3);
    assert_eq!(bodies(&got_b), ["m0", "m1", "m2"]);
    assert!(got_b.iter().all(|d| d.redelivered));
    assert!(conn.is_open());
}

#[test]
fn cancel_stops_deliveries_and_unacked_messages_stay_unacked_until_acked() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "cx");
    publish_range(&ch, "cx", 0, 2);
    let c = consume(&ch, "cx");
    let got = next_deliveries(&c, 2);

    c.cancel().unwrap();
    assert_eq!(c.recv_timeout(WAIT).unwrap(), ConsumerEvent::Cancelled);
    publish_range(&ch, "cx", 2, 3);
    assert_eq!(
        queue_counts(&conn, "cx"),
        (1, 2),
        "m2 stays ready; m0, m1 unacked"
    );

    ch.basic_ack(got[1].delivery_tag, true).unwrap();
    assert_eq!(queue_counts(&conn, "cx"), (1, 0));
    assert!(ch.is_open());
}

#[test]
fn a_no_ack_consumer_gets_messages_that_are_then_gone_from_the_queue() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "fire");
    let c = ch
        .basic_consume(
            "fire",
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .unwrap();
    publish_range(&ch, "fire", 0, 5);
    let got = next_deliveries(&c, 5);
    assert_eq!(bodies(&got), names(0..5));
    assert_eq!(queue_counts(&conn, "fire"), (0, 0));

    // Closing the channel brings nothing back: they were acknowledged when sent.
    drop(c);
    ch.close().unwrap();
    assert_eq!(queue_counts(&conn, "fire"), (0, 0));
}

#[test]
fn a_second_consumer_on_a_queue_with_an_exclusive_consumer_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "solo");
    let _owner = ch
        .basic_consume(
            "solo",
            ConsumeOptions {
                exclusive: true,
                ..Default::default()
            },
        )
        .unwrap();

    let other = connect(&server);
    let och = other.open_channel().unwrap();
    let text = expect_channel_closed(och.basic_consume("solo", ConsumeOptions::default()), 403);
    assert!(text.contains("in exclusive use"), "{text}");
    assert!(other.is_open());
}

#[test]
fn an_exclusive_consumer_is_refused_with_403_when_the_queue_has_consumers() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "shared");
    let _first = consume(&ch, "shared");

    let ch2 = conn.open_channel().unwrap();
    let text = expect_channel_closed(
        ch2.basic_consume(
            "shared",
            ConsumeOptions {
                exclusive: true,
                ..Default::default()
            },
        ),
        403,
    );
    assert!(text.contains("in exclusive use"), "{text}");
}

#[test]
fn reusing_a_consumer_tag_on_a_channel_closes_the_connection_with_530() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "t1");
    declare(&ch, "t2");
    let tagged = || ConsumeOptions {
        consumer_tag: "dup".into(),
        ..Default::default()
    };
    let _first = ch.basic_consume("t1", tagged()).unwrap();

    match ch.basic_consume("t2", tagged()) {
        Err(ClientError::ConnectionClosed { code: 530, text }) => {
            assert!(
                text.contains("attempt to reuse consumer tag 'dup'"),
                "{text}"
            )
        }
        other => panic!("expected connection.close 530, got {other:?}"),
    }
    assert!(!conn.is_open());
    // The same tag on another connection is fine.
    let conn2 = connect(&server);
    let ch2 = conn2.open_channel().unwrap();
    assert_eq!(ch2.basic_consume("t1", tagged()).unwrap().tag(), "dup");
}

#[test]
fn a_consumer_tag_can_be_used_again_after_its_consumer_is_cancelled() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "again");
    let tagged = || ConsumeOptions {
        consumer_tag: "mine".into(),
        ..Default::default()
    };
    let first = ch.basic_consume("again", tagged()).unwrap();
    first.cancel().unwrap();

    let second = ch.basic_consume("again", tagged()).unwrap();
    publish_range(&ch, "again", 0, 1);
    assert_eq!(body(&next_delivery(&second)), "m0");
    assert!(conn.is_open());
}

#[test]
fn server_generated_consumer_tags_are_unique_amq_ctag_names() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "gen");
    let c1 = consume(&ch, "gen");
    let c2 = consume(&ch, "gen");
    assert!(c1.tag().starts_with("amq.ctag-"), "{}", c1.tag());
    assert!(c2.tag().starts_with("amq.ctag-"), "{}", c2.tag());
    assert_ne!(c1.tag(), c2.tag());

    publish_range(&ch, "gen", 0, 1);
    let d = next_delivery(&c1);
    assert_eq!(d.consumer_tag, c1.tag());
}

#[test]
fn basic_get_returns_empty_then_messages_with_the_count_left_and_needs_an_ack() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "g");
    assert!(ch.basic_get("g", false).unwrap().is_none(), "get-empty");

    publish_range(&ch, "g", 0, 3);
    let m = ch.basic_get("g", false).unwrap().expect("get-ok");
    assert_eq!(m.body, b"m0");
    assert_eq!(m.message_count, 2, "ready messages left");
    assert_eq!(m.delivery_tag, 1);
    assert!(!m.redelivered);
    assert_eq!((m.exchange.as_str(), m.routing_key.as_str()), ("", "g"));
    assert_eq!(queue_counts(&conn, "g"), (2, 1));

    ch.basic_ack(m.delivery_tag, false).unwrap();
    assert_eq!(queue_counts(&conn, "g"), (2, 0));
}

#[test]
fn delivery_tags_count_from_one_per_channel() {
    let server = TestServer::start();
    let conn = connect(&server);
    let (ch1, ch2) = (conn.open_channel().unwrap(), conn.open_channel().unwrap());
    declare(&ch1, "x1");
    declare(&ch1, "x2");
    let c1 = consume(&ch1, "x1");
    let c2 = consume(&ch2, "x2");
    publish_range(&ch1, "x1", 0, 3);
    publish_range(&ch1, "x2", 0, 3);

    let tags = |c: &Consumer| {
        next_deliveries(c, 3)
            .iter()
            .map(|d| d.delivery_tag)
            .collect::<Vec<_>>()
    };
    assert_eq!(tags(&c1), [1, 2, 3]);
    assert_eq!(tags(&c2), [1, 2, 3]);
    // basic.get shares the channel's counter.
    publish_range(&ch1, "x1", 3, 4);
    let d = next_delivery(&c1);
    assert_eq!(d.delivery_tag, 4);
    c2.cancel().unwrap();
    publish_range(&ch2, "x2", 3, 4);
    let got = ch2.basic_get("x2", false).unwrap().expect("get-ok");
    assert_eq!(got.delivery_tag, 4);
}
