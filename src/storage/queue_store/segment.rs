//! A segment of a queue's store: the names of its files in the queue directory
//! (`queue_data.<N>`, `queue_acks.<N>`, their `.compact` rewrites, `queue_stat`), the
//! listing of a directory into them, and the in-memory index of one segment (record ids,
//! offsets, states, valid count, file lengths).

use super::{needs_compaction, ACK_FILE_PREFIX, COMPACT_SUFFIX, DATA_FILE_PREFIX};
use crate::storage::backend::{tmp_path, Backend};
use crate::storage::stat::{SegmentCounts, STAT_FILE_NAME};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// Record state bit: settled.
pub(crate) const SETTLED: u32 = 1 << 31;
/// Record state bits: delivery count (saturating).
pub(crate) const COUNT_MASK: u32 = SETTLED - 1;

/// What a name in a queue directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileName {
    Data(u64),
    Acks(u64),
    Compact(u64),
    Stat,
    StatTmp,
    Unknown,
}

/// Parses a segment number written by this code (decimal, no sign, no leading zero).
pub(super) fn segment_number(s: &str) -> Option<u64> {
    let n: u64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

pub(super) fn classify(name: &Path) -> FileName {
    let Some(name) = name.to_str() else {
        return FileName::Unknown;
    };
    if name == STAT_FILE_NAME {
        return FileName::Stat;
    }
    if tmp_path(Path::new(STAT_FILE_NAME)).to_str() == Some(name) {
        return FileName::StatTmp;
    }
    if let Some(rest) = name.strip_prefix(DATA_FILE_PREFIX) {
        if let Some(n) = rest.strip_suffix(COMPACT_SUFFIX).and_then(segment_number) {
            return FileName::Compact(n);
        }
        if let Some(n) = segment_number(rest) {
            return FileName::Data(n);
        }
    }
    if let Some(rest) = name.strip_prefix(ACK_FILE_PREFIX) {
        if let Some(n) = rest.strip_suffix(COMPACT_SUFFIX).and_then(segment_number) {
            return FileName::Compact(n);
        }
        if let Some(n) = segment_number(rest) {
            return FileName::Acks(n);
        }
    }
    FileName::Unknown
}

pub(crate) fn data_name(n: u64) -> String {
    format!("{DATA_FILE_PREFIX}{n}")
}

pub(crate) fn acks_name(n: u64) -> String {
    format!("{ACK_FILE_PREFIX}{n}")
}

/// The files found in a queue directory (read by the store and by the check).
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Segment numbers with a `queue_data.N`.
    pub(crate) data: BTreeSet<u64>,
    /// Segment numbers with a `queue_acks.N`.
    pub(crate) acks: BTreeSet<u64>,
    /// Leftover `*.compact` files.
    pub(crate) compact: Vec<PathBuf>,
    /// Whether `queue_stat` is there.
    pub(crate) stat: bool,
    /// Whether a leftover `queue_stat.tmp` is there.
    pub(crate) stat_tmp: bool,
    /// Names that are none of the above.
    pub(crate) unknown: Vec<PathBuf>,
}

impl Listing {
    /// Lists and classifies `dir`.
    pub(crate) fn read(backend: &dyn Backend, dir: &Path) -> io::Result<Listing> {
        let mut l = Listing::default();
        for name in backend.list_dir(dir)? {
            match classify(&name) {
                FileName::Data(n) => {
                    l.data.insert(n);
                }
                FileName::Acks(n) => {
                    l.acks.insert(n);
                }
                FileName::Compact(_) => l.compact.push(name),
                FileName::Stat => l.stat = true,
                FileName::StatTmp => l.stat_tmp = true,
                FileName::Unknown => l.unknown.push(name),
            }
        }
        Ok(l)
    }

    /// Ack logs whose segment is gone.
    pub(crate) fn orphan_acks(&self) -> impl Iterator<Item = u64> + '_ {
        self.acks.iter().copied().filter(|n| !self.data.contains(n))
    }
}

/// In-memory index of one segment.
#[derive(Debug, Default)]
pub(super) struct Segment {
    /// Ids of the records in the file, increasing.
    pub(super) ids: Vec<u64>,
    /// Offset of each record in the file, in bytes.
    pub(super) offsets: Vec<u64>,
    /// Per record: [`SETTLED`] bit | delivery count.
    pub(super) state: Vec<u32>,
    /// Records not settled.
    pub(super) valid: u64,
    /// Length of the segment file, in bytes.
    pub(super) data_bytes: u64,
    /// Length of the ack log, in bytes.
    pub(super) ack_bytes: u64,
}

impl Segment {
    pub(super) fn push(&mut self, id: u64, offset: u64, state: u32) {
        self.ids.push(id);
        self.offsets.push(offset);
        self.state.push(state);
        if state & SETTLED == 0 {
            self.valid += 1;
        }
    }

    pub(super) fn find(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    pub(super) fn total(&self) -> u64 {
        self.ids.len() as u64
    }

    pub(super) fn counts(&self) -> SegmentCounts {
        SegmentCounts {
            total: self.total(),
            valid: self.valid,
        }
    }

    pub(super) fn needs_compaction(&self) -> bool {
        needs_compaction(self.counts())
    }
}
