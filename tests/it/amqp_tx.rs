//! AMQP 0-9-1 transactions (issue 5, tx.select/commit/rollback with RabbitMQ's
//! semantics): publishes and acks on a transactional channel take effect at commit and
//! vanish at rollback; a channel is never both transactional and in confirm mode.

use crate::common;

use common::amqp_raw::{Raw, FRAME_MAX};
use common::TestServer;
use relaymq::amqp::{write_content, AmqpMethod, BASIC_CLASS_ID};
use relaymq::types::{BasicProperties, FieldTable};

fn open_channel(r: &mut Raw, ch: u16) {
    r.method(ch, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((c, AmqpMethod::ChannelOpenOk {})) if c == ch));
}

fn call(r: &mut Raw, ch: u16, m: AmqpMethod) -> AmqpMethod {
    r.method(ch, &m);
    match r.recv() {
        Some((c, reply)) if c == ch => reply,
        other => panic!("{} got {other:?}", m.name()),
    }
}

fn publish(r: &mut Raw, ch: u16, body: &[u8]) {
    r.method(
        ch,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: "t".into(),
            mandatory: false,
            immediate: false,
        },
    );
    let mut out = Vec::new();
    write_content(
        &mut out,
        ch,
        BASIC_CLASS_ID,
        &BasicProperties::default(),
        body,
        FRAME_MAX,
    );
    r.send(&out);
}

fn ready(r: &mut Raw, ch: u16) -> u32 {
    match call(
        r,
        ch,
        AmqpMethod::QueueDeclare {
            queue: "t".into(),
            passive: true,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    ) {
        AmqpMethod::QueueDeclareOk { message_count, .. } => message_count,
        other => panic!("{other:?}"),
    }
}

#[test]
fn publishes_and_acks_take_effect_at_commit_and_vanish_at_rollback() {
    let server = TestServer::start();
    let mut r = Raw::open(server.handle.amqp_addr().expect("AMQP on"));
    open_channel(&mut r, 1);
    call(
        &mut r,
        1,
        AmqpMethod::QueueDeclare {
            queue: "t".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    );
    assert_eq!(
        call(&mut r, 1, AmqpMethod::TxSelect {}),
        AmqpMethod::TxSelectOk {}
    );
    publish(&mut r, 1, b"a");
    publish(&mut r, 1, b"b");
    assert_eq!(ready(&mut r, 1), 0, "held until commit");
    assert_eq!(
        call(&mut r, 1, AmqpMethod::TxCommit {}),
        AmqpMethod::TxCommitOk {}
    );
    assert_eq!(ready(&mut r, 1), 2);
    publish(&mut r, 1, b"c");
    assert_eq!(
        call(&mut r, 1, AmqpMethod::TxRollback {}),
        AmqpMethod::TxRollbackOk {}
    );
    assert_eq!(ready(&mut r, 1), 2, "the rolled-back publish is gone");

    // An ack rolled back leaves the delivery unacked; acked and committed, it is gone.
    let tag = match call(
        &mut r,
        1,
        AmqpMethod::BasicGet {
            queue: "t".into(),
            no_ack: false,
        },
    ) {
        AmqpMethod::BasicGetOk { delivery_tag, .. } => delivery_tag,
        other => panic!("{other:?}"),
    };
    r.method(
        1,
        &AmqpMethod::BasicAck {
            delivery_tag: tag,
            multiple: false,
        },
    );
    call(&mut r, 1, AmqpMethod::TxRollback {});
    r.method(
        1,
        &AmqpMethod::BasicAck {
            delivery_tag: tag,
            multiple: false,
        },
    );
    assert_eq!(
        call(&mut r, 1, AmqpMethod::TxCommit {}),
        AmqpMethod::TxCommitOk {}
    );
    // Closing the channel requeues only what is still unacked: nothing.
    assert_eq!(
        call(
            &mut r,
            1,
            AmqpMethod::ChannelClose {
                reply_code: 200,
                reply_text: String::new(),
                class_id: 0,
                method_id: 0,
            }
        ),
        AmqpMethod::ChannelCloseOk {}
    );
    open_channel(&mut r, 2);
    assert_eq!(ready(&mut r, 2), 1);
}

#[test]
fn tx_and_confirm_modes_exclude_each_other_and_commit_needs_select() {
    let server = TestServer::start();
    let mut r = Raw::open(server.handle.amqp_addr().expect("AMQP on"));
    let closed = |reply: AmqpMethod| match reply {
        AmqpMethod::ChannelClose {
            reply_code,
            reply_text,
            ..
        } => (reply_code, reply_text),
        other => panic!("expected channel.close, got {other:?}"),
    };
    open_channel(&mut r, 1);
    call(&mut r, 1, AmqpMethod::TxSelect {});
    assert_eq!(
        closed(call(&mut r, 1, AmqpMethod::ConfirmSelect { nowait: false })),
        (
            406,
            "PRECONDITION_FAILED - cannot switch from tx to confirm mode".into()
        )
    );
    open_channel(&mut r, 2);
    call(&mut r, 2, AmqpMethod::ConfirmSelect { nowait: false });
    assert_eq!(
        closed(call(&mut r, 2, AmqpMethod::TxSelect {})),
        (
            406,
            "PRECONDITION_FAILED - cannot switch from confirm to tx mode".into()
        )
    );
    open_channel(&mut r, 3);
    assert_eq!(
        closed(call(&mut r, 3, AmqpMethod::TxCommit {})),
        (
            406,
            "PRECONDITION_FAILED - channel is not transactional".into()
        )
    );
}
