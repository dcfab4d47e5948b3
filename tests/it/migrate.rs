//! `relaymq-cli migrate` (src/bin/relaymq_cli/migrate.rs): definitions through the
//! source's management API, one shovel per queue with messages, progress until drained.
//! The source here is another RelayMQ (same management API and AMQP 0-9-1 as RabbitMQ);
//! tests/heavy/migrate_rabbitmq.rs runs it against a real RabbitMQ when one is given.

use crate::common::{self, TestServer};
use relaymq::client::QueueDeclareOptions;
use relaymq::server::ServerConfig;
use relaymq::types::BasicProperties;
use serde_json::json;
use std::time::Duration;

fn cli(addr: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args(["--addr", addr])
        .args(args)
        .output()
        .expect("relaymq-cli runs")
}

#[test]
fn migrate_imports_the_definitions_and_drains_every_queue_into_this_broker() {
    let source = TestServer::start_with(|c: &mut ServerConfig| {
        c.http_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let target = TestServer::start_with(|c: &mut ServerConfig| c.amqp_listen = None);
    assert_eq!(source.api().put("/vhosts/other", &json!({})).status, 201);
    let r = source.api().put(
        "/permissions/other/guest",
        &json!({"configure": ".*", "write": ".*", "read": ".*"}),
    );
    assert!(r.status == 201 || r.status == 204, "{}", r.status);
    let conn = common::connect(&source);
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let props = BasicProperties {
        delivery_mode: Some(2),
        content_type: Some("text/plain".into()),
        ..BasicProperties::default()
    };
    for (q, n) in [("jobs", 300usize), ("mail", 20), ("empty", 0)] {
        common::declare_queue(&ch, q, true, &[]);
        for i in 0..n {
            ch.basic_publish("", q, false, &props, format!("{q}-{i}").as_bytes())
                .unwrap();
        }
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    let other = relaymq::client::Connection::connect_with(relaymq::client::ConnectOptions {
        vhost: "other".into(),
        ..relaymq::client::ConnectOptions::new(source.addr_string())
    })
    .unwrap();
    let och = other.open_channel().unwrap();
    common::declare_queue(&och, "far", true, &[]);
    och.basic_publish("", "far", false, &props, b"far-0")
        .unwrap();
    och.confirm_select().unwrap();
    och.basic_publish("", "far", false, &props, b"far-1")
        .unwrap();
    assert!(och.wait_for_confirms(Duration::from_secs(10)).unwrap());

    let from = format!("amqp://guest:guest@{}", source.handle.amqp_addr().unwrap());
    let api = format!("http://{}", source.http_addr());
    let out = cli(
        &target.addr_string(),
        &["migrate", "--from", &from, "--from-api", &api],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("moving 300 messages of queue 'jobs' in vhost '/'"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("'empty'"),
        "an empty queue gets no shovel: {stdout}"
    );
    assert!(
        stdout.contains("done: 3 queues drained (322 messages)"),
        "{stdout}"
    );
    assert!(!stdout.contains("guest:guest"), "{stdout}");

    // Everything is here, in order, with its properties; the source is empty.
    let tc = common::connect(&target);
    let tch = tc.open_channel().unwrap();
    let mut bodies = Vec::new();
    common::drain_each(&tch, "jobs", |m| {
        assert_eq!(m.properties.delivery_mode, Some(2));
        assert_eq!(m.properties.content_type.as_deref(), Some("text/plain"));
        bodies.push(String::from_utf8(m.body).unwrap());
    });
    let want: Vec<String> = (0..300).map(|i| format!("jobs-{i}")).collect();
    assert_eq!(bodies, want);
    let passive = || QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    assert_eq!(
        tch.queue_declare("mail", passive()).unwrap().message_count,
        20
    );
    assert_eq!(
        tch.queue_declare("empty", passive()).unwrap().message_count,
        0
    );
    for q in ["jobs", "mail"] {
        assert_eq!(
            ch.queue_declare(q, passive()).unwrap().message_count,
            0,
            "{q} drained"
        );
    }
    let tother = relaymq::client::Connection::connect_with(relaymq::client::ConnectOptions {
        vhost: "other".into(),
        ..relaymq::client::ConnectOptions::new(target.addr_string())
    })
    .unwrap();
    let toch = tother.open_channel().unwrap();
    assert_eq!(
        toch.queue_declare("far", passive()).unwrap().message_count,
        2
    );
    // The shovels deleted themselves.
    let list = cli(&target.addr_string(), &["shovel", "list", "--json"]);
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "[]");
}

#[test]
fn migrate_says_what_is_missing() {
    let target = TestServer::start();
    let out = cli(&target.addr_string(), &["migrate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from"));
    // Nothing listens on port 1: the API is unreachable, the text says what to do.
    let out = cli(
        &target.addr_string(),
        &[
            "migrate",
            "--from",
            "amqp://u:secret@127.0.0.1:1",
            "--from-api",
            "http://127.0.0.1:1",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--definitions FILE") && !err.contains("secret"),
        "{err}"
    );
}
