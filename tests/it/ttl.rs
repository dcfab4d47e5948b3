//! TTL (issue 4, part 2): `x-message-ttl` and the per-message `expiration` remove a
//! message on time wherever it is in the queue, never deliver it, and dead-letter it with
//! reason `expired`; a requeued message keeps its deadline; deadlines of stored messages
//! survive a restart; `x-expires` deletes an unused queue.

use crate::common;

use common::{ServerProcess, TestServer};
use relaymq::client::{Channel, Connection, ConsumeOptions, ConsumerEvent, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::{Duration, Instant};

/// How long a test waits for something that should happen within a housekeeping round or
/// two; generous so a loaded CI machine does not fail it.
const PATIENCE: Duration = Duration::from_secs(5);

fn declare(ch: &Channel, name: &str, durable: bool, args: &[(&str, FieldValue)]) {
    common::declare_queue(ch, name, durable, args);
}

fn dlx_to(dlq: &str) -> Vec<(&'static str, FieldValue)> {
    vec![
        ("x-dead-letter-exchange", FieldValue::string("")),
        ("x-dead-letter-routing-key", FieldValue::string(dlq)),
    ]
}

fn props(expiration: Option<&str>, persistent: bool) -> BasicProperties {
    BasicProperties {
        expiration: expiration.map(str::to_string),
        delivery_mode: persistent.then_some(2),
        ..BasicProperties::default()
    }
}

fn publish(ch: &Channel, queue: &str, body: &str, expiration: Option<&str>, persistent: bool) {
    ch.basic_publish(
        "",
        queue,
        false,
        &props(expiration, persistent),
        body.as_bytes(),
    )
    .expect("publish");
}

fn count(ch: &Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue,
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
    )
    .expect("passive declare")
    .message_count
}

/// Waits until `queue` holds `n` ready messages; returns how long that took.
fn wait_for_count(ch: &Channel, queue: &str, n: u32) -> Duration {
    let start = Instant::now();
    while count(ch, queue) != n {
        assert!(
            start.elapsed() < PATIENCE,
            "queue '{queue}' never held {n} messages (holds {})",
            count(ch, queue)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

fn body(ch: &Channel, queue: &str) -> Option<String> {
    ch.basic_get(queue, true)
        .expect("get")
        .map(|m| String::from_utf8(m.body).expect("utf-8"))
}

fn first_death(headers: &FieldTable) -> FieldTable {
    match headers.get("x-death") {
        Some(FieldValue::Array(items)) => match items.first() {
            Some(FieldValue::Table(t)) => t.clone(),
            other => panic!("x-death entry {other:?}"),
        },
        other => panic!("x-death is {other:?}"),
    }
}

#[test]
fn a_message_behind_one_without_ttl_expires_on_time_and_is_dead_lettered() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "work", false, &dlx_to("dlq"));
    let published = Instant::now();
    publish(&ch, "work", "stays", None, false);
    publish(&ch, "work", "expires", Some("1000"), false);
    // Not before its TTL...
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(&ch, "work"), 2);
    assert_eq!(count(&ch, "dlq"), 0);
    // ...but on time, although the head has no TTL and nobody consumes it.
    wait_for_count(&ch, "dlq", 1);
    assert!(published.elapsed() >= Duration::from_millis(1000));
    assert_eq!(count(&ch, "work"), 1);

    let dead = ch.basic_get("dlq", true).unwrap().expect("dead letter");
    assert_eq!(dead.body, b"expires");
    // The dead letter does not expire again; its old TTL is in x-death.
    assert_eq!(dead.properties.expiration, None);
    let death = first_death(dead.properties.headers.as_ref().expect("headers"));
    assert_eq!(
        death.get("reason").and_then(FieldValue::as_str),
        Some("expired")
    );
    assert_eq!(
        death.get("queue").and_then(FieldValue::as_str),
        Some("work")
    );
    assert_eq!(
        death
            .get("original-expiration")
            .and_then(FieldValue::as_str),
        Some("1000")
    );
    assert_eq!(body(&ch, "work").as_deref(), Some("stays"));
}

#[test]
fn a_message_expires_behind_an_unacked_head_and_is_never_delivered() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "work", false, &dlx_to("dlq"));
    let published = Instant::now();
    publish(&ch, "work", "first", None, false);
    publish(&ch, "work", "second", Some("1000"), false);
    // A consumer with prefetch 1 holds the first, unacked: the second waits behind it.
    let consumer_conn = Connection::connect(&server.addr_string()).unwrap();
    let cch = consumer_conn.open_channel().unwrap();
    cch.basic_qos(1, false).unwrap();
    let consumer = cch
        .basic_consume("work", ConsumeOptions::default())
        .unwrap();
    let first = match consumer.recv_timeout(PATIENCE).unwrap() {
        ConsumerEvent::Delivery(d) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!(first.body, b"first");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(&ch, "dlq"), 0, "expired before its second");
    wait_for_count(&ch, "dlq", 1);
    assert!(published.elapsed() >= Duration::from_millis(1000));
    // Acking the first frees the consumer, but the second is gone: nothing more comes.
    cch.basic_ack(first.delivery_tag, false).unwrap();
    assert!(consumer
        .recv_timeout(Duration::from_millis(300))
        .unwrap_err()
        .is_timeout());
    assert_eq!(body(&ch, "dlq").as_deref(), Some("second"));
}

#[test]
fn queue_ttl_and_message_expiration_the_lower_applies() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    let mut args = dlx_to("dlq");
    args.push(("x-message-ttl", FieldValue::I64(400)));
    declare(&ch, "work", false, &args);
    publish(&ch, "work", "queue-ttl", None, false);
    publish(&ch, "work", "own-ttl-longer", Some("60000"), false);
    publish(&ch, "work", "own-ttl-shorter", Some("50"), false);
    // The shorter own TTL goes first, though it is last in the queue.
    wait_for_count(&ch, "dlq", 1);
    assert_eq!(body(&ch, "dlq").as_deref(), Some("own-ttl-shorter"));
    // The queue's 400 ms caps the 60 s one.
    wait_for_count(&ch, "work", 0);
    wait_for_count(&ch, "dlq", 2);
    let mut left = vec![body(&ch, "dlq").unwrap(), body(&ch, "dlq").unwrap()];
    left.sort();
    assert_eq!(left, ["own-ttl-longer", "queue-ttl"]);
}

#[test]
fn ttl_zero_delivers_to_a_waiting_consumer_or_expires_at_once() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "work", false, &dlx_to("dlq"));
    publish(&ch, "work", "nobody-waits", Some("0"), false);
    // Expired on arrival, as RabbitMQ: the very next request sees it gone and
    // dead-lettered (not at the housekeeper's next pass).
    assert_eq!(count(&ch, "work"), 0);
    assert_eq!(count(&ch, "dlq"), 1);
    let death = ch.basic_get("dlq", true).unwrap().expect("dead-lettered");
    let headers = death.properties.headers.clone().expect("x-death");
    assert_eq!(
        first_death(&headers).get("reason"),
        Some(&FieldValue::string("expired"))
    );
    // Without a dead-letter exchange it is simply gone; persistent in a durable queue too.
    declare(&ch, "plain", true, &[]);
    publish(&ch, "plain", "gone", Some("0"), true);
    publish(&ch, "plain", "kept", None, true);
    assert_eq!(count(&ch, "plain"), 1);
    assert_eq!(body(&ch, "plain").as_deref(), Some("kept"));

    let consumer = ch
        .basic_consume(
            "work",
            ConsumeOptions {
                no_ack: true,
                ..ConsumeOptions::default()
            },
        )
        .unwrap();
    publish(&ch, "work", "taken-at-once", Some("0"), false);
    match consumer.recv_timeout(PATIENCE).unwrap() {
        ConsumerEvent::Delivery(d) => assert_eq!(d.body, b"taken-at-once"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        count(&ch, "dlq"),
        0,
        "the one taken at once was not dead-lettered"
    );
}

#[test]
fn a_requeued_message_keeps_its_deadline() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "work", false, &dlx_to("dlq"));
    publish(&ch, "work", "m", Some("300"), false);
    let m = ch.basic_get("work", false).unwrap().expect("message");
    // Unacked messages do not expire...
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(count(&ch, "dlq"), 0);
    // ...but back in the queue past its deadline, it expires instead of being redelivered.
    ch.basic_nack(m.delivery_tag, false, true).unwrap();
    assert!(ch.basic_get("work", true).unwrap().is_none());
    wait_for_count(&ch, "dlq", 1);
}

#[test]
fn without_a_dead_letter_exchange_expired_messages_are_dropped() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(
        &ch,
        "work",
        false,
        &[("x-message-ttl", FieldValue::I64(100))],
    );
    for i in 0..50 {
        publish(&ch, "work", &format!("m{i}"), None, i % 2 == 0);
    }
    wait_for_count(&ch, "work", 0);
    let listed = conn
        .list(relaymq::client::ListKind::Queues)
        .expect("list queues");
    let row = listed
        .iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some("work"))
        .expect("listed");
    assert_eq!(row.get("messages").and_then(FieldValue::as_i64), Some(0));
}

#[test]
fn an_invalid_expiration_is_refused_with_rabbitmqs_406() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "work", false, &[]);
    publish(&ch, "work", "bad", Some("soon"), false);
    let err = ch.basic_get("work", true).unwrap_err();
    assert_eq!(err.reply_code(), Some(406), "{err}");
    assert!(
        err.to_string()
            .contains("invalid expiration 'soon': no_integer"),
        "{err}"
    );
    let ch = conn.open_channel().unwrap();
    publish(&ch, "work", "negative", Some("-1"), false);
    let err = ch.basic_get("work", true).unwrap_err();
    assert_eq!(err.reply_code(), Some(406), "{err}");
    // Nothing was enqueued.
    let ch = conn.open_channel().unwrap();
    assert_eq!(count(&ch, "work"), 0);
}

#[test]
fn invalid_ttl_arguments_are_refused_with_406_naming_them() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    for (name, value) in [
        ("x-message-ttl", FieldValue::I64(-1)),
        ("x-message-ttl", FieldValue::string("100")),
        ("x-expires", FieldValue::I64(0)),
        ("x-expires", FieldValue::Bool(true)),
    ] {
        let ch = conn.open_channel().unwrap();
        let mut arguments = FieldTable::new();
        arguments.insert(name.into(), value.clone());
        let err = ch
            .queue_declare(
                "q",
                QueueDeclareOptions {
                    arguments,
                    ..QueueDeclareOptions::default()
                },
            )
            .unwrap_err();
        assert_eq!(err.reply_code(), Some(406), "{name} = {value:?}: {err}");
        assert!(
            err.to_string().contains(&format!(
                "invalid arg '{name}' for queue 'q' in vhost '/': "
            )),
            "{err}"
        );
    }
}

#[test]
fn an_unused_queue_is_deleted_after_x_expires_and_a_used_one_is_not() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let expiring = [("x-expires", FieldValue::I64(400))];
    declare(&ch, "unused", true, &expiring);
    declare(&ch, "consumed", false, &expiring);
    declare(&ch, "redeclared", false, &expiring);
    publish(&ch, "unused", "m", None, true);
    let consumer = ch
        .basic_consume("consumed", ConsumeOptions::default())
        .unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let start = Instant::now();
    // Redeclaring every 100 ms renews the lease; messages do not count as use.
    while start.elapsed() < Duration::from_millis(1200) {
        declare(&ch, "redeclared", false, &expiring);
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = ch.queue_declare("unused", passive.clone()).unwrap_err();
    assert_eq!(err.reply_code(), Some(404), "{err}");
    let ch = conn.open_channel().unwrap();
    assert!(ch.queue_declare("redeclared", passive.clone()).is_ok());
    assert!(ch.queue_declare("consumed", passive.clone()).is_ok());
    // Once its consumer leaves, the consumed one expires too (listing is not a use; a
    // passive declare would be).
    consumer.cancel().unwrap();
    let start = Instant::now();
    let listed = |name: &str| {
        conn.list(relaymq::client::ListKind::Queues)
            .expect("list queues")
            .iter()
            .any(|r| r.get("name").and_then(FieldValue::as_str) == Some(name))
    };
    while listed("consumed") {
        assert!(start.elapsed() < PATIENCE, "never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn deadlines_of_stored_messages_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", true, &[]);
    let mut args = dlx_to("dlq");
    args.push(("x-message-ttl", FieldValue::I64(60_000)));
    declare(&ch, "work", true, &args);
    let published = Instant::now();
    publish(&ch, "work", "keeps", None, true);
    publish(&ch, "work", "expires", Some("1500"), true);
    publish(&ch, "work", "keeps-too", Some("50000"), true);
    conn.close().unwrap();
    assert!(server.terminate().success());
    // The broker is down past the deadline.
    std::thread::sleep(Duration::from_millis(1600).saturating_sub(published.elapsed()));
    // No memory budget: every message comes back paged out, deadline read from the store.
    let server = ServerProcess::start(&data, &["--queue-memory-bytes", "0"]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    wait_for_count(&ch, "dlq", 1);
    assert_eq!(body(&ch, "dlq").as_deref(), Some("expires"));
    assert_eq!(body(&ch, "work").as_deref(), Some("keeps"));
    assert_eq!(body(&ch, "work").as_deref(), Some("keeps-too"));
    conn.close().unwrap();
    assert!(server.terminate().success());
}

#[test]
fn thousands_expiring_in_the_same_round_are_all_dead_lettered() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    let mut args = dlx_to("dlq");
    args.push(("x-message-ttl", FieldValue::I64(200)));
    declare(&ch, "work", false, &args);
    const N: u32 = 3000;
    for i in 0..N {
        publish(&ch, "work", &format!("m{i}"), None, i % 2 == 0);
    }
    wait_for_count(&ch, "work", 0);
    wait_for_count(&ch, "dlq", N);
}

#[test]
fn a_message_returned_by_a_closing_consumer_keeps_its_deadline() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(&ch, "dlq", false, &[]);
    declare(&ch, "work", false, &dlx_to("dlq"));
    // The consumer is waiting, so the message goes straight to it at publish.
    let consumer_conn = Connection::connect(&server.addr_string()).unwrap();
    let cch = consumer_conn.open_channel().unwrap();
    let consumer = cch
        .basic_consume("work", ConsumeOptions::default())
        .unwrap();
    publish(&ch, "work", "held", Some("300"), false);
    match consumer.recv_timeout(PATIENCE).unwrap() {
        ConsumerEvent::Delivery(d) => assert_eq!(d.body, b"held"),
        other => panic!("{other:?}"),
    }
    std::thread::sleep(Duration::from_millis(500));
    // The consumer goes away without acking, past the deadline: the message comes back
    // expired, so it is dead-lettered instead of being delivered again.
    consumer_conn.close().unwrap();
    wait_for_count(&ch, "dlq", 1);
    assert!(ch.basic_get("work", true).unwrap().is_none());
}

#[test]
fn ttls_up_to_ten_years_are_accepted_as_rabbitmq_accepts_them() {
    // RabbitMQ's `rabbit_misc:check_expiry`: 0 … 315,360,000,000 ms (ten years), far
    // beyond 2^32 - 1 ms (49.7 days).
    const TEN_YEARS_MS: i64 = 315_360_000_000;
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(
        &ch,
        "long",
        false,
        &[
            ("x-message-ttl", FieldValue::I64(TEN_YEARS_MS)),
            ("x-expires", FieldValue::I64(TEN_YEARS_MS)),
        ],
    );
    for expiration in ["4294967296", "315360000000"] {
        publish(&ch, "long", "kept", Some(expiration), false);
    }
    assert_eq!(count(&ch, "long"), 2, "neither expired nor refused");
    // One more ms is refused, with RabbitMQ's reason for the message property.
    publish(&ch, "long", "too long", Some("315360000001"), false);
    let err = ch.basic_get("long", true).unwrap_err();
    assert_eq!(err.reply_code(), Some(406), "{err}");
    assert!(
        err.to_string()
            .contains("invalid expiration '315360000001': {value_too_large,315360000001}"),
        "{err}"
    );
    for name in ["x-message-ttl", "x-expires"] {
        let ch = conn.open_channel().unwrap();
        let mut arguments = FieldTable::new();
        arguments.insert(name.into(), FieldValue::I64(TEN_YEARS_MS + 1));
        let options = QueueDeclareOptions {
            arguments,
            ..QueueDeclareOptions::default()
        };
        let err = ch.queue_declare("longer", options).unwrap_err();
        assert_eq!(err.reply_code(), Some(406), "{name}: {err}");
    }
    // A policy takes any non-negative TTL and expiry, as RabbitMQ's policy validator does.
    conn.set_policy(
        "/",
        "forever",
        "^long$",
        r#"{"message-ttl": 400000000000, "expires": 400000000000}"#,
        0,
        "queues",
    )
    .expect("policy accepted");
    let ch = conn.open_channel().unwrap();
    publish(&ch, "long", "under the policy", Some("1000000"), false);
    assert_eq!(count(&ch, "long"), 3);
}
