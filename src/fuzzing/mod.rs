//! Fuzz target bodies: untrusted bytes through the decoders exactly as the server and the
//! store use them, with the properties every decode must keep.
//!
//! The cargo-fuzz targets in `fuzz/fuzz_targets/` are one-liners calling these functions,
//! and `tests/it/fuzz_corpus.rs` replays the committed corpus through them on stable Rust, so
//! a crash found once stays fixed. `docs/security.md §7.2` says how to run them.
//!
//! Every target reads its first input byte as a *configuration* (frame size, byte bounds,
//! where to cut the stream into two reads) and the rest as the bytes under test, so a
//! fuzzer explores the limits the server runs with as well as the bytes themselves.
//!
//! | target | bytes | what is exercised |
//! |---|---|---|
//! | [`native_frame`] | a native-protocol stream after the protocol header | [`frame::check`], [`FrameAssembler`], [`PublishBatch`] (checked, then read in place), [`Method::decode`], as `server::native::input` runs them |
//! | [`amqp_frame`] | an AMQP 0-9-1 stream after the protocol header | [`amqp::check`], [`AmqpInput`] (content assembly), [`AmqpMethod::decode`], [`parse_content_header`] (properties, field tables) |
//! | [`storage_record`] | the bytes of a segment file (and of an ack log) | [`record::decode`], [`record::decode_header`], [`Scanner`], [`record::scan_file`] in windows, [`ack_log::scan_bytes`] |
//!
//! The functions are test support, not broker API. They never panic on any input
//! *unless* a decoder is wrong: a panic inside a decoder, or a broken property
//! (`# Panics` of each function), is the finding.

use crate::amqp::{self, parse_content_header, AmqpMethod, FrameType as AmqpFrameType};
use crate::error::ReplyCode;
use crate::limits::{
    FRAME_BYTES_HANDSHAKE, FRAME_BYTES_MAX, FRAME_BYTES_MIN, MESSAGE_BODY_BYTES_MAX_DEFAULT,
    PROPERTIES_BYTES_MAX,
};
use crate::native::frame::{self, FrameHeader, FrameType, Payload, FRAME_HEADER_BYTES};
use crate::native::publish_batch::PUBLISH_METHOD_ID;
use crate::native::{FrameAssembler, Method, PublishBatch};
use crate::server::amqp::event::AmqpEvent as InputEvent;
use crate::server::amqp::input::AmqpInput;
use crate::storage::ack_log;
use crate::storage::backend::StorageFile;
use crate::storage::record::{self, RecordView, ScanItem, Scanner, HEADER_BYTES, TRAILER_BYTES};
use crate::storage::MessageData;
use crate::types::codec::{put_u16, put_u64};
use std::io;
use std::path::{Path, PathBuf};

pub mod seeds;

/// Frame sizes a fuzz input may select (configuration bits 0–1), in bytes: a tiny one so
/// short inputs reach split payloads, the smallest negotiable, the handshake's and the
/// largest negotiable.
const FRAME_MAX_CHOICES: [u32; 4] = [64, FRAME_BYTES_MIN, FRAME_BYTES_HANDSHAKE, FRAME_BYTES_MAX];

/// A small byte bound (joined payload, body), selectable by configuration bit 2 so short
/// inputs reach the oversized paths, in bytes.
const SMALL_BOUND_BYTES: usize = 48;

/// Payload bound of a native connection with the default body limit, in bytes: the same
/// sum `server::native::input` computes (body limit + properties + 4096).
const NATIVE_PAYLOAD_BYTES_MAX: usize =
    MESSAGE_BODY_BYTES_MAX_DEFAULT + PROPERTIES_BYTES_MAX + 4096;

/// The limits one fuzz input runs with, from its first byte.
#[derive(Debug, Clone, Copy)]
struct Config {
    /// Negotiated frame size, header included, in bytes.
    frame_max: u32,
    /// Whether the byte bound is [`SMALL_BOUND_BYTES`] rather than the server's default.
    small_bound: bool,
    /// Where the stream is cut into two reads, in 32nds of its length.
    cut_32ths: usize,
}

impl Config {
    fn from_byte(b: u8) -> Config {
        Config {
            frame_max: FRAME_MAX_CHOICES[usize::from(b & 3)],
            small_bound: b & 4 != 0,
            cut_32ths: usize::from(b >> 3),
        }
    }

    /// The stream cut in two at the configured point: the server reads a socket in
    /// arbitrary pieces, and a frame split across reads must decode like a whole one.
    fn cut<'a>(&self, stream: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        stream.split_at(stream.len() * self.cut_32ths / 32)
    }
}

/// The native-protocol decoders on `data`: byte 0 picks the frame size, the payload
/// bound and a read boundary; the rest is the stream a client sends after its protocol
/// header.
///
/// Runs the I/O thread's sequence (`server::native::input`, `frames` / `frame` / `decode`):
/// [`frame::check`] cuts frames, [`FrameAssembler`] joins split payloads within the
/// bound, a `basic.publish` payload goes through [`PublishBatch::decode`] and is read in
/// place with [`PublishBatch::messages`], any other through [`Method::decode`]; the first
/// error closes the input, as it closes the connection.
///
/// # Panics
/// When a decoder panics, or a property fails:
/// - the stream read whole and read in two pieces gives the same events;
/// - [`PublishBatch::decode`] accepts exactly the payloads [`Method::decode`] accepts,
///   and its messages read in place are the messages `Method::decode` returns;
/// - a decoded method re-encodes to bytes that decode to the same method and encode to
///   the same bytes again, and those bytes framed by [`frame::write_method`] at the
///   configured frame size come back whole from [`frame::check`] and [`FrameAssembler`].
pub fn native_frame(data: &[u8]) {
    let Some((&config, stream)) = data.split_first() else {
        return;
    };
    let config = Config::from_byte(config);
    let payload_max = if config.small_bound {
        SMALL_BOUND_BYTES
    } else {
        NATIVE_PAYLOAD_BYTES_MAX
    };
    let whole = NativeInput::run(config.frame_max, payload_max, &[stream]);
    let (a, b) = config.cut(stream);
    let pieces = NativeInput::run(config.frame_max, payload_max, &[a, b]);
    assert_eq!(whole, pieces, "reading in two pieces changed the events");
}

/// What the native input made of a payload, comparable between runs (methods by their
/// canonical encoding: a field table may hold a NaN, which is not equal to itself).
#[derive(Debug, PartialEq, Eq)]
enum NativeEvent {
    Method {
        channel: u16,
        encoded: Vec<u8>,
    },
    Publish {
        channel: u16,
        request_id: u32,
        messages: usize,
    },
    Oversized {
        channel: u16,
        head: Vec<u8>,
        size: u64,
    },
    Error(ReplyCode, String),
}

/// One native connection's input side, as `server::native::input` keeps it.
struct NativeInput {
    frame_max: u32,
    assembler: FrameAssembler,
    /// Bytes read but not yet cut into frames.
    pending: Vec<u8>,
    closed: bool,
    events: Vec<NativeEvent>,
}

impl NativeInput {
    fn run(frame_max: u32, payload_max: usize, reads: &[&[u8]]) -> Vec<NativeEvent> {
        let mut input = NativeInput {
            frame_max,
            assembler: FrameAssembler::new(payload_max),
            pending: Vec::new(),
            closed: false,
            events: Vec::new(),
        };
        for read in reads {
            if input.closed {
                break;
            }
            let mut buf = std::mem::take(&mut input.pending);
            buf.extend_from_slice(read);
            let used = input.parse(&buf);
            input.pending = buf.split_off(used);
        }
        input.events
    }

    /// `NativeInput::frames` (after the protocol header): cuts whole frames, returns the bytes
    /// consumed.
    fn parse(&mut self, data: &[u8]) -> usize {
        let mut at = 0;
        while !self.closed {
            match frame::check(&data[at..], self.frame_max) {
                Ok(None) => break,
                Ok(Some((header, n))) => {
                    assert!(n >= FRAME_HEADER_BYTES && at + n <= data.len());
                    assert!(n as u64 <= u64::from(self.frame_max));
                    let payload = &data[at + FRAME_HEADER_BYTES..at + n];
                    assert_eq!(payload.len(), header.size as usize);
                    at += n;
                    self.on_frame(&header, payload);
                }
                Err(e) => self.error(ReplyCode::FrameError, e.message),
            }
        }
        at
    }

    /// `NativeInput::frame`.
    fn on_frame(&mut self, header: &FrameHeader, payload: &[u8]) {
        if header.frame_type == FrameType::Heartbeat {
            assert!(payload.is_empty() && header.channel == 0 && header.flags == 0);
            return;
        }
        match self.assembler.push(header, payload) {
            Ok(None) => {}
            Ok(Some(Payload::Whole(ch, p))) => self.decode(ch, p),
            Ok(Some(Payload::Joined(ch, p))) => self.decode(ch, &p),
            Ok(Some(Payload::Oversized {
                channel,
                head,
                size,
            })) => {
                assert!(
                    head.len() <= 6,
                    "an oversized payload keeps at most 6 bytes"
                );
                self.events.push(NativeEvent::Oversized {
                    channel,
                    head,
                    size,
                });
            }
            Err(e) => self.error(ReplyCode::FrameError, e.message),
        }
    }

    /// `server::native::input::decode`, with both publish paths checked against each other.
    fn decode(&mut self, channel: u16, payload: &[u8]) {
        if payload.starts_with(&PUBLISH_METHOD_ID.to_be_bytes()) {
            let batch = PublishBatch::decode(payload);
            let method = Method::decode(payload);
            assert_eq!(
                batch.is_ok(),
                method.is_ok(),
                "PublishBatch::decode and Method::decode disagree: {batch:?} / {method:?}"
            );
            if let (Ok((request_id, batch)), Ok((method_request_id, method))) = (batch, method) {
                assert_eq!(request_id, method_request_id);
                check_publish_batch(&batch, &method);
                self.events.push(NativeEvent::Publish {
                    channel,
                    request_id,
                    messages: batch.len(),
                });
                return;
            }
        }
        match Method::decode(payload) {
            Ok((request_id, method)) => {
                let encoded = native_round_trip(request_id, &method);
                check_native_framing(channel, self.frame_max, &encoded);
                self.events.push(NativeEvent::Method { channel, encoded });
            }
            Err(e) => self.error(ReplyCode::SyntaxError, e.message),
        }
    }

    fn error(&mut self, code: ReplyCode, text: String) {
        self.closed = true;
        self.events.push(NativeEvent::Error(code, text));
    }
}

/// A publish batch read in place holds the messages `Method::decode` found.
fn check_publish_batch(batch: &PublishBatch, method: &Method) {
    let Method::Publish { messages } = method else {
        panic!("a basic.publish payload decoded as {}", method.name());
    };
    assert_eq!(batch.len(), messages.len());
    assert_eq!(batch.is_empty(), messages.is_empty());
    let mut read = 0;
    for (got, want) in batch.messages().zip(messages) {
        read += 1;
        assert_eq!(got.exchange, want.exchange);
        assert_eq!(got.routing_key, want.routing_key);
        assert_eq!(got.mandatory, want.mandatory);
        assert_eq!(got.body, &want.body[..]);
        let got_props = got.properties.map(|p| *p).unwrap_or_default();
        assert_eq!(got_props.to_bytes(), want.properties.to_bytes());
    }
    assert_eq!(read, batch.len(), "PublishBatch::messages stopped early");
    match batch.clone().into_method() {
        Ok(m) => assert_eq!(encode_native(0, &m), encode_native(0, method)),
        Err(e) => panic!("PublishBatch::into_method refused a checked batch: {e}"),
    }
}

fn encode_native(request_id: u32, m: &Method) -> Vec<u8> {
    let mut out = Vec::new();
    m.encode(request_id, &mut out);
    out
}

/// Encodes `method`, decodes it again and checks it is the same; returns the encoding.
fn native_round_trip(request_id: u32, method: &Method) -> Vec<u8> {
    let encoded = encode_native(request_id, method);
    match Method::decode(&encoded) {
        Ok((id, again)) => {
            assert_eq!(id, request_id);
            assert_eq!(
                encode_native(id, &again),
                encoded,
                "{} does not round-trip",
                method.name()
            );
            assert_eq!(format!("{again:?}"), format!("{method:?}"));
        }
        Err(e) => panic!("{} does not decode after encoding: {e}", method.name()),
    }
    encoded
}

/// A payload framed at `frame_max` (split when larger) comes back whole.
fn check_native_framing(channel: u16, frame_max: u32, payload: &[u8]) {
    let mut out = Vec::new();
    frame::write_method(&mut out, channel, frame_max, |b| {
        b.extend_from_slice(payload)
    });
    let mut assembler = FrameAssembler::new(usize::MAX);
    let mut at = 0;
    let mut joined = None;
    while at < out.len() {
        assert!(joined.is_none(), "frames after the last piece of a payload");
        let (header, n) = match frame::check(&out[at..], frame_max) {
            Ok(Some(found)) => found,
            other => panic!("write_method wrote a frame check refuses: {other:?}"),
        };
        assert_eq!(header.channel, channel);
        match assembler.push(&header, &out[at + FRAME_HEADER_BYTES..at + n]) {
            Ok(None) => {}
            Ok(Some(Payload::Whole(_, p))) => joined = Some(p.to_vec()),
            Ok(Some(Payload::Joined(_, p))) => joined = Some(p),
            other => panic!("reassembling write_method's frames: {other:?}"),
        }
        at += n;
    }
    assert_eq!(
        joined.as_deref(),
        Some(payload),
        "framing changed the payload"
    );
}

/// The AMQP 0-9-1 decoders on `data`: byte 0 picks the frame size, the body limit and a
/// read boundary; the rest is the stream a client sends after its protocol header.
///
/// Runs the I/O thread's sequence (`server::amqp::input::AmqpInput`): [`amqp::check`] cuts
/// frames, [`AmqpInput::frame`] decodes methods and joins each `basic.publish` with its
/// content header and body frames (bodies over the limit are counted and dropped); the
/// first violation closes the input, as it closes the connection.
///
/// # Panics
/// When a decoder panics, or a property fails:
/// - the stream read whole and read in two pieces gives the same events;
/// - every method payload that [`AmqpMethod::decode`] accepts re-encodes to bytes that
///   decode to the same method and encode to the same bytes again; likewise every
///   content header [`parse_content_header`] accepts (properties, headers table);
/// - a completed content's body is exactly the size its header declared, and no body
///   over the limit is buffered.
pub fn amqp_frame(data: &[u8]) {
    let Some((&config, stream)) = data.split_first() else {
        return;
    };
    let config = Config::from_byte(config);
    let body_max = if config.small_bound {
        SMALL_BOUND_BYTES
    } else {
        MESSAGE_BODY_BYTES_MAX_DEFAULT
    };
    let whole = AmqpStream::run(config.frame_max, body_max, &[stream]);
    let (a, b) = config.cut(stream);
    let pieces = AmqpStream::run(config.frame_max, body_max, &[a, b]);
    assert_eq!(whole, pieces, "reading in two pieces changed the events");
}

/// What the AMQP input made of a frame, comparable between runs.
#[derive(Debug, PartialEq, Eq)]
enum AmqpEvent {
    Method {
        channel: u16,
        encoded: Vec<u8>,
        content: Option<(Vec<u8>, Vec<u8>)>,
    },
    Oversized {
        channel: u16,
        size: u64,
    },
    Violation(ReplyCode, (u16, u16)),
}

/// One AMQP connection's input side, as `server::amqp::input` keeps it.
struct AmqpStream {
    frame_max: u32,
    body_max: usize,
    input: AmqpInput,
    pending: Vec<u8>,
    closed: bool,
    events: Vec<AmqpEvent>,
}

impl AmqpStream {
    fn run(frame_max: u32, body_max: usize, reads: &[&[u8]]) -> Vec<AmqpEvent> {
        let mut s = AmqpStream {
            frame_max,
            body_max,
            input: AmqpInput::new(body_max),
            pending: Vec::new(),
            closed: false,
            events: Vec::new(),
        };
        for read in reads {
            if s.closed {
                break;
            }
            let mut buf = std::mem::take(&mut s.pending);
            buf.extend_from_slice(read);
            let used = s.parse(&buf);
            s.pending = buf.split_off(used);
        }
        s.events
    }

    /// `AmqpInput::frames` (after the protocol header): cuts whole frames, returns the
    /// bytes consumed.
    fn parse(&mut self, data: &[u8]) -> usize {
        let mut at = 0;
        while !self.closed {
            match amqp::check(&data[at..], self.frame_max) {
                Ok(None) => break,
                Ok(Some((header, n))) => {
                    assert!(at + n <= data.len() && n as u64 <= u64::from(self.frame_max));
                    let frame = &data[at..at + n];
                    let payload = header.payload(frame);
                    assert_eq!(payload.len(), header.size as usize);
                    assert_eq!(frame.last(), Some(&amqp::FRAME_END));
                    at += n;
                    check_amqp_payload(header.frame_type, payload);
                    match self.input.frame(&header, payload) {
                        Ok(None) => {}
                        Ok(Some((event, _cost))) => self.event(event),
                        Err(v) => {
                            self.closed = true;
                            self.events
                                .push(AmqpEvent::Violation(v.code, v.class_method));
                        }
                    }
                }
                Err(e) => {
                    self.closed = true;
                    self.events.push(AmqpEvent::Violation(e.code, (0, 0)));
                }
            }
        }
        at
    }

    fn event(&mut self, event: InputEvent) {
        let e = match event {
            InputEvent::Method {
                channel,
                method,
                content,
            } => {
                assert_eq!(method.has_content(), content.is_some());
                let content = content.map(|c| {
                    assert!(
                        c.body.len() <= self.body_max,
                        "a body over the limit was kept"
                    );
                    let props = c.properties.map(|p| *p).unwrap_or_default();
                    (props.to_bytes(), c.body)
                });
                AmqpEvent::Method {
                    channel,
                    encoded: amqp_round_trip(&method),
                    content,
                }
            }
            InputEvent::Oversized { channel, size } => {
                assert!(size > self.body_max as u64);
                AmqpEvent::Oversized { channel, size }
            }
            other => panic!("AmqpInput produced a non-AMQP event: {other:?}"),
        };
        self.events.push(e);
    }
}

/// Decodes a method or content header payload on its own (as `AmqpInput` does) and, when
/// it decodes, checks the round trip.
fn check_amqp_payload(frame_type: AmqpFrameType, payload: &[u8]) {
    match frame_type {
        AmqpFrameType::Method => {
            if let Ok(m) = AmqpMethod::decode(payload) {
                amqp_round_trip(&m);
            }
        }
        AmqpFrameType::Header => {
            if let Ok(h) = parse_content_header(payload) {
                let mut out = Vec::new();
                put_u16(&mut out, h.class_id);
                put_u16(&mut out, 0);
                put_u64(&mut out, h.body_size);
                h.properties.encode(&mut out);
                match parse_content_header(&out) {
                    Ok(again) => {
                        assert_eq!((again.class_id, again.body_size), (h.class_id, h.body_size));
                        assert_eq!(again.properties.to_bytes(), h.properties.to_bytes());
                    }
                    Err(e) => panic!("a content header does not decode after encoding: {e}"),
                }
            }
        }
        AmqpFrameType::Body | AmqpFrameType::Heartbeat => {}
    }
}

/// Encodes an AMQP method, decodes it again and checks it is the same; returns the
/// encoding.
fn amqp_round_trip(method: &AmqpMethod) -> Vec<u8> {
    let mut encoded = Vec::new();
    method.encode(&mut encoded);
    match AmqpMethod::decode(&encoded) {
        Ok(again) => {
            let mut twice = Vec::new();
            again.encode(&mut twice);
            assert_eq!(twice, encoded, "{} does not round-trip", method.name());
            assert_eq!(format!("{again:?}"), format!("{method:?}"));
        }
        Err(e) => panic!("{} does not decode after encoding: {e}", method.name()),
    }
    encoded
}

/// The segment-file decoders on `data`: byte 0 picks the scan window; the rest is the
/// content of a segment file, and also read as an ack log.
///
/// Runs what recovery runs (`storage::queue_store` open): [`record::scan_file`] over the
/// file in windows, and what a read of one record runs: [`record::decode_header`] then
/// [`record::decode`]; plus the [`Scanner`] over the whole bytes and
/// [`ack_log::scan_bytes`].
///
/// # Panics
/// When a decoder panics, or a property fails:
/// - a record that decodes lies within the input, both its checksums are right and it
///   re-encodes to a record that decodes to the same message;
/// - the scanner's records and damaged spans tile the input in order, and ids increase;
/// - scanning the file in windows of any size finds what a whole scan finds;
/// - every ack-log entry read has a valid checksum.
pub fn storage_record(data: &[u8]) {
    let Some((&config, bytes)) = data.split_first() else {
        return;
    };
    if let Ok(header) = record::decode_header(bytes) {
        assert!(bytes.len() >= HEADER_BYTES);
        assert_eq!(crc32fast::hash(&bytes[..20]), be_u32(&bytes[20..24]));
        assert!(header.record_len() <= record::RECORD_BYTES_MAX);
    }
    if let Ok(view) = record::decode(bytes) {
        assert_eq!(view.raw, bytes);
        check_record(&view);
    }
    let whole = scan_whole(bytes);
    let window_bytes = u64::from(config) + 1;
    let file = MemFile::new(bytes);
    let mut windowed = Vec::new();
    let scan = record::scan_file_in_windows(&file, window_bytes, &mut |offset, r| {
        windowed.push((offset, r.id));
    });
    let scan = match scan {
        Ok(scan) => scan,
        Err(e) => panic!("scanning in windows of {window_bytes} bytes failed: {e}"),
    };
    assert_eq!(windowed, whole, "windows of {window_bytes} bytes");
    let mut once = Vec::new();
    let full = record::scan_file_in_windows(&file, bytes.len() as u64 + 1, &mut |o, r| {
        once.push((o, r.id))
    });
    match full {
        Ok(full) => assert_eq!(scan, full, "windows of {window_bytes} bytes"),
        Err(e) => panic!("scanning in one window failed: {e}"),
    }
    assert_eq!(once, whole);
    check_ack_log(bytes);
}

/// Scans `bytes` as a whole segment; checks the items tile the bytes; returns the records
/// found as `(offset, id)`.
fn scan_whole(bytes: &[u8]) -> Vec<(u64, u64)> {
    let mut found = Vec::new();
    let mut at = 0u64;
    let mut last_id = None;
    for item in Scanner::new(bytes) {
        match item {
            ScanItem::Record { offset, record } => {
                assert_eq!(offset, at, "a gap before the record");
                let end = offset as usize + record.raw.len();
                assert_eq!(record.raw, &bytes[offset as usize..end]);
                check_record(&record);
                if let Some(previous) = last_id {
                    assert!(record.id > previous, "ids not increasing");
                }
                last_id = Some(record.id);
                found.push((offset, record.id));
                at = end as u64;
            }
            ScanItem::Damaged(span) => {
                assert_eq!(span.start, at, "a gap before the damaged span");
                assert!(span.end > span.start && span.end <= bytes.len() as u64);
                at = span.end;
            }
            ScanItem::Incomplete { .. } => panic!("a whole-file scan reported Incomplete"),
        }
    }
    assert_eq!(at, bytes.len() as u64, "the scan stopped before the end");
    found
}

/// A decoded record: checksums right, and it re-encodes to the same message.
fn check_record(view: &RecordView<'_>) {
    let raw = view.raw;
    assert!(raw.len() >= HEADER_BYTES + TRAILER_BYTES);
    assert_eq!(crc32fast::hash(&raw[..20]), be_u32(&raw[20..24]));
    let payload_end = raw.len() - TRAILER_BYTES;
    assert_eq!(
        crc32fast::hash(&raw[HEADER_BYTES..payload_end]),
        be_u32(&raw[payload_end..])
    );
    let message = MessageData {
        timestamp_ms: view.timestamp_ms,
        exchange: view.exchange,
        routing_key: view.routing_key,
        properties: &view.properties,
        body: view.body,
    };
    let mut out = Vec::new();
    if let Err(e) = record::encode(view.id, &message, &mut out) {
        panic!("a decoded record does not encode: {e}");
    }
    match record::decode(&out) {
        Ok(again) => {
            assert_eq!(
                (
                    again.id,
                    again.timestamp_ms,
                    again.exchange,
                    again.routing_key
                ),
                (view.id, view.timestamp_ms, view.exchange, view.routing_key)
            );
            assert_eq!(again.body, view.body);
            assert_eq!(again.properties.to_bytes(), view.properties.to_bytes());
        }
        Err(e) => panic!("a re-encoded record does not decode: {e}"),
    }
}

/// An ack log scan: every entry it hands out has a valid checksum.
fn check_ack_log(bytes: &[u8]) {
    let mut entries = 0u64;
    let scan = ack_log::scan_bytes(bytes, &mut |e| {
        entries += 1;
        assert_eq!(ack_log::decode(&ack_log::encode(e)), Ok(e));
    });
    assert_eq!(scan.entries, entries);
    assert!(scan.valid_len <= scan.len && scan.len == bytes.len() as u64);
    for raw in bytes[..scan.valid_len as usize].chunks_exact(ack_log::ENTRY_BYTES) {
        if let Ok(e) = ack_log::decode(raw) {
            assert_eq!(ack_log::encode(e)[..], raw[..]);
        }
    }
}

fn be_u32(b: &[u8]) -> u32 {
    b.iter().fold(0u32, |acc, &x| (acc << 8) | u32::from(x))
}

/// A read-only file in memory, for scanning fuzz bytes as a segment file.
#[derive(Debug)]
struct MemFile {
    bytes: Vec<u8>,
    path: PathBuf,
}

impl MemFile {
    fn new(bytes: &[u8]) -> MemFile {
        MemFile {
            bytes: bytes.to_vec(),
            path: PathBuf::from("fuzz/queue_data.1"),
        }
    }
}

impl StorageFile for MemFile {
    fn append(&self, _buf: &[u8]) -> io::Result<u64> {
        Err(io::Error::other("read-only"))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.bytes.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn truncate(&self, _len: u64) -> io::Result<()> {
        Err(io::Error::other("read-only"))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}
