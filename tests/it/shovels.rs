//! Dynamic shovels (`src/broker/shovel`): set through `/api/parameters/shovel`, status in
//! `/api/shovels`. Two in-process servers stand for two brokers: the shovel's remote end
//! is the other server's AMQP listener; a URI without a host is the shovel's own broker,
//! reached in-process (its AMQP listener may be off).

use crate::common::{self, eventually, wait_until, TestServer};
use relaymq::client::{Channel, Connection};
use relaymq::server::ServerConfig;
use relaymq::types::{BasicProperties, FieldValue};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

/// Time allowed for a shovel to reach a state or move its messages.
const LIMIT: Duration = Duration::from_secs(20);

fn server_with_api(amqp: bool) -> TestServer {
    TestServer::start_with(|c: &mut ServerConfig| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        if !amqp {
            c.amqp_listen = None;
        }
    })
}

/// `amqp://guest:guest@HOST:PORT` of `s`'s AMQP listener.
fn amqp_uri(s: &TestServer, password: &str) -> String {
    format!(
        "amqp://guest:{password}@{}",
        s.handle.amqp_addr().expect("AMQP listener on")
    )
}

fn channel(s: &TestServer) -> (Connection, Channel) {
    let c = common::connect(s);
    let ch = c.open_channel().unwrap();
    (c, ch)
}

fn publish(ch: &Channel, queue: &str, n: usize, persistent: bool) {
    ch.confirm_select().unwrap();
    let props = BasicProperties {
        delivery_mode: Some(if persistent { 2 } else { 1 }),
        ..BasicProperties::default()
    };
    for i in 0..n {
        ch.basic_publish("", queue, false, &props, i.to_string().as_bytes())
            .unwrap();
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
}

/// The bodies of every message of `queue` (taken).
fn drain(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    common::drain_each(ch, queue, |m| {
        out.push(String::from_utf8(m.body).unwrap());
    });
    out
}

fn set_shovel(s: &TestServer, name: &str, value: Value) {
    let r = s.api().put(
        &format!("/parameters/shovel/%2F/{name}"),
        &json!({ "value": value }),
    );
    assert!(
        r.status == 201 || r.status == 204,
        "{}: {}",
        r.status,
        r.text()
    );
}

/// The `/api/shovels` element of shovel `name`, once `ready` accepts it.
fn status_when(s: &TestServer, name: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    eventually(LIMIT, what, || {
        let all = s.api().get_ok("/shovels");
        let st = all.as_array()?.iter().find(|x| x["name"] == name)?.clone();
        ready(&st).then_some(st)
    })
}

#[test]
fn a_local_source_moves_every_message_to_another_broker_on_confirm() {
    let a = server_with_api(false);
    let b = server_with_api(true);
    let (_ca, cha) = channel(&a);
    common::declare_queue(&cha, "src", true, &[]);
    publish(&cha, "src", 500, true);
    set_shovel(
        &a,
        "move",
        json!({"src-uri": "amqp://", "src-queue": "src",
               "dest-uri": amqp_uri(&b, "guest"), "dest-queue": "dst",
               "add-forward-headers": true, "dest-add-timestamp-header": true}),
    );
    let st = status_when(&a, "move", "the shovel forwarded 500", |s| {
        s["state"] == "running" && s["forwarded"] == 500 && s["pending"] == 0
    });
    // The password never shows.
    let dest_uri = st["dest_uri"].as_str().unwrap();
    assert!(!dest_uri.contains("guest"), "{dest_uri}");
    assert_eq!(st["src_uri"], "amqp://");
    assert_eq!(
        (st["src_queue"].as_str(), st["dest_queue"].as_str()),
        (Some("src"), Some("dst"))
    );
    assert_eq!(st["type"], "dynamic");
    assert_eq!(st["remaining"], "unlimited");
    let (_cb, chb) = channel(&b);
    // The destination queue was declared durable by the shovel (no dest-predeclared).
    wait_until(LIMIT, "500 messages at the destination", || {
        common::ready_messages(&chb, "dst") == 500
    });
    assert_eq!(
        common::ready_messages(&cha, "src"),
        0,
        "every source message acked"
    );
    let m = chb.basic_get("dst", true).unwrap().unwrap();
    assert_eq!(m.body, b"0");
    assert_eq!(m.properties.delivery_mode, Some(2));
    let h = m.properties.headers.unwrap();
    let Some(FieldValue::Array(hops)) = h.get("x-shovelled") else {
        panic!("no x-shovelled header: {h:?}");
    };
    let FieldValue::Table(hop) = &hops[0] else {
        panic!("{hops:?}")
    };
    assert_eq!(
        hop.get("shovel-name").and_then(|v| v.as_str()),
        Some("move")
    );
    assert_eq!(hop.get("src-queue").and_then(|v| v.as_str()), Some("src"));
    assert_eq!(
        hop.get("shovel-type").and_then(|v| v.as_str()),
        Some("dynamic")
    );
    assert!(!format!("{hop:?}").contains("guest"));
    assert!(h
        .get("x-shovelled-timestamp")
        .is_some_and(|t| t.as_i64() > Some(0)));
    let mut bodies: HashSet<String> = drain(&chb, "dst").into_iter().collect();
    bodies.insert("0".into());
    assert_eq!(bodies.len(), 500);

    // The same definition set again (a re-import) keeps it running: its counters stay.
    set_shovel(
        &a,
        "move",
        json!({"src-uri": "amqp://", "src-queue": "src",
               "dest-uri": amqp_uri(&b, "guest"), "dest-queue": "dst",
               "add-forward-headers": true, "dest-add-timestamp-header": true}),
    );
    std::thread::sleep(Duration::from_millis(200));
    let again = a.api().get_ok("/shovels/vhost/%2F/move");
    assert_eq!(
        (&again["forwarded"], &again["timestamp"]),
        (&st["forwarded"], &st["timestamp"])
    );
    // A restart reconnects it (and starts its counters again).
    assert_eq!(
        a.api().delete("/shovels/vhost/%2F/move/restart").status,
        204
    );
    status_when(&a, "move", "running again after the restart", |s| {
        s["state"] == "running" && s["forwarded"] == 0
    });

    // Cleared: the shovel stops, later messages stay at the source.
    assert_eq!(a.api().delete("/parameters/shovel/%2F/move").status, 204);
    wait_until(LIMIT, "the shovel gone", || {
        a.api().get_ok("/shovels") == json!([])
    });
    std::thread::sleep(Duration::from_millis(300));
    publish(&cha, "src", 3, true);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(common::ready_messages(&cha, "src"), 3);
}

#[test]
fn a_remote_exchange_source_and_a_local_exchange_destination_keep_routing_keys() {
    let a = server_with_api(true);
    let b = server_with_api(false);
    let (_cb, chb) = channel(&b);
    common::declare_queue(&chb, "orders", false, &[]);
    chb.queue_bind("orders", "amq.topic", "order.*", Default::default())
        .unwrap();
    // Runs on b: consumes a's amq.direct through a server-named queue bound with "k",
    // publishes to b's amq.topic with the messages' own routing keys.
    let r = b.api().put(
        "/parameters/shovel/%2F/pull",
        &json!({"value": {"src-uri": amqp_uri(&a, "guest"), "src-exchange": "amq.direct",
                          "src-exchange-key": "order.new", "dest-uri": "amqp://",
                          "dest-exchange": "amq.topic", "ack-mode": "on-publish"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    status_when(&b, "pull", "the shovel running", |s| {
        s["state"] == "running"
    });
    let (_ca, cha) = channel(&a);
    cha.confirm_select().unwrap();
    for i in 0..20 {
        let key = if i % 2 == 0 { "order.new" } else { "other" };
        cha.basic_publish("amq.direct", key, false, &BasicProperties::default(), b"x")
            .unwrap();
    }
    assert!(cha.wait_for_confirms(Duration::from_secs(10)).unwrap());
    wait_until(LIMIT, "10 orders routed by b", || {
        common::ready_messages(&chb, "orders") == 10
    });
    let m = chb.basic_get("orders", true).unwrap().unwrap();
    assert_eq!(
        (m.exchange.as_str(), m.routing_key.as_str()),
        ("amq.topic", "order.new")
    );
}

#[test]
fn status_says_why_a_shovel_terminated_and_it_recovers_when_the_source_appears() {
    let a = server_with_api(true);
    let b = server_with_api(true);
    let dest = amqp_uri(&b, "guest");
    // Nothing listens on port 1.
    set_shovel(
        &a,
        "nowhere",
        json!({"src-uri": "amqp://guest:secret@127.0.0.1:1",
        "src-queue": "q", "dest-uri": dest, "reconnect-delay": 1}),
    );
    let st = status_when(&a, "nowhere", "terminated: refused", |s| {
        s["state"] == "terminated"
    });
    let why = st["reason"].as_str().unwrap();
    assert!(
        why.starts_with("failed to connect to source: cannot connect to 127.0.0.1:1"),
        "{why}"
    );
    assert!(!why.contains("secret"));
    // A refused login.
    set_shovel(
        &a,
        "login",
        json!({"src-uri": "amqp://", "src-queue": "q",
        "dest-uri": amqp_uri(&b, "wrong"), "reconnect-delay": 1}),
    );
    let st = status_when(&a, "login", "terminated: login", |s| {
        s["state"] == "terminated"
    });
    let why = st["reason"].as_str().unwrap();
    assert!(
        why.contains("failed to connect to destination") && why.contains("403 ACCESS_REFUSED"),
        "{why}"
    );
    // A missing source queue the shovel may not declare; recovers once it exists.
    set_shovel(
        &a,
        "missing",
        json!({"src-uri": "amqp://", "src-queue": "later",
        "src-predeclared": true, "dest-uri": dest, "dest-queue": "got", "reconnect-delay": 1}),
    );
    let st = status_when(&a, "missing", "terminated: missing queue", |s| {
        s["state"] == "terminated"
    });
    let why = st["reason"].as_str().unwrap();
    assert!(
        why.contains("failed to set up topology")
            && why.contains("404 NOT_FOUND")
            && why.contains("later"),
        "{why}"
    );
    let (_ca, cha) = channel(&a);
    common::declare_queue(&cha, "later", true, &[]);
    publish(&cha, "later", 5, false);
    status_when(&a, "missing", "running after the queue appeared", |s| {
        s["state"] == "running" && s["forwarded"] == 5
    });
    let (_cb, chb) = channel(&b);
    wait_until(LIMIT, "5 moved", || {
        common::ready_messages(&chb, "got") == 5
    });
    // An invalid definition is refused with RabbitMQ's text, and nothing runs for it.
    let r = a.api().put(
        "/parameters/shovel/%2F/bad",
        &json!({"value": {"src-uri": "amqp://",
        "dest-uri": "amqp://"}}),
    );
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("Must specify 'src-exchange' or 'src-queue'"),
        "{}",
        r.text()
    );
    assert_eq!(a.api().get("/shovels/vhost/%2F/bad").status, 404);
    assert_eq!(a.api().get_ok("/shovels/%2F").as_array().unwrap().len(), 3);
}

#[test]
fn delete_after_queue_length_moves_what_was_there_then_deletes_itself() {
    let a = server_with_api(false);
    let (_ca, ch) = channel(&a);
    common::declare_queue(&ch, "old", true, &[]);
    publish(&ch, "old", 300, true);
    set_shovel(
        &a,
        "drain",
        json!({"src-uri": "amqp://", "src-queue": "old",
        "dest-uri": "amqp://", "dest-queue": "new", "src-delete-after": "queue-length",
        "src-prefetch-count": 7}),
    );
    wait_until(LIMIT, "the shovel deleted itself", || {
        a.api().get("/parameters/shovel/%2F/drain").status == 404
            && a.api().get_ok("/shovels") == json!([])
    });
    assert_eq!(common::ready_messages(&ch, "new"), 300);
    assert_eq!(common::ready_messages(&ch, "old"), 0);
    // A later message stays where it is.
    publish(&ch, "old", 1, true);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(common::ready_messages(&ch, "old"), 1);
}

#[test]
fn a_shovel_is_restarted_with_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let start = || {
        common::ServerProcess::start(
            &data,
            &["--http-listen", "127.0.0.1:0", "--amqp-listen", "off"],
        )
    };
    let s = start();
    let api = s.api();
    let r = api.put(
        "/parameters/shovel/%2F/keep",
        &json!({"value": {"src-uri": "amqp://",
        "src-queue": "in", "dest-uri": "amqp://", "dest-queue": "out", "ack-mode": "no-ack"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    eventually(LIMIT, "running", || {
        (api.get_ok("/shovels")[0]["state"] == "running").then_some(())
    });
    s.kill9();
    let s = start();
    let api = s.api();
    eventually(LIMIT, "running after the restart", || {
        (api.get_ok("/shovels")[0]["state"] == "running").then_some(())
    });
    let c = common::connect_process(&s, Duration::from_secs(10));
    let ch = c.open_channel().unwrap();
    publish(&ch, "in", 10, true);
    wait_until(LIMIT, "10 moved after the restart", || {
        common::ready_messages(&ch, "out") == 10
    });
    assert_eq!(api.get_ok("/shovels/vhost/%2F/keep")["forwarded"], 10);
}

#[test]
fn a_policymaker_may_not_reach_other_vhosts_through_a_local_end() {
    let a = server_with_api(false);
    let api = a.api();
    assert_eq!(api.put("/vhosts/mine", &json!({})).status, 201);
    let r = api.put(
        "/users/pm",
        &json!({"password": "pmpw", "tags": "policymaker"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = api.put(
        "/permissions/mine/pm",
        &json!({"configure": ".*", "write": ".*", "read": ".*"}),
    );
    assert!(r.status == 201 || r.status == 204);
    let pm = common::http::Api::as_user(a.http_addr(), "pm", "pmpw");
    // Out of '/' into its own vhost: refused, as RabbitMQ checks a direct URI's vhost.
    let r = pm.put(
        "/parameters/shovel/mine/out",
        &json!({"value": {"src-uri": "amqp:///", "src-queue": "secret",
                          "dest-uri": "amqp:///mine", "dest-queue": "stolen"}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("access to vhost '/' refused for user 'pm'"),
        "{}",
        r.text()
    );
    assert_eq!(api.get("/parameters/shovel/mine/out").status, 404);
    // Within its own vhost: allowed.
    let r = pm.put(
        "/parameters/shovel/mine/ok",
        &json!({"value": {"src-uri": "amqp:///mine", "src-queue": "a",
                          "dest-uri": "amqp:///mine", "dest-queue": "b"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
}

#[test]
fn an_idle_remote_destination_keeps_its_heartbeats_and_delay_0_does_not_retry() {
    let a = server_with_api(false);
    let b = server_with_api(true);
    let uri = format!("{}?heartbeat=1", amqp_uri(&b, "guest"));
    set_shovel(
        &a,
        "idle",
        json!({"src-uri": "amqp://", "src-queue": "quiet",
        "dest-uri": uri, "dest-queue": "q2"}),
    );
    let st = status_when(&a, "idle", "running", |s| s["state"] == "running");
    // Two heartbeat intervals and more with nothing to move: still the same run.
    std::thread::sleep(Duration::from_millis(3_500));
    let now = a.api().get_ok("/shovels/vhost/%2F/idle");
    assert_eq!(
        (&now["state"], &now["timestamp"]),
        (&st["state"], &st["timestamp"]),
        "{now}"
    );
    // reconnect-delay 0: terminated once, never retried (RabbitMQ's meaning).
    set_shovel(
        &a,
        "once",
        json!({"src-uri": "amqp://guest:guest@127.0.0.1:1",
        "src-queue": "q", "dest-uri": "amqp://", "reconnect-delay": 0}),
    );
    let st = status_when(&a, "once", "terminated", |s| s["state"] == "terminated");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        a.api().get_ok("/shovels/vhost/%2F/once")["timestamp"],
        st["timestamp"]
    );
}
