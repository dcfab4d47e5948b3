//! Dead-lettering of rejected messages (issue 4, part 1, reason `rejected`): a poison
//! message nacked without requeue lands in the dead-letter queue with RabbitMQ's `x-death`
//! header; a repeated death counts up; persistent dead letters survive a restart.

use crate::common;

use common::{ServerProcess, TestServer};
use relaymq::client::{Channel, Connection, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};

fn queue(ch: &Channel, name: &str, durable: bool, args: &[(&str, &str)]) {
    let options = QueueDeclareOptions {
        durable,
        arguments: args
            .iter()
            .map(|(k, v)| (k.to_string(), FieldValue::string(*v)))
            .collect(),
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

fn deaths(headers: &FieldTable) -> Vec<FieldTable> {
    match headers.get("x-death") {
        Some(FieldValue::Array(items)) => items
            .iter()
            .map(|d| match d {
                FieldValue::Table(t) => t.clone(),
                other => panic!("x-death entry {other:?}"),
            })
            .collect(),
        other => panic!("x-death is {other:?}"),
    }
}

fn text<'a>(t: &'a FieldTable, k: &str) -> &'a str {
    t.get(k).and_then(FieldValue::as_str).unwrap_or_default()
}

/// Takes one message from `queue` and rejects it without requeue.
fn reject_one(ch: &Channel, queue: &str) {
    let m = ch
        .basic_get(queue, false)
        .unwrap()
        .expect("a message to reject");
    ch.basic_reject(m.delivery_tag, false).unwrap();
}

#[test]
fn a_poison_message_nacked_without_requeue_lands_in_the_dead_letter_queue_with_x_death() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    queue(&ch, "dlq", false, &[]);
    queue(
        &ch,
        "work",
        false,
        &[
            ("x-dead-letter-exchange", ""),
            ("x-dead-letter-routing-key", "dlq"),
        ],
    );
    let props = BasicProperties {
        content_type: Some("text/plain".into()),
        ..BasicProperties::default()
    };
    ch.basic_publish("", "work", false, &props, b"poison")
        .unwrap();
    let m = ch.basic_get("work", false).unwrap().expect("poison");
    ch.basic_nack(m.delivery_tag, false, false).unwrap();

    let dead = ch.basic_get("dlq", true).unwrap().expect("dead-lettered");
    assert_eq!(dead.body, b"poison");
    assert_eq!(dead.routing_key, "dlq");
    assert_eq!(dead.properties.content_type.as_deref(), Some("text/plain"));
    let headers = dead.properties.headers.expect("headers");
    let d = deaths(&headers);
    assert_eq!(d.len(), 1);
    assert_eq!(text(&d[0], "queue"), "work");
    assert_eq!(text(&d[0], "reason"), "rejected");
    assert_eq!(text(&d[0], "exchange"), "");
    assert_eq!(d[0].get("count"), Some(&FieldValue::I64(1)));
    assert_eq!(
        d[0].get("routing-keys"),
        Some(&FieldValue::Array(vec![FieldValue::string("work")]))
    );
    assert!(matches!(d[0].get("time"), Some(FieldValue::Timestamp(_))));
    assert_eq!(text(&headers, "x-first-death-queue"), "work");
    assert_eq!(text(&headers, "x-first-death-reason"), "rejected");
    assert!(
        ch.basic_get("work", true).unwrap().is_none(),
        "it left the source"
    );
}

#[test]
fn a_message_dead_lettered_twice_from_the_same_queue_counts_up() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    // work -> back (rejected) -> work (rejected) -> back: two queues dead-lettering to
    // each other through the default exchange.
    queue(
        &ch,
        "work",
        false,
        &[
            ("x-dead-letter-exchange", ""),
            ("x-dead-letter-routing-key", "back"),
        ],
    );
    queue(
        &ch,
        "back",
        false,
        &[
            ("x-dead-letter-exchange", ""),
            ("x-dead-letter-routing-key", "work"),
        ],
    );
    ch.basic_publish("", "work", false, &BasicProperties::default(), b"m")
        .unwrap();
    reject_one(&ch, "work");
    reject_one(&ch, "back");
    reject_one(&ch, "work");
    let m = ch.basic_get("back", true).unwrap().expect("in back again");
    let d = deaths(m.properties.headers.as_ref().unwrap());
    assert_eq!(d.len(), 2, "one entry per queue and reason");
    assert_eq!(text(&d[0], "queue"), "work", "most recent first");
    assert_eq!(d[0].get("count"), Some(&FieldValue::I64(2)));
    assert_eq!(text(&d[1], "queue"), "back");
    assert_eq!(d[1].get("count"), Some(&FieldValue::I64(1)));
}

#[test]
fn without_a_dead_letter_routing_key_the_original_key_is_kept() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare("dlx", "direct", Default::default())
        .unwrap();
    queue(&ch, "parked", false, &[]);
    ch.queue_bind("parked", "dlx", "orders.new", FieldTable::new())
        .unwrap();
    queue(
        &ch,
        "orders.new",
        false,
        &[("x-dead-letter-exchange", "dlx")],
    );
    ch.basic_publish("", "orders.new", false, &BasicProperties::default(), b"o")
        .unwrap();
    reject_one(&ch, "orders.new");
    let m = ch.basic_get("parked", true).unwrap().expect("parked");
    assert_eq!(m.routing_key, "orders.new");
    assert_eq!(m.exchange, "dlx");
}

#[test]
fn invalid_dead_letter_arguments_are_refused_with_406() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-routing-key".into(), FieldValue::string("k"));
    let options = QueueDeclareOptions {
        arguments: args,
        ..QueueDeclareOptions::default()
    };
    let err = ch.queue_declare("no-exchange", options).unwrap_err();
    assert_eq!(err.reply_code(), Some(406), "{err}");
}

#[test]
fn a_persistent_dead_letter_in_a_durable_queue_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    queue(&ch, "dlq", true, &[]);
    queue(
        &ch,
        "work",
        true,
        &[
            ("x-dead-letter-exchange", ""),
            ("x-dead-letter-routing-key", "dlq"),
        ],
    );
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    ch.basic_publish("", "work", false, &props, b"keep me")
        .unwrap();
    reject_one(&ch, "work");
    conn.close().unwrap();
    assert!(server.terminate().success());
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    assert!(ch.basic_get("work", true).unwrap().is_none());
    let m = ch
        .basic_get("dlq", true)
        .unwrap()
        .expect("the dead letter survived");
    assert_eq!(m.body, b"keep me");
    assert_eq!(
        text(&deaths(m.properties.headers.as_ref().unwrap())[0], "reason"),
        "rejected"
    );
    // The dead-letter settings survived with the queue's arguments.
    ch.basic_publish("", "work", false, &props, b"again")
        .unwrap();
    reject_one(&ch, "work");
    assert!(ch.basic_get("dlq", true).unwrap().is_some());
    conn.close().unwrap();
    assert!(server.terminate().success());
}

fn limited_dlx(ch: &Channel, name: &str, max: i64, overflow: &str, dl_key: &str) {
    let mut args = FieldTable::new();
    args.insert("x-max-length".into(), FieldValue::I64(max));
    args.insert("x-overflow".into(), FieldValue::string(overflow));
    args.insert("x-dead-letter-exchange".into(), FieldValue::string(""));
    args.insert(
        "x-dead-letter-routing-key".into(),
        FieldValue::string(dl_key),
    );
    let options = QueueDeclareOptions {
        arguments: args,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare");
}

fn drain(ch: &Channel, queue: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).unwrap() {
        let reason = m
            .properties
            .headers
            .as_ref()
            .map(|h| text(&deaths(h)[0], "reason").to_string())
            .unwrap_or_default();
        out.push((String::from_utf8(m.body).unwrap(), reason));
        assert!(out.len() < 100);
    }
    out
}

#[test]
fn messages_dropped_by_a_length_limit_are_dead_lettered_with_reason_maxlen() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    queue(&ch, "overflow", false, &[]);
    limited_dlx(&ch, "bounded", 2, "drop-head", "overflow");
    for i in 1..=4 {
        ch.basic_publish(
            "",
            "bounded",
            false,
            &BasicProperties::default(),
            i.to_string().as_bytes(),
        )
        .unwrap();
    }
    let kept: Vec<String> = drain(&ch, "bounded").into_iter().map(|(b, _)| b).collect();
    assert_eq!(kept, ["3", "4"]);
    assert_eq!(
        drain(&ch, "overflow"),
        [
            ("1".to_string(), "maxlen".to_string()),
            ("2".into(), "maxlen".into())
        ]
    );
}

#[test]
fn reject_publish_dlx_nacks_and_dead_letters_what_does_not_fit() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    queue(&ch, "spill", false, &[]);
    limited_dlx(&ch, "full", 3, "reject-publish-dlx", "spill");
    ch.confirm_select().unwrap();
    let mut acked = Vec::new();
    for i in 1..=5 {
        ch.basic_publish(
            "",
            "full",
            false,
            &BasicProperties::default(),
            i.to_string().as_bytes(),
        )
        .unwrap();
        acked.push(
            ch.wait_for_confirms(std::time::Duration::from_secs(10))
                .unwrap(),
        );
    }
    assert_eq!(acked, [true, true, true, false, false]);
    let kept: Vec<String> = drain(&ch, "full").into_iter().map(|(b, _)| b).collect();
    assert_eq!(kept, ["1", "2", "3"]);
    assert_eq!(
        drain(&ch, "spill"),
        [
            ("4".to_string(), "maxlen".to_string()),
            ("5".into(), "maxlen".into())
        ]
    );
}

#[test]
fn a_dead_letter_cycle_of_automatic_deaths_stops() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    // a and b dead-letter into each other and hold one message each.
    limited_dlx(&ch, "a", 1, "drop-head", "b");
    limited_dlx(&ch, "b", 1, "drop-head", "a");
    for i in 1..=5 {
        ch.basic_publish(
            "",
            "a",
            false,
            &BasicProperties::default(),
            i.to_string().as_bytes(),
        )
        .unwrap();
    }
    // Each drop from `a` moves the old head to `b`, whose own old head would go back to
    // `a`, where it already died: RabbitMQ's cycle rule drops it there instead of
    // ping-ponging. So `a` holds the newest, `b` the one before.
    let a: Vec<String> = drain(&ch, "a").into_iter().map(|(b, _)| b).collect();
    let b: Vec<(String, String)> = drain(&ch, "b");
    assert_eq!(a, ["5"]);
    assert_eq!(b, [("4".to_string(), "maxlen".to_string())]);
}

/// A `dlx` direct exchange with queues `dl-rk`, `dl-cc` and `dl-bcc` bound with the keys
/// `work`, `cc` and `bcc`, and a queue `work` dead-lettering to it without a dead-letter
/// routing key (its messages, published to the default exchange, have the key `work`).
fn cc_bcc_setup(ch: &Channel, durable: bool) {
    let options = relaymq::client::ExchangeDeclareOptions {
        durable,
        ..Default::default()
    };
    ch.exchange_declare("dlx", "direct", options).unwrap();
    for (q, key) in [("dl-rk", "work"), ("dl-cc", "cc"), ("dl-bcc", "bcc")] {
        queue(ch, q, durable, &[]);
        ch.queue_bind(q, "dlx", key, FieldTable::new()).unwrap();
    }
    queue(ch, "work", durable, &[("x-dead-letter-exchange", "dlx")]);
}

/// Properties with `CC: [cc]` and `BCC: [bcc]`.
fn with_cc_bcc(delivery_mode: Option<u8>) -> BasicProperties {
    let mut headers = FieldTable::new();
    for (k, v) in [("CC", "cc"), ("BCC", "bcc")] {
        headers.insert(k.into(), FieldValue::Array(vec![FieldValue::string(v)]));
    }
    BasicProperties {
        headers: Some(headers),
        delivery_mode,
        ..BasicProperties::default()
    }
}

/// Rejects the message of `work` and checks it reached `dl-rk`, `dl-cc` and `dl-bcc`
/// with RabbitMQ's headers: `CC` kept, no `BCC`, `routing-keys` without the BCC key.
fn reject_and_check_cc_bcc_dead_letters(ch: &Channel, body: &[u8]) {
    reject_one(ch, "work");
    for q in ["dl-rk", "dl-cc", "dl-bcc"] {
        let m = ch
            .basic_get(q, true)
            .unwrap()
            .unwrap_or_else(|| panic!("nothing in {q}"));
        assert_eq!(m.body, body);
        assert_eq!(m.routing_key, "work", "{q}");
        let h = m.properties.headers.expect("headers");
        assert!(!h.contains_key("BCC"), "BCC reached {q}: {h:?}");
        assert!(h.contains_key("CC"), "CC is kept");
        let keys = deaths(&h)[0].get("routing-keys").cloned();
        assert_eq!(
            keys,
            Some(FieldValue::Array(vec![
                FieldValue::string("work"),
                FieldValue::string("cc")
            ])),
            "x-death routing-keys show the CC keys, not the BCC keys"
        );
        assert!(ch.basic_get(q, true).unwrap().is_none(), "one copy in {q}");
    }
}

#[test]
fn dead_lettering_without_a_routing_key_keeps_the_cc_and_bcc_keys() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    cc_bcc_setup(&ch, false);
    ch.basic_publish("", "work", false, &with_cc_bcc(None), b"first")
        .unwrap();
    // Published to the default exchange: "cc" and "bcc" name no queue.
    reject_and_check_cc_bcc_dead_letters(&ch, b"first");
    // With x-dead-letter-routing-key, that key alone routes it (RabbitMQ).
    queue(
        &ch,
        "keyed",
        false,
        &[
            ("x-dead-letter-exchange", "dlx"),
            ("x-dead-letter-routing-key", "work"),
        ],
    );
    ch.basic_publish("", "keyed", false, &with_cc_bcc(None), b"keyed")
        .unwrap();
    reject_one(&ch, "keyed");
    assert!(ch.basic_get("dl-rk", true).unwrap().is_some());
    assert!(ch.basic_get("dl-cc", true).unwrap().is_none());
    assert!(ch.basic_get("dl-bcc", true).unwrap().is_none());
}

#[test]
fn a_stored_message_keeps_its_bcc_keys_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    cc_bcc_setup(&ch, true);
    ch.basic_publish("", "work", false, &with_cc_bcc(Some(2)), b"stored")
        .unwrap();
    conn.close().unwrap();
    assert!(server.terminate().success());
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    reject_and_check_cc_bcc_dead_letters(&ch, b"stored");
    conn.close().unwrap();
    assert!(server.terminate().success());
}
