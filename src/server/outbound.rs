//! A connection's outbound buffer: workers append encoded frames, the I/O thread writes
//! them to the socket.
//!
//! The I/O thread swaps the whole buffer out under the lock and writes it without the
//! lock, so appenders never wait on a socket. `queued` counts bytes appended and not yet
//! written (in the buffer or in the I/O thread's hands); deliveries stop above
//! [`OUTBOUND_HIGH_WATER_BYTES`], and a connection whose backlog reaches
//! [`OUTBOUND_HARD_CAP_BYTES`] is disconnected (ARCHITECTURE.md §3).

use crate::limits::{OUTBOUND_HARD_CAP_BYTES, OUTBOUND_HIGH_WATER_BYTES, OUTBOUND_LOW_WATER_BYTES};
use crate::server::notifier::Notifier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The outbound side of one connection.
pub struct Outbound {
    id: u64,
    /// Backlog at which the connection is disconnected, bytes.
    hard_cap: usize,
    buf: Mutex<Vec<u8>>,
    queued: AtomicUsize,
    /// The id is on the notifier's list (avoids listing it once per append).
    dirty: AtomicBool,
    /// A delivery was held back for saturation: report the drain.
    throttled: AtomicBool,
    /// The hard cap was reached; appends are dropped and the connection is closed.
    overflowed: AtomicBool,
    /// Close the socket once everything appended so far is written.
    close_after_flush: AtomicBool,
    notifier: Arc<Notifier>,
}

impl Outbound {
    /// An empty outbound buffer for connection `id`. The hard cap is
    /// [`OUTBOUND_HARD_CAP_BYTES`], raised when needed so that several deliveries of the
    /// largest allowed message (`message_bytes_max`) always fit.
    pub fn new(id: u64, notifier: Arc<Notifier>, message_bytes_max: usize) -> Outbound {
        Outbound {
            id,
            hard_cap: OUTBOUND_HARD_CAP_BYTES
                .max(message_bytes_max.saturating_mul(4) + OUTBOUND_HIGH_WATER_BYTES),
            buf: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            dirty: AtomicBool::new(false),
            throttled: AtomicBool::new(false),
            overflowed: AtomicBool::new(false),
            close_after_flush: AtomicBool::new(false),
            notifier,
        }
    }

    /// Appends bytes produced by `encode` and wakes the I/O thread if needed. Dropped when
    /// the connection is closing or over its hard cap.
    pub fn write_with(&self, encode: impl FnOnce(&mut Vec<u8>)) {
        if self.overflowed.load(Ordering::Relaxed) || self.close_after_flush.load(Ordering::Relaxed)
        {
            return;
        }
        {
            let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
            let before = buf.len();
            encode(&mut buf);
            let added = buf.len() - before;
            let queued = self.queued.fetch_add(added, Ordering::AcqRel) + added;
            if queued > self.hard_cap {
                buf.truncate(before);
                self.queued.fetch_sub(added, Ordering::AcqRel);
                self.overflowed.store(true, Ordering::Release);
                drop(buf);
                // Not through `dirty`: it may stay set while a write is stuck.
                self.notifier.mark(self.id);
                return;
            }
        }
        self.mark();
    }

    fn mark(&self) {
        if !self.dirty.swap(true, Ordering::AcqRel) {
            self.notifier.mark(self.id);
        }
    }

    /// Swaps the pending bytes into `into` (which must be empty); I/O thread only.
    pub fn take(&self, into: &mut Vec<u8>) {
        self.dirty.store(false, Ordering::Release);
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut *buf, into);
    }

    /// Records `n` bytes written to the socket. Returns true when a throttled connection
    /// just fell below `low_water` bytes (its consumers must be dispatched again).
    pub fn wrote(&self, n: usize, low_water: usize) -> bool {
        let left = self.queued.fetch_sub(n, Ordering::SeqCst) - n;
        left < low_water && self.throttled.swap(false, Ordering::SeqCst)
    }

    /// Bytes appended and not yet written.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Whether deliveries must wait: the backlog reached the high-water mark and has not
    /// yet drained below the low-water mark (hysteresis, so a consumer near the mark does
    /// not flap). When true the drain will be reported by [`Outbound::wrote`].
    pub fn is_saturated(&self) -> bool {
        if self.throttled.load(Ordering::SeqCst) {
            return true;
        }
        if self.queued.load(Ordering::SeqCst) < OUTBOUND_HIGH_WATER_BYTES {
            return false;
        }
        self.throttled.store(true, Ordering::SeqCst);
        // The I/O thread may have drained below the low-water mark between the read above
        // and the store, without seeing the flag: then no drain would ever be reported.
        if self.queued.load(Ordering::SeqCst) < OUTBOUND_LOW_WATER_BYTES
            && self.throttled.swap(false, Ordering::SeqCst)
        {
            return false;
        }
        true
    }

    /// Whether the hard cap was reached.
    pub fn is_overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    /// Asks the I/O thread to close the connection once what is queued is written.
    pub fn close_after_flush(&self) {
        self.close_after_flush.store(true, Ordering::Release);
        self.notifier.mark(self.id);
    }

    /// Whether a close after flush was asked for.
    pub fn is_closing(&self) -> bool {
        self.close_after_flush.load(Ordering::Acquire)
    }
}
