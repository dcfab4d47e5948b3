//! Every runtime limit (`relaymq::limits::Limits`, the `--max-…` flags) reached gives its
//! error, with RabbitMQ's reply code and wording where RabbitMQ has one, on the native
//! listener and on the AMQP 0-9-1 listener; the offending channel or connection goes,
//! and the server (and the connection, for a channel error) keeps serving.
//!
//! Limits covered elsewhere: the heartbeat timeout (tests/it/hostile_input.rs, "a silent
//! client…"), oversized frames with the default frame size (tests/it/hostile_input.rs,
//! tests/it/amqp_frames.rs).

use crate::common;

use common::amqp_raw;
use common::{Raw, TestServer};
use relaymq::amqp::{self, AmqpMethod};
use relaymq::limits::Limits;
use relaymq::native::{Method, PublishMessage, PROTOCOL_HEADER};
use relaymq::server::ServerConfig;
use relaymq::types::{BasicProperties, FieldTable};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a test waits for the server to notice a closed socket, generous.
const SETTLE_DEADLINE: Duration = Duration::from_secs(10);

fn server_with(adjust: impl FnOnce(&mut Limits)) -> TestServer {
    TestServer::start_with(|c: &mut ServerConfig| adjust(&mut c.broker.limits))
}

fn amqp_addr(server: &TestServer) -> SocketAddr {
    server.handle.amqp_addr().expect("AMQP listener on")
}

/// Native handshake: `Ok` with the open connection, or the `connection.close` code and text.
fn native_open(addr: SocketAddr) -> Result<Raw, (u16, String)> {
    let mut raw = Raw::connect_bare(addr);
    match raw.open_as("guest", "guest", "/") {
        Method::OpenOk { .. } => Ok(raw),
        Method::Close {
            reply_code,
            reply_text,
            ..
        } => Err((reply_code, reply_text)),
        other => panic!("expected open-ok or close, got {other:?}"),
    }
}

/// AMQP handshake asking for `channel_max` (0 = the server's).
fn amqp_open(
    addr: SocketAddr,
    channel_max: u16,
) -> Result<(amqp_raw::Raw, (u16, u32)), (u16, String)> {
    amqp_raw::Raw::try_open(addr, channel_max)
}

fn amqp_connect(addr: SocketAddr) -> amqp_raw::Raw {
    amqp_open(addr, 0).expect("AMQP connection opens").0
}

fn queue_declare(name: &str) -> Method {
    Method::QueueDeclare {
        queue: name.into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    }
}

fn exchange_declare(name: &str) -> Method {
    Method::ExchangeDeclare {
        exchange: name.into(),
        kind: "direct".into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }
}

fn consume(queue: &str, tag: &str) -> Method {
    Method::BasicConsume {
        queue: queue.into(),
        consumer_tag: tag.into(),
        no_ack: false,
        exclusive: false,
        arguments: FieldTable::new(),
    }
}

fn amqp_queue_declare(name: &str) -> AmqpMethod {
    AmqpMethod::QueueDeclare {
        queue: name.into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        no_wait: false,
        arguments: FieldTable::new(),
    }
}

fn amqp_exchange_declare(name: &str) -> AmqpMethod {
    AmqpMethod::ExchangeDeclare {
        exchange: name.into(),
        kind: "direct".into(),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        no_wait: false,
        arguments: FieldTable::new(),
    }
}

fn amqp_consume(queue: &str, tag: &str) -> AmqpMethod {
    AmqpMethod::BasicConsume {
        queue: queue.into(),
        consumer_tag: tag.into(),
        no_local: false,
        no_ack: false,
        exclusive: false,
        no_wait: false,
        arguments: FieldTable::new(),
    }
}

/// Expects a native `channel.close` with `code` on `ch`; returns its text.
fn expect_channel_close(reply: (u16, u32, Method), ch: u16, code: u16) -> String {
    match reply {
        (
            c,
            _,
            Method::ChannelClose {
                reply_code,
                reply_text,
                ..
            },
        ) if c == ch => {
            assert_eq!(reply_code, code, "{reply_text}");
            reply_text
        }
        other => panic!("expected channel.close {code} on {ch}, got {other:?}"),
    }
}

/// Expects a native `connection.close` with `code`; returns its text.
fn expect_close(reply: (u16, u32, Method), code: u16) -> String {
    match reply {
        (
            0,
            _,
            Method::Close {
                reply_code,
                reply_text,
                ..
            },
        ) => {
            assert_eq!(reply_code, code, "{reply_text}");
            reply_text
        }
        other => panic!("expected connection.close {code}, got {other:?}"),
    }
}

/// Sends an AMQP method on `ch` and returns the next method frame.
fn amqp_call(r: &mut amqp_raw::Raw, ch: u16, m: &AmqpMethod) -> AmqpMethod {
    r.method(ch, m);
    r.recv().expect("a reply").1
}

/// Expects an AMQP `channel.close` with `code`; answers `close-ok`; returns its text.
fn amqp_expect_channel_close(r: &mut amqp_raw::Raw, ch: u16, got: AmqpMethod, code: u16) -> String {
    match got {
        AmqpMethod::ChannelClose {
            reply_code,
            reply_text,
            ..
        } => {
            assert_eq!(reply_code, code, "{reply_text}");
            r.method(ch, &AmqpMethod::ChannelCloseOk {});
            reply_text
        }
        other => panic!("expected channel.close {code}, got {other:?}"),
    }
}

fn amqp_channel_open(r: &mut amqp_raw::Raw, ch: u16) {
    let got = amqp_call(r, ch, &AmqpMethod::ChannelOpen {});
    assert!(matches!(got, AmqpMethod::ChannelOpenOk {}), "{got:?}");
}

/// The connection still serves: a new channel, a declare and a publish/get round trip.
fn assert_native_serves(raw: &mut Raw, ch: u16) {
    assert_eq!(raw.call(ch, Method::ChannelOpen).2, Method::Ok);
    let queue = format!("alive-{ch}");
    let (_, _, m) = raw.call(ch, queue_declare(&queue));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    raw.send(
        ch,
        0,
        &Method::Publish {
            messages: vec![PublishMessage {
                exchange: String::new(),
                routing_key: queue.clone(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: b"alive".to_vec(),
            }],
        },
    );
    let (_, _, got) = raw.call(
        ch,
        Method::BasicGet {
            queue,
            no_ack: true,
        },
    );
    assert!(
        matches!(got, Method::GetOk { ref body, .. } if body == b"alive"),
        "{got:?}"
    );
}

/// Opens native connections until one succeeds (a closed connection's slot is freed
/// asynchronously, when its worker has run the close).
fn native_open_eventually(addr: SocketAddr) -> Raw {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    loop {
        match native_open(addr) {
            Ok(raw) => return raw,
            Err((code, text)) if Instant::now() < deadline => {
                assert_eq!(code, 530, "{text}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("no slot was freed within {SETTLE_DEADLINE:?}: {e:?}"),
        }
    }
}

#[test]
fn connections_over_the_total_limit_are_refused_with_530_on_both_listeners() {
    let server = server_with(|l| l.connections_max = 2);
    let mut native = native_open(server.addr()).expect("first connection");
    let mut amqp = amqp_connect(amqp_addr(&server));
    let (code, text) = native_open(server.addr()).err().expect("third is refused");
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "connection refused for user 'guest': node connection limit (2) is reached"
    );
    let (code, text) = amqp_open(amqp_addr(&server), 0).err().expect("refused");
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "NOT_ALLOWED - connection refused for user 'guest': node connection limit (2) is reached"
    );
    // The open ones keep serving on both listeners.
    assert_native_serves(&mut native, 1);
    amqp_channel_open(&mut amqp, 1);
    let got = amqp_call(&mut amqp, 1, &amqp_queue_declare("amqp-alive"));
    assert!(matches!(got, AmqpMethod::QueueDeclareOk { .. }), "{got:?}");
    // A closed connection frees its slot.
    drop(native);
    let mut again = native_open_eventually(server.addr());
    assert_native_serves(&mut again, 1);
}

#[test]
fn connections_over_the_per_user_limit_are_refused_with_530_naming_the_user() {
    let server = server_with(|l| l.connections_per_user_max = 1);
    let mut first = native_open(server.addr()).expect("first connection");
    let (code, text) = native_open(server.addr()).err().expect("refused");
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "connection refused for user 'guest': user connection limit (1) is reached"
    );
    let (code, text) = amqp_open(amqp_addr(&server), 0).err().expect("refused");
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "NOT_ALLOWED - connection refused for user 'guest': user connection limit (1) is reached"
    );
    assert_native_serves(&mut first, 1);
    drop(first);
    // Over AMQP this time: the user's count went down with the native close.
    let deadline = Instant::now() + SETTLE_DEADLINE;
    let mut amqp = loop {
        match amqp_open(amqp_addr(&server), 0) {
            Ok((r, _)) => break r,
            Err(e) => {
                assert!(Instant::now() < deadline, "slot not freed: {e:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    amqp_channel_open(&mut amqp, 1);
}

#[test]
fn a_channel_over_the_channel_limit_closes_the_connection_with_530() {
    let server = server_with(|l| l.channels_per_connection_max = 4);
    // Native: the limit is offered in open-ok and bounds the open channels, whatever
    // their numbers (RabbitMQ's `channel_max`).
    let mut raw = native_open(server.addr()).expect("opens");
    for ch in [1, 2, 60_000, 65_535] {
        assert_eq!(raw.call(ch, Method::ChannelOpen).2, Method::Ok, "{ch}");
    }
    let text = expect_close(raw.call(5, Method::ChannelOpen), 530);
    assert_eq!(
        text,
        "number of channels opened (4) has reached the negotiated channel_max (4)"
    );
    // AMQP: offered in connection.tune; asking for more is refused at tune-ok …
    let (code, text) = amqp_open(amqp_addr(&server), 16).err().expect("refused");
    assert_eq!(
        (code, text.as_str()),
        (530, "NOT_ALLOWED - channel_max=16 > 4 max size")
    );
    // … any channel number up to 65535 may be used, a closed channel frees its place …
    let (mut amqp, (offered, _)) = amqp_open(amqp_addr(&server), 0).expect("opens");
    assert_eq!(offered, 4);
    for ch in [65_535, 5, 1000, 3] {
        amqp_channel_open(&mut amqp, ch);
    }
    let got = amqp_call(
        &mut amqp,
        3,
        &AmqpMethod::ChannelClose {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        },
    );
    assert!(matches!(got, AmqpMethod::ChannelCloseOk {}), "{got:?}");
    amqp_channel_open(&mut amqp, 7);
    // … and a fifth open channel closes the connection, with RabbitMQ's text.
    amqp.method(9, &AmqpMethod::ChannelOpen {});
    let text = amqp.expect_connection_close(530);
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened (4) has reached the negotiated channel_max (4)"
    );
    let mut other = native_open(server.addr()).expect("the server keeps serving");
    assert_native_serves(&mut other, 1);
}

#[test]
fn a_queue_over_the_vhost_limit_is_refused_with_406_and_existing_ones_still_declare() {
    let server = server_with(|l| l.queues_per_vhost_max = 2);
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    for q in ["q1", "q2"] {
        let (_, _, m) = raw.call(1, queue_declare(q));
        assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    }
    let text = expect_channel_close(raw.call(1, queue_declare("q3")), 1, 406);
    assert_eq!(
        text,
        "cannot declare queue 'q3': queue limit in vhost '/' (2) is reached"
    );
    // The connection keeps serving; redeclaring an existing queue is no new queue.
    assert_eq!(raw.call(2, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(2, queue_declare("q1"));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    // AMQP, RabbitMQ's text.
    let mut amqp = amqp_connect(amqp_addr(&server));
    amqp_channel_open(&mut amqp, 1);
    let got = amqp_call(&mut amqp, 1, &amqp_queue_declare("q4"));
    let text = amqp_expect_channel_close(&mut amqp, 1, got, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - cannot declare queue 'q4': queue limit in vhost '/' (2) is reached"
    );
    // A deletion makes room.
    let (_, _, m) = raw.call(
        2,
        Method::QueueDelete {
            queue: "q2".into(),
            if_unused: false,
            if_empty: false,
        },
    );
    assert!(matches!(m, Method::QueueDeleteOk { .. }), "{m:?}");
    amqp_channel_open(&mut amqp, 2);
    let got = amqp_call(&mut amqp, 2, &amqp_queue_declare("q4"));
    assert!(matches!(got, AmqpMethod::QueueDeclareOk { .. }), "{got:?}");
}

#[test]
fn an_exchange_over_the_vhost_limit_is_refused_with_406() {
    let server = server_with(|l| l.exchanges_per_vhost_max = 1);
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    assert_eq!(raw.call(1, exchange_declare("x1")).2, Method::Ok);
    // Redeclaring it (and the built-in ones) is fine at the limit.
    assert_eq!(raw.call(1, exchange_declare("x1")).2, Method::Ok);
    let text = expect_channel_close(raw.call(1, exchange_declare("x2")), 1, 406);
    assert_eq!(
        text,
        "cannot declare exchange 'x2': exchange limit in vhost '/' (1) is reached"
    );
    let mut amqp = amqp_connect(amqp_addr(&server));
    amqp_channel_open(&mut amqp, 1);
    let got = amqp_call(&mut amqp, 1, &amqp_exchange_declare("x3"));
    let text = amqp_expect_channel_close(&mut amqp, 1, got, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - cannot declare exchange 'x3': exchange limit in vhost '/' (1) is reached"
    );
    assert_native_serves(&mut raw, 2);
}

#[test]
fn a_consumer_over_the_channel_limit_is_refused_with_406_and_other_channels_consume() {
    let server = server_with(|l| l.consumers_per_channel_max = 2);
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(1, queue_declare("work"));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    for tag in ["c1", "c2"] {
        let (_, _, m) = raw.call(1, consume("work", tag));
        assert!(matches!(m, Method::BasicConsumeOk { .. }), "{m:?}");
    }
    let text = expect_channel_close(raw.call(1, consume("work", "c3")), 1, 406);
    assert_eq!(text, "reached maximum (2) of consumers per channel");
    assert_eq!(raw.call(2, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(2, consume("work", "c3"));
    assert!(matches!(m, Method::BasicConsumeOk { .. }), "{m:?}");
    // AMQP.
    let mut amqp = amqp_connect(amqp_addr(&server));
    amqp_channel_open(&mut amqp, 1);
    for tag in ["a1", "a2"] {
        let got = amqp_call(&mut amqp, 1, &amqp_consume("work", tag));
        assert!(matches!(got, AmqpMethod::BasicConsumeOk { .. }), "{got:?}");
    }
    let got = amqp_call(&mut amqp, 1, &amqp_consume("work", "a3"));
    let text = amqp_expect_channel_close(&mut amqp, 1, got, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - reached maximum (2) of consumers per channel"
    );
    amqp_channel_open(&mut amqp, 2);
    let got = amqp_call(&mut amqp, 2, &amqp_consume("work", "a3"));
    assert!(matches!(got, AmqpMethod::BasicConsumeOk { .. }), "{got:?}");
}

#[test]
fn names_over_the_name_limit_are_refused_with_406() {
    let server = server_with(|l| l.name_bytes_max = 8);
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(1, queue_declare("eight-ch"));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    let text = expect_channel_close(raw.call(1, queue_declare("nine-char")), 1, 406);
    assert_eq!(
        text,
        "queue name 'nine-char' is 9 bytes long, over the limit of 8 bytes"
    );
    assert_eq!(raw.call(2, Method::ChannelOpen).2, Method::Ok);
    let text = expect_channel_close(raw.call(2, exchange_declare("exchange9")), 2, 406);
    assert_eq!(
        text,
        "exchange name 'exchange9' is 9 bytes long, over the limit of 8 bytes"
    );
    assert_eq!(raw.call(3, Method::ChannelOpen).2, Method::Ok);
    let text = expect_channel_close(raw.call(3, consume("eight-ch", "a-long-tag")), 3, 406);
    assert_eq!(
        text,
        "consumer tag 'a-long-tag' is 10 bytes long, over the limit of 8 bytes"
    );
    // Generated names are the server's: a server-named queue is fine.
    assert_eq!(raw.call(4, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(4, queue_declare(""));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    let mut amqp = amqp_connect(amqp_addr(&server));
    amqp_channel_open(&mut amqp, 1);
    let got = amqp_call(&mut amqp, 1, &amqp_queue_declare("nine-char"));
    let text = amqp_expect_channel_close(&mut amqp, 1, got, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - queue name 'nine-char' is 9 bytes long, over the limit of 8 bytes"
    );
}

#[test]
fn a_message_over_the_size_limit_is_406_on_both_listeners() {
    let server = server_with(|l| l.message_bytes_max = 1000);
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    raw.send(
        1,
        7,
        &Method::Publish {
            messages: vec![PublishMessage {
                exchange: String::new(),
                routing_key: "nowhere".into(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: vec![0; 1001],
            }],
        },
    );
    let text = expect_channel_close(raw.recv().expect("a close"), 1, 406);
    assert_eq!(
        text,
        "message size 1001 is larger than configured max size 1000"
    );
    assert_native_serves(&mut raw, 2);
    let mut amqp = amqp_connect(amqp_addr(&server));
    amqp_channel_open(&mut amqp, 1);
    let mut out = Vec::new();
    amqp::write_method(
        &mut out,
        1,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: "nowhere".into(),
            mandatory: false,
            immediate: false,
        },
    );
    amqp::write_content(
        &mut out,
        1,
        amqp::BASIC_CLASS_ID,
        &BasicProperties::default(),
        &[0; 1001],
        amqp_raw::FRAME_MAX,
    );
    amqp.send(&out);
    let got = amqp.recv().expect("a close").1;
    let text = amqp_expect_channel_close(&mut amqp, 1, got, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000"
    );
}

#[test]
fn a_frame_over_the_offered_frame_size_is_501_on_both_listeners() {
    let server = server_with(|l| l.frame_bytes_max = 8192);
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.frame_max, 8192, "open-ok carries the limit");
    // One frame of 8192 + 1 bytes in total: over the negotiated size.
    let payload_bytes = 8192 + 1 - relaymq::native::FRAME_HEADER_BYTES;
    let mut frame = Vec::new();
    relaymq::native::frame::write_method(&mut frame, 1, 1 << 20, |b| {
        Method::ChannelOpen.encode(1, b);
        b.resize(b.len() + payload_bytes - 6, 0);
    });
    raw.stream.write_all(&frame).unwrap();
    expect_close(raw.recv().expect("a close"), 501);
    let (mut amqp, (_, offered)) = amqp_open(amqp_addr(&server), 0).expect("opens");
    assert_eq!(offered, 8192, "connection.tune offers the limit");
    // A body frame of 8192 + 1 bytes (7-byte header, payload, end octet).
    let mut big = vec![3u8, 0, 1];
    big.extend_from_slice(&(8192u32 + 1 - 8).to_be_bytes());
    big.resize(8192, 0);
    big.push(0xCE);
    amqp.send(&big);
    amqp.expect_connection_close(501);
    let mut other = native_open(server.addr()).expect("the server keeps serving");
    assert_native_serves(&mut other, 1);
}

/// Reads until EOF or reset; returns whether it came before `deadline`.
fn closed_before(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn a_silent_client_is_closed_at_the_handshake_deadline_on_both_listeners() {
    let server = server_with(|l| l.handshake_timeout_ms = 1000);
    let started = Instant::now();
    let mut native = TcpStream::connect(server.addr()).unwrap();
    let mut amqp = TcpStream::connect(amqp_addr(&server)).unwrap();
    let deadline = started + Duration::from_secs(8);
    assert!(closed_before(&mut native, deadline), "native socket kept");
    assert!(closed_before(&mut amqp, deadline), "AMQP socket kept");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let mut other = native_open(server.addr()).expect("the server keeps serving");
    assert_native_serves(&mut other, 1);
}

/// Writes `bytes` one at a time, `gap` apart; returns how long the server took to close
/// the socket, or `None` when every byte went out and the socket stayed open.
fn trickle(mut s: TcpStream, bytes: &[u8], gap: Duration) -> Option<Duration> {
    let started = Instant::now();
    s.set_read_timeout(Some(gap)).unwrap();
    let mut buf = [0u8; 4096];
    for b in bytes {
        if s.write_all(std::slice::from_ref(b)).is_err() {
            return Some(started.elapsed());
        }
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(started.elapsed()),
            // The AMQP listener answers the header with connection.start: keep trickling.
            Ok(_) | Err(_) => {}
        }
    }
    None
}

#[test]
fn a_slowloris_handshake_is_closed_at_the_deadline_however_it_trickles() {
    let server = server_with(|l| l.handshake_timeout_ms = 1000);
    // Valid handshakes, one byte every 100 ms: over 10 s if they were let through.
    let mut native_bytes = PROTOCOL_HEADER.to_vec();
    relaymq::native::frame::write_method(&mut native_bytes, 0, 1 << 16, |b| {
        Method::Open {
            user: "guest".into(),
            password: "guest".into(),
            vhost: "/".into(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: "slowloris-with-a-long-name-to-trickle-for-a-long-time".into(),
        }
        .encode(1, b)
    });
    // The header, then a valid frame header announcing a 1000-byte method payload.
    let mut amqp_bytes = amqp::PROTOCOL_HEADER.to_vec();
    amqp_bytes.extend_from_slice(&[1, 0, 0, 0, 0, 0x03, 0xE8]);
    amqp_bytes.resize(amqp_bytes.len() + 1000, 0);
    let gap = Duration::from_millis(100);
    let native = TcpStream::connect(server.addr()).unwrap();
    let amqp = TcpStream::connect(amqp_addr(&server)).unwrap();
    let t = std::thread::spawn(move || trickle(amqp, &amqp_bytes, gap));
    let native_took = trickle(native, &native_bytes, gap).expect("native slowloris closed");
    let amqp_took = t.join().unwrap().expect("AMQP slowloris closed");
    for took in [native_took, amqp_took] {
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(8),
            "closed after {took:?}, deadline 1 s from accept"
        );
    }
    let mut other = native_open(server.addr()).expect("the server keeps serving");
    assert_native_serves(&mut other, 1);
}

#[test]
fn a_client_over_the_outbound_limit_is_disconnected_and_the_server_serves() {
    // 2 MiB, with messages small enough that the cap is not raised.
    let server = server_with(|l| {
        l.outbound_bytes_max = 2 << 20;
        l.message_bytes_max = 128 << 10;
    });
    let mut raw = native_open(server.addr()).expect("opens");
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    raw.stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // basic.get replies are not held back like deliveries: a client asking for 64 MiB
    // of them and reading none fills its outbound buffer up to the cap.
    let (_, _, m) = raw.call(1, queue_declare("big"));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    let body = vec![7u8; 120 << 10];
    let started = Instant::now();
    let mut disconnected = false;
    for _ in 0..512 {
        let mut out = Vec::new();
        relaymq::native::frame::write_method(&mut out, 1, raw.frame_max, |b| {
            Method::Publish {
                messages: vec![PublishMessage {
                    exchange: String::new(),
                    routing_key: "big".into(),
                    mandatory: false,
                    properties: BasicProperties::default(),
                    body: body.clone(),
                }],
            }
            .encode(0, b)
        });
        relaymq::native::frame::write_method(&mut out, 1, raw.frame_max, |b| {
            Method::BasicGet {
                queue: "big".into(),
                no_ack: true,
            }
            .encode(9, b)
        });
        if raw.stream.write_all(&out).is_err() {
            disconnected = true;
            break;
        }
    }
    if !disconnected {
        disconnected = closed_before(&mut raw.stream, Instant::now() + Duration::from_secs(10));
    }
    assert!(
        disconnected,
        "not disconnected after {:?}",
        started.elapsed()
    );
    let mut other = native_open(server.addr()).expect("the server keeps serving");
    assert_native_serves(&mut other, 1);
}

#[test]
fn limits_out_of_range_stop_the_server_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        amqp_listen: None,
        data_dir: dir.path().join("data"),
        workers: 1,
        metrics_listen: None,
        http_listen: None,
        ..ServerConfig::default()
    };
    config.broker.limits.name_bytes_max = 300;
    let err = relaymq::server::start(config).err().expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("--max-name-bytes"), "{err}");
}
