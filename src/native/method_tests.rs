//! Tests of the native protocol codec as a whole: every [`Method`] variant round-trips,
//! hostile input is refused without a panic or a large allocation, framing splits and joins
//! payloads, and the worked hex example of `docs/protocol.md` matches the encoder byte for
//! byte (so the document cannot drift from the code).

use super::frame::{self, FrameAssembler, FrameHeader, FrameType, Payload, FLAG_MORE};
use super::method::{
    encode_delivery, encode_publish, method_name, Delivery, ListKind, Method, PublishMessage,
};
use super::{FRAME_HEADER_BYTES, PROTOCOL_HEADER, PROTOCOL_VERSION};
use crate::limits::{
    FRAME_BYTES_DEFAULT, FRAME_BYTES_HANDSHAKE, FRAME_BYTES_MAX, FRAME_BYTES_MIN,
    PAYLOAD_BYTES_MAX, SHORT_STRING_BYTES_MAX,
};
use crate::types::codec::{put_u16, put_u32};
use crate::types::MemoryWatermark;
use crate::types::{BasicProperties, FieldTable, FieldValue};
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------------
// Sample values
// ---------------------------------------------------------------------------------------

/// A 255-byte name (the short-string maximum) of two-byte characters plus one ASCII byte.
fn name_255() -> String {
    let s = format!("{}x", "é".repeat(127));
    assert_eq!(s.len(), SHORT_STRING_BYTES_MAX);
    s
}

/// A 255-byte ASCII name.
fn ascii_255() -> String {
    "q".repeat(SHORT_STRING_BYTES_MAX)
}

/// A table holding every field value type, nested tables and arrays, an empty key, a
/// non-ASCII key and NUL bytes in strings.
fn every_type_table() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("größe".into(), FieldValue::I16(-3));
    inner.insert("void".into(), FieldValue::Void);
    let mut middle = FieldTable::new();
    middle.insert("inner".into(), FieldValue::Table(inner.clone()));
    middle.insert(
        "arr".into(),
        FieldValue::Array(vec![
            FieldValue::Table(inner),
            FieldValue::Array(vec![FieldValue::U8(7), FieldValue::Array(Vec::new())]),
        ]),
    );
    let mut t = FieldTable::new();
    t.insert(String::new(), FieldValue::Bool(false));
    t.insert("bool".into(), FieldValue::Bool(true));
    t.insert("i8".into(), FieldValue::I8(i8::MIN));
    t.insert("u8".into(), FieldValue::U8(u8::MAX));
    t.insert("i16".into(), FieldValue::I16(i16::MIN));
    t.insert("u16".into(), FieldValue::U16(u16::MAX));
    t.insert("i32".into(), FieldValue::I32(i32::MIN));
    t.insert("u32".into(), FieldValue::U32(u32::MAX));
    t.insert("i64".into(), FieldValue::I64(i64::MIN));
    t.insert("f32".into(), FieldValue::F32(-1.5e-7));
    t.insert("f64".into(), FieldValue::F64(f64::MAX));
    t.insert("dec".into(), FieldValue::Decimal(3, 1_234_567));
    t.insert("str".into(), FieldValue::string("héllo\0wörld"));
    t.insert("raw".into(), FieldValue::LongString(vec![0xFF, 0, 0xFE]));
    t.insert("bin".into(), FieldValue::Bytes(vec![0, 1, 2, 0]));
    t.insert("empty-bin".into(), FieldValue::Bytes(Vec::new()));
    t.insert("ts".into(), FieldValue::Timestamp(u64::MAX));
    t.insert("tbl".into(), FieldValue::Table(middle));
    t.insert("empty-tbl".into(), FieldValue::Table(FieldTable::new()));
    t.insert(name_255(), FieldValue::Void);
    t
}

/// The type tag of a value. Lists every [`FieldValue`] variant without a wildcard, so a new
/// type fails to compile here until [`every_type_table`] is checked for it.
fn tag_of(v: &FieldValue) -> u8 {
    match v {
        FieldValue::Bool(_) => b't',
        FieldValue::I8(_) => b'b',
        FieldValue::U8(_) => b'B',
        FieldValue::I16(_) => b's',
        FieldValue::U16(_) => b'u',
        FieldValue::I32(_) => b'I',
        FieldValue::U32(_) => b'i',
        FieldValue::I64(_) => b'l',
        FieldValue::F32(_) => b'f',
        FieldValue::F64(_) => b'd',
        FieldValue::Decimal(..) => b'D',
        FieldValue::LongString(_) => b'S',
        FieldValue::Bytes(_) => b'x',
        FieldValue::Array(_) => b'A',
        FieldValue::Timestamp(_) => b'T',
        FieldValue::Table(_) => b'F',
        FieldValue::Void => b'V',
    }
}

fn collect_tags(v: &FieldValue, tags: &mut BTreeSet<u8>) {
    tags.insert(tag_of(v));
    match v {
        FieldValue::Array(items) => items.iter().for_each(|i| collect_tags(i, tags)),
        FieldValue::Table(t) => t.values().for_each(|i| collect_tags(i, tags)),
        _ => {}
    }
}

fn small_table() -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-message-ttl".into(), FieldValue::I64(60_000));
    t.insert("x-queue-type".into(), FieldValue::string("classic"));
    t
}

/// Every property set, the headers holding nested tables.
fn full_props() -> BasicProperties {
    BasicProperties {
        content_type: Some("application/json; charset=utf-8".into()),
        content_encoding: Some(String::new()),
        headers: Some(every_type_table()),
        delivery_mode: Some(2),
        priority: Some(9),
        correlation_id: Some("корреляция".into()),
        reply_to: Some("amq.gen-Xa2".into()),
        expiration: Some("60000".into()),
        message_id: Some(name_255()),
        timestamp: Some(1_700_000_000),
        kind: Some("order.created".into()),
        user_id: Some("guest".into()),
        app_id: Some("app\0id".into()),
        cluster_id: Some("c1".into()),
    }
}

/// A few properties set, to exercise a sparse flags word.
fn some_props() -> BasicProperties {
    BasicProperties {
        delivery_mode: Some(1),
        timestamp: Some(0),
        app_id: Some("a".into()),
        ..BasicProperties::default()
    }
}

/// Exactly one non-trivial instance of every [`Method`] variant, in [`variant_index`]
/// order.
fn one_of_each() -> Vec<Method> {
    use Method::*;
    vec![
        Open {
            user: "gäst".into(),
            password: "pa\0ss wört".into(),
            vhost: "/".into(),
            frame_max: FRAME_BYTES_DEFAULT,
            heartbeat_s: 60,
            channel_max: 2047,
            client_name: name_255(),
        },
        OpenOk {
            frame_max: FRAME_BYTES_MAX,
            heartbeat_s: u16::MAX,
            channel_max: 1,
            server_version: "0.1.0".into(),
            connection_id: u64::MAX,
        },
        Close {
            reply_code: 320,
            reply_text: "CONNECTION_FORCED - broker shutdown ✓".into(),
            method_id: 0,
        },
        CloseOk,
        Ok,
        VhostDeclare { name: name_255() },
        VhostDelete {
            name: "тест".into(),
        },
        List {
            kind: ListKind::Connections,
        },
        ListOk {
            rows: vec![every_type_table(), FieldTable::new(), small_table()],
        },
        Status,
        StatusOk {
            info: every_type_table(),
        },
        ChannelOpen,
        ChannelClose {
            reply_code: 404,
            reply_text: "NOT_FOUND - no queue 'q' in vhost '/'".into(),
            method_id: 0x0040,
        },
        ExchangeDeclare {
            exchange: name_255(),
            kind: "topic".into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: true,
            arguments: every_type_table(),
        },
        ExchangeDelete {
            exchange: String::new(),
            if_unused: true,
        },
        ExchangeBind {
            destination: "dest".into(),
            source: "源".into(),
            routing_key: "a.*.#".into(),
            arguments: small_table(),
        },
        ExchangeUnbind {
            destination: ascii_255(),
            source: String::new(),
            routing_key: String::new(),
            arguments: FieldTable::new(),
        },
        QueueDeclare {
            queue: String::new(),
            passive: true,
            durable: false,
            exclusive: true,
            auto_delete: true,
            arguments: small_table(),
        },
        QueueDeclareOk {
            queue: "amq.gen-JzTY20BRgKO-HjmUJj0wLg".into(),
            message_count: u32::MAX,
            consumer_count: 3,
        },
        QueueBind {
            queue: name_255(),
            exchange: "amq.topic".into(),
            routing_key: ascii_255(),
            arguments: every_type_table(),
        },
        QueueUnbind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "ключ".into(),
            arguments: FieldTable::new(),
        },
        QueuePurge {
            queue: "q\0nul".into(),
        },
        QueuePurgeOk { message_count: 0 },
        QueueDelete {
            queue: "q".into(),
            if_unused: false,
            if_empty: true,
        },
        QueueDeleteOk {
            message_count: 123_456,
        },
        BasicQos {
            prefetch_count: u16::MAX,
            global: true,
        },
        BasicConsume {
            queue: "q".into(),
            consumer_tag: String::new(),
            no_ack: true,
            exclusive: false,
            arguments: small_table(),
        },
        BasicConsumeOk {
            consumer_tag: "amq.ctag-Xa2".into(),
        },
        BasicCancel {
            consumer_tag: name_255(),
        },
        Publish {
            messages: vec![
                PublishMessage {
                    exchange: String::new(),
                    routing_key: "hello".into(),
                    mandatory: true,
                    properties: full_props(),
                    body: Vec::new(),
                },
                PublishMessage {
                    exchange: name_255(),
                    routing_key: ascii_255(),
                    mandatory: false,
                    properties: BasicProperties::default(),
                    body: vec![0, 0, 0, 0xFF, 0],
                },
                PublishMessage {
                    exchange: "x".into(),
                    routing_key: "é".into(),
                    mandatory: false,
                    properties: some_props(),
                    body: b"\0".to_vec(),
                },
            ],
        },
        Return {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "amq.direct".into(),
            routing_key: name_255(),
            properties: Box::new(full_props()),
            body: b"\0returned\0".to_vec(),
        },
        Deliver {
            deliveries: vec![
                Delivery {
                    consumer_tag: "c1".into(),
                    delivery_tag: 1,
                    redelivered: false,
                    exchange: String::new(),
                    routing_key: "hello".into(),
                    properties: BasicProperties::default(),
                    body: Vec::new(),
                },
                Delivery {
                    consumer_tag: name_255(),
                    delivery_tag: u64::MAX,
                    redelivered: true,
                    exchange: ascii_255(),
                    routing_key: String::new(),
                    properties: full_props(),
                    body: vec![0; 17],
                },
            ],
        },
        BasicGet {
            queue: "q".into(),
            no_ack: true,
        },
        GetOk {
            delivery_tag: 42,
            redelivered: true,
            exchange: String::new(),
            routing_key: "ключ".into(),
            message_count: 7,
            properties: Box::new(some_props()),
            body: b"body\0with\0nuls".to_vec(),
        },
        GetEmpty,
        Ack {
            delivery_tag: u64::MAX,
            multiple: true,
        },
        Nack {
            delivery_tag: 0,
            multiple: false,
            requeue: true,
        },
        Reject {
            delivery_tag: 9,
            requeue: false,
        },
        Recover { requeue: true },
        ConfirmSelect,
        UserAdd {
            name: name_255(),
            secret: "pässwörd\0with nul".into(),
            hash_algorithm: "rabbit_password_hashing_sha256".into(),
            tags: "administrator,management".into(),
        },
        UserDelete { name: "bob".into() },
        UserPasswd {
            name: "bob".into(),
            password: "x".repeat(300),
        },
        UserTags {
            name: "bob".into(),
            tags: String::new(),
        },
        PermissionSet(Box::new(crate::native::method::PermissionSpec {
            user: "bob".into(),
            vhost: "/".into(),
            configure: "^(?!amq\\.).*".into(),
            write: String::new(),
            read: ".*".into(),
        })),
        PermissionClear {
            user: "bob".into(),
            vhost: ascii_255(),
        },
        ConnectionBlocked {
            reason: "low on memory".into(),
        },
        ConnectionUnblocked,
        MemoryHighWatermarkSet {
            watermark: MemoryWatermark::Relative(0.4),
        },
        DiskFreeLimitSet { bytes: u64::MAX },
        PolicySet(Box::new(crate::native::method::PolicySpec {
            vhost: "/".into(),
            name: "ttl".into(),
            pattern: "^(?!amq\\.)".into(),
            apply_to: "queues".into(),
            priority: -3,
            definition: "{\"message-ttl\":1000}".into(),
        })),
        PolicyClear {
            vhost: ascii_255(),
            name: "ttl".into(),
        },
        ConnectionCloseAdmin {
            connection_id: u64::MAX,
            reason: ascii_255(),
        },
        DefinitionsExport,
        DefinitionsExportOk {
            json: "{\"vhosts\": [{\"name\": \"/\"}]}".into(),
        },
        DefinitionsImport { json: "{}".into() },
        VhostLimitSet {
            vhost: ascii_255(),
            name: "max-queues".into(),
            value: "-1".into(),
        },
        VhostLimitClear {
            vhost: "/".into(),
            name: ascii_255(),
        },
        UserLimitSet {
            user: "bob".into(),
            name: "max-channels".into(),
            value: "20".into(),
        },
        UserLimitClear {
            user: ascii_255(),
            name: "all".into(),
        },
        ParameterSet {
            component: "federation-upstream".into(),
            vhost: "/".into(),
            name: ascii_255(),
            value: "{\"uri\":\"amqp://up\"}".into(),
        },
        ParameterClear {
            component: "shovel".into(),
            vhost: ascii_255(),
            name: "s".into(),
        },
        GlobalParameterSet {
            name: "cluster_name".into(),
            value: "\"east\"".into(),
        },
        GlobalParameterClear { name: ascii_255() },
        OperatorPolicySet(Box::new(crate::native::method::PolicySpec {
            vhost: "/".into(),
            name: "cap".into(),
            pattern: ".*".into(),
            apply_to: "queues".into(),
            priority: i64::MIN,
            definition: "{\"max-length\":10}".into(),
        })),
        OperatorPolicyClear {
            vhost: "/".into(),
            name: ascii_255(),
        },
        QueuePeek {
            queue: ascii_255(),
            request: "{\"count\":10,\"offset\":0}".into(),
        },
        QueueToolOk { json: "[]".into() },
        QueueReplay {
            queue: "dlq".into(),
            request: "{\"target\":\"origin\"}".into(),
        },
        QueueSearch {
            queue: "q".into(),
            request: "{\"query\":\"é\"}".into(),
        },
        QueuePause { queue: ascii_255() },
        QueueResume { queue: "q".into() },
        QueueUnacked {
            queue: "q".into(),
            request: "{\"limit\":1000}".into(),
        },
    ]
}

/// Number of [`Method`] variants; [`variant_index`] maps them onto `0..VARIANT_COUNT`.
const VARIANT_COUNT: usize = 73;

/// The position of a variant in [`one_of_each`].
///
/// Compile-time exhaustiveness guard: every variant is listed and there is no wildcard, so
/// adding a variant to [`Method`] fails to compile here until it is given an index, and
/// then `one_of_each_has_every_variant_once` fails until [`one_of_each`] holds an instance.
fn variant_index(m: &Method) -> usize {
    use Method::*;
    match m {
        Open { .. } => 0,
        OpenOk { .. } => 1,
        Close { .. } => 2,
        CloseOk => 3,
        Ok => 4,
        VhostDeclare { .. } => 5,
        VhostDelete { .. } => 6,
        List { .. } => 7,
        ListOk { .. } => 8,
        Status => 9,
        StatusOk { .. } => 10,
        ChannelOpen => 11,
        ChannelClose { .. } => 12,
        ExchangeDeclare { .. } => 13,
        ExchangeDelete { .. } => 14,
        ExchangeBind { .. } => 15,
        ExchangeUnbind { .. } => 16,
        QueueDeclare { .. } => 17,
        QueueDeclareOk { .. } => 18,
        QueueBind { .. } => 19,
        QueueUnbind { .. } => 20,
        QueuePurge { .. } => 21,
        QueuePurgeOk { .. } => 22,
        QueueDelete { .. } => 23,
        QueueDeleteOk { .. } => 24,
        BasicQos { .. } => 25,
        BasicConsume { .. } => 26,
        BasicConsumeOk { .. } => 27,
        BasicCancel { .. } => 28,
        Publish { .. } => 29,
        Return { .. } => 30,
        Deliver { .. } => 31,
        BasicGet { .. } => 32,
        GetOk { .. } => 33,
        GetEmpty => 34,
        Ack { .. } => 35,
        Nack { .. } => 36,
        Reject { .. } => 37,
        Recover { .. } => 38,
        ConfirmSelect => 39,
        UserAdd { .. } => 40,
        UserDelete { .. } => 41,
        UserPasswd { .. } => 42,
        UserTags { .. } => 43,
        PermissionSet(_) => 44,
        PermissionClear { .. } => 45,
        ConnectionBlocked { .. } => 46,
        ConnectionUnblocked => 47,
        MemoryHighWatermarkSet { .. } => 48,
        DiskFreeLimitSet { .. } => 49,
        PolicySet(_) => 50,
        PolicyClear { .. } => 51,
        ConnectionCloseAdmin { .. } => 52,
        DefinitionsExport => 53,
        DefinitionsExportOk { .. } => 54,
        DefinitionsImport { .. } => 55,
        VhostLimitSet { .. } => 56,
        VhostLimitClear { .. } => 57,
        UserLimitSet { .. } => 58,
        UserLimitClear { .. } => 59,
        ParameterSet { .. } => 60,
        ParameterClear { .. } => 61,
        GlobalParameterSet { .. } => 62,
        GlobalParameterClear { .. } => 63,
        OperatorPolicySet(_) => 64,
        OperatorPolicyClear { .. } => 65,
        QueuePeek { .. } => 66,
        QueueToolOk { .. } => 67,
        QueueReplay { .. } => 68,
        QueueSearch { .. } => 69,
        QueuePause { .. } => 70,
        QueueResume { .. } => 71,
        QueueUnacked { .. } => 72,
    }
}

/// The wire number of a list kind. Lists every [`ListKind`] without a wildcard.
fn list_kind_number(k: ListKind) -> u8 {
    match k {
        ListKind::Vhosts => 1,
        ListKind::Exchanges => 2,
        ListKind::Queues => 3,
        ListKind::Bindings => 4,
        ListKind::Consumers => 5,
        ListKind::Connections => 6,
        ListKind::Users => 7,
        ListKind::Permissions => 8,
        ListKind::Policies => 9,
        ListKind::VhostLimits => 10,
        ListKind::UserLimits => 11,
        ListKind::Parameters => 12,
        ListKind::GlobalParameters => 13,
        ListKind::OperatorPolicies => 14,
        ListKind::Shovels => 15,
        ListKind::FederationLinks => 16,
    }
}

const LIST_KINDS: [ListKind; 16] = [
    ListKind::Shovels,
    ListKind::FederationLinks,
    ListKind::Policies,
    ListKind::VhostLimits,
    ListKind::UserLimits,
    ListKind::Parameters,
    ListKind::GlobalParameters,
    ListKind::OperatorPolicies,
    ListKind::Vhosts,
    ListKind::Exchanges,
    ListKind::Queues,
    ListKind::Bindings,
    ListKind::Consumers,
    ListKind::Connections,
    ListKind::Users,
    ListKind::Permissions,
];

/// Boundary instances beyond [`one_of_each`]: empty batches, empty strings and zeros,
/// every list kind.
fn edge_cases() -> Vec<Method> {
    let mut v = vec![
        Method::Open {
            user: String::new(),
            password: String::new(),
            vhost: String::new(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: String::new(),
        },
        Method::Publish {
            messages: Vec::new(),
        },
        Method::Deliver {
            deliveries: Vec::new(),
        },
        Method::ListOk { rows: Vec::new() },
        Method::ConnectionBlocked {
            reason: String::new(),
        },
        Method::MemoryHighWatermarkSet {
            watermark: MemoryWatermark::Absolute(0),
        },
        Method::MemoryHighWatermarkSet {
            watermark: MemoryWatermark::Relative(1.0),
        },
        Method::DiskFreeLimitSet { bytes: 0 },
        Method::StatusOk {
            info: FieldTable::new(),
        },
        Method::Close {
            reply_code: 200,
            reply_text: name_255(),
            method_id: 0xFFFF,
        },
        Method::Return {
            reply_code: 312,
            reply_text: String::new(),
            exchange: String::new(),
            routing_key: String::new(),
            properties: Box::default(),
            body: Vec::new(),
        },
    ];
    v.extend(LIST_KINDS.iter().map(|&kind| Method::List { kind }));
    v
}

fn all_cases() -> Vec<Method> {
    let mut v = one_of_each();
    v.extend(edge_cases());
    v
}

fn encode(m: &Method, request_id: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    m.encode(request_id, &mut buf);
    buf
}

/// Deterministic xorshift64 generator (no external crates).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

// ---------------------------------------------------------------------------------------
// Coverage guards
// ---------------------------------------------------------------------------------------

#[test]
fn one_of_each_has_every_variant_once() {
    let indices: Vec<usize> = one_of_each().iter().map(variant_index).collect();
    assert_eq!(indices, (0..VARIANT_COUNT).collect::<Vec<_>>());
}

#[test]
fn method_ids_are_distinct_and_match_the_name_table() {
    let ids: BTreeSet<u16> = one_of_each().iter().map(Method::id).collect();
    assert_eq!(ids.len(), VARIANT_COUNT, "two variants share an id");
    let named: BTreeSet<u16> = (0..=u16::MAX)
        .filter(|&id| method_name(id) != "unknown")
        .collect();
    assert_eq!(ids, named, "method_name() and Method::id() disagree");
    for m in one_of_each() {
        assert_eq!(m.name(), method_name(m.id()));
    }
}

#[test]
fn sample_table_holds_every_field_type() {
    let mut tags = BTreeSet::new();
    collect_tags(&FieldValue::Table(every_type_table()), &mut tags);
    let all: BTreeSet<u8> = b"tbBsuIilfdDSxATFV".iter().copied().collect();
    assert_eq!(tags, all);
}

#[test]
fn list_kind_numbers_round_trip() {
    for v in 0..=u8::MAX {
        match ListKind::from_u8(v) {
            Result::Ok(k) => {
                assert_eq!(list_kind_number(k), v);
                assert_eq!(k as u8, v);
            }
            Err(_) => assert!(!(1..=15).contains(&v), "kind {v} refused"),
        }
    }
    for k in LIST_KINDS {
        assert_eq!(ListKind::from_u8(list_kind_number(k)), Result::Ok(k));
    }
}

// ---------------------------------------------------------------------------------------
// Round trips and refusals
// ---------------------------------------------------------------------------------------

#[test]
fn every_method_round_trips_with_its_request_id() {
    for m in all_cases() {
        for request_id in [0, 1, 0x0102_0304, u32::MAX] {
            let buf = encode(&m, request_id);
            assert_eq!(buf[..2], m.id().to_be_bytes(), "{}", m.name());
            assert_eq!(buf[2..6], request_id.to_be_bytes(), "{}", m.name());
            let (rid, back) = Method::decode(&buf)
                .unwrap_or_else(|e| panic!("{} does not decode: {e}", m.name()));
            assert_eq!(rid, request_id);
            assert_eq!(back, m);
            assert_eq!(
                encode(&back, rid),
                buf,
                "{} re-encodes differently",
                m.name()
            );
        }
    }
}

#[test]
fn every_truncation_is_a_decode_error() {
    for m in all_cases() {
        let buf = encode(&m, 7);
        for cut in 0..buf.len() {
            assert!(
                Method::decode(&buf[..cut]).is_err(),
                "{} cut to {cut} of {} bytes decoded",
                m.name(),
                buf.len()
            );
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    for m in all_cases() {
        for extra in [&[0u8][..], &[0xFF], &[0; 9]] {
            let mut buf = encode(&m, 7);
            buf.extend_from_slice(extra);
            let err = Method::decode(&buf).unwrap_err();
            assert!(err.message.contains("left over"), "{}: {err}", m.name());
        }
    }
}

#[test]
fn unknown_method_ids_are_refused() {
    for id in (0..=u16::MAX).filter(|&id| method_name(id) == "unknown") {
        for fields in [&[][..], &[0u8; 32][..]] {
            let mut buf = Vec::new();
            put_u16(&mut buf, id);
            put_u32(&mut buf, 1);
            buf.extend_from_slice(fields);
            let err = Method::decode(&buf).unwrap_err();
            assert!(
                err.message.contains("unknown method id"),
                "0x{id:04x}: {err}"
            );
        }
    }
}

#[test]
fn nonzero_bool_bytes_decode_as_true() {
    let mut buf = encode(&Method::Recover { requeue: false }, 1);
    *buf.last_mut().unwrap() = 0x80;
    assert_eq!(
        Method::decode(&buf).unwrap().1,
        Method::Recover { requeue: true }
    );
}

/// A batch payload: method id, request id, count, then `rest`.
fn batch(id: u16, count: u32, rest: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    put_u16(&mut buf, id);
    put_u32(&mut buf, 1);
    put_u32(&mut buf, count);
    buf.extend_from_slice(rest);
    buf
}

/// A count the payload cannot hold is refused before anything is allocated for it: were
/// `Vec::with_capacity(count)` reached with these counts, the test process would abort.
#[test]
fn batch_counts_beyond_the_payload_are_refused() {
    for id in [0x0013, 0x0054, 0x0056] {
        for count in [3, 1_000, 1 << 20, 0x7FFF_FFFF, u32::MAX] {
            let err = Method::decode(&batch(id, count, &[0; 10])).unwrap_err();
            assert!(
                err.message.contains("exceeds"),
                "{} count {count}: {err}",
                method_name(id)
            );
        }
    }
}

/// The per-item minimum sizes used by the count bound are exact: a payload of minimal
/// items decodes, one more claimed item is refused.
#[test]
fn batch_count_bound_is_exact() {
    let cases: [(u16, usize); 3] = [(0x0013, 4), (0x0054, 9), (0x0056, 18)];
    for (id, min_item) in cases {
        let items = vec![0u8; 5 * min_item];
        let (_, m) = Method::decode(&batch(id, 5, &items)).unwrap();
        let n = match m {
            Method::ListOk { rows } => rows.len(),
            Method::Publish { messages } => messages.len(),
            Method::Deliver { deliveries } => deliveries.len(),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(n, 5);
        assert!(Method::decode(&batch(id, 6, &items)).is_err());
    }
}

#[test]
fn malformed_fields_are_refused() {
    // A short string that is not UTF-8.
    let mut buf = encode(&Method::QueuePurge { queue: "ab".into() }, 1);
    buf[7] = 0xFF;
    assert!(Method::decode(&buf).is_err());
    // An unknown list kind.
    let mut buf = encode(
        &Method::List {
            kind: ListKind::Vhosts,
        },
        1,
    );
    buf[6] = 17;
    assert!(Method::decode(&buf).is_err());
    // An unknown memory watermark form.
    let mut buf = encode(
        &Method::MemoryHighWatermarkSet {
            watermark: MemoryWatermark::Absolute(1),
        },
        1,
    );
    buf[6] = 3;
    let err = Method::decode(&buf).unwrap_err();
    assert!(err.message.contains("watermark form"), "{err}");
    // Reserved property flag bits 0-2.
    let mut buf = encode(
        &Method::Return {
            reply_code: 312,
            reply_text: String::new(),
            exchange: String::new(),
            routing_key: String::new(),
            properties: Box::default(),
            body: Vec::new(),
        },
        1,
    );
    buf[12] = 0x04;
    assert!(Method::decode(&buf).is_err());
    // A password that is not UTF-8.
    let mut buf = encode(
        &Method::Open {
            user: String::new(),
            password: "p".into(),
            vhost: String::new(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: String::new(),
        },
        1,
    );
    buf[11] = 0xC0;
    assert!(Method::decode(&buf).is_err());
}

#[test]
fn batch_item_encoders_match_the_method_encoding() {
    let request_id = 0xABCD_0001;
    for m in all_cases() {
        let mut by_parts = Vec::new();
        put_u16(&mut by_parts, m.id());
        put_u32(&mut by_parts, request_id);
        match &m {
            Method::Publish { messages } => {
                put_u32(&mut by_parts, messages.len() as u32);
                for p in messages {
                    encode_publish(
                        &mut by_parts,
                        &p.exchange,
                        &p.routing_key,
                        p.mandatory,
                        &p.properties,
                        &p.body,
                    );
                }
            }
            Method::Deliver { deliveries } => {
                put_u32(&mut by_parts, deliveries.len() as u32);
                for d in deliveries {
                    encode_delivery(
                        &mut by_parts,
                        &d.consumer_tag,
                        d.delivery_tag,
                        d.redelivered,
                        &d.exchange,
                        &d.routing_key,
                        &d.properties,
                        &d.body,
                    );
                }
            }
            _ => continue,
        }
        assert_eq!(by_parts, encode(&m, request_id), "{}", m.name());
    }
}

// ---------------------------------------------------------------------------------------
// Framing
// ---------------------------------------------------------------------------------------

/// Cuts a byte stream into frames with [`frame::check`], checking each against
/// `frame_max`.
fn cut_frames(stream: &[u8], frame_max: u32) -> Vec<(FrameHeader, &[u8])> {
    let mut at = 0;
    let mut frames = Vec::new();
    while at < stream.len() {
        let (h, n) = frame::check(&stream[at..], frame_max)
            .unwrap()
            .expect("whole frame");
        assert!(n <= frame_max as usize);
        assert_eq!(n, FRAME_HEADER_BYTES + h.size as usize);
        frames.push((h, &stream[at + FRAME_HEADER_BYTES..at + n]));
        at += n;
    }
    frames
}

/// Joins the method frames of a stream into `(channel, payload)` pairs.
fn join_payloads(stream: &[u8], frame_max: u32) -> Vec<(u16, Vec<u8>)> {
    let mut asm = FrameAssembler::new(PAYLOAD_BYTES_MAX);
    let mut out = Vec::new();
    for (h, payload) in cut_frames(stream, frame_max) {
        if h.frame_type == FrameType::Heartbeat {
            assert_eq!((h.size, h.channel, h.flags), (0, 0, 0));
            continue;
        }
        match asm.push(&h, payload).unwrap() {
            Some(Payload::Whole(ch, p)) => out.push((ch, p.to_vec())),
            Some(Payload::Joined(ch, p)) => out.push((ch, p)),
            Some(Payload::Oversized { .. }) => panic!("unexpected oversized payload"),
            None => {}
        }
    }
    assert_eq!(asm.buffered_bytes(), 0);
    out
}

fn big_publish() -> Method {
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    Method::Publish {
        messages: vec![
            PublishMessage {
                exchange: "amq.fanout".into(),
                routing_key: name_255(),
                mandatory: true,
                properties: full_props(),
                body,
            },
            PublishMessage {
                exchange: String::new(),
                routing_key: "q".into(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: Vec::new(),
            },
        ],
    }
}

#[test]
fn large_payload_is_split_and_rejoined() {
    let m = big_publish();
    let payload = encode(&m, 99);
    for frame_max in [FRAME_BYTES_MIN, FRAME_BYTES_DEFAULT, FRAME_BYTES_MAX] {
        let mut stream = Vec::new();
        frame::write_method(&mut stream, 5, frame_max, |b| m.encode(99, b));
        let frames = cut_frames(&stream, frame_max);
        let chunk_max = frame_max as usize - FRAME_HEADER_BYTES;
        assert_eq!(frames.len(), payload.len().div_ceil(chunk_max));
        for (i, (h, _)) in frames.iter().enumerate() {
            let last = i + 1 == frames.len();
            assert_eq!(h.channel, 5);
            assert_eq!(h.frame_type, FrameType::Method);
            assert_eq!(h.flags, if last { 0 } else { FLAG_MORE });
            if !last {
                assert_eq!(h.size as usize, chunk_max);
            }
        }
        let joined = join_payloads(&stream, frame_max);
        assert_eq!(joined.len(), 1);
        assert_eq!(joined[0].0, 5);
        assert_eq!(joined[0].1, payload);
        assert_eq!(Method::decode(&joined[0].1).unwrap(), (99, m.clone()));
    }
}

#[test]
fn split_happens_exactly_above_the_frame_size() {
    let frame_max = FRAME_BYTES_MIN;
    let fits = frame_max as usize - FRAME_HEADER_BYTES;
    for (payload_len, frames) in [(fits, 1), (fits + 1, 2), (2 * fits, 2), (2 * fits + 1, 3)] {
        let body_len = payload_len - 6 - 4 - 9;
        let m = Method::Publish {
            messages: vec![PublishMessage {
                exchange: String::new(),
                routing_key: String::new(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: vec![0xAB; body_len],
            }],
        };
        assert_eq!(encode(&m, 1).len(), payload_len);
        let mut stream = Vec::new();
        frame::write_method(&mut stream, 1, frame_max, |b| m.encode(1, b));
        assert_eq!(
            cut_frames(&stream, frame_max).len(),
            frames,
            "{payload_len}"
        );
        assert_eq!(join_payloads(&stream, frame_max)[0].1, encode(&m, 1));
    }
}

#[test]
fn a_stream_of_methods_and_heartbeats_decodes_whatever_the_read_sizes() {
    let frame_max = FRAME_BYTES_MIN;
    let mut stream = PROTOCOL_HEADER.to_vec();
    let mut sent = Vec::new();
    for (i, m) in all_cases().into_iter().chain([big_publish()]).enumerate() {
        let channel = (i % 3) as u16;
        frame::write_method(&mut stream, channel, frame_max, |b| m.encode(i as u32, b));
        if i % 4 == 0 {
            frame::write_heartbeat(&mut stream);
        }
        sent.push((channel, i as u32, m));
    }
    // Feed the bytes in irregular reads, as a socket would deliver them.
    let mut rng = XorShift(0x5EED);
    let mut inbox: Vec<u8> = Vec::new();
    let mut fed = 0;
    assert_eq!(stream[..8], PROTOCOL_HEADER);
    let body = &stream[8..];
    let mut asm = FrameAssembler::new(PAYLOAD_BYTES_MAX);
    let mut got = Vec::new();
    while fed < body.len() || !inbox.is_empty() {
        let n = (1 + rng.below(5000)).min(body.len() - fed);
        inbox.extend_from_slice(&body[fed..fed + n]);
        fed += n;
        while let Some((h, len)) = frame::check(&inbox, frame_max).unwrap() {
            if h.frame_type == FrameType::Method {
                let payload = match asm.push(&h, &inbox[FRAME_HEADER_BYTES..len]).unwrap() {
                    Some(Payload::Whole(ch, p)) => Some((ch, p.to_vec())),
                    Some(Payload::Joined(ch, p)) => Some((ch, p)),
                    Some(Payload::Oversized { .. }) => panic!("unexpected oversized payload"),
                    None => None,
                };
                if let Some((ch, p)) = payload {
                    let (rid, m) = Method::decode(&p).unwrap();
                    got.push((ch, rid, m));
                }
            }
            inbox.drain(..len);
        }
        if fed == body.len() {
            assert!(inbox.is_empty(), "stream ends inside a frame");
        }
    }
    assert_eq!(got, sent);
}

#[test]
fn protocol_header_is_rmqp_version_1() {
    assert_eq!(&PROTOCOL_HEADER[..4], b"RMQP");
    assert_eq!(
        u16::from_be_bytes([PROTOCOL_HEADER[4], PROTOCOL_HEADER[5]]),
        PROTOCOL_VERSION
    );
    assert_eq!(PROTOCOL_HEADER[6..], [0, 0]);
    let mut hb = Vec::new();
    frame::write_heartbeat(&mut hb);
    assert_eq!(hb, [0, 0, 0, 0, 2, 0, 0, 0]);
}

// ---------------------------------------------------------------------------------------
// Fuzzing
// ---------------------------------------------------------------------------------------

/// Applies one random mutation to `buf`.
fn mutate(rng: &mut XorShift, buf: &mut Vec<u8>) {
    let at = rng.below(buf.len() + 1);
    let i = at.min(buf.len().saturating_sub(1));
    match rng.below(7) {
        0 if !buf.is_empty() => buf[i] ^= 1 << rng.below(8),
        1 if !buf.is_empty() => buf[i] = rng.byte(),
        2 if !buf.is_empty() => buf[i] = [0, 0xFF, 0x7F, 0x80][rng.below(4)],
        3 => buf.insert(at, rng.byte()),
        4 if at < buf.len() => {
            buf.remove(at);
        }
        5 => buf.truncate(at),
        _ => {
            // Duplicate a short range somewhere else.
            let from = rng.below(buf.len());
            let len = rng.below(16).min(buf.len() - from);
            let piece = buf[from..from + len].to_vec();
            let to = rng.below(buf.len() + 1);
            buf.splice(to..to, piece);
        }
    }
}

/// Decodes `buf`; when it decodes, the re-encoding must decode to the same bytes again
/// (decoding canonicalises: sorted keys, bools as 0/1).
fn decode_must_not_panic(buf: &[u8]) {
    if let Result::Ok((rid, m)) = Method::decode(buf) {
        let once = encode(&m, rid);
        let (rid2, m2) = Method::decode(&once).expect("re-encoding decodes");
        assert_eq!(rid2, rid);
        assert_eq!(encode(&m2, rid2), once);
    }
}

fn frames_must_not_panic(buf: &[u8], frame_max: u32) {
    let mut asm = FrameAssembler::new(1 << 16);
    let mut at = 0;
    while let Result::Ok(Some((h, n))) = frame::check(&buf[at..], frame_max) {
        assert!(n >= FRAME_HEADER_BYTES && at + n <= buf.len());
        if h.frame_type == FrameType::Method {
            if let Result::Ok(Some(p)) = asm.push(&h, &buf[at + FRAME_HEADER_BYTES..at + n]) {
                let bytes = match &p {
                    Payload::Whole(_, b) => b,
                    Payload::Joined(_, b) => b.as_slice(),
                    Payload::Oversized { head, .. } => head.as_slice(),
                };
                decode_must_not_panic(bytes);
            }
        }
        at += n;
    }
}

#[test]
fn fuzz_decode_and_frame_check_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let seeds: Vec<Vec<u8>> = all_cases().iter().map(|m| encode(m, 3)).collect();
    let known_ids: Vec<u16> = one_of_each().iter().map(Method::id).collect();
    let frame_maxes = [
        0,
        7,
        8,
        64,
        FRAME_BYTES_MIN,
        FRAME_BYTES_HANDSHAKE,
        u32::MAX,
    ];
    for i in 0..20_000 {
        let frame_max = frame_maxes[rng.below(frame_maxes.len())];
        let buf = if i % 2 == 0 {
            // Random bytes, usually behind a valid method id so the fields get parsed.
            let len = rng.below(96);
            let mut b: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
            if len >= 2 && rng.below(4) != 0 {
                let id = known_ids[rng.below(known_ids.len())];
                b[..2].copy_from_slice(&id.to_be_bytes());
            }
            b
        } else {
            let mut b = seeds[rng.below(seeds.len())].clone();
            for _ in 0..1 + rng.below(4) {
                mutate(&mut rng, &mut b);
            }
            b
        };
        decode_must_not_panic(&buf);
        frames_must_not_panic(&buf, frame_max);
        // The same bytes behind a valid frame header, possibly corrupted.
        let mut framed = Vec::new();
        frame::write_method(&mut framed, rng.below(3) as u16, 256, |b| {
            b.extend_from_slice(&buf)
        });
        if rng.below(2) == 0 {
            mutate(&mut rng, &mut framed);
        }
        frames_must_not_panic(&framed, 256);
    }
}

// ---------------------------------------------------------------------------------------
// The worked example of docs/protocol.md
// ---------------------------------------------------------------------------------------

const DOC: &str = include_str!("../../docs/protocol.md");

const DOC_CLIENT_HEADER: &str = "524d515000010000";
const DOC_OPEN: &str =
    "0000002301000000000100000001056775657374000000056775657374012f00020000003c000003646f63";
const DOC_OPEN_OK: &str =
    "0000001c0100000000020000000100020000003c07ff05302e312e300000000000000001";
const DOC_CHANNEL_OPEN: &str = "0000000601000001002000000002";
const DOC_CHANNEL_OPEN_OK: &str = "0000000601000001000500000002";
const DOC_QUEUE_DECLARE: &str = "00000014010000010040000000030568656c6c6f0000000000000000";
const DOC_QUEUE_DECLARE_OK: &str = "00000014010000010041000000030568656c6c6f0000000000000000";
const DOC_CONSUME: &str = "00000015010000010051000000040568656c6c6f026331000000000000";
const DOC_CONSUME_OK: &str = "0000000901000001005200000004026331";
const DOC_PUBLISH: &str = "0000001a0100000100540000000500000001000568656c6c6f000000000000026869";
const DOC_DELIVER: &str =
    "000000250100000100560000000000000001026331000000000000000100000568656c6c6f0000000000026869";
const DOC_ACK: &str = "0000000f01000001005a00000006000000000000000100";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of the annotated dump labelled `[label]` in the document. Each dump line is
/// `OOOO  BB BB ..  meaning`: a 4-hex-digit offset, two spaces, bytes separated by single
/// spaces, two spaces, free text. The offsets must count the bytes.
fn doc_dump(label: &str) -> Vec<u8> {
    let marker = format!("[{label}]");
    let mut lines = DOC.lines().skip_while(|l| !l.starts_with(&marker));
    assert!(
        lines.next().is_some(),
        "no dump {marker} in docs/protocol.md"
    );
    let mut bytes = Vec::new();
    for line in lines {
        if line.starts_with("```") {
            break;
        }
        let offset = usize::from_str_radix(&line[..4], 16)
            .unwrap_or_else(|_| panic!("{marker}: bad offset in {line:?}"));
        assert_eq!(offset, bytes.len(), "{marker}: wrong offset in {line:?}");
        assert_eq!(&line[4..6], "  ", "{marker}: {line:?}");
        let field = line[6..].split("  ").next().unwrap_or("");
        for b in field.split(' ') {
            bytes.push(
                u8::from_str_radix(b, 16)
                    .unwrap_or_else(|_| panic!("{marker}: bad byte {b:?} in {line:?}")),
            );
        }
    }
    bytes
}

fn framed(channel: u16, frame_max: u32, request_id: u32, m: &Method) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_method(&mut out, channel, frame_max, |b| m.encode(request_id, b));
    out
}

/// The frames of the worked example, labelled as in the document, with the hex the
/// document shows for them.
fn doc_example() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let hs = FRAME_BYTES_HANDSHAKE;
    let fm = FRAME_BYTES_DEFAULT;
    let no_args = FieldTable::new;
    vec![
        ("client-header", PROTOCOL_HEADER.to_vec(), DOC_CLIENT_HEADER),
        (
            "open",
            framed(
                0,
                hs,
                1,
                &Method::Open {
                    user: "guest".into(),
                    password: "guest".into(),
                    vhost: "/".into(),
                    frame_max: 131_072,
                    heartbeat_s: 60,
                    channel_max: 0,
                    client_name: "doc".into(),
                },
            ),
            DOC_OPEN,
        ),
        (
            "open-ok",
            framed(
                0,
                hs,
                1,
                &Method::OpenOk {
                    frame_max: 131_072,
                    heartbeat_s: 60,
                    channel_max: 2047,
                    server_version: "0.1.0".into(),
                    connection_id: 1,
                },
            ),
            DOC_OPEN_OK,
        ),
        (
            "channel-open",
            framed(1, fm, 2, &Method::ChannelOpen),
            DOC_CHANNEL_OPEN,
        ),
        (
            "channel-open-ok",
            framed(1, fm, 2, &Method::Ok),
            DOC_CHANNEL_OPEN_OK,
        ),
        (
            "queue-declare",
            framed(
                1,
                fm,
                3,
                &Method::QueueDeclare {
                    queue: "hello".into(),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: no_args(),
                },
            ),
            DOC_QUEUE_DECLARE,
        ),
        (
            "queue-declare-ok",
            framed(
                1,
                fm,
                3,
                &Method::QueueDeclareOk {
                    queue: "hello".into(),
                    message_count: 0,
                    consumer_count: 0,
                },
            ),
            DOC_QUEUE_DECLARE_OK,
        ),
        (
            "consume",
            framed(
                1,
                fm,
                4,
                &Method::BasicConsume {
                    queue: "hello".into(),
                    consumer_tag: "c1".into(),
                    no_ack: false,
                    exclusive: false,
                    arguments: no_args(),
                },
            ),
            DOC_CONSUME,
        ),
        (
            "consume-ok",
            framed(
                1,
                fm,
                4,
                &Method::BasicConsumeOk {
                    consumer_tag: "c1".into(),
                },
            ),
            DOC_CONSUME_OK,
        ),
        (
            "publish",
            framed(
                1,
                fm,
                5,
                &Method::Publish {
                    messages: vec![PublishMessage {
                        exchange: String::new(),
                        routing_key: "hello".into(),
                        mandatory: false,
                        properties: BasicProperties::default(),
                        body: b"hi".to_vec(),
                    }],
                },
            ),
            DOC_PUBLISH,
        ),
        (
            "deliver",
            framed(
                1,
                fm,
                0,
                &Method::Deliver {
                    deliveries: vec![Delivery {
                        consumer_tag: "c1".into(),
                        delivery_tag: 1,
                        redelivered: false,
                        exchange: String::new(),
                        routing_key: "hello".into(),
                        properties: BasicProperties::default(),
                        body: b"hi".to_vec(),
                    }],
                },
            ),
            DOC_DELIVER,
        ),
        (
            "ack",
            framed(
                1,
                fm,
                6,
                &Method::Ack {
                    delivery_tag: 1,
                    multiple: false,
                },
            ),
            DOC_ACK,
        ),
    ]
}

#[test]
fn doc_hex_example_matches() {
    for (label, bytes, expected) in doc_example() {
        assert_eq!(
            hex(&bytes),
            expected,
            "[{label}]: encoder and constant differ"
        );
        assert_eq!(
            hex(&doc_dump(label)),
            expected,
            "[{label}]: document and constant differ"
        );
        assert!(
            DOC.contains(expected),
            "[{label}]: the compact hex line is missing from the document"
        );
    }
}
