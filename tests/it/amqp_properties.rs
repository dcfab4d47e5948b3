//! Message properties over AMQP 0-9-1 as RabbitMQ treats them: the deprecated `cluster-id`
//! is carried, and a `user_id` must be the authenticated user's (validated user-ID).

use crate::common;

use common::amqp_raw::{Raw, FRAME_MAX};
use common::TestServer;
use relaymq::amqp::{write_content, AmqpMethod, BASIC_CLASS_ID};
use relaymq::client::Connection;
use relaymq::types::{BasicProperties, FieldTable};

fn publish(r: &mut Raw, ch: u16, properties: &BasicProperties) {
    r.method(
        ch,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: "p".into(),
            mandatory: false,
            immediate: false,
        },
    );
    let mut out = Vec::new();
    write_content(&mut out, ch, BASIC_CLASS_ID, properties, b"m", FRAME_MAX);
    r.send(&out);
}

#[test]
fn cluster_id_is_carried_and_a_foreign_user_id_is_refused() {
    let server = TestServer::start();
    let mut r = Raw::open(server.handle.amqp_addr().expect("AMQP on"));
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(
        1,
        &AmqpMethod::QueueDeclare {
            queue: "p".into(),
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
    let props = BasicProperties {
        cluster_id: Some("c1".into()),
        user_id: Some("guest".into()),
        ..BasicProperties::default()
    };
    publish(&mut r, 1, &props);
    publish(
        &mut r,
        1,
        &BasicProperties {
            user_id: Some("bob".into()),
            ..BasicProperties::default()
        },
    );
    match r.recv() {
        Some((
            1,
            AmqpMethod::ChannelClose {
                reply_code: 406,
                reply_text,
                class_id: 60,
                method_id: 40,
            },
        )) => assert_eq!(
            reply_text,
            "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was \
             'guest'"
        ),
        other => panic!("expected channel.close 406, got {other:?}"),
    }
    // Only the first arrived, with both properties, read over the native protocol.
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let m = ch.basic_get("p", true).unwrap().expect("the valid one");
    assert_eq!(m.properties, props);
    assert!(ch.basic_get("p", true).unwrap().is_none());
}
