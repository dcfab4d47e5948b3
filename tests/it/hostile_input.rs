//! Garbage, oversized and broken input closes only the offending connection (or only
//! the channel, for an oversized message), never the server.

use crate::common;

use common::{Raw, TestServer};
use relaymq::native::{Method, PublishMessage, PROTOCOL_HEADER};
use relaymq::types::BasicProperties;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn publish(raw: &mut Raw, ch: u16, queue: &str, body: Vec<u8>) {
    raw.send(
        ch,
        0,
        &Method::Publish {
            messages: vec![PublishMessage {
                exchange: String::new(),
                routing_key: queue.into(),
                mandatory: false,
                properties: BasicProperties::default(),
                body,
            }],
        },
    );
}

/// A healthy connection still works: declare, publish, get.
fn assert_server_healthy(server: &TestServer) {
    let mut raw = Raw::connect(server.addr());
    common::raw_channel_with_queue(&mut raw, 1, "health");
    publish(&mut raw, 1, "health", b"ok".to_vec());
    let (_, _, got) = raw.call(
        1,
        Method::BasicGet {
            queue: "health".into(),
            no_ack: true,
        },
    );
    assert!(
        matches!(got, Method::GetOk { ref body, .. } if body == b"ok"),
        "{got:?}"
    );
}

fn close_code(methods: &[Method]) -> Option<u16> {
    methods.iter().find_map(|m| match m {
        Method::Close { reply_code, .. } => Some(*reply_code),
        _ => None,
    })
}

#[test]
fn garbage_instead_of_the_protocol_header_gets_our_header_and_a_close() {
    let server = TestServer::start();
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(
        got, PROTOCOL_HEADER,
        "server answers with its own header, then closes"
    );
    assert_server_healthy(&server);
}

#[test]
fn garbage_frames_close_that_connection_with_frame_error_while_another_keeps_working() {
    let server = TestServer::start();
    let mut bystander = Raw::connect(server.addr());
    common::raw_channel_with_queue(&mut bystander, 1, "bystander");

    let mut raw = Raw::connect(server.addr());
    // Unknown frame type 0x42.
    raw.stream
        .write_all(&[0, 0, 0, 2, 0x42, 0, 0, 1, 0xde, 0xad])
        .unwrap();
    raw.stream.write_all(&[0xff; 64]).unwrap();
    let rest = raw.drain_to_eof();
    assert_eq!(close_code(&rest), Some(501), "{rest:?}");

    publish(&mut bystander, 1, "bystander", b"still here".to_vec());
    let (_, _, got) = bystander.call(
        1,
        Method::BasicGet {
            queue: "bystander".into(),
            no_ack: true,
        },
    );
    assert!(
        matches!(got, Method::GetOk { ref body, .. } if body == b"still here"),
        "{got:?}"
    );
}

#[test]
fn an_oversized_length_prefix_closes_that_connection_with_frame_error() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    raw.stream
        .write_all(&[0x7f, 0xff, 0xff, 0xff, 1, 0, 0, 1])
        .unwrap();
    let rest = raw.drain_to_eof();
    assert_eq!(close_code(&rest), Some(501), "{rest:?}");
    assert_server_healthy(&server);
}

#[test]
fn a_malformed_method_closes_the_connection_with_syntax_error() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    // Method frame on channel 1 whose payload is an unknown method id 0x7777.
    raw.stream
        .write_all(&[0, 0, 0, 6, 1, 0, 0, 1, 0x77, 0x77, 0, 0, 0, 1])
        .unwrap();
    let rest = raw.drain_to_eof();
    assert_eq!(close_code(&rest), Some(502), "{rest:?}");
    assert_server_healthy(&server);
}

#[test]
fn random_bytes_after_the_header_never_take_the_server_down() {
    let server = TestServer::start();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..40 {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&PROTOCOL_HEADER).unwrap();
        let mut junk = vec![0u8; 64 + round * 13];
        for b in junk.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = seed as u8;
        }
        // Keep frame sizes small so the server sees many frames, not one giant one.
        junk[0] = 0;
        junk[1] = 0;
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    assert_server_healthy(&server);
}

#[test]
fn a_message_over_the_maximum_is_a_406_channel_error_and_the_connection_survives() {
    let server = TestServer::start_with(|c| c.broker.limits.message_bytes_max = 256 * 1024);
    let mut raw = Raw::connect(server.addr());
    common::raw_channel_with_queue(&mut raw, 1, "big");
    // Just over the limit: decoded, refused by the core.
    publish(&mut raw, 1, "big", vec![7; 256 * 1024 + 1]);
    let (ch, _, m) = raw.recv().unwrap();
    assert_eq!(ch, 1);
    assert!(
        matches!(m, Method::ChannelClose { reply_code: 406, ref reply_text, .. } if reply_text.contains("larger than configured max size")),
        "{m:?}"
    );
    raw.send(1, 0, &Method::CloseOk);

    // Far over the limit (past the reassembly bound): discarded while it streams in.
    common::raw_channel_with_queue(&mut raw, 2, "big");
    publish(&mut raw, 2, "big", vec![7; 8 * 1024 * 1024]);
    let (ch, _, m) = raw.recv().unwrap();
    assert_eq!(ch, 2);
    assert!(
        matches!(
            m,
            Method::ChannelClose {
                reply_code: 406,
                ..
            }
        ),
        "{m:?}"
    );
    raw.send(2, 0, &Method::CloseOk);

    // The connection is still usable, and a message at the limit goes through.
    common::raw_channel_with_queue(&mut raw, 3, "big");
    publish(&mut raw, 3, "big", vec![1; 256 * 1024]);
    let (_, _, got) = raw.call(
        3,
        Method::BasicGet {
            queue: "big".into(),
            no_ack: true,
        },
    );
    assert!(
        matches!(got, Method::GetOk { ref body, .. } if body.len() == 256 * 1024),
        "{got:?}"
    );
}

#[test]
fn wrong_credentials_get_403_and_a_close() {
    let server = TestServer::start();
    let mut raw = Raw::connect_bare(server.addr());
    raw.stream.write_all(&PROTOCOL_HEADER).unwrap();
    let (_, _, m) = raw.call(
        0,
        Method::Open {
            user: "guest".into(),
            password: "wrong".into(),
            vhost: "/".into(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: "t".into(),
        },
    );
    assert!(
        matches!(
            m,
            Method::Close {
                reply_code: 403,
                ..
            }
        ),
        "{m:?}"
    );
    assert!(raw.drain_to_eof().is_empty());
}

#[test]
fn an_unknown_vhost_gets_402() {
    let server = TestServer::start();
    let mut raw = Raw::connect_bare(server.addr());
    raw.stream.write_all(&PROTOCOL_HEADER).unwrap();
    let (_, _, m) = raw.call(
        0,
        Method::Open {
            user: "guest".into(),
            password: "guest".into(),
            vhost: "nope".into(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: "t".into(),
        },
    );
    assert!(
        matches!(
            m,
            Method::Close {
                reply_code: 402,
                ..
            }
        ),
        "{m:?}"
    );
}

#[test]
fn a_silent_client_gets_heartbeats_then_is_closed_after_two_missed_intervals() {
    let server = TestServer::start_with(|c| c.broker.limits.heartbeat_s = 1);
    // Taken before the handshake: the server counts its two intervals from the last bytes
    // it read (connection.open), which come after this and before open-ok arrives.
    let started = Instant::now();
    let mut raw = Raw::connect(server.addr());
    let mut heartbeats = 0;
    let mut buf = [0u8; 64];
    loop {
        match raw.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Heartbeat frame: type 2, empty payload.
                heartbeats += buf[..n]
                    .chunks(8)
                    .filter(|f| f.len() == 8 && f[4] == 2)
                    .count();
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read: {e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "server never closed the silent connection"
        );
    }
    assert!(heartbeats >= 1, "server sent no heartbeat");
    assert!(started.elapsed() >= Duration::from_secs(2));
}

#[test]
fn a_client_that_never_reads_is_disconnected_and_others_keep_working() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    raw.stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // Unroutable mandatory messages come back as basic.return with their body: the
    // server's replies grow while the client does not read them.
    let body = vec![0u8; 512 * 1024];
    let started = Instant::now();
    let mut disconnected = false;
    for _ in 0..400 {
        let mut out = Vec::new();
        relaymq::native::frame::write_method(&mut out, 1, raw.frame_max, |b| {
            Method::Publish {
                messages: vec![PublishMessage {
                    exchange: String::new(),
                    routing_key: "no-such-queue".into(),
                    mandatory: true,
                    properties: BasicProperties::default(),
                    body: body.clone(),
                }],
            }
            .encode(0, b)
        });
        if raw.stream.write_all(&out).is_err() {
            disconnected = true;
            break;
        }
    }
    if !disconnected {
        // Everything was written; the server must still cut us off once it has the data.
        raw.stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let mut probe = Vec::new();
        relaymq::native::frame::write_method(&mut probe, 1, raw.frame_max, |b| {
            Method::ChannelOpen.encode(9, b)
        });
        for _ in 0..50 {
            if raw.stream.write_all(&probe).is_err() {
                disconnected = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(
        disconnected,
        "client was not disconnected after {:?}",
        started.elapsed()
    );
    assert_server_healthy(&server);
}

#[test]
fn a_client_that_sends_garbage_and_hangs_up_still_gets_the_frame_error_close() {
    let server = TestServer::start();
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&PROTOCOL_HEADER).unwrap();
    s.write_all(&[0xff; 64]).unwrap();
    // Half-close: the server sees end of input right behind the garbage.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    let (header, n) = relaymq::native::frame::check(&got, 1 << 20)
        .unwrap()
        .expect("a whole close frame before the socket closed");
    assert_eq!(header.channel, 0);
    let (_, m) = Method::decode(&got[relaymq::native::FRAME_HEADER_BYTES..n]).unwrap();
    assert!(
        matches!(
            m,
            Method::Close {
                reply_code: 501,
                ..
            }
        ),
        "{m:?}"
    );
    assert_server_healthy(&server);
}

#[test]
fn a_large_payload_before_login_is_refused_without_being_held() {
    let server = TestServer::start();
    let mut raw = Raw::connect_bare(server.addr());
    raw.stream.write_all(&PROTOCOL_HEADER).unwrap();
    // 200 KiB of publish split over 32 KiB frames, before connection.open: over the
    // handshake bound (FRAME_BYTES_HANDSHAKE), so it is counted and dropped, not joined.
    raw.frame_max = 32 * 1024;
    raw.send(
        1,
        1,
        &Method::Publish {
            messages: vec![PublishMessage {
                exchange: String::new(),
                routing_key: "q".into(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: vec![0; 200 * 1024],
            }],
        },
    );
    let mut close = None;
    while let Some((_, _, m)) = raw.recv() {
        if let Method::Close { reply_code, .. } = m {
            close = Some(reply_code);
            break;
        }
    }
    assert_eq!(close, Some(501), "closed with FRAME_ERROR");
    assert_server_healthy(&server);
}
