//! The consistent-hash exchange type `x-consistent-hash` end to end (RabbitMQ's plugin
//! `rabbitmq_consistent_hash_exchange`): the spread over bound queues follows the binding
//! weights, `hash-header` and `hash-property` hash what they name, bad weights and bad
//! arguments are refused with the plugin's texts, unbinding takes a queue off the ring,
//! exchange-to-exchange bindings, redeclares, the HTTP API, definitions and a restart.

use crate::common;

use common::{connect, ServerProcess, TestServer};
use relaymq::client::{
    Channel, ClientError, Connection, ExchangeDeclareOptions, ListKind, QueueDeclareOptions,
};
use relaymq::native::PublishMessage;
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::time::Duration;

/// The exchange type's name.
const TYPE: &str = "x-consistent-hash";
/// Longest wait for publisher confirms.
const CONFIRMS_WAIT: Duration = Duration::from_secs(60);
/// Messages per `publish_batch` call.
const BATCH: usize = 1000;
/// Largest relative difference allowed between a queue's share and its weight's share.
const SPREAD_TOLERANCE: f64 = 0.05;

/// The refusal's text when `result` is a channel close with `code`; panics otherwise.
#[track_caller]
fn channel_closed<T: Debug>(result: Result<T, ClientError>, code: u16) -> String {
    match result {
        Err(ClientError::ChannelClosed { code: c, text }) if c == code => text,
        other => panic!("expected channel.close {code}, got {other:?}"),
    }
}

fn s(v: &str) -> FieldValue {
    FieldValue::string(v)
}

fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn declare(ch: &Channel, name: &str, durable: bool, arguments: FieldTable) {
    let options = ExchangeDeclareOptions {
        durable,
        arguments,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(name, TYPE, options)
        .expect("declare x-consistent-hash");
}

fn queue(ch: &Channel, name: &str, durable: bool) {
    let options = QueueDeclareOptions {
        durable,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare queue");
}

/// Ready messages in `name` (a passive declare).
fn ready(ch: &Channel, name: &str) -> u32 {
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options)
        .expect("passive declare")
        .message_count
}

/// A deterministic generator (xorshift64*) of random-looking routing keys and values.
struct Keys(u64);

impl Keys {
    fn next_key(&mut self) -> String {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        format!("{:016x}", self.0.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }
}

/// Publishes `messages` with confirms and waits for them all.
fn publish_confirmed(ch: &Channel, messages: Vec<PublishMessage>) {
    for chunk in messages.chunks(BATCH) {
        ch.publish_batch(chunk).expect("publish");
    }
    assert!(ch.wait_for_confirms(CONFIRMS_WAIT).expect("confirms"));
}

fn message(exchange: &str, routing_key: &str, properties: BasicProperties) -> PublishMessage {
    PublishMessage {
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory: false,
        properties,
        body: Vec::new(),
    }
}

/// Checks each queue's share of `counts` is within [`SPREAD_TOLERANCE`] of its weight's.
#[track_caller]
fn assert_spread(counts: &[u32], weights: &[u32]) {
    let total: u32 = counts.iter().sum();
    let weight_total: u32 = weights.iter().sum();
    for (count, weight) in counts.iter().zip(weights) {
        let expected = f64::from(total) * f64::from(*weight) / f64::from(weight_total);
        let off = (f64::from(*count) - expected).abs() / expected;
        assert!(
            off < SPREAD_TOLERANCE,
            "counts {counts:?} for weights {weights:?}: weight {weight} is {:.1}% off",
            off * 100.0
        );
    }
}

/// Takes every message from `queues`, returning the value `key` reads from each, by queue.
fn values_by_queue(
    ch: &Channel,
    queues: &[&str],
    key: impl Fn(&BasicProperties) -> String,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for q in queues {
        let values: &mut BTreeSet<String> = out.entry(q.to_string()).or_default();
        while let Some(m) = ch.basic_get(q, true).expect("get") {
            values.insert(key(&m.properties));
        }
    }
    out
}

/// Checks no value reached two queues, and that more than one queue got values.
#[track_caller]
fn assert_each_value_in_one_queue(by_queue: &BTreeMap<String, BTreeSet<String>>) {
    let mut seen = BTreeSet::new();
    for values in by_queue.values() {
        for v in values {
            assert!(
                seen.insert(v.clone()),
                "{v} reached two queues: {by_queue:?}"
            );
        }
    }
    let used = by_queue.values().filter(|v| !v.is_empty()).count();
    assert!(used > 1, "one queue got everything: {by_queue:?}");
}

#[test]
fn the_spread_of_100000_random_routing_keys_follows_weights_1_2_3() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "spread", false, FieldTable::new());
    let queues = ["w1", "w2", "w3"];
    let weights = [1, 2, 3];
    for (q, w) in queues.iter().zip(weights) {
        queue(&ch, q, false);
        ch.queue_bind(q, "spread", &w.to_string(), FieldTable::new())
            .unwrap();
    }
    ch.confirm_select().unwrap();
    let mut keys = Keys(0x9e37_79b9_7f4a_7c15);
    let n = 100_000;
    let messages = (0..n)
        .map(|_| message("spread", &keys.next_key(), BasicProperties::default()))
        .collect();
    publish_confirmed(&ch, messages);
    let counts: Vec<u32> = queues.iter().map(|q| ready(&ch, q)).collect();
    println!("{n} random routing keys over weights {weights:?}: {counts:?}");
    assert_eq!(
        counts.iter().sum::<u32>(),
        n,
        "every message reaches one queue"
    );
    assert_spread(&counts, &weights);
}

#[test]
fn hash_header_hashes_the_header_and_a_missing_header_goes_to_one_queue() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(
        &ch,
        "by-header",
        false,
        table(&[("hash-header", s("tenant"))]),
    );
    let queues = ["h1", "h2", "h3", "h4"];
    for q in queues {
        queue(&ch, q, false);
        ch.queue_bind(q, "by-header", "1", FieldTable::new())
            .unwrap();
    }
    ch.confirm_select().unwrap();
    let with_tenant = |tenant: &str| BasicProperties {
        headers: Some(table(&[("tenant", s(tenant))])),
        ..BasicProperties::default()
    };
    // 100 tenants, 10 messages each, half of them with one routing key for all (a route
    // remembered per routing key would send them all where the first went), the others
    // each with its own.
    let mut keys = Keys(17);
    let tenants: Vec<String> = (0..100).map(|_| keys.next_key()).collect();
    let mut messages = Vec::new();
    for round in 0..10 {
        for t in &tenants {
            let key = match round % 2 {
                0 => "one.key.for.all".to_string(),
                _ => keys.next_key(),
            };
            messages.push(message("by-header", &key, with_tenant(t)));
        }
    }
    publish_confirmed(&ch, messages);
    let tenant_of = |p: &BasicProperties| {
        p.headers.as_ref().unwrap()["tenant"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let by_queue = values_by_queue(&ch, &queues, tenant_of);
    assert_each_value_in_one_queue(&by_queue);
    assert_eq!(
        by_queue.values().map(BTreeSet::len).sum::<usize>(),
        tenants.len()
    );

    // Without the header, every message goes to the same queue, whatever its routing key.
    let messages = (0..200)
        .map(|_| message("by-header", &keys.next_key(), BasicProperties::default()))
        .collect();
    publish_confirmed(&ch, messages);
    let counts: Vec<u32> = queues.iter().map(|q| ready(&ch, q)).collect();
    assert_eq!(counts.iter().sum::<u32>(), 200);
    assert!(counts.contains(&200), "{counts:?}");
}

#[test]
fn hash_property_hashes_message_id_correlation_id_or_timestamp() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    type Set = fn(&mut BasicProperties, u64, &str);
    type Get = fn(&BasicProperties) -> String;
    let cases: [(&str, Set, Get); 3] = [
        (
            "message_id",
            |p, _, v| p.message_id = Some(v.into()),
            |p| p.message_id.clone().unwrap(),
        ),
        (
            "correlation_id",
            |p, _, v| p.correlation_id = Some(v.into()),
            |p| p.correlation_id.clone().unwrap(),
        ),
        (
            "timestamp",
            |p, i, _| p.timestamp = Some(1_700_000_000 + i),
            |p| p.timestamp.unwrap().to_string(),
        ),
    ];
    let mut keys = Keys(23);
    for (property, set, get) in cases {
        let x = format!("by-{property}");
        declare(&ch, &x, false, table(&[("hash-property", s(property))]));
        let queues: Vec<String> = (1..=4).map(|i| format!("{property}-{i}")).collect();
        for q in &queues {
            queue(&ch, q, false);
            ch.queue_bind(q, &x, "1", FieldTable::new()).unwrap();
        }
        let mut messages = Vec::new();
        for round in 0..5 {
            for i in 0..60u64 {
                let mut p = BasicProperties::default();
                set(&mut p, i, &format!("value-{i}"));
                let key = match round % 2 {
                    0 => "one.key.for.all".to_string(),
                    _ => keys.next_key(),
                };
                messages.push(message(&x, &key, p));
            }
        }
        publish_confirmed(&ch, messages);
        let names: Vec<&str> = queues.iter().map(String::as_str).collect();
        let by_queue = values_by_queue(&ch, &names, get);
        assert_each_value_in_one_queue(&by_queue);
        assert_eq!(
            by_queue.values().map(BTreeSet::len).sum::<usize>(),
            60,
            "{property}"
        );

        // Without the property, one queue gets them all.
        let messages = (0..50)
            .map(|_| message(&x, &keys.next_key(), BasicProperties::default()))
            .collect();
        publish_confirmed(&ch, messages);
        let counts: Vec<u32> = names.iter().map(|q| ready(&ch, q)).collect();
        assert!(counts.contains(&50), "{property}: {counts:?}");
    }
}

#[test]
fn bad_weights_are_refused_with_the_plugins_texts() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "weights", false, FieldTable::new());
    queue(&ch, "q", false);
    for (key, text) in [
        ("abc", "The binding key must be an integer: <<\"abc\">>"),
        ("", "The binding key must be an integer: <<\"\">>"),
        ("1.5", "The binding key must be an integer: <<\"1.5\">>"),
        ("0", "The binding key must be greater than 0"),
        ("-1", "The binding key must be greater than 0"),
        ("10001", "The binding key must not exceed 10000"),
        ("500000000", "The binding key must not exceed 10000"),
    ] {
        let ch = conn.open_channel().unwrap();
        let got = channel_closed(ch.queue_bind("q", "weights", key, FieldTable::new()), 406);
        assert_eq!(got, text, "queue.bind with {key:?}");
    }
    // exchange.bind is checked the same way.
    let ch2 = conn.open_channel().unwrap();
    ch2.exchange_declare("fan", "fanout", ExchangeDeclareOptions::default())
        .unwrap();
    let got = channel_closed(
        ch2.exchange_bind("fan", "weights", "heavy", FieldTable::new()),
        406,
    );
    assert_eq!(got, "The binding key must be an integer: <<\"heavy\">>");
    // Nothing was bound; the limits themselves are accepted.
    let bound = |conn: &Connection| {
        conn.list(ListKind::Bindings)
            .unwrap()
            .iter()
            .filter(|r| r.get("source").and_then(FieldValue::as_str) == Some("weights"))
            .count()
    };
    assert_eq!(bound(&conn), 0);
    ch.queue_bind("q", "weights", "10000", FieldTable::new())
        .unwrap();
    ch.queue_bind("q", "weights", "+1", FieldTable::new())
        .unwrap();
    assert_eq!(bound(&conn), 2);
}

#[test]
fn bad_exchange_arguments_are_refused_with_the_plugins_texts() {
    let server = TestServer::start();
    let conn = connect(&server);
    for (args, text) in [
        (
            table(&[("hash-header", s("h")), ("hash-property", s("message_id"))]),
            "hash-header and hash-property are mutually exclusive",
        ),
        (
            table(&[("hash-property", s("app_id"))]),
            "Unsupported property: app_id",
        ),
        (
            table(&[("hash-header", FieldValue::I32(5))]),
            "invalid arg 'hash-header' for exchange 'bad' in vhost '/': 5 is not a string",
        ),
    ] {
        let ch = conn.open_channel().unwrap();
        let options = ExchangeDeclareOptions {
            arguments: args,
            ..ExchangeDeclareOptions::default()
        };
        let got = channel_closed(ch.exchange_declare("bad", TYPE, options), 406);
        assert_eq!(got, text);
    }
    let ch = conn.open_channel().unwrap();
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    };
    assert_eq!(
        ch.exchange_declare("bad", "", passive)
            .unwrap_err()
            .reply_code(),
        Some(404),
        "nothing was declared"
    );
    // The same arguments mean nothing to other types.
    let ch = conn.open_channel().unwrap();
    let options = ExchangeDeclareOptions {
        arguments: table(&[("hash-property", s("app_id"))]),
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare("plain", "direct", options).unwrap();
}

#[test]
fn a_redeclare_must_be_equivalent() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let args = table(&[("hash-header", s("h"))]);
    declare(&ch, "x", false, args.clone());
    declare(&ch, "x", false, args);
    let got = channel_closed(
        ch.exchange_declare(
            "x",
            TYPE,
            ExchangeDeclareOptions {
                arguments: table(&[("hash-header", s("other"))]),
                ..ExchangeDeclareOptions::default()
            },
        ),
        406,
    );
    assert!(got.starts_with("inequivalent arg 'hash-header'"), "{got}");
    let ch = conn.open_channel().unwrap();
    let got = channel_closed(
        ch.exchange_declare("x", "direct", ExchangeDeclareOptions::default()),
        406,
    );
    assert_eq!(
        got,
        "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'direct' but \
         current is 'x-consistent-hash'"
    );
    let row = conn
        .list(ListKind::Exchanges)
        .unwrap()
        .into_iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some("x"))
        .expect("listed");
    assert_eq!(row.get("type").and_then(FieldValue::as_str), Some(TYPE));
}

#[test]
fn unbinding_or_deleting_a_queue_takes_it_off_the_ring() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "ring", false, FieldTable::new());
    let queues = ["r1", "r2", "r3"];
    for q in queues {
        queue(&ch, q, false);
        ch.queue_bind(q, "ring", "2", FieldTable::new()).unwrap();
    }
    ch.confirm_select().unwrap();
    // Publishes 3000 messages with the keys `seed` generates; how many each queue got.
    let round = |ch: &Channel, seed: u64| -> Vec<u32> {
        let mut keys = Keys(seed);
        let messages = (0..3000)
            .map(|_| message("ring", &keys.next_key(), BasicProperties::default()))
            .collect();
        publish_confirmed(ch, messages);
        let counts = queues.iter().map(|q| ready(ch, q)).collect();
        for q in queues {
            ch.queue_purge(q).unwrap();
        }
        counts
    };
    let counts = round(&ch, 31);
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    assert_eq!(counts.iter().sum::<u32>(), 3000);

    ch.queue_unbind("r2", "ring", "2", FieldTable::new())
        .unwrap();
    let counts = round(&ch, 31);
    assert_eq!(counts[1], 0, "{counts:?}");
    assert_eq!(counts.iter().sum::<u32>(), 3000, "{counts:?}");
    assert!(counts[0] > 0 && counts[2] > 0, "{counts:?}");

    // A second binding of a queue does not change the ring; unbinding it leaves the first.
    ch.queue_bind("r1", "ring", "7", FieldTable::new()).unwrap();
    assert_eq!(round(&ch, 31), counts);
    ch.queue_unbind("r1", "ring", "7", FieldTable::new())
        .unwrap();
    assert_eq!(round(&ch, 31), counts);

    ch.queue_delete("r3", false, false).unwrap();
    let mut keys = Keys(37);
    let messages = (0..500)
        .map(|_| message("ring", &keys.next_key(), BasicProperties::default()))
        .collect();
    publish_confirmed(&ch, messages);
    assert_eq!(ready(&ch, "r1"), 500);
    assert_eq!(ready(&ch, "r2"), 0);
}

#[test]
fn an_exchange_bound_with_a_weight_passes_its_share_on() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "front", false, FieldTable::new());
    ch.exchange_declare("back", "fanout", ExchangeDeclareOptions::default())
        .unwrap();
    queue(&ch, "direct-share", false);
    queue(&ch, "via-back", false);
    ch.queue_bind("direct-share", "front", "1", FieldTable::new())
        .unwrap();
    ch.exchange_bind("back", "front", "3", FieldTable::new())
        .unwrap();
    ch.queue_bind("via-back", "back", "", FieldTable::new())
        .unwrap();
    ch.confirm_select().unwrap();
    let mut keys = Keys(41);
    let messages = (0..20_000)
        .map(|_| message("front", &keys.next_key(), BasicProperties::default()))
        .collect();
    publish_confirmed(&ch, messages);
    let counts = [ready(&ch, "direct-share"), ready(&ch, "via-back")];
    assert_eq!(counts.iter().sum::<u32>(), 20_000);
    assert_spread(&counts, &[1, 3]);
}

#[test]
fn the_http_api_lists_and_declares_the_type_and_definitions_carry_it() {
    let server = TestServer::with_api();
    let api = server.api();
    let overview = api.get_ok("/overview");
    let types: Vec<&str> = overview["exchange_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "direct",
            "fanout",
            "headers",
            "topic",
            "x-consistent-hash",
            "x-delayed-message"
        ]
    );
    let chx = overview["exchange_types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == TYPE)
        .unwrap();
    assert_eq!(chx["description"], "Consistent Hashing Exchange");

    let put = api.put(
        "/exchanges/%2F/chx",
        &json!({"type": TYPE, "durable": true, "arguments": {"hash-property": "message_id"}}),
    );
    assert_eq!(put.status, 201, "{}", put.text());
    let bad = api.put(
        "/exchanges/%2F/bad",
        &json!({"type": TYPE, "arguments": {"hash-property": "user_id"}}),
    );
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert_eq!(
        bad.json(),
        json!({"error": "bad_request", "reason": "Unsupported property: user_id"})
    );
    assert_eq!(api.get("/exchanges/%2F/bad").status, 404);
    assert_eq!(
        api.put("/queues/%2F/q1", &json!({"durable": true})).status,
        201
    );
    assert_eq!(
        api.put("/queues/%2F/q2", &json!({"durable": true})).status,
        201
    );
    let bind = |q: &str, key: &str| {
        api.post(
            &format!("/bindings/%2F/e/chx/q/{q}"),
            &json!({"routing_key": key}),
        )
    };
    assert_eq!(bind("q1", "1").status, 201);
    assert_eq!(bind("q2", "2").status, 201);
    let refused = bind("q2", "two");
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json()["reason"],
        "The binding key must be an integer: <<\"two\">>"
    );
    let x = api.get_ok("/exchanges/%2F/chx");
    assert_eq!(x["type"], TYPE);
    assert_eq!(x["arguments"], json!({"hash-property": "message_id"}));

    // Export, then import into a fresh server: the exchange routes there as here.
    let exported = api.get_ok("/definitions");
    let exchange = exported["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "chx")
        .expect("exported");
    assert_eq!(exchange["type"], TYPE);
    assert_eq!(
        exchange["arguments"],
        json!({"hash-property": "message_id"})
    );
    let second = TestServer::with_api();
    let import = second.api().post("/definitions", &exported);
    assert!(
        import.status == 201 || import.status == 204,
        "{} {}",
        import.status,
        import.text()
    );
    let route = |server: &TestServer| -> BTreeMap<String, BTreeSet<String>> {
        let conn = connect(server);
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        let messages = (0..300)
            .map(|i| {
                let p = BasicProperties {
                    message_id: Some(format!("id-{i}")),
                    ..BasicProperties::default()
                };
                message("chx", "", p)
            })
            .collect();
        publish_confirmed(&ch, messages);
        values_by_queue(&ch, &["q1", "q2"], |p| p.message_id.clone().unwrap())
    };
    let here = route(&server);
    assert_each_value_in_one_queue(&here);
    assert_eq!(route(&second), here);
}

#[test]
fn a_durable_exchange_its_arguments_and_bindings_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let queues = ["d1", "d2", "d3"];
    let weights = [1, 2, 3];
    let publish_and_take = |conn: &Connection| -> BTreeMap<String, BTreeSet<String>> {
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        let messages = (0..600)
            .map(|i| {
                let p = BasicProperties {
                    headers: Some(table(&[("user", s(&format!("user-{i}")))])),
                    ..BasicProperties::default()
                };
                message("durable-chx", &format!("rk-{i}"), p)
            })
            .collect();
        publish_confirmed(&ch, messages);
        values_by_queue(&ch, &queues, |p| {
            p.headers.as_ref().unwrap()["user"]
                .as_str()
                .unwrap()
                .to_string()
        })
    };

    let first = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&first.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    declare(
        &ch,
        "durable-chx",
        true,
        table(&[("hash-header", s("user"))]),
    );
    for (q, w) in queues.iter().zip(weights) {
        queue(&ch, q, true);
        ch.queue_bind(q, "durable-chx", &w.to_string(), FieldTable::new())
            .unwrap();
    }
    let before = publish_and_take(&conn);
    assert_each_value_in_one_queue(&before);
    drop(conn);
    assert!(first.terminate().success(), "clean exit on SIGTERM");

    let second = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&second.addr_string()).unwrap();
    let row = conn
        .list(ListKind::Exchanges)
        .unwrap()
        .into_iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some("durable-chx"))
        .expect("the exchange is back");
    assert_eq!(row.get("type").and_then(FieldValue::as_str), Some(TYPE));
    let mut keys: Vec<(String, String)> = conn
        .list(ListKind::Bindings)
        .unwrap()
        .iter()
        .filter(|r| r.get("source").and_then(FieldValue::as_str) == Some("durable-chx"))
        .map(|r| {
            let text = |k: &str| r.get(k).and_then(FieldValue::as_str).unwrap().to_string();
            (text("destination"), text("routing_key"))
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [("d1", "1"), ("d2", "2"), ("d3", "3")].map(|(d, k)| (d.to_string(), k.to_string()))
    );
    // Still hashing the header, over the same ring: queues bound in name order come back
    // in the same order, so every user reaches the same queue as before.
    let after = publish_and_take(&conn);
    assert_eq!(after, before);
    let counts: Vec<u32> = after.values().map(|v| v.len() as u32).collect();
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
    drop(conn);
    assert!(second.terminate().success());
}
