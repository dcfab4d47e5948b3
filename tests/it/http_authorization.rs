//! The management API's authorisation table: each tag against each endpoint family, with
//! RabbitMQ 4.x's answers (each family's `is_authorized/2` in `rabbit_mgmt_wm_*`:
//! `is_authorized`, `_vhost`, `_monitor`, `_policies`, `_admin`).

use crate::common::http::Api;
use crate::common::TestServer;
use relaymq::auth::permission::PermissionDef;
use relaymq::broker::access::Credential;
use serde_json::json;

/// The tags tried, by user name.
const USERS: [(&str, &[&str]); 5] = [
    ("app", &[]),
    ("manager", &["management"]),
    ("maker", &["policymaker"]),
    ("watcher", &["monitoring"]),
    ("root", &["administrator"]),
];

/// (method, path, body, the status each user of [`USERS`] gets, in order).
type Row = (
    &'static str,
    &'static str,
    Option<serde_json::Value>,
    [u16; 5],
);

#[test]
fn each_tag_gets_rabbitmqs_answer_from_each_family() {
    let server = TestServer::with_api();
    let broker = server.handle.broker();
    broker.declare_vhost("shared").unwrap();
    broker.declare_vhost("private").unwrap();
    let all = || PermissionDef {
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
    };
    for (name, tags) in USERS {
        broker
            .add_user(
                name,
                &Credential::Password(format!("{name}-secret")),
                tags.iter().map(|t| t.to_string()).collect(),
            )
            .unwrap();
        broker.set_permission(name, "shared", all()).unwrap();
    }
    broker.set_permission("guest", "private", all()).unwrap();
    broker.set_permission("guest", "shared", all()).unwrap();
    let api = server.api();
    assert_eq!(api.put("/queues/shared/q", &json!({})).status, 201);
    assert_eq!(api.put("/queues/private/q", &json!({})).status, 201);
    let policy = json!({"pattern": "^x$", "definition": {"max-length": 1}});
    let rows: Vec<Row> = vec![
        // Any management user.
        ("GET", "/overview", None, [401, 200, 200, 200, 200]),
        ("GET", "/whoami", None, [401, 200, 200, 200, 200]),
        ("GET", "/vhosts", None, [401, 200, 200, 200, 200]),
        (
            "GET",
            "/health/checks/alarms",
            None,
            [401, 200, 200, 200, 200],
        ),
        ("GET", "/connections", None, [401, 200, 200, 200, 200]),
        // A vhost with permissions; one without is hidden (404) but from administrators
        // and, for reading, monitors.
        ("GET", "/queues/shared", None, [401, 200, 200, 200, 200]),
        ("GET", "/queues/private", None, [401, 404, 404, 404, 200]),
        ("GET", "/exchanges/shared", None, [401, 200, 200, 200, 200]),
        ("GET", "/policies/shared", None, [401, 200, 200, 200, 200]),
        // Monitors.
        ("GET", "/nodes", None, [401, 401, 401, 200, 200]),
        // Policymakers (with permissions in the vhost) and administrators.
        (
            "PUT",
            "/policies/shared/p",
            Some(policy.clone()),
            [401, 401, 201, 401, 204],
        ),
        (
            "DELETE",
            "/policies/shared/p",
            None,
            [401, 401, 204, 401, 404],
        ),
        // Administrators.
        ("GET", "/users", None, [401, 401, 401, 401, 200]),
        ("GET", "/permissions", None, [401, 401, 401, 401, 200]),
        ("GET", "/vhosts/shared", None, [401, 401, 401, 401, 200]),
        ("GET", "/definitions", None, [401, 401, 401, 401, 200]),
        (
            "PUT",
            "/vhosts/new",
            Some(json!({})),
            [401, 401, 401, 401, 201],
        ),
        ("DELETE", "/vhosts/new", None, [401, 401, 401, 401, 204]),
    ];
    for (method, path, body, expected) in rows {
        for ((name, _), want) in USERS.iter().zip(expected) {
            let user = Api::as_user(server.http_addr(), name, &format!("{name}-secret"));
            let r = match (method, &body) {
                ("GET", _) => user.get(path),
                ("PUT", Some(b)) => user.put(path, b),
                ("DELETE", _) => user.delete(path),
                _ => unreachable!("a row of this table"),
            };
            assert_eq!(r.status, want, "{method} {path} as {name}: {}", r.text());
            if want == 401 {
                assert!(
                    matches!(
                        r.json()["error"].as_str(),
                        Some("not_authorised" | "not_authorized")
                    ),
                    "{method} {path} as {name}: {}",
                    r.text()
                );
            }
        }
    }
}
