//! The management HTTP API's topology and messaging families (docs/http-api.md):
//! exchanges, bindings (properties keys, the `Location` of a new binding), publishing
//! and getting messages over HTTP with every ack mode, purging, queue actions; against
//! RabbitMQ's recorded replies (`tests/fixtures/management/`) and its status codes,
//! error bodies and permission refusals; an AMQP consumer receiving what HTTP published,
//! rabbitmqadmin driving them, and an HTTP-published persistent message surviving a
//! kill -9.

use crate::common::clients;
use crate::common::golden::{assert_same_shape_with, fixture, Shape, USER_DATA};
use crate::common::http::{request, Api};
use crate::common::{ServerProcess, TestServer};
use base64::Engine;
use relaymq::auth::permission::PermissionDef;
use relaymq::broker::access::Credential;
use relaymq::types::watermark::MemoryWatermark;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

fn add_user(server: &TestServer, name: &str, tags: &[&str]) -> Api {
    server
        .handle
        .broker()
        .add_user(
            name,
            &Credential::Password(format!("{name}-secret")),
            tags.iter().map(|t| t.to_string()).collect(),
        )
        .expect("user added");
    Api::as_user(server.http_addr(), name, &format!("{name}-secret"))
}

fn permit(server: &TestServer, user: &str, vhost: &str, configure: &str, write: &str, read: &str) {
    server
        .handle
        .broker()
        .set_permission(
            user,
            vhost,
            PermissionDef {
                configure: configure.into(),
                write: write.into(),
                read: read.into(),
            },
        )
        .expect("permission set");
}

/// `s` percent-encoded for a path segment (everything but letters and digits).
fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The shape rules for a list that may be shorter than RabbitMQ's recording.
fn lenient() -> Shape<'static> {
    Shape {
        opaque: USER_DATA,
        optional: &[],
        empty_arrays_ok: true,
    }
}

fn assert_error(r: &crate::common::http::HttpReply, status: u16, body: Value) {
    assert_eq!((r.status, r.json()), (status, body), "{}", r.text());
}

fn access_refused() -> Value {
    json!({"error": "not_authorised", "reason": "Access refused."})
}

/// A server with vhost `orders` (guest may use it), exchange `orders.events` (topic) and
/// queue `orders.new` bound to it with `order.#`, made through the API.
fn orders() -> TestServer {
    let server = TestServer::with_api();
    server.handle.broker().declare_vhost("orders").unwrap();
    permit(&server, "guest", "orders", ".*", ".*", ".*");
    let api = server.api();
    let r = api.put(
        "/exchanges/orders/orders.events",
        &json!({"type": "topic", "durable": true}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        api.put("/queues/orders/orders.new", &json!({"durable": true}))
            .status,
        201
    );
    let r = api.post(
        "/bindings/orders/e/orders.events/q/orders.new",
        &json!({"routing_key": "order.#"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    server
}

#[test]
fn exchanges_are_listed_declared_and_deleted_with_rabbitmqs_codes() {
    let server = orders();
    let api = server.api();
    let list = api.get_ok("/exchanges/orders");
    assert_same_shape_with("exchanges-vhost", &list, &Shape::default());
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "",
            "amq.direct",
            "amq.fanout",
            "amq.headers",
            "amq.match",
            "amq.topic",
            "orders.events"
        ]
    );
    let one = api.get_ok("/exchanges/orders/orders.events");
    assert_same_shape_with("exchange", &one, &Shape::default());
    assert_eq!(
        (
            one["type"].clone(),
            one["durable"].clone(),
            one["vhost"].clone()
        ),
        (json!("topic"), json!(true), json!("orders"))
    );
    // The default exchange is `amq.default` in a path.
    let default = api.get_ok("/exchanges/orders/amq.default");
    assert_eq!(
        (default["name"].clone(), default["type"].clone()),
        (json!(""), json!("direct"))
    );
    // Every vhost's exchanges, paged and cut to columns as every list.
    let all = api.get_ok("/exchanges?page=1&page_size=2&columns=name,vhost");
    assert_eq!(all["total_count"], json!(13));
    assert_eq!(
        all["items"],
        json!([{"name": "", "vhost": "/"}, {"name": "amq.direct", "vhost": "/"}])
    );
    // Declared again alike: 204; as strings, as rabbitmqadmin sends them: 204; otherwise 400.
    let events = "/exchanges/orders/orders.events";
    assert_eq!(
        api.put(events, &json!({"type": "topic", "durable": true}))
            .status,
        204
    );
    assert_eq!(
        api.put(
            events,
            &json!({"type": "topic", "durable": "true", "auto_delete": "false"})
        )
        .status,
        204
    );
    assert_error(
        &api.put(events, &json!({"type": "fanout", "durable": true})),
        400,
        json!({"error": "bad_request", "reason":
            "inequivalent arg 'type' for exchange 'orders.events' in vhost 'orders': received 'fanout' but current is 'topic'"}),
    );
    assert_error(
        &api.put(events, &json!({"type": "topic", "durable": "yes"})),
        400,
        json!({"error": "bad_request", "reason": ["not_boolean", "yes"]}),
    );
    // The AMQP method's defaults: a direct exchange, not durable.
    assert_eq!(api.put("/exchanges/orders/plain", &json!({})).status, 201);
    let plain = api.get_ok("/exchanges/orders/plain");
    assert_eq!(
        (plain["type"].clone(), plain["durable"].clone()),
        (json!("direct"), json!(false))
    );
    let r = api.put("/exchanges/orders/odd", &json!({"type": "x-nope"}));
    assert_eq!(r.status, 400, "{}", r.text());
    // The default and `amq.` exchanges are refused as by AMQP: 401 "Access refused.".
    assert_error(
        &api.put("/exchanges/orders/amq.default", &json!({"type": "direct"})),
        401,
        access_refused(),
    );
    assert_error(
        &api.put("/exchanges/orders/amq.mine", &json!({"type": "direct"})),
        401,
        access_refused(),
    );
    assert_error(
        &api.delete("/exchanges/orders/amq.direct"),
        401,
        access_refused(),
    );
    // Bad bodies and missing things.
    let r = request(
        server.http_addr(),
        "PUT",
        "/api/exchanges/orders/x",
        Some(("guest", "guest")),
        Some(b"{not json"),
        &[],
    );
    assert_error(
        &r,
        400,
        json!({"error": "bad_request", "reason": "not_json"}),
    );
    assert_error(
        &api.put("/exchanges/nowhere/x", &json!({"type": "direct"})),
        404,
        json!({"error": "not_found", "reason": "vhost_not_found"}),
    );
    let missing = fixture("missing-queue")["body"].clone();
    assert_error(&api.get("/exchanges/orders/nope"), 404, missing.clone());
    assert_error(&api.get("/exchanges/nowhere"), 404, missing.clone());
    assert_error(&api.delete("/exchanges/orders/nope"), 404, missing.clone());
    assert_eq!(api.post(events, &json!({})).status, 405);
    // if-unused keeps an exchange that routes somewhere; a plain delete removes it and
    // its bindings.
    assert_error(
        &api.delete(&format!("{events}?if-unused=true")),
        400,
        json!({"error": "bad_request", "reason": "exchange 'orders.events' in vhost 'orders' in use"}),
    );
    assert_eq!(api.delete(events).status, 204);
    assert_eq!(api.get(events).status, 404);
    assert_eq!(
        api.get_ok("/queues/orders/orders.new/bindings")
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        api.delete("/exchanges/orders/plain?if-unused=true").status,
        204
    );
}

#[test]
fn exchange_operations_need_the_permissions_amqp_needs() {
    let server = orders();
    let manager = add_user(&server, "manager", &["management"]);
    // No permissions in the vhost: it is hidden.
    assert_error(
        &manager.get("/exchanges/orders"),
        404,
        json!({"error": "not_found", "reason": "Not Found"}),
    );
    permit(&server, "manager", "orders", "^mine", ".*", ".*");
    assert_eq!(
        manager
            .get_ok("/exchanges/orders")
            .as_array()
            .unwrap()
            .len(),
        7
    );
    assert_error(
        &manager.put("/exchanges/orders/other", &json!({"type": "fanout"})),
        401,
        access_refused(),
    );
    assert_eq!(
        manager
            .put("/exchanges/orders/mine", &json!({"type": "fanout"}))
            .status,
        201
    );
    // An alternate exchange needs write on it and read on the new exchange.
    permit(&server, "manager", "orders", ".*", "^$", ".*");
    assert_error(
        &manager.put(
            "/exchanges/orders/mine2",
            &json!({"arguments": {"alternate-exchange": "mine"}}),
        ),
        401,
        access_refused(),
    );
    permit(&server, "manager", "orders", "^other$", ".*", ".*");
    assert_error(
        &manager.delete("/exchanges/orders/mine"),
        401,
        access_refused(),
    );
    // A user without a management tag is refused every endpoint.
    let app = add_user(&server, "app", &[]);
    permit(&server, "app", "orders", ".*", ".*", ".*");
    assert_error(
        &app.get("/exchanges"),
        401,
        json!({"error": "not_authorised", "reason": "Not management user"}),
    );
    // A monitor sees every vhost's exchanges.
    let monitor = add_user(&server, "monitor", &["monitoring"]);
    assert_eq!(monitor.get_ok("/exchanges").as_array().unwrap().len(), 14);
}

#[test]
fn bindings_are_listed_with_rabbitmqs_shapes_and_the_default_exchanges_own() {
    let server = orders();
    let api = server.api();
    let between = api.get_ok("/bindings/orders/e/orders.events/q/orders.new");
    assert_same_shape_with("binding-list", &between, &Shape::default());
    assert_eq!(between, fixture("binding-list")["body"]);
    let source = api.get_ok("/exchanges/orders/orders.events/bindings/source");
    assert_eq!(source, fixture("exchange-bindings-source")["body"]);
    // The vhost's bindings: the default exchange's implicit one per queue first.
    assert_eq!(
        api.put("/queues/orders/orders.work", &json!({})).status,
        201
    );
    let all = api.get_ok("/bindings/orders");
    assert_same_shape_with("bindings-vhost", &all, &Shape::default());
    assert_eq!(all, fixture("bindings-vhost")["body"]);
    let of_queue = api.get_ok("/queues/orders/orders.new/bindings");
    assert_eq!(of_queue, fixture("queue-bindings")["body"]);
    let implicit = api.get_ok("/exchanges/orders/amq.default/bindings/source");
    assert_eq!(implicit.as_array().unwrap().len(), 2);
    assert_eq!(implicit[0]["properties_key"], "orders.new");
    assert_eq!(
        api.get_ok("/bindings/orders/e/amq.default/q/orders.work"),
        json!([{"source": "", "vhost": "orders", "destination": "orders.work",
                "destination_type": "queue", "routing_key": "orders.work",
                "arguments": {}, "properties_key": "orders.work"}])
    );
    // Exchange to exchange.
    assert_eq!(
        api.put("/exchanges/orders/orders.audit", &json!({"type": "fanout"}))
            .status,
        201
    );
    let r = api.post(
        "/bindings/orders/e/orders.events/e/orders.audit",
        &json!({"routing_key": "#"}),
    );
    assert_eq!(
        (r.status, r.header("location")),
        (201, Some("orders.audit/%2523"))
    );
    let dest = api.get_ok("/exchanges/orders/orders.audit/bindings/destination");
    assert_eq!(
        (
            dest[0]["source"].clone(),
            dest[0]["destination_type"].clone(),
            dest[0]["properties_key"].clone()
        ),
        (json!("orders.events"), json!("exchange"), json!("%23"))
    );
    assert_eq!(
        api.get_ok("/exchanges/orders/orders.events/bindings/source")
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Lists take the list parameters; a missing vhost is 404, a missing exchange's lists
    // are empty (as RabbitMQ's).
    let page = api.get_ok("/bindings?page=1&page_size=1&sort=routing_key&sort_reverse=true");
    assert_eq!(
        (
            page["total_count"].clone(),
            page["items"][0]["routing_key"].clone()
        ),
        (json!(4), json!("orders.work"))
    );
    assert_eq!(api.get("/bindings/nowhere").status, 404);
    assert_eq!(
        api.get_ok("/exchanges/orders/nope/bindings/source"),
        json!([])
    );
    assert_eq!(api.put("/bindings/orders", &json!({})).status, 405);
    assert_eq!(
        api.get("/bindings/orders/e/orders.events/x/orders.new")
            .status,
        404
    );
}

#[test]
fn a_new_binding_answers_201_with_its_location_and_its_properties_key_finds_it() {
    let server = orders();
    let api = server.api();
    assert_eq!(
        api.put("/queues/orders/orders.created", &json!({})).status,
        201
    );
    // RabbitMQ's recorded answer, Location and all.
    let r = api.post(
        "/bindings/orders/e/orders.events/q/orders.created",
        &json!({"routing_key": "order.created", "arguments": {}}),
    );
    let recorded = fixture("post-binding");
    assert_eq!(r.status, recorded["status"].as_u64().unwrap() as u16);
    assert_eq!(
        r.header("location"),
        recorded["headers"]["location"].as_str()
    );
    assert!(r.body.is_empty(), "{}", r.text());
    // A binding with arguments: `~` and a hash; its key names it for GET and DELETE.
    assert_eq!(
        api.put("/exchanges/orders/h", &json!({"type": "headers"}))
            .status,
        201
    );
    let args = json!({"x-match": "all", "region": "eu"});
    let r = api.post(
        "/bindings/orders/e/h/q/orders.created",
        &json!({"arguments": args}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let location = r.header("location").unwrap().to_string();
    let listed = api.get_ok("/bindings/orders/e/h/q/orders.created");
    let key = listed[0]["properties_key"].as_str().unwrap().to_string();
    assert!(key.starts_with('~') && key.len() == 7, "{key}");
    assert_eq!(
        location,
        format!("orders.created/{}", key.replace('%', "%25"))
    );
    assert_eq!(listed[0]["arguments"], args);
    let path = format!("/bindings/orders/e/h/q/orders.created/{}", enc(&key));
    assert_eq!(api.get_ok(&path), listed[0]);
    // Another binding of the same pair, same arguments, other key: its own properties key.
    let r = api.post(
        "/bindings/orders/e/h/q/orders.created",
        &json!({"routing_key": "a b~c/d", "arguments": args}),
    );
    assert_eq!(r.status, 201);
    let keys: Vec<String> = api
        .get_ok("/bindings/orders/e/h/q/orders.created")
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["properties_key"].as_str().unwrap().to_string())
        .collect();
    let spaced = keys.iter().find(|k| k.starts_with("a+b")).unwrap();
    assert_eq!(spaced, &format!("a+b%7Ec%2Fd{key}"));
    assert_eq!(
        api.get_ok(&format!(
            "/bindings/orders/e/h/q/orders.created/{}",
            enc(spaced)
        ))["routing_key"],
        "a b~c/d"
    );
    // Deleted by its key: 204, then 404.
    assert_eq!(api.delete(&path).status, 204);
    assert_eq!(api.get(&path).status, 404);
    assert_eq!(api.delete(&path).status, 404);
    // An empty key without arguments is `~`.
    let r = api.post(
        "/bindings/orders/e/orders.events/q/orders.created",
        &json!({}),
    );
    assert_eq!(r.header("location"), Some("orders.created/~"));
    assert_eq!(
        api.get_ok("/bindings/orders/e/orders.events/q/orders.created/~")["routing_key"],
        ""
    );
    assert_eq!(
        api.delete("/bindings/orders/e/orders.events/q/orders.created/~")
            .status,
        204
    );
    // Unknown or malformed keys name nothing.
    assert_eq!(
        api.get("/bindings/orders/e/orders.events/q/orders.created/nope")
            .status,
        404
    );
    assert_eq!(
        api.get("/bindings/orders/e/orders.events/q/orders.created/a~b~c")
            .status,
        404
    );
    // The implicit binding exists but cannot be deleted.
    let implicit = "/bindings/orders/e/amq.default/q/orders.created/orders.created";
    assert_eq!(api.get_ok(implicit)["source"], "");
    assert_error(&api.delete(implicit), 401, access_refused());
    // The AMQP refusals, as RabbitMQ's direct_request answers them.
    assert_error(
        &api.post("/bindings/orders/e/orders.events/q/nope", &json!({})),
        404,
        json!({"error": "not_found", "reason": "no queue 'nope' in vhost 'orders'"}),
    );
    assert_error(
        &api.post("/bindings/orders/e/nope/q/orders.created", &json!({})),
        404,
        json!({"error": "not_found", "reason": "no exchange 'nope' in vhost 'orders'"}),
    );
    assert_error(
        &api.post(
            "/bindings/orders/e/amq.default/q/orders.created",
            &json!({}),
        ),
        401,
        access_refused(),
    );
    assert_error(
        &api.post("/bindings/nowhere/e/x/q/y", &json!({})),
        404,
        json!({"error": "not_found", "reason": "vhost_not_found"}),
    );
    let r = api.post(
        "/bindings/orders/e/h/q/orders.created",
        &json!({"arguments": {"x-match": "nope"}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
}

#[test]
fn binding_needs_write_on_the_destination_and_read_on_the_source() {
    let server = orders();
    let manager = add_user(&server, "manager", &["management"]);
    permit(&server, "manager", "orders", "", "^orders.new$", "^$");
    let path = "/bindings/orders/e/orders.events/q/orders.new";
    assert_error(
        &manager.post(path, &json!({"routing_key": "k"})),
        401,
        access_refused(),
    );
    permit(&server, "manager", "orders", "", "^$", "^orders.events$");
    assert_error(
        &manager.post(path, &json!({"routing_key": "k"})),
        401,
        access_refused(),
    );
    assert_error(
        &manager.delete(&format!("{path}/order.%2523")),
        401,
        access_refused(),
    );
    permit(
        &server,
        "manager",
        "orders",
        "",
        "^orders.new$",
        "^orders.events$",
    );
    assert_eq!(manager.post(path, &json!({"routing_key": "k"})).status, 201);
    assert_eq!(manager.delete(&format!("{path}/k")).status, 204);
    assert_eq!(manager.delete(&format!("{path}/order.%2523")).status, 204);
    assert_eq!(manager.get_ok(path), json!([]));
}

/// Publishes `payload` (a string) to `exchange` in `/` with `properties`; the answer.
fn publish(
    api: &Api,
    exchange: &str,
    key: &str,
    payload: &str,
    properties: Value,
) -> crate::common::http::HttpReply {
    api.post(
        &format!("/exchanges/%2F/{exchange}/publish"),
        &json!({"properties": properties, "routing_key": key, "payload": payload,
                "payload_encoding": "string"}),
    )
}

fn publish_ok(api: &Api, exchange: &str, key: &str, payload: &str) -> bool {
    let r = publish(api, exchange, key, payload, json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["routed"].as_bool().unwrap()
}

fn get(api: &Api, queue: &str, body: Value) -> Value {
    let r = api.post(&format!("/queues/%2F/{queue}/get"), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn get_one(api: &Api, queue: &str, ackmode: &str) -> Value {
    get(
        api,
        queue,
        json!({"count": 1, "ackmode": ackmode, "encoding": "auto"}),
    )
}

#[test]
fn published_messages_are_got_with_every_ack_mode() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(
        api.put("/queues/%2F/work", &json!({"durable": true}))
            .status,
        201
    );
    let r = publish(
        &api,
        "amq.default",
        "work",
        "order 1",
        json!({"delivery_mode": 2, "headers": {"h": "v"}}),
    );
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"routed": true})),
        "{}",
        r.text()
    );
    assert!(!publish_ok(&api, "amq.default", "nobody", "lost"));
    // ack_requeue_true: got, then back in the queue, redelivered.
    let got = get_one(&api, "work", "ack_requeue_true");
    assert_same_shape_with("queue-get", &got, &Shape::default());
    assert_eq!(
        got,
        json!([{"payload_bytes": 7, "redelivered": false, "exchange": "", "routing_key": "work",
                "message_count": 0, "properties": {"delivery_mode": 2, "headers": {"h": "v"}},
                "payload": "order 1", "payload_encoding": "string"}])
    );
    // `count` as rabbitmqadmin sends it, a string.
    let again = get(
        &api,
        "work",
        json!({"count": "1", "ackmode": "reject_requeue_true", "encoding": "auto"}),
    );
    assert_eq!(
        (again[0]["redelivered"].clone(), again[0]["payload"].clone()),
        (json!(true), json!("order 1"))
    );
    // ack_requeue_false takes it away.
    assert_eq!(
        get_one(&api, "work", "ack_requeue_false")[0]["redelivered"],
        true
    );
    assert_eq!(get_one(&api, "work", "ack_requeue_true"), json!([]));
    // Several at once: message_count is what is left after each.
    for n in 1..=3 {
        assert!(publish_ok(&api, "amq.default", "work", &format!("m{n}")));
    }
    let three = get(
        &api,
        "work",
        json!({"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    );
    let counts: Vec<(Value, Value)> = three
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["payload"].clone(), m["message_count"].clone()))
        .collect();
    assert_eq!(
        counts,
        [
            (json!("m1"), json!(2)),
            (json!("m2"), json!(1)),
            (json!("m3"), json!(0))
        ]
    );
    let q = api.get_ok("/queues/%2F/work");
    assert_eq!(
        (
            q["messages_ready"].clone(),
            q["messages_unacknowledged"].clone()
        ),
        (json!(3), json!(0))
    );
    let two = get(
        &api,
        "work",
        json!({"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    );
    assert_eq!(
        (two[0]["payload"].clone(), two[0]["redelivered"].clone()),
        (json!("m1"), json!(true))
    );
    assert_eq!(api.get_ok("/queues/%2F/work")["messages"], json!(1));
}

#[test]
fn reject_requeue_false_dead_letters_as_basic_reject() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/queues/%2F/dead", &json!({})).status, 201);
    let args = json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"});
    assert_eq!(
        api.put("/queues/%2F/work", &json!({"arguments": args}))
            .status,
        201
    );
    assert!(publish_ok(&api, "amq.default", "work", "doomed"));
    assert_eq!(
        get_one(&api, "work", "reject_requeue_false")[0]["payload"],
        "doomed"
    );
    assert_eq!(api.get_ok("/queues/%2F/work")["messages"], json!(0));
    let dead = get_one(&api, "dead", "ack_requeue_false");
    assert_eq!(dead[0]["payload"], "doomed");
    let death = &dead[0]["properties"]["headers"]["x-death"][0];
    assert_eq!(
        (death["reason"].clone(), death["queue"].clone()),
        (json!("rejected"), json!("work"))
    );
}

#[test]
fn payloads_round_trip_in_base64_and_are_truncated_on_request() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/queues/%2F/bin", &json!({})).status, 201);
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&binary);
    let r = api.post(
        "/exchanges/%2F/amq.default/publish",
        &json!({"properties": {}, "routing_key": "bin", "payload": b64, "payload_encoding": "base64"}),
    );
    assert_eq!(r.json(), json!({"routed": true}), "{}", r.text());
    // `auto`: not UTF-8, so base64.
    let got = get_one(&api, "bin", "ack_requeue_true");
    assert_eq!(
        (
            got[0]["payload_encoding"].clone(),
            got[0]["payload_bytes"].clone()
        ),
        (json!("base64"), json!(256))
    );
    let back = base64::engine::general_purpose::STANDARD
        .decode(got[0]["payload"].as_str().unwrap())
        .unwrap();
    assert_eq!(back, binary);
    // Cut to 2 bytes (0xff 0xfe): still base64; the size is the whole message's.
    let cut = get(
        &api,
        "bin",
        json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto", "truncate": 2}),
    );
    assert_eq!(
        (cut[0]["payload"].clone(), cut[0]["payload_bytes"].clone()),
        (json!("//4="), json!(256))
    );
    // Text asked for in base64; text cut.
    assert!(publish_ok(&api, "amq.default", "bin", "hello world"));
    let text = get(
        &api,
        "bin",
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "base64"}),
    );
    assert_eq!(
        (
            text[0]["payload"].clone(),
            text[0]["payload_encoding"].clone()
        ),
        (json!("aGVsbG8gd29ybGQ="), json!("base64"))
    );
    let text = get(
        &api,
        "bin",
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": "5"}),
    );
    assert_eq!(
        (text[0]["payload"].clone(), text[0]["payload_bytes"].clone()),
        (json!("hello"), json!(11))
    );
}

#[test]
fn publish_routes_as_basic_publish_does() {
    let server = TestServer::with_api();
    let api = server.api();
    for q in ["a", "b", "caught"] {
        assert_eq!(api.put(&format!("/queues/%2F/{q}"), &json!({})).status, 201);
    }
    // CC and BCC headers add routing keys.
    let r = publish(
        &api,
        "amq.default",
        "a",
        "both",
        json!({"headers": {"BCC": ["b"]}}),
    );
    assert_eq!(r.json(), json!({"routed": true}));
    let copy = get_one(&api, "b", "ack_requeue_false");
    assert_eq!(copy[0]["payload"], "both");
    assert!(
        copy[0]["properties"]["headers"].get("BCC").is_none(),
        "{copy}"
    );
    assert_eq!(
        get_one(&api, "a", "ack_requeue_false")[0]["payload"],
        "both"
    );
    // An alternate exchange takes what the exchange does not route.
    assert_eq!(
        api.put("/exchanges/%2F/ae", &json!({"type": "fanout"}))
            .status,
        201
    );
    assert_eq!(
        api.post("/bindings/%2F/e/ae/q/caught", &json!({})).status,
        201
    );
    assert_eq!(
        api.put(
            "/exchanges/%2F/main",
            &json!({"type": "direct", "arguments": {"alternate-exchange": "ae"}})
        )
        .status,
        201
    );
    assert!(publish_ok(&api, "main", "nowhere", "kept"));
    assert_eq!(
        get_one(&api, "caught", "ack_requeue_false")[0]["exchange"],
        "main"
    );
    // A full queue that rejects publishes: the publish is nacked, 400.
    let full = json!({"arguments": {"x-max-length": 1, "x-overflow": "reject-publish"}});
    assert_eq!(api.put("/queues/%2F/full", &full).status, 201);
    assert!(publish_ok(&api, "amq.default", "full", "1"));
    assert_error(
        &publish(&api, "amq.default", "full", "2", json!({})),
        400,
        json!({"error": "bad_request", "reason": "rejected Unable to publish message. Check queue limits."}),
    );
    // The AMQP refusals, as the closing text of RabbitMQ's internal channel.
    assert_eq!(
        api.put(
            "/exchanges/%2F/inner",
            &json!({"type": "fanout", "internal": true})
        )
        .status,
        201
    );
    assert_error(
        &publish(&api, "inner", "", "x", json!({})),
        401,
        json!({"error": "not_authorised", "reason": "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'"}),
    );
    assert_error(
        &publish(&api, "amq.default", "a", "x", json!({"user_id": "bob"})),
        400,
        json!({"error": "bad_request", "reason":
            "406 PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'guest'"}),
    );
    // During a resource alarm publishers are blocked: refused at once.
    let alarms = server.handle.broker().alarms();
    let before = alarms.config().memory_high_watermark;
    alarms
        .set_memory_high_watermark(MemoryWatermark::Relative(0.0))
        .unwrap();
    let r = publish(&api, "amq.default", "a", "x", json!({}));
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (503, json!("service_unavailable")),
        "{}",
        r.text()
    );
    alarms.set_memory_high_watermark(before).unwrap();
    assert!(publish_ok(&api, "amq.default", "a", "x"));
}

#[test]
fn publish_and_get_refuse_bad_requests_as_rabbitmq() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/queues/%2F/q", &json!({})).status, 201);
    let bad = |path: &str, body: Value| api.post(path, &body);
    assert_error(
        &bad(
            "/exchanges/%2F/amq.default/publish",
            json!({"routing_key": "q", "properties": {}}),
        ),
        400,
        json!({"error": "bad_request", "reason": "[{key_missing,payload},{key_missing,payload_encoding}]"}),
    );
    assert_error(
        &bad(
            "/exchanges/%2F/amq.default/publish",
            json!({"routing_key": "q", "properties": {}, "payload": 5, "payload_encoding": "string"}),
        ),
        400,
        json!({"error": "bad_request", "reason": "payload_not_string"}),
    );
    assert_error(
        &bad(
            "/exchanges/%2F/amq.default/publish",
            json!({"routing_key": "q", "properties": {}, "payload": "x", "payload_encoding": "hex"}),
        ),
        400,
        json!({"error": "bad_request", "reason": ["unsupported_encoding", "hex"]}),
    );
    assert_error(
        &bad(
            "/exchanges/%2F/amq.default/publish",
            json!({"routing_key": "q", "properties": {"delivery_mode": "2"}, "payload": "x", "payload_encoding": "string"}),
        ),
        400,
        json!({"error": "bad_request", "reason": ["not_int", "delivery_mode"]}),
    );
    assert_error(
        &bad("/exchanges/%2F/nope/publish", json!({})),
        404,
        json!({"error": "not_found", "reason": "exchange_not_found"}),
    );
    assert_error(
        &bad("/exchanges/nowhere/x/publish", json!({})),
        404,
        json!({"error": "not_found", "reason": "vhost_not_found"}),
    );
    assert_error(
        &bad("/queues/%2F/q/get", json!({"count": 1, "encoding": "auto"})),
        400,
        json!({"error": "bad_request", "reason": "[{key_missing,ackmode}]"}),
    );
    assert_error(
        &bad(
            "/queues/%2F/q/get",
            json!({"count": 1, "ackmode": "keep", "encoding": "auto"}),
        ),
        400,
        json!({"error": "bad_request", "reason":
            "Invalid ackmode value: keep. Valid values are: ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false"}),
    );
    assert_error(
        &bad(
            "/queues/%2F/q/get",
            json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "utf8"}),
        ),
        400,
        json!({"error": "bad_request", "reason": "Unsupported encoding. Please use auto or base64."}),
    );
    assert_error(
        &bad(
            "/queues/%2F/q/get",
            json!({"count": "many", "ackmode": "ack_requeue_true", "encoding": "auto"}),
        ),
        400,
        json!({"error": "bad_request", "reason": ["not_integer", "many"]}),
    );
    assert_eq!(
        bad(
            "/queues/%2F/q/get",
            json!({"count": 1_000_000, "ackmode": "ack_requeue_true", "encoding": "auto"})
        )
        .status,
        400
    );
    assert_error(
        &bad("/queues/%2F/nope/get", json!({})),
        404,
        json!({"error": "not_found", "reason": "queue_not_found"}),
    );
    assert_eq!(api.get("/queues/%2F/q/get").status, 405);
    assert_eq!(api.get("/exchanges/%2F/amq.default/publish").status, 405);
}

#[test]
fn messaging_needs_write_to_publish_and_read_to_get_and_purge() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/queues/%2F/q", &json!({})).status, 201);
    assert!(publish_ok(&api, "amq.default", "q", "m"));
    let manager = add_user(&server, "manager", &["management"]);
    permit(&server, "manager", "/", ".*", "^$", "^$");
    assert_error(
        &publish(&manager, "amq.default", "q", "m", json!({})),
        401,
        json!({"error": "not_authorised", "reason":
            "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'manager'"}),
    );
    let r = manager.post(
        "/queues/%2F/q/get",
        &json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    );
    assert_error(
        &r,
        401,
        json!({"error": "not_authorised", "reason":
            "ACCESS_REFUSED - access to queue 'q' in vhost '/' refused for user 'manager'"}),
    );
    assert_error(
        &manager.delete("/queues/%2F/q/contents"),
        401,
        access_refused(),
    );
    assert_eq!(api.get_ok("/queues/%2F/q")["messages"], json!(1));
    permit(&server, "manager", "/", "", ".*", ".*");
    assert!(publish_ok(&manager, "amq.default", "q", "m2"));
    assert_eq!(
        get_one(&manager, "q", "ack_requeue_true")
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(manager.delete("/queues/%2F/q/contents").status, 204);
    assert_eq!(api.get_ok("/queues/%2F/q")["messages"], json!(0));
    assert_error(
        &api.delete("/queues/%2F/nope/contents"),
        404,
        fixture("missing-queue")["body"].clone(),
    );
    assert_eq!(api.post("/queues/%2F/q/contents", &json!({})).status, 405);
}

#[test]
fn queue_actions_are_for_administrators_and_know_no_action() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/queues/%2F/q", &json!({})).status, 201);
    for action in ["sync", "cancel_sync"] {
        assert_error(
            &api.post("/queues/%2F/q/actions", &json!({"action": action})),
            400,
            json!({"error": "bad_request", "reason": ["unknown", action]}),
        );
    }
    assert_error(
        &api.post("/queues/%2F/q/actions", &json!({})),
        400,
        json!({"error": "bad_request", "reason": "[{key_missing,action}]"}),
    );
    assert_error(
        &api.post("/queues/%2F/nope/actions", &json!({"action": "sync"})),
        404,
        json!({"error": "not_found", "reason": "queue_not_found"}),
    );
    let manager = add_user(&server, "manager", &["management"]);
    permit(&server, "manager", "/", ".*", ".*", ".*");
    assert_error(
        &manager.post("/queues/%2F/q/actions", &json!({"action": "sync"})),
        401,
        json!({"error": "not_authorised", "reason": "Not administrator user"}),
    );
    assert_eq!(api.get("/queues/%2F/q/actions").status, 405);
}

#[test]
fn an_amqp_consumer_receives_what_http_published() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/queues/%2F/inbox", &json!({})).status, 201);
    let amqp = server.handle.amqp_addr().expect("AMQP on").to_string();
    let mut c =
        relaymq::amqp_client::Connection::connect(&relaymq::amqp_client::ConnectOptions::new(amqp))
            .expect("AMQP connects");
    c.basic_consume("inbox", relaymq::client::ConsumeOptions::default())
        .expect("consume");
    let r = publish(
        &api,
        "amq.default",
        "inbox",
        "über HTTP",
        json!({"content_type": "text/plain", "priority": 3}),
    );
    assert_eq!(r.json(), json!({"routed": true}), "{}", r.text());
    let (mut head, mut body, mut props) = (None, Vec::new(), None);
    let started = std::time::Instant::now();
    while head.is_none() && started.elapsed() < Duration::from_secs(10) {
        c.poll_deliveries(Duration::from_millis(200), |e| match e {
            relaymq::amqp_client::DeliveryEvent::Start { header, .. } => {
                props = Some(header.properties().unwrap())
            }
            relaymq::amqp_client::DeliveryEvent::Body { chunk, .. } => {
                body.extend_from_slice(chunk)
            }
            relaymq::amqp_client::DeliveryEvent::End { head: h } => head = Some(h.clone()),
        })
        .expect("deliveries");
    }
    let head = head.expect("a delivery within 10 s");
    assert_eq!(
        (head.exchange.as_str(), head.routing_key.as_str()),
        ("", "inbox")
    );
    assert_eq!(String::from_utf8(body).unwrap(), "über HTTP");
    let props = props.unwrap();
    assert_eq!(
        (props.content_type.as_deref(), props.priority),
        (Some("text/plain"), Some(3))
    );
    c.ack(head.delivery_tag, false);
    c.flush().unwrap();
}

#[test]
fn rabbitmqadmin_declares_binds_publishes_gets_and_purges() {
    let Some(rabbitmqadmin) = clients::rabbitmqadmin() else {
        return;
    };
    let server = TestServer::with_api();
    let port = server.http_addr().port().to_string();
    let admin = |args: &[&str]| -> String {
        let out = Command::new("python3")
            .arg(&rabbitmqadmin)
            .args(["-H", "127.0.0.1", "-P", &port, "-u", "guest", "-p", "guest"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("rabbitmqadmin runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    admin(&["declare", "exchange", "name=logs", "type=topic"]);
    admin(&["declare", "queue", "name=errors"]);
    admin(&[
        "declare",
        "binding",
        "source=logs",
        "destination=errors",
        "routing_key=*.error",
    ]);
    let bindings = admin(&["-f", "raw_json", "list", "bindings"]);
    assert!(
        bindings.contains("\"properties_key\":\"%2A.error\""),
        "{bindings}"
    );
    admin(&[
        "publish",
        "exchange=logs",
        "routing_key=app.error",
        "payload=disk full",
    ]);
    let got = admin(&[
        "-f",
        "raw_json",
        "get",
        "queue=errors",
        "ackmode=ack_requeue_false",
    ]);
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        (got[0]["payload"].clone(), got[0]["routing_key"].clone()),
        (json!("disk full"), json!("app.error"))
    );
    admin(&[
        "publish",
        "exchange=logs",
        "routing_key=app.error",
        "payload=fan stuck",
    ]);
    admin(&["purge", "queue", "name=errors"]);
    assert_eq!(
        server.api().get_ok("/queues/%2F/errors")["messages"],
        json!(0)
    );
    admin(&[
        "delete",
        "binding",
        "source=logs",
        "destination_type=queue",
        "destination=errors",
        "properties_key=%2A.error",
    ]);
    assert_eq!(
        server.api().get_ok("/exchanges/%2F/logs/bindings/source"),
        json!([])
    );
    admin(&["delete", "exchange", "name=logs"]);
}

#[test]
fn a_persistent_message_published_over_http_survives_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flags = ["--http-listen", "127.0.0.1:0"];
    let server = ServerProcess::start(&data, &flags);
    let api = |s: &ServerProcess| {
        let addr = s.ready["http_listen"]
            .as_str()
            .expect("http_listen in the ready file");
        Api::guest(addr.parse().unwrap())
    };
    let before = api(&server);
    assert_eq!(
        before
            .put("/queues/%2F/kept", &json!({"durable": true}))
            .status,
        201
    );
    for n in 0..20 {
        let r = before.post(
            "/exchanges/%2F/amq.default/publish",
            &json!({"properties": {"delivery_mode": 2}, "routing_key": "kept",
                    "payload": format!("m{n}"), "payload_encoding": "string"}),
        );
        assert_eq!(r.json(), json!({"routed": true}), "{}", r.text());
    }
    // Answered only once stored: a crash right after loses none of them.
    server.kill9();
    let server = ServerProcess::start(&data, &flags);
    let after = api(&server);
    let got = after.post(
        "/queues/%2F/kept/get",
        &json!({"count": 20, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    );
    let payloads: Vec<Value> = got
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["payload"].clone())
        .collect();
    let expected: Vec<Value> = (0..20).map(|n| json!(format!("m{n}"))).collect();
    assert_eq!(payloads, expected);
    server.terminate();
}

#[test]
fn the_lists_are_the_shapes_rabbitmq_recorded_with_an_empty_vhost() {
    let server = TestServer::with_api();
    server.handle.broker().declare_vhost("empty").unwrap();
    permit(&server, "guest", "empty", ".*", ".*", ".*");
    let api = server.api();
    assert_same_shape_with(
        "exchanges-vhost",
        &api.get_ok("/exchanges/empty"),
        &lenient(),
    );
    assert_eq!(api.get_ok("/bindings/empty"), json!([]));
}
