//! End-to-end over the raw protocol: open, declare, publish, consume, ack.

use crate::common;

use common::{Raw, TestServer};
use relaymq::native::{Method, PublishMessage};
use relaymq::types::{BasicProperties, FieldTable};

#[test]
fn publish_then_consume_over_raw_frames() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    let (_, _, declared) = raw.call(
        1,
        Method::QueueDeclare {
            queue: "hello".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(matches!(declared, Method::QueueDeclareOk { ref queue, .. } if queue == "hello"));
    raw.send(
        1,
        0,
        &Method::Publish {
            messages: vec![PublishMessage {
                exchange: String::new(),
                routing_key: "hello".into(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: b"hi".to_vec(),
            }],
        },
    );
    let (_, _, ok) = raw.call(
        1,
        Method::BasicConsume {
            queue: "hello".into(),
            consumer_tag: "c1".into(),
            no_ack: false,
            exclusive: false,
            arguments: FieldTable::new(),
        },
    );
    assert_eq!(
        ok,
        Method::BasicConsumeOk {
            consumer_tag: "c1".into()
        }
    );
    let (_, _, deliver) = raw.recv().unwrap();
    match deliver {
        Method::Deliver { deliveries } => {
            assert_eq!(deliveries.len(), 1);
            assert_eq!(deliveries[0].body, b"hi");
            assert_eq!(deliveries[0].delivery_tag, 1);
            assert!(!deliveries[0].redelivered);
        }
        other => panic!("expected deliver, got {other:?}"),
    }
    raw.send(
        1,
        0,
        &Method::Ack {
            delivery_tag: 1,
            multiple: false,
        },
    );
    assert_eq!(
        raw.call(
            0,
            Method::Close {
                reply_code: 200,
                reply_text: String::new(),
                method_id: 0
            }
        )
        .2,
        Method::CloseOk
    );
}
