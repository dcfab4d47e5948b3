//! Quorum queues, single active consumer and consumer priorities: the pika scenarios
//! (`tests/interop/quorum_queues.py`, `single_active_consumer.py`), and what needs a
//! restart or the HTTP API: a quorum queue keeps a transient message and its failed
//! deliveries across a kill -9, lists as `type: quorum` with its single active consumer,
//! and a vhost's `default_queue_type` makes durable declarations quorum queues.

use crate::common;

use common::clients::{self, run_bounded_for};
use common::{ServerProcess, TestServer};
use relaymq::client::{
    Channel, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent, GetMessage,
    QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Longest a pika scenario may run before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(90);

fn pika_scenario(name: &str) {
    common::pika_scenario("quorum_queues", name, CHILD_TIMEOUT);
}

#[test]
fn pika_quorum_queues_as_rabbitmq_4() {
    pika_scenario("quorum_queues");
}

#[test]
fn pika_single_active_consumer_and_consumer_priorities() {
    pika_scenario("single_active_consumer");
}

/// Celery 5.7 with `task_default_queue_type = "quorum"` runs a task, a countdown and a
/// retry with a countdown through RelayMQ, with its native delayed delivery (quorum
/// queues with TTL and at-least-once dead-lettering through topic exchanges).
#[test]
fn celery_runs_tasks_on_quorum_queues_with_native_delayed_delivery() {
    if !clients::python_module_available("quorum_queues celery", "celery") {
        return;
    }
    let server = TestServer::with_api();
    let port = server.handle.amqp_addr().expect("AMQP listener").port();
    let work = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/celery_quorum.py");
    let out = run_bounded_for(
        CHILD_TIMEOUT,
        Command::new("python3")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg("-u")
            .arg(script)
            .arg(port.to_string())
            .arg(work.path()),
    );
    let log = std::fs::read_to_string(work.path().join("worker.log")).unwrap_or_default();
    assert!(
        out.success,
        "celery scenario failed: {out}\nworker log:\n{log}"
    );
    print!("{}", out.stdout);
    // What the worker declared: its task queue and the delayed-delivery levels are quorum
    // queues.
    let api = server.api();
    for queue in ["celery", "celery_delayed_0", "celery_delayed_27"] {
        let q = api.get_ok(&format!("/queues/%2F/{queue}"));
        assert_eq!(q["type"], "quorum", "{queue}: {q}");
    }
}

fn quorum(ch: &Channel, name: &str, extra: &[(&str, FieldValue)]) {
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type".into(), FieldValue::string("quorum"));
    for (k, v) in extra {
        arguments.insert((*k).into(), v.clone());
    }
    let options = QueueDeclareOptions {
        durable: true,
        arguments,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options)
        .expect("declare a quorum queue");
}

fn delivery_count(m: &GetMessage) -> Option<i64> {
    m.properties
        .headers
        .as_ref()
        .and_then(|h| h.get("x-delivery-count"))
        .and_then(FieldValue::as_i64)
}

#[test]
fn a_quorum_queue_keeps_transient_messages_across_kill_9_and_failed_deliveries_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    quorum(&ch, "q", &[("x-delivery-limit", FieldValue::I64(3))]);
    ch.confirm_select().unwrap();
    // Delivery mode 1: a classic durable queue would lose these in a crash.
    for body in [&b"rejected"[..], b"fresh"] {
        ch.basic_publish("", "q", false, &BasicProperties::default(), body)
            .unwrap();
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    let m = ch.basic_get("q", false).unwrap().expect("first message");
    assert_eq!(m.body, b"rejected");
    ch.basic_reject(m.delivery_tag, true).unwrap();
    let m = ch.basic_get("q", false).unwrap().expect("again");
    assert_eq!(delivery_count(&m), Some(1));
    ch.basic_reject(m.delivery_tag, true).unwrap();
    // A delivery count is written without waiting for an fsync (like a classic queue's
    // delivered entries): a clean stop keeps it.
    conn.close().unwrap();
    assert!(server.terminate().success());

    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let m = ch.basic_get("q", false).unwrap().expect("recovered");
    assert_eq!(m.body, b"rejected");
    assert!(m.redelivered);
    assert_eq!(
        delivery_count(&m),
        Some(2),
        "two failed deliveries before the crash, none counted for the crash itself"
    );
    ch.basic_reject(m.delivery_tag, true).unwrap();
    let m = ch.basic_get("q", false).unwrap().expect("third");
    assert_eq!(delivery_count(&m), Some(3));
    ch.basic_reject(m.delivery_tag, true).unwrap();
    let fresh = ch
        .basic_get("q", false)
        .unwrap()
        .expect("the transient one");
    assert_eq!(fresh.body, b"fresh");
    assert!(!fresh.redelivered, "never delivered");
    ch.basic_reject(fresh.delivery_tag, true).unwrap();
    // The fourth failed delivery passed the limit of 3: only "fresh" is left.
    ch.confirm_select().unwrap();
    ch.basic_publish("", "q", false, &BasicProperties::default(), b"late")
        .unwrap();
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    // A confirmed transient message survives a crash.
    server.kill9();
    let server = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let bodies: Vec<Vec<u8>> = std::iter::from_fn(|| ch.basic_get("q", true).unwrap())
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, [b"fresh".to_vec(), b"late".to_vec()]);
    conn.close().unwrap();
    assert!(server.terminate().success());
}

#[test]
fn listings_show_the_type_and_the_single_active_consumer() {
    let server = TestServer::with_api();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    quorum(
        &ch,
        "sac",
        &[("x-single-active-consumer", FieldValue::Bool(true))],
    );
    let other = conn.open_channel().unwrap();
    let first = ch
        .basic_consume(
            "sac",
            ConsumeOptions {
                consumer_tag: "first".into(),
                ..ConsumeOptions::default()
            },
        )
        .unwrap();
    let _second = other
        .basic_consume(
            "sac",
            ConsumeOptions {
                consumer_tag: "second".into(),
                ..ConsumeOptions::default()
            },
        )
        .unwrap();
    let api = server.api();
    let q = api.get_ok("/queues/%2F/sac");
    assert_eq!(q["type"], "quorum");
    assert_eq!(q["arguments"]["x-queue-type"], "quorum");
    assert_eq!(q["single_active_consumer_tag"], "first");
    assert_eq!(q["delivery_limit"], 20);
    assert_eq!(q["members"], serde_json::json!([q["node"].clone()]));
    let details = q["consumer_details"].as_array().expect("consumer_details");
    let status: Vec<(String, bool, String)> = details
        .iter()
        .map(|c| {
            (
                c["consumer_tag"].as_str().unwrap().to_string(),
                c["active"].as_bool().unwrap(),
                c["activity_status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(status.contains(&("first".into(), true, "single_active".into())));
    assert!(status.contains(&("second".into(), false, "waiting".into())));
    // The first goes: the second is active at once.
    ch.basic_cancel(first.tag()).unwrap();
    let q = api.get_ok("/queues/%2F/sac");
    assert_eq!(q["single_active_consumer_tag"], "second");
    // Definitions keep the type.
    let defs = api.get_ok("/definitions");
    let exported = defs["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "sac")
        .expect("exported");
    assert_eq!(exported["type"], "quorum");
    drop(first);
    conn.close().unwrap();
}

#[test]
fn a_quorum_default_queue_type_makes_durable_declarations_quorum() {
    let server = TestServer::with_api();
    let api = server.api();
    let made = api.put(
        "/vhosts/qv",
        &serde_json::json!({"default_queue_type": "quorum"}),
    );
    assert!(made.status < 300, "{}", made.text());
    let perm = api.put(
        "/permissions/qv/guest",
        &serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
    );
    assert!(perm.status < 300, "{}", perm.text());
    let conn = Connection::connect_with(ConnectOptions {
        vhost: "qv".into(),
        ..ConnectOptions::new(server.addr_string())
    })
    .unwrap();
    let ch = conn.open_channel().unwrap();
    for (name, durable) in [("durable", true), ("transient", false)] {
        let options = QueueDeclareOptions {
            durable,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(name, options).unwrap();
    }
    // A server-named (exclusive) queue falls back to classic, as in RabbitMQ.
    let generated = ch
        .queue_declare(
            "",
            QueueDeclareOptions {
                exclusive: true,
                ..QueueDeclareOptions::default()
            },
        )
        .unwrap();
    let kind = |name: &str| {
        let q = api.get_ok(&format!("/queues/qv/{name}"));
        q["type"].as_str().unwrap().to_string()
    };
    assert_eq!(kind("durable"), "quorum");
    assert_eq!(kind("transient"), "classic");
    assert_eq!(kind(&generated.queue), "classic");
    // A redeclare without the argument is equivalent: the default applies again.
    ch.queue_declare(
        "durable",
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
    )
    .unwrap();
    conn.close().unwrap();
}

#[test]
fn consumer_priorities_reach_native_consumers() {
    let server = TestServer::start();
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("p", QueueDeclareOptions::default())
        .unwrap();
    let consume = |tag: &str, priority: Option<i64>| {
        let mut arguments = FieldTable::new();
        if let Some(p) = priority {
            arguments.insert("x-priority".into(), FieldValue::I64(p));
        }
        ch.basic_consume(
            "p",
            ConsumeOptions {
                consumer_tag: tag.into(),
                no_ack: true,
                arguments,
                ..ConsumeOptions::default()
            },
        )
        .unwrap()
    };
    let low = consume("low", None);
    let high = consume("high", Some(3));
    for _ in 0..5 {
        ch.basic_publish("", "p", false, &BasicProperties::default(), b"m")
            .unwrap();
    }
    let mut to_high = 0;
    while let Ok(ConsumerEvent::Delivery(_)) = high.recv_timeout(Duration::from_secs(5)) {
        to_high += 1;
        if to_high == 5 {
            break;
        }
    }
    assert_eq!(
        to_high, 5,
        "an unlimited high-priority consumer takes everything"
    );
    assert!(
        low.recv_timeout(Duration::from_millis(200)).is_err(),
        "nothing for the low one"
    );
    conn.close().unwrap();
}
