//! Interop tests of the AMQP 0-9-1 listener with clients nobody here wrote (issue 5):
//! Python pika running the six RabbitMQ tutorials, publisher confirms, a consumer
//! cancelled by queue deletion and the consistent-hash exchange (`tests/interop/*.py`); Debian's amqp-tools; and messages
//! crossing between AMQP 0-9-1 and the native protocol with every property and a headers
//! table intact, both with pika and with a small raw client on the project's own codec.
//!
//! Under `scripts/test.sh` (the README's test command, which installs both clients) a
//! missing client fails its test; a plain `cargo test` without them skips those tests,
//! saying so (`common::clients`). Every child process is killed after [`CHILD_TIMEOUT`].

use crate::common;

use common::clients::{run_bounded_for, Output};
use common::{clients, TestServer};
use relaymq::amqp::{self, AmqpMethod, FrameType, FRAME_HEADER_BYTES, PROTOCOL_HEADER};
use relaymq::client::{
    Channel, Connection, ConsumeOptions, ConsumerEvent, Delivery, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Longest a pika scenario or an amqp-tools command may run before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for something that must arrive.
const WAIT: Duration = Duration::from_secs(10);

// ---- running external clients --------------------------------------------------------

fn amqp_port(server: &TestServer) -> u16 {
    server
        .handle
        .amqp_addr()
        .expect("the test server listens for AMQP 0-9-1")
        .port()
}

/// Runs `tests/interop/<name>.py <port> [args]` and returns its output; panics with it
/// unless it exits 0. The caller checked [`clients::pika_available`].
fn pika(server: &TestServer, name: &str, args: &[&str]) -> Output {
    common::run_pika(server, name, args, CHILD_TIMEOUT)
}

/// Runs one pika scenario against a fresh server (skipped or failed without pika, as
/// `common::clients` says).
fn pika_scenario(name: &str) {
    common::pika_scenario("amqp_interop", name, CHILD_TIMEOUT);
}

// ---- the pika scenarios ----------------------------------------------------------------

#[test]
fn pika_tutorial_1_hello_world() {
    pika_scenario("hello_world");
}

#[test]
fn pika_tutorial_2_work_queues_manual_ack_and_prefetch() {
    pika_scenario("work_queues");
}

#[test]
fn pika_tutorial_3_publish_subscribe() {
    pika_scenario("publish_subscribe");
}

#[test]
fn pika_tutorial_4_routing() {
    pika_scenario("routing");
}

#[test]
fn pika_tutorial_5_topics() {
    pika_scenario("topics");
}

#[test]
fn pika_tutorial_6_rpc_reply_to_and_correlation_id() {
    pika_scenario("rpc");
}

#[test]
fn pika_consumer_keeps_up_with_1000_confirmed_publishes() {
    pika_scenario("confirms");
}

#[test]
fn pika_consumer_cancelled_by_queue_deletion() {
    pika_scenario("cancel_on_delete");
}

#[test]
fn pika_direct_reply_to_rpc_and_each_misuse() {
    pika_scenario("direct_reply_to");
}

#[test]
fn pika_heartbeats_keep_an_idle_connection_open() {
    pika_scenario("heartbeats");
}

#[test]
fn pika_consistent_hash_exchange_spreads_by_weight_and_refuses_bad_weights() {
    pika_scenario("consistent_hash");
}

// ---- amqp-tools ------------------------------------------------------------------------

/// Runs an amqp-tools command against the server; the caller checked
/// [`clients::amqp_tools_available`], so a tool that cannot be run fails the test.
fn amqp_tool(server: &TestServer, tool: &str, args: &[&str]) -> Output {
    let url = format!("amqp://guest:guest@127.0.0.1:{}", amqp_port(server));
    run_bounded_for(
        CHILD_TIMEOUT,
        Command::new(tool).arg("--url").arg(&url).args(args),
    )
}

fn amqp_tool_ok(server: &TestServer, tool: &str, args: &[&str]) -> String {
    let out = amqp_tool(server, tool, args);
    assert!(out.success, "{tool} failed: {out}");
    out.stdout
}

#[test]
fn amqp_tools_declare_publish_get_consume() {
    let test = "amqp_interop amqp_tools_declare_publish_get_consume";
    if !clients::amqp_tools_available(test, "amqp-declare-queue") {
        return;
    }
    let server = TestServer::start();

    // amqp-declare-queue prints the queue's name, server-named when empty.
    let out = amqp_tool_ok(&server, "amqp-declare-queue", &["-q", "tools", "-d"]);
    assert_eq!(out.trim(), "tools");
    let out = amqp_tool_ok(&server, "amqp-declare-queue", &["-q", ""]);
    assert!(out.trim().starts_with("amq.gen-"), "server-named: {out:?}");

    for i in 1..=4 {
        let body = format!("hello {i}");
        amqp_tool_ok(
            &server,
            "amqp-publish",
            &[
                "-r",
                "tools",
                "-b",
                &body,
                "-p",
                "-C",
                "text/plain",
                "-H",
                "x-origin: amqp-tools",
            ],
        );
    }

    // amqp-get takes one message and prints its body.
    assert_eq!(
        amqp_tool_ok(&server, "amqp-get", &["-q", "tools"]),
        "hello 1"
    );

    // amqp-consume runs the command once per message, the body on its stdin; -c bounds it.
    let out = amqp_tool_ok(&server, "amqp-consume", &["-q", "tools", "-c", "2", "cat"]);
    assert_eq!(out, "hello 2hello 3");

    // What amqp-publish sent, as the native protocol sees it.
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    let got = ch
        .basic_get("tools", true)
        .unwrap()
        .expect("hello 4 left in the queue");
    assert_eq!(got.body, b"hello 4");
    assert_eq!(got.properties.content_type.as_deref(), Some("text/plain"));
    assert_eq!(got.properties.delivery_mode, Some(2));
    let mut headers = FieldTable::new();
    headers.insert("x-origin".into(), FieldValue::string("amqp-tools"));
    assert_eq!(got.properties.headers, Some(headers));

    // An empty queue: amqp-get fails.
    let out = amqp_tool(&server, "amqp-get", &["-q", "tools"]);
    assert!(!out.success, "amqp-get on an empty queue succeeded: {out}");

    // Native → amqp-get, and a line-per-message publish read back by amqp-consume.
    ch.basic_publish(
        "",
        "tools",
        false,
        &BasicProperties::default(),
        b"from native",
    )
    .unwrap();
    assert_eq!(
        amqp_tool_ok(&server, "amqp-get", &["-q", "tools"]),
        "from native"
    );
    amqp_tool_ok(&server, "amqp-delete-queue", &["-q", "tools"]);
    let err = ch
        .queue_declare(
            "tools",
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .expect_err("the queue is deleted");
    assert_eq!(err.reply_code(), Some(404), "{err}");
}

// ---- cross-protocol: a raw AMQP 0-9-1 client on the project's codec ----------------------

/// A minimal blocking AMQP 0-9-1 client: handshake, methods, content, one frame at a time.
struct AmqpRaw {
    stream: TcpStream,
    buf: Vec<u8>,
    frame_max: u32,
}

impl AmqpRaw {
    /// Connects as guest to vhost `/` and opens channel 1.
    fn connect(addr: SocketAddr) -> AmqpRaw {
        let stream = TcpStream::connect(addr).expect("connect to the AMQP listener");
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut c = AmqpRaw {
            stream,
            buf: Vec::new(),
            frame_max: 1 << 20,
        };
        c.stream.write_all(&PROTOCOL_HEADER).unwrap();
        match c.recv_method(0) {
            AmqpMethod::ConnectionStart { mechanisms, .. } => {
                assert!(mechanisms.split(|b| *b == b' ').any(|m| m == b"PLAIN"))
            }
            other => panic!("expected connection.start, got {other:?}"),
        }
        c.send(
            0,
            &AmqpMethod::ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: b"\0guest\0guest".to_vec(),
                locale: "en_US".into(),
            },
        );
        let (channel_max, frame_max) = match c.recv_method(0) {
            AmqpMethod::ConnectionTune {
                channel_max,
                frame_max,
                ..
            } => (channel_max, frame_max),
            other => panic!("expected connection.tune, got {other:?}"),
        };
        c.send(
            0,
            &AmqpMethod::ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat: 0,
            },
        );
        c.frame_max = frame_max;
        c.send(
            0,
            &AmqpMethod::ConnectionOpen {
                virtual_host: "/".into(),
            },
        );
        c.expect(0, |m| matches!(m, AmqpMethod::ConnectionOpenOk {}));
        c.send(1, &AmqpMethod::ChannelOpen {});
        c.expect(1, |m| matches!(m, AmqpMethod::ChannelOpenOk {}));
        c
    }

    fn send(&mut self, channel: u16, m: &AmqpMethod) {
        let mut out = Vec::new();
        amqp::write_method(&mut out, channel, m);
        self.stream.write_all(&out).expect("send");
    }

    fn publish(
        &mut self,
        channel: u16,
        exchange: &str,
        routing_key: &str,
        props: &BasicProperties,
        body: &[u8],
    ) {
        let mut out = Vec::new();
        let m = AmqpMethod::BasicPublish {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            mandatory: true,
            immediate: false,
        };
        amqp::write_method(&mut out, channel, &m);
        amqp::write_content(
            &mut out,
            channel,
            amqp::BASIC_CLASS_ID,
            props,
            body,
            self.frame_max,
        );
        self.stream.write_all(&out).expect("send");
    }

    /// The next frame other than a heartbeat: type, channel, payload.
    fn recv_frame(&mut self) -> (FrameType, u16, Vec<u8>) {
        loop {
            if let Some((h, n)) = amqp::check(&self.buf, self.frame_max).expect("valid frame") {
                let payload = self.buf[FRAME_HEADER_BYTES..n - 1].to_vec();
                self.buf.drain(..n);
                if h.frame_type == FrameType::Heartbeat {
                    continue;
                }
                return (h.frame_type, h.channel, payload);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("the server closed the AMQP connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("read from the AMQP connection: {e}"),
            }
        }
    }

    /// The next method frame, which must be on `channel`.
    fn recv_method(&mut self, channel: u16) -> AmqpMethod {
        let (t, ch, payload) = self.recv_frame();
        assert_eq!(t, FrameType::Method, "expected a method frame");
        let m = AmqpMethod::decode(&payload).expect("decode method");
        assert_eq!(ch, channel, "{m:?} on channel {ch}");
        m
    }

    fn expect(&mut self, channel: u16, ok: impl Fn(&AmqpMethod) -> bool) -> AmqpMethod {
        let m = self.recv_method(channel);
        assert!(ok(&m), "unexpected {m:?}");
        m
    }

    /// A passive `queue.declare` of `queue` on `channel`; its message and consumer counts.
    fn declare_passive(&mut self, channel: u16, queue: &str) -> (u32, u32) {
        self.send(
            channel,
            &AmqpMethod::QueueDeclare {
                queue: queue.to_string(),
                passive: true,
                durable: false,
                exclusive: false,
                auto_delete: false,
                no_wait: false,
                arguments: FieldTable::new(),
            },
        );
        match self.expect(channel, |m| matches!(m, AmqpMethod::QueueDeclareOk { .. })) {
            AmqpMethod::QueueDeclareOk {
                message_count,
                consumer_count,
                ..
            } => (message_count, consumer_count),
            _ => unreachable!("checked by expect"),
        }
    }

    /// The content that follows a `basic.deliver` or `basic.get-ok` on `channel`.
    fn recv_content(&mut self, channel: u16) -> (BasicProperties, Vec<u8>) {
        let (t, ch, payload) = self.recv_frame();
        assert_eq!((t, ch), (FrameType::Header, channel), "content header");
        let header = amqp::parse_content_header(&payload).expect("content header");
        assert_eq!(header.class_id, amqp::BASIC_CLASS_ID);
        let mut body = Vec::new();
        while (body.len() as u64) < header.body_size {
            let (t, ch, payload) = self.recv_frame();
            assert_eq!((t, ch), (FrameType::Body, channel), "body frame");
            assert!(payload.len() + 8 <= self.frame_max as usize);
            body.extend_from_slice(&payload);
        }
        assert_eq!(body.len() as u64, header.body_size);
        (header.properties, body)
    }
}

fn native(server: &TestServer) -> Connection {
    Connection::connect(&server.addr_string()).expect("native connect")
}

fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(queue, QueueDeclareOptions::default())
        .expect("queue.declare");
}

fn next_delivery(c: &relaymq::client::Consumer) -> Delivery {
    match c.recv_timeout(WAIT) {
        Ok(ConsumerEvent::Delivery(d)) => d,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

/// A headers table with a nested table, an array, integers, strings and booleans.
fn rich_headers() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("inner".into(), FieldValue::string("value"));
    inner.insert("n".into(), FieldValue::I32(1));
    let mut deeper = FieldTable::new();
    deeper.insert("flag".into(), FieldValue::Bool(true));
    inner.insert("deeper".into(), FieldValue::Table(deeper));
    let mut k = FieldTable::new();
    k.insert("k".into(), FieldValue::string("v"));
    let mut h = FieldTable::new();
    h.insert("string".into(), FieldValue::string("text"));
    h.insert("int".into(), FieldValue::I32(42));
    h.insert("negative".into(), FieldValue::I32(-7));
    h.insert("big".into(), FieldValue::I64(1 << 40));
    h.insert("yes".into(), FieldValue::Bool(true));
    h.insert("no".into(), FieldValue::Bool(false));
    h.insert("nested".into(), FieldValue::Table(inner));
    h.insert(
        "array".into(),
        FieldValue::Array(vec![
            FieldValue::I32(1),
            FieldValue::string("two"),
            FieldValue::Bool(true),
            FieldValue::Table(k),
            FieldValue::Array(vec![FieldValue::I32(3)]),
        ]),
    );
    h
}

/// Every property set (the same as `tests/interop/cross_protocol.py`'s).
fn rich_properties() -> BasicProperties {
    BasicProperties {
        content_type: Some("application/json".into()),
        content_encoding: Some("identity".into()),
        headers: Some(rich_headers()),
        delivery_mode: Some(2),
        priority: Some(7),
        correlation_id: Some("corr-1".into()),
        reply_to: Some("replies".into()),
        expiration: Some("60000".into()),
        message_id: Some("msg-1".into()),
        timestamp: Some(1_700_000_000),
        kind: Some("example.event".into()),
        user_id: Some("guest".into()),
        app_id: Some("interop".into()),
        cluster_id: None,
    }
}

const RICH_BODY: &[u8] = br#"{"hello": "native"}"#;

/// Checks every property the acceptance names one by one (clearer failures), then all.
fn assert_same_properties(got: &BasicProperties, want: &BasicProperties) {
    assert_eq!(got.content_type, want.content_type, "content_type");
    assert_eq!(got.correlation_id, want.correlation_id, "correlation_id");
    assert_eq!(got.reply_to, want.reply_to, "reply_to");
    assert_eq!(got.message_id, want.message_id, "message_id");
    assert_eq!(got.timestamp, want.timestamp, "timestamp");
    assert_eq!(got.delivery_mode, want.delivery_mode, "delivery_mode");
    assert_eq!(got.priority, want.priority, "priority");
    assert_eq!(got.expiration, want.expiration, "expiration");
    assert_eq!(got.headers, want.headers, "headers");
    assert_eq!(got, want, "all properties");
}

#[test]
fn amqp_publish_is_consumed_natively_with_properties_and_headers() {
    let server = TestServer::start();
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "from_amqp");
    let consumer = ch
        .basic_consume("from_amqp", ConsumeOptions::default())
        .unwrap();

    let mut amqp = AmqpRaw::connect(server.handle.amqp_addr().unwrap());
    amqp.send(1, &AmqpMethod::ConfirmSelect { nowait: false });
    amqp.expect(1, |m| matches!(m, AmqpMethod::ConfirmSelectOk {}));
    let props = rich_properties();
    // A body over several body frames too.
    let big: Vec<u8> = (0..3 * amqp.frame_max as usize + 17)
        .map(|i| (i % 251) as u8)
        .collect();
    amqp.publish(1, "", "from_amqp", &props, RICH_BODY);
    amqp.publish(1, "", "from_amqp", &props, &big);
    amqp.publish(1, "", "from_amqp", &BasicProperties::default(), b"");
    for tag in 1..=3 {
        match amqp.recv_method(1) {
            AmqpMethod::BasicAck {
                delivery_tag,
                multiple: false,
            } if delivery_tag == tag => {}
            AmqpMethod::BasicAck {
                delivery_tag,
                multiple: true,
            } if delivery_tag >= tag => break,
            other => panic!("expected the confirm of publish {tag}, got {other:?}"),
        }
    }

    for body in [RICH_BODY, &big[..]] {
        let d = next_delivery(&consumer);
        assert_eq!(
            (d.exchange.as_str(), d.routing_key.as_str()),
            ("", "from_amqp")
        );
        assert_eq!(d.body, body);
        assert_same_properties(&d.properties, &props);
        ch.basic_ack(d.delivery_tag, false).unwrap();
    }
    let d = next_delivery(&consumer);
    assert!(d.body.is_empty());
    assert_eq!(d.properties, BasicProperties::default());
}

#[test]
fn native_publish_is_consumed_over_amqp_with_properties_and_headers() {
    let server = TestServer::start();
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "to_amqp");
    let props = rich_properties();
    let big: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
    ch.basic_publish("", "to_amqp", false, &props, RICH_BODY)
        .unwrap();
    ch.basic_publish("", "to_amqp", false, &props, &big)
        .unwrap();
    ch.basic_publish("", "to_amqp", false, &props, b"by get")
        .unwrap();
    round_trip(&conn);

    let mut amqp = AmqpRaw::connect(server.handle.amqp_addr().unwrap());
    // basic.get first: the head of the queue.
    amqp.send(
        1,
        &AmqpMethod::BasicGet {
            queue: "to_amqp".into(),
            no_ack: false,
        },
    );
    match amqp.recv_method(1) {
        AmqpMethod::BasicGetOk {
            delivery_tag,
            redelivered: false,
            exchange,
            routing_key,
            message_count: 2,
        } => {
            assert_eq!((exchange.as_str(), routing_key.as_str()), ("", "to_amqp"));
            let (got, body) = amqp.recv_content(1);
            assert_eq!(body, RICH_BODY);
            assert_same_properties(&got, &props);
            amqp.send(
                1,
                &AmqpMethod::BasicAck {
                    delivery_tag,
                    multiple: false,
                },
            );
        }
        other => panic!("expected basic.get-ok, got {other:?}"),
    }
    // Then a consumer for the rest.
    amqp.send(
        1,
        &AmqpMethod::BasicConsume {
            queue: "to_amqp".into(),
            consumer_tag: "ctag".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    amqp.expect(
        1,
        |m| matches!(m, AmqpMethod::BasicConsumeOk { consumer_tag } if consumer_tag == "ctag"),
    );
    for want in [&big[..], b"by get"] {
        match amqp.recv_method(1) {
            AmqpMethod::BasicDeliver {
                consumer_tag,
                delivery_tag,
                redelivered: false,
                exchange,
                routing_key,
            } => {
                assert_eq!(consumer_tag, "ctag");
                assert_eq!((exchange.as_str(), routing_key.as_str()), ("", "to_amqp"));
                let (got, body) = amqp.recv_content(1);
                assert_eq!(body, want);
                assert_same_properties(&got, &props);
                amqp.send(
                    1,
                    &AmqpMethod::BasicAck {
                        delivery_tag,
                        multiple: false,
                    },
                );
            }
            other => panic!("expected basic.deliver, got {other:?}"),
        }
    }
    // All acked: nothing left.
    let (_, count) = queue_counts(&ch, "to_amqp");
    assert_eq!(count, 0);
}

// ---- cross-protocol direct reply-to ---------------------------------------------------

/// RabbitMQ's direct reply-to pseudo-queue.
const REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// Properties of a request or reply: `reply_to` and `correlation_id`.
fn rpc_properties(reply_to: Option<&str>, correlation_id: &str) -> BasicProperties {
    BasicProperties {
        reply_to: reply_to.map(String::from),
        correlation_id: Some(correlation_id.into()),
        ..Default::default()
    }
}

#[test]
fn direct_reply_to_a_native_requester_from_an_amqp_responder() {
    let server = TestServer::start();
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "xp_requests");
    let replies = ch
        .basic_consume(
            REPLY_TO,
            ConsumeOptions {
                consumer_tag: "native-replies".into(),
                no_ack: true,
                ..Default::default()
            },
        )
        .expect("consume the pseudo-queue without declaring it");
    let request = rpc_properties(Some(REPLY_TO), "n-1");
    ch.basic_publish("", "xp_requests", false, &request, b"question")
        .unwrap();
    round_trip(&conn);

    let mut amqp = AmqpRaw::connect(server.handle.amqp_addr().unwrap());
    amqp.send(
        1,
        &AmqpMethod::BasicGet {
            queue: "xp_requests".into(),
            no_ack: true,
        },
    );
    amqp.expect(1, |m| matches!(m, AmqpMethod::BasicGetOk { .. }));
    let (got, body) = amqp.recv_content(1);
    assert_eq!(body, b"question");
    let name = got.reply_to.expect("the request's reply_to");
    assert!(name.starts_with("amq.rabbitmq.reply-to."), "{name}");
    // A passive declare from AMQP finds the native requester.
    assert_eq!(amqp.declare_passive(1, &name), (0, 1));
    // A mandatory reply in confirm mode: acked with no return before the ack.
    amqp.send(1, &AmqpMethod::ConfirmSelect { nowait: false });
    amqp.expect(1, |m| matches!(m, AmqpMethod::ConfirmSelectOk {}));
    amqp.publish(1, "", &name, &rpc_properties(None, "n-1"), b"answer");
    amqp.expect(1, |m| {
        matches!(
            m,
            AmqpMethod::BasicAck {
                delivery_tag: 1,
                ..
            }
        )
    });

    let d = next_delivery(&replies);
    assert_eq!(d.consumer_tag, "native-replies");
    assert_eq!(
        (d.exchange.as_str(), d.routing_key.as_str()),
        ("", name.as_str())
    );
    assert_eq!(d.body, b"answer");
    assert_eq!(d.properties.correlation_id.as_deref(), Some("n-1"));
    assert!(!d.redelivered);

    // The requester cancels: the next mandatory reply is returned, then confirmed.
    replies.cancel().unwrap();
    amqp.publish(1, "", &name, &rpc_properties(None, "n-1"), b"too late");
    match amqp.recv_method(1) {
        AmqpMethod::BasicReturn {
            reply_code: 312,
            routing_key,
            ..
        } => assert_eq!(routing_key, name),
        other => panic!("expected basic.return, got {other:?}"),
    }
    let (_, body) = amqp.recv_content(1);
    assert_eq!(body, b"too late");
    amqp.expect(1, |m| {
        matches!(
            m,
            AmqpMethod::BasicAck {
                delivery_tag: 2,
                ..
            }
        )
    });
}

#[test]
fn direct_reply_to_an_amqp_requester_from_a_native_responder() {
    let server = TestServer::start();
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "xp_requests");

    let mut amqp = AmqpRaw::connect(server.handle.amqp_addr().unwrap());
    amqp.send(
        1,
        &AmqpMethod::BasicConsume {
            queue: REPLY_TO.into(),
            consumer_tag: "amqp-replies".into(),
            no_local: false,
            no_ack: true,
            exclusive: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    amqp.expect(
        1,
        |m| matches!(m, AmqpMethod::BasicConsumeOk { consumer_tag } if consumer_tag == "amqp-replies"),
    );
    amqp.publish(
        1,
        "",
        "xp_requests",
        &rpc_properties(Some(REPLY_TO), "a-1"),
        b"q",
    );
    // A synchronous method after the publish: the request is routed once it answers.
    assert_eq!(amqp.declare_passive(1, "xp_requests").0, 1);

    let request = ch
        .basic_get("xp_requests", true)
        .unwrap()
        .expect("the AMQP request");
    let name = request.properties.reply_to.expect("reply_to");
    assert!(name.starts_with("amq.rabbitmq.reply-to."), "{name}");
    assert_eq!(queue_counts(&ch, &name), (1, 0), "the live name declares");
    ch.confirm_select().unwrap();
    ch.basic_publish("", &name, true, &rpc_properties(None, "a-1"), b"42")
        .unwrap();
    assert!(
        ch.wait_for_confirms(WAIT).unwrap(),
        "the reply is confirmed"
    );
    assert!(
        ch.returns().try_recv().is_err(),
        "a delivered reply is not returned"
    );

    match amqp.recv_method(1) {
        AmqpMethod::BasicDeliver {
            consumer_tag,
            delivery_tag: 1,
            redelivered: false,
            exchange,
            routing_key,
        } => {
            assert_eq!(consumer_tag, "amqp-replies");
            assert_eq!(
                (exchange.as_str(), routing_key.as_str()),
                ("", name.as_str())
            );
        }
        other => panic!("expected basic.deliver, got {other:?}"),
    }
    let (props, body) = amqp.recv_content(1);
    assert_eq!(body, b"42");
    assert_eq!(props.correlation_id.as_deref(), Some("a-1"));

    // The AMQP requester's channel closes: a mandatory reply comes back to the native
    // responder (before its confirm), one without the flag is dropped and confirmed.
    amqp.send(
        1,
        &AmqpMethod::ChannelClose {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        },
    );
    amqp.expect(1, |m| matches!(m, AmqpMethod::ChannelCloseOk {}));
    ch.basic_publish("", &name, true, &rpc_properties(None, "a-1"), b"gone")
        .unwrap();
    ch.basic_publish("", &name, false, &rpc_properties(None, "a-1"), b"dropped")
        .unwrap();
    assert!(ch.wait_for_confirms(WAIT).unwrap(), "both confirmed");
    let returned = ch
        .returns()
        .try_recv()
        .expect("the mandatory reply returned");
    assert_eq!(
        (returned.reply_code, returned.body.as_slice()),
        (312, &b"gone"[..])
    );
    assert_eq!(returned.routing_key, name);
    assert!(
        ch.returns().try_recv().is_err(),
        "the other is dropped, not returned"
    );
    let err = ch
        .queue_declare(
            &name,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .expect_err("the name is gone with its channel");
    assert_eq!(err.reply_code(), Some(404), "{err}");
}

fn round_trip(conn: &Connection) {
    conn.status().expect("status");
}

/// (consumers, ready messages) of `queue`, by a passive declare.
fn queue_counts(ch: &Channel, queue: &str) -> (u32, u32) {
    let d = ch
        .queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .expect("passive queue.declare");
    (d.consumer_count, d.message_count)
}

// ---- cross-protocol with pika ----------------------------------------------------------

#[test]
fn pika_publish_is_consumed_natively_with_properties_and_headers() {
    if !clients::pika_available(
        "amqp_interop pika_publish_is_consumed_natively_with_properties_and_headers",
    ) {
        return;
    }
    let server = TestServer::start();
    pika(&server, "cross_protocol", &["publish"]);
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    let got = ch
        .basic_get("from_pika", true)
        .unwrap()
        .expect("the message pika published");
    assert_eq!(got.body, RICH_BODY);
    assert_same_properties(&got.properties, &rich_properties());
}

#[test]
fn native_publish_is_read_by_pika_with_properties_and_headers() {
    if !clients::pika_available(
        "amqp_interop native_publish_is_read_by_pika_with_properties_and_headers",
    ) {
        return;
    }
    let server = TestServer::start();
    let conn = native(&server);
    let ch = conn.open_channel().unwrap();
    declare(&ch, "to_pika");
    ch.basic_publish("", "to_pika", false, &rich_properties(), RICH_BODY)
        .unwrap();
    round_trip(&conn);
    pika(&server, "cross_protocol", &["get"]);
}
