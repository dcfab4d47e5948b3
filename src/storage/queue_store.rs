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
//! holding the queue's lock (ARCHITECTURE.md §2.4, §4). The exceptions are rare and
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
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
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
/// (ARCHITECTURE.md §5: "more than 2000 records and under 50% valid").
pub const COMPACT_RECORDS_MIN: u64 = 2000;

/// A sealed segment is compacted only when fewer than this percentage of its records are
/// valid (ARCHITECTURE.md §5).
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
const FINDINGS_LISTED_MAX: usize = 20;

/// Record state bit: settled.
const SETTLED: u32 = 1 << 31;
/// Record state bits: delivery count (saturating).
const COUNT_MASK: u32 = SETTLED - 1;

/// What a name in a queue directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileName {
    Data(u64),
    Acks(u64),
    Compact(u64),
    Stat,
    StatTmp,
    Unknown,
}

/// Parses a segment number written by this code (decimal, no sign, no leading zero).
fn segment_number(s: &str) -> Option<u64> {
    let n: u64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

fn classify(name: &Path) -> FileName {
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

fn data_name(n: u64) -> String {
    format!("{DATA_FILE_PREFIX}{n}")
}

fn acks_name(n: u64) -> String {
    format!("{ACK_FILE_PREFIX}{n}")
}

/// The files found in a queue directory.
#[derive(Debug, Default)]
struct Listing {
    data: BTreeSet<u64>,
    acks: BTreeSet<u64>,
    compact: Vec<PathBuf>,
    stat: bool,
    stat_tmp: bool,
    unknown: Vec<PathBuf>,
}

impl Listing {
    fn read(backend: &dyn Backend, dir: &Path) -> io::Result<Listing> {
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

    fn orphan_acks(&self) -> impl Iterator<Item = u64> + '_ {
        self.acks.iter().copied().filter(|n| !self.data.contains(n))
    }
}

/// In-memory index of one segment.
#[derive(Debug, Default)]
struct Segment {
    /// Ids of the records in the file, increasing.
    ids: Vec<u64>,
    /// Offset of each record in the file, in bytes.
    offsets: Vec<u64>,
    /// Per record: [`SETTLED`] bit | delivery count.
    state: Vec<u32>,
    /// Records not settled.
    valid: u64,
    /// Length of the segment file, in bytes.
    data_bytes: u64,
    /// Length of the ack log, in bytes.
    ack_bytes: u64,
}

impl Segment {
    fn push(&mut self, id: u64, offset: u64, state: u32) {
        self.ids.push(id);
        self.offsets.push(offset);
        self.state.push(state);
        if state & SETTLED == 0 {
            self.valid += 1;
        }
    }

    fn find(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    fn total(&self) -> u64 {
        self.ids.len() as u64
    }

    fn counts(&self) -> SegmentCounts {
        SegmentCounts {
            total: self.total(),
            valid: self.valid,
        }
    }

    fn needs_compaction(&self) -> bool {
        needs_compaction(self.counts())
    }
}

/// The compaction rule on a sealed segment's counts.
fn needs_compaction(c: SegmentCounts) -> bool {
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
    /// refuses further writes until it is reopened (ARCHITECTURE.md §5).
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

/// Where the counts of recovery go while segments are scanned.
#[derive(Debug)]
struct Recovery {
    report: RecoveryReport,
    recovered: Vec<RecoveredMessage>,
    /// Valid records returned without their message ([`QueueStore::open_with_budget`]).
    paged: Vec<PagedRecord>,
    /// Body bytes that may still be returned in memory (`u64::MAX`: no budget).
    budget_left: u64,
    /// A body did not fit: every later valid record is returned paged, so the ones in
    /// memory are the oldest.
    budget_spent: bool,
    max_id: Option<u64>,
    dir_changed: bool,
}

impl Recovery {
    fn new(budget_bytes: u64) -> Recovery {
        Recovery {
            report: RecoveryReport::default(),
            recovered: Vec::new(),
            paged: Vec::new(),
            budget_left: budget_bytes,
            budget_spent: false,
            max_id: None,
            dir_changed: false,
        }
    }

    fn saw_id(&mut self, id: Option<u64>) {
        if let Some(id) = id {
            self.max_id = Some(self.max_id.map_or(id, |m| m.max(id)));
        }
    }

    /// Records a repair of damaged data (the broker logs it, naming the queue).
    fn warn(&mut self, line: String) {
        self.report.warnings.push(line);
    }

    /// Records normal housekeeping found at start (the broker logs it as information).
    fn note(&mut self, line: String) {
        self.report.notes.push(line);
    }
}

impl QueueStore {
    /// Opens (creating if missing) the store in `dir`: scans every segment in order with its
    /// ack log, truncates torn tails, skips damaged middle records, recounts a stale or
    /// missing `queue_stat` (without rewriting it: the next seal, compaction or
    /// [`QueueStore::write_stat`] does), deletes fully settled sealed segments, and returns
    /// the valid messages in record-id order with their delivery counts (recovery steps in
    /// `docs/storage.md`).
    /// Leftover `*.compact` and `queue_stat.tmp` files and ack logs without a segment are
    /// removed. Never panics on any disk content.
    ///
    /// # Errors
    /// [`StorageError::Io`] when a file cannot be listed, read, repaired or created;
    /// [`StorageError::Corrupt`] when a segment holds a valid record of an unknown format
    /// version or kind (written by a newer RelayMQ: nothing is repaired then).
    pub fn open(
        backend: Arc<dyn Backend>,
        dir: PathBuf,
        config: StoreConfig,
    ) -> Result<(QueueStore, Vec<RecoveredMessage>, RecoveryReport), StorageError> {
        let (store, recovered, _, report) = Self::open_inner(backend, dir, config, u64::MAX)?;
        Ok((store, recovered, report))
    }

    /// As [`QueueStore::open`], but returns the valid messages whole only while their
    /// bodies fit in `budget_bytes` together, oldest first: from the first one that does
    /// not fit on, each valid record comes back as a [`PagedRecord`] (its place, body size
    /// and delivery count; the body stays on disk and [`QueueStore::read`] fetches it). So a
    /// backlog larger than memory is never loaded at start. Entries are in record-id order.
    ///
    /// # Errors
    /// As [`QueueStore::open`].
    pub fn open_with_budget(
        backend: Arc<dyn Backend>,
        dir: PathBuf,
        config: StoreConfig,
        budget_bytes: u64,
    ) -> Result<(QueueStore, Vec<Recovered>, RecoveryReport), StorageError> {
        let (store, loaded, paged, report) = Self::open_inner(backend, dir, config, budget_bytes)?;
        let mut entries = Vec::with_capacity(loaded.len() + paged.len());
        let mut paged = paged.into_iter().peekable();
        for m in loaded {
            while let Some(p) = paged.next_if(|p| p.record.id < m.record.id) {
                entries.push(Recovered::Paged(p));
            }
            entries.push(Recovered::Loaded(Box::new(m)));
        }
        entries.extend(paged.map(Recovered::Paged));
        Ok((store, entries, report))
    }

    /// Opens the store; valid messages whose bodies exceed `budget_bytes` come back paged.
    #[allow(clippy::type_complexity)]
    fn open_inner(
        backend: Arc<dyn Backend>,
        dir: PathBuf,
        config: StoreConfig,
        budget_bytes: u64,
    ) -> Result<
        (
            QueueStore,
            Vec<RecoveredMessage>,
            Vec<PagedRecord>,
            RecoveryReport,
        ),
        StorageError,
    > {
        let dir_io = |e| StorageError::io(&dir, e);
        if !backend.exists(&dir) {
            backend.create_dir_all(&dir).map_err(dir_io)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                backend
                    .sync_dir(parent)
                    .map_err(|e| StorageError::io(parent, e))?;
            }
        }
        let listing = Listing::read(&*backend, &dir).map_err(dir_io)?;
        let mut rec = Recovery::new(budget_bytes);

        let mut leftovers = listing.compact.clone();
        if listing.stat_tmp {
            leftovers.push(tmp_path(Path::new(STAT_FILE_NAME)));
        }
        for name in &leftovers {
            let path = dir.join(name);
            backend
                .remove_file(&path)
                .map_err(|e| StorageError::io(&path, e))?;
            rec.dir_changed = true;
            rec.warn(format!(
                "{}: leftover of an interrupted write, removed",
                path.display()
            ));
        }
        for name in &listing.unknown {
            rec.warn(format!(
                "{}: unknown file in a queue directory, left alone",
                dir.join(name).display()
            ));
        }
        for n in listing.orphan_acks() {
            let path = dir.join(acks_name(n));
            let file = backend
                .open(&path, false)
                .map_err(|e| StorageError::io(&path, e))?;
            let scan =
                ack_log::read_file(&*file, &mut |_| {}).map_err(|e| StorageError::io(&path, e))?;
            rec.saw_id(scan.max_id);
            backend
                .remove_file(&path)
                .map_err(|e| StorageError::io(&path, e))?;
            rec.dir_changed = true;
            rec.warn(format!(
                "{}: ack log without a segment, removed",
                path.display()
            ));
        }

        let mut segments = BTreeMap::new();
        for &n in &listing.data {
            let has_acks = listing.acks.contains(&n);
            let segment = recover_segment(&*backend, &dir, n, has_acks, &mut rec)?;
            segments.insert(n, segment);
        }

        // Sealed segments with nothing valid left go (LavinMQ does the same at start).
        let active = listing.data.last().copied();
        let empty_sealed: Vec<u64> = segments
            .iter()
            .filter(|(&n, s)| Some(n) != active && s.valid == 0)
            .map(|(&n, _)| n)
            .collect();
        for n in empty_sealed {
            for path in [dir.join(data_name(n)), dir.join(acks_name(n))] {
                backend
                    .remove_file(&path)
                    .map_err(|e| StorageError::io(&path, e))?;
            }
            segments.remove(&n);
            rec.dir_changed = true;
            let line = format!(
                "{}: sealed segment fully settled, deleted",
                dir.join(data_name(n)).display()
            );
            rec.note(line);
        }

        // A store that never held a record has no segment yet: segment 1's files are
        // made at its first write (`ensure_active_files`), so declaring a durable queue
        // and recovering an idle one write nothing.
        let active_on_disk = active.is_some();
        let active = active.unwrap_or(FIRST_SEGMENT);
        segments.entry(active).or_default();
        if rec.dir_changed {
            backend.sync_dir(&dir).map_err(dir_io)?;
        }
        // The active segment's files are opened at the first write or read, not now: a
        // queue nobody uses holds no descriptor.
        let files = HandleCache::new(backend.file_budget().cloned());
        let next_id = match rec.max_id {
            None => 1,
            Some(m) => m
                .checked_add(1)
                .ok_or_else(|| StorageError::Failed("record ids exhausted".into()))?,
        };

        let mut store = QueueStore {
            active_on_disk,
            stat_current: false,
            backend: Arc::clone(&backend),
            dir: dir.clone(),
            config,
            segments,
            active,
            files,
            next_id,
            stat_bytes: 0,
            encode_buf: Vec::new(),
            buffering: false,
            pending_data: Vec::new(),
            data_since_round: false,
            pending_acks: BTreeMap::new(),
            failed: None,
        };
        let stat_state = read_stat(&*backend, &dir);
        let actual = store.stat_table();
        match stat_state {
            Ok(Some((table, len))) if table == actual => {
                store.stat_bytes = len;
                store.stat_current = true;
            }
            // Nothing stored, nothing to count: no file is needed until a segment is.
            Ok(None) if actual.is_empty() => store.stat_current = true,
            found => {
                // Recounted from the segments (the scan above), and NOT rewritten here:
                // after a crash every queue that held messages has a stale one, and
                // writing thousands of files (a create, a rename and two fsyncs each) was
                // most of the recovery time (issue 8). It is a hint only `--check` and
                // the next open read; the next seal, compaction, segment deletion or
                // clean shutdown rewrites it.
                store.stat_bytes = match &found {
                    Ok(Some((_, len))) => *len,
                    _ => file_len(&*backend, &dir.join(STAT_FILE_NAME)),
                };
                rec.report.stat_rebuilt = true;
                let why = match found {
                    Ok(None) => "missing".to_string(),
                    Ok(Some(_)) => "stale".to_string(),
                    Err(e) => e,
                };
                rec.note(format!(
                    "{}: {why}, recounted from the segments (rewritten at the next seal, compaction or clean shutdown)",
                    dir.join(STAT_FILE_NAME).display()
                ));
            }
        }
        let mut recovered = rec.recovered;
        recovered.sort_by_key(|m| m.record.id);
        let mut paged = rec.paged;
        paged.sort_by_key(|p| p.record.id);
        Ok((store, recovered, paged, rec.report))
    }

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

    /// Whether a sealed segment has more than [`COMPACT_RECORDS_MIN`] records and under
    /// [`COMPACT_VALID_PERCENT_MAX`]% valid (ARCHITECTURE.md §5).
    pub fn needs_compaction(&self) -> bool {
        self.segments
            .iter()
            .any(|(&n, s)| n != self.active && s.needs_compaction())
    }

    /// Compacts every segment [`QueueStore::needs_compaction`] describes: copies its valid
    /// records (same ids, checksums verified) into `queue_data.N.compact`, fsyncs it,
    /// renames it over `queue_data.N` and fsyncs the directory, so at no moment is a valid
    /// record only in a file about to be deleted (crash analysis in `docs/storage.md`).
    /// The ack log is kept as it is: its entries for records dropped by the compaction
    /// match no record any more and are ignored. Returns the bytes reclaimed.
    ///
    /// Runs under the caller's lock and fsyncs; call it from housekeeping, not per message.
    ///
    /// # Errors
    /// An I/O error, or [`StorageError::Corrupt`] when a record to copy no longer verifies;
    /// the store is out of service afterwards (the original segment is intact unless the
    /// rename happened).
    pub fn compact(&mut self) -> Result<u64, StorageError> {
        self.check_ok()?;
        let r = self.compact_inner();
        self.poison_on_err(r)
    }

    fn compact_inner(&mut self) -> Result<u64, StorageError> {
        // The copy reads the files and the rewritten ack logs replace them: nothing may
        // still wait in memory.
        self.write_pending_inner()?;
        let candidates: Vec<u64> = self
            .segments
            .iter()
            .filter(|(&n, s)| n != self.active && s.needs_compaction())
            .map(|(&n, _)| n)
            .collect();
        let mut reclaimed = 0;
        for &n in &candidates {
            reclaimed += self.compact_segment(n)?;
        }
        if !candidates.is_empty() {
            self.write_stat_inner()?;
        }
        Ok(reclaimed)
    }

    fn compact_segment(&mut self, n: u64) -> Result<u64, StorageError> {
        let data_path = self.dir.join(data_name(n));
        let compact_path = self.dir.join(format!("{}{COMPACT_SUFFIX}", data_name(n)));
        let cio = |e| StorageError::io(&compact_path, e);
        let old = self.file(n, FilePart::Data)?;
        if self.backend.exists(&compact_path) {
            self.backend.remove_file(&compact_path).map_err(cio)?;
        }
        let new = self.backend.open(&compact_path, true).map_err(cio)?;
        let segment = self.segments.get(&n).ok_or_else(|| StorageError::Corrupt {
            path: data_path.clone(),
            reason: "segment vanished from the index".into(),
        })?;
        let mut kept = Segment::default();
        let mut header = [0u8; HEADER_BYTES];
        let mut buf = Vec::new();
        for i in 0..segment.ids.len() {
            if segment.state[i] & SETTLED != 0 {
                continue;
            }
            let (id, offset) = (segment.ids[i], segment.offsets[i]);
            let corrupt = |reason: String| StorageError::Corrupt {
                path: data_path.clone(),
                reason: format!("record {id} at offset {offset}: {reason}"),
            };
            old.read_at(offset, &mut header)
                .map_err(|e| StorageError::io(&data_path, e))?;
            let h = record::decode_header(&header).map_err(|e| corrupt(e.to_string()))?;
            buf.resize(h.record_len(), 0);
            old.read_at(offset, &mut buf)
                .map_err(|e| StorageError::io(&data_path, e))?;
            let view = record::decode(&buf).map_err(|e| corrupt(e.to_string()))?;
            if view.id != id {
                return Err(corrupt(format!("holds id {}", view.id)));
            }
            let at = new.append(&buf).map_err(cio)?;
            kept.push(id, at, segment.state[i]);
        }
        new.sync().map_err(cio)?;
        let new_len = new.len().map_err(cio)?;
        let old_len = segment.data_bytes;
        // Only now, with every valid record durable in the new file, replace the old one.
        self.backend
            .rename(&compact_path, &data_path)
            .map_err(|e| StorageError::io(&data_path, e))?;
        kept.data_bytes = new_len;
        let old_acks = segment.ack_bytes;
        kept.ack_bytes = old_acks;
        // The index follows the file at once: whatever fails later, reads use the new
        // offsets (the old ack log still holds for the kept records).
        self.segments.insert(n, kept);
        // The cached handle is the replaced file's.
        self.files.forget(FileKey {
            segment: n,
            part: FilePart::Data,
        });
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))?;
        let new_acks = self.rewrite_acks(n)?;
        if let Some(s) = self.segments.get_mut(&n) {
            s.ack_bytes = new_acks;
        }
        Ok(old_len.saturating_sub(new_len) + old_acks.saturating_sub(new_acks))
    }

    /// Rewrites a compacted segment's ack log with only what its kept records need: their
    /// delivered entries (the delivery counts). Written to `queue_acks.N.compact`, fsynced,
    /// renamed over the log, directory fsynced. A crash before the rename leaves the old
    /// log, which is still right (its entries for dropped records match no record).
    /// Returns the new log's length in bytes.
    fn rewrite_acks(&mut self, n: u64) -> Result<u64, StorageError> {
        let acks_path = self.dir.join(acks_name(n));
        let compact_path = self.dir.join(format!("{}{COMPACT_SUFFIX}", acks_name(n)));
        let cio = |e| StorageError::io(&compact_path, e);
        let kept = self.segments.get(&n).ok_or_else(|| StorageError::Corrupt {
            path: acks_path.clone(),
            reason: "segment vanished from the index".into(),
        })?;
        let mut bytes = Vec::new();
        for (i, &id) in kept.ids.iter().enumerate() {
            let deliveries = kept.state[i] & !SETTLED;
            for _ in 0..deliveries {
                bytes.extend_from_slice(&ack_log::encode(ack_log::AckEntry {
                    kind: ack_log::AckKind::Delivered,
                    id,
                }));
            }
        }
        if self.backend.exists(&compact_path) {
            self.backend.remove_file(&compact_path).map_err(cio)?;
        }
        let new = self.backend.open(&compact_path, true).map_err(cio)?;
        if !bytes.is_empty() {
            new.append(&bytes).map_err(cio)?;
        }
        new.sync().map_err(cio)?;
        self.backend
            .rename(&compact_path, &acks_path)
            .map_err(|e| StorageError::io(&acks_path, e))?;
        self.files.forget(FileKey {
            segment: n,
            part: FilePart::Acks,
        });
        self.backend
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(&self.dir, e))?;
        Ok(bytes.len() as u64)
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

/// Recovers segment `n`: reads its ack log (creating a missing one), scans its records,
/// truncates torn tails, and indexes the records, collecting the valid ones.
fn recover_segment(
    backend: &dyn Backend,
    dir: &Path,
    n: u64,
    has_acks: bool,
    rec: &mut Recovery,
) -> Result<Segment, StorageError> {
    let data_path = dir.join(data_name(n));
    let acks_path = dir.join(acks_name(n));
    let aio = |e| StorageError::io(&acks_path, e);
    let dio = |e| StorageError::io(&data_path, e);

    let acks = backend.open(&acks_path, !has_acks).map_err(aio)?;
    if !has_acks {
        rec.dir_changed = true;
        rec.warn(format!("{}: missing, created empty", acks_path.display()));
    }
    let mut states: HashMap<u64, u32> = HashMap::new();
    let scan = ack_log::read_file(&*acks, &mut |e| {
        let s = states.entry(e.id).or_insert(0);
        match e.kind {
            AckKind::Delivered if *s & COUNT_MASK < COUNT_MASK => *s += 1,
            AckKind::Delivered => {}
            AckKind::Settled => *s |= SETTLED,
        }
    })
    .map_err(aio)?;
    rec.saw_id(scan.max_id);
    if scan.bad_entries > 0 {
        rec.warn(format!(
            "{}: {} damaged entries skipped (first at offset {})",
            acks_path.display(),
            scan.bad_entries,
            scan.first_bad_offset.unwrap_or(0)
        ));
    }
    if scan.tail_bytes() > 0 {
        acks.truncate(scan.valid_len).map_err(aio)?;
        acks.sync().map_err(aio)?;
        rec.report
            .truncated_tails
            .push((acks_path.clone(), scan.tail_bytes()));
        rec.warn(format!(
            "{}: torn tail of {} bytes at offset {} truncated",
            acks_path.display(),
            scan.tail_bytes(),
            scan.valid_len
        ));
    }

    let data = backend.open(&data_path, false).map_err(dio)?;
    let mut segment = Segment::default();
    let recovered = &mut rec.recovered;
    let paged = &mut rec.paged;
    let budget_left = &mut rec.budget_left;
    let budget_spent = &mut rec.budget_spent;
    let fscan = record::scan_file(&*data, &mut |offset, r| {
        let state = states.get(&r.id).copied().unwrap_or(0);
        segment.push(r.id, offset, state);
        if state & SETTLED == 0 {
            let record = RecordRef {
                segment: n,
                id: r.id,
            };
            let body_bytes = r.body.len() as u64;
            if *budget_spent || body_bytes > *budget_left {
                *budget_spent = true;
                paged.push(PagedRecord {
                    record,
                    body_bytes,
                    delivery_count: state & COUNT_MASK,
                    timestamp_ms: r.timestamp_ms,
                    priority: r.properties.priority,
                    expiration_ms: r.properties.expiration_ms().ok().flatten(),
                });
                return;
            }
            *budget_left -= body_bytes;
            recovered.push(RecoveredMessage {
                record,
                timestamp_ms: r.timestamp_ms,
                exchange: r.exchange.to_owned(),
                routing_key: r.routing_key.to_owned(),
                properties: r.properties.clone(),
                body: r.body.to_vec(),
                delivery_count: state & COUNT_MASK,
            });
        }
    })
    .map_err(dio)?;
    if let Some((offset, reason)) = &fscan.unsupported {
        return Err(StorageError::Corrupt {
            path: data_path,
            reason: format!(
                "record at offset {offset}: {reason}; written by a newer RelayMQ? \
                 nothing was repaired"
            ),
        });
    }
    let middle = fscan.middle();
    rec.report.skipped_records += middle.len() as u64;
    for span in middle.iter().take(FINDINGS_LISTED_MAX) {
        rec.warn(format!(
            "{}: damaged bytes {}..{} skipped: {}",
            data_path.display(),
            span.start,
            span.end,
            span.reason
        ));
    }
    segment.data_bytes = fscan.len;
    if let Some(tail) = fscan.tail() {
        data.truncate(tail.start).map_err(dio)?;
        data.sync().map_err(dio)?;
        let dropped = tail.end - tail.start;
        rec.report
            .truncated_tails
            .push((data_path.clone(), dropped));
        rec.warn(format!(
            "{}: torn tail of {dropped} bytes at offset {} truncated ({})",
            data_path.display(),
            tail.start,
            tail.reason
        ));
        segment.data_bytes = tail.start;
    }
    segment.ack_bytes = scan.valid_len;
    rec.saw_id(segment.ids.last().copied());
    Ok(segment)
}

/// Length of the file at `path` in bytes; 0 when it cannot be opened (for the on-disk
/// size of a `queue_stat` left as it was).
fn file_len(backend: &dyn Backend, path: &Path) -> u64 {
    backend.open(path, false).and_then(|f| f.len()).unwrap_or(0)
}

/// Reads and parses `queue_stat`: `Ok(None)` when missing, `Err` saying why it is
/// unusable, else the table and the file's length in bytes.
fn read_stat(backend: &dyn Backend, dir: &Path) -> Result<Option<(StatTable, u64)>, String> {
    let path = dir.join(STAT_FILE_NAME);
    if !backend.exists(&path) {
        return Ok(None);
    }
    let file = backend.open(&path, false).map_err(|e| e.to_string())?;
    let len = file.len().map_err(|e| e.to_string())?;
    if len > STAT_BYTES_MAX {
        return Err(format!("{len} bytes, over the {STAT_BYTES_MAX}-byte limit"));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_at(0, &mut buf).map_err(|e| e.to_string())?;
    stat::parse(&buf).map(|t| Some((t, len)))
}

/// What [`check_dir`] found in a queue directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Damage that recovery would have to skip or that means lost data: damaged records
    /// or ack entries in the middle of a file, unreadable files, records of an unknown
    /// format version.
    pub problems: Vec<String>,
    /// Findings that recovery repairs as a matter of course: torn tails (normal after a
    /// crash), a missing, corrupt or lagging `queue_stat`, leftover files, fully settled
    /// sealed segments, segments due for compaction.
    pub info: Vec<String>,
    /// Segment files.
    pub segments: u64,
    /// Valid records found (checksums verified).
    pub records_total: u64,
    /// Records among them not settled.
    pub records_valid: u64,
    /// Valid ack log entries.
    pub ack_entries: u64,
    /// Bytes of all files of the directory.
    pub bytes_on_disk: u64,
}

impl CheckReport {
    /// Whether no problem was found (info lines do not count).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        for i in &self.info {
            writeln!(f, "info: {i}")?;
        }
        write!(
            f,
            "{} segments, {} records ({} valid), {} ack entries, {} bytes: {}",
            self.segments,
            self.records_total,
            self.records_valid,
            self.ack_entries,
            self.bytes_on_disk,
            if self.is_ok() { "ok" } else { "PROBLEMS" }
        )
    }
}

/// Verifies a queue directory without changing anything (for `relaymq-server --check`):
/// the checksums of every record and ack entry, `queue_stat` against the actual counts,
/// and leftover or unexpected files. What each finding means is in [`CheckReport`] and
/// `docs/storage.md`.
pub fn check_dir(backend: &dyn Backend, dir: &Path) -> CheckReport {
    let mut r = CheckReport::default();
    let listing = match Listing::read(backend, dir) {
        Ok(l) => l,
        Err(e) => {
            r.problems
                .push(format!("{}: cannot list: {e}", dir.display()));
            return r;
        }
    };
    for name in &listing.compact {
        r.info.push(format!(
            "{}: leftover of an interrupted compaction (removed on open; the segment is \
             complete)",
            dir.join(name).display()
        ));
    }
    if listing.stat_tmp {
        r.info.push(format!(
            "{}: leftover of an interrupted write (removed on open)",
            dir.join(tmp_path(Path::new(STAT_FILE_NAME))).display()
        ));
    }
    for name in &listing.unknown {
        r.info.push(format!(
            "{}: unknown file (left alone)",
            dir.join(name).display()
        ));
    }
    for n in listing.orphan_acks() {
        let path = dir.join(acks_name(n));
        r.info.push(format!(
            "{}: ack log without a segment (removed on open)",
            path.display()
        ));
        if let Ok(len) = backend.open(&path, false).and_then(|f| f.len()) {
            r.bytes_on_disk += len;
        }
    }
    let active = listing.data.last().copied();
    let mut actual = StatTable::new();
    for &n in &listing.data {
        if let Some(counts) = check_segment(backend, dir, n, listing.acks.contains(&n), &mut r) {
            if Some(n) != active {
                if counts.valid == 0 {
                    r.info.push(format!(
                        "{}: sealed and fully settled (deleted on open)",
                        dir.join(data_name(n)).display()
                    ));
                } else if needs_compaction(counts) {
                    r.info.push(format!(
                        "{}: due for compaction ({} of {} records valid)",
                        dir.join(data_name(n)).display(),
                        counts.valid,
                        counts.total
                    ));
                }
            }
            actual.insert(n, counts);
        }
    }
    r.segments = listing.data.len() as u64;
    let stat_path = dir.join(STAT_FILE_NAME);
    match read_stat(backend, dir) {
        // A store that never held a record has neither segments nor `queue_stat`.
        Ok(None) if actual.is_empty() => {}
        Ok(None) => r.info.push(format!(
            "{}: missing (recounted on open, rewritten at the next clean shutdown)",
            stat_path.display()
        )),
        Err(e) => r.info.push(format!(
            "{}: unusable: {e} (recounted on open, rewritten at the next clean shutdown)",
            stat_path.display()
        )),
        Ok(Some((table, len))) => {
            r.bytes_on_disk += len;
            if table != actual {
                let differences: Vec<String> = actual
                    .keys()
                    .chain(table.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|n| table.get(n) != actual.get(n))
                    .take(FINDINGS_LISTED_MAX)
                    .map(|n| {
                        let show = |c: Option<&SegmentCounts>| {
                            c.map_or("-".to_string(), |c| format!("{}/{}", c.total, c.valid))
                        };
                        format!(
                            "segment {n}: says {}, is {}",
                            show(table.get(n)),
                            show(actual.get(n))
                        )
                    })
                    .collect();
                r.info.push(format!(
                    "{}: lags behind the segments (normal after a crash, or follows from a damaged record reported above; recounted on open, rewritten at the next clean shutdown): \
                     total/valid {}",
                    stat_path.display(),
                    differences.join("; ")
                ));
            }
        }
    }
    r
}

/// Checks one segment and its ack log for [`check_dir`]; returns its counts unless the
/// segment could not be read.
fn check_segment(
    backend: &dyn Backend,
    dir: &Path,
    n: u64,
    has_acks: bool,
    r: &mut CheckReport,
) -> Option<SegmentCounts> {
    let data_path = dir.join(data_name(n));
    let acks_path = dir.join(acks_name(n));
    let mut settled: BTreeSet<u64> = BTreeSet::new();
    if has_acks {
        let scan = backend.open(&acks_path, false).and_then(|f| {
            ack_log::read_file(&*f, &mut |e| {
                if e.kind == AckKind::Settled {
                    settled.insert(e.id);
                }
            })
        });
        match scan {
            Err(e) => r
                .problems
                .push(format!("{}: cannot read: {e}", acks_path.display())),
            Ok(scan) => {
                r.ack_entries += scan.entries;
                r.bytes_on_disk += scan.len;
                if scan.bad_entries > 0 {
                    r.problems.push(format!(
                        "{}: {} damaged entries (first at offset {}); their acks or \
                         deliveries are lost",
                        acks_path.display(),
                        scan.bad_entries,
                        scan.first_bad_offset.unwrap_or(0)
                    ));
                }
                if scan.tail_bytes() > 0 {
                    r.info.push(format!(
                        "{}: torn tail of {} bytes at offset {} (truncated on open)",
                        acks_path.display(),
                        scan.tail_bytes(),
                        scan.valid_len
                    ));
                }
            }
        }
    } else {
        r.info.push(format!(
            "{}: missing (created empty on open)",
            acks_path.display()
        ));
    }
    let mut counts = SegmentCounts::default();
    let scan = backend.open(&data_path, false).and_then(|f| {
        record::scan_file(&*f, &mut |_, rec| {
            counts.total += 1;
            if !settled.contains(&rec.id) {
                counts.valid += 1;
            }
        })
    });
    let scan = match scan {
        Ok(s) => s,
        Err(e) => {
            r.problems
                .push(format!("{}: cannot read: {e}", data_path.display()));
            return None;
        }
    };
    r.bytes_on_disk += scan.len;
    r.records_total += counts.total;
    r.records_valid += counts.valid;
    if let Some((offset, reason)) = &scan.unsupported {
        r.problems.push(format!(
            "{}: record at offset {offset}: {reason} (written by a newer RelayMQ?)",
            data_path.display()
        ));
    }
    let middle = scan.middle();
    for span in middle.iter().take(FINDINGS_LISTED_MAX) {
        r.problems.push(format!(
            "{}: damaged bytes {}..{} ({}); the records there are lost",
            data_path.display(),
            span.start,
            span.end,
            span.reason
        ));
    }
    if middle.len() > FINDINGS_LISTED_MAX {
        r.problems.push(format!(
            "{}: {} more damaged spans",
            data_path.display(),
            middle.len() - FINDINGS_LISTED_MAX
        ));
    }
    if let Some(tail) = scan.tail() {
        r.info.push(format!(
            "{}: torn tail of {} bytes at offset {} ({}; normal after a crash, truncated on \
             open)",
            data_path.display(),
            tail.end - tail.start,
            tail.start,
            tail.reason
        ));
    }
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::backend::SimBackend;
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
