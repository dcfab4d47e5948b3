//! The ack log of a segment (`queue_acks.<N>` next to `queue_data.<N>`): what happened to
//! its records after they were written, as fixed-size appended entries.
//!
//! ```text
//! offset size field
//! 0      1    kind: 1 = delivered, 2 = settled (acked, rejected, dropped or purged)
//! 1      8    record id (u64 big-endian)
//! 9      4    CRC32 of bytes 0..9 (big-endian)
//! ```
//!
//! Why a log rather than a "valid" flag flipped in place in the record (the design
//! documents' way): every ack is a sequential append to one small file instead of a random
//! write into the middle of a segment, delivered entries give recovery the delivery count
//! for free, and records stay immutable, so a record's checksum never covers a byte that
//! changes. `docs/storage.md` has the full argument.
//!
//! Entries have a fixed size, so a damaged entry never shifts the ones after it: reading
//! skips it and goes on. Damage at the end (a torn write) is reported as the tail, which
//! the store truncates.

use crate::storage::backend::StorageFile;
use byteorder::{BigEndian, ByteOrder};
use std::fmt;
use std::io;

/// Size of one entry, in bytes.
pub const ENTRY_BYTES: usize = 13;

/// Entries read from a file at a time by [`read_file`] (65 536 entries, 832 KiB).
const READ_CHUNK_ENTRIES: usize = 64 * 1024;

/// What an entry says happened to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// Delivered to a consumer (once more): recovery counts these and marks the message
    /// redelivered.
    Delivered = 1,
    /// Settled (acked, rejected, dropped or purged): the record is no longer valid.
    Settled = 2,
}

/// One entry of an ack log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AckEntry {
    /// What happened.
    pub kind: AckKind,
    /// To which record (id).
    pub id: u64,
}

/// Why 13 bytes are not a valid entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckError {
    /// Not exactly [`ENTRY_BYTES`] bytes.
    Length(usize),
    /// The CRC does not match.
    Checksum,
    /// The CRC matches but the kind byte is neither 1 nor 2.
    UnknownKind(u8),
}

impl fmt::Display for AckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AckError::Length(n) => write!(f, "ack entry of {n} bytes (expected {ENTRY_BYTES})"),
            AckError::Checksum => f.write_str("ack entry checksum mismatch"),
            AckError::UnknownKind(k) => write!(f, "unknown ack entry kind {k}"),
        }
    }
}

impl std::error::Error for AckError {}

/// The bytes of `entry`.
pub fn encode(entry: AckEntry) -> [u8; ENTRY_BYTES] {
    let mut out = [0u8; ENTRY_BYTES];
    out[0] = entry.kind as u8;
    BigEndian::write_u64(&mut out[1..9], entry.id);
    let crc = crc32fast::hash(&out[0..9]);
    BigEndian::write_u32(&mut out[9..13], crc);
    out
}

/// Decodes one entry.
///
/// # Errors
/// [`AckError`] when `raw` is not [`ENTRY_BYTES`] long, its CRC is wrong or its kind
/// unknown.
pub fn decode(raw: &[u8]) -> Result<AckEntry, AckError> {
    if raw.len() != ENTRY_BYTES {
        return Err(AckError::Length(raw.len()));
    }
    if crc32fast::hash(&raw[0..9]) != BigEndian::read_u32(&raw[9..13]) {
        return Err(AckError::Checksum);
    }
    let kind = match raw[0] {
        1 => AckKind::Delivered,
        2 => AckKind::Settled,
        k => return Err(AckError::UnknownKind(k)),
    };
    Ok(AckEntry {
        kind,
        id: BigEndian::read_u64(&raw[1..9]),
    })
}

/// Appends `entry` to an ack log file; returns its offset, in bytes.
///
/// # Errors
/// The backend's write error.
pub fn append(file: &dyn StorageFile, entry: AckEntry) -> io::Result<u64> {
    file.append(&encode(entry))
}

/// What reading an ack log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckScan {
    /// Length of the file, in bytes.
    pub len: u64,
    /// Valid entries.
    pub entries: u64,
    /// Damaged entries followed by a valid one (skipped).
    pub bad_entries: u64,
    /// Offset of the first skipped damaged entry, if any.
    pub first_bad_offset: Option<u64>,
    /// Where the tail begins: the end of the last valid entry. Anything after it (a partial
    /// entry, damaged entries) is a torn tail to truncate. Equals `len` when there is none.
    pub valid_len: u64,
    /// Highest record id of a valid entry.
    pub max_id: Option<u64>,
}

impl AckScan {
    /// Bytes of torn tail.
    pub fn tail_bytes(&self) -> u64 {
        self.len - self.valid_len
    }
}

/// Accumulates entries as they are read; shared by [`scan_bytes`] and [`read_file`].
#[derive(Debug, Default)]
struct Tally {
    scan: AckScan,
    /// Damaged entries seen since the last valid one (a tail, unless a valid one follows).
    bad_since_valid: u64,
    first_bad_since_valid: Option<u64>,
}

impl Tally {
    fn entry(&mut self, offset: u64, raw: &[u8], visit: &mut dyn FnMut(AckEntry)) {
        match decode(raw) {
            Ok(e) => {
                self.scan.entries += 1;
                self.scan.bad_entries += self.bad_since_valid;
                if self.scan.first_bad_offset.is_none() {
                    self.scan.first_bad_offset = self.first_bad_since_valid;
                }
                self.bad_since_valid = 0;
                self.first_bad_since_valid = None;
                self.scan.valid_len = offset + ENTRY_BYTES as u64;
                self.scan.max_id = Some(self.scan.max_id.map_or(e.id, |m| m.max(e.id)));
                visit(e);
            }
            Err(_) => {
                self.bad_since_valid += 1;
                self.first_bad_since_valid.get_or_insert(offset);
            }
        }
    }
}

/// Reads the entries of an ack log held in memory, calling `visit` with each valid one in
/// order.
pub fn scan_bytes(bytes: &[u8], visit: &mut dyn FnMut(AckEntry)) -> AckScan {
    let mut tally = Tally::default();
    for (i, raw) in bytes.chunks_exact(ENTRY_BYTES).enumerate() {
        tally.entry((i * ENTRY_BYTES) as u64, raw, visit);
    }
    tally.scan.len = bytes.len() as u64;
    tally.scan
}

/// Reads an ack log file in chunks, calling `visit` with each valid entry in order.
///
/// # Errors
/// The backend's read error.
pub fn read_file(file: &dyn StorageFile, visit: &mut dyn FnMut(AckEntry)) -> io::Result<AckScan> {
    let len = file.len()?;
    let whole = len - len % ENTRY_BYTES as u64;
    let chunk_bytes = (READ_CHUNK_ENTRIES * ENTRY_BYTES) as u64;
    let mut tally = Tally::default();
    let mut buf = Vec::new();
    let mut base = 0u64;
    while base < whole {
        let n = chunk_bytes.min(whole - base) as usize;
        buf.resize(n, 0);
        file.read_at(base, &mut buf)?;
        for (i, raw) in buf.chunks_exact(ENTRY_BYTES).enumerate() {
            tally.entry(base + (i * ENTRY_BYTES) as u64, raw, visit);
        }
        base += n as u64;
    }
    tally.scan.len = len;
    Ok(tally.scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(entries: &[(AckKind, u64)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|&(kind, id)| encode(AckEntry { kind, id }))
            .collect()
    }

    fn read(bytes: &[u8]) -> (Vec<AckEntry>, AckScan) {
        let mut got = Vec::new();
        let scan = scan_bytes(bytes, &mut |e| got.push(e));
        (got, scan)
    }

    #[test]
    fn round_trip() {
        for (kind, id) in [(AckKind::Delivered, 0), (AckKind::Settled, u64::MAX)] {
            let e = AckEntry { kind, id };
            assert_eq!(decode(&encode(e)), Ok(e));
        }
        assert_eq!(decode(&[0; 12]), Err(AckError::Length(12)));
    }

    /// The example of `docs/storage.md`.
    #[test]
    fn worked_example_in_the_docs() {
        let settled = encode(AckEntry {
            kind: AckKind::Settled,
            id: 5,
        });
        let hex: String = settled.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "020000000000000005b895c8a7");
    }

    #[test]
    fn flipping_any_bit_is_detected() {
        let raw = encode(AckEntry {
            kind: AckKind::Settled,
            id: 77,
        });
        for i in 0..ENTRY_BYTES * 8 {
            let mut bad = raw;
            bad[i / 8] ^= 1 << (i % 8);
            assert!(decode(&bad).is_err(), "bit {i}");
        }
    }

    #[test]
    fn torn_last_entry_is_the_tail_at_every_cut() {
        let full = log(&[(AckKind::Delivered, 1), (AckKind::Settled, 1)]);
        for cut in ENTRY_BYTES..full.len() {
            let (got, scan) = read(&full[..cut]);
            assert_eq!(got.len(), 1, "cut {cut}");
            assert_eq!(scan.valid_len, ENTRY_BYTES as u64);
            assert_eq!(scan.tail_bytes(), (cut - ENTRY_BYTES) as u64);
            assert_eq!(scan.bad_entries, 0);
        }
    }

    #[test]
    fn bad_middle_entries_are_skipped_and_bad_last_ones_are_tail() {
        let mut bytes = log(&[
            (AckKind::Delivered, 1),
            (AckKind::Settled, 2),
            (AckKind::Settled, 3),
            (AckKind::Settled, 4),
        ]);
        bytes[ENTRY_BYTES + 3] ^= 1; // entry 2: middle
        bytes[3 * ENTRY_BYTES..].fill(0); // entry 4: zeroed tail
        let (got, scan) = read(&bytes);
        assert_eq!(
            got.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![1, 3],
            "{scan:?}"
        );
        assert_eq!(scan.bad_entries, 1);
        assert_eq!(scan.first_bad_offset, Some(ENTRY_BYTES as u64));
        assert_eq!(scan.valid_len, 3 * ENTRY_BYTES as u64);
        assert_eq!(scan.tail_bytes(), ENTRY_BYTES as u64);
        assert_eq!(scan.max_id, Some(3));
    }

    #[test]
    fn garbage_never_panics() {
        let garbage: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let (got, scan) = read(&garbage);
        assert!(got.is_empty());
        assert_eq!(scan.valid_len, 0);
    }
}
