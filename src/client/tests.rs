//! The client against a scripted fake server on a loopback socket: correlation, routing of
//! pushes, and the failure paths a real server rarely shows on demand.

use super::io::{FrameReader, Incoming, Writer};
use super::*;
use crate::native::{Method, PROTOCOL_HEADER};
use crate::types::BasicProperties;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

/// The server's side of one connection.
struct Peer {
    stream: TcpStream,
    frames: FrameReader,
    writer: Writer,
}

impl Peer {
    /// The next method from the client (heartbeats skipped).
    fn recv(&mut self) -> (u16, u32, Method) {
        loop {
            match self.frames.next(&mut self.stream).expect("client frame") {
                Incoming::Heartbeat => {}
                Incoming::Method(ch, id, m) => return (ch, id, m),
            }
        }
    }

    fn send(&mut self, channel: u16, request_id: u32, m: Method) {
        self.writer.send(channel, request_id, &m).expect("send");
    }

    /// Answers `channel.open` and returns the channel number.
    fn accept_channel(&mut self) -> u16 {
        let (ch, id, m) = self.recv();
        assert_eq!(m, Method::ChannelOpen);
        self.send(ch, id, Method::Ok);
        ch
    }

    /// Answers a client `close` on channel 0.
    fn accept_close(&mut self) {
        let (ch, id, m) = self.recv();
        assert!(
            matches!(
                m,
                Method::Close {
                    reply_code: 200,
                    ..
                }
            ),
            "{m:?}"
        );
        self.send(ch, id, Method::CloseOk);
    }
}

/// Starts a one-connection fake server; with `open`, it answers `connection.open` first.
fn fake_server(open: bool, script: impl FnOnce(Peer) + Send + 'static) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut header = [0; 8];
        stream.read_exact(&mut header).unwrap();
        assert_eq!(header, PROTOCOL_HEADER);
        let mut peer = Peer {
            writer: Writer::new(stream.try_clone().unwrap(), 4096),
            frames: FrameReader::new(4096),
            stream,
        };
        if open {
            let (ch, id, m) = peer.recv();
            assert!(
                matches!(m, Method::Open { ref user, .. } if user == "guest"),
                "{m:?}"
            );
            peer.send(
                ch,
                id,
                Method::OpenOk {
                    frame_max: 4096,
                    heartbeat_s: 0,
                    channel_max: 8,
                    server_version: "fake".into(),
                    connection_id: 7,
                },
            );
        }
        script(peer);
    });
    (addr, handle)
}

fn connect(addr: &str) -> Result<Connection, ClientError> {
    Connection::connect_with(ConnectOptions {
        heartbeat_s: 0,
        timeout: Duration::from_secs(5),
        ..ConnectOptions::new(addr)
    })
}

#[test]
fn request_reply_channel_close_and_connection_close() {
    let (addr, server) = fake_server(true, |mut p| {
        let ch = p.accept_channel();
        let (c, id, m) = p.recv();
        assert_eq!(c, ch);
        assert!(matches!(m, Method::QueueDeclare { ref queue, .. } if queue.is_empty()));
        let ok = Method::QueueDeclareOk {
            queue: "amq.gen-1".into(),
            message_count: 3,
            consumer_count: 0,
        };
        p.send(ch, id, ok);
        let (c, id, m) = p.recv();
        assert!(matches!(
            m,
            Method::ChannelClose {
                reply_code: 200,
                ..
            }
        ));
        p.send(c, id, Method::CloseOk);
        p.accept_close();
    });
    let conn = connect(&addr).unwrap();
    assert_eq!(conn.connection_id(), 7);
    assert_eq!(conn.server_version(), "fake");
    let ch = conn.open_channel().unwrap();
    assert_eq!(ch.id(), 1);
    let ok = ch
        .queue_declare("", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!((ok.queue.as_str(), ok.message_count), ("amq.gen-1", 3));
    ch.close().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

#[test]
fn refused_credentials_are_an_auth_error() {
    let (addr, server) = fake_server(false, |mut p| {
        let (_, id, _) = p.recv();
        let close = Method::Close {
            reply_code: 403,
            reply_text: "ACCESS_REFUSED - login refused for user 'guest'".into(),
            method_id: 1,
        };
        p.send(0, id, close);
        assert_eq!(p.recv().2, Method::CloseOk);
    });
    let err = connect(&addr).unwrap_err();
    assert!(
        matches!(err, ClientError::Auth { code: 403, .. }),
        "{err:?}"
    );
    server.join().unwrap();
}

#[test]
fn a_refused_request_closes_the_channel_with_the_servers_code() {
    let (addr, server) = fake_server(true, |mut p| {
        let ch = p.accept_channel();
        let (_, id, _) = p.recv();
        let close = Method::ChannelClose {
            reply_code: 404,
            reply_text: "no queue 'x' in vhost '/'".into(),
            method_id: 0x0044,
        };
        p.send(ch, id, close);
        assert_eq!(p.recv(), (ch, id, Method::CloseOk));
        p.accept_close();
    });
    let conn = connect(&addr).unwrap();
    let ch = conn.open_channel().unwrap();
    let err = ch.queue_purge("x").unwrap_err();
    assert_eq!(
        err.to_string(),
        "NOT_FOUND (404): no queue 'x' in vhost '/'"
    );
    let again = ch.queue_purge("x").unwrap_err();
    assert_eq!(again.reply_code(), Some(404));
    assert!(!ch.is_open());
    ch.close().unwrap(); // already reported to the request that caused it
    conn.close().unwrap();
    server.join().unwrap();
}

fn delivery(tag: u64, body: &str) -> Delivery {
    Delivery {
        consumer_tag: "ctag".into(),
        delivery_tag: tag,
        redelivered: false,
        exchange: String::new(),
        routing_key: "q".into(),
        properties: BasicProperties::default(),
        body: body.as_bytes().to_vec(),
    }
}

#[test]
fn deliveries_right_after_consume_ok_reach_the_consumer_until_the_server_cancels() {
    let (addr, server) = fake_server(true, |mut p| {
        let ch = p.accept_channel();
        let (_, id, m) = p.recv();
        assert!(matches!(m, Method::BasicConsume { .. }));
        p.send(
            ch,
            id,
            Method::BasicConsumeOk {
                consumer_tag: "ctag".into(),
            },
        );
        let deliveries = vec![delivery(1, "a"), delivery(2, "b")];
        p.send(ch, 0, Method::Deliver { deliveries });
        let cancel = Method::BasicCancel {
            consumer_tag: "ctag".into(),
        };
        p.send(ch, 0, cancel);
        let (_, _, m) = p.recv();
        assert_eq!(
            m,
            Method::Ack {
                delivery_tag: 2,
                multiple: true
            }
        );
        let (c, id, _) = p.recv();
        p.send(c, id, Method::CloseOk);
        p.accept_close();
    });
    let conn = connect(&addr).unwrap();
    let ch = conn.open_channel().unwrap();
    let consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    assert_eq!(consumer.tag(), "ctag");
    let bodies: Vec<Vec<u8>> = consumer.iter().map(|d| d.body).collect();
    assert_eq!(bodies, [b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(consumer.recv().unwrap(), ConsumerEvent::Cancelled);
    consumer.cancel().unwrap(); // already cancelled by the server: nothing is sent
    ch.basic_ack(2, true).unwrap();
    ch.close().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

#[test]
fn confirms_nacks_and_returns() {
    let (addr, server) = fake_server(true, |mut p| {
        let ch = p.accept_channel();
        let (_, id, m) = p.recv();
        assert_eq!(m, Method::ConfirmSelect);
        p.send(ch, id, Method::Ok);
        let mut seen = 0;
        while seen < 3 {
            match p.recv().2 {
                Method::Publish { messages } => seen += messages.len(),
                other => panic!("{other:?}"),
            }
        }
        let ret = Method::Return {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "x".into(),
            routing_key: "nowhere".into(),
            properties: Box::default(),
            body: b"m3".to_vec(),
        };
        p.send(ch, 0, ret);
        p.send(
            ch,
            0,
            Method::Ack {
                delivery_tag: 2,
                multiple: true,
            },
        );
        let nack = Method::Nack {
            delivery_tag: 3,
            multiple: false,
            requeue: false,
        };
        p.send(ch, 0, nack);
        let (c, id, _) = p.recv();
        p.send(c, id, Method::CloseOk);
        p.accept_close();
    });
    let conn = connect(&addr).unwrap();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let msgs: Vec<PublishMessage> = (1..=3)
        .map(|i| PublishMessage {
            exchange: "x".into(),
            routing_key: if i == 3 { "nowhere" } else { "k" }.into(),
            mandatory: true,
            properties: BasicProperties::default(),
            body: format!("m{i}").into_bytes(),
        })
        .collect();
    ch.publish_batch(&msgs).unwrap();
    assert!(!ch.wait_for_confirms(Duration::from_secs(5)).unwrap());
    let returned = ch.returns().try_recv().unwrap();
    assert_eq!(
        (returned.reply_code, returned.body.as_slice()),
        (312, &b"m3"[..])
    );
    ch.close().unwrap();
    conn.close().unwrap();
    server.join().unwrap();
}

#[test]
fn a_request_without_reply_times_out_and_a_server_close_fails_the_next() {
    let (addr, server) = fake_server(true, |mut p| {
        let _ch = p.accept_channel();
        let _ignored = p.recv();
        let (_, id, _) = p.recv();
        let close = Method::Close {
            reply_code: 320,
            reply_text: "CONNECTION_FORCED - broker shutdown".into(),
            method_id: 0,
        };
        p.send(0, id, close);
        assert_eq!(p.recv().2, Method::CloseOk);
    });
    let conn = Connection::connect_with(ConnectOptions {
        heartbeat_s: 0,
        timeout: Duration::from_millis(300),
        ..ConnectOptions::new(&addr)
    })
    .unwrap();
    let ch = conn.open_channel().unwrap();
    assert!(ch.basic_qos(10, false).unwrap_err().is_timeout());
    let err = ch.basic_recover(true).unwrap_err();
    assert!(
        matches!(err, ClientError::ConnectionClosed { code: 320, .. }),
        "{err:?}"
    );
    assert!(!conn.is_open());
    server.join().unwrap();
    drop(ch);
    assert_eq!(conn.close().unwrap_err().reply_code(), Some(320));
}
