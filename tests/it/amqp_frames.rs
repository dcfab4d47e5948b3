//! The AMQP 0-9-1 listener against malformed and out-of-order input (issue 5,
//! acceptance): a wrong protocol header gets AMQP's header back and a close; a wrong frame
//! end, an oversized frame, a method on a channel that is not open and a content body
//! without its header each get the specification's connection error; other connections
//! are unaffected and nothing panics.

use crate::common;

use common::amqp_raw::{Raw, FRAME_MAX};
use common::TestServer;
use relaymq::amqp::{
    check, write_content, write_method, AmqpMethod, BASIC_CLASS_ID, PROTOCOL_HEADER,
};
use relaymq::client::Connection;
use relaymq::types::{BasicProperties, FieldTable};
use std::io::Read;
use std::net::SocketAddr;

fn amqp_addr(server: &TestServer) -> SocketAddr {
    server.handle.amqp_addr().expect("AMQP listener on")
}

/// The server still serves others: a native client and a fresh AMQP connection work.
fn assert_still_serving(server: &TestServer) {
    let conn = Connection::connect(&server.addr_string()).expect("native connect");
    conn.close().unwrap();
    let mut r = Raw::open(amqp_addr(server));
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
}

#[test]
fn a_wrong_protocol_header_gets_amqps_header_back_and_a_close() {
    let server = TestServer::start();
    for wrong in [
        &b"AMQP\x00\x00\x08\x00"[..],
        b"GET / HTTP/1.1\r\n\r\n",
        b"AMQP\x01\x01\x00\x0a",
    ] {
        let mut r = Raw::connect(amqp_addr(&server));
        r.send(wrong);
        let mut got = Vec::new();
        r.s.read_to_end(&mut got).expect("read until close");
        assert_eq!(got, PROTOCOL_HEADER, "answer to {wrong:?}");
    }
    assert_still_serving(&server);
}

#[test]
fn a_wrong_frame_end_is_a_frame_error() {
    let server = TestServer::start();
    let mut r = Raw::open(amqp_addr(&server));
    let mut frame = Vec::new();
    write_method(&mut frame, 1, &AmqpMethod::ChannelOpen {});
    let last = frame.len() - 1;
    frame[last] = 0x00;
    r.send(&frame);
    r.expect_connection_close(501);
    assert_still_serving(&server);
}

#[test]
fn an_oversized_frame_is_a_frame_error() {
    let server = TestServer::start();
    let mut r = Raw::open(amqp_addr(&server));
    // A header announcing a payload far beyond the negotiated frame size.
    r.send(&[1, 0, 1, 0x10, 0, 0, 0]);
    r.expect_connection_close(501);
    assert_still_serving(&server);
}

#[test]
fn a_method_on_a_channel_that_is_not_open_is_a_channel_error() {
    let server = TestServer::start();
    let mut r = Raw::open(amqp_addr(&server));
    r.method(
        5,
        &AmqpMethod::QueueDeclare {
            queue: "q".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    let text = r.expect_connection_close(504);
    assert!(text.starts_with("CHANNEL_ERROR - "), "{text}");
    assert_still_serving(&server);
}

#[test]
fn a_content_body_without_its_header_is_an_unexpected_frame() {
    let server = TestServer::start();
    let mut r = Raw::open(amqp_addr(&server));
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(
        1,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        },
    );
    // The body frame only: cut the header frame out of a full content.
    let mut content = Vec::new();
    write_content(
        &mut content,
        1,
        BASIC_CLASS_ID,
        &BasicProperties::default(),
        b"body",
        FRAME_MAX,
    );
    let (_, header_len) = check(&content, FRAME_MAX).unwrap().unwrap();
    r.send(&content[header_len..]);
    r.expect_connection_close(505);
    assert_still_serving(&server);
}

#[test]
fn channel_errors_close_only_the_channel_with_rabbitmqs_text() {
    let server = TestServer::start();
    let mut r = Raw::open(amqp_addr(&server));
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(
        1,
        &AmqpMethod::QueueDeclare {
            queue: "missing".into(),
            passive: true,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    match r.recv() {
        Some((
            1,
            AmqpMethod::ChannelClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            },
        )) => {
            assert_eq!((reply_code, class_id, method_id), (404, 50, 10));
            assert_eq!(reply_text, "NOT_FOUND - no queue 'missing' in vhost '/'");
        }
        other => panic!("expected channel.close, got {other:?}"),
    }
    // Methods on the closing channel are ignored until close-ok; the connection serves on.
    r.method(1, &AmqpMethod::ChannelCloseOk {});
    r.method(2, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((2, AmqpMethod::ChannelOpenOk {}))));
}

#[test]
fn garbage_after_the_handshake_never_takes_the_server_down() {
    let server = TestServer::start();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..50 {
        let mut r = Raw::open(amqp_addr(&server));
        let mut junk = vec![0u8; 64];
        for b in junk.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = seed as u8;
        }
        // A plausible method frame header, then noise.
        let mut frame = vec![1, 0, 1, 0, 0, 0, junk.len() as u8];
        frame.extend_from_slice(&junk);
        frame.push(0xCE);
        r.send(&frame);
        // Whatever the noise decodes to, the answer is a close or nothing, never a hang.
        let _ = r.recv();
    }
    assert_still_serving(&server);
}

#[test]
fn a_method_on_a_channel_closed_before_is_a_channel_error() {
    let server = TestServer::start();
    let mut r = Raw::open(amqp_addr(&server));
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(
        1,
        &AmqpMethod::ChannelClose {
            reply_code: 200,
            reply_text: String::new(),
            class_id: 0,
            method_id: 0,
        },
    );
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelCloseOk {}))));
    r.method(
        1,
        &AmqpMethod::BasicQos {
            prefetch_size: 0,
            prefetch_count: 1,
            global: false,
        },
    );
    let text = r.expect_connection_close(504);
    assert!(text.starts_with("CHANNEL_ERROR - "), "{text}");
    assert_still_serving(&server);
}
