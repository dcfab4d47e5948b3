//! The AMQP 0-9-1 connection handshake and heartbeats (issue 5, part 3): the server's
//! properties and capabilities, SASL PLAIN and AMQPLAIN, refusals with RabbitMQ's codes and
//! texts, tune limits, and heartbeats in both directions.

use crate::common;

use common::amqp_raw::Raw;
use common::TestServer;
use relaymq::amqp::{AmqpMethod, FrameType, PROTOCOL_HEADER};
use relaymq::types::field_table::encode_table;
use relaymq::types::{FieldTable, FieldValue};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn amqp_addr(server: &TestServer) -> SocketAddr {
    server.handle.amqp_addr().expect("AMQP listener on")
}

/// Connects and sends the header; returns the connection and `connection.start`'s server
/// properties and mechanisms.
fn start(addr: SocketAddr) -> (Raw, FieldTable, Vec<u8>) {
    let mut r = Raw::connect(addr);
    r.send(&PROTOCOL_HEADER);
    match r.recv() {
        Some((
            0,
            AmqpMethod::ConnectionStart {
                version_major: 0,
                version_minor: 9,
                server_properties,
                mechanisms,
                ..
            },
        )) => (r, server_properties, mechanisms),
        other => panic!("expected connection.start 0-9, got {other:?}"),
    }
}

fn start_ok(r: &mut Raw, mechanism: &str, response: Vec<u8>) {
    r.method(
        0,
        &AmqpMethod::ConnectionStartOk {
            client_properties: FieldTable::new(),
            mechanism: mechanism.into(),
            response,
            locale: "en_US".into(),
        },
    );
}

#[test]
fn start_advertises_rabbitmqs_capabilities_and_both_mechanisms() {
    let server = TestServer::start();
    let (_, props, mechanisms) = start(amqp_addr(&server));
    assert_eq!(mechanisms, b"PLAIN AMQPLAIN");
    assert_eq!(
        props.get("product").and_then(FieldValue::as_str),
        Some("RelayMQ")
    );
    let Some(FieldValue::Table(caps)) = props.get("capabilities") else {
        panic!("no capabilities: {props:?}");
    };
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "per_consumer_qos",
        "authentication_failure_close",
        "direct_reply_to",
    ] {
        assert_eq!(caps.get(cap), Some(&FieldValue::Bool(true)), "{cap}");
    }
}

#[test]
fn amqplain_logs_in_and_a_wrong_password_is_refused_with_403() {
    let server = TestServer::start();
    let (mut r, _, _) = start(amqp_addr(&server));
    let mut t = FieldTable::new();
    t.insert("LOGIN".into(), FieldValue::string("guest"));
    t.insert("PASSWORD".into(), FieldValue::string("guest"));
    let mut table = Vec::new();
    encode_table(&mut table, &t);
    start_ok(&mut r, "AMQPLAIN", table[4..].to_vec());
    assert!(matches!(
        r.recv(),
        Some((0, AmqpMethod::ConnectionTune { .. }))
    ));

    let (mut r, _, _) = start(amqp_addr(&server));
    start_ok(&mut r, "PLAIN", b"\0guest\0wrong".to_vec());
    match r.recv() {
        Some((
            0,
            AmqpMethod::ConnectionClose {
                reply_code: 403,
                reply_text,
                class_id: 10,
                method_id: 11,
            },
        )) => assert_eq!(
            reply_text,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For \
             details see the broker logfile."
        ),
        other => panic!("expected connection.close 403, got {other:?}"),
    }
}

#[test]
fn tune_limits_and_an_unknown_vhost_are_refused() {
    let server = TestServer::start();
    let (mut r, _, _) = start(amqp_addr(&server));
    start_ok(&mut r, "PLAIN", b"\0guest\0guest".to_vec());
    assert!(matches!(
        r.recv(),
        Some((0, AmqpMethod::ConnectionTune { .. }))
    ));
    r.method(
        0,
        &AmqpMethod::ConnectionTuneOk {
            channel_max: 0,
            frame_max: 1024,
            heartbeat: 0,
        },
    );
    let text = r.expect_connection_close(530);
    assert!(text.contains("frame_max=1024 < 4096 min size"), "{text}");

    // A second connection asking for a vhost that does not exist.
    let (mut r2, _, _) = start(amqp_addr(&server));
    start_ok(&mut r2, "PLAIN", b"\0guest\0guest".to_vec());
    assert!(matches!(
        r2.recv(),
        Some((0, AmqpMethod::ConnectionTune { .. }))
    ));
    r2.method(
        0,
        &AmqpMethod::ConnectionTuneOk {
            channel_max: 0,
            frame_max: 0,
            heartbeat: 0,
        },
    );
    r2.method(
        0,
        &AmqpMethod::ConnectionOpen {
            virtual_host: "nowhere".into(),
        },
    );
    let (code, text) = match r2.recv() {
        Some((
            0,
            AmqpMethod::ConnectionClose {
                reply_code,
                reply_text,
                ..
            },
        )) => (reply_code, reply_text),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (code, text.as_str()),
        (530, "NOT_ALLOWED - vhost nowhere not found")
    );
}

#[test]
fn heartbeats_flow_both_ways_and_a_silent_client_is_dropped() {
    let server = TestServer::start();
    let (mut r, _, _) = start(amqp_addr(&server));
    start_ok(&mut r, "PLAIN", b"\0guest\0guest".to_vec());
    assert!(matches!(
        r.recv(),
        Some((0, AmqpMethod::ConnectionTune { .. }))
    ));
    r.method(
        0,
        &AmqpMethod::ConnectionTuneOk {
            channel_max: 0,
            frame_max: 0,
            heartbeat: 1,
        },
    );
    r.method(
        0,
        &AmqpMethod::ConnectionOpen {
            virtual_host: "/".into(),
        },
    );
    assert!(matches!(
        r.recv(),
        Some((0, AmqpMethod::ConnectionOpenOk {}))
    ));
    // The server sends heartbeats on an idle connection...
    let started = Instant::now();
    match r.recv_frame() {
        Some((FrameType::Heartbeat, 0, payload)) => assert!(payload.is_empty()),
        other => panic!("expected a heartbeat, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // ...and, hearing nothing back for two intervals, closes the connection.
    while r.recv_frame().is_some() {
        assert!(started.elapsed() < Duration::from_secs(10), "never dropped");
    }
    assert!(started.elapsed() >= Duration::from_millis(1900));
}

#[test]
fn the_native_cli_pointed_at_the_amqp_port_says_which_protocol_the_port_speaks() {
    let server = TestServer::start();
    let amqp = server.handle.amqp_addr().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args(["--addr", &amqp, "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("that port speaks AMQP 0-9-1"), "{stderr}");
}

/// Opens channel 1, declares `queue` and consumes from it with tag `tag` (manual acks).
fn consume_on_channel_1(r: &mut Raw, queue: &str, tag: &str) {
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    declare_and_consume(r, queue, tag);
}

/// On the open channel 1: declares `queue` and consumes from it with tag `tag`.
fn declare_and_consume(r: &mut Raw, queue: &str, tag: &str) {
    r.method(
        1,
        &AmqpMethod::QueueDeclare {
            queue: queue.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::QueueDeclareOk { .. }))
    ));
    r.method(
        1,
        &AmqpMethod::BasicConsume {
            queue: queue.into(),
            consumer_tag: tag.into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::BasicConsumeOk { .. }))
    ));
}

fn queue_delete(queue: &str) -> AmqpMethod {
    AmqpMethod::QueueDelete {
        queue: queue.into(),
        if_unused: false,
        if_empty: false,
        no_wait: false,
    }
}

#[test]
fn deleting_a_consumed_queue_on_its_own_channel_answers_delete_ok_before_basic_cancel() {
    let server = TestServer::start();
    let mut r = Raw::open_with_capabilities(amqp_addr(&server), &["consumer_cancel_notify"]);
    consume_on_channel_1(&mut r, "q", "c1");
    r.method(1, &queue_delete("q"));
    // RabbitMQ's order: the channel answers its own method, then tells of the cancel.
    assert!(
        matches!(r.recv(), Some((1, AmqpMethod::QueueDeleteOk { .. }))),
        "delete-ok first"
    );
    match r.recv() {
        Some((1, AmqpMethod::BasicCancel { consumer_tag, .. })) => assert_eq!(consumer_tag, "c1"),
        other => panic!("expected the server's basic.cancel, got {other:?}"),
    }
}

#[test]
fn a_client_without_consumer_cancel_notify_gets_no_basic_cancel_when_its_queue_goes() {
    let server = TestServer::start();
    let addr = amqp_addr(&server);
    let mut r = Raw::open(addr);
    consume_on_channel_1(&mut r, "q", "c1");
    // Deleted on another connection, and on the consumer's own channel.
    let mut other = Raw::open(addr);
    other.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(
        other.recv(),
        Some((1, AmqpMethod::ChannelOpenOk {}))
    ));
    other.method(1, &queue_delete("q"));
    assert!(matches!(
        other.recv(),
        Some((1, AmqpMethod::QueueDeleteOk { .. }))
    ));
    // The consumer silently ends (RabbitMQ): the next frame is the answer to qos.
    let qos = AmqpMethod::BasicQos {
        prefetch_size: 0,
        prefetch_count: 1,
        global: false,
    };
    r.method(1, &qos);
    match r.recv() {
        Some((1, AmqpMethod::BasicQosOk {})) => {}
        other => panic!("expected basic.qos-ok, got {other:?}"),
    }
    declare_and_consume(&mut r, "q2", "c2");
    r.method(1, &queue_delete("q2"));
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::QueueDeleteOk { .. }))
    ));
    r.method(1, &qos);
    match r.recv() {
        Some((1, AmqpMethod::BasicQosOk {})) => {}
        other => panic!("expected basic.qos-ok, got {other:?}"),
    }
}
