//! One budget for every file descriptor the message store holds, whatever the number of
//! queues: files are opened on demand and closed when the budget needs their descriptor.
//!
//! A [`FileBudget`] counts the store's open files and refuses to go past its limit (part
//! of the process's `RLIMIT_NOFILE`, split in `crate::limits::fds`). Every open of
//! the store — a segment, an ack log, a directory to sync, a temporary file — takes a
//! [`Permit`] first ([`crate::storage::BudgetedBackend`]) and gives it back when the file
//! is closed. When none is free, the budget *reclaims* one: it sweeps the stores that hold
//! cached handles ([`HandleCache`]) with the CLOCK algorithm (a store used since the last
//! sweep gets a second chance) and closes handles nobody is using. A handle written since
//! its last fsync is closed only after an fsync of its own (an *early sync*, counted), so
//! closing never drops the chance to make written data durable (after `close`, Linux may
//! report a writeback error to nobody). When every handle is in use (the flusher is
//! syncing it, a worker is reading it), the open waits for one, at most
//! [`FILE_WAIT_MS_MAX`], then fails with [`FilesExhausted`]: a typed error the broker
//! answers with a channel error, never a connection error.
//!
//! Like RabbitMQ 3.x's `file_handle_cache`, which multiplexed queue files over a fixed
//! number of descriptors so that 100,000 queues ran on an ordinary `ulimit -n`.
//! docs/storage.md, "Open files", has the numbers.

use crate::storage::handle_cache::HandleCache;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Longest an open waits for a descriptor of the budget when every one is in use, in ms.
/// Handles are pinned only for the length of one read, write or fsync, so a wait this
/// long means the budget is far too small for the work in flight.
pub const FILE_WAIT_MS_MAX: u64 = 2_000;

/// Pause between two attempts of a waiting open, in ms.
const FILE_WAIT_STEP_MS: u64 = 1;

pub use crate::limits::fds::STORE_FILES_MIN;

/// Stores one reclaim looks at, at most, before it gives up (a sweep stops as soon as it
/// freed a handle).
const RECLAIM_STORES_MAX: usize = 64;

/// The store's open files, their limit and what the budget did to stay under it.
#[derive(Debug)]
pub struct FileBudget {
    /// Most files open at once.
    limit: usize,
    /// Files open now (permits out).
    open: AtomicUsize,
    /// Most files ever open at once.
    peak: AtomicUsize,
    /// Handles closed to free a descriptor for another file.
    evictions: AtomicU64,
    /// Handles fsynced before the flusher's round so they could be closed.
    early_syncs: AtomicU64,
    /// Opens that had to wait for a handle to be released.
    waits: AtomicU64,
    /// Opens refused after [`FILE_WAIT_MS_MAX`].
    exhausted: AtomicU64,
    /// The stores holding cached handles, swept by [`FileBudget::reclaim`].
    holders: Mutex<Holders>,
}

/// The CLOCK's ring: stores that registered a cached handle, and the hand.
#[derive(Debug, Default)]
struct Holders {
    stores: Vec<Weak<HandleCache>>,
    hand: usize,
}

/// Counters of a [`FileBudget`], for `status` and the metrics endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileBudgetStats {
    /// Most files the store may hold open at once.
    pub limit: usize,
    /// Files open now.
    pub open: usize,
    /// Most files open at once since start.
    pub peak: usize,
    /// Handles closed to free a descriptor for another file.
    pub evictions: u64,
    /// Handles fsynced early so they could be closed.
    pub early_syncs: u64,
    /// Opens that waited for a handle to be released.
    pub waits: u64,
    /// Opens refused because every descriptor stayed in use for [`FILE_WAIT_MS_MAX`].
    pub exhausted: u64,
}

/// An open refused because the store's budget stayed full ([`FILE_WAIT_MS_MAX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesExhausted {
    /// The store's budget, in files.
    pub limit: usize,
}

impl fmt::Display for FilesExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "all {} file descriptors of the message store are in use (raise the open-files \
             limit: ulimit -n, LimitNOFILE)",
            self.limit
        )
    }
}

impl std::error::Error for FilesExhausted {}

/// Whether `e` says the process ran out of file descriptors: the store's budget
/// ([`FilesExhausted`]), or the OS's `EMFILE` / `ENFILE`.
pub fn is_out_of_files(e: &io::Error) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    matches!(e.raw_os_error(), Some(EMFILE | ENFILE))
        || e.get_ref()
            .is_some_and(|inner| inner.downcast_ref::<FilesExhausted>().is_some())
}

/// One descriptor of a [`FileBudget`], given back when dropped (with its file).
#[derive(Debug)]
pub struct Permit {
    budget: Arc<FileBudget>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.open.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FileBudget {
    /// A budget of `limit` files (at least 1).
    pub fn new(limit: usize) -> Arc<FileBudget> {
        Arc::new(FileBudget {
            limit: limit.max(1),
            open: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
            early_syncs: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            holders: Mutex::new(Holders::default()),
        })
    }

    /// Most files open at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Files open now.
    pub fn open_files(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Whether the next open would have to reclaim a handle first.
    pub fn is_full(&self) -> bool {
        self.open_files() >= self.limit
    }

    /// The counters.
    pub fn stats(&self) -> FileBudgetStats {
        FileBudgetStats {
            limit: self.limit,
            open: self.open_files(),
            peak: self.peak.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            early_syncs: self.early_syncs.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
        }
    }

    /// Takes one descriptor: at once while fewer than the limit are open; else after
    /// closing an unused handle of another store ([`FileBudget::reclaim`]); else after
    /// waiting for one to be released.
    ///
    /// # Errors
    /// [`FilesExhausted`] (as an `io::Error`, see [`is_out_of_files`]) when every
    /// descriptor stayed in use for [`FILE_WAIT_MS_MAX`].
    pub fn acquire(self: &Arc<Self>) -> io::Result<Permit> {
        let mut waiting_since: Option<Instant> = None;
        loop {
            if self.try_take() {
                return Ok(Permit {
                    budget: Arc::clone(self),
                });
            }
            if self.reclaim() > 0 {
                continue;
            }
            let since = *waiting_since.get_or_insert_with(|| {
                self.waits.fetch_add(1, Ordering::Relaxed);
                Instant::now()
            });
            if since.elapsed() >= Duration::from_millis(FILE_WAIT_MS_MAX) {
                self.exhausted.fetch_add(1, Ordering::Relaxed);
                log::warn!("{}", FilesExhausted { limit: self.limit });
                return Err(io::Error::other(FilesExhausted { limit: self.limit }));
            }
            std::thread::sleep(Duration::from_millis(FILE_WAIT_STEP_MS));
        }
    }

    /// One more open file if under the limit.
    fn try_take(&self) -> bool {
        let mut open = self.open.load(Ordering::Acquire);
        loop {
            if open >= self.limit {
                return false;
            }
            match self.open.compare_exchange_weak(
                open,
                open + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(open + 1, Ordering::Relaxed);
                    return true;
                }
                Err(now) => open = now,
            }
        }
    }

    /// Counts handles a store fsynced early itself to close them.
    pub(crate) fn note_early_syncs(&self, n: u64) {
        self.early_syncs.fetch_add(n, Ordering::Relaxed);
        self.evictions.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds a store that now holds cached handles to the CLOCK's ring (its
    /// [`HandleCache`] calls this once, until a sweep finds it empty).
    pub(crate) fn register(&self, cache: Weak<HandleCache>) {
        lock(&self.holders).stores.push(cache);
    }

    /// Closes unused handles of other stores to free descriptors; returns how many were
    /// closed. CLOCK: the hand walks the ring of stores holding handles; a store used
    /// since the hand last passed it is skipped once (its bit is cleared); the first
    /// other store found whose lock is free loses its unused handles that need no fsync.
    /// Stores whose unused handles all wait for an fsync are synced early, outside the
    /// ring's lock, when nothing else could be closed. A store whose lock is held (by the
    /// caller, or by a thread using it) is never waited for.
    pub fn reclaim(&self) -> usize {
        let mut freed = 0;
        let mut dirty: Vec<Arc<HandleCache>> = Vec::new();
        {
            let mut h = lock(&self.holders);
            let mut looked = 0;
            // Two turns of the ring at most: the first may only clear the bits.
            let turns = h.stores.len().saturating_mul(2);
            let mut steps = 0;
            while freed == 0 && steps < turns && looked < RECLAIM_STORES_MAX {
                steps += 1;
                if h.stores.is_empty() {
                    break;
                }
                if h.hand >= h.stores.len() {
                    h.hand = 0;
                }
                let at = h.hand;
                let Some(cache) = h.stores[at].upgrade() else {
                    h.stores.swap_remove(at);
                    continue;
                };
                if cache.take_referenced() {
                    h.hand += 1;
                    continue;
                }
                looked += 1;
                match cache.evict_unused(false) {
                    None => h.hand += 1,
                    Some(outcome) => {
                        freed += outcome.closed;
                        if outcome.now_empty {
                            h.stores.swap_remove(at);
                        } else {
                            h.hand += 1;
                            if outcome.need_sync > 0 {
                                dirty.push(cache);
                            }
                        }
                    }
                }
            }
        }
        for cache in dirty {
            if freed > 0 {
                break;
            }
            if let Some(outcome) = cache.evict_unused(true) {
                freed += outcome.closed;
                self.early_syncs
                    .fetch_add(outcome.synced as u64, Ordering::Relaxed);
            }
        }
        self.evictions.fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_count_up_to_the_limit_and_come_back_when_dropped() {
        let budget = FileBudget::new(2);
        let a = budget.acquire().unwrap();
        let b = budget.acquire().unwrap();
        assert!(budget.is_full());
        assert_eq!(budget.open_files(), 2);
        drop(a);
        assert_eq!(budget.open_files(), 1);
        let c = budget.acquire().unwrap();
        assert_eq!(budget.stats().peak, 2);
        drop((b, c));
        assert_eq!(budget.open_files(), 0);
    }

    #[test]
    fn a_full_budget_with_nothing_to_close_fails_typed_after_waiting() {
        let budget = FileBudget::new(1);
        let _held = budget.acquire().unwrap();
        let started = Instant::now();
        let e = budget.acquire().unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(FILE_WAIT_MS_MAX));
        assert!(is_out_of_files(&e), "{e}");
        assert!(e.to_string().contains("all 1 file descriptors"), "{e}");
        let s = budget.stats();
        assert_eq!((s.waits, s.exhausted), (1, 1));
    }

    #[test]
    fn a_permit_released_while_waiting_is_taken() {
        let budget = FileBudget::new(1);
        let held = budget.acquire().unwrap();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        let p = budget.acquire().expect("the released permit");
        releaser.join().unwrap();
        assert_eq!(budget.stats().waits, 1);
        drop(p);
    }

    #[test]
    fn emfile_and_enfile_are_out_of_files() {
        assert!(is_out_of_files(&io::Error::from_raw_os_error(24)));
        assert!(is_out_of_files(&io::Error::from_raw_os_error(23)));
        assert!(!is_out_of_files(&io::Error::from_raw_os_error(2)));
        assert!(!is_out_of_files(&io::Error::other("x")));
    }
}
