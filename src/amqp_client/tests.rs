//! The client against a scripted server on a loopback socket (the server side written
//! with the same codec): the handshake, refusals, publishes, confirms, deliveries cut
//! anywhere, and server input that must be an error, never a panic.

use super::*;
use crate::amqp::{
    check, parse_content_header, write_content, write_method, AmqpMethod, FrameType,
    BASIC_CLASS_ID, PROTOCOL_HEADER,
};
use crate::client::{ConsumeOptions, QueueDeclareOptions};
use crate::types::{BasicProperties, FieldValue};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

/// Frame size the scripted server offers unless a test says otherwise, bytes.
const FRAME_MAX: u32 = 4096;

/// The server's side of one connection.
struct Peer {
    stream: TcpStream,
    /// Received bytes not parsed yet.
    buf: Vec<u8>,
}

impl Peer {
    /// The next frame from the client: type, channel, payload.
    fn frame(&mut self) -> (FrameType, u16, Vec<u8>) {
        loop {
            if let Some((h, total)) = check(&self.buf, 1 << 20).expect("client frame") {
                let payload = h.payload(&self.buf[..total]).to_vec();
                self.buf.drain(..total);
                return (h.frame_type, h.channel, payload);
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "the client hung up");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next method from the client.
    fn recv(&mut self) -> (u16, AmqpMethod) {
        let (t, ch, payload) = self.frame();
        assert_eq!(t, FrameType::Method);
        (ch, AmqpMethod::decode(&payload).expect("client method"))
    }

    fn send(&mut self, channel: u16, m: AmqpMethod) {
        let mut out = Vec::new();
        write_method(&mut out, channel, &m);
        self.stream.write_all(&out).expect("send");
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// `connection.start`, with `mechanisms`.
    fn start(&mut self, mechanisms: &[u8]) {
        self.send(
            0,
            AmqpMethod::ConnectionStart {
                version_major: 0,
                version_minor: 9,
                server_properties: Default::default(),
                mechanisms: mechanisms.to_vec(),
                locales: b"en_US".to_vec(),
            },
        );
    }

    /// Everything after the protocol header up to channel 1's `open-ok`, offering
    /// `frame_max`.
    fn handshake(&mut self, frame_max: u32) {
        self.start(b"PLAIN");
        let (_, m) = self.recv();
        assert!(matches!(m, AmqpMethod::ConnectionStartOk { .. }), "{m:?}");
        self.send(
            0,
            AmqpMethod::ConnectionTune {
                channel_max: 8,
                frame_max,
                heartbeat: 0,
            },
        );
        let (_, m) = self.recv();
        assert!(matches!(m, AmqpMethod::ConnectionTuneOk { .. }), "{m:?}");
        let (_, m) = self.recv();
        assert!(matches!(m, AmqpMethod::ConnectionOpen { .. }), "{m:?}");
        self.send(0, AmqpMethod::ConnectionOpenOk {});
        self.accept_channel(1);
    }

    /// Answers `channel.open` on `channel`.
    fn accept_channel(&mut self, channel: u16) {
        assert_eq!(self.recv(), (channel, AmqpMethod::ChannelOpen {}));
        self.send(channel, AmqpMethod::ChannelOpenOk {});
    }

    /// Answers the client's `channel.close` on `channel` and `connection.close`.
    fn accept_close(&mut self, channel: u16) {
        let (ch, m) = self.recv();
        assert_eq!(ch, channel);
        assert!(matches!(m, AmqpMethod::ChannelClose { .. }), "{m:?}");
        self.send(channel, AmqpMethod::ChannelCloseOk {});
        let (_, m) = self.recv();
        assert!(
            matches!(
                m,
                AmqpMethod::ConnectionClose {
                    reply_code: 200,
                    ..
                }
            ),
            "{m:?}"
        );
        self.send(0, AmqpMethod::ConnectionCloseOk {});
    }
}

/// Starts a one-connection scripted server: it reads the protocol header, then runs
/// `script`.
fn fake_server(script: impl FnOnce(Peer) + Send + 'static) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_nodelay(true).unwrap();
        let mut header = [0; 8];
        stream.read_exact(&mut header).unwrap();
        assert_eq!(header, PROTOCOL_HEADER);
        script(Peer {
            stream,
            buf: Vec::new(),
        });
    });
    (addr, handle)
}

/// Options with a short reply timeout, so a failing test does not hang.
fn opts(addr: &str) -> ConnectOptions {
    ConnectOptions {
        reply_timeout: Duration::from_secs(5),
        ..ConnectOptions::new(addr)
    }
}

/// A scripted server that runs the handshake (`FRAME_MAX`) and then `script`, and a
/// client connected to it.
fn connected(script: impl FnOnce(&mut Peer) + Send + 'static) -> (Connection, JoinHandle<()>) {
    let (addr, server) = fake_server(|mut p| {
        p.handshake(FRAME_MAX);
        script(&mut p);
    });
    (Connection::connect(&opts(&addr)).unwrap(), server)
}

/// The frames of one delivery: `basic.deliver`, content header, body frames.
fn delivery_frames(tag: u64, props: &BasicProperties, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_method(
        &mut out,
        1,
        &AmqpMethod::BasicDeliver {
            consumer_tag: "ctag".into(),
            delivery_tag: tag,
            redelivered: tag == 2,
            exchange: "x".into(),
            routing_key: "k".into(),
        },
    );
    write_content(&mut out, 1, BASIC_CLASS_ID, props, body, FRAME_MAX);
    out
}

#[test]
fn handshake_sends_plain_credentials_and_takes_the_servers_tuning() {
    let (addr, server) = fake_server(|mut p| {
        p.start(b"AMQPLAIN PLAIN");
        let (ch, m) = p.recv();
        assert_eq!(ch, 0);
        let AmqpMethod::ConnectionStartOk {
            client_properties,
            mechanism,
            response,
            ..
        } = m
        else {
            panic!("{m:?}");
        };
        assert_eq!(mechanism, "PLAIN");
        assert_eq!(response, b"\0bob\0secret");
        assert_eq!(
            client_properties.get("connection_name"),
            Some(&FieldValue::string("shovel-1"))
        );
        let Some(FieldValue::Table(caps)) = client_properties.get("capabilities") else {
            panic!("{client_properties:?}");
        };
        assert_eq!(
            caps.get("authentication_failure_close"),
            Some(&FieldValue::Bool(true))
        );
        // 0 = no limit: the client picks its own bound.
        p.send(
            0,
            AmqpMethod::ConnectionTune {
                channel_max: 0,
                frame_max: 8192,
                heartbeat: 60,
            },
        );
        assert_eq!(
            p.recv(),
            (
                0,
                AmqpMethod::ConnectionTuneOk {
                    channel_max: 2047,
                    frame_max: 8192,
                    heartbeat: 0,
                }
            )
        );
        assert_eq!(
            p.recv(),
            (
                0,
                AmqpMethod::ConnectionOpen {
                    virtual_host: "v/1".into()
                }
            )
        );
        p.send(0, AmqpMethod::ConnectionOpenOk {});
        p.accept_channel(1);
        p.accept_close(1);
    });
    let mut conn = Connection::connect(&ConnectOptions {
        user: "bob".into(),
        password: "secret".into(),
        vhost: "v/1".into(),
        connection_name: "shovel-1".into(),
        ..opts(&addr)
    })
    .unwrap();
    assert_eq!(
        (conn.frame_max(), conn.channel_max(), conn.channel()),
        (8192, 2047, 1)
    );
    conn.close_channel().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

/// Connects to a server that runs `script` after the protocol header; the error.
fn handshake_error(
    reply_timeout: Duration,
    script: impl FnOnce(Peer) + Send + 'static,
) -> AmqpClientError {
    let (addr, server) = fake_server(script);
    let e = Connection::connect(&ConnectOptions {
        reply_timeout,
        ..opts(&addr)
    })
    .err()
    .expect("the handshake must fail");
    server.join().unwrap();
    e
}

#[test]
fn refusals_and_strangers_during_the_handshake_are_errors() {
    let secs = Duration::from_secs(5);
    let e = handshake_error(secs, |mut p| p.start(b"AMQPLAIN EXTERNAL"));
    assert!(
        matches!(&e, AmqpClientError::Protocol(t) if t.contains("PLAIN")),
        "{e}"
    );

    let e = handshake_error(secs, |mut p| {
        p.start(b"PLAIN");
        p.recv();
        p.send(
            0,
            AmqpMethod::ConnectionTune {
                channel_max: 8,
                frame_max: 1024,
                heartbeat: 0,
            },
        );
    });
    assert!(e.to_string().contains("below AMQP's minimum"), "{e}");

    // A refused login (authentication_failure_close): the close is answered.
    let e = handshake_error(secs, |mut p| {
        p.start(b"PLAIN");
        p.recv();
        p.send(
            0,
            AmqpMethod::ConnectionClose {
                reply_code: 403,
                reply_text: "ACCESS_REFUSED - Login was refused".into(),
                class_id: 0,
                method_id: 0,
            },
        );
        assert_eq!(p.recv(), (0, AmqpMethod::ConnectionCloseOk {}));
    });
    assert_eq!(e.reply_code(), Some(403));
    assert!(e.to_string().contains("ACCESS_REFUSED"), "{e}");

    // A refused login without it: the server hangs up.
    let e = handshake_error(secs, |mut p| {
        p.start(b"PLAIN");
        p.recv();
    });
    match &e {
        AmqpClientError::Io { context, source } => {
            assert!(context.contains("login refused?"), "{e}");
            assert_eq!(source.kind(), ErrorKind::UnexpectedEof);
        }
        _ => panic!("{e:?}"),
    }

    // Another protocol version's header, a port that is not AMQP, silence.
    let e = handshake_error(secs, |mut p| p.send_raw(b"AMQP\x00\x00\x08\x00"));
    assert!(e.to_string().contains("does not speak AMQP 0-9-1"), "{e}");
    let e = handshake_error(secs, |mut p| {
        p.send_raw(&[1, 0, 0, 0, 0, 0, 4, 0, 10, 0, 10, 0])
    });
    assert!(
        matches!(&e, AmqpClientError::Protocol(t) if t.contains("malformed frame")),
        "{e}"
    );
    let e = handshake_error(Duration::from_millis(200), |mut p| {
        // Holds the socket open until the client gives up.
        let mut rest = Vec::new();
        let _ = p.stream.read_to_end(&mut rest);
    });
    assert!(matches!(e, AmqpClientError::Timeout(_)), "{e}");
}

#[test]
fn a_refused_request_closes_the_channel_and_the_next_channel_works() {
    let (mut conn, server) = connected(|p| {
        let (ch, m) = p.recv();
        assert_eq!(ch, 1);
        assert!(
            matches!(m, AmqpMethod::QueueDeclare { passive: true, ref queue, .. } if queue == "gone"),
            "{m:?}"
        );
        p.send(
            1,
            AmqpMethod::ChannelClose {
                reply_code: 404,
                reply_text: "NOT_FOUND - no queue 'gone' in vhost '/'".into(),
                class_id: 50,
                method_id: 10,
            },
        );
        assert_eq!(p.recv(), (1, AmqpMethod::ChannelCloseOk {}));
        p.accept_channel(2);
        let (ch, m) = p.recv();
        assert_eq!(ch, 2);
        assert!(
            matches!(m, AmqpMethod::QueueDeclare { durable: true, .. }),
            "{m:?}"
        );
        p.send(
            2,
            AmqpMethod::QueueDeclareOk {
                queue: "q".into(),
                message_count: 5,
                consumer_count: 1,
            },
        );
        p.accept_close(2);
    });
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let e = conn.queue_declare("gone", passive).unwrap_err();
    assert!(
        matches!(e, AmqpClientError::ChannelClosed { code: 404, .. }),
        "{e:?}"
    );
    assert_eq!(conn.open_channel().unwrap(), 2);
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let ok = conn.queue_declare("q", durable).unwrap();
    assert_eq!(
        (ok.queue.as_str(), ok.message_count, ok.consumer_count),
        ("q", 5, 1)
    );
    // Refused before anything is sent: the server would act on a cut name.
    let long = "n".repeat(256);
    assert!(matches!(
        conn.queue_declare(&long, QueueDeclareOptions::default()),
        Err(AmqpClientError::Usage(_))
    ));
    conn.close_channel().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

#[test]
fn publishes_are_prepared_frames_and_body_frames_split_at_frame_max() {
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    let bodies: Vec<Vec<u8>> = [0usize, 10, 4088, 4089, 9000]
        .iter()
        .map(|&n| (0..n).map(|i| (i % 249) as u8).collect())
        .collect();
    let expected = bodies.clone();
    let want_props = props.clone();
    let (mut conn, server) = connected(move |p| {
        for body in &expected {
            let (ch, m) = p.recv();
            assert_eq!(ch, 1);
            assert!(
                matches!(m, AmqpMethod::BasicPublish { ref exchange, ref routing_key, mandatory: false, .. }
                    if exchange == "x" && routing_key == "k"),
                "{m:?}"
            );
            let (t, _, payload) = p.frame();
            assert_eq!(t, FrameType::Header);
            let header = parse_content_header(&payload).unwrap();
            assert_eq!(header.body_size, body.len() as u64);
            assert_eq!(header.properties, want_props);
            let mut got = Vec::new();
            while got.len() < body.len() {
                let (t, ch, payload) = p.frame();
                assert_eq!((t, ch), (FrameType::Body, 1));
                assert!(payload.len() <= FRAME_MAX as usize - 8);
                got.extend_from_slice(&payload);
            }
            assert_eq!(&got, body);
        }
        p.accept_close(1);
    });
    let prepared = conn.prepare_publish("x", "k", &props).unwrap();
    assert_eq!(prepared.channel(), 1);
    for body in &bodies {
        conn.publish(&prepared, body).unwrap();
    }
    conn.flush().unwrap();
    // Names past 255 bytes and a header past frame_max are refused.
    let long = "k".repeat(256);
    assert!(matches!(
        conn.prepare_publish("x", &long, &props),
        Err(AmqpClientError::Usage(_))
    ));
    let big = BasicProperties {
        message_id: Some("m".repeat(255)),
        correlation_id: Some("c".repeat(255)),
        headers: Some(
            (0..40)
                .map(|i| (format!("h{i}"), FieldValue::string("v".repeat(100))))
                .collect(),
        ),
        ..BasicProperties::default()
    };
    assert!(matches!(
        conn.prepare_publish("x", "k", &big),
        Err(AmqpClientError::Usage(_))
    ));
    conn.close_channel().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

#[test]
fn a_publish_prepared_for_a_closed_channel_is_refused() {
    let (mut conn, server) = connected(|p| {
        let (ch, m) = p.recv();
        assert!(matches!(m, AmqpMethod::ChannelClose { .. }), "{m:?}");
        p.send(ch, AmqpMethod::ChannelCloseOk {});
        p.accept_channel(2);
        p.accept_close(2);
    });
    let prepared = conn
        .prepare_publish("", "q", &BasicProperties::default())
        .unwrap();
    conn.close_channel().unwrap();
    conn.open_channel().unwrap();
    assert!(matches!(
        conn.publish(&prepared, b"x"),
        Err(AmqpClientError::Usage(_))
    ));
    conn.close_channel().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

#[test]
fn confirms_settle_the_window_and_nacks_are_counted() {
    let (mut conn, server) = connected(|p| {
        assert_eq!(p.recv(), (1, AmqpMethod::ConfirmSelect { nowait: false }));
        p.send(1, AmqpMethod::ConfirmSelectOk {});
        for _ in 0..5 {
            let (_, m) = p.recv();
            assert!(matches!(m, AmqpMethod::BasicPublish { .. }), "{m:?}");
            assert_eq!(p.frame().0, FrameType::Header);
            assert_eq!(p.frame().0, FrameType::Body);
        }
        let ack = |tag, multiple| AmqpMethod::BasicAck {
            delivery_tag: tag,
            multiple,
        };
        p.send(1, ack(2, false));
        p.send(1, ack(3, true));
        p.send(
            1,
            AmqpMethod::BasicNack {
                delivery_tag: 5,
                multiple: false,
                requeue: false,
            },
        );
        p.send(1, ack(4, false));
        // The sixth publish is confirmed with a tag never published.
        let (_, m) = p.recv();
        assert!(matches!(m, AmqpMethod::BasicPublish { .. }), "{m:?}");
        p.frame();
        p.frame();
        p.send(1, ack(99, false));
    });
    conn.confirm_select().unwrap();
    let prepared = conn
        .prepare_publish("", "q", &BasicProperties::default())
        .unwrap();
    for _ in 0..5 {
        conn.publish(&prepared, b"m").unwrap();
    }
    assert_eq!(conn.unconfirmed(), 5);
    assert_eq!(
        conn.wait_confirms_at_most(0, Duration::from_secs(5))
            .unwrap(),
        0
    );
    assert_eq!(conn.nacked(), 1);
    conn.publish(&prepared, b"m").unwrap();
    let e = conn
        .wait_confirms_at_most(0, Duration::from_secs(5))
        .unwrap_err();
    assert!(
        matches!(&e, AmqpClientError::Protocol(t) if t.contains("99")),
        "{e}"
    );
    server.join().unwrap();
}

#[test]
fn waiting_for_confirms_that_do_not_come_times_out() {
    let (mut conn, server) = connected(|p| {
        assert_eq!(p.recv(), (1, AmqpMethod::ConfirmSelect { nowait: false }));
        p.send(1, AmqpMethod::ConfirmSelectOk {});
        p.recv();
        p.frame();
        p.frame();
        let mut rest = Vec::new();
        let _ = p.stream.read_to_end(&mut rest);
    });
    assert!(matches!(
        conn.wait_confirms_at_most(0, Duration::from_millis(10)),
        Err(AmqpClientError::Usage(_))
    ));
    conn.confirm_select().unwrap();
    let prepared = conn
        .prepare_publish("", "q", &BasicProperties::default())
        .unwrap();
    conn.publish(&prepared, b"m").unwrap();
    let e = conn
        .wait_confirms_at_most(0, Duration::from_millis(200))
        .unwrap_err();
    assert!(
        matches!(&e, AmqpClientError::Timeout(t) if t.contains("1 publishes still unconfirmed")),
        "{e}"
    );
    drop(conn);
    server.join().unwrap();
}

/// What a test consumer saw of one delivery.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    head: DeliveryHead,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// Polls until `n` deliveries are complete, checking the order of the events.
fn consume_n(conn: &mut Connection, n: usize) -> Vec<Seen> {
    let mut seen: Vec<Seen> = Vec::new();
    let mut open = false;
    while seen.len() < n || open {
        conn.poll_deliveries(Duration::from_secs(5), |e| match e {
            DeliveryEvent::Start { head, header } => {
                assert!(!open, "Start inside a delivery");
                open = true;
                let props = header.properties().unwrap();
                seen.push(Seen {
                    head: head.clone(),
                    content_type: props.content_type,
                    body: Vec::new(),
                });
            }
            DeliveryEvent::Body { offset, chunk, .. } => {
                assert!(open);
                let s = seen.last_mut().unwrap();
                assert_eq!(offset, s.body.len() as u64);
                s.body.extend_from_slice(chunk);
            }
            DeliveryEvent::End { head } => {
                assert!(open);
                open = false;
                let s = seen.last().unwrap();
                assert_eq!(head.body_bytes, s.body.len() as u64);
            }
        })
        .unwrap();
    }
    seen
}

#[test]
fn deliveries_are_handed_out_in_place_however_the_reads_cut_them() {
    let big: Vec<u8> = (0..9000).map(|i| (i % 241) as u8).collect();
    let typed = BasicProperties {
        content_type: Some("text/plain".into()),
        ..BasicProperties::default()
    };
    let mut frames = delivery_frames(1, &BasicProperties::default(), &big);
    frames.extend(delivery_frames(2, &BasicProperties::default(), b""));
    frames.extend(delivery_frames(3, &typed, b"hello"));
    let (mut conn, server) = connected(move |p| {
        assert_eq!(
            p.recv(),
            (
                1,
                AmqpMethod::BasicQos {
                    prefetch_size: 0,
                    prefetch_count: 10,
                    global: false
                }
            )
        );
        p.send(1, AmqpMethod::BasicQosOk {});
        let (_, m) = p.recv();
        assert!(
            matches!(m, AmqpMethod::BasicConsume { ref queue, no_ack: false, .. } if queue == "q"),
            "{m:?}"
        );
        p.send(
            1,
            AmqpMethod::BasicConsumeOk {
                consumer_tag: "ctag".into(),
            },
        );
        // A heartbeat and a method for another channel on the way change nothing; the
        // deliveries then come cut into uneven pieces, one write each.
        p.send_raw(&[8, 0, 0, 0, 0, 0, 0, 0xCE]);
        p.send(
            0,
            AmqpMethod::ConnectionBlocked {
                reason: "low on memory".into(),
            },
        );
        for piece in frames.chunks(997) {
            p.send_raw(piece);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            p.recv(),
            (
                1,
                AmqpMethod::BasicAck {
                    delivery_tag: 3,
                    multiple: true
                }
            )
        );
        let (_, m) = p.recv();
        assert!(
            matches!(m, AmqpMethod::BasicCancel { ref consumer_tag, .. } if consumer_tag == "ctag"),
            "{m:?}"
        );
        // A delivery still on its way when the cancel is answered: dropped.
        p.send_raw(&delivery_frames(4, &BasicProperties::default(), b"late"));
        p.send(
            1,
            AmqpMethod::BasicCancelOk {
                consumer_tag: "ctag".into(),
            },
        );
        p.accept_close(1);
    });
    conn.basic_qos(10, false).unwrap();
    let tag = conn.basic_consume("q", ConsumeOptions::default()).unwrap();
    assert_eq!(tag, "ctag");
    let seen = consume_n(&mut conn, 3);
    let heads: Vec<(u64, bool, u64)> = seen
        .iter()
        .map(|s| (s.head.delivery_tag, s.head.redelivered, s.head.body_bytes))
        .collect();
    assert_eq!(heads, [(1, false, 9000), (2, true, 0), (3, false, 5)]);
    assert_eq!(seen[0].body, big);
    assert_eq!(seen[1].body, b"");
    assert_eq!(seen[2].body, b"hello");
    assert_eq!(seen[2].content_type.as_deref(), Some("text/plain"));
    assert_eq!(
        (
            seen[0].head.exchange.as_str(),
            seen[0].head.routing_key.as_str()
        ),
        ("x", "k")
    );
    conn.ack(3, true);
    conn.flush().unwrap();
    conn.basic_cancel(&tag).unwrap();
    conn.close_channel().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

/// Consumes `frames` sent after `basic.consume-ok`; the error it ends with.
fn consume_error(frames: Vec<u8>) -> AmqpClientError {
    let (mut conn, server) = connected(move |p| {
        p.recv();
        p.send(
            1,
            AmqpMethod::BasicConsumeOk {
                consumer_tag: "ctag".into(),
            },
        );
        let _ = p.stream.write_all(&frames);
        let mut rest = Vec::new();
        let _ = p.stream.read_to_end(&mut rest);
    });
    conn.basic_consume("q", ConsumeOptions::default()).unwrap();
    let e = loop {
        match conn.poll_deliveries(Duration::from_secs(5), |_| {}) {
            Ok(0) => panic!("no error and nothing delivered"),
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    drop(conn);
    server.join().unwrap();
    e
}

#[test]
fn delivery_frames_out_of_order_and_server_cancels_are_errors() {
    let props = BasicProperties::default();
    let whole = delivery_frames(1, &props, b"abc");
    let method_bytes = {
        let (_, total) = check(&whole, FRAME_MAX).unwrap().unwrap();
        total
    };
    let header_bytes = {
        let (_, total) = check(&whole[method_bytes..], FRAME_MAX).unwrap().unwrap();
        total
    };
    // A body frame with no delivery before it.
    let e = consume_error(whole[method_bytes + header_bytes..].to_vec());
    assert!(
        e.to_string().contains("body frame outside a delivery"),
        "{e}"
    );
    // A content header with no basic.deliver.
    let e = consume_error(whole[method_bytes..].to_vec());
    assert!(
        e.to_string().contains("content header frame outside"),
        "{e}"
    );
    // A second basic.deliver before the first one's content.
    let mut twice = whole[..method_bytes].to_vec();
    twice.extend_from_slice(&whole);
    let e = consume_error(twice);
    assert!(e.to_string().contains("middle of another delivery"), "{e}");
    // More body than the header announced.
    let mut long = Vec::new();
    write_method(
        &mut long,
        1,
        &AmqpMethod::BasicDeliver {
            consumer_tag: "ctag".into(),
            delivery_tag: 1,
            redelivered: false,
            exchange: String::new(),
            routing_key: "q".into(),
        },
    );
    crate::amqp::write_content_header(&mut long, 1, BASIC_CLASS_ID, &props, 2);
    crate::amqp::write_body_frames(&mut long, 1, b"abc", FRAME_MAX);
    let e = consume_error(long);
    assert!(
        e.to_string().contains("3 body bytes for a body of 2"),
        "{e}"
    );
    // A content header of another class.
    let mut other = whole[..method_bytes].to_vec();
    crate::amqp::write_content_header(&mut other, 1, 50, &props, 0);
    let e = consume_error(other);
    assert!(e.to_string().contains("class 50"), "{e}");
    // The server cancels the consumer (its queue was deleted).
    let mut cancel = Vec::new();
    write_method(
        &mut cancel,
        1,
        &AmqpMethod::BasicCancel {
            consumer_tag: "ctag".into(),
            no_wait: true,
        },
    );
    let e = consume_error(cancel);
    assert!(
        matches!(&e, AmqpClientError::ConsumerCancelled { consumer_tag } if consumer_tag == "ctag"),
        "{e:?}"
    );
    // The server closes the connection in the middle of a delivery.
    let mut close = whole[..method_bytes].to_vec();
    write_method(
        &mut close,
        0,
        &AmqpMethod::ConnectionClose {
            reply_code: 320,
            reply_text: "CONNECTION_FORCED - shutdown".into(),
            class_id: 0,
            method_id: 0,
        },
    );
    let e = consume_error(close);
    assert_eq!(e.reply_code(), Some(320));
}

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn mangled_server_input_is_an_error_or_ignored_never_a_panic() {
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    let mut valid = delivery_frames(1, &BasicProperties::default(), &[7; 5000]);
    valid.extend(delivery_frames(2, &BasicProperties::default(), b""));
    for round in 0..40 {
        let mut frames = valid.clone();
        for _ in 0..1 + rng.below(6) {
            match rng.below(3) {
                0 => {
                    let at = rng.below(frames.len());
                    frames[at] = rng.next() as u8;
                }
                1 => frames.truncate(rng.below(frames.len()) + 1),
                _ => {
                    let at = rng.below(frames.len());
                    frames.insert(at, rng.next() as u8);
                }
            }
        }
        let (mut conn, server) = connected(move |p| {
            p.recv();
            p.send(
                1,
                AmqpMethod::BasicConsumeOk {
                    consumer_tag: "ctag".into(),
                },
            );
            // The client may give up (and hang up) before it has all.
            let _ = p.stream.write_all(&frames);
            // Then hang up: every round ends, with an error at the latest.
        });
        conn.basic_consume("q", ConsumeOptions::default()).unwrap();
        let mut delivered = 0;
        let end = loop {
            match conn.poll_deliveries(Duration::from_secs(5), |_| {}) {
                Ok(0) => panic!("round {round}: a poll timed out"),
                Ok(n) => delivered += n,
                Err(e) => break e,
            }
        };
        assert!(delivered <= 2, "round {round}: {delivered} deliveries");
        let _ = end.to_string();
        drop(conn);
        server.join().unwrap();
    }
}

#[test]
fn a_frames_result_stays_small_so_the_delivery_path_does_not_copy_a_method_per_frame() {
    // Every frame of every delivery returns this; with the 104-byte method inline it was
    // 112 bytes and the consumer spent ~10% more time per message.
    let bytes = std::mem::size_of::<Result<super::incoming::Dispatched, AmqpClientError>>();
    assert!(bytes <= 48, "{bytes} bytes");
}
