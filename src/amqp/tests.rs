//! Tests of the AMQP 0-9-1 codec: every method round-trips, the table matches the
//! specification's XML, golden bytes checked by hand against the specification, framing
//! errors, content splitting, and garbage that must never panic.

use super::*;
use crate::error::ReplyCode;
use crate::types::field_table::{FieldTable, FieldValue};
use crate::types::properties::BasicProperties;
use std::collections::BTreeSet;

/// The classes in the method table.
const CLASSES: [u16; 7] = [10, 20, 40, 50, 60, 85, 90];

/// Highest method id scanned per class when enumerating the table.
const METHOD_ID_SCAN_MAX: u16 = 255;

fn table() -> FieldTable {
    let mut nested = FieldTable::new();
    nested.insert("publisher_confirms".into(), FieldValue::Bool(true));
    let mut t = FieldTable::new();
    t.insert("x-message-ttl".into(), FieldValue::I32(60_000));
    t.insert("product".into(), FieldValue::string("RelayMQ"));
    t.insert("capabilities".into(), FieldValue::Table(nested));
    t
}

fn s(v: &str) -> String {
    v.to_string()
}

/// One instance of every method, with non-default values.
fn samples() -> Vec<AmqpMethod> {
    use AmqpMethod::*;
    vec![
        ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: table(),
            mechanisms: b"PLAIN AMQPLAIN".to_vec(),
            locales: b"en_US".to_vec(),
        },
        ConnectionStartOk {
            client_properties: table(),
            mechanism: s("PLAIN"),
            response: b"\0guest\0guest".to_vec(),
            locale: s("en_US"),
        },
        ConnectionSecure {
            challenge: b"nonce".to_vec(),
        },
        ConnectionSecureOk {
            response: b"answer".to_vec(),
        },
        ConnectionTune {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
        },
        ConnectionTuneOk {
            channel_max: 1000,
            frame_max: 65_536,
            heartbeat: 30,
        },
        ConnectionOpen {
            virtual_host: s("/prod"),
        },
        ConnectionOpenOk {},
        ConnectionClose {
            reply_code: 320,
            reply_text: s("CONNECTION_FORCED - shutdown"),
            class_id: 60,
            method_id: 40,
        },
        ConnectionCloseOk {},
        ConnectionBlocked {
            reason: s("low on memory"),
        },
        ConnectionUnblocked {},
        ConnectionUpdateSecret {
            new_secret: b"token-2".to_vec(),
            reason: s("refresh"),
        },
        ConnectionUpdateSecretOk {},
        ChannelOpen {},
        ChannelOpenOk {},
        ChannelFlow { active: true },
        ChannelFlowOk { active: true },
        ChannelClose {
            reply_code: 404,
            reply_text: s("NOT_FOUND - no queue 'q'"),
            class_id: 50,
            method_id: 10,
        },
        ChannelCloseOk {},
        ExchangeDeclare {
            exchange: s("logs"),
            kind: s("topic"),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: true,
            no_wait: true,
            arguments: table(),
        },
        ExchangeDeclareOk {},
        ExchangeDelete {
            exchange: s("logs"),
            if_unused: true,
            no_wait: false,
        },
        ExchangeDeleteOk {},
        ExchangeBind {
            destination: s("dst"),
            source: s("src"),
            routing_key: s("a.*"),
            no_wait: true,
            arguments: table(),
        },
        ExchangeBindOk {},
        ExchangeUnbind {
            destination: s("dst"),
            source: s("src"),
            routing_key: s("a.#"),
            no_wait: true,
            arguments: table(),
        },
        ExchangeUnbindOk {},
        QueueDeclare {
            queue: s("jobs"),
            passive: true,
            durable: false,
            exclusive: true,
            auto_delete: false,
            no_wait: true,
            arguments: table(),
        },
        QueueDeclareOk {
            queue: s("amq.gen-abc"),
            message_count: 7,
            consumer_count: 2,
        },
        QueueBind {
            queue: s("jobs"),
            exchange: s("logs"),
            routing_key: s("k"),
            no_wait: true,
            arguments: table(),
        },
        QueueBindOk {},
        QueuePurge {
            queue: s("jobs"),
            no_wait: true,
        },
        QueuePurgeOk { message_count: 42 },
        QueueDelete {
            queue: s("jobs"),
            if_unused: false,
            if_empty: true,
            no_wait: true,
        },
        QueueDeleteOk { message_count: 3 },
        QueueUnbind {
            queue: s("jobs"),
            exchange: s("logs"),
            routing_key: s("k"),
            arguments: table(),
        },
        QueueUnbindOk {},
        BasicQos {
            prefetch_size: 0,
            prefetch_count: 250,
            global: true,
        },
        BasicQosOk {},
        BasicConsume {
            queue: s("jobs"),
            consumer_tag: s("ctag-1"),
            no_local: false,
            no_ack: true,
            exclusive: false,
            no_wait: true,
            arguments: table(),
        },
        BasicConsumeOk {
            consumer_tag: s("ctag-1"),
        },
        BasicCancel {
            consumer_tag: s("ctag-1"),
            no_wait: true,
        },
        BasicCancelOk {
            consumer_tag: s("ctag-1"),
        },
        BasicPublish {
            exchange: s("logs"),
            routing_key: s("a.b"),
            mandatory: true,
            immediate: false,
        },
        BasicReturn {
            reply_code: 312,
            reply_text: s("NO_ROUTE"),
            exchange: s("logs"),
            routing_key: s("a.b"),
        },
        BasicDeliver {
            consumer_tag: s("ctag-1"),
            delivery_tag: u64::MAX - 5,
            redelivered: true,
            exchange: s("logs"),
            routing_key: s("a.b"),
        },
        BasicGet {
            queue: s("jobs"),
            no_ack: true,
        },
        BasicGetOk {
            delivery_tag: 9,
            redelivered: true,
            exchange: s(""),
            routing_key: s("jobs"),
            message_count: 12,
        },
        BasicGetEmpty {},
        BasicAck {
            delivery_tag: 17,
            multiple: true,
        },
        BasicReject {
            delivery_tag: 18,
            requeue: true,
        },
        BasicRecoverAsync { requeue: true },
        BasicRecover { requeue: true },
        BasicRecoverOk {},
        BasicNack {
            delivery_tag: 19,
            multiple: false,
            requeue: true,
        },
        ConfirmSelect { nowait: true },
        ConfirmSelectOk {},
        TxSelect {},
        TxSelectOk {},
        TxCommit {},
        TxCommitOk {},
        TxRollback {},
        TxRollbackOk {},
    ]
}

/// Every (class id, method id) pair the table knows.
fn table_ids() -> BTreeSet<(u16, u16)> {
    CLASSES
        .iter()
        .flat_map(|&c| (0..=METHOD_ID_SCAN_MAX).map(move |m| (c, m)))
        .filter(|&(c, m)| AmqpMethod::name_of(c, m).is_some())
        .collect()
}

fn round_trip(m: &AmqpMethod) -> Vec<u8> {
    let mut out = Vec::new();
    m.encode(&mut out);
    let back = AmqpMethod::decode(&out).unwrap_or_else(|e| panic!("{}: {e}", m.name()));
    assert_eq!(&back, m, "{}", m.name());
    assert_eq!(
        (
            u16::from_be_bytes([out[0], out[1]]),
            u16::from_be_bytes([out[2], out[3]])
        ),
        m.class_method_id()
    );
    out
}

#[test]
fn every_method_round_trips_and_the_samples_cover_the_table() {
    let samples = samples();
    let sample_ids: BTreeSet<_> = samples.iter().map(AmqpMethod::class_method_id).collect();
    assert_eq!(sample_ids.len(), samples.len(), "duplicate sample");
    assert_eq!(sample_ids, table_ids());
    for m in &samples {
        round_trip(m);
        assert_eq!(
            AmqpMethod::name_of(m.class_method_id().0, m.class_method_id().1),
            Some(m.name())
        );
    }
}

#[test]
fn default_values_round_trip_too() {
    let m = AmqpMethod::QueueDeclare {
        queue: String::new(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        no_wait: false,
        arguments: FieldTable::new(),
    };
    round_trip(&m);
}

/// Every combination of `n` bits, as vectors of booleans.
fn bit_combinations(n: u32) -> impl Iterator<Item = Vec<bool>> {
    (0u32..1 << n).map(move |mask| (0..n).map(|i| mask & (1 << i) != 0).collect())
}

/// The octet `bits` pack into: first bit least significant (AMQP 0-9-1 §4.2.5.2).
fn packed(bits: &[bool]) -> u8 {
    bits.iter()
        .enumerate()
        .fold(0, |acc, (i, &b)| acc | ((b as u8) << i))
}

#[test]
fn every_bit_combination_packs_low_bit_first_and_round_trips() {
    for b in bit_combinations(5) {
        let m = AmqpMethod::ExchangeDeclare {
            exchange: s("x"),
            kind: s("direct"),
            passive: b[0],
            durable: b[1],
            auto_delete: b[2],
            internal: b[3],
            no_wait: b[4],
            arguments: table(),
        };
        let out = round_trip(&m);
        // ids 4, ticket 2, "x" 2, "direct" 7: the bit octet is at 15.
        assert_eq!(out[15], packed(&b), "{b:?}");
        let m = AmqpMethod::QueueDeclare {
            queue: s("q"),
            passive: b[0],
            durable: b[1],
            exclusive: b[2],
            auto_delete: b[3],
            no_wait: b[4],
            arguments: table(),
        };
        let out = round_trip(&m);
        assert_eq!(out[8], packed(&b), "{b:?}");
    }
    for b in bit_combinations(4) {
        let m = AmqpMethod::BasicConsume {
            queue: s("q"),
            consumer_tag: s("t"),
            no_local: b[0],
            no_ack: b[1],
            exclusive: b[2],
            no_wait: b[3],
            arguments: FieldTable::new(),
        };
        let out = round_trip(&m);
        assert_eq!(out[10], packed(&b), "{b:?}");
    }
    for b in bit_combinations(3) {
        let m = AmqpMethod::QueueDelete {
            queue: s("q"),
            if_unused: b[0],
            if_empty: b[1],
            no_wait: b[2],
        };
        let out = round_trip(&m);
        assert_eq!(out.len(), 9);
        assert_eq!(out[8], packed(&b), "{b:?}");
    }
    for b in bit_combinations(2) {
        let m = AmqpMethod::BasicNack {
            delivery_tag: 1,
            multiple: b[0],
            requeue: b[1],
        };
        let out = round_trip(&m);
        assert_eq!(out.len(), 13);
        assert_eq!(out[12], packed(&b), "{b:?}");
        let m = AmqpMethod::BasicPublish {
            exchange: s(""),
            routing_key: s(""),
            mandatory: b[0],
            immediate: b[1],
        };
        let out = round_trip(&m);
        assert_eq!(out.len(), 9);
        assert_eq!(out[8], packed(&b), "{b:?}");
        // A bit run ended by a non-bit field: get-ok's redelivered is alone in its octet.
        let m = AmqpMethod::BasicGetOk {
            delivery_tag: 2,
            redelivered: b[0],
            exchange: s("e"),
            routing_key: s("r"),
            message_count: b[1] as u32,
        };
        let out = round_trip(&m);
        assert_eq!(out[12], b[0] as u8);
    }
}

/// The specification's domain of one of our field types.
fn domain_of(rust_type: &str) -> &'static str {
    match rust_type.replace(' ', "").as_str() {
        "u8" => "octet",
        "u16" => "short",
        "u32" => "long",
        "u64" => "longlong",
        "bool" => "bit",
        "String" => "shortstr",
        "Vec<u8>" => "longstr",
        "FieldTable" => "table",
        other => panic!("no AMQP domain for {other}"),
    }
}

/// Cross-checks the table against RabbitMQ's AMQP 0-9-1 XML (extracted into
/// `spec_methods.txt`): names, ids, content flags, argument names, domains and order.
#[test]
fn the_table_matches_the_specification() {
    let spec = include_str!("spec_methods.txt");
    let mut seen = BTreeSet::new();
    for line in spec
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap();
        let class_id: u16 = parts.next().unwrap().parse().unwrap();
        let method_id: u16 = parts.next().unwrap().parse().unwrap();
        let content = parts.next().unwrap() == "1";
        let args: Vec<(&str, &str)> = parts.map(|a| a.split_once(':').unwrap()).collect();
        assert_eq!(
            AmqpMethod::name_of(class_id, method_id),
            Some(name),
            "{line}"
        );
        let sample = samples()
            .into_iter()
            .find(|m| m.class_method_id() == (class_id, method_id))
            .unwrap();
        assert_eq!(sample.has_content(), content, "{name}");
        let (wire, fields) = AmqpMethod::layout_of(class_id, method_id).unwrap();
        assert_eq!(wire.len(), args.len(), "{name}: {wire:?} vs {args:?}");
        for (item, (arg, domain)) in wire.iter().zip(&args) {
            let (ours, ty) = match item.strip_prefix('[') {
                Some(reserved) => {
                    let ty = reserved
                        .trim_end_matches(']')
                        .trim_start_matches("reserved")
                        .trim();
                    ("reserved", ty)
                }
                None => {
                    let ty = fields.iter().find(|(f, _)| f == item).unwrap().1;
                    (*item, ty)
                }
            };
            let expected = if arg.starts_with("reserved-") {
                "reserved".to_string()
            } else if *arg == "type" {
                "kind".to_string()
            } else {
                arg.replace('-', "_")
            };
            assert_eq!(ours, expected, "{name}");
            assert_eq!(domain_of(ty), *domain, "{name}.{arg}");
        }
        seen.insert((class_id, method_id));
    }
    assert_eq!(seen, table_ids());
}

#[test]
fn golden_connection_tune_ok_frame() {
    let mut out = Vec::new();
    let m = AmqpMethod::ConnectionTuneOk {
        channel_max: 2047,
        frame_max: 131_072,
        heartbeat: 60,
    };
    write_method(&mut out, 0, &m);
    #[rustfmt::skip]
    let expected = [
        1, 0, 0, 0, 0, 0, 12,   // method frame, channel 0, 12 payload bytes
        0, 10, 0, 31,           // connection (10) . tune-ok (31)
        0x07, 0xFF,             // channel-max 2047
        0, 2, 0, 0,             // frame-max 131072
        0, 60,                  // heartbeat 60 s
        0xCE,                   // frame-end
    ];
    assert_eq!(out, expected);
    let (header, total) = check(&out, 4096).unwrap().unwrap();
    assert_eq!(total, out.len());
    assert_eq!(header.frame_type, FrameType::Method);
    assert_eq!(AmqpMethod::decode(header.payload(&out)).unwrap(), m);
}

#[test]
fn golden_basic_publish_frame() {
    let mut out = Vec::new();
    let m = AmqpMethod::BasicPublish {
        exchange: s("ex"),
        routing_key: s("rk"),
        mandatory: false,
        immediate: true,
    };
    write_method(&mut out, 1, &m);
    #[rustfmt::skip]
    let expected = [
        1, 0, 1, 0, 0, 0, 13,   // method frame, channel 1, 13 payload bytes
        0, 60, 0, 40,           // basic (60) . publish (40)
        0, 0,                   // reserved-1 (ticket)
        2, b'e', b'x',          // exchange
        2, b'r', b'k',          // routing-key
        0b10,                   // mandatory (bit 0) clear, immediate (bit 1) set
        0xCE,
    ];
    assert_eq!(out, expected);
}

#[test]
fn golden_queue_declare_bits() {
    let mut out = Vec::new();
    AmqpMethod::QueueDeclare {
        queue: s("q"),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: true,
        no_wait: false,
        arguments: FieldTable::new(),
    }
    .encode(&mut out);
    #[rustfmt::skip]
    let expected = [
        0, 50, 0, 10,     // queue.declare
        0, 0,             // reserved-1
        1, b'q',          // queue
        0b0_1010,         // durable (bit 1) and auto-delete (bit 3)
        0, 0, 0, 0,       // arguments: empty table
    ];
    assert_eq!(out, expected);
}

#[test]
fn golden_content_header_with_two_properties_and_body() {
    let props = BasicProperties {
        content_type: Some(s("text/plain")),
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    let mut out = Vec::new();
    write_content(&mut out, 1, BASIC_CLASS_ID, &props, b"hello", 4096);
    #[rustfmt::skip]
    let mut expected = vec![
        2, 0, 1, 0, 0, 0, 26,          // header frame, channel 1, 26 payload bytes
        0, 60,                         // class basic
        0, 0,                          // weight
        0, 0, 0, 0, 0, 0, 0, 5,        // body size 5
        0x90, 0x00,                    // flags: content-type (bit 15), delivery-mode (bit 12)
        10,                            // content-type, 10 bytes
    ];
    expected.extend_from_slice(b"text/plain");
    expected.extend_from_slice(&[2, 0xCE]); // delivery-mode 2, frame-end
    expected.extend_from_slice(&[3, 0, 1, 0, 0, 0, 5]); // body frame, channel 1, 5 bytes
    expected.extend_from_slice(b"hello");
    expected.push(0xCE);
    assert_eq!(out, expected);
    let (header, total) = check(&out, 4096).unwrap().unwrap();
    assert_eq!(header.frame_type, FrameType::Header);
    let parsed = parse_content_header(header.payload(&out[..total])).unwrap();
    assert_eq!(
        parsed,
        ContentHeader {
            class_id: 60,
            body_size: 5,
            properties: props,
        }
    );
}

#[test]
fn golden_heartbeat_and_protocol_header() {
    let mut out = Vec::new();
    write_heartbeat(&mut out);
    assert_eq!(out, [8, 0, 0, 0, 0, 0, 0, 0xCE]);
    let (header, total) = check(&out, 4096).unwrap().unwrap();
    assert_eq!(
        (header.frame_type, header.channel, header.size, total),
        (FrameType::Heartbeat, 0, 0, 8)
    );
    assert_eq!(&PROTOCOL_HEADER, &[b'A', b'M', b'Q', b'P', 0, 0, 9, 1]);
}

fn frame_of(m: &AmqpMethod) -> Vec<u8> {
    let mut out = Vec::new();
    write_method(&mut out, 3, m);
    out
}

#[test]
fn check_waits_for_a_whole_frame() {
    let out = frame_of(&samples()[0]);
    for n in 0..out.len() {
        assert_eq!(check(&out[..n], 131_072).unwrap(), None, "prefix of {n}");
    }
    let mut two = out.clone();
    two.extend_from_slice(&out);
    let (header, total) = check(&two, 131_072).unwrap().unwrap();
    assert_eq!((header.channel, total), (3, out.len()));
}

#[test]
fn check_refuses_bad_frames_with_501() {
    let out = frame_of(&AmqpMethod::BasicQosOk {});
    let frame_error = |r: Result<Option<(RawFrameHeader, usize)>, FrameError>| {
        let e = r.unwrap_err();
        assert_eq!(e.code, ReplyCode::FrameError, "{e}");
        e.text
    };
    let mut bad_end = out.clone();
    *bad_end.last_mut().unwrap() = 0xCD;
    assert!(frame_error(check(&bad_end, 4096)).contains("frame end"));
    let mut bad_type = out.clone();
    bad_type[0] = 4;
    assert!(frame_error(check(&bad_type, 4096)).contains("unknown frame type 4"));
    assert!(frame_error(check(&[0], 4096)).contains("unknown frame type 0"));
    // Exactly frame_max bytes is allowed, one more is not.
    assert!(check(&out, out.len() as u32).unwrap().is_some());
    assert!(frame_error(check(&out, out.len() as u32 - 1)).contains("exceeds"));
    // Oversized is refused from the header alone, before the payload arrives.
    let huge = [3, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF];
    assert!(frame_error(check(&huge, 131_072)).contains("exceeds"));
    let heartbeat_on_channel = [8, 0, 1, 0, 0, 0, 0, 0xCE];
    assert!(frame_error(check(&heartbeat_on_channel, 4096)).contains("heartbeat"));
    let heartbeat_with_payload = [8, 0, 0, 0, 0, 0, 1, 0, 0xCE];
    assert!(frame_error(check(&heartbeat_with_payload, 4096)).contains("heartbeat"));
}

/// Splits a buffer of frames with `check`, returning each frame's type and payload.
fn split_frames(mut buf: &[u8], frame_max: u32) -> Vec<(FrameType, u16, Vec<u8>)> {
    let mut frames = Vec::new();
    while !buf.is_empty() {
        let (header, total) = check(buf, frame_max).unwrap().unwrap();
        assert!(total <= frame_max as usize);
        frames.push((
            header.frame_type,
            header.channel,
            header.payload(&buf[..total]).to_vec(),
        ));
        buf = &buf[total..];
    }
    frames
}

#[test]
fn content_body_is_split_at_frame_max() {
    let frame_max = 4096u32;
    let chunk = frame_max as usize - FRAME_OVERHEAD_BYTES;
    let body: Vec<u8> = (0..2 * chunk + 100).map(|i| (i % 251) as u8).collect();
    let props = BasicProperties {
        headers: Some(table()),
        message_id: Some(s("m-1")),
        timestamp: Some(1_700_000_000),
        ..BasicProperties::default()
    };
    let mut out = Vec::new();
    write_content(&mut out, 5, BASIC_CLASS_ID, &props, &body, frame_max);
    let frames = split_frames(&out, frame_max);
    assert_eq!(frames.len(), 4);
    assert_eq!(frames[0].0, FrameType::Header);
    let header = parse_content_header(&frames[0].2).unwrap();
    assert_eq!(header.body_size, body.len() as u64);
    assert_eq!(header.properties, props);
    let sizes: Vec<usize> = frames[1..].iter().map(|f| f.2.len()).collect();
    assert_eq!(sizes, [chunk, chunk, 100]);
    assert!(frames.iter().all(|f| f.1 == 5));
    let joined: Vec<u8> = frames[1..].iter().flat_map(|f| f.2.clone()).collect();
    assert_eq!(joined, body);
    // A body of exactly one chunk is one body frame; an empty body none.
    let mut out = Vec::new();
    write_content(
        &mut out,
        5,
        BASIC_CLASS_ID,
        &props,
        &body[..chunk],
        frame_max,
    );
    assert_eq!(split_frames(&out, frame_max).len(), 2);
    let mut out = Vec::new();
    write_content(
        &mut out,
        5,
        BASIC_CLASS_ID,
        &BasicProperties::default(),
        b"",
        frame_max,
    );
    let frames = split_frames(&out, frame_max);
    assert_eq!(frames.len(), 1);
    assert_eq!(parse_content_header(&frames[0].2).unwrap().body_size, 0);
}

#[test]
fn header_and_body_frames_written_apart_are_write_content() {
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    for len in [0, 1, 4088, 4089, 9000] {
        let body: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        let mut whole = Vec::new();
        write_content(&mut whole, 3, BASIC_CLASS_ID, &props, &body, 4096);
        let mut apart = Vec::new();
        write_content_header(&mut apart, 3, BASIC_CLASS_ID, &props, len as u64);
        write_body_frames(&mut apart, 3, &body, 4096);
        assert_eq!(apart, whole, "body of {len} bytes");
    }
}

#[test]
fn content_header_prefix_reads_class_and_body_size_only() {
    let props = BasicProperties {
        headers: Some(table()),
        ..BasicProperties::default()
    };
    let mut out = Vec::new();
    write_content_header(&mut out, 1, BASIC_CLASS_ID, &props, 0x0102_0304_0506_0708);
    let (header, total) = check(&out, 4096).unwrap().unwrap();
    let payload = header.payload(&out[..total]);
    assert_eq!(
        parse_content_header_prefix(payload).unwrap(),
        (BASIC_CLASS_ID, 0x0102_0304_0506_0708)
    );
    assert_eq!(
        payload[CONTENT_BODY_SIZE_AT..CONTENT_BODY_SIZE_AT + 8],
        0x0102_0304_0506_0708u64.to_be_bytes()
    );
    // Properties are not read: a header cut after its fixed part still gives the size.
    assert!(parse_content_header_prefix(&payload[..CONTENT_HEADER_FIXED_BYTES]).is_ok());
    for cut in 0..CONTENT_HEADER_FIXED_BYTES {
        let e = parse_content_header_prefix(&payload[..cut]).unwrap_err();
        assert_eq!(e.code, ReplyCode::FrameError, "cut at {cut}");
    }
    let mut weighted = payload.to_vec();
    weighted[3] = 1;
    let e = parse_content_header_prefix(&weighted).unwrap_err();
    assert_eq!(e.code, ReplyCode::SyntaxError);
}

#[test]
fn bad_content_headers_are_errors() {
    let e = parse_content_header(&[0, 60, 0, 0, 0]).unwrap_err();
    assert_eq!(e.code, ReplyCode::FrameError);
    let mut payload = vec![0, 60, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let e = parse_content_header(&payload).unwrap_err();
    assert_eq!(e.code, ReplyCode::SyntaxError);
    assert!(e.text.contains("weight"), "{e}");
    payload[3] = 0;
    assert!(parse_content_header(&payload).is_ok());
    payload.push(0);
    assert_eq!(
        parse_content_header(&payload).unwrap_err().code,
        ReplyCode::SyntaxError
    );
    // content-type flag set but no string follows.
    let e = parse_content_header(&[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0]).unwrap_err();
    assert_eq!(e.code, ReplyCode::SyntaxError);
}

#[test]
fn method_errors_carry_the_reply_code_and_ids() {
    let e = AmqpMethod::decode(&[0, 60, 0]).unwrap_err();
    assert_eq!(
        (e.code, e.class_id, e.method_id),
        (ReplyCode::FrameError, 0, 0)
    );
    let e = AmqpMethod::decode(&[0, 99, 0, 10]).unwrap_err();
    assert_eq!(
        (e.code, e.class_id, e.method_id),
        (ReplyCode::NotImplemented, 99, 10)
    );
    let e = AmqpMethod::decode(&[0, 60, 0, 41]).unwrap_err();
    assert_eq!(
        (e.code, e.class_id, e.method_id),
        (ReplyCode::NotImplemented, 60, 41)
    );
    // basic.publish cut inside the exchange name.
    let e = AmqpMethod::decode(&[0, 60, 0, 40, 0, 0, 5, b'a']).unwrap_err();
    assert_eq!(
        (e.code, e.class_id, e.method_id),
        (ReplyCode::SyntaxError, 60, 40)
    );
    assert!(e.text.contains("basic.publish"), "{e}");
    // A shortstr that is not UTF-8.
    let e = AmqpMethod::decode(&[0, 60, 0, 40, 0, 0, 1, 0xFF, 0, 0]).unwrap_err();
    assert_eq!(e.code, ReplyCode::SyntaxError);
    // A trailing byte.
    let mut out = Vec::new();
    AmqpMethod::TxSelect {}.encode(&mut out);
    out.push(0);
    let e = AmqpMethod::decode(&out).unwrap_err();
    assert!(e.text.contains("trailing"), "{e}");
}

#[test]
fn every_truncation_of_every_method_is_an_error() {
    for m in samples() {
        let mut out = Vec::new();
        m.encode(&mut out);
        for n in 0..out.len() {
            assert!(
                AmqpMethod::decode(&out[..n]).is_err(),
                "{} cut at {n}",
                m.name()
            );
        }
    }
}

/// A small deterministic generator (xorshift64), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let encoded: Vec<Vec<u8>> = samples()
        .iter()
        .map(|m| {
            let mut out = Vec::new();
            m.encode(&mut out);
            out
        })
        .collect();
    let ids: Vec<(u16, u16)> = table_ids().into_iter().collect();
    for _ in 0..20_000 {
        // Mutate a valid payload: flip bytes, cut, or extend.
        let mut buf = encoded[rng.below(encoded.len())].clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(3) {
                0 if !buf.is_empty() => {
                    let at = rng.below(buf.len());
                    buf[at] = rng.next() as u8;
                }
                1 if !buf.is_empty() => buf.truncate(rng.below(buf.len())),
                _ => buf.push(rng.next() as u8),
            }
        }
        let _ = AmqpMethod::decode(&buf);
        let _ = parse_content_header(&buf);
        let _ = parse_content_header_prefix(&buf);
        let _ = check(&buf, 4096);
        // Pure noise behind a known class/method id.
        let len = rng.below(64);
        let mut noise: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let (class_id, method_id) = ids[rng.below(ids.len())];
        let mut payload = Vec::new();
        payload.extend_from_slice(&class_id.to_be_bytes());
        payload.extend_from_slice(&method_id.to_be_bytes());
        payload.append(&mut noise);
        let _ = AmqpMethod::decode(&payload);
        let _ = check(&payload, 4096);
    }
}
