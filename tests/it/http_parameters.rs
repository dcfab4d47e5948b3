//! The management HTTP API's runtime parameters, global parameters, cluster name and
//! operator policies (docs/http-api.md §3): RabbitMQ 4.x's paths, codes and error bodies,
//! authorisation by tag, the `vhost-limits` component reading and writing the vhost's
//! limits, operator policies enforced on queues (the lower limit wins), persistence across
//! a restart of the real binary, a definitions export → import round trip, and
//! rabbitmqadmin v1's `list`/`declare`/`delete` of parameters and operator policies.

use crate::common::clients;
use crate::common::http::Api;
use crate::common::{ServerProcess, TestServer};
use serde_json::{json, Value};
use std::process::{Command, Stdio};

fn user(server: &TestServer, name: &str, tags: &str, vhost_access: Option<&str>) -> Api {
    let api = server.api();
    let r = api.put(
        &format!("/users/{name}"),
        &json!({"password": format!("{name}-pw"), "tags": tags}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    if let Some(v) = vhost_access {
        let r = api.put(
            &format!("/permissions/{}/{name}", v.replace('/', "%2F")),
            &json!({"configure": ".*", "write": ".*", "read": ".*"}),
        );
        assert!(r.status == 201 || r.status == 204, "{}", r.text());
    }
    Api::as_user(server.http_addr(), name, &format!("{name}-pw"))
}

fn reason(r: &crate::common::http::HttpReply) -> String {
    r.json()["reason"].as_str().unwrap_or_default().to_string()
}

const UPSTREAM: &str = "/parameters/federation-upstream/%2F/up1";

#[test]
fn runtime_parameters_are_put_listed_read_and_deleted() {
    let server = TestServer::with_api();
    let api = server.api();
    let value = json!({"uri": "amqp://remote", "expires": 3600000});
    // RabbitMQ also accepts the key fields in the body; the path decides.
    let r = api.put(
        UPSTREAM,
        &json!({"component": "federation-upstream", "vhost": "/", "name": "up1", "value": value}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(api.put(UPSTREAM, &json!({"value": value})).status, 204);
    let row = json!({"vhost": "/", "component": "federation-upstream", "name": "up1",
                     "value": value});
    assert_eq!(api.get_ok(UPSTREAM), row);
    assert_eq!(api.get_ok("/parameters"), json!([row]));
    assert_eq!(api.get_ok("/parameters/federation-upstream"), json!([row]));
    assert_eq!(
        api.get_ok("/parameters/federation-upstream/%2F"),
        json!([row])
    );
    assert_eq!(api.get_ok("/parameters/shovel"), json!([]));
    let page = api.get_ok("/parameters?page=1&page_size=10");
    assert_eq!(page["total_count"], 1);

    // 4xx: unknown component, the policy component, no value, bad JSON, missing vhost.
    let r = api.put("/parameters/nope/%2F/x", &json!({"value": 1}));
    assert_eq!(r.status, 400);
    assert!(
        reason(&r).contains("component nope not found"),
        "{}",
        r.text()
    );
    let r = api.put("/parameters/policy/%2F/x", &json!({"value": {}}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "policies may not be set using this method".to_string())
    );
    let r = api.put(UPSTREAM, &json!({"uri": "amqp://x"}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "[{key_missing,value}]".into())
    );
    let r = api.put("/parameters/federation/nowhere/s", &json!({"value": {}}));
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": "not_found", "reason": "vhost_not_found"})
        )
    );
    let big = "x".repeat(relaymq::broker::parameters::PARAMETER_VALUE_BYTES_MAX);
    let r = api.put("/parameters/federation/%2F/big", &json!({"value": big}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(api.get("/parameters/federation/%2F/missing").status, 404);
    assert_eq!(api.get("/parameters/federation/nowhere").status, 404);
    assert_eq!(api.post("/parameters", &json!({})).status, 405);

    assert_eq!(api.delete(UPSTREAM).status, 204);
    assert_eq!(api.delete(UPSTREAM).status, 404);
    assert_eq!(api.get_ok("/parameters"), json!([]));
}

#[test]
fn vhost_limits_are_the_same_both_ways() {
    let server = TestServer::with_api();
    let api = server.api();
    let path = "/parameters/vhost-limits/%2F/limits";
    let r = api.put(
        path,
        &json!({"value": {"max-queues": 4, "max-connections": 10}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        api.get_ok("/vhost-limits/%2F"),
        json!([{"vhost": "/", "value": {"max-queues": 4, "max-connections": 10}}])
    );
    assert_eq!(
        api.put("/vhost-limits/%2F/max-queues", &json!({"value": 2}))
            .status,
        204
    );
    assert_eq!(
        api.get_ok(path),
        json!({"vhost": "/", "component": "vhost-limits", "name": "limits",
               "value": {"max-queues": 2, "max-connections": 10}})
    );
    let r = api.put(path, &json!({"value": {"max-foo": 1}}));
    assert_eq!(r.status, 400);
    assert!(reason(&r).contains("max-foo"), "{}", r.text());
    let r = api.put("/parameters/vhost-limits/%2F/other", &json!({"value": {}}));
    assert_eq!(r.status, 400);
    assert_eq!(api.delete(path).status, 204);
    assert_eq!(api.get_ok("/vhost-limits/%2F"), json!([]));
    assert_eq!(api.delete(path).status, 404);
}

#[test]
fn parameters_need_policymaker_with_access_to_the_vhost() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/vhosts/other", &json!({})).status, 201);
    assert_eq!(
        api.put(
            "/parameters/federation/other/s",
            &json!({"value": {"a": 1}})
        )
        .status,
        201
    );
    assert_eq!(
        api.put("/parameters/federation/%2F/t", &json!({"value": {"a": 2}}))
            .status,
        201
    );
    let pm = user(&server, "pm", "policymaker", Some("/"));
    let mon = user(&server, "mon", "monitoring", Some("/"));
    let mgmt = user(&server, "mgmt", "management", Some("/"));
    // A policymaker sees and changes its vhosts only.
    let rows = pm.get_ok("/parameters");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    assert_eq!(rows[0]["vhost"], "/");
    assert_eq!(
        pm.put("/parameters/federation/%2F/t", &json!({"value": {"a": 3}}))
            .status,
        204
    );
    assert_eq!(
        pm.put("/parameters/federation/other/s", &json!({"value": {}}))
            .status,
        404
    );
    assert_eq!(pm.get("/parameters/federation/other/s").status, 404);
    // Monitoring and management users are refused, reads included.
    for who in [&mon, &mgmt] {
        let r = who.get("/parameters");
        assert_eq!(
            (r.status, reason(&r)),
            (401, "User not authorised to access object".to_string())
        );
        assert_eq!(who.delete("/parameters/federation/%2F/t").status, 401);
        assert_eq!(who.get("/global-parameters").status, 401);
        assert_eq!(
            who.put("/global-parameters/g", &json!({"value": 1})).status,
            401
        );
    }
    assert_eq!(
        pm.put("/global-parameters/g", &json!({"value": 1})).status,
        201
    );
    assert_eq!(
        pm.get_ok("/global-parameters/g"),
        json!({"name": "g", "value": 1})
    );
}

#[test]
fn global_parameters_and_the_cluster_name() {
    let server = TestServer::with_api();
    let api = server.api();
    let node = api.get_ok("/overview")["node"].clone();
    assert_eq!(api.get_ok("/cluster-name"), json!({"name": node}));
    assert_eq!(api.get_ok("/global-parameters"), json!([]));
    assert_eq!(
        api.put("/cluster-name", &json!({"name": "east"})).status,
        204
    );
    assert_eq!(api.get_ok("/cluster-name"), json!({"name": "east"}));
    assert_eq!(api.get_ok("/overview")["cluster_name"], "east");
    assert_eq!(
        api.get_ok("/global-parameters/cluster_name"),
        json!({"name": "cluster_name", "value": "east"})
    );
    let defs = api.get_ok("/definitions");
    assert_eq!(defs["original_cluster_name"], "east");
    assert_eq!(
        defs["global_parameters"],
        json!([{"name": "cluster_name", "value": "east"}])
    );
    let r = api.put("/cluster-name", &json!({}));
    assert_eq!((r.status, reason(&r)), (400, "[{key_missing,name}]".into()));
    assert_eq!(api.put("/cluster-name", &json!({"name": 5})).status, 400);
    let mgmt = user(&server, "m", "management", None);
    assert_eq!(mgmt.get_ok("/cluster-name"), json!({"name": "east"}));
    let r = mgmt.put("/cluster-name", &json!({"name": "x"}));
    assert_eq!(
        (r.status, reason(&r)),
        (401, "Not administrator user".into())
    );
    let pm = user(&server, "p", "policymaker", None);
    assert_eq!(pm.put("/cluster-name", &json!({"name": "x"})).status, 401);

    let r = api.put(
        "/global-parameters/mqtt-port-to-vhost-mapping",
        &json!({"value": {"1883": "/"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        api.put(
            "/global-parameters/mqtt-port-to-vhost-mapping",
            &json!({"value": {"1884": "/"}})
        )
        .status,
        204
    );
    assert_eq!(
        api.get_ok("/global-parameters").as_array().map(Vec::len),
        Some(2)
    );
    let r = api.put("/global-parameters/x", &json!({}));
    assert_eq!(
        (r.status, reason(&r)),
        (400, "[{key_missing,value}]".into())
    );
    assert_eq!(api.get("/global-parameters/missing").status, 404);
    assert_eq!(api.delete("/global-parameters/cluster_name").status, 204);
    assert_eq!(api.delete("/global-parameters/cluster_name").status, 404);
    assert_eq!(api.get_ok("/overview")["cluster_name"], node);
}

#[test]
fn operator_policies_are_managed_by_administrators_and_enforced() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(
        api.put("/queues/%2F/jobs", &json!({"durable": true}))
            .status,
        201
    );
    assert_eq!(
        api.put(
            "/policies/%2F/user",
            &json!({"pattern": "^jobs$", "definition": {"max-length": 10, "message-ttl": 100},
                    "apply-to": "queues"})
        )
        .status,
        201
    );
    let path = "/operator-policies/%2F/cap";
    let body = json!({"pattern": "^jobs", "definition": {"max-length": 3, "message-ttl": 5000},
                      "priority": 1, "apply-to": "queues"});
    let r = api.put(path, &body);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(api.put(path, &body).status, 204);
    let row = json!({"vhost": "/", "name": "cap", "pattern": "^jobs", "apply-to": "queues",
                     "definition": {"max-length": 3, "message-ttl": 5000}, "priority": 1});
    assert_eq!(api.get_ok(path), row);
    assert_eq!(api.get_ok("/operator-policies"), json!([row]));
    assert_eq!(api.get_ok("/operator-policies/%2F"), json!([row]));
    // The queue row shows both and the merge: the lower of each numeric key.
    let q = api.get_ok("/queues/%2F/jobs");
    assert_eq!(q["policy"], "user");
    assert_eq!(q["operator_policy"], "cap");
    assert_eq!(
        q["effective_policy_definition"],
        json!({"max-length": 3, "message-ttl": 100})
    );
    // Enforced: the fourth message drops the oldest.
    for i in 0..4 {
        let r = api.post(
            "/exchanges/%2F/amq.default/publish",
            &json!({"properties": {}, "routing_key": "jobs", "payload": format!("m{i}"),
                    "payload_encoding": "string"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let got = api.post(
        "/queues/%2F/jobs/get",
        &json!({"count": 10, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    );
    let got = got.json();
    assert_eq!(got.as_array().map(Vec::len), Some(3), "{got}");
    assert_eq!(got[0]["payload"], "m1");

    // 4xx: a key outside the operator set, missing fields, a missing vhost or policy.
    let r = api.put(
        "/operator-policies/%2F/bad",
        &json!({"pattern": ".*", "definition": {"dead-letter-exchange": "x"}}),
    );
    assert_eq!(r.status, 400);
    assert!(
        reason(&r).contains("'dead-letter-exchange'"),
        "{}",
        r.text()
    );
    let r = api.put(
        "/operator-policies/%2F/bad",
        &json!({"definition": {"max-length": 1}}),
    );
    assert_eq!(
        (r.status, reason(&r)),
        (400, "[{key_missing,pattern}]".into())
    );
    let r = api.put(
        "/operator-policies/nowhere/p",
        &json!({"pattern": ".*", "definition": {"max-length": 1}}),
    );
    assert_eq!(r.status, 404);
    assert_eq!(api.get("/operator-policies/%2F/missing").status, 404);
    assert_eq!(api.get("/operator-policies/nowhere").status, 404);

    // Tags: any management user lists (its vhosts); only administrators read or change one.
    let pm = user(&server, "pm", "policymaker", Some("/"));
    let mgmt = user(&server, "mg", "management", None);
    assert_eq!(pm.get_ok("/operator-policies"), json!([row]));
    assert_eq!(mgmt.get_ok("/operator-policies"), json!([]));
    for who in [&pm, &mgmt] {
        assert_eq!(who.get(path).status, 401);
        assert_eq!(who.put(path, &body).status, 401);
        assert_eq!(who.delete(path).status, 401);
    }
    // It is a runtime parameter too.
    assert_eq!(
        api.get_ok("/parameters/operator_policy/%2F/cap")["value"]["definition"],
        json!({"max-length": 3, "message-ttl": 5000})
    );

    assert_eq!(api.delete(path).status, 204);
    assert_eq!(api.delete(path).status, 404);
    let q = api.get_ok("/queues/%2F/jobs");
    assert_eq!(q["operator_policy"], Value::Null);
    assert_eq!(
        q["effective_policy_definition"],
        json!({"max-length": 10, "message-ttl": 100})
    );
}

#[test]
fn definitions_round_trip_parameters_and_operator_policies() {
    let server = TestServer::with_api();
    let api = server.api();
    assert_eq!(api.put("/vhosts/v", &json!({})).status, 201);
    assert_eq!(
        api.put(
            "/parameters/federation/v/s",
            &json!({"value": {"src-uri": "amqp://"}})
        )
        .status,
        201
    );
    assert_eq!(
        api.put(
            "/operator-policies/v/op",
            &json!({"pattern": ".*", "definition": {"expires": 60000}})
        )
        .status,
        201
    );
    assert_eq!(
        api.put("/cluster-name", &json!({"name": "west"})).status,
        204
    );
    let defs = api.get_ok("/definitions");
    let params = defs["parameters"].as_array().cloned().unwrap_or_default();
    assert_eq!(params.len(), 2, "{params:?}");
    assert!(params.contains(
        &json!({"vhost": "v", "component": "operator_policy", "name": "op",
        "value": {"pattern": ".*", "definition": {"expires": 60000}, "priority": 0,
                  "apply-to": "all"}})
    ));
    let vhost_defs = api.get_ok("/definitions/v");
    assert_eq!(vhost_defs["parameters"].as_array().map(Vec::len), Some(2));

    let other = TestServer::with_api();
    let other_api = other.api();
    let r = other_api.post("/definitions", &defs);
    assert_eq!(r.status, 204, "{}", r.text());
    let back = other_api.get_ok("/definitions");
    assert_eq!(back["parameters"], defs["parameters"]);
    assert_eq!(back["global_parameters"], defs["global_parameters"]);
    assert_eq!(other_api.get_ok("/cluster-name"), json!({"name": "west"}));
    assert_eq!(
        other_api
            .get_ok("/operator-policies/v")
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn parameters_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let http = ["--http-listen", "127.0.0.1:0"];
    let start = || {
        let server = ServerProcess::start(&data, &http);
        let addr = server.ready["http_listen"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        (server, Api::guest(addr))
    };
    let (server, api) = start();
    assert_eq!(
        api.put(UPSTREAM, &json!({"value": {"uri": "amqp://r"}}))
            .status,
        201
    );
    assert_eq!(
        api.put(
            "/operator-policies/%2F/cap",
            &json!({"pattern": "^q", "definition": {"max-length": 1}, "apply-to": "queues"})
        )
        .status,
        201
    );
    assert_eq!(
        api.put("/cluster-name", &json!({"name": "kept"})).status,
        204
    );
    assert_eq!(
        api.put("/global-parameters/g", &json!({"value": [1, 2]}))
            .status,
        201
    );
    assert_eq!(
        api.put("/queues/%2F/q1", &json!({"durable": true})).status,
        201
    );
    assert!(server.terminate().success());
    let (_server, api) = start();
    assert_eq!(api.get_ok(UPSTREAM)["value"], json!({"uri": "amqp://r"}));
    assert_eq!(
        api.get_ok("/operator-policies/%2F/cap")["definition"],
        json!({"max-length": 1})
    );
    assert_eq!(api.get_ok("/overview")["cluster_name"], "kept");
    assert_eq!(api.get_ok("/global-parameters/g")["value"], json!([1, 2]));
    assert_eq!(api.get_ok("/queues/%2F/q1")["operator_policy"], "cap");
}

#[test]
fn rabbitmqadmin_lists_declares_and_deletes_parameters_and_operator_policies() {
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
    admin(&[
        "declare",
        "parameter",
        "component=federation-upstream",
        "name=up",
        r#"value={"uri": "amqp://remote"}"#,
    ]);
    admin(&[
        "declare",
        "operator_policy",
        "name=cap",
        "pattern=^jobs",
        r#"definition={"max-length": 5}"#,
        "priority=2",
        "apply-to=queues",
    ]);
    let params: Value =
        serde_json::from_str(&admin(&["-f", "raw_json", "list", "parameters"])).unwrap();
    assert!(
        params.as_array().is_some_and(|a| a
            .iter()
            .any(|p| p["name"] == "up" && p["value"] == json!({"uri": "amqp://remote"}))),
        "{params}"
    );
    let ops: Value =
        serde_json::from_str(&admin(&["-f", "raw_json", "list", "operator_policies"])).unwrap();
    assert_eq!(ops[0]["name"], "cap");
    assert_eq!(ops[0]["priority"], 2);
    assert_eq!(ops[0]["definition"], json!({"max-length": 5}));
    admin(&[
        "delete",
        "parameter",
        "component=federation-upstream",
        "name=up",
    ]);
    admin(&["delete", "operator_policy", "name=cap"]);
    let api = server.api();
    assert_eq!(api.get_ok("/operator-policies"), json!([]));
    assert_eq!(api.get_ok("/parameters"), json!([]));
}
