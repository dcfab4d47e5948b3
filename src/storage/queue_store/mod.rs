//! The message store of one durable queue: a directory of segment files with their ack
//! logs and a `queue_stat` hint (formats, protocols and crash analysis in
//! `docs/storage.md`).
//!
//! ```text
//! queue_data.<N>   records (record.rs), appended; sealed at StoreConfig::segment_bytes
//! queue_acks.<N>   delivered/settled entries for the records of segment N (ack_log.rs)
//! queue_stat       "N\ttotal\tvalid\n" per segment (stat.rs), a rebuildable hint
//! ```
//!
//! The highest-numbered segment is the active one (appended to); the others are sealed.
//! Record ids increase across segments and are never reused while any file refers to
//! them, so a settled entry can never hit a newer record. In memory the store keeps, per
//! segment, a sorted id → offset index and a 4-byte state per record (settled flag and
//! delivery count): 20 bytes per stored record, bodies stay on disk.
//!
//! The store never fsyncs a data write itself: [`QueueStore::files_to_sync`] hands the
//! files written since the last call to the group-commit flusher, which syncs them without
//! holding the queue's lock (docs/architecture.md §14, §8). The exceptions are rare and
//! structural: creating a segment (directory sync), sealing, deleting and compacting a
//! segment (`queue_stat` rewrite, the compaction protocol) and recovery.

use crate::storage::ack_log::{self, AckEntry, AckKind};
use crate::storage::backend::{tmp_path, Backend, StorageFile};
use crate::storage::error::StorageError;
use crate::storage::handle_cache::{FileKey, FilePart, HandleCache};
use crate::storage::record::{self, HEADER_BYTES};
use crate::storage::stat::{self, SegmentCounts, StatTable, STAT_BYTES_MAX, STAT_FILE_NAME};
use crate::storage::types::{
    MessageData, RecordRef, RecoveredMessage, RecoveryReport, StoreConfig, StoreStats,
};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Prefix of segment file names: `queue_data.<N>` (LavinMQ's naming).
pub const DATA_FILE_PREFIX: &str = "queue_data.";

/// Prefix of ack log file names: `queue_acks.<N>`.
pub const ACK_FILE_PREFIX: &str = "queue_acks.";

/// Suffix of a segment being compacted: `queue_data.<N>.compact`.
pub const COMPACT_SUFFIX: &str = ".compact";

/// Number of the first segment of a new store.
pub const FIRST_SEGMENT: u64 = 1;

/// A sealed segment is compacted only when it holds more than this many records
/// (docs/storage.md: "more than 2000 records and under 50% valid").
pub const COMPACT_RECORDS_MIN: u64 = 2000;

/// A sealed segment is compacted only when fewer than this percentage of its records are
/// valid (docs/storage.md).
pub const COMPACT_VALID_PERCENT_MAX: u64 = 50;

/// Largest encode buffer kept between appends, in bytes (larger ones are released).
const ENCODE_BUFFER_KEEP_BYTES: usize = 1024 * 1024;

/// Record bytes a buffering store holds for its active segment at most before it writes
/// them itself, in bytes ([`QueueStore::set_write_buffering`]; normally the flusher has
/// them written sooner).
pub const WRITE_BUFFER_BYTES_MAX: usize = 1024 * 1024;

/// Ack-log bytes a buffering store holds per segment at most before it writes them itself,
/// in bytes (5 041 entries of [`ack_log::ENTRY_BYTES`]).
pub const ACK_BUFFER_BYTES_MAX: usize = 64 * 1024;

/// Damaged spans or entries listed one by one in a report before they are summarised.
pub(crate) const FINDINGS_LISTED_MAX: usize = 20;

/// The compaction rule on a sealed segment's counts.
pub(crate) fn needs_compaction(c: SegmentCounts) -> bool {
    c.total > COMPACT_RECORDS_MIN && c.valid * 100 < c.total * COMPACT_VALID_PERCENT_MAX
}

/// A valid record [`QueueStore::open_with_budget`] returns without its message: the body
/// stays on disk until [`QueueStore::read`] fetches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedRecord {
    /// Where it is stored.
    pub record: RecordRef,
    /// Size of its body, in bytes.
    pub body_bytes: u64,
    /// How many times it was delivered (> 0: it comes back redelivered).
    pub delivery_count: u32,
    /// When the broker accepted it, ms since the Unix epoch (its TTL counts from here).
    pub timestamp_ms: u64,
    /// Its `priority` property.
    pub priority: Option<u8>,
    /// Its own TTL (`expiration` property) in ms, when it has a valid one.
    pub expiration_ms: Option<u64>,
}

/// A valid record found by [`QueueStore::open_with_budget`].
#[derive(Debug, Clone, PartialEq)]
pub enum Recovered {
    /// Read whole: it fit in the budget.
    Loaded(Box<RecoveredMessage>),
    /// Left on disk: the budget was spent.
    Paged(PagedRecord),
}

impl Recovered {
    /// Where it is stored.
    pub fn record(&self) -> RecordRef {
        match self {
            Recovered::Loaded(m) => m.record,
            Recovered::Paged(p) => p.record,
        }
    }
}

/// The durable message store of one queue. `Send`; the broker wraps it in a `Mutex`.
#[derive(Debug)]
pub struct QueueStore {
    /// File access.
    backend: Arc<dyn Backend>,
    /// The queue's directory.
    dir: PathBuf,
    /// Segment size.
    config: StoreConfig,
    /// Index of every segment on disk, by number.
    segments: BTreeMap<u64, Segment>,
    /// Number of the active segment (the highest).
    active: u64,
    /// The open files of this store (opened on demand, closed when the store holds too
    /// many or the server's file budget needs the descriptor), with which of them were
    /// written since the flusher last took them.
    files: Arc<HandleCache>,
    /// Id of the next record.
    next_id: u64,
    /// Length of `queue_stat` as last written, in bytes.
    stat_bytes: u64,
    /// Reused buffer for encoding records.
    encode_buf: Vec<u8>,
    /// Whether appends and ack entries are held in memory until [`QueueStore::write_pending`]
    /// (group commit under `--fsync always`) instead of written one by one.
    buffering: bool,
    /// Record bytes of the active segment not written yet; they end the segment (its
    /// `data_bytes` counts them), so they start at `data_bytes - pending_data.len()`.
    pending_data: Vec<u8>,
    /// A record was written at once since the flusher's last round: later ones of the
    /// round are buffered.
    data_since_round: bool,
    /// Ack-log entries not written yet, per segment; an empty buffer marks a segment whose
    /// log was written since the last write-out (its next entries wait).
    pending_acks: BTreeMap<u64, Vec<u8>>,
    /// Set after a write failed: the files may no longer match the index, so the store
    /// refuses further writes until it is reopened (docs/storage.md).
    failed: Option<String>,
    /// Whether the active segment's files exist (a store that never held a record has
    /// none: they are made at its first write).
    active_on_disk: bool,
    /// Whether `queue_stat` on disk matches the index (no append or settle since it was
    /// written or checked): a clean shutdown then leaves it alone.
    stat_current: bool,
}

const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<QueueStore>();
};

mod compaction;
pub(crate) mod recovery;
mod segment;

use segment::Segment;
pub(crate) use segment::{acks_name, data_name, Listing, COUNT_MASK, SETTLED};

impl QueueStore {
    /// Appends one record to the active segment and returns where it is. When the active
    /// segment already holds `config.segment_bytes` or more, it is sealed first and a new
    /// one started (one directory sync and a `queue_stat` rewrite, once per segment).
    /// Does NOT fsync: the caller asks [`QueueStore::files_to_sync`] and the flusher syncs
    /// them; a publisher confirm may be sent only after that.
    ///
    /// # Errors
    /// [`StorageError::Io`] with kind `InvalidInput` when the message cannot be a record
    /// (exchange or routing key over 255 bytes, payload over
    /// [`record::RECORD_PAYLOAD_BYTES_MAX`]); nothing is written then. Any I/O error
    /// otherwise, after which the store is out of service ([`StorageError::Failed`]).
    pub fn append(&mut self, message: &MessageData<'_>) -> Result<RecordRef, StorageError> {
        self.check_ok()?;
        let mut buf = std::mem::take(&mut self.encode_buf);
        buf.clear();
        let id = self.next_id;
        let result = match record::encode(id, message, &mut buf) {
            Err(e) => Err(StorageError::io(
                self.dir.join(data_name(self.active)),
                io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
            )),
            Ok(_) => {
                let r = self.append_encoded(id, &buf);
                self.poison_on_err(r)
            }
        };
        if buf.capacity() <= ENCODE_BUFFER_KEEP_BYTES {
            self.encode_buf = buf;
        }
        result
    }

    fn append_encoded(&mut self, id: u64, bytes: &[u8]) -> Result<RecordRef, StorageError> {
        let active_bytes = self.active_segment()?.data_bytes;
        if active_bytes > 0 && active_bytes >= self.config.segment_bytes {
            self.roll()?;
        }
        let next_id = id
            .checked_add(1)
            .ok_or_else(|| StorageError::Failed("record ids exhausted".into()))?;
        let offset = self.active_segment()?.data_bytes;
        // The first record after a write-out goes to the file at once, so a disk that is
        // already full refuses the publish itself; the others of the round wait in memory.
        if self.buffering && self.data_since_round {
            self.pending_data.extend_from_slice(bytes);
        } else {
            self.write_data(bytes, offset)?;
            self.data_since_round = self.buffering;
        }
        let segment = self.active_segment_mut()?;
        segment.push(id, offset, 0);
        segment.data_bytes += bytes.len() as u64;
        self.next_id = next_id;
        self.stat_current = false;
        if self.pending_data.len() >= WRITE_BUFFER_BYTES_MAX {
            self.write_pending_data()?;
        }
        Ok(RecordRef {
            segment: self.active,
            id,
        })
    }

    /// Writes `bytes` at the end of the active segment, which must be at `offset`.
    fn write_data(&mut self, bytes: &[u8], offset: u64) -> Result<(), StorageError> {
        self.ensure_active_files()?;
        let key = FileKey {
            segment: self.active,
            part: FilePart::Data,
        };
        let file = self.file(key.segment, key.part)?;
        let at = file
            .append(bytes)
            .map_err(|e| StorageError::io(file.path(), e))?;
        if at != offset {
            return Err(StorageError::Corrupt {
                path: file.path().to_path_buf(),
                reason: format!(
                    "record written at offset {at}, expected {offset}: the file changed behind \
                     the store"
                ),
            });
        }
        self.files.mark_dirty(key);
        Ok(())
    }

    /// Writes the active segment's buffered records (one `write`).
    fn write_pending_data(&mut self) -> Result<(), StorageError> {
        if self.pending_data.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.pending_data);
        let offset = self.active_segment()?.data_bytes - bytes.len() as u64;
        self.write_data(&bytes, offset)?;
        if bytes.capacity() <= ENCODE_BUFFER_KEEP_BYTES {
            self.pending_data = bytes;
            self.pending_data.clear();
        }
        Ok(())
    }

    /// Writes the buffered ack entries of segment `n` (one `write`).
    fn write_pending_acks(&mut self, n: u64) -> Result<(), StorageError> {
        let Some(bytes) = self.pending_acks.remove(&n) else {
            return Ok(());
        };
        self.write_acks(n, &bytes)
    }

    /// Appends encoded ack entries to segment `n`'s log and notes the file for the flusher.
    fn write_acks(&mut self, n: u64, bytes: &[u8]) -> Result<(), StorageError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if n == self.active {
            self.ensure_active_files()?;
        }
        let file = self.file(n, FilePart::Acks)?;
        file.append(bytes)
            .map_err(|e| StorageError::io(file.path(), e))?;
        self.files.mark_dirty(FileKey {
            segment: n,
            part: FilePart::Acks,
        });
        Ok(())
    }

    /// Holds appends and ack entries in memory until [`QueueStore::write_pending`] (or
    /// until [`WRITE_BUFFER_BYTES_MAX`] / [`ACK_BUFFER_BYTES_MAX`] are reached) instead of
    /// writing each at once: one `write` per file per group-commit round. The first record
    /// after a write-out is still written at once (a full disk refuses it). Off by default.
    ///
    /// # Errors
    /// Turning it off writes what is pending; the I/O error of that, after which the
    /// store is out of service.
    pub fn set_write_buffering(&mut self, on: bool) -> Result<(), StorageError> {
        if !on {
            self.write_pending()?;
        }
        self.buffering = on;
        Ok(())
    }

    /// Writes every buffered record and ack entry (one `write` per file); the files then
    /// show up in [`QueueStore::files_to_sync`]. Nothing to do for a store that does not
    /// buffer.
    ///
    /// # Errors
    /// [`StorageError::Failed`] when the store is out of service; an I/O error (a full
    /// disk, for instance), after which it is.
    pub fn write_pending(&mut self) -> Result<(), StorageError> {
        if self.pending_data.is_empty() && self.pending_acks.is_empty() {
            return Ok(());
        }
        self.check_ok()?;
        let r = self.write_pending_inner();
        self.poison_on_err(r)
    }

    fn write_pending_inner(&mut self) -> Result<(), StorageError> {
        self.write_pending_data()?;
        while let Some((n, bytes)) = self.pending_acks.pop_first() {
            self.write_acks(n, &bytes)?;
        }
        Ok(())
    }

    /// Writes what is buffered and returns the files to sync: [`QueueStore::write_pending`]
    /// then [`QueueStore::files_to_sync`], for the flusher. Only a failure to write
    /// records is an error: ack entries need no durability (a lost one brings a message
    /// back), so failing to write them takes the store out of service and drops them, but
    /// the records already written are still returned to be synced and confirmed.
    ///
    /// # Errors
    /// The records could not be written, or the store is out of service with records
    /// buffered; the flusher then nacks what waited for the round.
    pub fn take_files_to_sync(&mut self) -> Result<Vec<Arc<dyn StorageFile>>, StorageError> {
        self.data_since_round = false;
        if !self.pending_data.is_empty() {
            self.check_ok()?;
            let r = self.write_pending_data();
            self.poison_on_err(r)?;
        }
        if let Err(e) = self.write_pending() {
            log::warn!(
                "queue store {}: buffered ack entries dropped: {e}",
                self.dir.display()
            );
            self.pending_acks.clear();
        }
        let r = self.files_to_sync();
        self.poison_on_err(r)
    }

    /// Seals the active segment and starts the next one.
    fn roll(&mut self) -> Result<(), StorageError> {
        let old = self.active;
        let n = old
            .checked_add(1)
            .ok_or_else(|| StorageError::Failed("segment numbers exhausted".into()))?;
        // The sealed segment's records reach its file before anything goes to the next.
        self.write_pending_data()?;
        self.write_pending_acks(old)?;
        let data = self.create_empty(&data_name(n))?;
        let acks = self.create_empty(&acks_name(n))?;
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))?;
        // The sealed segment's handles stay in the cache, dirty or not: the flusher
        // still syncs them, and they close when unused.
        self.active = n;
        for (part, file) in [(FilePart::Data, data), (FilePart::Acks, acks)] {
            self.files.insert(FileKey { segment: n, part }, file);
        }
        self.segments.insert(n, Segment::default());
        if self.segments.get(&old).is_some_and(|s| s.valid == 0) {
            self.delete_segment(old)?;
        }
        self.write_stat_inner()
    }

    fn create_empty(&self, name: &str) -> Result<Arc<dyn StorageFile>, StorageError> {
        let path = self.dir.join(name);
        let file = self
            .backend
            .open(&path, true)
            .map_err(|e| StorageError::io(&path, e))?;
        let len = file.len().map_err(|e| StorageError::io(&path, e))?;
        if len != 0 {
            return Err(StorageError::Corrupt {
                path,
                reason: format!("new segment file already holds {len} bytes"),
            });
        }
        Ok(file)
    }

    /// Appends a delivered entry for `record` (persists the redelivered flag and the
    /// delivery count for recovery). A record that is unknown or already settled is
    /// ignored. Not fsynced (see [`QueueStore::files_to_sync`]).
    ///
    /// # Errors
    /// An I/O error, after which the store is out of service.
    pub fn mark_delivered(&mut self, record: RecordRef) -> Result<(), StorageError> {
        self.check_ok()?;
        let Some(i) = self.live_index(record) else {
            return Ok(());
        };
        let r = self.append_ack(record.segment, AckKind::Delivered, record.id);
        self.poison_on_err(r)?;
        if let Some(s) = self.segments.get_mut(&record.segment) {
            if s.state[i] & COUNT_MASK < COUNT_MASK {
                s.state[i] += 1;
            }
        }
        Ok(())
    }

    /// Appends a settled entry for `record` (ack, reject, drop, purge). When a sealed
    /// segment has no valid record left it is deleted (segment file and ack log, then
    /// `queue_stat` rewritten). A record that is unknown or already settled is ignored
    /// (settling is idempotent). Not fsynced: a settle lost in a crash makes the message
    /// come back, redelivered (at-least-once, as RabbitMQ).
    ///
    /// # Errors
    /// An I/O error, after which the store is out of service.
    pub fn settle(&mut self, record: RecordRef) -> Result<(), StorageError> {
        self.check_ok()?;
        let r = self.settle_inner(record);
        self.poison_on_err(r)
    }

    fn settle_inner(&mut self, record: RecordRef) -> Result<(), StorageError> {
        let Some(i) = self.live_index(record) else {
            return Ok(());
        };
        self.append_ack(record.segment, AckKind::Settled, record.id)?;
        self.stat_current = false;
        let sealed = record.segment != self.active;
        let empty = match self.segments.get_mut(&record.segment) {
            Some(s) => {
                s.state[i] |= SETTLED;
                s.valid = s.valid.saturating_sub(1);
                s.valid == 0
            }
            None => false,
        };
        if sealed && empty {
            self.delete_segment(record.segment)?;
            self.write_stat_inner()?;
        }
        Ok(())
    }

    /// Index of a known, not settled record.
    fn live_index(&self, record: RecordRef) -> Option<usize> {
        let s = self.segments.get(&record.segment)?;
        let i = s.find(record.id)?;
        (s.state[i] & SETTLED == 0).then_some(i)
    }

    fn append_ack(&mut self, segment: u64, kind: AckKind, id: u64) -> Result<(), StorageError> {
        let entry = ack_log::encode(AckEntry { kind, id });
        // As for records, the first entry after a write-out goes to the file at once (a
        // process crash right after a lone delivery or ack keeps it); the rest of a burst
        // waits for the round.
        if self.buffering && self.pending_acks.contains_key(&segment) {
            let pending = self.pending_acks.entry(segment).or_default();
            pending.extend_from_slice(&entry);
            if pending.len() >= ACK_BUFFER_BYTES_MAX {
                self.write_pending_acks(segment)?;
            }
        } else {
            self.write_acks(segment, &entry)?;
            if self.buffering {
                self.pending_acks.insert(segment, Vec::new());
            }
        }
        if let Some(s) = self.segments.get_mut(&segment) {
            s.ack_bytes += ack_log::ENTRY_BYTES as u64;
        }
        Ok(())
    }

    /// Removes a sealed segment's files and index (the caller rewrites `queue_stat`, whose
    /// directory sync makes the removal durable). The segment file goes first: a crash
    /// between the two removals leaves an ack log without a segment, which `open` removes;
    /// the other order could bring back settled records as valid.
    fn delete_segment(&mut self, n: u64) -> Result<(), StorageError> {
        for (part, name) in [
            (FilePart::Data, data_name(n)),
            (FilePart::Acks, acks_name(n)),
        ] {
            let path = self.dir.join(name);
            self.backend
                .remove_file(&path)
                .map_err(|e| StorageError::io(&path, e))?;
            self.files.forget(FileKey { segment: n, part });
        }
        self.segments.remove(&n);
        self.pending_acks.remove(&n);
        Ok(())
    }

    /// Files written since the previous call (segments and ack logs), for the group-commit
    /// flusher, which fsyncs them without holding any lock. A message is durable (its
    /// confirm may go out) once every file returned by a call made after its `append` has
    /// been synced successfully. A buffering store must write what it holds first
    /// ([`QueueStore::take_files_to_sync`] does both). A file written and then closed to
    /// free its descriptor was fsynced before it was closed, so it is not returned.
    ///
    /// # Errors
    /// [`StorageError::Failed`] when such an early fsync failed: what was written is not
    /// known to be safe (the caller takes the store out of service).
    pub fn files_to_sync(&mut self) -> Result<Vec<Arc<dyn StorageFile>>, StorageError> {
        self.files.take_dirty().map_err(StorageError::Failed)
    }

    /// Reads one stored, not settled message back (for bodies kept out of memory),
    /// verifying its checksums. Its `delivery_count` is the store's count.
    ///
    /// # Errors
    /// [`StorageError::Io`] with kind `NotFound` for a record the store does not hold (or
    /// holds settled); [`StorageError::Corrupt`] when the bytes no longer verify; any read
    /// error.
    pub fn read(&self, record: RecordRef) -> Result<RecoveredMessage, StorageError> {
        let path = self.dir.join(data_name(record.segment));
        let not_found = || {
            StorageError::io(
                &path,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "no valid record {} in segment {}",
                        record.id, record.segment
                    ),
                ),
            )
        };
        let segment = self.segments.get(&record.segment).ok_or_else(not_found)?;
        let i = self.live_index(record).ok_or_else(not_found)?;
        let offset = segment.offsets[i];
        let corrupt = |reason: String| StorageError::Corrupt {
            path: path.clone(),
            reason: format!("record {} at offset {offset}: {reason}", record.id),
        };
        let mut header = [0u8; HEADER_BYTES];
        self.read_data(record.segment, offset, &mut header)?;
        let h = record::decode_header(&header).map_err(|e| corrupt(e.to_string()))?;
        let mut buf = vec![0u8; h.record_len()];
        self.read_data(record.segment, offset, &mut buf)?;
        let view = record::decode(&buf).map_err(|e| corrupt(e.to_string()))?;
        if view.id != record.id {
            return Err(corrupt(format!("holds id {}", view.id)));
        }
        Ok(RecoveredMessage {
            record,
            timestamp_ms: view.timestamp_ms,
            exchange: view.exchange.to_owned(),
            routing_key: view.routing_key.to_owned(),
            properties: view.properties,
            body: view.body.to_vec(),
            delivery_count: segment.state[i] & COUNT_MASK,
        })
    }

    /// Fills `buf` from segment `n` at `offset`: from the records still buffered when they
    /// are there (they end the active segment), from the file otherwise.
    fn read_data(&self, n: u64, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        if n == self.active && !self.pending_data.is_empty() {
            let end = self.active_segment()?.data_bytes;
            let start = end - self.pending_data.len() as u64;
            if offset >= start {
                let from = (offset - start) as usize;
                let part = self
                    .pending_data
                    .get(from..from + buf.len())
                    .ok_or_else(|| {
                        StorageError::io(
                            self.dir.join(data_name(n)),
                            io::Error::from(io::ErrorKind::UnexpectedEof),
                        )
                    })?;
                buf.copy_from_slice(part);
                return Ok(());
            }
        }
        let file = self.file(n, FilePart::Data)?;
        file.read_at(offset, buf)
            .map_err(|e| StorageError::io(file.path(), e))
    }

    /// Counters for listings: segments, records, valid records, bytes of all files.
    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats {
            segments: self.segments.len() as u64,
            bytes_on_disk: self.stat_bytes,
            ..StoreStats::default()
        };
        for seg in self.segments.values() {
            s.records_total += seg.total();
            s.records_valid += seg.valid;
            s.bytes_on_disk += seg.data_bytes + seg.ack_bytes;
        }
        s
    }

    /// Rewrites `queue_stat` from the index when it no longer matches it (called at clean
    /// shutdown, after writing what is buffered; the store calls it itself after a seal, a
    /// compaction or a deletion), atomically and durably. A store with no append or settle
    /// since its `queue_stat` was written or found right writes nothing, so a clean
    /// shutdown of 100,000 idle queues does not make 200,000 fsyncs.
    ///
    /// # Errors
    /// [`StorageError::Failed`] when the store is out of service; the I/O error otherwise
    /// (the old `queue_stat`, a hint, stays).
    pub fn write_stat(&mut self) -> Result<(), StorageError> {
        self.write_pending()?;
        self.check_ok()?;
        if self.stat_current {
            return Ok(());
        }
        self.write_stat_inner()
    }

    fn write_stat_inner(&mut self) -> Result<(), StorageError> {
        let text = stat::encode(&self.stat_table());
        let path = self.dir.join(STAT_FILE_NAME);
        self.backend
            .write_file_atomic(&path, text.as_bytes())
            .map_err(|e| StorageError::io(&path, e))?;
        self.stat_bytes = text.len() as u64;
        self.stat_current = true;
        Ok(())
    }

    fn stat_table(&self) -> StatTable {
        self.segments
            .iter()
            .filter(|(&n, _)| n != self.active || self.active_on_disk)
            .map(|(&n, s)| (n, s.counts()))
            .collect()
    }

    /// Makes the active segment's files when the store has none yet (its first write):
    /// the segment and its ack log, then a sync of the directory, before any record goes
    /// in (a synced record in a file whose entry is not durable would vanish).
    fn ensure_active_files(&mut self) -> Result<(), StorageError> {
        if self.active_on_disk {
            return Ok(());
        }
        let n = self.active;
        let data = self.create_empty(&data_name(n))?;
        let acks = self.create_empty(&acks_name(n))?;
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))?;
        for (part, file) in [(FilePart::Data, data), (FilePart::Acks, acks)] {
            self.files.insert(FileKey { segment: n, part }, file);
        }
        self.active_on_disk = true;
        self.stat_current = false;
        Ok(())
    }

    /// Deletes the whole directory (the queue was deleted).
    ///
    /// # Errors
    /// The I/O error.
    pub fn destroy(self) -> Result<(), StorageError> {
        self.backend
            .remove_dir_all(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))
    }

    /// The directory of this store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_ok(&self) -> Result<(), StorageError> {
        match &self.failed {
            Some(why) => Err(StorageError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    fn poison_on_err<T>(&mut self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        if let Err(e) = &r {
            // Not getting a descriptor changes nothing on disk: the store stays in service
            // and the next attempt may get one.
            if e.is_out_of_files() {
                return r;
            }
            if self.failed.is_none() {
                log::error!("queue store {} out of service: {e}", self.dir.display());
                self.failed = Some(e.to_string());
            }
        }
        r
    }

    fn active_segment(&self) -> Result<&Segment, StorageError> {
        self.segments
            .get(&self.active)
            .ok_or_else(|| self.index_lost())
    }

    fn active_segment_mut(&mut self) -> Result<&mut Segment, StorageError> {
        let err = self.index_lost();
        self.segments.get_mut(&self.active).ok_or(err)
    }

    fn index_lost(&self) -> StorageError {
        StorageError::Corrupt {
            path: self.dir.join(data_name(self.active)),
            reason: "active segment missing from the index".into(),
        }
    }

    /// A file of segment `n`, from the cache or opened now (its descriptor taken from the
    /// server's file budget, which may close another store's unused handle for it).
    fn file(&self, n: u64, part: FilePart) -> Result<Arc<dyn StorageFile>, StorageError> {
        let path = self.dir.join(match part {
            FilePart::Data => data_name(n),
            FilePart::Acks => acks_name(n),
        });
        self.files
            .get(FileKey { segment: n, part }, || {
                self.backend.open(&path, false)
            })
            .map_err(|e| StorageError::io(&path, e))
    }

    /// Handles this store holds open now.
    pub fn open_files(&self) -> usize {
        self.files.len()
    }
}

#[cfg(test)]
mod tests {
    use super::segment::{classify, FileName};
    use super::*;
    use crate::storage::SimBackend;
    use crate::types::BasicProperties;

    fn message(body: &[u8]) -> MessageData<'_> {
        static PROPS: BasicProperties = BasicProperties {
            content_type: None,
            content_encoding: None,
            headers: None,
            delivery_mode: Some(2),
            priority: None,
            correlation_id: None,
            reply_to: None,
            expiration: None,
            message_id: None,
            timestamp: None,
            kind: None,
            user_id: None,
            app_id: None,
            cluster_id: None,
        };
        MessageData {
            timestamp_ms: 1,
            exchange: "ex",
            routing_key: "rk",
            properties: &PROPS,
            body,
        }
    }

    fn open(sim: &SimBackend, segment_bytes: u64) -> (QueueStore, Vec<RecoveredMessage>) {
        let (s, msgs, _) = QueueStore::open(
            Arc::new(sim.clone()),
            PathBuf::from("/data/q"),
            StoreConfig { segment_bytes },
        )
        .unwrap();
        (s, msgs)
    }

    #[test]
    fn names_are_classified_strictly() {
        assert_eq!(classify(Path::new("queue_data.12")), FileName::Data(12));
        assert_eq!(classify(Path::new("queue_acks.3")), FileName::Acks(3));
        assert_eq!(
            classify(Path::new("queue_data.4.compact")),
            FileName::Compact(4)
        );
        assert_eq!(classify(Path::new("queue_stat")), FileName::Stat);
        assert_eq!(classify(Path::new("queue_stat.tmp")), FileName::StatTmp);
        for odd in [
            "queue_data.01",
            "queue_data.+1",
            "queue_data.",
            "queue_data.x",
            "x",
        ] {
            assert_eq!(classify(Path::new(odd)), FileName::Unknown, "{odd}");
        }
    }

    #[test]
    fn a_buffering_store_writes_the_first_record_of_a_round_and_holds_the_rest() {
        let sim = SimBackend::new();
        let (mut s, _) = open(&sim, 1 << 20);
        s.set_write_buffering(true).unwrap();
        let data = PathBuf::from("/data/q").join(data_name(s.active));
        let len = |sim: &SimBackend| sim.contents(&data).map_or(0, |c| c.len());
        assert!(
            sim.contents(&data).is_none(),
            "a store that never held a record has no segment file"
        );
        let before = sim.ops();
        s.append(&message(b"first!")).unwrap();
        let one = len(&sim);
        assert!(one > 0, "the first record of a round is written at once");
        // The segment and its ack log were made first (two creates, a directory sync).
        let ops = before + 3;
        for body in [b"second", b"third!"] {
            s.append(&message(body)).unwrap();
        }
        assert_eq!(len(&sim), one, "the rest wait for the round");
        assert_eq!(sim.ops() - ops, 1, "one write so far");
        let files = s.take_files_to_sync().unwrap();
        assert_eq!(len(&sim), 3 * one, "the round writes them in one go");
        assert_eq!(sim.ops() - ops, 2);
        for f in files {
            f.sync().unwrap();
        }
        // A new round: its first record goes at once again.
        s.append(&message(b"fourth")).unwrap();
        assert_eq!(
            sim.ops() - ops,
            4,
            "one sync, then the new round's first write"
        );
    }

    #[test]
    fn ids_are_not_reused_after_a_torn_tail() {
        let sim = SimBackend::new();
        let (mut s, _) = open(&sim, 1 << 20);
        let a = s.append(&message(b"a")).unwrap();
        let b = s.append(&message(b"b")).unwrap();
        for f in s.files_to_sync().unwrap() {
            f.sync().unwrap();
        }
        // b delivered and settled; its settle reaches the disk, its record does not.
        s.settle(b).unwrap();
        drop(s);
        let data = sim.contents(Path::new("/data/q/queue_data.1")).unwrap();
        let cut = data.len() - 3;
        sim.set_contents(Path::new("/data/q/queue_data.1"), &data[..cut])
            .unwrap();
        let (mut s, msgs) = open(&sim, 1 << 20);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].record, a);
        let c = s.append(&message(b"c")).unwrap();
        assert!(c.id > b.id, "{c:?} reuses a settled id");
        drop(s);
        let (_, msgs) = open(&sim, 1 << 20);
        assert_eq!(msgs.len(), 2);
    }

    #[test]
    fn read_returns_the_stored_message_and_refuses_settled_ones() {
        let sim = SimBackend::new();
        let (mut s, _) = open(&sim, 64);
        let refs: Vec<RecordRef> = (0..10)
            .map(|i| s.append(&message(format!("m{i}").as_bytes())).unwrap())
            .collect();
        assert!(s.stats().segments > 1);
        s.mark_delivered(refs[3]).unwrap();
        s.mark_delivered(refs[3]).unwrap();
        let m = s.read(refs[3]).unwrap();
        assert_eq!(m.body, b"m3");
        assert_eq!(m.delivery_count, 2);
        s.settle(refs[3]).unwrap();
        s.settle(refs[3]).unwrap();
        assert!(s.read(refs[3]).is_err());
        assert!(s
            .read(RecordRef {
                segment: 999,
                id: 1
            })
            .is_err());
    }

    #[test]
    fn open_with_budget_loads_the_oldest_bodies_and_pages_the_rest() {
        let sim = SimBackend::new();
        let (mut s, _) = open(&sim, 64);
        let refs: Vec<RecordRef> = (0..10)
            .map(|i| s.append(&message(&[i as u8; 10])).unwrap())
            .collect();
        s.mark_delivered(refs[8]).unwrap();
        s.settle(refs[1]).unwrap();
        drop(s);
        let (s, entries, _) = QueueStore::open_with_budget(
            Arc::new(sim.clone()),
            PathBuf::from("/data/q"),
            StoreConfig { segment_bytes: 64 },
            35,
        )
        .unwrap();
        let ids: Vec<RecordRef> = entries.iter().map(Recovered::record).collect();
        let live: Vec<RecordRef> = refs.iter().copied().filter(|r| *r != refs[1]).collect();
        assert_eq!(ids, live);
        // 3 bodies of 10 bytes fit in 35: refs 0, 2, 3; the others stay on disk.
        for (i, e) in entries.iter().enumerate() {
            match e {
                Recovered::Loaded(m) => {
                    assert!(i < 3, "entry {i} loaded");
                    assert_eq!(m.body.len(), 10);
                }
                Recovered::Paged(p) => {
                    assert!(i >= 3, "entry {i} paged");
                    assert_eq!(p.body_bytes, 10);
                    assert_eq!(p.delivery_count, u32::from(p.record == refs[8]));
                    assert_eq!(
                        s.read(p.record).unwrap().body,
                        vec![p.record.id as u8 - 1; 10]
                    );
                }
            }
        }
        drop(s);
        let (_, entries, _) = QueueStore::open_with_budget(
            Arc::new(sim.clone()),
            PathBuf::from("/data/q"),
            StoreConfig { segment_bytes: 64 },
            0,
        )
        .unwrap();
        assert!(entries.iter().all(|e| matches!(e, Recovered::Paged(_))));
        assert_eq!(entries.len(), 9);
    }

    #[test]
    fn a_failed_write_takes_the_store_out_of_service() {
        let sim = SimBackend::new();
        let (mut s, _) = open(&sim, 1 << 20);
        sim.fail_after(Some(0));
        assert!(s.append(&message(b"x")).is_err());
        sim.fail_after(None);
        assert!(matches!(
            s.append(&message(b"y")),
            Err(StorageError::Failed(_))
        ));
    }

    #[test]
    fn too_long_names_are_refused_without_failing_the_store() {
        let sim = SimBackend::new();
        let (mut s, _) = open(&sim, 1 << 20);
        let long = "k".repeat(300);
        let m = MessageData {
            routing_key: &long,
            ..message(b"x")
        };
        assert!(matches!(s.append(&m), Err(StorageError::Io { .. })));
        s.append(&message(b"ok")).unwrap();
    }
}
