//! Tools written for RabbitMQ's management API, unmodified, against RelayMQ's: Debian's
//! rabbitmqadmin (v1), pyrabbit2 and amqpstorm.management
//! (`tests/interop/management_clients.py`), and nagios-plugins-rabbitmq's checks.
//! `scripts/test.sh` installs them; a plain `cargo test` skips a test whose tool is
//! missing, saying so.

use crate::common::clients::{self, python_module_available};
use crate::common::TestServer;
use relaymq::broker::access::Credential;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `rabbitmqadmin ARGS…` against `port` as guest; its output, after checking it
/// succeeded.
fn admin(tool: &Path, port: u16, args: &[&str]) -> String {
    let port = port.to_string();
    let out = Command::new("python3")
        .arg(tool)
        .args(["-H", "127.0.0.1", "-P", &port, "-u", "guest", "-p", "guest"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "rabbitmqadmin {args:?}: {}\n{}",
        out.status,
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `list …` as raw JSON.
fn admin_list(tool: &Path, port: u16, what: &[&str]) -> serde_json::Value {
    let mut args = vec!["-f", "raw_json", "list"];
    args.extend_from_slice(what);
    let out = admin(tool, port, &args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("list {what:?}: {e}: {out}"))
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn rabbitmqadmin_manages_everything_it_lists() {
    let Some(tool) = clients::rabbitmqadmin() else {
        return;
    };
    let server = TestServer::with_api();
    let port = server.http_addr().port();
    let overview = admin(&tool, port, &["show", "overview"]);
    assert!(
        overview.contains("rabbitmq_version") && overview.contains("4.1.0"),
        "{overview}"
    );
    // Declarations of every kind, then each listed.
    admin(&tool, port, &["declare", "vhost", "name=admin-v"]);
    admin(
        &tool,
        port,
        &[
            "declare",
            "user",
            "name=ops",
            "password=ops-secret",
            "tags=monitoring",
        ],
    );
    admin(
        &tool,
        port,
        &[
            "declare",
            "permission",
            "vhost=admin-v",
            "user=ops",
            "configure=.*",
            "write=.*",
            "read=.*",
        ],
    );
    admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "declare",
            "exchange",
            "name=ev",
            "type=fanout",
            "durable=true",
        ],
    );
    admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "declare",
            "queue",
            "name=work",
            "durable=true",
        ],
    );
    admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "declare",
            "binding",
            "source=ev",
            "destination=work",
        ],
    );
    admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "declare",
            "policy",
            "name=cap",
            "pattern=^work$",
            "definition={\"max-length\":100}",
            "apply-to=queues",
        ],
    );
    assert!(names(&admin_list(&tool, port, &["vhosts"])).contains(&"admin-v".to_string()));
    assert!(names(&admin_list(&tool, port, &["users"])).contains(&"ops".to_string()));
    let perms = admin_list(&tool, port, &["permissions"]);
    assert!(
        perms
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["user"] == "ops" && p["vhost"] == "admin-v"),
        "{perms}"
    );
    assert!(
        names(&admin_list(&tool, port, &["-V", "admin-v", "exchanges"]))
            .contains(&"ev".to_string())
    );
    assert_eq!(
        names(&admin_list(&tool, port, &["-V", "admin-v", "queues"])),
        ["work"]
    );
    let bindings = admin_list(&tool, port, &["-V", "admin-v", "bindings"]);
    assert!(
        bindings
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["source"] == "ev" && b["destination"] == "work"),
        "{bindings}"
    );
    assert_eq!(
        names(&admin_list(&tool, port, &["-V", "admin-v", "policies"])),
        ["cap"]
    );
    assert_eq!(
        admin_list(&tool, port, &["nodes"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Publish and get.
    let published = admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "publish",
            "exchange=ev",
            "routing_key=any",
            "payload=hello",
        ],
    );
    assert!(published.contains("Message published"), "{published}");
    let got = admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "-f",
            "raw_json",
            "get",
            "queue=work",
            "ackmode=ack_requeue_false",
        ],
    );
    assert!(got.contains("\"payload\":\"hello\""), "{got}");
    // A connection shows up in its list.
    let conn = crate::common::connect(&server);
    let conns = admin_list(&tool, port, &["connections"]);
    assert_eq!(conns.as_array().unwrap().len(), 1, "{conns}");
    drop(conn);
    // Definitions out, everything deleted, definitions back in.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("defs.json");
    let file = file.to_str().unwrap();
    admin(&tool, port, &["export", file]);
    admin(
        &tool,
        port,
        &[
            "-V",
            "admin-v",
            "delete",
            "binding",
            "source=ev",
            "destination_type=queue",
            "destination=work",
            "properties_key=~",
        ],
    );
    admin(
        &tool,
        port,
        &["-V", "admin-v", "delete", "policy", "name=cap"],
    );
    admin(
        &tool,
        port,
        &["-V", "admin-v", "delete", "queue", "name=work"],
    );
    admin(
        &tool,
        port,
        &["-V", "admin-v", "delete", "exchange", "name=ev"],
    );
    admin(
        &tool,
        port,
        &["delete", "permission", "vhost=admin-v", "user=ops"],
    );
    admin(&tool, port, &["delete", "user", "name=ops"]);
    admin(&tool, port, &["delete", "vhost", "name=admin-v"]);
    assert!(!names(&admin_list(&tool, port, &["vhosts"])).contains(&"admin-v".to_string()));
    admin(&tool, port, &["import", file]);
    assert_eq!(
        names(&admin_list(&tool, port, &["-V", "admin-v", "queues"])),
        ["work"]
    );
    assert_eq!(
        names(&admin_list(&tool, port, &["-V", "admin-v", "policies"])),
        ["cap"]
    );
    assert!(names(&admin_list(&tool, port, &["users"])).contains(&"ops".to_string()));
}

fn python_client(client: &str) {
    let server = TestServer::with_api();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/management_clients.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(server.http_addr().port().to_string())
        .arg(client)
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{client}: {}\n{}",
        out.status,
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("all ok"),
        "{}",
        text(&out)
    );
}

#[test]
fn pyrabbit2_lists_creates_publishes_gets_and_deletes() {
    if python_module_available("pyrabbit2", "pyrabbit2.api") {
        python_client("pyrabbit2");
    }
}

#[test]
fn amqpstorm_management_lists_creates_publishes_gets_and_deletes() {
    if python_module_available("amqpstorm", "amqpstorm.management") {
        python_client("amqpstorm");
    }
}

/// Runs a nagios check against `port`: (exit code, output).
fn nagios(dir: &Path, check: &str, port: u16, args: &[&str]) -> (i32, String) {
    let port = port.to_string();
    let out = Command::new(dir.join(check))
        .args([
            "-H",
            "127.0.0.1",
            "--port",
            &port,
            "-u",
            "guest",
            "-p",
            "guest",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the check runs");
    (out.status.code().unwrap_or(-1), text(&out))
}

#[test]
fn nagios_checks_report_ok_then_critical() {
    let Some(dir) = clients::nagios_plugins_dir() else {
        return;
    };
    let server = TestServer::with_api();
    let port = server.http_addr().port();
    let api = server.api();
    assert_eq!(
        api.put("/queues/%2F/watched", &serde_json::json!({"durable": true}))
            .status,
        201
    );
    let _conn = crate::common::connect(&server);
    let node = api.get_ok("/nodes")[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let host = node.trim_start_matches("rabbit@").to_string();
    for (check, args) in [
        ("check_rabbitmq_aliveness", vec![]),
        ("check_rabbitmq_overview", vec![]),
        ("check_rabbitmq_queue", vec!["--queue", "watched"]),
        ("check_rabbitmq_connections", vec![]),
        ("check_rabbitmq_server", vec!["-n", host.as_str()]),
    ] {
        let (code, out) = nagios(&dir, check, port, &args);
        assert_eq!(code, 0, "{check}: {out}");
        assert!(out.contains("OK"), "{check}: {out}");
    }
    // Thresholds are read from RelayMQ's numbers: 3 messages over a critical of 2.
    let q = server
        .handle
        .broker()
        .vhost("/")
        .unwrap()
        .queue("watched")
        .unwrap();
    for _ in 0..3 {
        let msg = relaymq::broker::Message::new(
            "",
            "watched",
            relaymq::types::BasicProperties::default(),
            Vec::<u8>::new(),
        );
        q.enqueue(std::sync::Arc::new(msg));
    }
    let (code, out) = nagios(
        &dir,
        "check_rabbitmq_queue",
        port,
        &["--queue", "watched", "-w", "1,1,1,1", "-c", "2,2,2,2"],
    );
    assert_eq!(code, 2, "{out}");
    // Wrong credentials: the check says so instead of OK.
    server
        .handle
        .broker()
        .add_user("nobody", &Credential::Password("x".into()), vec![])
        .unwrap();
    let out = Command::new(dir.join("check_rabbitmq_aliveness"))
        .args([
            "-H",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "-u",
            "nobody",
            "-p",
            "x",
        ])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
}
