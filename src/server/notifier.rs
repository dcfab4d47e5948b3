//! Wakes the I/O thread for connections that need it (new outbound bytes, reading to
//! resume, a close to carry out), coalescing wake-ups: one `mio::Waker` call per batch,
//! not per message (docs/architecture.md §2).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A list of connection ids for the I/O thread to look at, plus its waker.
pub struct Notifier {
    ids: Mutex<Vec<u64>>,
    woken: AtomicBool,
    waker: mio::Waker,
}

impl Notifier {
    /// A notifier that wakes `waker`'s poll.
    pub fn new(waker: mio::Waker) -> Notifier {
        Notifier {
            ids: Mutex::new(Vec::new()),
            woken: AtomicBool::new(false),
            waker,
        }
    }

    /// Asks the I/O thread to look at connection `id`; wakes it unless a wake-up is
    /// already pending.
    pub fn mark(&self, id: u64) {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        self.wake();
    }

    /// Wakes the I/O thread unless a wake-up is already pending.
    pub fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.waker.wake() {
                log::error!("cannot wake the I/O thread: {e}");
            }
        }
    }

    /// Takes the ids marked since the last call (I/O thread only). Clears the pending
    /// wake-up first, so a mark racing with this call wakes the thread again.
    pub fn take(&self, into: &mut Vec<u64>) {
        self.woken.store(false, Ordering::Release);
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut *ids, into);
    }
}
