//! Exchanges end to end: direct, fanout and headers routing, the default and standard
//! exchanges, declaration rules, exchange-to-exchange bindings, internal and auto-delete
//! exchanges, and deletion (AMQP 0-9-1 §3.1.3 and RabbitMQ's semantics).

use crate::common;
use common::connect;

use common::TestServer;
use relaymq::client::{
    Channel, ClientError, Connection, ExchangeDeclareOptions, ListKind, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::fmt::Debug;

/// The refusal's text when `result` is a channel close with `code`; panics otherwise.
#[track_caller]
fn channel_closed<T: Debug>(result: Result<T, ClientError>, code: u16) -> String {
    match result {
        Err(ClientError::ChannelClosed { code: c, text }) if c == code => text,
        other => panic!("expected channel.close {code}, got {other:?}"),
    }
}

fn exclusive_queue(ch: &Channel) -> String {
    let options = QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("", options).expect("declare").queue
}

fn declare(ch: &Channel, name: &str, kind: &str) {
    ch.exchange_declare(name, kind, ExchangeDeclareOptions::default())
        .expect("exchange.declare");
}

fn passive() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    }
}

fn exists(conn: &Connection, name: &str) -> bool {
    let ch = conn.open_channel().expect("channel");
    match ch.exchange_declare(name, "", passive()) {
        Ok(()) => true,
        Err(e) if e.reply_code() == Some(404) => false,
        Err(e) => panic!("passive declare of {name:?}: {e}"),
    }
}

fn publish(ch: &Channel, exchange: &str, key: &str, body: &[u8]) {
    ch.basic_publish(exchange, key, false, &BasicProperties::default(), body)
        .expect("publish");
}

fn publish_with_headers(ch: &Channel, exchange: &str, headers: FieldTable, body: &[u8]) {
    let props = BasicProperties {
        headers: Some(headers),
        ..BasicProperties::default()
    };
    ch.basic_publish(exchange, "ignored", false, &props, body)
        .expect("publish");
}

/// The bodies of every message ready in `queue`, taken in order.
fn drain(ch: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).expect("get") {
        out.push(m.body);
    }
    out
}

fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn s(v: &str) -> FieldValue {
    FieldValue::string(v)
}

/// The `list exchanges` row of `name`.
fn exchange_row(conn: &Connection, name: &str) -> Option<FieldTable> {
    conn.list(ListKind::Exchanges)
        .expect("list")
        .into_iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some(name))
}

/// Explicit bindings whose source is `exchange`: (destination, routing key).
fn bindings_from(conn: &Connection, exchange: &str) -> Vec<(String, String)> {
    let text = |r: &FieldTable, k: &str| {
        r.get(k)
            .and_then(FieldValue::as_str)
            .unwrap_or_default()
            .to_string()
    };
    conn.list(ListKind::Bindings)
        .expect("list")
        .iter()
        .filter(|r| text(r, "source") == exchange)
        .map(|r| (text(r, "destination"), text(r, "routing_key")))
        .collect()
}

#[test]
fn a_direct_exchange_routes_to_the_queues_bound_with_the_exact_key() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "orders", "direct");
    let (q1, q2, q3) = (
        exclusive_queue(&ch),
        exclusive_queue(&ch),
        exclusive_queue(&ch),
    );
    ch.queue_bind(&q1, "orders", "eu", FieldTable::new())
        .unwrap();
    ch.queue_bind(&q2, "orders", "us", FieldTable::new())
        .unwrap();
    ch.queue_bind(&q3, "orders", "eu", FieldTable::new())
        .unwrap();
    ch.queue_bind(&q3, "orders", "us", FieldTable::new())
        .unwrap();
    publish(&ch, "orders", "eu", b"1");
    publish(&ch, "orders", "us", b"2");
    publish(&ch, "orders", "EU", b"3");
    publish(&ch, "orders", "eu.x", b"4");
    assert_eq!(drain(&ch, &q1), [b"1"]);
    assert_eq!(drain(&ch, &q2), [b"2"]);
    assert_eq!(drain(&ch, &q3), [b"1", b"2"]);
}

#[test]
fn a_fanout_exchange_routes_to_every_bound_queue_whatever_the_key() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "news", "fanout");
    let (q1, q2, unbound) = (
        exclusive_queue(&ch),
        exclusive_queue(&ch),
        exclusive_queue(&ch),
    );
    ch.queue_bind(&q1, "news", "", FieldTable::new()).unwrap();
    ch.queue_bind(&q2, "news", "some.key", FieldTable::new())
        .unwrap();
    publish(&ch, "news", "anything", b"a");
    publish(&ch, "news", "", b"b");
    assert_eq!(drain(&ch, &q1), [b"a", b"b"]);
    assert_eq!(drain(&ch, &q2), [b"a", b"b"]);
    assert!(drain(&ch, &unbound).is_empty());
}

#[test]
fn a_headers_binding_with_x_match_all_needs_every_header_equal() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    let args = table(&[
        ("x-match", s("all")),
        ("format", s("pdf")),
        ("type", s("report")),
    ]);
    ch.queue_bind(&q, "amq.headers", "", args).unwrap();
    let both = table(&[("format", s("pdf")), ("type", s("report"))]);
    let mut more = both.clone();
    more.insert("extra".into(), FieldValue::I32(1));
    publish_with_headers(&ch, "amq.headers", both, b"both");
    publish_with_headers(&ch, "amq.headers", more, b"both and more");
    publish_with_headers(&ch, "amq.headers", table(&[("format", s("pdf"))]), b"one");
    publish_with_headers(
        &ch,
        "amq.headers",
        table(&[("format", s("pdf")), ("type", s("log"))]),
        b"other value",
    );
    publish(&ch, "amq.headers", "", b"no headers");
    assert_eq!(drain(&ch, &q), [&b"both"[..], b"both and more"]);
}

#[test]
fn a_headers_binding_with_x_match_any_needs_one_header_equal() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    let args = table(&[
        ("x-match", s("any")),
        ("format", s("pdf")),
        ("type", s("report")),
    ]);
    ch.queue_bind(&q, "amq.match", "", args).unwrap();
    publish_with_headers(&ch, "amq.match", table(&[("format", s("pdf"))]), b"format");
    publish_with_headers(&ch, "amq.match", table(&[("type", s("report"))]), b"type");
    publish_with_headers(&ch, "amq.match", table(&[("format", s("zip"))]), b"wrong");
    publish_with_headers(&ch, "amq.match", table(&[("other", s("pdf"))]), b"no key");
    publish(&ch, "amq.match", "", b"no headers");
    assert_eq!(drain(&ch, &q), [&b"format"[..], b"type"]);
}

#[test]
fn a_headers_binding_without_x_match_means_all() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    let args = table(&[("a", FieldValue::I32(1)), ("b", FieldValue::I32(2))]);
    ch.queue_bind(&q, "amq.headers", "", args).unwrap();
    publish_with_headers(
        &ch,
        "amq.headers",
        table(&[("a", FieldValue::I32(1))]),
        b"a",
    );
    publish_with_headers(
        &ch,
        "amq.headers",
        table(&[("a", FieldValue::I32(1)), ("b", FieldValue::I32(2))]),
        b"a and b",
    );
    assert_eq!(drain(&ch, &q), [b"a and b"]);
}

#[test]
fn a_headers_binding_ignores_its_x_arguments() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let (all, any) = (exclusive_queue(&ch), exclusive_queue(&ch));
    let all_args = table(&[
        ("x-match", s("all")),
        ("x-tenant", s("acme")),
        ("kind", s("invoice")),
    ]);
    ch.queue_bind(&all, "amq.headers", "", all_args).unwrap();
    // With only x- arguments besides x-match, `any` has nothing to match.
    let any_args = table(&[("x-match", s("any")), ("x-tenant", s("acme"))]);
    ch.queue_bind(&any, "amq.headers", "", any_args).unwrap();
    publish_with_headers(
        &ch,
        "amq.headers",
        table(&[("kind", s("invoice"))]),
        b"without x-tenant",
    );
    publish_with_headers(
        &ch,
        "amq.headers",
        table(&[("x-tenant", s("acme"))]),
        b"only x-tenant",
    );
    assert_eq!(drain(&ch, &all), [b"without x-tenant"]);
    assert!(drain(&ch, &any).is_empty());
}

#[test]
fn a_headers_binding_with_an_invalid_x_match_is_refused_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    let args = table(&[("x-match", s("some")), ("a", s("1"))]);
    let text = channel_closed(ch.queue_bind(&q, "amq.headers", "", args), 406);
    assert!(text.contains("x-match"), "{text}");
    assert!(!ch.is_open());
    assert!(conn.is_open());
    assert!(bindings_from(&conn, "amq.headers").is_empty());
    // The queue is still there (its connection is) and gets nothing from amq.headers.
    let ch = conn.open_channel().unwrap();
    publish_with_headers(&ch, "amq.headers", table(&[("a", s("1"))]), b"x");
    assert!(drain(&ch, &q).is_empty());
}

#[test]
fn the_default_exchange_routes_to_the_queue_named_by_the_routing_key() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("jobs", QueueDeclareOptions::default())
        .unwrap();
    ch.queue_declare("jobs.other", QueueDeclareOptions::default())
        .unwrap();
    publish(&ch, "", "jobs", b"for jobs");
    publish(&ch, "", "no-such-queue", b"dropped");
    let m = ch.basic_get("jobs", true).unwrap().expect("routed");
    assert_eq!(m.body, b"for jobs");
    assert_eq!(m.exchange, "");
    assert_eq!(m.routing_key, "jobs");
    assert!(drain(&ch, "jobs").is_empty());
    assert!(drain(&ch, "jobs.other").is_empty());
}

#[test]
fn declaring_the_default_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    channel_closed(
        ch.exchange_declare("", "direct", ExchangeDeclareOptions::default()),
        403,
    );
    // Still the default exchange.
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    publish(&ch, "", "q", b"m");
    assert_eq!(drain(&ch, "q"), [b"m"]);
}

#[test]
fn deleting_the_default_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    channel_closed(ch.exchange_delete("", false), 403);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    publish(&ch, "", "q", b"m");
    assert_eq!(drain(&ch, "q"), [b"m"]);
}

#[test]
fn binding_to_or_from_the_default_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    channel_closed(ch.queue_bind("q", "", "other", FieldTable::new()), 403);
    let ch = conn.open_channel().unwrap();
    channel_closed(
        ch.exchange_bind("", "amq.fanout", "", FieldTable::new()),
        403,
    );
    let ch = conn.open_channel().unwrap();
    channel_closed(
        ch.exchange_bind("amq.fanout", "", "", FieldTable::new()),
        403,
    );
    let ch = conn.open_channel().unwrap();
    publish(&ch, "", "other", b"not routed to q");
    assert!(drain(&ch, "q").is_empty());
    assert!(bindings_from(&conn, "").iter().all(|(d, k)| d == k));
    assert!(bindings_from(&conn, "amq.fanout").is_empty());
}

#[test]
fn declaring_an_amq_prefixed_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(
        ch.exchange_declare("amq.foo", "direct", ExchangeDeclareOptions::default()),
        403,
    );
    assert!(text.contains("amq."), "{text}");
    assert!(!exists(&conn, "amq.foo"));
}

#[test]
fn the_standard_exchanges_exist_with_their_types() {
    let server = TestServer::start();
    let conn = connect(&server);
    for (name, kind) in [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ] {
        assert!(exists(&conn, name), "{name}");
        let row = exchange_row(&conn, name).expect(name);
        assert_eq!(row.get("type").and_then(FieldValue::as_str), Some(kind));
        assert_eq!(row.get("durable"), Some(&FieldValue::Bool(true)));
    }
}

#[test]
fn redeclaring_a_standard_exchange_with_its_own_flags_succeeds() {
    // RabbitMQ refuses the `amq.` prefix only when the exchange would be created; client
    // libraries commonly declare `amq.topic` before binding to it.
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare("amq.topic", "topic", durable.clone())
        .unwrap();
    ch.exchange_declare("amq.match", "headers", durable)
        .unwrap();
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "amq.topic", "a.#", FieldTable::new())
        .unwrap();
    publish(&ch, "amq.topic", "a.b", b"routed");
    assert_eq!(drain(&ch, &q), [b"routed"]);
}

#[test]
fn redeclaring_a_standard_exchange_with_other_flags_is_refused_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(
        ch.exchange_declare("amq.topic", "topic", ExchangeDeclareOptions::default()),
        406,
    );
    assert!(text.contains("durable"), "{text}");
    let ch = conn.open_channel().unwrap();
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel_closed(ch.exchange_declare("amq.direct", "fanout", durable), 406);
    let row = exchange_row(&conn, "amq.direct").unwrap();
    assert_eq!(row.get("type").and_then(FieldValue::as_str), Some("direct"));
}

#[test]
fn deleting_a_standard_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(ch.exchange_delete("amq.direct", false), 403);
    assert_eq!(
        text,
        "deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    );
    assert!(exists(&conn, "amq.direct"));
}

#[test]
fn redeclaring_with_another_type_is_refused_with_406_and_keeps_the_exchange() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "x", "direct");
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "x", "k", FieldTable::new()).unwrap();
    let text = channel_closed(
        ch.exchange_declare("x", "fanout", ExchangeDeclareOptions::default()),
        406,
    );
    assert!(text.contains("type"), "{text}");
    let row = exchange_row(&conn, "x").expect("still declared");
    assert_eq!(row.get("type").and_then(FieldValue::as_str), Some("direct"));
    // Still routes as direct, with its binding.
    let ch = conn.open_channel().unwrap();
    publish(&ch, "x", "k", b"match");
    publish(&ch, "x", "other", b"no match");
    assert_eq!(drain(&ch, &q), [b"match"]);
}

#[test]
fn redeclaring_with_another_durability_is_refused_with_406_and_keeps_the_exchange() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "x", "topic");
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    let text = channel_closed(ch.exchange_declare("x", "topic", durable), 406);
    assert!(text.contains("durable"), "{text}");
    let row = exchange_row(&conn, "x").expect("still declared");
    assert_eq!(row.get("durable"), Some(&FieldValue::Bool(false)));
    assert_eq!(row.get("type").and_then(FieldValue::as_str), Some("topic"));
    // An equivalent redeclaration is still fine.
    let ch = conn.open_channel().unwrap();
    declare(&ch, "x", "topic");
}

/// RabbitMQ 4.x (`rabbit_exchange:check_type`): 406, a channel error; 3.x closed the
/// connection with 503.
#[test]
fn declaring_an_unknown_type_closes_the_channel_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(
        ch.exchange_declare("x", "x-unknown", ExchangeDeclareOptions::default()),
        406,
    );
    assert_eq!(text, "unknown exchange type 'x-unknown'");
    assert!(!ch.is_open());
    assert!(conn.is_open(), "a channel error: the connection stays");
    assert!(!exists(&conn, "x"));
}

#[test]
fn a_passive_declare_of_a_missing_exchange_fails_with_404_and_only_closes_the_channel() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(ch.exchange_declare("missing", "direct", passive()), 404);
    assert!(text.contains("missing"), "{text}");
    assert!(!ch.is_open());
    assert!(conn.is_open());
    assert!(!exists(&conn, "missing"), "passive declare created it");
}

#[test]
fn publishing_to_a_missing_exchange_closes_the_channel_with_404() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    publish(&ch, "missing", "k", b"m");
    // The refusal of the publish shows up on the next request of the channel.
    let text = channel_closed(ch.basic_get(&q, true), 404);
    assert!(text.contains("missing"), "{text}");
    assert!(conn.is_open());
    let ch = conn.open_channel().unwrap();
    assert!(drain(&ch, &q).is_empty());
}

#[test]
fn a_message_reaches_a_queue_through_two_exchange_hops() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "front", "direct");
    declare(&ch, "back", "topic");
    ch.exchange_bind("back", "front", "orders.eu", FieldTable::new())
        .unwrap();
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "back", "orders.*", FieldTable::new())
        .unwrap();
    publish(&ch, "front", "orders.eu", b"two hops");
    publish(&ch, "front", "orders.us", b"not bound on front");
    let m = ch.basic_get(&q, true).unwrap().expect("routed");
    assert_eq!(m.body, b"two hops");
    assert_eq!(m.exchange, "front", "the exchange published to");
    assert!(drain(&ch, &q).is_empty());
    // Unbinding the hop stops it.
    ch.exchange_unbind("back", "front", "orders.eu", FieldTable::new())
        .unwrap();
    publish(&ch, "front", "orders.eu", b"after unbind");
    assert!(drain(&ch, &q).is_empty());
}

#[test]
fn a_cycle_of_exchange_bindings_terminates_and_delivers_once() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    for x in ["e1", "e2", "e3"] {
        declare(&ch, x, "fanout");
    }
    ch.exchange_bind("e2", "e1", "", FieldTable::new()).unwrap();
    ch.exchange_bind("e3", "e2", "", FieldTable::new()).unwrap();
    ch.exchange_bind("e1", "e3", "", FieldTable::new()).unwrap();
    let q = exclusive_queue(&ch);
    for x in ["e1", "e2", "e3"] {
        ch.queue_bind(&q, x, "", FieldTable::new()).unwrap();
    }
    publish(&ch, "e2", "", b"around");
    assert_eq!(drain(&ch, &q), [b"around"]);
}

#[test]
fn publishing_to_an_internal_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let internal = ExchangeDeclareOptions {
        internal: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare("inner", "fanout", internal).unwrap();
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "inner", "", FieldTable::new()).unwrap();
    publish(&ch, "inner", "", b"direct publish");
    let text = channel_closed(ch.basic_get(&q, true), 403);
    assert!(text.contains("internal"), "{text}");
    assert!(conn.is_open());
    let ch = conn.open_channel().unwrap();
    assert!(drain(&ch, &q).is_empty());
}

#[test]
fn an_internal_exchange_routes_what_reaches_it_through_an_exchange_binding() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let internal = ExchangeDeclareOptions {
        internal: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare("inner", "direct", internal).unwrap();
    declare(&ch, "outer", "fanout");
    ch.exchange_bind("inner", "outer", "", FieldTable::new())
        .unwrap();
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "inner", "k", FieldTable::new()).unwrap();
    publish(&ch, "outer", "k", b"via outer");
    publish(&ch, "outer", "other", b"inner is direct");
    assert_eq!(drain(&ch, &q), [b"via outer"]);
}

#[test]
fn an_auto_delete_exchange_is_deleted_when_its_last_binding_is_removed() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let auto_delete = ExchangeDeclareOptions {
        auto_delete: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare("temp", "direct", auto_delete).unwrap();
    assert!(exists(&conn, "temp"), "not deleted before it had a binding");
    let (q1, q2) = (exclusive_queue(&ch), exclusive_queue(&ch));
    ch.queue_bind(&q1, "temp", "a", FieldTable::new()).unwrap();
    ch.queue_bind(&q2, "temp", "b", FieldTable::new()).unwrap();
    ch.queue_unbind(&q1, "temp", "a", FieldTable::new())
        .unwrap();
    assert!(exists(&conn, "temp"), "one binding is left");
    ch.queue_unbind(&q2, "temp", "b", FieldTable::new())
        .unwrap();
    assert!(!exists(&conn, "temp"));
    assert!(exchange_row(&conn, "temp").is_none());
}

#[test]
fn an_auto_delete_exchange_is_deleted_when_its_last_bound_queue_is_deleted() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let auto_delete = ExchangeDeclareOptions {
        auto_delete: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare("temp", "fanout", auto_delete).unwrap();
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "temp", "", FieldTable::new()).unwrap();
    ch.queue_delete(&q, false, false).unwrap();
    assert!(!exists(&conn, "temp"));
}

#[test]
fn delete_if_unused_refuses_an_exchange_with_bindings_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "busy", "fanout");
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "busy", "", FieldTable::new()).unwrap();
    let text = channel_closed(ch.exchange_delete("busy", true), 406);
    assert!(text.contains("in use"), "{text}");
    assert!(exists(&conn, "busy"));
    let ch = conn.open_channel().unwrap();
    publish(&ch, "busy", "", b"still routed");
    assert_eq!(drain(&ch, &q), [b"still routed"]);
    // Without bindings, if-unused deletes.
    ch.queue_unbind(&q, "busy", "", FieldTable::new()).unwrap();
    ch.exchange_delete("busy", true).unwrap();
    assert!(!exists(&conn, "busy"));
}

#[test]
fn deleting_an_exchange_removes_its_bindings() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "upstream", "fanout");
    declare(&ch, "x", "fanout");
    declare(&ch, "downstream", "fanout");
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "x", "", FieldTable::new()).unwrap();
    ch.exchange_bind("downstream", "x", "", FieldTable::new())
        .unwrap();
    ch.exchange_bind("x", "upstream", "", FieldTable::new())
        .unwrap();
    ch.exchange_delete("x", false).unwrap();
    assert!(!exists(&conn, "x"));
    assert!(bindings_from(&conn, "x").is_empty());
    assert!(
        bindings_from(&conn, "upstream").is_empty(),
        "binding to x survived"
    );
    declare(&ch, "x", "fanout");
    assert!(bindings_from(&conn, "x").is_empty());
    let q2 = exclusive_queue(&ch);
    ch.queue_bind(&q2, "downstream", "", FieldTable::new())
        .unwrap();
    publish(&ch, "x", "", b"after redeclare");
    assert!(drain(&ch, &q).is_empty(), "old queue binding survived");
    assert!(drain(&ch, &q2).is_empty(), "old exchange binding survived");
    let q3 = exclusive_queue(&ch);
    ch.queue_bind(&q3, "x", "", FieldTable::new()).unwrap();
    publish(&ch, "upstream", "", b"from upstream");
    assert!(drain(&ch, &q3).is_empty(), "binding from upstream survived");
}

#[test]
fn deleting_a_missing_exchange_succeeds() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.exchange_delete("never-declared", false).unwrap();
    assert!(ch.is_open());
}

#[test]
fn unbinding_what_is_not_bound_succeeds_as_in_rabbitmq() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "x", "direct");
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "x", "bound", FieldTable::new()).unwrap();
    // A binding that does not exist, a missing queue, a missing exchange.
    ch.queue_unbind(&q, "x", "never-bound", FieldTable::new())
        .unwrap();
    ch.queue_unbind("no-such-queue", "x", "k", FieldTable::new())
        .unwrap();
    ch.queue_unbind(&q, "no-such-exchange", "k", FieldTable::new())
        .unwrap();
    ch.exchange_unbind("x", "amq.direct", "never-bound", FieldTable::new())
        .unwrap();
    ch.exchange_unbind("no-such-exchange", "x", "k", FieldTable::new())
        .unwrap();
    ch.exchange_unbind("x", "no-such-exchange", "k", FieldTable::new())
        .unwrap();
    // Twice the same unbind: the second finds nothing and succeeds.
    ch.queue_unbind(&q, "x", "bound", FieldTable::new())
        .unwrap();
    ch.queue_unbind(&q, "x", "bound", FieldTable::new())
        .unwrap();
    assert!(ch.is_open());
    publish(&ch, "x", "bound", b"unbound");
    assert!(drain(&ch, &q).is_empty());
    // The default exchange is still refused, as in RabbitMQ.
    channel_closed(ch.queue_unbind(&q, "", &q, FieldTable::new()), 403);
}

#[test]
fn a_passive_declare_of_the_default_exchange_is_refused_with_403() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let text = channel_closed(ch.exchange_declare("", "", passive()), 403);
    assert_eq!(text, "operation not permitted on the default exchange");
    assert!(conn.is_open());
}

/// Properties whose headers hold `CC` and `BCC` arrays of long strings (RabbitMQ's
/// sender-selected distribution), and one more header.
fn cc_bcc(cc: &[&str], bcc: &[&str]) -> BasicProperties {
    let array = |keys: &[&str]| FieldValue::Array(keys.iter().map(|k| s(k)).collect());
    let mut headers = table(&[("kept", s("yes"))]);
    if !cc.is_empty() {
        headers.insert("CC".into(), array(cc));
    }
    if !bcc.is_empty() {
        headers.insert("BCC".into(), array(bcc));
    }
    BasicProperties {
        headers: Some(headers),
        ..BasicProperties::default()
    }
}

#[test]
fn cc_and_bcc_headers_add_routing_keys_and_bcc_never_reaches_a_consumer() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "mail", "direct");
    let (to, cc, bcc, none) = (
        exclusive_queue(&ch),
        exclusive_queue(&ch),
        exclusive_queue(&ch),
        exclusive_queue(&ch),
    );
    for (q, key) in [(&to, "to"), (&cc, "cc"), (&bcc, "bcc"), (&none, "none")] {
        ch.queue_bind(q, "mail", key, FieldTable::new()).unwrap();
    }
    // The same exchange and routing key before and after: a route remembered for the
    // plain publish must not answer for the one with headers, nor the other way round.
    publish(&ch, "mail", "to", b"plain");
    ch.basic_publish("mail", "to", false, &cc_bcc(&["cc"], &["bcc"]), b"copied")
        .unwrap();
    publish(&ch, "mail", "to", b"plain again");
    assert_eq!(drain(&ch, &to), [&b"plain"[..], b"copied", b"plain again"]);
    for q in [&cc, &bcc] {
        let m = ch.basic_get(q, true).unwrap().expect("a copy");
        assert_eq!(m.body, b"copied");
        // Deliveries show the routing key published with; CC stays, BCC is gone.
        assert_eq!(m.routing_key, "to");
        let h = m.properties.headers.expect("headers");
        assert_eq!(
            h.get("CC"),
            Some(&FieldValue::Array(vec![s("cc")])),
            "{h:?}"
        );
        assert_eq!(h.get("BCC"), None, "BCC reached a consumer: {h:?}");
        assert_eq!(h.get("kept"), Some(&s("yes")));
        assert!(drain(&ch, q).is_empty(), "one copy per queue");
    }
    assert!(drain(&ch, &none).is_empty());
    // Only the routing key's queue when the message names its own queue in CC too.
    ch.basic_publish("mail", "to", false, &cc_bcc(&["to", "to"], &[]), b"once")
        .unwrap();
    assert_eq!(drain(&ch, &to), [b"once"]);
    // The default exchange takes each key as a queue name.
    ch.basic_publish(
        "",
        &to,
        false,
        &cc_bcc(&[&cc], &[&bcc, "no-such-queue"]),
        b"d",
    )
    .unwrap();
    for q in [&to, &cc, &bcc] {
        assert_eq!(drain(&ch, q), [b"d"], "{q}");
    }
    // Keys that are not long strings are ignored, as RabbitMQ ignores them.
    let mut odd = cc_bcc(&[], &[]);
    if let Some(h) = odd.headers.as_mut() {
        h.insert(
            "CC".into(),
            FieldValue::Array(vec![FieldValue::I32(1), s("cc")]),
        );
    }
    ch.basic_publish("mail", "nothing", false, &odd, b"odd")
        .unwrap();
    assert_eq!(drain(&ch, &cc), [b"odd"]);
}

#[test]
fn cc_keys_follow_exchange_to_exchange_bindings_and_alternate_exchanges() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    // front (direct) --"hop"--> back (topic) --"*.eu"--> q_back
    declare(&ch, "back", "topic");
    let mut ae = ExchangeDeclareOptions::default();
    ae.arguments
        .insert("alternate-exchange".into(), s("unrouted"));
    ch.exchange_declare("front", "direct", ae).unwrap();
    declare(&ch, "unrouted", "topic");
    ch.exchange_bind("back", "front", "orders.eu", FieldTable::new())
        .unwrap();
    let (q_back, q_ae) = (exclusive_queue(&ch), exclusive_queue(&ch));
    ch.queue_bind(&q_back, "back", "*.eu", FieldTable::new())
        .unwrap();
    ch.queue_bind(&q_ae, "unrouted", "#", FieldTable::new())
        .unwrap();
    // The routing key matches nothing on `front`; a CC key reaches `back` through the
    // exchange binding: the alternate exchange is not used.
    ch.basic_publish("front", "x", false, &cc_bcc(&["orders.eu"], &[]), b"hop")
        .unwrap();
    assert_eq!(drain(&ch, &q_back), [b"hop"]);
    assert!(drain(&ch, &q_ae).is_empty());
    // No key matches on `front`: the alternate exchange gets the message with every key.
    ch.basic_publish("front", "x", false, &cc_bcc(&[], &["y"]), b"alt")
        .unwrap();
    assert!(drain(&ch, &q_back).is_empty());
    let m = ch
        .basic_get(&q_ae, true)
        .unwrap()
        .expect("via the alternate");
    assert_eq!(m.body, b"alt");
    assert_eq!(
        m.properties.headers.and_then(|h| h.get("BCC").cloned()),
        None
    );
}

#[test]
fn a_cc_or_bcc_header_that_is_not_an_array_is_refused_with_406() {
    let server = TestServer::start();
    let conn = connect(&server);
    let q = exclusive_queue(&conn.open_channel().unwrap());
    for (name, value, kind) in [
        ("CC", s(&q), "longstr"),
        ("BCC", FieldValue::I64(1), "long"),
    ] {
        let ch = conn.open_channel().unwrap();
        let props = BasicProperties {
            headers: Some(table(&[(name, value)])),
            ..BasicProperties::default()
        };
        ch.basic_publish("", &q, false, &props, b"m").unwrap();
        let text = channel_closed(ch.basic_get(&q, true), 406);
        assert_eq!(
            text,
            format!("invalid message: {{unacceptable_type_in_header,\"{name}\",{kind}}}")
        );
        let ch2 = conn.open_channel().unwrap();
        assert!(drain(&ch2, &q).is_empty(), "refused, not routed");
    }
}
