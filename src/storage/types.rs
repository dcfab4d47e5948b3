//! Values passed between the broker core and the message store.

use crate::types::BasicProperties;
use std::path::PathBuf;

/// Default size at which a segment file is sealed and a new one started, in bytes (8 MiB).
pub const SEGMENT_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;

/// Settings of a queue's message store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// A segment is sealed once it holds at least this many bytes (`--segment-bytes`).
    pub segment_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
        }
    }
}

/// A message as the store writes it (borrowed from the broker's `Message`).
#[derive(Debug, Clone, Copy)]
pub struct MessageData<'a> {
    /// When the broker accepted it, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// Exchange it was published to.
    pub exchange: &'a str,
    /// Routing key it was published with.
    pub routing_key: &'a str,
    /// Its properties.
    pub properties: &'a BasicProperties,
    /// Its body.
    pub body: &'a [u8],
}

/// Where one stored message lives: its segment and its record id (unique and increasing
/// within a queue, never reused, kept by compaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordRef {
    /// Segment number (`queue_data.<segment>`).
    pub segment: u64,
    /// Record id.
    pub id: u64,
}

/// A message found valid (not settled) when a queue's store was opened.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredMessage {
    /// Where it is stored.
    pub record: RecordRef,
    /// When the broker accepted it, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// Exchange it was published to.
    pub exchange: String,
    /// Routing key it was published with.
    pub routing_key: String,
    /// Its properties.
    pub properties: BasicProperties,
    /// Its body.
    pub body: Vec<u8>,
    /// How many times it was delivered (delivered entries in the ack log); > 0 means it
    /// comes back with `redelivered = true`.
    pub delivery_count: u32,
}

/// What opening a queue's store found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Files whose torn or corrupt tail was truncated, with the bytes dropped.
    pub truncated_tails: Vec<(PathBuf, u64)>,
    /// Damaged records in the middle of a segment that were skipped.
    pub skipped_records: u64,
    /// `queue_stat` was missing, corrupt or stale and was recounted from the segments (the
    /// file is rewritten later, not at open).
    pub stat_rebuilt: bool,
    /// Human-readable lines for the log, one per repair of damaged data (logged as
    /// warnings).
    pub warnings: Vec<String>,
    /// Human-readable lines for the log about normal housekeeping found at start (a stale
    /// `queue_stat` recounted, a settled segment deleted; logged at debug and counted in
    /// the `recovery done` summary).
    pub notes: Vec<String>,
}

/// Counters of a queue's store, for listings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Segment files.
    pub segments: u64,
    /// Records in all segments (valid or not).
    pub records_total: u64,
    /// Records not yet settled.
    pub records_valid: u64,
    /// Bytes of all files of the queue's directory.
    pub bytes_on_disk: u64,
}
