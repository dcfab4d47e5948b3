//! The management HTTP API (`--http-listen`, docs/http-api.md) against RabbitMQ's
//! recorded replies (`tests/fixtures/management/`, RabbitMQ 3.10.8) and its rules:
//! authentication and tags, the list conventions, queues, the node endpoints and the
//! health checks; and the HTTP server under bad input (malformed, oversized, slow and
//! idle clients) while AMQP traffic goes on.

use crate::common::golden::{assert_same_shape_with, fixture, Shape, USER_DATA};
use crate::common::http::{parse_reply, request, Api};
use crate::common::TestServer;
use relaymq::broker::access::Credential;
use relaymq::types::watermark::MemoryWatermark;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn add_user(server: &TestServer, name: &str, tags: &[&str]) {
    server
        .handle
        .broker()
        .add_user(
            name,
            &Credential::Password(format!("{name}-secret")),
            tags.iter().map(|t| t.to_string()).collect(),
        )
        .expect("user added");
}

fn as_user(server: &TestServer, name: &str) -> Api {
    Api::as_user(server.http_addr(), name, &format!("{name}-secret"))
}

#[test]
fn authentication_refusals_are_rabbitmqs() {
    let server = TestServer::with_api();
    let addr = server.http_addr();
    // No credentials: 401, the Basic challenge, no body (RabbitMQ's cowboy reply).
    let r = request(addr, "GET", "/api/overview", None, None, &[]);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        fixture("no-credentials")["headers"]["www-authenticate"].as_str()
    );
    assert!(r.body.is_empty(), "{}", r.text());
    // Wrong password: 401 not_authorized, and no challenge (RabbitMQ 4.x).
    let r = Api::as_user(addr, "guest", "wrong").get("/overview");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"error": "not_authorized", "reason": "Not_Authorized"})
    );
    assert_eq!(r.header("www-authenticate"), None);
    // A user without a management tag.
    add_user(&server, "app", &[]);
    let r = as_user(&server, "app").get("/overview");
    assert_eq!(
        (r.status, r.json()),
        (
            401,
            json!({"error": "not_authorised", "reason": "Not management user"})
        )
    );
    // A management user asking for an administrator's or a monitor's endpoint.
    add_user(&server, "manager", &["management"]);
    let manager = as_user(&server, "manager");
    let r = manager.get("/nodes");
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (401, json!("Not monitor user"))
    );
    assert_eq!(manager.get("/overview").status, 200);
    // The same credentials again are answered from the verified-password digest.
    assert_eq!(
        manager.get("/whoami").json(),
        json!({"name": "manager", "tags": ["management"]})
    );
}

#[test]
fn vhosts_a_user_may_not_use_are_hidden() {
    let server = TestServer::with_api();
    server.handle.broker().declare_vhost("orders").unwrap();
    add_user(&server, "manager", &["management"]);
    let manager = as_user(&server, "manager");
    // No permissions in `orders`: its queues are 404 not_found, as RabbitMQ hides them.
    let r = manager.get("/queues/orders");
    assert_eq!(
        (r.status, r.json()),
        (404, json!({"error": "not_found", "reason": "Not Found"}))
    );
    assert_eq!(manager.get_ok("/vhosts"), json!([]));
    // The administrator sees it; an unknown vhost is 404 Object Not Found.
    let admin = server.api();
    assert_eq!(admin.get_ok("/queues/orders"), json!([]));
    assert_eq!(
        admin.get("/queues/nowhere").json(),
        fixture("missing-vhost")["body"]
    );
}

#[test]
fn queues_are_declared_listed_and_deleted_with_rabbitmqs_codes() {
    let server = TestServer::with_api();
    let api = server.api();
    let r = api.put(
        "/queues/%2F/orders.new",
        &json!({"durable": true, "arguments": {"x-max-length": 1000}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    // Declaring it again the same way: 204; differently: 400 with the AMQP text.
    assert_eq!(
        api.put(
            "/queues/%2F/orders.new",
            &json!({"durable": true, "arguments": {"x-max-length": 1000}})
        )
        .status,
        204
    );
    let r = api.put("/queues/%2F/orders.new", &json!({"durable": false}));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "bad_request");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("inequivalent arg 'durable'"),
        "{}",
        r.text()
    );
    // rabbitmqadmin sends booleans as strings.
    assert_eq!(
        api.put(
            "/queues/%2F/strings",
            &json!({"durable": "false", "auto_delete": "false"})
        )
        .status,
        201
    );
    let mut q = api.get_ok("/queues/%2F/orders.new");
    // RabbitMQ's reply was recorded with a policy applied (`policy` a string); without
    // one both send null.
    assert_eq!(q["policy"], json!(null));
    q["policy"] = json!("ttl");
    let optional = ["idle_since", "message_stats", "head_message_timestamp"];
    let shape = Shape {
        opaque: USER_DATA,
        optional: &optional,
        empty_arrays_ok: true,
    };
    assert_same_shape_with("queue", &q, &shape);
    assert_eq!(
        (q["durable"].clone(), q["arguments"].clone()),
        (json!(true), json!({"x-max-length": 1000}))
    );
    let mut all = api.get_ok("/queues");
    for q in all.as_array_mut().unwrap() {
        q["policy"] = json!("ttl");
    }
    assert_same_shape_with("queues", &all, &shape);
    assert_eq!(all.as_array().unwrap().len(), 2);
    assert_eq!(
        api.get("/queues/%2F/no-such-queue").json(),
        fixture("missing-queue")["body"]
    );
    // Names over 255 bytes are refused as AMQP refuses them.
    let long = "q".repeat(256);
    assert_eq!(
        api.put(&format!("/queues/%2F/{long}"), &json!({})).status,
        400
    );
    // Delete: 204, then 404.
    assert_eq!(api.delete("/queues/%2F/orders.new").status, 204);
    assert_eq!(api.delete("/queues/%2F/orders.new").status, 404);
}

#[test]
fn lists_page_filter_sort_and_keep_columns() {
    let server = TestServer::with_api();
    let api = server.api();
    for i in 0..7 {
        assert_eq!(
            api.put(&format!("/queues/%2F/q{i}"), &json!({"durable": false}))
                .status,
            201
        );
    }
    let mut page = api.get_ok("/queues?page=2&page_size=3");
    for q in page["items"].as_array_mut().unwrap() {
        q["policy"] = json!("ttl");
    }
    let optional = ["message_stats", "idle_since"];
    assert_same_shape_with(
        "queues-paged",
        &page,
        &Shape {
            opaque: USER_DATA,
            optional: &optional,
            empty_arrays_ok: false,
        },
    );
    let page = api.get_ok("/queues?page=2&page_size=3&columns=name");
    assert_eq!(
        page["items"],
        json!([{"name": "q3"}, {"name": "q4"}, {"name": "q5"}])
    );
    assert_eq!(
        (page["total_count"].clone(), page["page_count"].clone()),
        (json!(7), json!(3))
    );
    let filtered = api.get_ok("/queues/%2F?page=1&name=Q[56]&use_regex=true&columns=name");
    assert_eq!(filtered["items"], json!([{"name": "q5"}, {"name": "q6"}]));
    let reversed = api.get_ok("/queues?sort=name&sort_reverse=true&columns=name");
    assert_eq!(reversed[0], json!({"name": "q6"}));
    let bad = api.get("/queues?page=0");
    assert_eq!(
        (bad.status, bad.json()),
        (400, fixture("queues-bad-page")["body"].clone())
    );
    assert_eq!(
        api.get("/queues?page=9&page_size=3").json()["error"],
        "page_out_of_range"
    );
}

#[test]
fn node_endpoints_carry_rabbitmqs_fields() {
    let server = TestServer::with_api();
    let api = server.api();
    let overview = api.get_ok("/overview");
    let shape = Shape {
        opaque: &[
            "listeners[].socket_opts",
            "contexts[].cowboy_opts",
            "sample_retention_policies",
        ],
        // Only counted when RabbitMQ's disk-based message store is in use.
        optional: &[
            "message_stats.disk_reads",
            "message_stats.disk_reads_details",
            "message_stats.disk_writes",
            "message_stats.disk_writes_details",
            "message_stats.publish",
            "message_stats.publish_details",
        ],
        empty_arrays_ok: false,
    };
    assert_same_shape_with("overview", &overview, &shape);
    assert_eq!(overview["product_name"], "RelayMQ");
    assert!(overview["rabbitmq_version"]
        .as_str()
        .unwrap()
        .starts_with("4."));
    let nodes = api.get_ok("/nodes");
    let node = nodes[0]["name"].as_str().unwrap().to_string();
    assert!(node.starts_with("rabbit@"), "{node}");
    assert_eq!(api.get_ok(&format!("/nodes/{node}"))["name"], node);
    assert_eq!(api.get("/nodes/rabbit@elsewhere").status, 404);
    assert_eq!(
        api.get_ok("/whoami"),
        json!({"name": "guest", "tags": ["administrator"]})
    );
    assert_eq!(api.get_ok("/cluster-name")["name"], node);
    assert_eq!(
        api.get_ok("/aliveness-test/%2F"),
        fixture("aliveness-test")["body"]
    );
    assert_eq!(api.get("/aliveness-test/nowhere").status, 404);
    let port = server.http_addr().port();
    assert_eq!(
        api.get_ok(&format!("/health/checks/port-listener/{port}"))["status"],
        "ok"
    );
    let missing = api.get("/health/checks/port-listener/1");
    assert_eq!(missing.status, 503);
    assert_eq!(
        missing.json()["reason"],
        fixture("health-port-listener-missing")["body"]["reason"]
    );
    assert_eq!(
        api.get_ok("/health/checks/protocol-listener/amqp091")["status"],
        "ok"
    );
    assert_eq!(api.get("/health/checks/protocol-listener/mqtt").status, 503);
    for check in [
        "virtual-hosts",
        "node-is-quorum-critical",
        "is-in-service",
        "ready-to-serve-clients",
        "below-node-connection-limit",
    ] {
        assert_eq!(
            api.get_ok(&format!("/health/checks/{check}")),
            json!({"status": "ok"}),
            "{check}"
        );
    }
    assert_eq!(api.get("/no-such-endpoint").status, 404);
    let refused = api.delete("/overview");
    assert_eq!(refused.status, 405);
    assert_eq!(refused.header("allow"), Some("GET, HEAD, OPTIONS"));
    let refused = api.post("/queues/%2F/q", &json!({}));
    assert_eq!(refused.status, 405);
    assert_eq!(
        refused.header("allow"),
        Some("GET, PUT, DELETE, HEAD, OPTIONS")
    );
}

#[test]
fn health_checks_fail_while_an_alarm_is_on() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(
        api.get_ok("/health/checks/alarms"),
        fixture("health-alarms")["body"]
    );
    let alarms = server.handle.broker().alarms();
    let before = alarms.config().memory_high_watermark;
    alarms
        .set_memory_high_watermark(MemoryWatermark::Relative(0.0))
        .unwrap();
    for check in ["alarms", "local-alarms"] {
        let r = api.get(&format!("/health/checks/{check}"));
        assert_eq!(r.status, 503, "{check}");
        assert_eq!(r.json()["status"], "failed");
        assert_eq!(r.json()["alarms"][0]["resource"], "memory");
    }
    alarms.set_memory_high_watermark(before).unwrap();
    assert_eq!(api.get("/health/checks/local-alarms").status, 200);
    let limit = alarms.config().disk_free_limit_bytes;
    alarms.set_disk_free_limit(u64::MAX);
    let r = api.get("/health/checks/alarms");
    assert_eq!(
        (r.status, r.json()["alarms"][0]["resource"].clone()),
        (503, json!("disk"))
    );
    alarms.set_disk_free_limit(limit);
    assert_eq!(api.get("/health/checks/alarms").status, 200);
}

/// Sends raw bytes on a new connection and reads the answer to the close (≤ 15 s).
fn raw(server: &TestServer, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(server.http_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn auth_header() -> String {
    use base64::Engine;
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode("guest:guest")
    )
}

#[test]
fn keep_alive_chunked_bodies_and_expect_continue_work() {
    let server = TestServer::with_api();
    let mut s = TcpStream::connect(server.http_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = auth_header();
    // Two requests pipelined on one connection, the first with a chunked body.
    let body = r#"{"durable":false}"#;
    let first = format!(
        "PUT /api/queues/%2F/chunked HTTP/1.1\r\nHost: x\r\n{auth}Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let second = format!(
        "GET /api/queues/%2F/chunked HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    );
    s.write_all(format!("{first}{second}").as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all).into_owned();
    let split = text
        .find("HTTP/1.1 200")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    let second = parse_reply(&all[split..]);
    assert_eq!(second.json()["name"], "chunked");
    // Expect: 100-continue: the interim answer comes before the body is sent.
    let mut s = TcpStream::connect(server.http_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!("PUT /api/queues/%2F/continued HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n", body.len()).as_bytes(),
    )
    .unwrap();
    let mut interim = [0u8; 25];
    s.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert_eq!(parse_reply(&rest).status, 201);
}

#[test]
fn bad_input_gets_its_4xx_and_amqp_goes_on() {
    let server = TestServer::with_api();
    let auth = auth_header();
    let status = |out: &[u8]| parse_reply(out).status;
    assert_eq!(status(&raw(&server, b"\x16\x03\x01garbage\r\n\r\n")), 400);
    // Bytes that cannot start a request (a TLS hello on the plain port) are answered at
    // once, not when the head deadline passes.
    let started = Instant::now();
    assert_eq!(
        status(&raw(&server, &[0x16, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3])),
        400
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // A method cowboy does not know is 501; OPTIONS names the path's methods; the
    // absolute form is served.
    let foo = format!("FOO /api/overview HTTP/1.1\r\n{auth}\r\n");
    assert_eq!(status(&raw(&server, foo.as_bytes())), 501);
    let options = parse_reply(&raw(
        &server,
        b"OPTIONS /api/overview HTTP/1.1\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(
        (options.status, options.header("allow")),
        (200, Some("GET, HEAD, OPTIONS"))
    );
    let absolute = format!(
        "GET http://localhost:15672/api/whoami HTTP/1.1\r\nConnection: close\r\n{auth}\r\n"
    );
    assert_eq!(status(&raw(&server, absolute.as_bytes())), 200);
    let huge_head = format!(
        "GET /api/overview HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    assert_eq!(status(&raw(&server, huge_head.as_bytes())), 431);
    // A request line over 8,000 bytes is 414 (cowboy's max_request_line_length), however
    // long; a bad percent-encoding in the path is 400.
    for len in [9_000, 30_000] {
        let long_uri = format!("GET /api/queues/%2F/{} HTTP/1.1\r\n\r\n", "q".repeat(len));
        assert_eq!(status(&raw(&server, long_uri.as_bytes())), 414, "{len}");
    }
    let bad_escape = format!("GET /api/queues/%2F/%ZZ HTTP/1.1\r\n{auth}\r\n");
    let reply = parse_reply(&raw(&server, bad_escape.as_bytes()));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.text().contains("malformed path"), "{}", reply.text());
    assert_eq!(
        status(&raw(
            &server,
            b"POST /api/queues HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"
        )),
        501
    );
    // A 5 GB body is refused from its Content-Length, before any of it is read.
    let big = format!(
        "PUT /api/queues/%2F/big HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 5000000000\r\n\r\n{{"
    );
    let out = raw(&server, big.as_bytes());
    assert_eq!(status(&out), 413, "{}", String::from_utf8_lossy(&out));
    // Malformed JSON, a body that is not an object, a wrong type.
    let api = server.api();
    for body in ["{", "[1]", r#"{"durable": 7}"#, r#"{"arguments": "x"}"#] {
        let r = request(
            server.http_addr(),
            "PUT",
            "/api/queues/%2F/bad",
            Some(("guest", "guest")),
            Some(body.as_bytes()),
            &[],
        );
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"], "bad_request");
    }
    assert_eq!(api.get("/queues/%2F/bad").status, 404);
    // A path that is not UTF-8 once decoded.
    assert_eq!(
        status(&raw(
            &server,
            format!("GET /api/queues/%FF HTTP/1.1\r\n{auth}\r\n").as_bytes()
        )),
        400
    );
    // The broker and its AMQP side are untouched.
    let conn = crate::common::connect(&server);
    let ch = conn.open_channel().expect("channel");
    crate::common::declare_queue(&ch, "still-works", false, &[]);
    assert_eq!(api.get_ok("/queues/%2F/still-works")["name"], "still-works");
}

#[test]
fn slow_and_idle_clients_are_cut_off_without_holding_others() {
    let server = TestServer::with_api();
    // A head that never completes (slow-loris); others are served meanwhile.
    let mut slow = TcpStream::connect(server.http_addr()).unwrap();
    slow.write_all(b"GET /api/overview HTTP/1.1\r\n").unwrap();
    // Many idle connections, more than the server keeps: the oldest are closed to make
    // room, and a new client is still served.
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(server.http_addr()).unwrap())
        .collect();
    let started = Instant::now();
    assert_eq!(server.api().get("/overview").status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let closed = idle
        .into_iter()
        .filter(|s| {
            let mut s = s.try_clone().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            matches!(s.read(&mut [0u8; 1]), Ok(0))
        })
        .count();
    assert!(closed > 0, "no idle connection was closed to make room");
    // The slow head is cut off within the head timeout (10 s).
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let t = Instant::now();
    let mut sink = Vec::new();
    let _ = slow.read_to_end(&mut sink);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}

#[test]
fn users_and_permissions_are_listed_for_administrators_only() {
    let server = TestServer::with_api();
    add_user(&server, "monitor", &["monitoring"]);
    let api = server.api();
    let users = api.get_ok("/users");
    assert_same_shape_with(
        "users",
        &users,
        &Shape {
            opaque: USER_DATA,
            optional: &[],
            empty_arrays_ok: false,
        },
    );
    let names: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["guest", "monitor"]);
    assert_eq!(api.get_ok("/users/monitor")["tags"], json!(["monitoring"]));
    assert_eq!(api.get("/users/nobody").status, 404);
    let without = api.get_ok("/users/without-permissions");
    assert_eq!(without.as_array().unwrap().len(), 1);
    assert_eq!(without[0]["name"], "monitor");
    assert_same_shape_with(
        "permissions",
        &api.get_ok("/permissions"),
        &Shape::default(),
    );
    let r = as_user(&server, "monitor").get("/users");
    assert_eq!(
        (r.status, r.json()),
        (401, fixture("not-administrator")["body"].clone())
    );
}

#[test]
fn policies_are_set_listed_and_cleared_by_policymakers() {
    let server = TestServer::with_api();
    let api = server.api();
    server.handle.broker().declare_vhost("orders").unwrap();
    // Declaring a queue needs permissions, administrator or not (as in RabbitMQ).
    let all = || relaymq::auth::permission::PermissionDef {
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
    };
    server
        .handle
        .broker()
        .set_permission("guest", "orders", all())
        .unwrap();
    let body = json!({"pattern": "^orders\\.", "definition": {"message-ttl": 60000}, "apply-to": "queues", "priority": 0});
    assert_eq!(api.put("/policies/orders/ttl", &body).status, 201);
    assert_eq!(api.put("/policies/orders/ttl", &body).status, 204);
    assert_same_shape_with(
        "policies",
        &api.get_ok("/policies"),
        &Shape {
            opaque: USER_DATA,
            optional: &[],
            empty_arrays_ok: false,
        },
    );
    assert_eq!(
        api.get_ok("/policies/orders/ttl")["definition"],
        json!({"message-ttl": 60000})
    );
    // Applied at once: a matching queue shows it.
    assert_eq!(api.put("/queues/orders/orders.a", &json!({})).status, 201);
    let q = api.get_ok("/queues/orders/orders.a");
    assert_eq!(
        (
            q["policy"].clone(),
            q["effective_policy_definition"].clone()
        ),
        (json!("ttl"), json!({"message-ttl": 60000}))
    );
    // rabbitmqadmin's form: the definition as JSON text, the priority as a string.
    let r = api.put(
        "/policies/orders/len",
        &json!({"pattern": ".*", "definition": "{\"max-length\": 5}", "priority": "1"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let bad = api.put(
        "/policies/orders/bad",
        &json!({"pattern": "(", "definition": {}}),
    );
    assert_eq!(bad.status, 400, "{}", bad.text());
    let r = api.put("/policies/nowhere/x", &body);
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "not_found", "reason": "vhost_not_found"})
        )
    );
    let r = api.put("/policies/orders/x", &json!({"apply-to": "queues"}));
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (
            400,
            json!("[{key_missing,pattern},{key_missing,definition}]")
        )
    );
    // A management user may not set policies; a policymaker with access may.
    add_user(&server, "manager", &["management"]);
    add_user(&server, "maker", &["policymaker"]);
    server
        .handle
        .broker()
        .set_permission("maker", "orders", all())
        .unwrap();
    let r = as_user(&server, "manager").put("/policies/orders/x", &body);
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (401, json!("User not authorised to access object"))
    );
    let r = as_user(&server, "maker").put("/policies/orders/x", &body);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        as_user(&server, "maker")
            .put("/policies/%2F/x", &body)
            .status,
        404
    );
    assert_eq!(api.delete("/policies/orders/ttl").status, 204);
    assert_eq!(api.get("/policies/orders/ttl").status, 404);
    assert_eq!(
        api.get_ok("/queues/orders/orders.a")["policy"],
        json!("len")
    );
}

/// Enqueues `n` empty messages into queue `name` of vhost `/`, as a publish would.
fn enqueue(server: &TestServer, name: &str, n: usize) {
    let vh = server.handle.broker().vhost("/").unwrap();
    let q = vh.queue(name).unwrap();
    // As a publish to the default exchange counts it there (the overview's `publish`).
    let default_exchange = vh.exchange("").unwrap();
    for _ in 0..n {
        default_exchange.counters.published(1);
        let msg = relaymq::broker::Message::new(
            "",
            name,
            relaymq::types::BasicProperties::default(),
            Vec::<u8>::new(),
        );
        q.enqueue(std::sync::Arc::new(msg));
    }
}

/// A time far enough ahead that the housekeeper's own samples (at the real time) fall
/// inside the interval and are skipped, in ms since the Unix epoch.
fn future_ms() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(now.as_millis()).unwrap() + 3_600_000
}

#[test]
fn rates_and_their_history_are_reported_as_rabbitmq_does() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(
        api.put("/queues/%2F/sampled", &json!({"durable": false}))
            .status,
        201
    );
    let broker = server.handle.broker();
    let t0 = future_ms();
    enqueue(&server, "sampled", 10);
    broker.rates().sample(broker, t0);
    enqueue(&server, "sampled", 10);
    broker.rates().sample(broker, t0 + 5_000);
    let q = api.get_ok(
        "/queues/%2F/sampled?msg_rates_age=60&msg_rates_incr=5&lengths_age=60&lengths_incr=5",
    );
    let publish = &q["message_stats"]["publish_details"];
    assert_eq!(
        (
            q["message_stats"]["publish"].clone(),
            publish["rate"].clone()
        ),
        (json!(20), json!(2.0))
    );
    assert_eq!(
        publish["samples"],
        json!([{"sample": 20, "timestamp": t0 + 5_000}, {"sample": 10, "timestamp": t0}])
    );
    assert_eq!(publish["avg_rate"], json!(2.0));
    assert_eq!(
        q["messages_ready_details"]["samples"][0],
        json!({"sample": 20, "timestamp": t0 + 5_000})
    );
    assert_eq!(q["messages_details"]["rate"], json!(2.0));
    // Without the age parameters: rates only.
    let plain = api.get_ok("/queues/%2F/sampled");
    assert_eq!(
        plain["message_stats"]["publish_details"],
        json!({"rate": 2.0})
    );
    for key in [
        "deliver",
        "deliver_no_ack",
        "get",
        "get_no_ack",
        "get_empty",
        "deliver_get",
        "redeliver",
        "ack",
    ] {
        assert!(plain["message_stats"][key].is_u64(), "{key}: {plain}");
        assert!(
            plain["message_stats"][format!("{key}_details")]["rate"].is_f64(),
            "{key}"
        );
    }
    let overview = api.get_ok("/overview?msg_rates_age=60&msg_rates_incr=5");
    assert_eq!(overview["message_stats"]["publish"], json!(20));
    assert_eq!(
        overview["message_stats"]["publish_details"]["rate"],
        json!(2.0)
    );
    assert_eq!(
        overview["message_stats"]["publish_details"]["samples"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(overview["queue_totals"]["messages_ready"], json!(20));
    // With collection off, nothing is sampled.
    let off = TestServer::start_with(|c| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        c.stats_collection = false;
    });
    assert_eq!(off.api().put("/queues/%2F/sampled", &json!({})).status, 201);
    let b = off.handle.broker();
    enqueue(&off, "sampled", 10);
    b.rates().sample(b, t0);
    enqueue(&off, "sampled", 10);
    b.rates().sample(b, t0 + 5_000);
    let q = off
        .api()
        .get_ok("/queues/%2F/sampled?msg_rates_age=60&msg_rates_incr=5");
    assert_eq!(q["message_stats"]["publish_details"], json!({"rate": 0.0}));
    assert_eq!(q["message_stats"]["publish"], json!(20));
}

/// `{"x": {"x": … N levels … 1}}`.
fn nested(levels: usize) -> serde_json::Value {
    (0..levels).fold(json!(1), |inner, _| json!({ "x": inner }))
}

/// Arguments and headers nested deeper than a field table may are refused, so nothing
/// is stored that the broker could not read back at its next start; as deep as allowed
/// is accepted, stored and read back after a kill -9.
#[test]
fn arguments_nested_too_deeply_are_refused_before_they_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = crate::common::ServerProcess::start(&data, &["--http-listen", "127.0.0.1:0"]);
    let http: std::net::SocketAddr = server.ready["http_listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let api = crate::common::http::Api::guest(http);
    // The arguments object is the outer table: N objects nest N - 1 levels below it.
    let deep = nested(relaymq::limits::FIELD_TABLE_DEPTH_MAX + 1);
    let fine = nested(relaymq::limits::FIELD_TABLE_DEPTH_MAX);
    let r = api.put(
        "/queues/%2F/deep",
        &json!({"durable": true, "arguments": deep}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("levels deep"), "{}", r.text());
    let r = api.put(
        "/exchanges/%2F/deep",
        &json!({"type": "direct", "durable": true, "arguments": deep}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        api.put(
            "/queues/%2F/fine",
            &json!({"durable": true, "arguments": fine})
        )
        .status,
        201
    );
    let r = api.post(
        "/bindings/%2F/e/amq.direct/q/fine",
        &json!({"routing_key": "k", "arguments": deep}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let publish = |headers: &serde_json::Value| {
        api.post(
            "/exchanges/%2F/amq.default/publish",
            &json!({"properties": {"delivery_mode": 2, "headers": headers}, "routing_key": "fine", "payload": "p", "payload_encoding": "string"}),
        )
    };
    assert_eq!(publish(&deep).status, 400);
    assert_eq!(publish(&fine).json(), json!({"routed": true}));
    let mut defs = api.get_ok("/definitions");
    defs["queues"].as_array_mut().unwrap().push(json!({"name": "imported", "vhost": "/", "durable": true, "auto_delete": false, "arguments": deep}));
    assert_eq!(api.post("/definitions", &defs).status, 400);
    server.kill9();
    let server = crate::common::ServerProcess::start(&data, &["--http-listen", "127.0.0.1:0"]);
    let http: std::net::SocketAddr = server.ready["http_listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let q = crate::common::http::Api::guest(http).get_ok("/queues/%2F/fine");
    assert_eq!(
        (q["arguments"].clone(), q["messages"].clone()),
        (fine, json!(1))
    );
    assert!(server.terminate().success());
}

/// Clients that drip a body they were refused (no credentials) do not hold the handler
/// threads, and a burst of more concurrent clients than the server has slots waits in
/// the backlog instead of being reset.
#[test]
fn refused_slow_bodies_and_bursts_do_not_block_other_clients() {
    let server = TestServer::with_api();
    let addr = server.http_addr();
    let dripping: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(
                b"PUT /api/queues/%2F/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    assert_eq!(server.api().get("/health/checks/alarms").status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(dripping);
    let workers: Vec<_> = (0..150)
        .map(|_| {
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| {
                        crate::common::http::request(
                            addr,
                            "GET",
                            "/api/overview",
                            Some(("guest", "guest")),
                            None,
                            &[],
                        )
                        .status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    for w in workers {
        assert!(w.join().expect("client thread").iter().all(|s| *s == 200));
    }
}

#[test]
fn columns_filter_single_objects_and_malformed_bodies_are_not_json() {
    let server = TestServer::with_api();
    let api = server.api();
    let o = api.get_ok("/overview?columns=rabbitmq_version,object_totals.queues");
    assert_eq!(o.as_object().unwrap().len(), 2, "{o}");
    assert!(
        o["object_totals"]["queues"].is_u64() && o["object_totals"].as_object().unwrap().len() == 1,
        "{o}"
    );
    assert_eq!(api.put("/queues/%2F/c", &json!({})).status, 201);
    assert_eq!(
        api.get_ok("/queues/%2F/c?columns=name"),
        json!({"name": "c"})
    );
    // A page keeps its shape; its items are filtered.
    let page = api.get_ok("/queues?page=1&columns=name");
    assert_eq!(
        (page["total_count"].clone(), page["items"].clone()),
        (json!(1), json!([{"name": "c"}]))
    );
    for body in ["{not json", "[1,2]"] {
        let r = request(
            server.http_addr(),
            "PUT",
            "/api/vhosts/v2",
            Some(("guest", "guest")),
            Some(body.as_bytes()),
            &[],
        );
        assert_eq!(
            (r.status, r.json()),
            (400, json!({"error": "bad_request", "reason": "not_json"})),
            "{body}"
        );
    }
    let node = api.get_ok("/nodes")[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(api.get(&format!("/healthchecks/node/{node}")).status, 200);
    assert_eq!(api.get("/healthchecks/node/rabbit@nope").status, 404);
}

/// A head with both `Content-Length` and `Transfer-Encoding` (a request-smuggling sign)
/// is answered, then its connection closed: what follows is not read as a request.
#[test]
fn a_length_and_an_encoding_together_close_the_connection() {
    let server = TestServer::with_api();
    let auth = auth_header();
    let body = r#"{"durable":false}"#;
    let both = format!(
        "PUT /api/queues/%2F/smuggled HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\nGET /api/overview HTTP/1.1\r\n{auth}\r\n",
        body.len()
    );
    let out = raw(&server, both.as_bytes());
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
}
