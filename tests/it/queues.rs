//! Queues end to end: declaration rules, generated and reserved names, exclusive and
//! auto-delete queues, purge and delete with their conditions, and what deleting a queue
//! does to its consumers and bindings (AMQP 0-9-1 §1.7.2 and RabbitMQ's semantics).

use crate::common;
use common::connect;

use common::{Raw, TestServer};
use relaymq::client::{
    Channel, ClientError, Connection, ConsumeOptions, ConsumerEvent, ListKind, QueueDeclareOk,
    QueueDeclareOptions,
};
use relaymq::native::Method;
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::fmt::Debug;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(5);

/// The refusal's text when `result` is a channel close with `code`; panics otherwise.
#[track_caller]
fn channel_closed<T: Debug>(result: Result<T, ClientError>, code: u16) -> String {
    match result {
        Err(ClientError::ChannelClosed { code: c, text }) if c == code => text,
        other => panic!("expected channel.close {code}, got {other:?}"),
    }
}

fn plain() -> QueueDeclareOptions {
    QueueDeclareOptions::default()
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

fn exclusive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    }
}

fn auto_delete() -> QueueDeclareOptions {
    QueueDeclareOptions {
        auto_delete: true,
        ..QueueDeclareOptions::default()
    }
}

/// Passive declare on a fresh channel: the counts, or `None` when the queue is absent.
fn lookup(conn: &Connection, name: &str) -> Option<QueueDeclareOk> {
    let ch = conn.open_channel().expect("channel");
    match ch.queue_declare(name, passive()) {
        Ok(ok) => Some(ok),
        Err(e) if e.reply_code() == Some(404) => None,
        Err(e) => panic!("passive declare of {name:?}: {e}"),
    }
}

fn publish(ch: &Channel, queue: &str, body: &[u8]) {
    ch.basic_publish("", queue, false, &BasicProperties::default(), body)
        .expect("publish");
}

/// The `list queues` row of `name`.
fn queue_row(conn: &Connection, name: &str) -> Option<FieldTable> {
    conn.list(ListKind::Queues)
        .expect("list")
        .into_iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some(name))
}

fn flag(row: &FieldTable, field: &str) -> bool {
    match row.get(field) {
        Some(FieldValue::Bool(b)) => *b,
        other => panic!("{field}: {other:?}"),
    }
}

#[test]
fn declaring_a_queue_again_with_the_same_flags_is_idempotent() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let first = ch.queue_declare("tasks", plain()).unwrap();
    assert_eq!(
        first,
        QueueDeclareOk {
            queue: "tasks".into(),
            message_count: 0,
            consumer_count: 0
        }
    );
    publish(&ch, "tasks", b"1");
    publish(&ch, "tasks", b"2");
    let again = ch.queue_declare("tasks", plain()).unwrap();
    assert_eq!(again.queue, "tasks");
    assert_eq!(again.message_count, 2, "redeclaring kept the messages");
    let named: Vec<_> = conn
        .list(ListKind::Queues)
        .unwrap()
        .into_iter()
        .filter(|r| r.get("name").and_then(FieldValue::as_str) == Some("tasks"))
        .collect();
    assert_eq!(named.len(), 1);
}

/// Declares `name` with `first`, redeclares with `second` expecting `code`, and checks the
/// queue kept its flags and its message.
fn assert_redeclare_refused(first: QueueDeclareOptions, second: QueueDeclareOptions, code: u16) {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", first.clone()).unwrap();
    publish(&ch, "q", b"kept");
    let text = channel_closed(ch.queue_declare("q", second), code);
    assert!(text.contains("'q'"), "{text}");
    assert!(conn.is_open());
    let row = queue_row(&conn, "q").expect("queue still there");
    assert_eq!(flag(&row, "durable"), first.durable);
    assert_eq!(flag(&row, "exclusive"), first.exclusive);
    assert_eq!(flag(&row, "auto_delete"), first.auto_delete);
    assert_eq!(
        row.get("arguments"),
        Some(&FieldValue::Table(first.arguments))
    );
    assert_eq!(lookup(&conn, "q").unwrap().message_count, 1);
}

#[test]
fn redeclaring_with_another_durability_is_refused_with_406() {
    let durable = QueueDeclareOptions {
        durable: true,
        ..plain()
    };
    assert_redeclare_refused(plain(), durable.clone(), 406);
    assert_redeclare_refused(durable, plain(), 406);
}

#[test]
fn redeclaring_with_another_auto_delete_flag_is_refused_with_406() {
    assert_redeclare_refused(plain(), auto_delete(), 406);
    assert_redeclare_refused(auto_delete(), plain(), 406);
}

#[test]
fn redeclaring_with_other_arguments_is_refused_with_406() {
    // The arguments with a meaning are compared (as RabbitMQ); custom ones are not (the
    // redeclare test below).
    let mut args = FieldTable::new();
    args.insert("x-max-length".into(), FieldValue::I64(10));
    let with_args = QueueDeclareOptions {
        arguments: args.clone(),
        ..plain()
    };
    assert_redeclare_refused(plain(), with_args.clone(), 406);
    assert_redeclare_refused(with_args.clone(), plain(), 406);
    args.insert("x-max-length".into(), FieldValue::I64(11));
    let other_value = QueueDeclareOptions {
        arguments: args,
        ..plain()
    };
    assert_redeclare_refused(with_args, other_value, 406);
}

#[test]
fn redeclaring_with_another_exclusive_flag_is_refused_with_405() {
    // RabbitMQ checks the exclusive flag as exclusive access (rabbit_amqqueue:
    // assert_equivalence → check_exclusive_access strict): 405 RESOURCE_LOCKED, not 406.
    assert_redeclare_refused(plain(), exclusive(), 405);
    assert_redeclare_refused(exclusive(), plain(), 405);
}

#[test]
fn a_passive_declare_of_a_missing_queue_fails_with_404_and_only_closes_the_channel() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(ch.queue_declare("missing", passive()), 404);
    assert!(text.contains("no queue 'missing'"), "{text}");
    assert!(!ch.is_open());
    assert!(conn.is_open());
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("other", plain()).unwrap();
    assert!(
        lookup(&conn, "missing").is_none(),
        "passive declare created it"
    );
}

#[test]
fn a_passive_declare_reports_ready_messages_and_consumers() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", plain()).unwrap();
    for i in 0..5u8 {
        publish(&ch, "q", &[i]);
    }
    assert_eq!(
        ch.queue_declare("q", passive()).unwrap(),
        QueueDeclareOk {
            queue: "q".into(),
            message_count: 5,
            consumer_count: 0
        }
    );
    // Two consumers holding one unacked message each: 3 ready, 2 consumers.
    let consumers_ch = conn.open_channel().unwrap();
    consumers_ch.basic_qos(1, false).unwrap();
    let c1 = consumers_ch
        .basic_consume("q", ConsumeOptions::default())
        .unwrap();
    let c2 = consumers_ch
        .basic_consume("q", ConsumeOptions::default())
        .unwrap();
    for c in [&c1, &c2] {
        assert!(matches!(
            c.recv_timeout(WAIT),
            Ok(ConsumerEvent::Delivery(_))
        ));
    }
    let counts = ch.queue_declare("q", passive()).unwrap();
    assert_eq!((counts.message_count, counts.consumer_count), (3, 2));
}

#[test]
fn an_empty_name_gets_a_generated_amq_gen_name() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let a = ch.queue_declare("", plain()).unwrap().queue;
    let b = ch.queue_declare("", plain()).unwrap().queue;
    assert!(
        a.starts_with("amq.gen-") && a.len() > "amq.gen-".len(),
        "{a}"
    );
    assert_ne!(a, b);
    publish(&ch, &a, b"to a generated name");
    let m = ch.basic_get(&a, true).unwrap().expect("routed");
    assert_eq!(m.body, b"to a generated name");
    assert!(lookup(&conn, &b).is_some());
}

#[test]
fn declaring_an_amq_prefixed_queue_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(ch.queue_declare("amq.mine", plain()), 403);
    assert!(text.contains("amq."), "{text}");
    assert!(lookup(&conn, "amq.mine").is_none());
}

#[test]
fn another_connection_is_locked_out_of_an_exclusive_queue_with_405() {
    let server = TestServer::start();
    let owner = connect(&server);
    let och = owner.open_channel().unwrap();
    och.queue_declare("mine", exclusive()).unwrap();
    och.queue_bind("mine", "amq.direct", "k", FieldTable::new())
        .unwrap();
    publish(&och, "mine", b"private");
    let other = connect(&server);
    type Op = fn(&Channel) -> Result<(), ClientError>;
    let ops: [(&str, Op); 9] = [
        ("declare", |ch| {
            ch.queue_declare("mine", exclusive()).map(drop)
        }),
        ("declare non-exclusive", |ch| {
            ch.queue_declare("mine", plain()).map(drop)
        }),
        ("passive declare", |ch| {
            ch.queue_declare("mine", passive()).map(drop)
        }),
        ("consume", |ch| {
            ch.basic_consume("mine", ConsumeOptions::default())
                .map(drop)
        }),
        ("get", |ch| ch.basic_get("mine", false).map(drop)),
        ("purge", |ch| ch.queue_purge("mine").map(drop)),
        ("delete", |ch| {
            ch.queue_delete("mine", false, false).map(drop)
        }),
        ("bind", |ch| {
            ch.queue_bind("mine", "amq.fanout", "", FieldTable::new())
        }),
        ("unbind", |ch| {
            ch.queue_unbind("mine", "amq.direct", "k", FieldTable::new())
        }),
    ];
    for (what, op) in ops {
        let ch = other.open_channel().unwrap();
        let result = op(&ch);
        assert_eq!(
            result.as_ref().err().and_then(|e| e.reply_code()),
            Some(405),
            "{what}: {result:?}"
        );
        assert!(other.is_open(), "{what} closed the connection");
    }
    // Nothing changed for the owner: the message, the binding, no new binding.
    let counts = och.queue_declare("mine", exclusive()).unwrap();
    assert_eq!((counts.message_count, counts.consumer_count), (1, 0));
    och.basic_publish(
        "amq.direct",
        "k",
        false,
        &BasicProperties::default(),
        b"bound",
    )
    .unwrap();
    och.basic_publish(
        "amq.fanout",
        "",
        false,
        &BasicProperties::default(),
        b"unbound",
    )
    .unwrap();
    let bodies: Vec<Vec<u8>> = std::iter::from_fn(|| och.basic_get("mine", true).unwrap())
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, [&b"private"[..], b"bound"]);
}

#[test]
fn an_exclusive_queue_is_deleted_when_its_connection_closes() {
    let server = TestServer::start();
    let observer = connect(&server);
    let owner = connect(&server);
    let ch = owner.open_channel().unwrap();
    ch.queue_declare("mine", exclusive()).unwrap();
    ch.queue_bind("mine", "amq.fanout", "", FieldTable::new())
        .unwrap();
    publish(&ch, "mine", b"goes with it");
    drop(ch);
    assert!(queue_row(&observer, "mine").is_some());
    owner.close().unwrap();
    assert!(queue_row(&observer, "mine").is_none());
    assert!(lookup(&observer, "mine").is_none());
    // The name is free again, for anyone.
    let ch = observer.open_channel().unwrap();
    let fresh = ch.queue_declare("mine", plain()).unwrap();
    assert_eq!(fresh.message_count, 0);
    ch.basic_publish("amq.fanout", "", false, &BasicProperties::default(), b"x")
        .unwrap();
    assert!(
        ch.basic_get("mine", true).unwrap().is_none(),
        "old binding survived"
    );
}

#[test]
fn an_exclusive_queue_is_deleted_when_its_connection_drops_without_closing() {
    let server = TestServer::start();
    let observer = connect(&server);
    // The client library always closes politely: drop a raw socket instead.
    let mut raw = Raw::connect(server.addr());
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    let (_, _, declared) = raw.call(
        1,
        Method::QueueDeclare {
            queue: "mine".into(),
            passive: false,
            durable: false,
            exclusive: true,
            auto_delete: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(
        matches!(declared, Method::QueueDeclareOk { .. }),
        "{declared:?}"
    );
    assert!(queue_row(&observer, "mine").is_some());
    drop(raw);
    let deadline = Instant::now() + WAIT;
    while queue_row(&observer, "mine").is_some() {
        assert!(
            Instant::now() < deadline,
            "still there after the socket closed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(lookup(&observer, "mine").is_none());
}

#[test]
fn an_auto_delete_queue_stays_until_it_has_had_a_consumer() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("temp", auto_delete()).unwrap();
    publish(&ch, "temp", b"1");
    assert!(ch.basic_get("temp", true).unwrap().is_some());
    ch.queue_purge("temp").unwrap();
    assert!(lookup(&conn, "temp").is_some());
}

#[test]
fn an_auto_delete_queue_is_deleted_when_its_last_consumer_cancels() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("temp", auto_delete()).unwrap();
    let c1 = ch.basic_consume("temp", ConsumeOptions::default()).unwrap();
    let c2 = ch.basic_consume("temp", ConsumeOptions::default()).unwrap();
    c1.cancel().unwrap();
    assert_eq!(c1.recv_timeout(WAIT).unwrap(), ConsumerEvent::Cancelled);
    let left = lookup(&conn, "temp").expect("one consumer is left");
    assert_eq!(left.consumer_count, 1);
    c2.cancel().unwrap();
    assert!(lookup(&conn, "temp").is_none());
}

#[test]
fn an_auto_delete_queue_is_deleted_when_its_last_consumers_channel_closes() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("temp", auto_delete()).unwrap();
    let consumer_ch = conn.open_channel().unwrap();
    let _consumer = consumer_ch
        .basic_consume("temp", ConsumeOptions::default())
        .unwrap();
    assert_eq!(lookup(&conn, "temp").unwrap().consumer_count, 1);
    consumer_ch.close().unwrap();
    assert!(lookup(&conn, "temp").is_none());
}

#[test]
fn delete_if_unused_refuses_a_queue_with_consumers_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("busy", plain()).unwrap();
    let consumer_ch = conn.open_channel().unwrap();
    let consumer = consumer_ch
        .basic_consume("busy", ConsumeOptions::default())
        .unwrap();
    let text = channel_closed(ch.queue_delete("busy", true, false), 406);
    assert!(text.contains("in use"), "{text}");
    assert_eq!(lookup(&conn, "busy").unwrap().consumer_count, 1);
    // The consumer still gets messages.
    let ch = conn.open_channel().unwrap();
    publish(&ch, "busy", b"still consumed");
    match consumer.recv_timeout(WAIT).unwrap() {
        ConsumerEvent::Delivery(d) => assert_eq!(d.body, b"still consumed"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn delete_if_empty_refuses_a_queue_with_messages_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("full", plain()).unwrap();
    publish(&ch, "full", b"1");
    let text = channel_closed(ch.queue_delete("full", false, true), 406);
    assert!(text.contains("not empty"), "{text}");
    assert_eq!(lookup(&conn, "full").unwrap().message_count, 1);
    let ch = conn.open_channel().unwrap();
    assert!(ch.basic_get("full", true).unwrap().is_some());
    assert_eq!(ch.queue_delete("full", false, true).unwrap(), 0);
    assert!(lookup(&conn, "full").is_none());
}

#[test]
fn delete_returns_the_number_of_ready_messages_deleted() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", plain()).unwrap();
    for _ in 0..3 {
        publish(&ch, "q", b"m");
    }
    assert_eq!(ch.queue_delete("q", false, false).unwrap(), 3);
    assert!(lookup(&conn, "q").is_none());
    // Deleting it again (absent) succeeds with 0, as in RabbitMQ.
    assert_eq!(ch.queue_delete("q", false, false).unwrap(), 0);
}

#[test]
fn purge_returns_the_count_of_ready_messages_and_leaves_unacked_ones() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", plain()).unwrap();
    for i in 0..5u8 {
        publish(&ch, "q", &[i]);
    }
    let first = ch.basic_get("q", false).unwrap().unwrap();
    let second = ch.basic_get("q", false).unwrap().unwrap();
    assert_eq!(ch.queue_purge("q").unwrap(), 3);
    assert_eq!(ch.queue_declare("q", passive()).unwrap().message_count, 0);
    ch.basic_reject(first.delivery_tag, true).unwrap();
    ch.basic_reject(second.delivery_tag, true).unwrap();
    assert_eq!(ch.queue_declare("q", passive()).unwrap().message_count, 2);
    let back: Vec<Vec<u8>> = std::iter::from_fn(|| ch.basic_get("q", true).unwrap())
        .map(|m| {
            assert!(m.redelivered);
            m.body
        })
        .collect();
    assert_eq!(back, [[0u8], [1u8]]);
    assert_eq!(ch.queue_purge("q").unwrap(), 0);
}

#[test]
fn deleting_a_queue_cancels_its_consumers_with_a_notification() {
    let server = TestServer::start();
    let consuming = connect(&server);
    let cch = consuming.open_channel().unwrap();
    cch.queue_declare("q", plain()).unwrap();
    let consumer = cch.basic_consume("q", ConsumeOptions::default()).unwrap();
    let admin = connect(&server);
    let ach = admin.open_channel().unwrap();
    publish(&ach, "q", b"before delete");
    match consumer.recv_timeout(WAIT).unwrap() {
        ConsumerEvent::Delivery(d) => {
            assert_eq!(d.body, b"before delete");
            cch.basic_ack(d.delivery_tag, false).unwrap();
        }
        other => panic!("{other:?}"),
    }
    ach.queue_delete("q", false, false).unwrap();
    assert_eq!(
        consumer.recv_timeout(WAIT).unwrap(),
        ConsumerEvent::Cancelled
    );
    assert_eq!(
        consumer.recv_timeout(WAIT).unwrap(),
        ConsumerEvent::Cancelled
    );
    // Only the consumer ended: its channel and connection still work.
    assert!(cch.is_open());
    cch.queue_declare("q2", plain()).unwrap();
    consumer.cancel().unwrap();
}

#[test]
fn deleting_a_queue_removes_its_bindings() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", plain()).unwrap();
    ch.queue_bind("q", "amq.direct", "k", FieldTable::new())
        .unwrap();
    ch.queue_bind("q", "amq.topic", "#", FieldTable::new())
        .unwrap();
    ch.queue_delete("q", false, false).unwrap();
    let rows = conn.list(ListKind::Bindings).unwrap();
    assert!(
        rows.iter()
            .all(|r| r.get("destination").and_then(FieldValue::as_str) != Some("q")),
        "{rows:?}"
    );
    ch.queue_declare("q", plain()).unwrap();
    let props = BasicProperties::default();
    ch.basic_publish("amq.direct", "k", false, &props, b"1")
        .unwrap();
    ch.basic_publish("amq.topic", "k", false, &props, b"2")
        .unwrap();
    assert!(ch.basic_get("q", true).unwrap().is_none());
}

#[test]
fn a_queue_name_of_255_bytes_works() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let name = format!("{}{}", "é".repeat(100), "q".repeat(55));
    assert_eq!(name.len(), 255);
    assert_eq!(ch.queue_declare(&name, plain()).unwrap().queue, name);
    ch.queue_bind(&name, "amq.topic", &name, FieldTable::new())
        .unwrap();
    publish(&ch, &name, b"default exchange");
    ch.basic_publish(
        "amq.topic",
        &name,
        false,
        &BasicProperties::default(),
        b"topic",
    )
    .unwrap();
    let first = ch.basic_get(&name, true).unwrap().unwrap();
    assert_eq!(first.routing_key, name);
    assert_eq!(first.body, b"default exchange");
    assert_eq!(ch.basic_get(&name, true).unwrap().unwrap().body, b"topic");
    assert!(queue_row(&conn, &name).is_some());
    // One byte more cannot be encoded: the client refuses it without sending anything.
    let longer = format!("{name}x");
    assert!(matches!(
        ch.queue_declare(&longer, plain()),
        Err(ClientError::Usage(_))
    ));
    assert!(ch.is_open());
}

#[test]
fn a_non_ascii_queue_name_works() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let name = "очередь.キュー.🐇.ß";
    assert_eq!(ch.queue_declare(name, plain()).unwrap().queue, name);
    publish(&ch, name, b"m");
    assert_eq!(lookup(&conn, name).unwrap().message_count, 1);
    let row = queue_row(&conn, name).expect("listed under its exact name");
    assert_eq!(row.get("messages_ready"), Some(&FieldValue::I64(1)));
    // A different normalisation or case is a different queue.
    assert!(lookup(&conn, "ОЧЕРЕДЬ.キュー.🐇.ß").is_none());
    assert_eq!(ch.queue_delete(name, false, false).unwrap(), 1);
}

#[test]
fn redeclare_compares_the_arguments_with_a_meaning_by_value_with_rabbitmqs_text() {
    let server = TestServer::start();
    let conn = connect(&server);
    let with = |pairs: &[(&str, FieldValue)]| QueueDeclareOptions {
        arguments: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..QueueDeclareOptions::default()
    };
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", with(&[("x-message-ttl", FieldValue::I64(60000))]))
        .unwrap();
    // The same value in another integer width is the same argument; an argument without a
    // meaning is not compared (RabbitMQ).
    ch.queue_declare(
        "q",
        with(&[
            ("x-message-ttl", FieldValue::I32(60000)),
            ("x-app-note", FieldValue::string("anything")),
        ]),
    )
    .unwrap();
    let text = channel_closed(ch.queue_declare("q", with(&[])), 406);
    assert_eq!(
        text,
        "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but \
         current is the value '60000' of type 'long'"
    );
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(
        ch.queue_declare("q", with(&[("x-message-ttl", FieldValue::I64(5))])),
        406,
    );
    assert!(
        text.contains("received the value '5' of type 'long' but current is the value '60000'"),
        "{text}"
    );
}
