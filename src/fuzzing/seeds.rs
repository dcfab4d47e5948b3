//! Seed inputs for the fuzz targets: valid encodings made by the real encoders, so a fuzzer
//! starts from inputs that get past the framing into every method, property and record
//! decoder.
//!
//! Each seed is the configuration byte the targets read first (see [`super`]) followed by
//! the bytes under test. `tests/it/fuzz_corpus.rs` writes them to `fuzz/corpus/<target>/`
//! (`cargo test --release --test it -- --ignored fuzz_corpus::write_seed_corpus`) and replays
//! them with the committed corpus.

use crate::amqp::{self, write_content, AmqpMethod, BASIC_CLASS_ID};
use crate::native::frame;
use crate::native::{Delivery, ListKind, Method, PublishMessage};
use crate::storage::ack_log::{self, AckEntry, AckKind};
use crate::storage::record;
use crate::storage::MessageData;
use crate::types::{BasicProperties, FieldTable, FieldValue};

/// Configuration byte: frame size choice (bits 0–1), small bound (bit 2), cut point in
/// 32nds (bits 3–7).
fn config(frame_choice: u8, small_bound: bool, cut_32ths: u8) -> u8 {
    (frame_choice & 3) | (u8::from(small_bound) << 2) | (cut_32ths << 3)
}

/// Frame size choice 0 (64 bytes) and 3 (1 MiB), see `FRAME_MAX_CHOICES`.
const TINY_FRAMES: u8 = 0;
const LARGE_FRAMES: u8 = 3;
const TINY_FRAME_BYTES: u32 = 64;
const LARGE_FRAME_BYTES: u32 = 1024 * 1024;

/// A table with a value of every type, nested table and array included.
pub fn every_field_type() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("x-match".into(), FieldValue::string("all"));
    let mut t = FieldTable::new();
    t.insert("bool".into(), FieldValue::Bool(true));
    t.insert("i8".into(), FieldValue::I8(-2));
    t.insert("u8".into(), FieldValue::U8(200));
    t.insert("i16".into(), FieldValue::I16(-300));
    t.insert("u16".into(), FieldValue::U16(60_000));
    t.insert("i32".into(), FieldValue::I32(-70_000));
    t.insert("u32".into(), FieldValue::U32(4_000_000_000));
    t.insert("i64".into(), FieldValue::I64(-1 << 40));
    t.insert("f32".into(), FieldValue::F32(1.5));
    t.insert("f64".into(), FieldValue::F64(-0.25));
    t.insert("dec".into(), FieldValue::Decimal(2, 31_415));
    t.insert("str".into(), FieldValue::string("héllo"));
    t.insert("bin".into(), FieldValue::Bytes(vec![0, 0xff, 7]));
    t.insert(
        "arr".into(),
        FieldValue::Array(vec![
            FieldValue::Void,
            FieldValue::I32(1),
            FieldValue::Table(inner.clone()),
        ]),
    );
    t.insert("ts".into(), FieldValue::Timestamp(1_700_000_000));
    t.insert("tbl".into(), FieldValue::Table(inner));
    t.insert("void".into(), FieldValue::Void);
    t
}

/// Properties with every property set.
pub fn every_property() -> BasicProperties {
    BasicProperties {
        content_type: Some("application/json".into()),
        content_encoding: Some("gzip".into()),
        headers: Some(every_field_type()),
        delivery_mode: Some(2),
        priority: Some(5),
        correlation_id: Some("corr-1".into()),
        reply_to: Some("amq.gen-reply".into()),
        expiration: Some("60000".into()),
        message_id: Some("msg-1".into()),
        timestamp: Some(1_700_000_000),
        kind: Some("order.created".into()),
        user_id: Some("guest".into()),
        app_id: Some("relaymq-fuzz".into()),
        cluster_id: Some("c1".into()),
    }
}

fn args() -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-message-ttl".into(), FieldValue::I32(60_000));
    t.insert("x-dead-letter-exchange".into(), FieldValue::string("dlx"));
    t
}

/// One of every native method, with realistic fields.
pub fn native_methods() -> Vec<Method> {
    use Method::*;
    let message = |key: &str, props: BasicProperties, body: &[u8]| PublishMessage {
        exchange: "amq.topic".into(),
        routing_key: key.into(),
        mandatory: key == "m",
        properties: props,
        body: body.to_vec(),
    };
    vec![
        Open {
            user: "guest".into(),
            password: "guest".into(),
            vhost: "/".into(),
            frame_max: 131_072,
            heartbeat_s: 60,
            channel_max: 2047,
            client_name: "fuzz".into(),
        },
        OpenOk {
            frame_max: 131_072,
            heartbeat_s: 60,
            channel_max: 2047,
            server_version: "0.1.0".into(),
            connection_id: 7,
        },
        Close {
            reply_code: 200,
            reply_text: "bye".into(),
            method_id: 0,
        },
        CloseOk,
        Ok,
        VhostDeclare { name: "v1".into() },
        VhostDelete { name: "v1".into() },
        List {
            kind: ListKind::Queues,
        },
        ListOk {
            rows: vec![args(), FieldTable::new()],
        },
        Status,
        StatusOk { info: args() },
        ChannelOpen,
        ChannelClose {
            reply_code: 406,
            reply_text: "PRECONDITION_FAILED".into(),
            method_id: 0x40,
        },
        ExchangeDeclare {
            exchange: "x".into(),
            kind: "headers".into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: every_field_type(),
        },
        ExchangeDelete {
            exchange: "x".into(),
            if_unused: true,
        },
        ExchangeBind {
            destination: "d".into(),
            source: "s".into(),
            routing_key: "a.*".into(),
            arguments: args(),
        },
        ExchangeUnbind {
            destination: "d".into(),
            source: "s".into(),
            routing_key: "a.*".into(),
            arguments: FieldTable::new(),
        },
        QueueDeclare {
            queue: "q".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: args(),
        },
        QueueDeclareOk {
            queue: "q".into(),
            message_count: 3,
            consumer_count: 1,
        },
        QueueBind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            arguments: args(),
        },
        QueueUnbind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            arguments: FieldTable::new(),
        },
        QueuePurge { queue: "q".into() },
        QueuePurgeOk { message_count: 9 },
        QueueDelete {
            queue: "q".into(),
            if_unused: false,
            if_empty: true,
        },
        QueueDeleteOk { message_count: 2 },
        BasicQos {
            prefetch_count: 100,
            global: false,
        },
        BasicConsume {
            queue: "q".into(),
            consumer_tag: "ctag".into(),
            no_ack: false,
            exclusive: false,
            arguments: args(),
        },
        BasicConsumeOk {
            consumer_tag: "ctag".into(),
        },
        BasicCancel {
            consumer_tag: "ctag".into(),
        },
        Publish {
            messages: vec![
                message("a", BasicProperties::default(), b"hello"),
                message("m", every_property(), b""),
                message(
                    "p",
                    BasicProperties {
                        delivery_mode: Some(2),
                        ..BasicProperties::default()
                    },
                    &[0x5a; 40],
                ),
            ],
        },
        Return {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            properties: Box::new(every_property()),
            body: b"returned".to_vec(),
        },
        Deliver {
            deliveries: vec![Delivery {
                consumer_tag: "ctag".into(),
                delivery_tag: 1,
                redelivered: true,
                exchange: "x".into(),
                routing_key: "k".into(),
                properties: every_property(),
                body: b"body".to_vec(),
            }],
        },
        BasicGet {
            queue: "q".into(),
            no_ack: true,
        },
        GetOk {
            delivery_tag: 4,
            redelivered: false,
            exchange: String::new(),
            routing_key: "q".into(),
            message_count: 0,
            properties: Box::default(),
            body: b"got".to_vec(),
        },
        GetEmpty,
        Ack {
            delivery_tag: 5,
            multiple: true,
        },
        Nack {
            delivery_tag: 6,
            multiple: false,
            requeue: true,
        },
        Reject {
            delivery_tag: 7,
            requeue: false,
        },
        Recover { requeue: true },
        ConfirmSelect,
    ]
}

fn native_stream(methods: &[Method], frame_max: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, m) in methods.iter().enumerate() {
        // Channel-0 methods: ids below 0x20 and 0x22..=0x27 (docs/protocol.md §7).
        let id = m.id();
        let channel_zero = id < 0x20 || (0x22..=0x27).contains(&id);
        let channel = if channel_zero || matches!(m, Method::Close { .. }) {
            0
        } else {
            1
        };
        frame::write_method(&mut out, channel, frame_max, |b| m.encode(i as u32 + 1, b));
    }
    out
}

/// Seeds for [`super::native_frame`], named.
pub fn native_frame() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let methods = native_methods();
    for m in &methods {
        let mut s = vec![config(LARGE_FRAMES, false, 16)];
        s.extend(native_stream(std::slice::from_ref(m), LARGE_FRAME_BYTES));
        seeds.push((format!("method-{}", m.name()), s));
    }
    let mut all = vec![config(LARGE_FRAMES, false, 13)];
    all.extend(native_stream(&methods, LARGE_FRAME_BYTES));
    frame::write_heartbeat(&mut all);
    seeds.push(("all-methods".into(), all));
    // Split payloads: every method framed at 64 bytes.
    let mut split = vec![config(TINY_FRAMES, false, 7)];
    split.extend(native_stream(&methods, TINY_FRAME_BYTES));
    seeds.push(("all-methods-split".into(), split));
    // A split publish over a small bound: discarded and reported, then an ack.
    let big = methods
        .iter()
        .filter(|m| matches!(m, Method::Publish { .. } | Method::Ack { .. }))
        .cloned()
        .collect::<Vec<_>>();
    let mut over = vec![config(TINY_FRAMES, true, 20)];
    over.extend(native_stream(&big, TINY_FRAME_BYTES));
    seeds.push(("publish-oversized".into(), over));
    let mut hb = vec![config(TINY_FRAMES, false, 1)];
    frame::write_heartbeat(&mut hb);
    seeds.push(("heartbeat".into(), hb));
    seeds
}

/// AMQP methods a client sends, and some a server sends (the decoder takes both).
pub fn amqp_methods() -> Vec<AmqpMethod> {
    use AmqpMethod::*;
    vec![
        ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: every_field_type(),
            mechanisms: b"PLAIN AMQPLAIN".to_vec(),
            locales: b"en_US".to_vec(),
        },
        ConnectionStartOk {
            client_properties: every_field_type(),
            mechanism: "PLAIN".into(),
            response: b"\0guest\0guest".to_vec(),
            locale: "en_US".into(),
        },
        ConnectionSecureOk {
            response: b"x".to_vec(),
        },
        ConnectionTuneOk {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
        },
        ConnectionOpen {
            virtual_host: "/".into(),
        },
        ConnectionClose {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        },
        ConnectionCloseOk {},
        ConnectionUpdateSecret {
            new_secret: b"token".to_vec(),
            reason: "refresh".into(),
        },
        ChannelOpen {},
        ChannelFlow { active: true },
        ChannelClose {
            reply_code: 200,
            reply_text: "ok".into(),
            class_id: 0,
            method_id: 0,
        },
        ChannelCloseOk {},
        ExchangeDeclare {
            exchange: "x".into(),
            kind: "topic".into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            no_wait: false,
            arguments: args(),
        },
        ExchangeDelete {
            exchange: "x".into(),
            if_unused: true,
            no_wait: true,
        },
        ExchangeBind {
            destination: "d".into(),
            source: "s".into(),
            routing_key: "k".into(),
            no_wait: false,
            arguments: args(),
        },
        ExchangeUnbind {
            destination: "d".into(),
            source: "s".into(),
            routing_key: "k".into(),
            no_wait: false,
            arguments: FieldTable::new(),
        },
        QueueDeclare {
            queue: "q".into(),
            passive: false,
            durable: true,
            exclusive: true,
            auto_delete: false,
            no_wait: false,
            arguments: args(),
        },
        QueueBind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            no_wait: false,
            arguments: every_field_type(),
        },
        QueuePurge {
            queue: "q".into(),
            no_wait: false,
        },
        QueueDelete {
            queue: "q".into(),
            if_unused: true,
            if_empty: false,
            no_wait: true,
        },
        QueueUnbind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            arguments: FieldTable::new(),
        },
        BasicQos {
            prefetch_size: 0,
            prefetch_count: 10,
            global: true,
        },
        BasicConsume {
            queue: "q".into(),
            consumer_tag: String::new(),
            no_local: false,
            no_ack: false,
            exclusive: true,
            no_wait: false,
            arguments: args(),
        },
        BasicCancel {
            consumer_tag: "ctag".into(),
            no_wait: false,
        },
        BasicGet {
            queue: "q".into(),
            no_ack: false,
        },
        BasicAck {
            delivery_tag: 1,
            multiple: true,
        },
        BasicReject {
            delivery_tag: 2,
            requeue: true,
        },
        BasicRecoverAsync { requeue: true },
        BasicRecover { requeue: true },
        BasicNack {
            delivery_tag: 3,
            multiple: false,
            requeue: false,
        },
        ConfirmSelect { nowait: false },
        TxSelect {},
        TxCommit {},
        TxRollback {},
        BasicDeliver {
            consumer_tag: "ctag".into(),
            delivery_tag: 9,
            redelivered: true,
            exchange: "x".into(),
            routing_key: "k".into(),
        },
    ]
}

fn amqp_publish(out: &mut Vec<u8>, channel: u16, props: &BasicProperties, body: &[u8], fm: u32) {
    let publish = AmqpMethod::BasicPublish {
        exchange: "amq.direct".into(),
        routing_key: "q".into(),
        mandatory: true,
        immediate: false,
    };
    amqp::write_method(out, channel, &publish);
    write_content(out, channel, BASIC_CLASS_ID, props, body, fm);
}

/// Seeds for [`super::amqp_frame`], named.
pub fn amqp_frame() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for m in amqp_methods() {
        let mut s = vec![config(LARGE_FRAMES, false, 16)];
        amqp::write_method(&mut s, u16::from(m.class_method_id().0 != 10), &m);
        seeds.push((format!("method-{}", m.name()), s));
    }
    let mut s = vec![config(LARGE_FRAMES, false, 11)];
    amqp_publish(&mut s, 1, &every_property(), b"hello", LARGE_FRAME_BYTES);
    seeds.push(("publish-every-property".into(), s));
    // Body split over 64-byte frames, with another channel's method in between.
    let mut s = vec![config(TINY_FRAMES, false, 9)];
    amqp_publish(
        &mut s,
        1,
        &BasicProperties::default(),
        &[7; 150],
        TINY_FRAME_BYTES,
    );
    amqp::write_method(&mut s, 2, &AmqpMethod::ChannelOpen {});
    amqp_publish(
        &mut s,
        2,
        &BasicProperties::default(),
        b"",
        TINY_FRAME_BYTES,
    );
    amqp::write_heartbeat(&mut s);
    seeds.push(("publish-split-body".into(), s));
    // A body over a small limit: dropped frame by frame, then the channel goes on.
    let mut s = vec![config(TINY_FRAMES, true, 25)];
    amqp_publish(
        &mut s,
        1,
        &BasicProperties::default(),
        &[1; 200],
        TINY_FRAME_BYTES,
    );
    amqp::write_method(&mut s, 1, &AmqpMethod::TxCommit {});
    seeds.push(("publish-oversized".into(), s));
    seeds
}

fn record_bytes(id: u64, props: &BasicProperties, body: &[u8]) -> Vec<u8> {
    let message = MessageData {
        timestamp_ms: 1_700_000_000_000,
        exchange: "ex",
        routing_key: "rk",
        properties: props,
        body,
    };
    let mut out = Vec::new();
    // The messages here are small: encoding cannot fail.
    if record::encode(id, &message, &mut out).is_err() {
        out.clear();
    }
    out
}

/// Seeds for [`super::storage_record`], named: segments (records, damage, torn tails)
/// and ack logs.
pub fn storage_record() -> Vec<(String, Vec<u8>)> {
    let persistent = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    let one = record_bytes(5, &persistent, b"hi");
    let full = record_bytes(6, &every_property(), &[9; 100]);
    let mut seeds = vec![
        (
            "record-worked-example".to_string(),
            [&[255][..], &one].concat(),
        ),
        (
            "record-every-property".to_string(),
            [&[255][..], &full].concat(),
        ),
    ];
    let mut segment = vec![31];
    for id in 1..=4 {
        segment.extend(record_bytes(
            id,
            &persistent,
            &vec![id as u8; id as usize * 10],
        ));
    }
    seeds.push(("segment-four-records".into(), segment.clone()));
    let mut damaged = segment.clone();
    damaged[40] ^= 0x10;
    damaged.extend_from_slice(b"garbage RMQR garbage");
    damaged.extend(record_bytes(9, &persistent, b"after damage"));
    let tail = record_bytes(10, &persistent, b"torn");
    damaged.extend_from_slice(&tail[..tail.len() / 2]);
    damaged[0] = 6;
    seeds.push(("segment-damaged-torn".into(), damaged));
    let mut acks = vec![12];
    for (kind, id) in [
        (AckKind::Delivered, 1),
        (AckKind::Settled, 1),
        (AckKind::Settled, 2),
    ] {
        acks.extend_from_slice(&ack_log::encode(AckEntry { kind, id }));
    }
    acks.extend_from_slice(&[2, 0, 0]);
    seeds.push(("ack-log".into(), acks));
    seeds
}
