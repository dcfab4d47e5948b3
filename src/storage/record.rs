//! The on-disk message record of a queue segment (`queue_data.<N>`), and the scanner that
//! finds the valid records of a segment and resynchronises after damage.
//!
//! Byte layout (all integers big-endian; `docs/storage.md` has a worked example):
//!
//! ```text
//! offset size field
//! 0      4    magic b"RMQR"
//! 4      1    format version = 1
//! 5      1    kind = 1 (message)
//! 6      2    reserved = 0
//! 8      8    record id (u64)
//! 16     4    payload length N (u32), at most RECORD_PAYLOAD_BYTES_MAX
//! 20     4    CRC32 of bytes 0..20
//! 24     N    payload: u64 timestamp_ms, short string exchange, short string routing key,
//!             properties (BasicProperties binary form), u32 body length + body
//! 24+N   4    CRC32 of the payload
//! ```
//!
//! The header checksum makes the length trustworthy before anything is allocated or
//! skipped, and lets a scan recognise the start of the next record after a damaged one.

use crate::limits::PAYLOAD_BYTES_MAX;
use crate::storage::backend::StorageFile;
use crate::storage::types::MessageData;
use crate::types::codec::{put_long_bytes, put_short_str, put_u64, Reader};
use crate::types::BasicProperties;
use byteorder::{BigEndian, ByteOrder};
use std::fmt;
use std::io;

/// First four bytes of every record.
pub const MAGIC: [u8; 4] = *b"RMQR";

/// The record format this code writes and reads.
pub const FORMAT_VERSION: u8 = 1;

/// Record kind: a message.
pub const KIND_MESSAGE: u8 = 1;

/// Bytes before the payload: magic, version, kind, reserved, id, length, header CRC.
pub const HEADER_BYTES: usize = 24;

/// Bytes after the payload: its CRC32.
pub const TRAILER_BYTES: usize = 4;

/// Largest payload a record may declare, in bytes: twice the largest protocol payload
/// (`limits::PAYLOAD_BYTES_MAX`), so any message the broker accepts fits, while a length
/// field damaged in a way the header CRC missed still cannot make a reader allocate
/// gigabytes.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = PAYLOAD_BYTES_MAX * 2;

/// Largest whole record, in bytes.
pub const RECORD_BYTES_MAX: usize = HEADER_BYTES + RECORD_PAYLOAD_BYTES_MAX + TRAILER_BYTES;

/// Bytes read from a segment at a time by [`scan_file`] (8 MiB; a longer record is read
/// whole, up to [`RECORD_BYTES_MAX`]).
pub const SCAN_WINDOW_BYTES: u64 = 8 * 1024 * 1024;

/// Why bytes are not a valid record (or a message cannot be encoded as one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The bytes end before the record does.
    Truncated {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// The first four bytes are not `RMQR`.
    BadMagic,
    /// The header CRC does not match bytes 0..20.
    HeaderChecksum,
    /// The header declares a payload longer than [`RECORD_PAYLOAD_BYTES_MAX`].
    PayloadTooLong(u64),
    /// A valid header of a format version this code does not know.
    UnsupportedVersion(u8),
    /// A valid header of a record kind this code does not know.
    UnknownKind(u8),
    /// The payload CRC does not match.
    PayloadChecksum,
    /// The payload's checksum is right but its contents do not decode.
    Payload(String),
    /// The record's id is not above the previous record's in the same segment (ids are
    /// written in increasing order).
    IdNotIncreasing {
        /// This record's id.
        id: u64,
        /// The previous valid record's id.
        previous: u64,
    },
    /// Bytes follow the record where exactly one record was expected.
    TrailingBytes(u64),
    /// The exchange name or routing key is longer than a short string (255 bytes).
    NameTooLong(usize),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Truncated { needed, available } => {
                write!(
                    f,
                    "truncated record: needs {needed} bytes, {available} there"
                )
            }
            RecordError::BadMagic => f.write_str("no record magic"),
            RecordError::HeaderChecksum => f.write_str("header checksum mismatch"),
            RecordError::PayloadTooLong(n) => write!(
                f,
                "payload length {n} exceeds the limit of {RECORD_PAYLOAD_BYTES_MAX} bytes"
            ),
            RecordError::UnsupportedVersion(v) => write!(f, "unsupported record version {v}"),
            RecordError::UnknownKind(k) => write!(f, "unknown record kind {k}"),
            RecordError::PayloadChecksum => f.write_str("payload checksum mismatch"),
            RecordError::Payload(m) => write!(f, "undecodable payload: {m}"),
            RecordError::IdNotIncreasing { id, previous } => {
                write!(f, "record id {id} follows id {previous}")
            }
            RecordError::TrailingBytes(n) => write!(f, "{n} bytes after the record"),
            RecordError::NameTooLong(n) => {
                write!(f, "exchange or routing key of {n} bytes (max 255)")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// A record's header, checked (magic, CRC, length bound) but not interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Format version (byte 4).
    pub version: u8,
    /// Record kind (byte 5).
    pub kind: u8,
    /// Record id (bytes 8..16).
    pub id: u64,
    /// Payload length N (bytes 16..20), in bytes.
    pub payload_len: u32,
}

impl Header {
    /// Length of the whole record, header and trailer included, in bytes.
    pub fn record_len(&self) -> usize {
        HEADER_BYTES + self.payload_len as usize + TRAILER_BYTES
    }
}

/// A valid record, borrowing its strings and body from the bytes it was decoded from.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordView<'a> {
    /// Record id.
    pub id: u64,
    /// When the broker accepted the message, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// Exchange it was published to.
    pub exchange: &'a str,
    /// Routing key it was published with.
    pub routing_key: &'a str,
    /// Its properties.
    pub properties: BasicProperties,
    /// Its body.
    pub body: &'a [u8],
    /// The whole record as stored (what compaction copies).
    pub raw: &'a [u8],
}

/// Appends the record of `message` with id `id` to `out`; returns its length in bytes.
///
/// # Errors
/// [`RecordError::NameTooLong`] for an exchange or routing key over 255 bytes,
/// [`RecordError::PayloadTooLong`] when the payload would exceed
/// [`RECORD_PAYLOAD_BYTES_MAX`]; `out` is left as it was.
pub fn encode(id: u64, message: &MessageData<'_>, out: &mut Vec<u8>) -> Result<usize, RecordError> {
    for name in [message.exchange, message.routing_key] {
        if name.len() > u8::MAX as usize {
            return Err(RecordError::NameTooLong(name.len()));
        }
    }
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_BYTES]);
    put_u64(out, message.timestamp_ms);
    put_short_str(out, message.exchange);
    put_short_str(out, message.routing_key);
    message.properties.encode(out);
    let payload_len = out.len() - start - HEADER_BYTES + 4 + message.body.len();
    if payload_len > RECORD_PAYLOAD_BYTES_MAX {
        out.truncate(start);
        return Err(RecordError::PayloadTooLong(payload_len as u64));
    }
    put_long_bytes(out, message.body);
    let header = &mut out[start..start + HEADER_BYTES];
    header[0..4].copy_from_slice(&MAGIC);
    header[4] = FORMAT_VERSION;
    header[5] = KIND_MESSAGE;
    BigEndian::write_u64(&mut header[8..16], id);
    BigEndian::write_u32(&mut header[16..20], payload_len as u32);
    let header_crc = crc32fast::hash(&header[0..20]);
    BigEndian::write_u32(&mut header[20..24], header_crc);
    let payload_crc = crc32fast::hash(&out[start + HEADER_BYTES..]);
    out.extend_from_slice(&payload_crc.to_be_bytes());
    Ok(out.len() - start)
}

/// Checks the header at the start of `bytes`: magic, header CRC and the length bound.
/// Version and kind are returned, not checked (a valid header of an unknown version is
/// still the start of a record).
///
/// # Errors
/// [`RecordError::Truncated`] when fewer than [`HEADER_BYTES`] bytes are given and they
/// begin like a record; [`RecordError::BadMagic`], [`RecordError::HeaderChecksum`],
/// [`RecordError::PayloadTooLong`] otherwise.
pub fn decode_header(bytes: &[u8]) -> Result<Header, RecordError> {
    let magic_seen = bytes.len().min(MAGIC.len());
    if bytes[..magic_seen] != MAGIC[..magic_seen] {
        return Err(RecordError::BadMagic);
    }
    if bytes.len() < HEADER_BYTES {
        return Err(RecordError::Truncated {
            needed: HEADER_BYTES as u64,
            available: bytes.len() as u64,
        });
    }
    if crc32fast::hash(&bytes[0..20]) != BigEndian::read_u32(&bytes[20..24]) {
        return Err(RecordError::HeaderChecksum);
    }
    let payload_len = BigEndian::read_u32(&bytes[16..20]);
    if payload_len as usize > RECORD_PAYLOAD_BYTES_MAX {
        return Err(RecordError::PayloadTooLong(u64::from(payload_len)));
    }
    Ok(Header {
        version: bytes[4],
        kind: bytes[5],
        id: BigEndian::read_u64(&bytes[8..16]),
        payload_len,
    })
}

/// Decodes exactly one whole record.
///
/// # Errors
/// Any [`RecordError`] describing the first thing wrong, [`RecordError::TrailingBytes`]
/// when `bytes` is longer than the record.
pub fn decode(bytes: &[u8]) -> Result<RecordView<'_>, RecordError> {
    let (record, len) = probe(bytes).map_err(|p| match p {
        Probe::Need(needed) => RecordError::Truncated {
            needed: needed as u64,
            available: bytes.len() as u64,
        },
        Probe::BadHeader(e) | Probe::BadRecord { error: e, .. } => e,
    })?;
    if len != bytes.len() {
        return Err(RecordError::TrailingBytes((bytes.len() - len) as u64));
    }
    Ok(record)
}

/// Why [`probe`] found no record.
enum Probe {
    /// The record (or its header) needs this many bytes in all.
    Need(usize),
    /// The header is not valid: the record's extent is unknown.
    BadHeader(RecordError),
    /// The header is valid, the record of `len` bytes is not.
    BadRecord { len: usize, error: RecordError },
}

/// Decodes the record at the start of `bytes` (which may go on past it); returns it and
/// its length.
fn probe(bytes: &[u8]) -> Result<(RecordView<'_>, usize), Probe> {
    let header = match decode_header(bytes) {
        Ok(h) => h,
        Err(RecordError::Truncated { needed, .. }) => return Err(Probe::Need(needed as usize)),
        Err(e) => return Err(Probe::BadHeader(e)),
    };
    let len = header.record_len();
    if bytes.len() < len {
        return Err(Probe::Need(len));
    }
    let bad = |error| Err(Probe::BadRecord { len, error });
    if header.version != FORMAT_VERSION {
        return bad(RecordError::UnsupportedVersion(header.version));
    }
    if header.kind != KIND_MESSAGE {
        return bad(RecordError::UnknownKind(header.kind));
    }
    let payload = &bytes[HEADER_BYTES..len - TRAILER_BYTES];
    if crc32fast::hash(payload) != BigEndian::read_u32(&bytes[len - TRAILER_BYTES..len]) {
        return bad(RecordError::PayloadChecksum);
    }
    match decode_payload(payload) {
        Ok((timestamp_ms, exchange, routing_key, properties, body)) => Ok((
            RecordView {
                id: header.id,
                timestamp_ms,
                exchange,
                routing_key,
                properties,
                body,
                raw: &bytes[..len],
            },
            len,
        )),
        Err(m) => bad(RecordError::Payload(m)),
    }
}

type Payload<'a> = (u64, &'a str, &'a str, BasicProperties, &'a [u8]);

fn decode_payload(payload: &[u8]) -> Result<Payload<'_>, String> {
    let mut r = Reader::new(payload);
    let timestamp_ms = r.u64("timestamp").map_err(|e| e.message)?;
    let exchange = r.short_str("exchange").map_err(|e| e.message)?;
    let routing_key = r.short_str("routing key").map_err(|e| e.message)?;
    let properties = BasicProperties::decode(&mut r).map_err(|e| e.message)?;
    let body = r.long_bytes("body").map_err(|e| e.message)?;
    if !r.is_empty() {
        return Err(format!("{} bytes after the body", r.remaining()));
    }
    Ok((timestamp_ms, exchange, routing_key, properties, body))
}

/// Bytes of a segment that hold no valid record, with why (the reason found at `start`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedSpan {
    /// First damaged byte, as an offset in the segment.
    pub start: u64,
    /// First byte after the span (the next valid record, or the end of the data).
    pub end: u64,
    /// What was wrong at `start`.
    pub reason: RecordError,
}

/// One finding of a [`Scanner`].
// Items are handed out one at a time, never stored in bulk: boxing the record would cost an
// allocation per record scanned for nothing.
#[allow(
    clippy::large_enum_variant,
    reason = "handed out one at a time, never stored in bulk"
)]
#[derive(Debug, Clone, PartialEq)]
pub enum ScanItem<'a> {
    /// A valid record starting at `offset`.
    Record {
        /// Offset of its first byte in the scanned bytes.
        offset: u64,
        /// The record.
        record: RecordView<'a>,
    },
    /// Bytes holding no valid record. At the end of the data (`end` = data length, with
    /// the data known to be complete) it is a torn tail; anywhere else, skipped damage.
    Damaged(DamagedSpan),
    /// The scanned bytes are a window of a longer file and the record (or the search for
    /// one) at `offset` needs bytes past it: scan again from `offset` with at least
    /// `bytes_needed` bytes. Always the last item.
    Incomplete {
        /// Where to resume, in the scanned bytes.
        offset: u64,
        /// Bytes the resumed window must hold at least.
        bytes_needed: u64,
    },
}

/// Walks the bytes of a segment (or a window of one), yielding every valid record and every
/// damaged span.
///
/// After a damaged record whose header is valid, the scan continues right after it (the
/// header's length is trustworthy). After bad header bytes, it resynchronises on the next
/// `RMQR` whose header CRC checks. Records must have increasing ids; one that does not is
/// reported as damage. Never panics, whatever the bytes.
#[derive(Debug, Clone)]
pub struct Scanner<'a> {
    data: &'a [u8],
    pos: usize,
    at_eof: bool,
    last_id: Option<u64>,
    /// Where to stop with [`ScanItem::Incomplete`] (a window ended during a resync).
    incomplete_at: Option<usize>,
    done: bool,
}

impl<'a> Scanner<'a> {
    /// A scanner over `data`, a whole segment.
    pub fn new(data: &'a [u8]) -> Scanner<'a> {
        Scanner::window(data, true, None)
    }

    /// A scanner over a window of a segment: `at_eof` says whether the window reaches the
    /// end of the file (if not, the scan ends with [`ScanItem::Incomplete`] where it needs
    /// more); `last_id` is the id of the last valid record before the window.
    pub fn window(data: &'a [u8], at_eof: bool, last_id: Option<u64>) -> Scanner<'a> {
        Scanner {
            data,
            pos: 0,
            at_eof,
            last_id,
            incomplete_at: None,
            done: false,
        }
    }

    /// Id of the last valid record found so far.
    pub fn last_id(&self) -> Option<u64> {
        self.last_id
    }

    fn damaged(&mut self, end: usize, reason: RecordError) -> ScanItem<'a> {
        let span = DamagedSpan {
            start: self.pos as u64,
            end: end as u64,
            reason,
        };
        self.pos = end;
        ScanItem::Damaged(span)
    }

    /// The first offset after `from` where a valid header starts.
    fn resync(&self, from: usize) -> Option<usize> {
        let data = self.data;
        let mut q = from;
        while q + HEADER_BYTES <= data.len() {
            if data[q] == MAGIC[0] && decode_header(&data[q..]).is_ok() {
                return Some(q);
            }
            q += 1;
        }
        None
    }
}

impl<'a> Iterator for Scanner<'a> {
    type Item = ScanItem<'a>;

    fn next(&mut self) -> Option<ScanItem<'a>> {
        if self.done {
            return None;
        }
        if self.pos >= self.data.len() {
            // A window that ends exactly after a record: the file goes on.
            self.done = true;
            return (!self.at_eof).then_some(ScanItem::Incomplete {
                offset: self.pos as u64,
                bytes_needed: HEADER_BYTES as u64,
            });
        }
        if self.incomplete_at == Some(self.pos) {
            self.done = true;
            return Some(ScanItem::Incomplete {
                offset: self.pos as u64,
                bytes_needed: HEADER_BYTES as u64,
            });
        }
        let data: &'a [u8] = self.data;
        let len = data.len();
        match probe(&data[self.pos..]) {
            Ok((record, n)) => match self.last_id {
                Some(previous) if record.id <= previous => {
                    let id = record.id;
                    Some(self.damaged(self.pos + n, RecordError::IdNotIncreasing { id, previous }))
                }
                _ => {
                    self.last_id = Some(record.id);
                    let offset = self.pos as u64;
                    self.pos += n;
                    Some(ScanItem::Record { offset, record })
                }
            },
            Err(Probe::Need(needed)) => {
                if self.at_eof {
                    let available = (len - self.pos) as u64;
                    let reason = RecordError::Truncated {
                        needed: needed as u64,
                        available,
                    };
                    Some(self.damaged(len, reason))
                } else {
                    self.done = true;
                    Some(ScanItem::Incomplete {
                        offset: self.pos as u64,
                        bytes_needed: needed as u64,
                    })
                }
            }
            Err(Probe::BadRecord { len: n, error }) => Some(self.damaged(self.pos + n, error)),
            Err(Probe::BadHeader(error)) => match self.resync(self.pos + 1) {
                Some(q) => Some(self.damaged(q, error)),
                None if self.at_eof => Some(self.damaged(len, error)),
                None => {
                    // A header may straddle the window's end: resume where one could start.
                    let resume = (len + 1).saturating_sub(HEADER_BYTES).max(self.pos + 1);
                    self.incomplete_at = Some(resume);
                    Some(self.damaged(resume, error))
                }
            },
        }
    }
}

/// What [`scan_file`] found in a segment file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileScan {
    /// Length of the file, in bytes.
    pub len: u64,
    /// Valid records.
    pub records: u64,
    /// Damaged spans in file order; adjacent ones are merged.
    pub damaged: Vec<DamagedSpan>,
    /// Where a record of an unsupported version or kind was found (a newer RelayMQ wrote
    /// this segment: it must not be "repaired").
    pub unsupported: Option<(u64, RecordError)>,
}

impl FileScan {
    /// The torn tail: damage reaching the end of the file, if any.
    pub fn tail(&self) -> Option<&DamagedSpan> {
        self.damaged.last().filter(|s| s.end == self.len)
    }

    /// Damaged spans followed by a valid record (skipped, not truncated).
    pub fn middle(&self) -> &[DamagedSpan] {
        match self.tail() {
            Some(_) => &self.damaged[..self.damaged.len() - 1],
            None => &self.damaged,
        }
    }
}

/// Scans a whole segment file in windows of [`SCAN_WINDOW_BYTES`] (so memory stays bounded
/// whatever the file's size), calling `visit` with the offset of every valid record.
///
/// # Errors
/// The backend's read error.
pub fn scan_file(
    file: &dyn StorageFile,
    visit: &mut dyn FnMut(u64, &RecordView<'_>),
) -> io::Result<FileScan> {
    scan_file_in_windows(file, SCAN_WINDOW_BYTES, visit)
}

/// [`scan_file`] with windows of `window_bytes` (tests use tiny ones).
pub(crate) fn scan_file_in_windows(
    file: &dyn StorageFile,
    window_bytes: u64,
    visit: &mut dyn FnMut(u64, &RecordView<'_>),
) -> io::Result<FileScan> {
    let window_bytes = window_bytes.max(1);
    let len = file.len()?;
    let mut scan = FileScan {
        len,
        ..FileScan::default()
    };
    let mut base = 0u64;
    let mut want = window_bytes;
    let mut last_id = None;
    let mut buf = Vec::new();
    while base < len {
        let n = want.min(len - base);
        buf.resize(usize::try_from(n).map_err(io::Error::other)?, 0);
        file.read_at(base, &mut buf)?;
        let at_eof = base + n == len;
        let mut scanner = Scanner::window(&buf, at_eof, last_id);
        let mut resume = None;
        for item in &mut scanner {
            match item {
                ScanItem::Record { offset, record } => {
                    scan.records += 1;
                    visit(base + offset, &record);
                }
                ScanItem::Damaged(span) => {
                    let span = DamagedSpan {
                        start: base + span.start,
                        end: base + span.end,
                        reason: span.reason,
                    };
                    if matches!(
                        span.reason,
                        RecordError::UnsupportedVersion(_) | RecordError::UnknownKind(_)
                    ) && scan.unsupported.is_none()
                    {
                        scan.unsupported = Some((span.start, span.reason.clone()));
                    }
                    match scan.damaged.last_mut() {
                        Some(prev) if prev.end == span.start => prev.end = span.end,
                        _ => scan.damaged.push(span),
                    }
                }
                ScanItem::Incomplete {
                    offset,
                    bytes_needed,
                } => resume = Some((base + offset, bytes_needed)),
            }
        }
        last_id = scanner.last_id();
        match resume {
            None => break,
            Some((at, needed)) => {
                if at <= base && needed <= n {
                    return Err(io::Error::other("segment scan made no progress"));
                }
                base = at;
                want = needed.max(window_bytes);
            }
        }
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{FieldTable, FieldValue};

    fn full_properties() -> BasicProperties {
        let mut h = FieldTable::new();
        h.insert("x-trace".into(), FieldValue::string("abc"));
        h.insert("n".into(), FieldValue::I64(-7));
        BasicProperties {
            content_type: Some("application/json".into()),
            content_encoding: Some("gzip".into()),
            headers: Some(h),
            delivery_mode: Some(2),
            priority: Some(9),
            correlation_id: Some("corr".into()),
            reply_to: Some("amq.gen-reply".into()),
            expiration: Some("60000".into()),
            message_id: Some("m-1".into()),
            timestamp: Some(1_700_000_000),
            kind: Some("order.created".into()),
            user_id: Some("guest".into()),
            app_id: Some("shop".into()),
            cluster_id: Some("c1".into()),
        }
    }

    fn record(id: u64, body: &[u8], props: &BasicProperties) -> Vec<u8> {
        let m = MessageData {
            timestamp_ms: 1_700_000_000_123,
            exchange: "orders",
            routing_key: "eu.created",
            properties: props,
            body,
        };
        let mut out = Vec::new();
        let n = encode(id, &m, &mut out).unwrap();
        assert_eq!(n, out.len());
        out
    }

    fn small(id: u64) -> Vec<u8> {
        record(
            id,
            format!("body {id}").as_bytes(),
            &BasicProperties::default(),
        )
    }

    fn ids(data: &[u8]) -> (Vec<(u64, u64)>, Vec<DamagedSpan>) {
        let mut recs = Vec::new();
        let mut damaged = Vec::new();
        for item in Scanner::new(data) {
            match item {
                ScanItem::Record { offset, record } => recs.push((offset, record.id)),
                ScanItem::Damaged(s) => damaged.push(s),
                ScanItem::Incomplete { .. } => panic!("incomplete on a whole segment"),
            }
        }
        (recs, damaged)
    }

    #[test]
    fn round_trip_with_all_properties_and_empty_and_large_bodies() {
        let props = full_properties();
        let large = vec![0xA5u8; 3 * 1024 * 1024];
        for (props, body) in [
            (props.clone(), &b""[..]),
            (BasicProperties::default(), &b""[..]),
            (props.clone(), &large[..]),
        ] {
            let raw = record(42, body, &props);
            let r = decode(&raw).unwrap();
            assert_eq!(r.id, 42);
            assert_eq!(r.timestamp_ms, 1_700_000_000_123);
            assert_eq!(r.exchange, "orders");
            assert_eq!(r.routing_key, "eu.created");
            assert_eq!(r.properties, props);
            assert_eq!(r.body, body);
            assert_eq!(r.raw, &raw[..]);
        }
    }

    #[test]
    fn flipping_any_byte_is_an_error_never_a_panic() {
        let raw = record(7, b"hello, world", &full_properties());
        for i in 0..raw.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = raw.clone();
                bad[i] ^= bit;
                assert!(
                    decode(&bad).is_err(),
                    "byte {i} bit {bit:#x} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let raw = record(7, b"hello", &full_properties());
        for cut in 0..raw.len() {
            assert!(decode(&raw[..cut]).is_err(), "cut {cut}");
        }
        let mut long = raw.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(RecordError::TrailingBytes(1)));
    }

    #[test]
    fn encode_refuses_what_a_record_cannot_hold() {
        let props = BasicProperties::default();
        let name = "x".repeat(256);
        let m = MessageData {
            timestamp_ms: 0,
            exchange: &name,
            routing_key: "",
            properties: &props,
            body: b"",
        };
        let mut out = vec![1, 2, 3];
        assert_eq!(encode(1, &m, &mut out), Err(RecordError::NameTooLong(256)));
        let big = vec![0u8; RECORD_PAYLOAD_BYTES_MAX];
        let m = MessageData {
            exchange: "",
            body: &big,
            ..m
        };
        assert!(matches!(
            encode(1, &m, &mut out),
            Err(RecordError::PayloadTooLong(_))
        ));
        assert_eq!(out, vec![1, 2, 3]);
    }

    #[test]
    fn header_claiming_a_huge_payload_is_refused_before_reading_it() {
        let mut raw = small(1);
        BigEndian::write_u32(&mut raw[16..20], u32::MAX);
        let crc = crc32fast::hash(&raw[0..20]);
        BigEndian::write_u32(&mut raw[20..24], crc);
        assert_eq!(
            decode_header(&raw),
            Err(RecordError::PayloadTooLong(u64::from(u32::MAX)))
        );
    }

    #[test]
    fn scanner_resyncs_after_a_corrupt_middle_record() {
        let (a, b, c) = (small(1), small(2), small(3));
        for (i, hit) in [(2usize, "header"), (30, "payload")] {
            let mut data = [a.clone(), b.clone(), c.clone()].concat();
            data[a.len() + i] ^= 0xFF;
            let (recs, damaged) = ids(&data);
            assert_eq!(recs, vec![(0, 1), ((a.len() + b.len()) as u64, 3)], "{hit}");
            assert_eq!(damaged.len(), 1, "{hit}");
            assert_eq!(damaged[0].start, a.len() as u64);
            assert_eq!(damaged[0].end, (a.len() + b.len()) as u64);
        }
    }

    #[test]
    fn scanner_resyncs_after_garbage_between_records() {
        let (a, c) = (small(1), small(3));
        // Garbage that even contains a false magic without a valid header.
        let garbage = b"\0\0RMQR\x01\x01junkjunkjunkjunkjunkjunk RMQ".to_vec();
        let data = [a.clone(), garbage.clone(), c.clone()].concat();
        let (recs, damaged) = ids(&data);
        assert_eq!(recs, vec![(0, 1), ((a.len() + garbage.len()) as u64, 3)]);
        assert_eq!(
            damaged,
            vec![DamagedSpan {
                start: a.len() as u64,
                end: (a.len() + garbage.len()) as u64,
                reason: RecordError::BadMagic
            }]
        );
    }

    #[test]
    fn torn_tail_at_every_cut_point() {
        let (a, b) = (
            small(1),
            record(2, b"a longer body to cut", &full_properties()),
        );
        let data = [a.clone(), b.clone()].concat();
        for cut in a.len()..data.len() {
            let (recs, damaged) = ids(&data[..cut]);
            assert_eq!(recs, vec![(0, 1)], "cut {cut}");
            if cut == a.len() {
                assert!(damaged.is_empty());
            } else {
                assert_eq!(damaged.len(), 1, "cut {cut}");
                assert_eq!(damaged[0].start, a.len() as u64);
                assert_eq!(damaged[0].end, cut as u64);
            }
        }
    }

    #[test]
    fn ids_must_increase() {
        let data = [small(5), small(5), small(4), small(6)].concat();
        let (recs, damaged) = ids(&data);
        assert_eq!(recs.iter().map(|r| r.1).collect::<Vec<_>>(), vec![5, 6]);
        assert_eq!(damaged.len(), 2);
    }

    #[test]
    fn scanner_survives_arbitrary_bytes() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut data = Vec::new();
        for i in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push(x as u8);
            if i % 500 == 0 {
                data.extend_from_slice(&MAGIC);
            }
        }
        let (recs, damaged) = ids(&data);
        assert!(recs.is_empty());
        assert_eq!(damaged.last().unwrap().end, data.len() as u64);
    }

    #[test]
    fn windows_report_incomplete_and_resume() {
        let data = [small(1), small(2), small(3)].concat();
        let cut = small(1).len() + 10;
        let items: Vec<_> = Scanner::window(&data[..cut], false, None).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[1],
            ScanItem::Incomplete {
                offset: small(1).len() as u64,
                bytes_needed: HEADER_BYTES as u64
            }
        );
        let cut = small(1).len() + 30;
        let items: Vec<_> = Scanner::window(&data[..cut], false, None).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[1],
            ScanItem::Incomplete {
                offset: small(1).len() as u64,
                bytes_needed: small(2).len() as u64
            }
        );
        // Garbage in a window: the damage is reported up to where a header could start.
        let junk = vec![0u8; 100];
        let items: Vec<_> = Scanner::window(&junk, false, None).collect();
        assert_eq!(items.len(), 2);
        assert!(matches!(&items[0], ScanItem::Damaged(s) if s.end == 77));
        assert!(matches!(items[1], ScanItem::Incomplete { offset: 77, .. }));
    }

    #[test]
    fn scanning_a_file_in_windows_finds_what_a_whole_scan_finds() {
        use crate::storage::backend::Backend;
        use crate::storage::SimBackend;
        use std::path::Path;
        let mut data = Vec::new();
        for id in 1..=12u64 {
            data.extend_from_slice(&small(id));
            if id % 4 == 0 {
                data.extend_from_slice(b"garbage RMQR garbage");
            }
        }
        data[small(1).len() + 30] ^= 0x40; // damage record 2's payload
        data.extend_from_slice(&small(13)[..30]); // torn tail
        let expected = {
            let (recs, _) = ids(&data);
            recs
        };
        let sim = SimBackend::new();
        let file = sim.open(Path::new("/seg"), true).unwrap();
        file.append(&data).unwrap();
        let whole = scan_file_in_windows(&*file, 1 << 20, &mut |_, _| {}).unwrap();
        // Record 2, two garbage runs, and the last garbage run merged with the torn record.
        assert_eq!(whole.damaged.len(), 4, "{whole:?}");
        assert_eq!(whole.tail().map(|t| t.end), Some(data.len() as u64));
        for window in 1..=120 {
            let mut got = Vec::new();
            let scan =
                scan_file_in_windows(&*file, window, &mut |off, r| got.push((off, r.id))).unwrap();
            assert_eq!(got, expected, "window {window}");
            assert_eq!(scan, whole, "window {window}");
        }
    }

    /// The worked example of `docs/storage.md`, byte for byte.
    #[test]
    fn worked_example_in_the_docs() {
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..BasicProperties::default()
        };
        let m = MessageData {
            timestamp_ms: 1_700_000_000_000,
            exchange: "ex",
            routing_key: "rk",
            properties: &props,
            body: b"hi",
        };
        let mut out = Vec::new();
        encode(5, &m, &mut out).unwrap();
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, WORKED_EXAMPLE_HEX);
    }

    const WORKED_EXAMPLE_HEX: &str = concat!(
        "524d5152",
        "01",
        "01",
        "0000",
        "0000000000000005",
        "00000017",
        "d3f12c3c",
        "0000018bcfe56800",
        "026578",
        "02726b",
        "100002",
        "00000002",
        "6869",
        "9a3c43ed"
    );
}
