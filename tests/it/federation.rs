//! Exchange federation (`src/broker/federation`): upstreams are `federation-upstream`
//! parameters, a policy with `federation-upstream-set` or `federation-upstream` makes an
//! exchange federated, `/api/federation-links` shows the links. In-process servers stand
//! for the brokers; each has its own cluster name, as separate brokers would.

use crate::common::{self, eventually, wait_until, TestServer};
use relaymq::client::{Channel, Connection, ExchangeDeclareOptions};
use relaymq::server::ServerConfig;
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use serde_json::{json, Value};
use std::time::Duration;

/// Time allowed for a link to start or messages to cross.
const LIMIT: Duration = Duration::from_secs(20);

/// A server with the HTTP API, named `name` (its cluster name).
fn broker(name: &str) -> TestServer {
    let s = TestServer::start_with(|c: &mut ServerConfig| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    assert_eq!(
        s.api().put("/cluster-name", &json!({"name": name})).status,
        204
    );
    s
}

fn amqp_uri(s: &TestServer) -> String {
    format!("amqp://guest:guest@{}", s.handle.amqp_addr().unwrap())
}

fn channel(s: &TestServer) -> (Connection, Channel) {
    let c = common::connect(s);
    let ch = c.open_channel().unwrap();
    (c, ch)
}

fn declare_exchange(ch: &Channel, name: &str, kind: &str) {
    ch.exchange_declare(
        name,
        kind,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
    )
    .unwrap();
}

/// Makes `downstream` federate exchanges matching `pattern` from `upstream`.
fn federate(downstream: &TestServer, upstream: &TestServer, pattern: &str, max_hops: u32) {
    let api = downstream.api();
    let r = api.put(
        "/parameters/federation-upstream/%2F/up",
        &json!({"value": {"uri": amqp_uri(upstream), "max-hops": max_hops, "reconnect-delay": 1}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = api.put(
        "/policies/%2F/fed",
        &json!({"pattern": pattern, "apply-to": "exchanges",
                "definition": {"federation-upstream-set": "all"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
}

/// `downstream`'s links, once every one of the `n` runs.
fn links_running(downstream: &TestServer, n: usize) -> Vec<Value> {
    eventually(LIMIT, "the federation links running", || {
        let all = downstream.api().get_ok("/federation-links");
        let all = all.as_array()?.clone();
        (all.len() == n && all.iter().all(|l| l["status"] == "running")).then_some(all)
    })
}

fn publish(ch: &Channel, exchange: &str, key: &str, body: &str) {
    ch.basic_publish(
        exchange,
        key,
        false,
        &BasicProperties::default(),
        body.as_bytes(),
    )
    .unwrap();
}

#[test]
fn a_downstream_consumer_gets_what_is_published_upstream_for_its_bindings() {
    let up = broker("up-cluster");
    let down = broker("down-cluster");
    let (_cu, chu) = channel(&up);
    let (_cd, chd) = channel(&down);
    declare_exchange(&chu, "fed.x", "direct");
    declare_exchange(&chd, "fed.x", "direct");
    common::declare_queue(&chd, "orders", false, &[]);
    chd.queue_bind("orders", "fed.x", "new", FieldTable::new())
        .unwrap();
    federate(&down, &up, "^fed\\.", 1);
    let links = links_running(&down, 1);
    let l = &links[0];
    assert_eq!(
        (l["exchange"].as_str(), l["upstream"].as_str()),
        (Some("fed.x"), Some("up"))
    );
    assert_eq!(
        (l["upstream_exchange"].as_str(), l["type"].as_str()),
        (Some("fed.x"), Some("exchange"))
    );
    assert!(!l["uri"].as_str().unwrap().contains("guest"), "{l}");
    // relaymq-cli shows the same rows.
    let rows: Value = serde_json::from_str(&common::cli_ok(
        &down.addr_string(),
        &["list", "federation-links", "--json"],
    ))
    .unwrap();
    let row = &rows[0];
    for k in [
        "exchange",
        "upstream",
        "upstream_exchange",
        "status",
        "uri",
        "id",
        "vhost",
    ] {
        assert_eq!(row[k], l[k], "{k}: {rows}");
    }
    let table = common::cli_ok(&down.addr_string(), &["list", "federation-links"]);
    assert!(
        table.starts_with("vhost") && table.contains("running"),
        "{table}"
    );
    // The link's queue upstream, bound with the downstream's key.
    let fq = "federation: fed.x -> down-cluster";
    wait_until(LIMIT, "the upstream queue bound", || {
        up.api()
            .get_ok("/bindings")
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["destination"] == fq && b["routing_key"] == "new")
    });
    chu.confirm_select().unwrap();
    for i in 0..10 {
        publish(
            &chu,
            "fed.x",
            if i % 2 == 0 { "new" } else { "old" },
            &i.to_string(),
        );
    }
    assert!(chu.wait_for_confirms(Duration::from_secs(10)).unwrap());
    wait_until(LIMIT, "5 messages downstream", || {
        common::ready_messages(&chd, "orders") == 5
    });
    let m = chd.basic_get("orders", true).unwrap().unwrap();
    assert_eq!(
        (
            m.exchange.as_str(),
            m.routing_key.as_str(),
            m.body.as_slice()
        ),
        ("fed.x", "new", &b"0"[..])
    );
    let h = m.properties.headers.unwrap();
    let Some(FieldValue::Array(hops)) = h.get("x-received-from") else {
        panic!("no x-received-from: {h:?}")
    };
    let FieldValue::Table(hop) = &hops[0] else {
        panic!("{hops:?}")
    };
    assert_eq!(
        hop.get("cluster-name").and_then(|v| v.as_str()),
        Some("up-cluster")
    );
    assert_eq!(hop.get("exchange").and_then(|v| v.as_str()), Some("fed.x"));
    assert!(!format!("{hop:?}").contains("guest"));

    // The binding removed downstream: the upstream queue is unbound and gets nothing.
    chd.queue_unbind("orders", "fed.x", "new", FieldTable::new())
        .unwrap();
    wait_until(LIMIT, "the upstream queue unbound", || {
        !up.api()
            .get_ok("/bindings")
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["destination"] == fq && b["routing_key"] == "new")
    });
    publish(&chu, "fed.x", "new", "late");
    assert!(chu.wait_for_confirms(Duration::from_secs(10)).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        common::ready_messages(&chu, fq),
        0,
        "nothing routed to the link's queue"
    );
    assert_eq!(
        up.api().get_ok(&format!(
            "/queues/%2F/{}",
            "federation%3A%20fed.x%20-%3E%20down-cluster"
        ))["messages"],
        0
    );

    // The policy removed: the link stops and its upstream queue goes with it
    // (`resource-cleanup-mode: default`), so nothing piles up there.
    assert_eq!(down.api().delete("/policies/%2F/fed").status, 204);
    wait_until(LIMIT, "no link", || {
        down.api().get_ok("/federation-links") == json!([])
    });
    wait_until(LIMIT, "the upstream queue deleted", || {
        up.api()
            .get("/queues/%2F/federation%3A%20fed.x%20-%3E%20down-cluster")
            .status
            == 404
    });
}

/// Three brokers federating in a ring (each from the previous), `fanout` exchanges with
/// a queue each: one message published on the first.
fn ring(max_hops: u32) -> [u32; 3] {
    let b: Vec<TestServer> = ["ring-a", "ring-b", "ring-c"]
        .iter()
        .map(|n| broker(n))
        .collect();
    let chans: Vec<(Connection, Channel)> = b.iter().map(channel).collect();
    for (_, ch) in &chans {
        declare_exchange(ch, "ring", "fanout");
        common::declare_queue(ch, "seen", false, &[]);
        ch.queue_bind("seen", "ring", "", FieldTable::new())
            .unwrap();
    }
    for i in 0..3 {
        federate(&b[(i + 1) % 3], &b[i], "^ring$", max_hops);
    }
    for s in &b {
        links_running(s, 1);
    }
    // Each link's queue is bound upstream before the publish.
    for (i, s) in b.iter().enumerate() {
        let next = ["ring-a", "ring-b", "ring-c"][(i + 1) % 3];
        let fq = format!("federation: ring -> {next}");
        wait_until(LIMIT, "the ring's upstream queues bound", || {
            s.api()
                .get_ok("/bindings")
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["destination"] == fq)
        });
    }
    let ch = &chans[0].1;
    ch.confirm_select().unwrap();
    publish(ch, "ring", "", "once");
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    let expect_c = u32::from(max_hops >= 2);
    wait_until(LIMIT, "the message crossed the ring", || {
        common::ready_messages(&chans[1].1, "seen") == 1
            && common::ready_messages(&chans[2].1, "seen") == expect_c
    });
    // Time for a loop to show, were there one.
    std::thread::sleep(Duration::from_millis(1500));
    [
        common::ready_messages(&chans[0].1, "seen"),
        common::ready_messages(&chans[1].1, "seen"),
        common::ready_messages(&chans[2].1, "seen"),
    ]
}

#[test]
fn a_three_broker_ring_with_max_hops_1_does_not_loop() {
    assert_eq!(ring(1), [1, 1, 0]);
}

#[test]
fn a_three_broker_ring_with_more_hops_stops_where_the_message_came_from() {
    assert_eq!(ring(5), [1, 1, 1]);
}

#[test]
fn links_report_errors_and_upstreams_are_validated() {
    let down = broker("d");
    let api = down.api();
    let r = api.put(
        "/parameters/federation-upstream/%2F/bad",
        &json!({"value": {"max-hops": 1}}),
    );
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("Key \\\"uri\\\" not found in bad"),
        "{}",
        r.text()
    );
    let r = api.put(
        "/parameters/federation-upstream/%2F/nowhere",
        &json!({"value": {"uri": "amqp://guest:secret@127.0.0.1:1", "reconnect-delay": 1}}),
    );
    assert_eq!(r.status, 201);
    let r = api.put(
        "/policies/%2F/fed",
        &json!({"pattern": "^amq\\.direct$",
        "definition": {"federation-upstream": "nowhere"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let l = eventually(LIMIT, "the link in error", || {
        let all = api.get_ok("/federation-links/state/down");
        let l = all.as_array()?.first()?.clone();
        (l["status"] == "error").then_some(l)
    });
    let why = l["error"].as_str().unwrap();
    assert!(
        why.contains("failed to connect to upstream") && why.contains("127.0.0.1:1"),
        "{why}"
    );
    assert!(!why.contains("secret"));
    assert_eq!(
        api.get_ok("/federation-links/%2F")
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let r = api.put(
        "/policies/%2F/fed2",
        &json!({"pattern": "x",
        "definition": {"federation-upstream-set": 5}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
}
