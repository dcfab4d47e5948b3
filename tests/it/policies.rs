//! Policies (issue 8 part 6), as RabbitMQ 3.10 applies them: a queue's effective settings
//! are its arguments merged with the one highest-priority matching policy, changed at run
//! time for queues that already exist; stored in `meta.db` (schema version 3); managed
//! with `policy.set` / `policy.clear` / `list policies` by `policymaker`s and
//! administrators, and from the shell with `relaymq-cli policy`.

use crate::common;

use common::{ServerProcess, TestServer};
use relaymq::client::{Channel, ClientError, ConnectOptions, Connection, QueueDeclareOptions};
use relaymq::storage::meta::{MetaStore, QueueDef};
use relaymq::storage::meta_users::{PermissionRow, UserDef};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::time::{Duration, Instant};

/// How long a test waits for the housekeeper to act before it gives up (a bound, not a
/// timing assertion).
const WAIT: Duration = Duration::from_secs(10);

fn count(ch: &Channel, name: &str) -> u32 {
    ch.queue_declare(
        name,
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
    )
    .expect("passive declare")
    .message_count
}

fn publish(ch: &Channel, queue: &str, bodies: impl IntoIterator<Item = String>, persistent: bool) {
    let props = BasicProperties {
        delivery_mode: persistent.then_some(2),
        ..BasicProperties::default()
    };
    for b in bodies {
        ch.basic_publish("", queue, false, &props, b.as_bytes())
            .unwrap();
    }
}

fn numbers(range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range.map(|i| i.to_string()).collect()
}

fn drain(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).unwrap() {
        out.push(String::from_utf8(m.body).unwrap());
        assert!(out.len() < 1000);
    }
    out
}

fn set(conn: &Connection, name: &str, pattern: &str, definition: &str) {
    conn.set_policy("/", name, pattern, definition, 0, "all")
        .unwrap_or_else(|e| panic!("set policy {name}: {e:?}"));
}

fn code(e: &ClientError) -> u16 {
    e.reply_code()
        .unwrap_or_else(|| panic!("no reply code in {e:?}"))
}

/// The `list queues` row of `queue`.
fn queue_row(conn: &Connection, queue: &str) -> FieldTable {
    conn.list(relaymq::client::ListKind::Queues)
        .unwrap()
        .into_iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some(queue))
        .expect("queue listed")
}

fn policy_of(conn: &Connection, queue: &str) -> Option<String> {
    queue_row(conn, queue)
        .get("policy")
        .and_then(FieldValue::as_str)
        .map(str::to_string)
}

fn x_death_reason(m: &relaymq::client::GetMessage) -> String {
    let headers = m.properties.headers.as_ref().expect("headers");
    headers
        .get("x-last-death-reason")
        .and_then(FieldValue::as_str)
        .expect("x-last-death-reason")
        .to_string()
}

#[test]
fn a_message_ttl_policy_expires_messages_published_after_it() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "ttl.jobs", false, &[]);
    publish(&ch, "ttl.jobs", ["before".to_string()], false);
    set(&conn, "ttl", "^ttl\\.", r#"{"message-ttl": 100}"#);
    publish(&ch, "ttl.jobs", numbers(1..=3), false);
    // The three new messages expire; the one queued before the policy keeps no TTL, as
    // in RabbitMQ (a message's expiry is fixed when it is queued).
    common::wait_until(WAIT, "condition", || count(&ch, "ttl.jobs") == 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(drain(&ch, "ttl.jobs"), ["before"]);
    assert_eq!(policy_of(&conn, "ttl.jobs").as_deref(), Some("ttl"));
}

#[test]
fn a_max_length_policy_trims_an_existing_drop_head_queue_at_once() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "backlog", false, &[]);
    publish(&ch, "backlog", numbers(1..=5), false);
    set(&conn, "cap", "^backlog$", r#"{"max-length": 2}"#);
    // Applied when the policy is set, before any new publish.
    assert_eq!(count(&ch, "backlog"), 2);
    publish(&ch, "backlog", numbers(6..=6), false);
    assert_eq!(drain(&ch, "backlog"), ["5", "6"]);
}

#[test]
fn a_max_length_policy_on_a_reject_publish_queue_keeps_what_is_queued_and_refuses_more() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(
        &ch,
        "strict",
        false,
        &[("x-overflow", FieldValue::string("reject-publish"))],
    );
    publish(&ch, "strict", numbers(1..=5), false);
    set(&conn, "cap", "^strict$", r#"{"max-length": 2}"#);
    // RabbitMQ 3.10 does the same: nothing is dropped, new publishes are refused.
    assert_eq!(count(&ch, "strict"), 5);
    ch.confirm_select().unwrap();
    publish(&ch, "strict", numbers(6..=6), false);
    assert!(
        !ch.wait_for_confirms(WAIT).unwrap(),
        "publish over the limit is nacked"
    );
    assert_eq!(drain(&ch, "strict"), numbers(1..=5));
}

#[test]
fn a_dead_letter_policy_dead_letters_rejections_and_trimmed_messages() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "work", false, &[]);
    common::declare_queue(&ch, "dead", false, &[]);
    publish(&ch, "work", numbers(1..=3), false);
    set(
        &conn,
        "dlx",
        "^work$",
        r#"{"dead-letter-exchange": "", "dead-letter-routing-key": "dead"}"#,
    );
    let m = ch.basic_get("work", false).unwrap().unwrap();
    ch.basic_reject(m.delivery_tag, false).unwrap();
    let dead = ch.basic_get("dead", true).unwrap().expect("dead-lettered");
    assert_eq!(dead.body, b"1");
    assert_eq!(x_death_reason(&dead), "rejected");
    // Replacing the policy with one that also limits the length dead-letters what it
    // trims, reason maxlen.
    set(
        &conn,
        "dlx",
        "^work$",
        r#"{"dead-letter-exchange": "", "dead-letter-routing-key": "dead", "max-length": 1}"#,
    );
    let dead = ch.basic_get("dead", true).unwrap().expect("trimmed one");
    assert_eq!(dead.body, b"2");
    assert_eq!(x_death_reason(&dead), "maxlen");
    assert_eq!(drain(&ch, "work"), ["3"]);
}

#[test]
fn a_delivery_limit_policy_dead_letters_a_message_returned_too_often() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "poison", false, &[]);
    common::declare_queue(&ch, "parked", false, &[]);
    set(
        &conn,
        "limit",
        "^poison$",
        r#"{"delivery-limit": 1, "dead-letter-exchange": "", "dead-letter-routing-key": "parked"}"#,
    );
    publish(&ch, "poison", ["bad".to_string()], false);
    for _ in 0..2 {
        let m = ch.basic_get("poison", false).unwrap().expect("delivered");
        ch.basic_nack(m.delivery_tag, false, true).unwrap();
    }
    assert_eq!(count(&ch, "poison"), 0);
    let parked = ch
        .basic_get("parked", true)
        .unwrap()
        .expect("dead-lettered");
    assert_eq!(x_death_reason(&parked), "delivery_limit");
}

#[test]
fn numeric_limits_take_the_smaller_and_other_keys_the_argument() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(
        &ch,
        "p.arg5",
        false,
        &[("x-max-length", FieldValue::I64(5))],
    );
    common::declare_queue(
        &ch,
        "p.arg1",
        false,
        &[("x-max-length", FieldValue::I64(1))],
    );
    common::declare_queue(
        &ch,
        "p.reject",
        false,
        &[("x-overflow", FieldValue::string("reject-publish"))],
    );
    common::declare_queue(&ch, "p.dl-arg", false, &[]);
    common::declare_queue(&ch, "p.dl-pol", false, &[]);
    common::declare_queue(
        &ch,
        "p.dlx",
        false,
        &[
            ("x-dead-letter-exchange", FieldValue::string("")),
            ("x-dead-letter-routing-key", FieldValue::string("p.dl-arg")),
            ("x-message-ttl", FieldValue::I64(60_000)),
        ],
    );
    set(
        &conn,
        "p",
        "^p\\.",
        r#"{"max-length": 2, "overflow": "drop-head", "message-ttl": 50,
            "dead-letter-exchange": "", "dead-letter-routing-key": "p.dl-pol"}"#,
    );
    for q in ["p.arg5", "p.arg1", "p.reject"] {
        publish(&ch, q, numbers(1..=4), false);
    }
    // max-length: min(argument, policy).
    assert_eq!(drain(&ch, "p.arg5"), ["3", "4"]);
    assert_eq!(drain(&ch, "p.arg1"), ["4"]);
    // overflow: the argument wins (reject-publish keeps the oldest).
    assert_eq!(drain(&ch, "p.reject"), ["1", "2"]);
    // message-ttl: min (50 ms, not 60 s); dead-letter routing key: the argument wins.
    publish(&ch, "p.dlx", ["soon".to_string()], false);
    common::wait_until(WAIT, "condition", || count(&ch, "p.dl-arg") == 1);
    assert_eq!(count(&ch, "p.dl-pol"), 0);
    let row = queue_row(&conn, "p.dlx");
    let FieldValue::Table(effective) = row.get("effective_policy_definition").unwrap() else {
        panic!("{row:?}")
    };
    assert_eq!(effective.get("max-length"), Some(&FieldValue::I64(2)));
}

#[test]
fn the_highest_priority_wins_and_clearing_restores_the_arguments() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "orders", false, &[]);
    conn.set_policy("/", "low", "^ord", r#"{"max-length": 1}"#, 0, "queues")
        .unwrap();
    conn.set_policy("/", "high", "^orders$", r#"{"max-length": 3}"#, 5, "all")
        .unwrap();
    publish(&ch, "orders", numbers(1..=5), false);
    assert_eq!(count(&ch, "orders"), 3);
    assert_eq!(policy_of(&conn, "orders").as_deref(), Some("high"));
    conn.clear_policy("/", "high").unwrap();
    assert_eq!(policy_of(&conn, "orders").as_deref(), Some("low"));
    assert_eq!(
        count(&ch, "orders"),
        1,
        "the remaining policy trims at once"
    );
    conn.clear_policy("/", "low").unwrap();
    assert_eq!(policy_of(&conn, "orders"), None);
    publish(&ch, "orders", numbers(6..=9), false);
    assert_eq!(count(&ch, "orders"), 5, "no limit without a policy");
    let e = conn.clear_policy("/", "low").unwrap_err();
    assert_eq!(code(&e), 404, "{e:?}");
}

#[test]
fn a_policy_for_exchanges_does_not_touch_queues_and_lookarounds_work() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "jobs", false, &[]);
    common::declare_queue(&ch, "tmp.jobs", false, &[]);
    conn.set_policy("/", "ex", ".*", r#"{"max-length": 1}"#, 9, "exchanges")
        .unwrap();
    publish(&ch, "jobs", numbers(1..=3), false);
    assert_eq!(count(&ch, "jobs"), 3);
    assert_eq!(policy_of(&conn, "jobs"), None);
    // A negative lookahead: every queue except the tmp. ones.
    conn.set_policy(
        "/",
        "not-tmp",
        "^(?!tmp\\.)",
        r#"{"max-length": 2}"#,
        0,
        "queues",
    )
    .unwrap();
    publish(&ch, "tmp.jobs", numbers(1..=3), false);
    assert_eq!(count(&ch, "jobs"), 2);
    assert_eq!(count(&ch, "tmp.jobs"), 3);
    assert_eq!(policy_of(&conn, "jobs").as_deref(), Some("not-tmp"));
    assert_eq!(policy_of(&conn, "tmp.jobs"), None);
}

#[test]
fn bad_keys_values_and_patterns_are_refused_with_406_naming_them() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    for (pattern, definition, apply_to, named) in [
        ("^a", r#"{"max-length": -1}"#, "all", "'max-length'"),
        ("^a", r#"{"message-ttl": "10"}"#, "all", "'message-ttl'"),
        ("^a", r#"{"overflow": "drop-tail"}"#, "all", "'overflow'"),
        ("^a", r#"{"max-priority": 10}"#, "all", "'max-priority'"),
        ("^a", r#"{"no-such-key": 1}"#, "all", "'no-such-key'"),
        ("^a", r#"[1, 2]"#, "all", "not a JSON object"),
        ("(", r#"{"max-length": 1}"#, "all", "'('"),
        ("^a", r#"{"max-length": 1}"#, "bogus", "'bogus'"),
    ] {
        let e = conn
            .set_policy("/", "bad", pattern, definition, 0, apply_to)
            .unwrap_err();
        assert_eq!(code(&e), 406, "{definition}: {e:?}");
        assert!(e.to_string().contains(named), "{definition}: {e}");
    }
    let e = conn
        .set_policy("nope", "p", ".*", r#"{"max-length": 1}"#, 0, "all")
        .unwrap_err();
    assert_eq!(code(&e), 404, "{e:?}");
    // Keys RabbitMQ knows but RelayMQ does not act on are kept (a RabbitMQ definitions
    // file imports), listed and exported as written.
    conn.set_policy(
        "/",
        "ha",
        ".*",
        r#"{"ha-mode": "all", "max-length": 7}"#,
        1,
        "queues",
    )
    .unwrap();
    let rows = conn.list_policies().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let FieldValue::Table(def) = rows[0].get("definition").unwrap() else {
        panic!("{rows:?}")
    };
    assert_eq!(def.get("ha-mode").and_then(FieldValue::as_str), Some("all"));
    assert_eq!(
        rows[0].get("apply-to").and_then(FieldValue::as_str),
        Some("queues")
    );
    assert_eq!(rows[0].get("priority"), Some(&FieldValue::I64(1)));
}

#[test]
fn only_policymakers_and_administrators_may_manage_policies() {
    let server = TestServer::start();
    let admin = Connection::connect(&server.addr_string()).unwrap();
    for (user, tags) in [
        ("bob", vec![]),
        ("pm", vec!["policymaker"]),
        ("pm2", vec!["policymaker"]),
    ] {
        admin.add_user(user, "pw", &tags).unwrap();
    }
    admin.set_permissions("bob", "/", ".*", ".*", ".*").unwrap();
    admin.set_permissions("pm", "/", "", "", "").unwrap();
    let connect = |user: &str| {
        Connection::connect_with(ConnectOptions {
            user: user.into(),
            password: "pw".into(),
            ..ConnectOptions::new(server.addr_string())
        })
        .unwrap()
    };
    let bob = connect("bob");
    let e = bob
        .set_policy("/", "p", ".*", r#"{"max-length": 1}"#, 0, "all")
        .unwrap_err();
    assert_eq!(code(&e), 403, "{e:?}");
    assert!(e.to_string().contains("policymaker"), "{e}");
    assert_eq!(code(&bob.list_policies().unwrap_err()), 403);
    let pm = connect("pm");
    pm.set_policy("/", "p", ".*", r#"{"max-length": 1}"#, 0, "all")
        .unwrap();
    assert_eq!(pm.list_policies().unwrap().len(), 1);
    pm.clear_policy("/", "p").unwrap();
    // A policymaker without permissions in the vhost is refused there.
    admin.declare_vhost("other").unwrap();
    let e = pm
        .set_policy("other", "p", ".*", r#"{"max-length": 1}"#, 0, "all")
        .unwrap_err();
    assert_eq!(code(&e), 403, "{e:?}");
}

#[test]
fn policies_survive_a_restart_and_apply_to_recovered_queues() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    {
        let conn = Connection::connect(&server.addr_string()).unwrap();
        let ch = conn.open_channel().unwrap();
        common::declare_queue(&ch, "kept", true, &[]);
        conn.set_policy(
            "/",
            "cap",
            "^kept$",
            r#"{"max-length": 2, "ha-mode": "all"}"#,
            3,
            "queues",
        )
        .unwrap();
        conn.set_policy("/", "gone", "^kept$", r#"{"max-length": 1}"#, 9, "queues")
            .unwrap();
        conn.clear_policy("/", "gone").unwrap();
        conn.close().unwrap();
    }
    assert!(server.terminate().success());
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let rows = conn.list_policies().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0].get("name").and_then(FieldValue::as_str),
        Some("cap")
    );
    assert_eq!(rows[0].get("priority"), Some(&FieldValue::I64(3)));
    assert_eq!(policy_of(&conn, "kept").as_deref(), Some("cap"));
    let ch = conn.open_channel().unwrap();
    publish(&ch, "kept", numbers(1..=4), true);
    assert_eq!(drain(&ch, "kept"), ["3", "4"]);
    conn.close().unwrap();
    assert!(server.terminate().success());
}

#[test]
fn a_schema_2_meta_db_migrates_to_3_keeping_users_and_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("meta.db");
    {
        let store = MetaStore::open(&path).unwrap();
        store.put_vhost("/").unwrap();
        store
            .put_queue(&QueueDef {
                vhost: "/".into(),
                name: "orders".into(),
                id: relaymq::storage::meta::new_queue_id(),
                auto_delete: false,
                arguments: FieldTable::new(),
                paused: false,
            })
            .unwrap();
        store
            .put_user(&UserDef {
                name: "alice".into(),
                hash_algorithm: "argon2id".into(),
                password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
                tags: vec!["administrator".into()],
            })
            .unwrap();
        store
            .put_permission(&PermissionRow {
                user: "alice".into(),
                vhost: "/".into(),
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            })
            .unwrap();
    }
    // Make it a version 2 file: what an older relaymq-server wrote.
    {
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(
            "DROP TABLE runtime_parameters; DROP TABLE global_parameters;
             DROP TABLE operator_policies;
             DROP TABLE vhost_limits; DROP TABLE user_limits; DROP TABLE vhost_metadata;
             DROP TABLE policies; ALTER TABLE queues DROP COLUMN paused;
             UPDATE schema_version SET version = 2;",
        )
        .unwrap();
    }
    let store = MetaStore::open(&path).unwrap();
    let defs = store.load().unwrap();
    assert_eq!(defs.queues.len(), 1);
    assert_eq!(defs.queues[0].name, "orders");
    assert!(defs.policies.is_empty());
    let access = store.load_access().unwrap();
    assert_eq!(access.users.len(), 1);
    assert_eq!(access.users[0].name, "alice");
    assert_eq!(access.permissions.len(), 1);
    store
        .put_policy(&relaymq::storage::meta_policies::PolicyRow {
            vhost: "/".into(),
            name: "p".into(),
            pattern: ".*".into(),
            apply_to: "all".into(),
            priority: 0,
            definition: r#"{"max-length":1}"#.into(),
        })
        .unwrap();
    drop(store);
    let version: u32 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .unwrap();
    // Through version 3 to the current one.
    assert_eq!(version, relaymq::storage::meta::SCHEMA_VERSION);
    assert_eq!(
        MetaStore::open(&path)
            .unwrap()
            .load()
            .unwrap()
            .policies
            .len(),
        1
    );
}

/// Runs `relaymq-cli` against `addr`.
fn cli(addr: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .arg("--addr")
        .arg(addr)
        .args(args)
        .output()
        .expect("relaymq-cli runs")
}

#[test]
fn the_cli_sets_lists_and_clears_policies_like_rabbitmqctl() {
    let server = TestServer::start();
    let addr = server.addr_string();
    let out = cli(
        &addr,
        &[
            "policy",
            "set",
            "cap",
            "^cli\\.",
            r#"{"max-length":2,"queue-mode":"lazy"}"#,
            "--priority",
            "4",
            "--apply-to",
            "queues",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(warning.contains("queue-mode"), "{warning}");
    let out = cli(&addr, &["policy", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.lines().next().unwrap().contains("apply-to"), "{text}");
    assert!(
        text.contains("cap") && text.contains("^cli\\.") && text.contains("queues"),
        "{text}"
    );
    let out = cli(&addr, &["policy", "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["definition"]["max-length"], 2, "{rows}");
    assert_eq!(rows[0]["priority"], 4, "{rows}");
    let out = cli(
        &addr,
        &["policy", "set", "bad", ".*", r#"{"max-length":-3}"#],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("max-length"));
    let out = cli(&addr, &["policy", "set", "bad", ".*", "not json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(cli(&addr, &["policy", "clear", "cap"]).status.success());
    let out = cli(&addr, &["policy", "list", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn an_expires_policy_deletes_an_unused_queue() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    common::declare_queue(&ch, "short.lived", false, &[]);
    common::declare_queue(&ch, "long.lived", false, &[]);
    set(&conn, "expiry", "^short\\.", r#"{"expires": 100}"#);
    common::wait_until(WAIT, "condition", || {
        conn.list(relaymq::client::ListKind::Queues)
            .unwrap()
            .iter()
            .all(|r| r.get("name").and_then(FieldValue::as_str) != Some("short.lived"))
    });
    assert_eq!(count(&ch, "long.lived"), 0, "the other queue stays");
}

#[test]
fn deleting_a_vhost_deletes_its_policies() {
    let server = TestServer::start();
    let admin = Connection::connect(&server.addr_string()).unwrap();
    admin.declare_vhost("tenant").unwrap();
    admin
        .set_policy("tenant", "cap", ".*", r#"{"max-length": 1}"#, 0, "all")
        .unwrap();
    admin.delete_vhost("tenant").unwrap();
    admin.declare_vhost("tenant").unwrap();
    let conn = Connection::connect_with(ConnectOptions {
        vhost: "tenant".into(),
        ..ConnectOptions::new(server.addr_string())
    })
    .unwrap();
    assert!(conn.list_policies().unwrap().is_empty());
}

/// Re-evaluation cost: setting and clearing a policy over 10,000 queues of a vhost, each
/// holding a message. Printed, not asserted.
#[test]
fn setting_a_policy_over_10000_queues_is_measured() {
    const QUEUES: u32 = 10_000;
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    for i in 0..QUEUES {
        let name = format!("many.{i}");
        common::declare_queue(&ch, &name, false, &[]);
        publish(&ch, &name, ["m".to_string()], false);
    }
    let start = Instant::now();
    set(
        &conn,
        "many",
        "^many\\.",
        r#"{"max-length": 0, "message-ttl": 1000}"#,
    );
    let set_took = start.elapsed();
    assert_eq!(count(&ch, "many.0"), 0, "max-length 0 empties each queue");
    let start = Instant::now();
    conn.clear_policy("/", "many").unwrap();
    let clear_took = start.elapsed();
    println!(
        "policy over {QUEUES} queues: set (trimming each) {:.1} ms, clear {:.1} ms",
        set_took.as_secs_f64() * 1e3,
        clear_took.as_secs_f64() * 1e3
    );
}
