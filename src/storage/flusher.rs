//! Group commit: one thread fsyncs every file written since its last round, once, and
//! then releases the publisher confirms that waited for it (ARCHITECTURE.md §2.4).
//!
//! Writers append records without syncing and [`Flusher::submit`] the files they touched;
//! the call returns the *epoch* whose sync will cover those bytes. The flusher takes the
//! whole batch at once, so one fsync per file serves every publisher that wrote to it since
//! the previous round. Waiters ([`SyncWaiter`]) are told when their epoch is durable, or
//! that it failed. A failed fsync is never retried as if the data were safe: the epoch is
//! reported failed and the owners of the files are marked out of service.

use crate::storage::StorageFile;
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// A file to sync and the flag of the store that owns it (set when its sync fails).
struct Dirty {
    file: Arc<dyn StorageFile>,
    owner_failed: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    dirty: Vec<Dirty>,
    /// Addresses of the files in `dirty`, so a submit checks membership in O(1) (a
    /// fanout to many stored queues submits many files per round).
    dirty_files: HashSet<usize>,
    /// Epoch that new submissions belong to.
    write_epoch: u64,
    /// Highest epoch known durable.
    synced_epoch: u64,
    waiters: Vec<Arc<dyn SyncWaiter>>,
    stop: bool,
}

struct Inner {
    mode: FsyncMode,
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
    /// Starts the flusher thread.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(mode: FsyncMode) -> io::Result<Flusher> {
        let inner = Arc::new(Inner {
            mode,
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

    /// Registers files written by a store whose failure flag is `owner_failed`; returns
    /// the epoch that must be durable before a confirm of those writes may be sent, or
    /// `None` when confirms need not wait (modes `interval` and `never`).
    pub fn submit(
        &self,
        files: Vec<Arc<dyn StorageFile>>,
        owner_failed: &Arc<AtomicBool>,
    ) -> Option<u64> {
        if self.inner.mode == FsyncMode::Never || files.is_empty() {
            return None;
        }
        let mut st = self.inner.lock();
        for file in files {
            if st.dirty_files.insert(file_key(&file)) {
                st.dirty.push(Dirty {
                    file,
                    owner_failed: Arc::clone(owner_failed),
                });
            }
        }
        let epoch = st.write_epoch;
        drop(st);
        match self.inner.mode {
            FsyncMode::Always => {
                self.inner.wake.notify_one();
                Some(epoch)
            }
            _ => None,
        }
    }

    /// Asks to be told once `epoch` is durable (at once if it already is).
    pub fn wait(&self, epoch: u64, waiter: Arc<dyn SyncWaiter>) {
        let mut st = self.inner.lock();
        if st.synced_epoch >= epoch {
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
        drop(st);
        self.inner.wake.notify_one();
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

/// Identity of a file handle: the address of its shared allocation.
fn file_key(file: &Arc<dyn StorageFile>) -> usize {
    Arc::as_ptr(file) as *const () as usize
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
                _ => {
                    while !st.stop && st.dirty.is_empty() {
                        st = inner.wake.wait(st).unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
            let epoch = st.write_epoch;
            st.write_epoch += 1;
            st.dirty_files.clear();
            (std::mem::take(&mut st.dirty), epoch, st.stop)
        };
        let mut failed = false;
        for d in &batch {
            if let Err(e) = d.file.sync() {
                log::error!(
                    "fsync of {} failed: {e}; its queue is taken out of service and pending confirms are nacked",
                    d.file.path().display()
                );
                d.owner_failed.store(true, Ordering::Release);
                failed = true;
            }
        }
        let (waiters, synced) = {
            let mut st = inner.lock();
            if !failed {
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
