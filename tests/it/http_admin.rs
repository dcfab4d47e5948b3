//! The management HTTP API's administration families (docs/http-api.md §3): vhosts, users,
//! permissions, vhost and user limits, definitions export and import — RabbitMQ 4.x's
//! paths, codes and error bodies, the shapes of RabbitMQ's recorded replies
//! (`tests/fixtures/management/`), limits enforced over AMQP 0-9-1 and the native protocol
//! after an HTTP PUT and kept across a restart, a definitions round trip through a
//! multipart upload, and an oversized upload refused from its `Content-Length`.

use crate::common::golden::{assert_same_shape_with, fixture, Shape, USER_DATA};
use crate::common::http::{request, Api};
use crate::common::{amqp_raw, Raw, ServerProcess, TestServer};
use relaymq::amqp::AmqpMethod;
use relaymq::native::Method;
use relaymq::types::FieldTable;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn admin_as(server: &TestServer, name: &str, tags: &str) -> Api {
    let api = server.api();
    let r = api.put(
        &format!("/users/{name}"),
        &json!({"password": format!("{name}-secret"), "tags": tags}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    Api::as_user(server.http_addr(), name, &format!("{name}-secret"))
}

fn amqp_addr(server: &TestServer) -> SocketAddr {
    server.handle.amqp_addr().expect("AMQP listener on")
}

/// A vhost row with its tags as RabbitMQ 3.10's `GET /api/vhosts/{name}` (the recorded
/// fixture) wrote them, one comma-separated string; RabbitMQ 4.x, as RelayMQ, sends a
/// list, as 3.10's `GET /api/vhosts` did.
fn as_3_10_vhost(row: &Value) -> Value {
    let mut row = row.clone();
    let joined = |v: &Value| {
        json!(v
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(","))
            .unwrap_or_default())
    };
    row["tags"] = joined(&row["tags"]);
    row["metadata"]["tags"] = joined(&row["metadata"]["tags"]);
    row
}

fn reason(r: &crate::common::http::HttpReply) -> String {
    r.json()["reason"].as_str().unwrap_or_default().to_string()
}

#[test]
fn vhosts_are_created_updated_listed_and_deleted() {
    let server = TestServer::with_api();
    let api = server.api();
    let r = api.put(
        "/vhosts/orders",
        &json!({"description": "Orders", "tags": "prod,eu", "default_queue_type": "quorum"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    // The creator has full permissions there, as RabbitMQ grants them over HTTP.
    assert_eq!(
        api.get_ok("/permissions/orders/guest"),
        json!({"user": "guest", "vhost": "orders", "configure": ".*", "write": ".*", "read": ".*"})
    );
    let vh = api.get_ok("/vhosts/orders");
    assert_eq!(vh["description"], "Orders");
    assert_eq!(vh["tags"], json!(["prod", "eu"]));
    assert_eq!(vh["metadata"]["default_queue_type"], "quorum");
    let shape = Shape {
        opaque: &["cluster_state"],
        ..Shape::default()
    };
    assert_same_shape_with("vhost", &as_3_10_vhost(&vh), &shape);
    // RabbitMQ 3.10's list has the tags as lists already.
    assert_same_shape_with("vhosts", &api.get_ok("/vhosts"), &shape);
    // Again: 204; the fields left out are reset, the default queue type kept.
    let r = api.put("/vhosts/orders", &json!({"tags": ["a", "b"]}));
    assert_eq!(r.status, 204, "{}", r.text());
    let vh = api.get_ok("/vhosts/orders");
    assert_eq!(
        (vh["description"].clone(), vh["tags"].clone()),
        (json!(""), json!(["a", "b"]))
    );
    assert_eq!(vh["default_queue_type"], "quorum");
    // `tracing`: false (as the Terraform provider sends) is fine; true is refused, as
    // there is no firehose; anything else is not a boolean.
    assert_eq!(
        api.put("/vhosts/traced", &json!({"tracing": false})).status,
        201
    );
    let r = api.put("/vhosts/traced", &json!({"tracing": true}));
    assert_eq!(r.status, 400);
    assert!(r.text().contains("firehose"), "{}", r.text());
    assert_eq!(
        api.put("/vhosts/traced", &json!({"tracing": 3})).status,
        400
    );
    let r = api.put("/vhosts/bad", &json!({"default_queue_type": "lazy"}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "lazy is not a valid queue type".to_string())
    );
    // Permissions and (no) topic permissions of the vhost.
    assert_eq!(
        api.get_ok("/vhosts/orders/permissions"),
        json!([{"user": "guest", "vhost": "orders", "configure": ".*", "write": ".*", "read": ".*"}])
    );
    assert_eq!(api.get_ok("/vhosts/orders/topic-permissions"), json!([]));
    assert_eq!(api.get("/vhosts/nowhere/permissions").status, 404);
    // A management user may neither create nor delete.
    let manager = admin_as(&server, "manager", "management");
    let r = manager.put("/vhosts/x", &json!({}));
    assert_eq!(r.json(), fixture("not-administrator")["body"]);
    assert_eq!(manager.delete("/vhosts/orders").status, 401);
    assert_eq!(manager.get("/vhosts/orders/permissions").status, 401);
    // Deleting closes its connections and forgets it.
    let mut raw = amqp_raw::Raw::connect(amqp_addr(&server));
    raw.login("guest", "guest", "orders").expect("opens");
    assert_eq!(api.delete("/vhosts/orders").status, 204);
    let text = raw.expect_connection_close(320);
    assert!(text.contains("orders"), "{text}");
    assert_eq!(api.delete("/vhosts/orders").status, 404);
    assert_eq!(api.get("/vhosts/orders").status, 404);
    assert_eq!(api.get("/permissions/orders/guest").status, 404);
}

#[test]
fn users_are_created_with_passwords_or_hashes_and_rabbitmqs_rules() {
    let server = TestServer::with_api();
    let api = server.api();
    let addr = server.http_addr();
    // A password: the user logs in; tags as a comma-separated string.
    let r = api.put(
        "/users/alice",
        &json!({"password": "wonder", "tags": "management,monitoring"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let alice = api.get_ok("/users/alice");
    assert_eq!(alice["tags"], json!(["management", "monitoring"]));
    assert_eq!(alice["limits"], json!({}));
    assert_same_shape_with("user", &alice, &Shape::default());
    assert_eq!(
        Api::as_user(addr, "alice", "wonder").get("/whoami").status,
        200
    );
    // A RabbitMQ hash from hash_password, tags as a list: the user logs in with it.
    let hash = api.get_ok("/auth/hash_password/s3cret")["ok"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api.put(
        "/users/bob",
        &json!({"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": ["administrator"]}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        Api::as_user(addr, "bob", "s3cret").get("/users").status,
        200
    );
    // An argon2id hash (RelayMQ's own) is taken too.
    let argon = api.get_ok("/users/bob")["password_hash"].clone();
    let argon_user = api.get_ok("/users/guest");
    assert_eq!(argon_user["hashing_algorithm"], "argon2id");
    let r = api.put(
        "/users/carol",
        &json!({"password_hash": argon_user["password_hash"], "hashing_algorithm": "argon2id",
                "tags": ""}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        request(
            addr,
            "GET",
            "/api/overview",
            Some(("carol", "guest")),
            None,
            &[]
        )
        .status,
        401,
        "carol has guest's password but no management tag"
    );
    assert!(argon.is_string());
    // Changing tags with the password again: 204; without any password the password is
    // cleared, as RabbitMQ does; "password_hash": "" is no password too.
    let r = api.put(
        "/users/alice",
        &json!({"password": "wonder", "tags": "administrator"}),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        Api::as_user(addr, "alice", "wonder").get("/users").status,
        200
    );
    let r = api.put("/users/alice", &json!({"tags": "administrator"}));
    assert_eq!(r.status, 204);
    assert_eq!(api.get_ok("/users/alice")["password_hash"], "");
    assert_eq!(
        Api::as_user(addr, "alice", "wonder").get("/whoami").status,
        401
    );
    let r = api.put("/users/dave", &json!({"password_hash": "", "tags": ""}));
    assert_eq!(r.status, 201);
    assert_eq!(api.get_ok("/users/dave")["password_hash"], "");
    // RabbitMQ's refusals.
    let r = api.put("/users/eve", &json!({"password": "x"}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "tags_not_present".to_string())
    );
    let r = api.put(
        "/users/eve",
        &json!({"password": "x", "password_hash": "y", "tags": ""}),
    );
    assert_eq!(
        (r.status, reason(&r)),
        (
            400,
            "both_password_and_password_hash_are_provided".to_string()
        )
    );
    let many: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
    let r = api.put("/users/eve", &json!({"password": "x", "tags": many}));
    assert_eq!(
        (r.status, reason(&r)),
        (
            400,
            "A user can have at most 16 tags (received 20)".to_string()
        )
    );
    let r = api.put(
        "/users/eve",
        &json!({"password_hash": "x", "hashing_algorithm": "rabbit_password_hashing_md5", "tags": ""}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // Users list in RabbitMQ's shape.
    assert_same_shape_with(
        "users",
        &api.get_ok("/users"),
        &Shape {
            empty_arrays_ok: true,
            ..Shape::default()
        },
    );
    assert_eq!(api.get("/users/nobody").status, 404);
    // A management user may not.
    let manager = admin_as(&server, "manager", "management");
    let r = manager.put("/users/x", &json!({"password": "x", "tags": ""}));
    assert_eq!(r.json(), fixture("not-administrator")["body"]);
    assert_eq!(manager.get("/auth/hash_password/x").status, 401);
    assert_eq!(manager.delete("/users/alice").status, 401);
}

#[test]
fn deleting_users_closes_their_connections_and_spares_protected_ones() {
    let server = TestServer::with_api();
    let api = server.api();
    for name in ["app", "keep", "gone1", "gone2"] {
        let tags = if name == "keep" { "protected" } else { "" };
        let r = api.put(
            &format!("/users/{name}"),
            &json!({"password": "pw", "tags": tags}),
        );
        assert_eq!(r.status, 201);
        let r = api.put(
            &format!("/permissions/%2F/{name}"),
            &json!({"configure": ".*", "write": ".*", "read": ".*"}),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let mut raw = amqp_raw::Raw::connect(amqp_addr(&server));
    raw.login("app", "pw", "/").expect("app logs in");
    assert_eq!(api.delete("/users/app").status, 204);
    let text = raw.expect_connection_close(320);
    assert!(text.contains("app"), "{text}");
    assert_eq!(api.delete("/users/app").status, 404);
    // A protected user cannot be changed or deleted over HTTP.
    let r = api.delete("/users/keep");
    assert_eq!(
        (r.status, reason(&r)),
        (
            400,
            "Protected users cannot be modified via the HTTP API".to_string()
        )
    );
    assert_eq!(
        api.put("/users/keep", &json!({"password": "x", "tags": ""}))
            .status,
        400
    );
    // Bulk: existing unprotected users go, the rest are skipped.
    let r = api.post(
        "/users/bulk-delete",
        &json!({"users": ["gone1", "gone2", "keep", "nobody"]}),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(api.get("/users/gone1").status, 404);
    assert_eq!(api.get("/users/gone2").status, 404);
    assert_eq!(api.get("/users/keep").status, 200);
    let r = api.post("/users/bulk-delete", &json!({}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "[{key_missing,users}]".to_string())
    );
    let refused = api.get("/users/bulk-delete");
    assert_eq!(refused.status, 405);
    assert_eq!(refused.header("allow"), Some("POST, OPTIONS"));
}

#[test]
fn permissions_are_set_read_and_cleared() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(
        api.put("/users/u", &json!({"password": "pw", "tags": ""}))
            .status,
        201
    );
    let body = json!({"configure": "^u\\.", "write": ".*", "read": ".*"});
    assert_eq!(api.put("/permissions/%2F/u", &body).status, 201);
    assert_eq!(api.put("/permissions/%2F/u", &body).status, 204);
    let row = api.get_ok("/permissions/%2F/u");
    assert_eq!(row["configure"], "^u\\.");
    assert_eq!(
        api.get_ok("/users/u/permissions"),
        json!([{"user": "u", "vhost": "/", "configure": "^u\\.", "write": ".*", "read": ".*"}])
    );
    assert_eq!(api.get_ok("/users/u/topic-permissions"), json!([]));
    assert_eq!(api.get_ok("/topic-permissions"), json!([]));
    assert_eq!(api.get("/users/nobody/permissions").status, 404);
    assert_same_shape_with(
        "permissions",
        &api.get_ok("/permissions"),
        &Shape::default(),
    );
    // The permission applies: `u` may declare `u.q` and not `q`.
    let mut raw = amqp_raw::Raw::connect(amqp_addr(&server));
    raw.login("u", "pw", "/").expect("u logs in");
    // RabbitMQ's refusals.
    let r = api.put("/permissions/nowhere/u", &body);
    assert_eq!(
        (r.status, reason(&r)),
        (400, "vhost_or_user_not_found".to_string())
    );
    let r = api.put("/permissions/%2F/nobody", &body);
    assert_eq!(r.status, 400);
    let r = api.put("/permissions/%2F/u", &json!({"configure": ".*"}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "[{key_missing,write},{key_missing,read}]".to_string())
    );
    let r = api.put(
        "/permissions/%2F/u",
        &json!({"configure": "(", "write": "", "read": ""}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(api.delete("/permissions/%2F/u").status, 204);
    assert_eq!(api.delete("/permissions/%2F/u").status, 404);
    assert_eq!(api.get("/permissions/%2F/u").status, 404);
    let manager = admin_as(&server, "manager", "management");
    assert_eq!(manager.put("/permissions/%2F/u", &body).status, 401);
    assert_eq!(manager.get("/topic-permissions").status, 401);
}

#[test]
fn limits_are_set_listed_validated_and_cleared() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.get_ok("/vhost-limits"), json!([]));
    let r = api.put("/vhost-limits/%2F/max-queues", &json!({"value": 5}));
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        api.put("/vhost-limits/%2F/max-connections", &json!({"value": -1}))
            .status,
        204
    );
    assert_eq!(
        api.get_ok("/vhost-limits"),
        json!([{"vhost": "/", "value": {"max-queues": 5, "max-connections": -1}}])
    );
    assert_eq!(
        api.get_ok("/vhost-limits/%2F"),
        json!([{"vhost": "/", "value": {"max-queues": 5, "max-connections": -1}}])
    );
    let r = api.put("/vhost-limits/%2F/max-queues", &json!({"value": "x"}));
    assert_eq!(
        (r.status, reason(&r)),
        (
            400,
            "max-queues should be a number, actually was <<\"x\">>".to_string()
        )
    );
    let r = api.put("/vhost-limits/%2F/max-foo", &json!({"value": 1}));
    assert_eq!(
        (r.status, reason(&r)),
        (
            400,
            "Unrecognised terms [{<<\"max-foo\">>,1}] in limits".to_string()
        )
    );
    let r = api.put("/vhost-limits/%2F/max-queues", &json!({}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "[{key_missing,value}]".to_string())
    );
    let r = api.put("/vhost-limits/nowhere/max-queues", &json!({"value": 1}));
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "not_found", "reason": "vhost_not_found"})
        )
    );
    assert_eq!(api.get("/vhost-limits/nowhere").status, 404);
    assert_eq!(api.delete("/vhost-limits/%2F/max-connections").status, 204);
    assert_eq!(
        api.get_ok("/vhost-limits/%2F"),
        json!([{"vhost": "/", "value": {"max-queues": 5}}])
    );
    // A management user sees the limits of its vhosts, and may not change them.
    let manager = admin_as(&server, "manager", "management");
    assert_eq!(manager.get_ok("/vhost-limits"), json!([]));
    assert_eq!(
        manager
            .put("/vhost-limits/%2F/max-queues", &json!({"value": 1}))
            .status,
        401
    );
    // User limits: in the user's row, listed, validated, cleared.
    let r = api.put("/user-limits/manager/max-channels", &json!({"value": 3}));
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        api.get_ok("/users/manager")["limits"],
        json!({"max-channels": 3})
    );
    assert_eq!(
        api.get_ok("/user-limits"),
        json!([{"user": "manager", "value": {"max-channels": 3}}])
    );
    // A user reads its own limits; another's needs monitoring or administrator.
    assert_eq!(
        manager.get_ok("/user-limits/manager"),
        json!([{"user": "manager", "value": {"max-channels": 3}}])
    );
    assert_eq!(manager.get("/user-limits/guest").status, 401);
    assert_eq!(manager.get("/user-limits").status, 401);
    let r = api.put("/user-limits/manager/max-queues", &json!({"value": 1}));
    assert_eq!(
        (r.status, reason(&r)),
        (
            400,
            "Unrecognised terms [{<<\"max-queues\">>,1}] in user-limits".to_string()
        )
    );
    assert_eq!(
        api.put("/user-limits/nobody/max-channels", &json!({"value": 1}))
            .status,
        404
    );
    assert_eq!(api.get("/user-limits/nobody").status, 404);
    assert_eq!(api.delete("/user-limits/manager/max-channels").status, 204);
    assert_eq!(api.get_ok("/user-limits/manager"), json!([]));
    assert_eq!(api.get("/vhost-limits/%2F/max-queues").status, 405);
}

fn amqp_declare(raw: &mut amqp_raw::Raw, ch: u16, name: &str) -> AmqpMethod {
    raw.method(
        ch,
        &AmqpMethod::QueueDeclare {
            queue: name.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    raw.recv().expect("a reply").1
}

fn native_open(addr: SocketAddr, user: &str, password: &str) -> Result<Raw, (u16, String)> {
    let mut raw = Raw::connect_bare(addr);
    match raw.open_as(user, password, "/") {
        Method::OpenOk { .. } => Ok(raw),
        Method::Close {
            reply_code,
            reply_text,
            ..
        } => Err((reply_code, reply_text)),
        other => panic!("expected open-ok or close, got {other:?}"),
    }
}

#[test]
fn limits_set_over_http_are_enforced_over_amqp_and_the_native_protocol() {
    let server = TestServer::with_api();
    let api = server.api();
    let amqp = amqp_addr(&server);
    // max-connections of the vhost: the second connection is refused, on both protocols.
    assert_eq!(
        api.put("/vhost-limits/%2F/max-connections", &json!({"value": 1}))
            .status,
        204
    );
    let mut first = amqp_raw::Raw::connect(amqp);
    first.login("guest", "guest", "/").expect("the first opens");
    let refused = amqp_raw::Raw::connect(amqp)
        .login("guest", "guest", "/")
        .unwrap_err();
    assert_eq!(
        refused,
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) \
             is reached"
                .to_string()
        )
    );
    let refused = native_open(server.addr(), "guest", "guest")
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.0, 530, "{}", refused.1);
    assert!(
        refused.1.contains("connection limit (1) is reached"),
        "{}",
        refused.1
    );
    // max-queues: the third declare is refused with RabbitMQ's text.
    assert_eq!(
        api.put("/vhost-limits/%2F/max-queues", &json!({"value": 2}))
            .status,
        204
    );
    first.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(
        first.recv(),
        Some((1, AmqpMethod::ChannelOpenOk {}))
    ));
    for q in ["q1", "q2"] {
        let got = amqp_declare(&mut first, 1, q);
        assert!(matches!(got, AmqpMethod::QueueDeclareOk { .. }), "{got:?}");
    }
    match amqp_declare(&mut first, 1, "q3") {
        AmqpMethod::ChannelClose {
            reply_code,
            reply_text,
            ..
        } => assert_eq!(
            (reply_code, reply_text.as_str()),
            (
                406,
                "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost '/' (2) \
                 is reached"
            )
        ),
        other => panic!("expected channel.close 406, got {other:?}"),
    }
    // The HTTP API's own declare is refused too (400 with the same text).
    let r = api.put("/queues/%2F/q4", &json!({"durable": false}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(reason(&r).contains("queue limit in vhost '/' (2) is reached"));
    // -1 lifts it.
    assert_eq!(
        api.put("/vhost-limits/%2F/max-connections", &json!({"value": -1}))
            .status,
        204
    );
    let mut native = native_open(server.addr(), "guest", "guest").expect("opens now");
    let got = native.call(1, Method::ChannelOpen);
    assert_eq!(got.2, Method::Ok);
    // User limits: max-connections and max-channels (over all its connections).
    let r = api.put("/users/app", &json!({"password": "pw", "tags": ""}));
    assert_eq!(r.status, 201);
    assert_eq!(
        api.put(
            "/permissions/%2F/app",
            &json!({"configure": ".*", "write": ".*", "read": ".*"})
        )
        .status,
        201
    );
    assert_eq!(
        api.put("/user-limits/app/max-connections", &json!({"value": 1}))
            .status,
        204
    );
    assert_eq!(
        api.put("/user-limits/app/max-channels", &json!({"value": 1}))
            .status,
        204
    );
    let mut app = amqp_raw::Raw::connect(amqp);
    app.login("app", "pw", "/").expect("app's first connection");
    let refused = native_open(server.addr(), "app", "pw")
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        refused,
        (
            530,
            "connection refused for user 'app': user connection limit (1) is reached".to_string()
        )
    );
    app.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(
        app.recv(),
        Some((1, AmqpMethod::ChannelOpenOk {}))
    ));
    app.method(2, &AmqpMethod::ChannelOpen {});
    let text = app.expect_connection_close(530);
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened for user 'app' has reached the maximum \
         allowed user limit of 1"
    );
}

/// A `multipart/form-data` body holding `json` as the `file` part, as RabbitMQ's web UI
/// form sends it (from the page's own origin: the API's CSRF rule).
fn multipart(json: &[u8]) -> (Vec<u8>, String) {
    let boundary = "----RelayMQBoundary7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"defs.json\"\r\n\
             Content-Type: application/json\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(json);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (body, format!("multipart/form-data; boundary={boundary}"))
}

#[test]
fn definitions_round_trip_through_a_multipart_upload() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(
        api.put("/vhosts/shop", &json!({"description": "the shop"}))
            .status,
        201
    );
    assert_eq!(
        api.put(
            "/queues/shop/orders",
            &json!({"durable": true, "arguments": {"x-max-length": 10}})
        )
        .status,
        201
    );
    assert_eq!(
        api.put(
            "/users/clerk",
            &json!({"password": "pw", "tags": "management"})
        )
        .status,
        201
    );
    assert_eq!(
        api.put(
            "/permissions/shop/clerk",
            &json!({"configure": "", "write": ".*", "read": ".*"})
        )
        .status,
        201
    );
    assert_eq!(
        api.put("/vhost-limits/shop/max-queues", &json!({"value": 7}))
            .status,
        204
    );
    assert_eq!(
        api.put("/user-limits/clerk/max-connections", &json!({"value": 4}))
            .status,
        204
    );
    // The export: RabbitMQ's shape, the limits where RabbitMQ puts them.
    let r = request(
        server.http_addr(),
        "GET",
        "/api/definitions?download=defs.json",
        Some(("guest", "guest")),
        None,
        &[],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-disposition"),
        Some("attachment; filename=defs.json")
    );
    let exported = r.json();
    assert_same_shape_with(
        "definitions",
        &exported,
        &Shape {
            opaque: USER_DATA,
            optional: &["global_parameters[]"],
            empty_arrays_ok: true,
        },
    );
    assert_eq!(exported["rabbitmq_definition_format"], "cluster");
    assert!(exported["parameters"].as_array().unwrap().contains(
        &json!({"vhost": "shop", "component": "vhost-limits", "name": "limits",
                          "value": {"max-queues": 7}})
    ));
    let clerk = exported["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "clerk")
        .unwrap()
        .clone();
    assert_eq!(clerk["limits"], json!({"max-connections": 4}));
    // The per-vhost form.
    let shop = api.get_ok("/definitions/shop");
    assert_eq!(shop["rabbitmq_definition_format"], "single_virtual_host");
    assert_eq!(shop["limits"], json!({"max-queues": 7}));
    assert_eq!(shop["queues"][0]["name"], "orders");
    assert!(shop["queues"][0].get("vhost").is_none());
    assert!(shop.get("users").is_none());
    let r = api.get("/definitions/nowhere");
    assert_eq!((r.status, reason(&r)), (400, "vhost_not_found".to_string()));

    // Wipe, then import the export as the web UI uploads it.
    assert_eq!(api.delete("/vhosts/shop").status, 204);
    assert_eq!(api.delete("/users/clerk").status, 204);
    let text = serde_json::to_vec(&exported).unwrap();
    let (body, content_type) = multipart(&text);
    let r = request(
        server.http_addr(),
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        Some(&body),
        &[
            ("Content-Type", &content_type),
            ("Sec-Fetch-Site", "same-origin"),
        ],
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(api.get_ok("/vhosts/shop")["description"], "the shop");
    assert_eq!(
        api.get_ok("/queues/shop/orders")["arguments"],
        json!({"x-max-length": 10})
    );
    assert_eq!(
        api.get_ok("/vhost-limits/shop"),
        json!([{"vhost": "shop", "value": {"max-queues": 7}}])
    );
    assert_eq!(
        api.get_ok("/users/clerk")["limits"],
        json!({"max-connections": 4})
    );
    assert_eq!(api.get_ok("/permissions/shop/clerk")["write"], json!(".*"));
    // Importing the per-vhost form into another vhost.
    assert_eq!(api.put("/vhosts/copy", &json!({})).status, 201);
    let r = api.post("/definitions/copy", &shop);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(api.get_ok("/queues/copy/orders")["name"], "orders");
    assert_eq!(
        api.get_ok("/vhost-limits/copy"),
        json!([{"vhost": "copy", "value": {"max-queues": 7}}])
    );
    let r = api.post("/definitions/nowhere", &shop);
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "not_found", "reason": "vhost_not_found"})
        )
    );
    // Failures: 400 with the reason, nothing imported.
    let r = request(
        server.http_addr(),
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        Some(b"{not json"),
        &[],
    );
    assert_eq!(
        (r.status, reason(&r)),
        (400, "failed_to_parse_json".to_string())
    );
    let r = api.post(
        "/definitions",
        &json!({"queues": [{"name": "q", "vhost": "nowhere", "durable": true}]}),
    );
    assert_eq!(r.status, 400);
    assert!(reason(&r).contains("nothing was imported"), "{}", r.text());
    let (body, content_type) = multipart(b"{}");
    let wrong = content_type.replace("boundary=", "boundary=other");
    let r = request(
        server.http_addr(),
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        Some(&body),
        &[("Content-Type", &wrong), ("Sec-Fetch-Site", "same-origin")],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // Administrators only.
    let manager = admin_as(&server, "manager", "management");
    assert_eq!(manager.get("/definitions").status, 401);
    assert_eq!(manager.post("/definitions", &json!({})).status, 401);
}

#[test]
fn a_huge_upload_is_refused_from_its_length_and_a_large_one_imports() {
    let server = TestServer::with_api();
    let addr = server.http_addr();
    // 5 GB announced: 413 at once, nothing read (the test sends no body at all).
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode("guest:guest");
    write!(
        s,
        "POST /api/definitions HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 5000000000\r\n\r\n"
    )
    .unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    // About 50 MB: 40,000 queues with long arguments, imported whole.
    const QUEUES: usize = 40_000;
    let filler = "x".repeat(1_200);
    let queues: Vec<Value> = (0..QUEUES)
        .map(|i| {
            json!({"name": format!("bulk-{i}"), "vhost": "/", "durable": false,
                        "auto_delete": false, "arguments": {"x-note": filler}})
        })
        .collect();
    let doc = serde_json::to_vec(&json!({"queues": queues})).unwrap();
    assert!(doc.len() > 48_000_000, "{}", doc.len());
    let r = request(
        addr,
        "POST",
        "/api/definitions",
        Some(("guest", "guest")),
        Some(&doc),
        &[],
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let page = server.api().get_ok("/queues?page=1&page_size=1");
    assert_eq!(page["total_count"], QUEUES);
}

#[test]
fn limits_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let http = ["--http-listen", "127.0.0.1:0"];
    let server = ServerProcess::start(&data, &http);
    let api = Api::guest(
        server.ready["http_listen"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    );
    assert_eq!(
        api.put("/vhosts/v", &json!({"description": "kept", "tags": "a"}))
            .status,
        201
    );
    assert_eq!(
        api.put("/vhost-limits/v/max-queues", &json!({"value": 0}))
            .status,
        204
    );
    assert_eq!(
        api.put("/users/u", &json!({"password": "pw", "tags": ""}))
            .status,
        201
    );
    assert_eq!(
        api.put("/user-limits/u/max-channels", &json!({"value": 2}))
            .status,
        204
    );
    assert!(server.terminate().success());
    let server = ServerProcess::start(&data, &http);
    let api = Api::guest(
        server.ready["http_listen"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    );
    assert_eq!(
        api.get_ok("/vhost-limits/v"),
        json!([{"vhost": "v", "value": {"max-queues": 0}}])
    );
    assert_eq!(api.get_ok("/users/u")["limits"], json!({"max-channels": 2}));
    let vh = api.get_ok("/vhosts/v");
    assert_eq!(
        (vh["description"].clone(), vh["tags"].clone()),
        (json!("kept"), json!(["a"]))
    );
    // Still enforced: max-queues 0 allows none.
    let amqp: SocketAddr = server.ready["amqp_listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut raw = amqp_raw::Raw::connect(amqp);
    raw.login("guest", "guest", "v").expect("opens");
    raw.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(
        raw.recv(),
        Some((1, AmqpMethod::ChannelOpenOk {}))
    ));
    match amqp_declare(&mut raw, 1, "q") {
        AmqpMethod::ChannelClose { reply_code, .. } => assert_eq!(reply_code, 406),
        other => panic!("expected channel.close 406, got {other:?}"),
    }
}
