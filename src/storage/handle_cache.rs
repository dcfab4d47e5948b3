//! The open files of one queue's store: opened on demand, kept while they are used, and
//! closed when the store has too many or another store needs the descriptor
//! ([`crate::storage::file_budget`]).
//!
//! A handle is *in use* while someone holds a clone of it (a write or read in progress,
//! the flusher syncing it): those are never closed. A handle is *dirty* when the store
//! wrote to it since the flusher last took it ([`HandleCache::take_dirty`]): a dirty
//! handle is closed only after an fsync of its own, so a confirm the flusher sends later
//! never counts on a file that was closed unsynced. A failed early fsync is remembered and
//! makes the next [`HandleCache::take_dirty`] fail, so the flusher nacks what waited
//! (a failed fsync is never retried as if the data were safe).

use crate::storage::file_budget::FileBudget;
use crate::storage::StorageFile;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak};

/// Handles one store keeps open at most, in files (its active segment and ack log, plus
/// sealed segments being read); past it the store closes its least recently used unused
/// handle. One queue reading a deep backlog so cannot take the whole budget.
pub const STORE_FILES_PER_QUEUE_MAX: usize = 16;

/// Which file of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FilePart {
    /// `queue_data.N`, the records.
    Data,
    /// `queue_acks.N`, the ack log.
    Acks,
}

/// A file of a store: segment number and part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileKey {
    /// The segment number `N`.
    pub segment: u64,
    /// Which of its two files.
    pub part: FilePart,
}

/// One open file of the cache.
struct Slot {
    key: FileKey,
    file: Arc<dyn StorageFile>,
    /// Written since the flusher last took it.
    dirty: bool,
    /// The cache's tick at its last use (least recently used first when evicting).
    used: u64,
}

/// The slots behind the cache's lock.
#[derive(Default)]
struct Slots {
    entries: Vec<Slot>,
    tick: u64,
    /// An early fsync failed: the store's data is not known to be safe.
    sync_failed: Option<String>,
}

/// What `HandleCache::evict_unused` (the CLOCK sweep) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvictOutcome {
    /// Handles closed.
    pub closed: usize,
    /// Of those, fsynced first (early syncs).
    pub synced: usize,
    /// Unused handles left open because they wait for an fsync.
    pub need_sync: usize,
    /// The cache holds no handle any more (it left the budget's ring).
    pub now_empty: bool,
}

/// The open files of one store.
pub struct HandleCache {
    slots: Mutex<Slots>,
    /// Used since the budget's CLOCK hand last passed (second chance).
    referenced: AtomicBool,
    /// In the budget's ring.
    registered: AtomicBool,
    /// The budget whose ring this cache joins when it holds a handle (`None`: unlimited).
    budget: Option<Arc<FileBudget>>,
    /// This cache, for registering with the budget.
    this: Weak<HandleCache>,
}

impl std::fmt::Debug for HandleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleCache")
            .field("open", &self.len())
            .finish()
    }
}

fn lock(m: &Mutex<Slots>) -> MutexGuard<'_, Slots> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether nobody but the cache holds the handle.
fn unused(slot: &Slot) -> bool {
    Arc::strong_count(&slot.file) == 1
}

impl HandleCache {
    /// An empty cache; it joins `budget`'s ring when it first holds a handle.
    pub fn new(budget: Option<Arc<FileBudget>>) -> Arc<HandleCache> {
        Arc::new_cyclic(|this| HandleCache {
            slots: Mutex::new(Slots::default()),
            referenced: AtomicBool::new(false),
            registered: AtomicBool::new(false),
            budget,
            this: this.clone(),
        })
    }

    /// The handle of `key`, opened with `open` when it is not open. Opening first closes
    /// this store's least recently used unused clean handle when the store holds
    /// [`STORE_FILES_PER_QUEUE_MAX`] or the budget is full.
    ///
    /// # Errors
    /// The error of `open` (out of descriptors: see
    /// [`crate::storage::file_budget::is_out_of_files`]).
    pub fn get(
        &self,
        key: FileKey,
        open: impl FnOnce() -> io::Result<Arc<dyn StorageFile>>,
    ) -> io::Result<Arc<dyn StorageFile>> {
        self.referenced.store(true, Ordering::Relaxed);
        let mut s = lock(&self.slots);
        s.tick += 1;
        let tick = s.tick;
        if let Some(slot) = s.entries.iter_mut().find(|e| e.key == key) {
            slot.used = tick;
            return Ok(Arc::clone(&slot.file));
        }
        let full = self.budget.as_ref().is_some_and(|b| b.is_full());
        if full || s.entries.len() >= STORE_FILES_PER_QUEUE_MAX {
            let closed = close_lru(&mut s, false);
            // Nothing clean to give back, and other stores may hold nothing either (a
            // budget smaller than what this store alone keeps open): sync one of ours.
            if !closed && full && close_lru(&mut s, true) {
                if let Some(b) = &self.budget {
                    b.note_early_syncs(1);
                }
            }
        }
        let file = open()?;
        self.add(&mut s, key, Arc::clone(&file), tick);
        Ok(file)
    }

    /// Puts a handle just opened (a new segment's files) into the cache, replacing any
    /// handle of `key`.
    pub fn insert(&self, key: FileKey, file: Arc<dyn StorageFile>) {
        self.referenced.store(true, Ordering::Relaxed);
        let mut s = lock(&self.slots);
        s.tick += 1;
        let tick = s.tick;
        s.entries.retain(|e| e.key != key);
        if s.entries.len() >= STORE_FILES_PER_QUEUE_MAX {
            close_lru(&mut s, false);
        }
        self.add(&mut s, key, file, tick);
    }

    fn add(&self, s: &mut Slots, key: FileKey, file: Arc<dyn StorageFile>, tick: u64) {
        s.entries.push(Slot {
            key,
            file,
            dirty: false,
            used: tick,
        });
        if let Some(budget) = &self.budget {
            if !self.registered.swap(true, Ordering::AcqRel) {
                budget.register(self.this.clone());
            }
        }
    }

    /// Notes that `key` was written (the flusher must sync it before it is closed).
    /// Call while still holding the handle [`HandleCache::get`] returned.
    pub fn mark_dirty(&self, key: FileKey) {
        if let Some(slot) = lock(&self.slots).entries.iter_mut().find(|e| e.key == key) {
            slot.dirty = true;
        }
    }

    /// The handles written since the previous call, for the flusher (they stay open and
    /// in use until it drops them).
    ///
    /// # Errors
    /// An early fsync of one of them failed: what was written is not known to be safe.
    pub fn take_dirty(&self) -> Result<Vec<Arc<dyn StorageFile>>, String> {
        let mut s = lock(&self.slots);
        if let Some(why) = &s.sync_failed {
            return Err(why.clone());
        }
        Ok(s.entries
            .iter_mut()
            .filter_map(|e| std::mem::take(&mut e.dirty).then(|| Arc::clone(&e.file)))
            .collect())
    }

    /// Drops the handle of `key` (its file was removed or replaced), dirty or not.
    pub fn forget(&self, key: FileKey) {
        lock(&self.slots).entries.retain(|e| e.key != key);
    }

    /// Handles open now.
    pub fn len(&self) -> usize {
        lock(&self.slots).entries.len()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads and clears the CLOCK bit (the budget's sweep).
    pub(crate) fn take_referenced(&self) -> bool {
        self.referenced.swap(false, Ordering::Relaxed)
    }

    /// Closes every unused handle that needs no fsync; with `sync`, also the unused dirty
    /// ones, each after an fsync of its own. `None` when the cache is locked (its store
    /// is being used: never waited for, which would risk a deadlock).
    pub(crate) fn evict_unused(&self, sync: bool) -> Option<EvictOutcome> {
        let mut s = match self.slots.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let mut outcome = EvictOutcome::default();
        let mut i = 0;
        while i < s.entries.len() {
            let slot = &s.entries[i];
            if !unused(slot) || (slot.dirty && s.sync_failed.is_some()) {
                i += 1;
                continue;
            }
            if slot.dirty {
                if !sync {
                    outcome.need_sync += 1;
                    i += 1;
                    continue;
                }
                if let Err(e) = slot.file.sync() {
                    let why = format!("early fsync of {} failed: {e}", slot.file.path().display());
                    log::error!("{why}; its queue is taken out of service");
                    s.sync_failed = Some(why);
                    i += 1;
                    continue;
                }
                outcome.synced += 1;
            }
            s.entries.swap_remove(i);
            outcome.closed += 1;
        }
        outcome.now_empty = s.entries.is_empty();
        if outcome.now_empty {
            // Under the lock: a handle added later registers the cache again.
            self.registered.store(false, Ordering::Release);
        }
        Some(outcome)
    }
}

/// Closes the least recently used unused handle that needs no fsync; with `sync`, the
/// least recently used unused dirty one, after an fsync of its own (a failed fsync is
/// remembered, see [`HandleCache::take_dirty`], and the handle stays). Returns whether a
/// handle was closed.
fn close_lru(s: &mut Slots, sync: bool) -> bool {
    if sync && s.sync_failed.is_some() {
        return false;
    }
    let victim = s
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| unused(e) && e.dirty == sync)
        .min_by_key(|(_, e)| e.used)
        .map(|(i, _)| i);
    let Some(i) = victim else {
        return false;
    };
    if sync {
        let file = &s.entries[i].file;
        if let Err(e) = file.sync() {
            let why = format!("early fsync of {} failed: {e}", file.path().display());
            log::error!("{why}; its queue is taken out of service");
            s.sync_failed = Some(why);
            return false;
        }
    }
    s.entries.swap_remove(i);
    true
}

#[cfg(test)]
mod tests {
    use crate::storage::{
        Backend, BudgetedBackend, FileBudget, MessageData, OsBackend, QueueStore, SimBackend,
        StoreConfig,
    };
    use crate::types::BasicProperties;
    use std::path::PathBuf;
    use std::sync::Arc;

    fn message<'a>(props: &'a BasicProperties, body: &'a [u8]) -> MessageData<'a> {
        MessageData {
            timestamp_ms: 1,
            exchange: "",
            routing_key: "q",
            properties: props,
            body,
        }
    }

    fn config() -> StoreConfig {
        StoreConfig {
            segment_bytes: 4096,
        }
    }

    /// Forty stores on real files share eight descriptors: each appends, syncs, settles
    /// and reads back across several segments; never more than eight files are open,
    /// handles are closed and reopened all the time, and every message is intact after a
    /// reopen.
    #[test]
    fn many_stores_share_a_small_budget_of_real_files() {
        let dir = tempfile::tempdir().unwrap();
        let budget = FileBudget::new(8);
        let backend: Arc<dyn Backend> = Arc::new(BudgetedBackend::new(
            Arc::new(OsBackend),
            Arc::clone(&budget),
        ));
        let props = BasicProperties::default();
        let mut stores: Vec<QueueStore> = (0..40)
            .map(|i| {
                QueueStore::open(
                    Arc::clone(&backend),
                    dir.path().join(format!("q{i}")),
                    config(),
                )
                .unwrap()
                .0
            })
            .collect();
        let mut kept: Vec<Vec<(crate::storage::RecordRef, Vec<u8>)>> = vec![Vec::new(); 40];
        for round in 0..30u32 {
            for (i, store) in stores.iter_mut().enumerate() {
                let body = vec![b'a' + (i % 26) as u8; 200 + round as usize];
                let r = store.append(&message(&props, &body)).unwrap();
                if round % 3 == 0 {
                    store.settle(r).unwrap();
                } else {
                    kept[i].push((r, body));
                }
                if round % 5 == 4 {
                    for f in store.files_to_sync().unwrap() {
                        f.sync().unwrap();
                    }
                }
                // A paged-out body read back from an older segment.
                if let Some((r, body)) = kept[i].first() {
                    assert_eq!(&store.read(*r).unwrap().body, body);
                }
                assert!(budget.open_files() <= 8);
            }
        }
        let stats = budget.stats();
        assert!(stats.peak <= 8, "{stats:?}");
        assert!(stats.evictions > 100, "{stats:?}");
        assert!(stats.early_syncs > 0, "{stats:?}");
        assert!(stores
            .iter()
            .all(|s| s.open_files() <= super::STORE_FILES_PER_QUEUE_MAX));
        drop(stores);
        assert_eq!(budget.open_files(), 0, "every handle gave its permit back");
        for (i, want) in kept.iter().enumerate() {
            let (_, got, _) = QueueStore::open(
                Arc::clone(&backend),
                dir.path().join(format!("q{i}")),
                config(),
            )
            .unwrap();
            let got: Vec<_> = got.into_iter().map(|m| (m.record, m.body)).collect();
            assert_eq!(&got, want, "store {i}");
        }
    }

    /// A store file whose fsync fails (the disk is gone), for the early-sync tests.
    #[derive(Debug)]
    struct FailingFile(PathBuf);

    impl crate::storage::StorageFile for FailingFile {
        fn append(&self, buf: &[u8]) -> std::io::Result<u64> {
            Ok(buf.len() as u64)
        }
        fn read_at(&self, _: u64, _: &mut [u8]) -> std::io::Result<()> {
            Ok(())
        }
        fn len(&self) -> std::io::Result<u64> {
            Ok(0)
        }
        fn sync(&self) -> std::io::Result<()> {
            Err(std::io::Error::other("the disk is gone"))
        }
        fn truncate(&self, _: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }

    /// An early fsync that fails keeps the handle open, counts nothing as freed, and
    /// makes the store's next `take_dirty` fail, so the flusher nacks instead of
    /// confirming data that is not known to be safe (a failed fsync is never retried as
    /// if the data were safe).
    #[test]
    fn a_failed_early_fsync_keeps_the_handle_and_fails_the_next_round() {
        use super::{FileKey, FilePart, HandleCache};
        let budget = FileBudget::new(1);
        let cache = HandleCache::new(Some(Arc::clone(&budget)));
        let key = FileKey {
            segment: 1,
            part: FilePart::Data,
        };
        let file: Arc<dyn crate::storage::StorageFile> =
            Arc::new(FailingFile(PathBuf::from("/q/queue_data.1")));
        cache.insert(key, file);
        cache.mark_dirty(key);
        // The budget's sweep (the CLOCK passes twice: the first pass clears the bit).
        assert_eq!(budget.reclaim(), 0, "nothing could be closed");
        assert_eq!(cache.len(), 1, "a handle whose fsync failed stays open");
        let e = cache.take_dirty().unwrap_err();
        assert!(
            e.contains("early fsync") && e.contains("the disk is gone"),
            "{e}"
        );
        assert_eq!(budget.stats().early_syncs, 0);
    }

    /// The same through the budget with a clean and a dirty handle: the clean one is
    /// closed first, the dirty one after a successful early fsync, which the next round
    /// then does not see (its data is durable already).
    #[test]
    fn clean_handles_go_first_and_dirty_ones_after_an_early_fsync() {
        let sim = SimBackend::new();
        let budget = FileBudget::new(16);
        let backend: Arc<dyn Backend> = Arc::new(BudgetedBackend::new(
            Arc::new(sim.clone()),
            Arc::clone(&budget),
        ));
        let props = BasicProperties::default();
        let (mut a, _, _) =
            QueueStore::open(Arc::clone(&backend), PathBuf::from("/q/a"), config()).unwrap();
        a.append(&message(&props, b"dirty")).unwrap();
        assert_eq!(a.open_files(), 2, "segment and ack log");
        // Twice round the CLOCK: the clean ack log goes at the first reclaim with
        // nothing else to close, the dirty segment only after an fsync.
        assert_eq!(budget.reclaim(), 1);
        assert_eq!((a.open_files(), budget.stats().early_syncs), (1, 0));
        assert_eq!(budget.reclaim(), 1);
        assert_eq!((a.open_files(), budget.stats().early_syncs), (0, 1));
        assert!(a.files_to_sync().unwrap().is_empty(), "synced already");
        assert_eq!(budget.open_files(), 0);
    }
}
