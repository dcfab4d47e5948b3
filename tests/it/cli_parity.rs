//! `relaymq-cli` can do what the management HTTP API can (the project's rule, as
//! `rabbitmqctl` can): vhost limits, user limits, runtime parameters, global parameters
//! with the cluster name, operator policies and dynamic shovels (with their status and
//! metrics) — set, list (text and `--json`), clear —
//! over the native protocol's channel-0 methods (docs/protocol.md §12). Each test drives the
//! real binary against a server with the API on, reads the change back through the API,
//! and checks that a refused user and a bad value get what the API's rule and text say.

use crate::common;

use common::http::{request, HttpReply};
use common::TestServer;
use relaymq::client::Connection;
use std::process::{Command, Output};

/// Runs `relaymq-cli` as `user` (password `pw`, or `guest` for guest).
fn cli_as(server: &TestServer, user: &str, args: &[&str]) -> Output {
    let password = if user == "guest" { "guest" } else { "pw" };
    Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args(["--addr", &server.addr_string(), "--user", user])
        .args(["--password", password])
        .args(args)
        .output()
        .expect("relaymq-cli runs")
}

/// Runs `relaymq-cli` as `guest` (an administrator).
fn cli(server: &TestServer, args: &[&str]) -> Output {
    cli_as(server, "guest", args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args` and requires exit 0.
fn ok(server: &TestServer, args: &[&str]) -> String {
    let out = cli(server, args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// Runs `args` with `--json` and parses the rows.
fn rows(server: &TestServer, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&ok(server, &all)).expect("--json prints JSON")
}

/// A user with `tags` and full permissions in `/`, password `pw`.
fn user(server: &TestServer, name: &str, tags: &[&str]) {
    let admin = Connection::connect(&server.addr_string()).unwrap();
    admin.add_user(name, "pw", tags).unwrap();
    admin.set_permissions(name, "/", ".*", ".*", ".*").unwrap();
    admin.close().unwrap();
}

/// Requires exit 1 (a refusal by the server) with `text` in the message.
fn refused(out: &Output, text: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert!(
        stderr(out).contains(text),
        "want {text:?} in {}",
        stderr(out)
    );
}

/// The `reason` of an API error answer (400 here).
fn api_reason(reply: &HttpReply) -> String {
    assert_eq!(reply.status, 400, "{}", reply.text());
    reply.json()["reason"].as_str().unwrap().to_string()
}

/// A raw `PUT /api{path}` as guest with `body` as given (JSON or not).
fn put_raw(server: &TestServer, path: &str, body: &str) -> HttpReply {
    request(
        server.http_addr(),
        "PUT",
        &format!("/api{path}"),
        Some(("guest", "guest")),
        Some(body.as_bytes()),
        &[("content-type", "application/json")],
    )
}

#[test]
fn vhost_limits_are_set_listed_and_cleared_from_the_cli() {
    let server = TestServer::with_api();
    ok(&server, &["vhost-limit", "set", "max-queues", "5"]);
    ok(&server, &["vhost-limit", "set", "max-connections", "-1"]);
    let api = server.api().get_ok("/vhost-limits/%2F");
    assert_eq!(api[0]["value"]["max-queues"], 5, "{api}");
    assert_eq!(api[0]["value"]["max-connections"], -1, "{api}");
    let text = ok(&server, &["vhost-limit", "list"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["vhost", "value"]
    );
    assert!(
        text.contains(r#"{"max-connections":-1,"max-queues":5}"#),
        "{text}"
    );
    let json = rows(&server, &["list", "vhost-limits"]);
    assert_eq!(json[0]["vhost"], "/", "{json}");
    assert_eq!(json[0]["value"]["max-queues"], 5, "{json}");
    assert_eq!(rows(&server, &["vhost-limit", "list"]), json);

    // A value that is not a number: the API's text for the same value.
    let out = cli(&server, &["vhost-limit", "set", "max-queues", "ten"]);
    let reason = api_reason(&server.api().put(
        "/vhost-limits/%2F/max-queues",
        &serde_json::json!({"value": "ten"}),
    ));
    assert_eq!(
        reason,
        "max-queues should be a number, actually was <<\"ten\">>"
    );
    refused(&out, &format!("PRECONDITION_FAILED (406): {reason}"));
    let out = cli(&server, &["vhost-limit", "set", "max-foo", "1"]);
    refused(&out, "Unrecognised terms [{<<\"max-foo\">>,1}] in limits");

    user(&server, "plain", &["management", "policymaker"]);
    let out = cli_as(&server, "plain", &["vhost-limit", "set", "max-queues", "1"]);
    refused(
        &out,
        "ACCESS_REFUSED (403): vhost-limit.set refused for user 'plain': needs the administrator tag",
    );
    let out = cli_as(&server, "plain", &["vhost-limit", "clear", "max-queues"]);
    refused(&out, "vhost-limit.clear refused for user 'plain'");

    ok(&server, &["vhost-limit", "clear", "max-queues"]);
    ok(&server, &["vhost-limit", "clear", "max-connections"]);
    assert_eq!(
        server.api().get_ok("/vhost-limits/%2F"),
        serde_json::json!([])
    );
    assert_eq!(
        rows(&server, &["vhost-limit", "list"]),
        serde_json::json!([])
    );
}

#[test]
fn user_limits_are_set_listed_and_cleared_from_the_cli() {
    let server = TestServer::with_api();
    user(&server, "app", &[]);
    ok(&server, &["user-limit", "set", "app", "max-channels", "3"]);
    ok(
        &server,
        &["user-limit", "set", "app", "max-connections", "2"],
    );
    let api = server.api().get_ok("/user-limits/app");
    assert_eq!(api[0]["value"]["max-channels"], 3, "{api}");
    // Enforced: a third channel of app is refused.
    let conn = relaymq::client::Connection::connect_with(relaymq::client::ConnectOptions {
        user: "app".into(),
        password: "pw".into(),
        ..relaymq::client::ConnectOptions::new(server.addr_string())
    })
    .unwrap();
    let _kept: Vec<_> = (0..3).map(|_| conn.open_channel().unwrap()).collect();
    assert!(conn.open_channel().is_err(), "max-channels 3 holds");

    let text = ok(&server, &["user-limit", "list"]);
    assert!(text.lines().next().unwrap().starts_with("user"), "{text}");
    assert!(
        text.contains("app") && text.contains(r#""max-channels":3"#),
        "{text}"
    );
    let json = rows(&server, &["list", "user-limits"]);
    assert_eq!(json[0]["user"], "app", "{json}");
    assert_eq!(json[0]["value"]["max-connections"], 2, "{json}");

    let out = cli(
        &server,
        &["user-limit", "set", "app", "max-channels", "lots"],
    );
    let reason = api_reason(&server.api().put(
        "/user-limits/app/max-channels",
        &serde_json::json!({"value": "lots"}),
    ));
    assert_eq!(
        reason,
        "max-channels should be a number, actually was <<\"lots\">>"
    );
    refused(&out, &reason);

    user(
        &server,
        "plain",
        &["management", "policymaker", "monitoring"],
    );
    let out = cli_as(
        &server,
        "plain",
        &["user-limit", "set", "app", "max-channels", "9"],
    );
    refused(
        &out,
        "user-limit.set refused for user 'plain': needs the administrator tag",
    );
    let out = cli_as(&server, "plain", &["user-limit", "list"]);
    refused(
        &out,
        "list refused for user 'plain': needs the administrator tag",
    );

    ok(&server, &["user-limit", "clear", "app", "max-channels"]);
    let api = server.api().get_ok("/user-limits/app");
    assert_eq!(
        api[0]["value"],
        serde_json::json!({"max-connections": 2}),
        "{api}"
    );
    ok(&server, &["user-limit", "clear", "app", "all"]);
    assert_eq!(server.api().get_ok("/user-limits"), serde_json::json!([]));
    assert_eq!(
        rows(&server, &["user-limit", "list"]),
        serde_json::json!([])
    );
    let out = cli(
        &server,
        &["user-limit", "set", "nobody", "max-channels", "1"],
    );
    refused(&out, "NOT_FOUND (404)");
}

#[test]
fn runtime_parameters_are_set_listed_and_cleared_from_the_cli() {
    let server = TestServer::with_api();
    ok(
        &server,
        &[
            "parameter",
            "set",
            "federation-upstream",
            "up1",
            r#"{"uri":"amqp://up"}"#,
        ],
    );
    let api = server
        .api()
        .get_ok("/parameters/federation-upstream/%2F/up1");
    assert_eq!(api["value"]["uri"], "amqp://up", "{api}");
    // The vhost-limits component is the vhost's limits, as through the API.
    ok(
        &server,
        &[
            "parameter",
            "set",
            "vhost-limits",
            "limits",
            r#"{"max-queues":7}"#,
        ],
    );
    let limits = server.api().get_ok("/vhost-limits/%2F");
    assert_eq!(limits[0]["value"]["max-queues"], 7, "{limits}");

    let text = ok(&server, &["parameter", "list"]);
    assert_eq!(
        text.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["vhost", "component", "name", "value"]
    );
    assert!(
        text.contains("federation-upstream") && text.contains("amqp://up"),
        "{text}"
    );
    let json = rows(&server, &["list", "parameters"]);
    let up = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "up1")
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(up["component"], "federation-upstream");
    assert_eq!(up["vhost"], "/");
    assert_eq!(up["value"]["uri"], "amqp://up");

    // A value that is not JSON, and an unknown component: the API's texts.
    let out = cli(
        &server,
        &["parameter", "set", "federation", "s1", "not json"],
    );
    let reason = api_reason(&put_raw(
        &server,
        "/parameters/federation/%2F/s1",
        r#"{"value": not json}"#,
    ));
    assert_eq!(reason, "not_json");
    refused(&out, "PRECONDITION_FAILED (406): not_json");
    let out = cli(&server, &["parameter", "set", "nope", "x", "1"]);
    let reason = api_reason(
        &server
            .api()
            .put("/parameters/nope/%2F/x", &serde_json::json!({"value": 1})),
    );
    refused(&out, &reason);

    // A management user is refused; a policymaker with permissions in the vhost may.
    user(&server, "plain", &["management"]);
    let out = cli_as(
        &server,
        "plain",
        &["parameter", "set", "federation", "s1", "{}"],
    );
    refused(
        &out,
        "parameter.set refused for user 'plain': needs the policymaker or administrator tag",
    );
    refused(
        &cli_as(&server, "plain", &["parameter", "list"]),
        "list refused for user 'plain'",
    );
    user(&server, "pm", &["policymaker"]);
    let out = cli_as(
        &server,
        "pm",
        &["parameter", "set", "federation", "s1", r#"{"a":1}"#],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    ok(
        &server,
        &["parameter", "clear", "federation-upstream", "up1"],
    );
    ok(&server, &["parameter", "clear", "federation", "s1"]);
    ok(&server, &["parameter", "clear", "vhost-limits", "limits"]);
    assert_eq!(server.api().get_ok("/parameters"), serde_json::json!([]));
    assert_eq!(rows(&server, &["parameter", "list"]), serde_json::json!([]));
    let out = cli(&server, &["parameter", "clear", "federation", "s1"]);
    refused(&out, "NOT_FOUND (404): Parameter does not exist");
}

#[test]
fn global_parameters_and_the_cluster_name_are_set_listed_and_cleared_from_the_cli() {
    let server = TestServer::with_api();
    ok(
        &server,
        &["global-parameter", "set", "my-setting", r#"{"a":1}"#],
    );
    let api = server.api().get_ok("/global-parameters/my-setting");
    assert_eq!(api["value"]["a"], 1, "{api}");
    ok(&server, &["set", "cluster-name", "east"]);
    assert_eq!(server.api().get_ok("/cluster-name")["name"], "east");

    let text = ok(&server, &["global-parameter", "list"]);
    assert_eq!(
        text.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["name", "value"]
    );
    assert!(
        text.contains("cluster_name") && text.contains("east"),
        "{text}"
    );
    let json = rows(&server, &["list", "global-parameters"]);
    assert_eq!(json[0]["name"], "cluster_name", "{json}");
    assert_eq!(json[0]["value"], "east", "{json}");
    assert_eq!(json[1]["value"]["a"], 1, "{json}");

    let out = cli(&server, &["global-parameter", "set", "x", "{oops"]);
    let reason = api_reason(&put_raw(
        &server,
        "/global-parameters/x",
        r#"{"value": {oops}"#,
    ));
    assert_eq!(reason, "not_json");
    refused(&out, "not_json");
    let out = cli(&server, &["set", "cluster-name", ""]);
    let reason = api_reason(
        &server
            .api()
            .put("/cluster-name", &serde_json::json!({"name": ""})),
    );
    assert_eq!(reason, "cluster_name must be a non-empty string");
    refused(&out, &reason);

    user(&server, "plain", &["management", "monitoring"]);
    let out = cli_as(&server, "plain", &["global-parameter", "set", "x", "1"]);
    refused(
        &out,
        "global-parameter.set refused for user 'plain': needs the policymaker or administrator tag",
    );
    refused(
        &cli_as(&server, "plain", &["set", "cluster-name", "west"]),
        "refused for user 'plain'",
    );
    refused(
        &cli_as(&server, "plain", &["global-parameter", "list"]),
        "list refused",
    );

    ok(&server, &["global-parameter", "clear", "my-setting"]);
    ok(&server, &["global-parameter", "clear", "cluster_name"]);
    assert_eq!(
        server.api().get_ok("/global-parameters"),
        serde_json::json!([])
    );
    assert_eq!(
        rows(&server, &["global-parameter", "list"]),
        serde_json::json!([])
    );
    let out = cli(&server, &["global-parameter", "clear", "my-setting"]);
    refused(&out, "NOT_FOUND (404): Parameter does not exist");
}

#[test]
fn operator_policies_are_set_listed_and_cleared_from_the_cli() {
    let server = TestServer::with_api();
    ok(
        &server,
        &[
            "operator-policy",
            "set",
            "cap",
            "^op\\.",
            r#"{"max-length":100}"#,
            "--priority",
            "3",
            "--apply-to",
            "queues",
        ],
    );
    let api = server.api().get_ok("/operator-policies/%2F");
    assert_eq!(api[0]["name"], "cap", "{api}");
    assert_eq!(api[0]["definition"]["max-length"], 100, "{api}");
    assert_eq!(api[0]["priority"], 3, "{api}");
    assert_eq!(api[0]["apply-to"], "queues", "{api}");
    // Not a user policy.
    assert_eq!(server.api().get_ok("/policies"), serde_json::json!([]));

    let text = ok(&server, &["operator-policy", "list"]);
    assert!(text.lines().next().unwrap().contains("apply-to"), "{text}");
    assert!(text.contains("cap") && text.contains("^op\\."), "{text}");
    let json = rows(&server, &["list", "operator-policies"]);
    assert_eq!(json[0]["vhost"], "/", "{json}");
    assert_eq!(json[0]["definition"]["max-length"], 100, "{json}");
    assert_eq!(json[0]["priority"], 3, "{json}");

    // A key operator policies do not take: the API's text.
    let def = r#"{"dead-letter-exchange":"dlx"}"#;
    let out = cli(&server, &["operator-policy", "set", "bad", ".*", def]);
    let reason = api_reason(&server.api().put(
        "/operator-policies/%2F/bad",
        &serde_json::json!({"pattern": ".*", "definition": {"dead-letter-exchange": "dlx"}}),
    ));
    // The protocol's reply text is an sstr: the first 255 bytes of the API's.
    assert!(reason.len() > 255, "{reason}");
    refused(&out, &reason[..255]);

    user(&server, "plain", &["management", "policymaker"]);
    let out = cli_as(
        &server,
        "plain",
        &["operator-policy", "set", "p", ".*", r#"{"max-length":1}"#],
    );
    refused(
        &out,
        "operator-policy.set refused for user 'plain': needs the administrator tag",
    );
    refused(
        &cli_as(&server, "plain", &["operator-policy", "clear", "cap"]),
        "operator-policy.clear refused for user 'plain': needs the administrator tag",
    );

    ok(&server, &["operator-policy", "clear", "cap"]);
    assert_eq!(
        server.api().get_ok("/operator-policies"),
        serde_json::json!([])
    );
    assert_eq!(
        rows(&server, &["operator-policy", "list"]),
        serde_json::json!([])
    );
    refused(
        &cli(&server, &["operator-policy", "clear", "cap"]),
        "NOT_FOUND (404)",
    );
}

/// `GET /metrics` of `server` (which must have the metrics listener on).
fn scrape(server: &TestServer) -> String {
    let addr = server.handle.metrics_addr().expect("metrics listener on");
    let reply = request(addr, "GET", "/metrics", None, None, &[]);
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.text()
}

/// The value of the sample `line_start` (name and labels as written) on the page.
fn sample(page: &str, line_start: &str) -> Option<String> {
    page.lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' '))
        .map(str::to_string)
}

#[test]
fn shovels_are_set_listed_measured_and_cleared_from_the_cli() {
    let server = TestServer::start_with(|c| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let def = r#"{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"b"}"#;
    ok(&server, &["shovel", "set", "s", def]);
    // A shovel of another vhost, for who sees what (`amqp://` is vhost `/` wherever the
    // shovel is, as RabbitMQ's `amqp_uri`: this one names its vhost).
    ok(&server, &["declare", "vhost", "other"]);
    let other = r#"{"src-uri":"amqp:///other","src-queue":"c","dest-uri":"amqp:///other","dest-queue":"d"}"#;
    ok(&server, &["shovel", "set", "t", other, "--vhost", "other"]);
    let api = server.api().get_ok("/parameters/shovel/%2F/s");
    assert_eq!(api["value"]["src-queue"], "a", "{api}");

    // Running: the shovel declared its queues (a local shovel needs no AMQP listener).
    let limit = std::time::Duration::from_secs(10);
    common::wait_until(limit, "shovel s running", || {
        let json = rows(&server, &["shovel", "list"]);
        json.as_array().is_some_and(|a| {
            a.iter()
                .any(|r| r["name"] == "s" && r["state"] == "running")
        })
    });
    const N: usize = 5;
    for i in 0..N {
        ok(&server, &["publish", "", "a", &format!("m{i}")]);
    }
    let json = common::eventually(limit, "shovel s forwarded every message", || {
        let json = rows(&server, &["shovel", "list"]);
        let s = json.as_array()?.iter().find(|r| r["name"] == "s")?.clone();
        (s["state"] == "running" && s["forwarded"] == N && s["pending"] == 0).then_some(json)
    });
    let s = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "s")
        .unwrap();
    assert_eq!(s["vhost"], "/", "{json}");
    assert_eq!(s["type"], "dynamic", "{json}");
    assert_eq!(s["src_queue"], "a", "{json}");
    assert_eq!(s["dest_queue"], "b", "{json}");
    assert_eq!(s["src_uri"], "amqp://", "{json}");
    assert_eq!(s["remaining"], "unlimited", "{json}");
    assert_eq!(s["src_queue_messages"], 0, "{json}");
    assert_eq!(
        json.as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].clone())
            .collect::<Vec<_>>(),
        ["s", "t"],
        "sorted by vhost and name: {json}"
    );
    // Every field as /api/shovels has it: the two lists are made by the same code.
    let api = server.api().get_ok("/shovels/%2F");
    assert_eq!(api[0], *s, "CLI row vs /api/shovels element");
    let queues = rows(&server, &["list", "queues"]);
    let b = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "b")
        .unwrap_or_else(|| panic!("{queues}"));
    assert_eq!(b["messages_ready"], N, "{queues}");

    let text = ok(&server, &["shovel", "list"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        [
            "vhost",
            "name",
            "state",
            "src_uri",
            "source",
            "dest_uri",
            "destination",
            "forwarded",
            "pending",
            "remaining",
            "reason"
        ],
        "{text}"
    );
    let line = lines.next().unwrap_or_default();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        [
            "/",
            "s",
            "running",
            "amqp://",
            "a",
            "amqp://",
            "b",
            "5",
            "0",
            "unlimited"
        ],
        "{text}"
    );
    assert_eq!(
        rows(&server, &["list", "shovels"]).as_array().map(Vec::len),
        Some(2)
    );
    // `--vhost` narrows the list to that vhost.
    let json = rows(&server, &["--vhost", "other", "shovel", "list"]);
    assert_eq!(json.as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json[0]["name"], "t", "{json}");

    let page = scrape(&server);
    let labels = r#"{vhost="/",shovel="s"}"#;
    for (name, want) in [
        ("relaymq_shovel_messages_forwarded_total", "5"),
        ("relaymq_shovel_messages_pending", "0"),
        ("relaymq_shovel_source_messages", "0"),
        ("relaymq_shovel_running", "1"),
        ("relaymq_shovel_blocked", "0"),
    ] {
        assert_eq!(
            sample(&page, &format!("{name}{labels}")).as_deref(),
            Some(want),
            "{name}: {page}"
        );
    }
    assert_eq!(
        sample(&page, "relaymq_shovels").as_deref(),
        Some("2"),
        "{page}"
    );
    assert!(
        page.contains(r#"relaymq_shovel_messages_forwarded_total{vhost="other",shovel="t"} 0"#),
        "{page}"
    );

    // Who sees what: as /api/shovels, a management user the vhosts it has permissions in
    // (here `/`), a monitoring user every vhost.
    user(&server, "plain", &["management"]);
    user(&server, "watcher", &["monitoring"]);
    let names = |who: &str| -> Vec<String> {
        let out = cli_as(&server, who, &["shovel", "list", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        json.as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("plain"), ["s"]);
    assert_eq!(names("watcher"), ["s", "t"]);
    refused(
        &cli_as(&server, "plain", &["shovel", "set", "u", def]),
        "parameter.set refused for user 'plain': needs the policymaker or administrator tag",
    );

    // An invalid definition: the API's validation text, nothing stored.
    let bad = r#"{"src-uri":"amqp://","dest-uri":"amqp://","dest-queue":"b"}"#;
    let out = cli(&server, &["shovel", "set", "bad", bad]);
    let reason = api_reason(&put_raw(
        &server,
        "/parameters/shovel/%2F/bad",
        &format!(r#"{{"value": {bad}}}"#),
    ));
    assert!(
        reason.contains("Validation failed")
            && reason.contains("Must specify 'src-exchange' or 'src-queue'"),
        "{reason}"
    );
    refused(&out, "PRECONDITION_FAILED (406): Validation failed");
    refused(&out, "Must specify 'src-exchange' or 'src-queue'");
    refused(
        &cli(&server, &["shovel", "set", "bad", "not json"]),
        "not_json",
    );
    assert_eq!(server.api().get("/parameters/shovel/%2F/bad").status, 404);

    ok(&server, &["shovel", "clear", "s"]);
    ok(&server, &["--vhost", "other", "shovel", "clear", "t"]);
    assert_eq!(rows(&server, &["shovel", "list"]), serde_json::json!([]));
    let text = ok(&server, &["shovel", "list"]);
    assert_eq!(text.lines().count(), 1, "only the header: {text}");
    assert_eq!(server.api().get_ok("/shovels"), serde_json::json!([]));
    let page = scrape(&server);
    assert_eq!(
        sample(&page, "relaymq_shovels").as_deref(),
        Some("0"),
        "{page}"
    );
    assert!(!page.contains(labels), "{page}");
    refused(
        &cli(&server, &["shovel", "clear", "s"]),
        "NOT_FOUND (404): Parameter does not exist",
    );
}
