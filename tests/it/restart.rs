//! Durability across a clean restart (SIGTERM): exactly the durable definitions and the
//! persistent messages of durable queues that were ready or delivered-but-unacked come
//! back, in order, with the right redelivered flags (issue 3, acceptance 1).

use crate::common;

use common::ServerProcess;
use relaymq::client::{
    Channel, Connection, ExchangeDeclareOptions, GetMessage, ListKind, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};

fn persistent() -> BasicProperties {
    BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    }
}

fn durable_exchange(ch: &Channel, name: &str, durable: bool) {
    let options = ExchangeDeclareOptions {
        durable,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(name, "direct", options)
        .expect("declare exchange");
}

fn queue(ch: &Channel, name: &str, durable: bool) {
    let options = QueueDeclareOptions {
        durable,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, options).expect("declare queue");
}

fn names(conn: &Connection, kind: ListKind) -> Vec<String> {
    conn.list(kind)
        .expect("list")
        .iter()
        .filter_map(|r| r.get("name").and_then(FieldValue::as_str).map(String::from))
        .collect()
}

fn bindings(conn: &Connection) -> Vec<(String, String, String)> {
    let text = |r: &FieldTable, k: &str| {
        r.get(k)
            .and_then(FieldValue::as_str)
            .unwrap_or_default()
            .to_string()
    };
    conn.list(ListKind::Bindings)
        .expect("list bindings")
        .iter()
        .filter(|r| !text(r, "source").is_empty())
        .map(|r| {
            (
                text(r, "source"),
                text(r, "destination"),
                text(r, "routing_key"),
            )
        })
        .collect()
}

fn get_all(ch: &Channel, queue: &str) -> Vec<GetMessage> {
    let mut out = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).expect("get") {
        out.push(m);
        assert!(out.len() < 1000, "runaway queue");
    }
    out
}

#[test]
fn a_clean_restart_keeps_exactly_the_durable_definitions_and_persistent_messages() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    let first = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&first.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    durable_exchange(&ch, "d.x", true);
    durable_exchange(&ch, "t.x", false);
    queue(&ch, "d.q", true);
    queue(&ch, "d.q2", true);
    queue(&ch, "t.q", false);
    let none = FieldTable::new();
    ch.queue_bind("d.q", "d.x", "k", none.clone()).unwrap();
    ch.queue_bind("t.q", "d.x", "k", none.clone()).unwrap(); // transient end: not kept
    ch.queue_bind("d.q2", "t.x", "k", none.clone()).unwrap(); // transient source: not kept
    ch.queue_bind("d.q", "amq.direct", "k2", none.clone())
        .unwrap();

    ch.confirm_select().unwrap();
    let transient = BasicProperties::default();
    for (body, props) in [
        ("m1", &persistent()),
        ("t1", &transient),
        ("m2", &persistent()),
        ("m3", &persistent()),
        ("t2", &transient),
        ("m4", &persistent()),
        ("m5", &persistent()),
    ] {
        ch.basic_publish("d.x", "k", false, props, body.as_bytes())
            .unwrap();
    }
    assert!(ch
        .wait_for_confirms(std::time::Duration::from_secs(10))
        .unwrap());

    // m1 and t1: consumed and acked. m2: delivered, left unacked when the server stops.
    let consumer_conn = Connection::connect(&first.addr_string()).unwrap();
    let cch = consumer_conn.open_channel().unwrap();
    for expected in ["m1", "t1"] {
        let m = cch.basic_get("d.q", false).unwrap().expect("message");
        assert_eq!(m.body, expected.as_bytes());
        cch.basic_ack(m.delivery_tag, false).unwrap();
    }
    let m2 = cch.basic_get("d.q", false).unwrap().expect("m2");
    assert_eq!(m2.body, b"m2");

    assert!(first.terminate().success(), "clean exit on SIGTERM");
    drop(consumer_conn);
    drop(conn);

    let second = ServerProcess::start(&data, &[]);
    let conn = Connection::connect(&second.addr_string()).unwrap();
    let exchanges = names(&conn, ListKind::Exchanges);
    assert!(exchanges.contains(&"d.x".to_string()), "{exchanges:?}");
    assert!(!exchanges.contains(&"t.x".to_string()), "{exchanges:?}");
    let mut queues = names(&conn, ListKind::Queues);
    queues.sort();
    assert_eq!(queues, vec!["d.q".to_string(), "d.q2".to_string()]);
    let mut kept = bindings(&conn);
    kept.sort();
    assert_eq!(
        kept,
        vec![
            ("amq.direct".into(), "d.q".into(), "k2".into()),
            ("d.x".into(), "d.q".into(), "k".into()),
        ]
    );

    let ch = conn.open_channel().unwrap();
    let got = get_all(&ch, "d.q");
    let bodies: Vec<&[u8]> = got.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(bodies, vec![&b"m2"[..], b"m3", b"m4", b"m5"]);
    let redelivered: Vec<bool> = got.iter().map(|m| m.redelivered).collect();
    assert_eq!(redelivered, vec![true, false, false, false]);
    assert!(got.iter().all(|m| m.properties.delivery_mode == Some(2)));
    assert!(get_all(&ch, "d.q2").is_empty());

    // The recovered binding routes again.
    ch.basic_publish("amq.direct", "k2", false, &persistent(), b"after")
        .unwrap();
    let after = get_all(&ch, "d.q");
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].body, b"after");
    conn.close().unwrap();
    assert!(second.terminate().success());
}

#[test]
fn a_second_server_on_the_same_data_directory_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = ServerProcess::start(&data, &[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-server"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--amqp-listen")
        .arg("off")
        .arg("--metrics-listen")
        .arg("off")
        .args(["--http-listen", "off"])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("in use"), "{stderr}");
    // The holder's pid, from the LOCK file, so the operator knows which process it is.
    assert!(
        stderr.contains(&format!("(pid {})", first.child.id())),
        "{stderr}"
    );
    // The first one is unaffected.
    Connection::connect(&first.addr_string())
        .unwrap()
        .close()
        .unwrap();
    assert!(first.terminate().success());
}
