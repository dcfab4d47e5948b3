//! Background compaction: a thread that compacts queue stores whose sealed segments are
//! mostly settled, off the publish and ack paths (compaction copies records and fsyncs;
//! it holds only the store's lock, never a queue's).

use crate::storage::QueueStore;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::sync::{Arc, Mutex};

/// Stores waiting for the compactor at most; a store found full is simply not queued now
/// (it is offered again after more settlements).
const COMPACTION_QUEUE_MAX: usize = 1024;

type Job = (String, Arc<Mutex<QueueStore>>);

/// A handle to the compactor thread.
#[derive(Clone, Debug)]
pub struct Compactor {
    jobs: Sender<Job>,
}

impl Compactor {
    /// Starts the compactor thread; it stops when every handle is dropped.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start() -> std::io::Result<Compactor> {
        let (jobs, rx) = crossbeam_channel::bounded(COMPACTION_QUEUE_MAX);
        std::thread::Builder::new()
            .name("relaymq-compactor".into())
            .spawn(move || run(rx))?;
        Ok(Compactor { jobs })
    }

    /// Asks for `store` (of queue `name`) to be compacted.
    pub fn schedule(&self, name: &str, store: &Arc<Mutex<QueueStore>>) {
        match self.jobs.try_send((name.to_string(), Arc::clone(store))) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn run(jobs: Receiver<Job>) {
    while let Ok((name, store)) = jobs.recv() {
        let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
        if !store.needs_compaction() {
            continue;
        }
        match store.compact() {
            Ok(bytes) => log::info!("queue '{name}': compaction reclaimed {bytes} bytes"),
            Err(e) => log::error!("queue '{name}': compaction failed, store out of service: {e}"),
        }
    }
}
