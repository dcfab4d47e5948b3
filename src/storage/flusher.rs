//! Group commit: one thread fsyncs every file written since its last round, once, and
//! then releases the publisher confirms that waited for it (docs/architecture.md §14).
//!
//! Writers append records without syncing (a buffering store keeps them in memory) and
//! [`Flusher::submit`] the [`SyncSource`] they wrote to; the call returns the *epoch* whose
//! sync will cover those bytes. The flusher takes the whole batch at once, has each source
//! write what it buffers (one `write` per file) and fsyncs each file once, so one round
//! serves every publisher that wrote since the previous one. Waiters ([`SyncWaiter`]) are told when their epoch is durable, or
//! that it failed. A failed fsync is never retried as if the data were safe: the epoch is
//! reported failed and the owners of the files are marked out of service.

use crate::metrics::Histogram;
use crate::storage::{FileBudget, StorageFile};
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long entries submitted without a waiter (deliveries and settlements in ack logs)
/// may wait in memory for a round, in ms, when no publish asks for one sooner.
pub const LAZY_WRITE_DELAY_MS: u64 = 10;

/// A round syncs what it wrote once it holds this fraction of the file budget (1/4).
const SYNC_CHUNK_BUDGET_DIVISOR: usize = 4;

/// Failed epochs remembered, so a waiter that registers after its round failed is nacked
/// rather than left waiting or acked by a later round (failures are rare; the oldest is
/// forgotten first).
const FAILED_EPOCHS_KEPT: usize = 1024;

/// When the broker fsyncs persistent messages (`--fsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncMode {
    /// Confirm only after the records are fsynced (default).
    Always,
    /// Confirm after the write; fsync every interval.
    Interval(Duration),
    /// Never fsync (tests; data survives a process crash, not a power loss).
    Never,
}

impl std::fmt::Display for FsyncMode {
    /// The `--fsync` spelling: `always`, `interval:MS`, `never` ([`FsyncMode::parse`]
    /// reads it back).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsyncMode::Always => f.write_str("always"),
            FsyncMode::Interval(d) => write!(f, "interval:{}", d.as_millis()),
            FsyncMode::Never => f.write_str("never"),
        }
    }
}

impl FsyncMode {
    /// Parses `always`, `never` or `interval:MS`.
    ///
    /// # Errors
    /// A message naming the accepted forms.
    pub fn parse(s: &str) -> Result<FsyncMode, String> {
        match s {
            "always" => Ok(FsyncMode::Always),
            "never" => Ok(FsyncMode::Never),
            _ => match s.strip_prefix("interval:").map(str::parse::<u64>) {
                Some(Ok(ms)) if ms > 0 => Ok(FsyncMode::Interval(Duration::from_millis(ms))),
                _ => Err(format!(
                    "'{s}' is not an fsync mode: use always, never or interval:MS (MS > 0)"
                )),
            },
        }
    }
}

/// Told when the epochs it waits for are durable (or failed).
pub trait SyncWaiter: Send + Sync {
    /// Every epoch up to and including `synced` is durable. Returns true while the waiter
    /// still waits for a later epoch (it stays registered).
    fn synced(&self, synced: u64) -> bool;
    /// The sync of `epoch` failed; data written in it is not known to be safe. Returns
    /// true while the waiter still waits for a later epoch.
    fn failed(&self, epoch: u64) -> bool;
}

/// Something the flusher writes out and syncs: a queue's store.
pub trait SyncSource: Send + Sync {
    /// Writes what the source buffers and returns the files written since the previous
    /// call, to be synced (called by the flusher thread, with no lock of its own held).
    ///
    /// # Errors
    /// A text saying why the write failed; the round's waiters are then nacked.
    fn take_files(&self) -> Result<Vec<Arc<dyn StorageFile>>, String>;
    /// A write or a sync of the source failed: it goes out of service.
    fn mark_failed(&self);
    /// Set while the source is in the flusher's batch (cleared when a round takes it), so
    /// a submission without a waiter skips the flusher's lock.
    fn queued(&self) -> &AtomicBool;
}

#[derive(Default)]
struct State {
    dirty: Vec<Arc<dyn SyncSource>>,
    /// Addresses of the sources in `dirty`, so a submit checks membership in O(1) (a
    /// fanout to many stored queues submits many sources per round).
    dirty_files: HashSet<usize>,
    /// A submission waits for the next round: run it now (else after
    /// [`LAZY_WRITE_DELAY_MS`]).
    urgent: bool,
    /// The thread waits on the condvar (a submission only wakes it then).
    sleeping: bool,
    /// Epoch that new submissions belong to.
    write_epoch: u64,
    /// Highest epoch known durable.
    synced_epoch: u64,
    /// Epochs whose round failed, most recent last (at most [`FAILED_EPOCHS_KEPT`]).
    failed_epochs: std::collections::VecDeque<u64>,
    waiters: Vec<Arc<dyn SyncWaiter>>,
    stop: bool,
}

struct Inner {
    mode: FsyncMode,
    /// Files a round holds (written, not yet synced) before it syncs them and goes on
    /// with the next stores: a quarter of the store's file budget, so the round never
    /// holds the descriptors the stores it writes next need (unbounded without a budget).
    sync_chunk_files: usize,
    /// Time each fsync of a segment or ack-log file took (metrics).
    fsync_seconds: Histogram,
    state: Mutex<State>,
    wake: Condvar,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The group-commit thread and its queue.
pub struct Flusher {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Flusher {
    /// Starts the flusher thread; `budget` is the store's file budget, if any (a round
    /// then syncs in chunks of a quarter of it).
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(mode: FsyncMode, budget: Option<&FileBudget>) -> io::Result<Flusher> {
        let inner = Arc::new(Inner {
            mode,
            sync_chunk_files: budget.map_or(usize::MAX, |b| {
                (b.limit() / SYNC_CHUNK_BUDGET_DIVISOR).max(1)
            }),
            fsync_seconds: Histogram::new(),
            state: Mutex::new(State {
                write_epoch: 1,
                ..State::default()
            }),
            wake: Condvar::new(),
        });
        let worker = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("relaymq-flusher".into())
            .spawn(move || run(&worker))?;
        Ok(Flusher {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The fsync mode.
    pub fn mode(&self) -> FsyncMode {
        self.inner.mode
    }

    /// Latency of every fsync of a segment or ack-log file this flusher made, in
    /// seconds (failed ones included), for the metrics endpoint.
    pub fn fsync_seconds(&self) -> &Histogram {
        &self.inner.fsync_seconds
    }

    /// Registers a source written to; returns the epoch that must be durable before a
    /// confirm of those writes may be sent, or `None` when confirms need not wait (modes
    /// `interval` and `never`, or `urgent` false). `urgent` (a publish) starts a round at
    /// once; otherwise (ack-log entries) the next round takes it, within
    /// [`LAZY_WRITE_DELAY_MS`].
    pub fn submit(&self, source: &Arc<dyn SyncSource>, urgent: bool) -> Option<u64> {
        if self.inner.mode == FsyncMode::Never
            || (!urgent && source.queued().load(Ordering::Acquire))
        {
            return None;
        }
        let mut st = self.inner.lock();
        if st.dirty_files.insert(source_key(source)) {
            source.queued().store(true, Ordering::Release);
            st.dirty.push(Arc::clone(source));
        }
        let epoch = st.write_epoch;
        let always = self.inner.mode == FsyncMode::Always;
        let wake = always && st.sleeping && (urgent || st.dirty.len() == 1);
        if always && urgent {
            st.urgent = true;
        }
        drop(st);
        if wake {
            self.inner.wake.notify_one();
        }
        (always && urgent).then_some(epoch)
    }

    /// Asks to be told once `epoch` is durable (at once if it already is).
    pub fn wait(&self, epoch: u64, waiter: Arc<dyn SyncWaiter>) {
        let mut st = self.inner.lock();
        if st.failed_epochs.contains(&epoch) {
            drop(st);
            if !waiter.failed(epoch) {
                return;
            }
            st = self.inner.lock();
        } else if st.synced_epoch >= epoch {
            let synced = st.synced_epoch;
            drop(st);
            if !waiter.synced(synced) {
                return;
            }
            st = self.inner.lock();
        }
        if !st.waiters.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
            st.waiters.push(waiter);
        }
        let wake = st.sleeping;
        drop(st);
        if wake {
            self.inner.wake.notify_one();
        }
    }

    /// Syncs what is pending and stops the thread (clean shutdown).
    pub fn shutdown(&self) {
        self.inner.lock().stop = true;
        self.inner.wake.notify_all();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Identity of a source: the address of its shared allocation.
fn source_key(source: &Arc<dyn SyncSource>) -> usize {
    Arc::as_ptr(source) as *const () as usize
}

/// Waits (mode `always`) until a round is due: a submission asked for one, or lazily
/// submitted entries waited [`LAZY_WRITE_DELAY_MS`], or the flusher stops.
fn wait_for_round<'a>(inner: &'a Inner, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    let lazy = Duration::from_millis(LAZY_WRITE_DELAY_MS);
    while !st.stop && !st.urgent {
        st.sleeping = true;
        if st.dirty.is_empty() {
            st = inner.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            st.sleeping = false;
            continue;
        }
        let (g, timeout) = inner
            .wake
            .wait_timeout(st, lazy)
            .unwrap_or_else(|e| e.into_inner());
        st = g;
        st.sleeping = false;
        if timeout.timed_out() {
            break;
        }
    }
    st.sleeping = false;
    st
}

fn run(inner: &Inner) {
    loop {
        let (batch, epoch, stop) = {
            let mut st = inner.lock();
            match inner.mode {
                // One tick, then sync whatever is dirty (a wake-up only ends a tick early).
                FsyncMode::Interval(tick) if !st.stop => {
                    st = inner
                        .wake
                        .wait_timeout(st, tick)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                _ => st = wait_for_round(inner, st),
            }
            let epoch = st.write_epoch;
            st.write_epoch += 1;
            st.urgent = false;
            st.dirty_files.clear();
            let batch = std::mem::take(&mut st.dirty);
            for source in &batch {
                source.queued().store(false, Ordering::Release);
            }
            (batch, epoch, st.stop)
        };
        let mut failed = false;
        // Every source writes first, then every file is synced: the writes of one store
        // overlap nothing, but the syncs come after all of them. Under a file budget the
        // files are synced by chunks, so the round never holds the descriptors the next
        // stores need to write.
        let mut files = Vec::with_capacity(batch.len() * 2);
        for source in &batch {
            match source.take_files() {
                Ok(written) => files.extend(written.into_iter().map(|f| (f, source))),
                Err(e) => {
                    log::error!(
                        "write failed: {e}; its queue is taken out of service and pending confirms are nacked"
                    );
                    source.mark_failed();
                    failed = true;
                }
            }
            if files.len() >= inner.sync_chunk_files {
                failed |= sync_files(inner, &mut files);
            }
        }
        failed |= sync_files(inner, &mut files);
        let (waiters, synced) = {
            let mut st = inner.lock();
            if failed {
                if st.failed_epochs.len() >= FAILED_EPOCHS_KEPT {
                    st.failed_epochs.pop_front();
                }
                st.failed_epochs.push_back(epoch);
            } else {
                st.synced_epoch = st.synced_epoch.max(epoch);
            }
            (std::mem::take(&mut st.waiters), st.synced_epoch)
        };
        // Waiters are called without the lock: they push confirms to client buffers.
        let still: Vec<Arc<dyn SyncWaiter>> = waiters
            .into_iter()
            .filter(|w| {
                if failed {
                    w.failed(epoch)
                } else {
                    w.synced(synced)
                }
            })
            .collect();
        if !still.is_empty() {
            inner.lock().waiters.extend(still);
        }
        if stop {
            return;
        }
    }
}

/// A file a round wrote, with the source it belongs to.
type Written<'a> = (Arc<dyn StorageFile>, &'a Arc<dyn SyncSource>);

/// Syncs `files` and empties the list (dropping the handles); true when a sync failed
/// (its source is marked out of service).
fn sync_files(inner: &Inner, files: &mut Vec<Written<'_>>) -> bool {
    let mut failed = false;
    for (file, source) in files.drain(..) {
        let started = std::time::Instant::now();
        let synced = file.sync();
        inner.fsync_seconds.observe(started.elapsed());
        if let Err(e) = synced {
            log::error!(
                "fsync of {} failed: {e}; its queue is taken out of service and pending confirms are nacked",
                file.path().display()
            );
            source.mark_failed();
            failed = true;
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_mode_prints_as_its_flag_spelling_and_parses_back() {
        for text in ["always", "never", "interval:250"] {
            let mode = FsyncMode::parse(text).unwrap();
            assert_eq!(mode.to_string(), text);
        }
    }
}
