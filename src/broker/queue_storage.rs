//! The message store of one durable queue as the queue uses it: append persistent
//! messages, record deliveries and settlements, hand written files to the group-commit
//! flusher, and go out of service after a storage failure.
//!
//! Lock order: a queue's state lock, then this store's lock (ARCHITECTURE.md §4); fsync
//! never runs under either (the flusher syncs the handles it was given).

use crate::broker::message::Message;
use crate::storage::compactor::Compactor;
use crate::storage::flusher::Flusher;
use crate::storage::{MessageData, QueueStore, RecordRef, StorageFile, StoreStats};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Settlements between two looks at whether a store needs compacting (the look walks the
/// store's segments).
const COMPACTION_CHECK_SETTLES: u32 = 256;

/// A durable queue's store, its failure flag and the flusher that syncs it.
pub struct QueueStorage {
    store: Arc<Mutex<QueueStore>>,
    /// Settlements since compaction was last considered.
    settled: AtomicU32,
    /// Where stores that may need compacting are sent (the compactor thread).
    compactor: Option<Compactor>,
    /// Set when a write or an fsync of this store failed: persistent publishes are refused.
    failed: Arc<AtomicBool>,
    flusher: Arc<Flusher>,
}

impl std::fmt::Debug for QueueStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueStorage")
            .field("failed", &self.is_failed())
            .finish()
    }
}

/// Files written by an append, to hand to the flusher once the queue lock is released.
pub struct Written(Vec<Arc<dyn StorageFile>>);

impl QueueStorage {
    /// Wraps an opened store; `compactor` compacts it in the background when settlements
    /// leave sealed segments mostly empty.
    pub fn new(
        store: QueueStore,
        flusher: Arc<Flusher>,
        compactor: Option<Compactor>,
    ) -> QueueStorage {
        QueueStorage {
            store: Arc::new(Mutex::new(store)),
            settled: AtomicU32::new(0),
            compactor,
            failed: Arc::new(AtomicBool::new(false)),
            flusher,
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the store is out of service.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Appends a persistent message that entered the queue at `timestamp_ms` (ms since the
    /// Unix epoch; its TTL counts from there); returns its record and the files to sync.
    ///
    /// # Errors
    /// A text for the publisher when the store is out of service or the write failed
    /// (a full disk, for instance); nothing was stored then.
    pub fn append(
        &self,
        queue: &str,
        msg: &Message,
        timestamp_ms: u64,
    ) -> Result<(RecordRef, Written), String> {
        if self.is_failed() {
            return Err(format!(
                "queue '{queue}' is out of service after a storage failure"
            ));
        }
        let mut store = self.lock();
        let record = store
            .append(&MessageData {
                timestamp_ms,
                exchange: msg.exchange(),
                routing_key: msg.routing_key(),
                properties: msg.properties(),
                body: &msg.body,
            })
            .map_err(|e| {
                log::error!("queue '{queue}': cannot store a persistent message: {e}");
                format!("queue '{queue}' cannot store the message: {e}")
            })?;
        Ok((record, Written(store.files_to_sync())))
    }

    /// Gives written files to the flusher (call with no lock held); returns the epoch a
    /// confirm must wait for (`--fsync always`).
    pub fn submit(&self, written: Written) -> Option<u64> {
        self.flusher.submit(written.0, &self.failed)
    }

    /// Records a delivery (persists the redelivered flag and the delivery count).
    pub fn mark_delivered(&self, queue: &str, record: RecordRef) {
        if let Err(e) = self.lock().mark_delivered(record) {
            log::error!("queue '{queue}': cannot record a delivery: {e}");
        }
    }

    /// Records that a message left the queue for good (ack, reject, drop, purge).
    pub fn settle(&self, queue: &str, record: RecordRef) {
        let mut store = self.lock();
        if let Err(e) = store.settle(record) {
            log::error!("queue '{queue}': cannot record a settlement: {e}");
            return;
        }
        let n = self.settled.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(COMPACTION_CHECK_SETTLES) && store.needs_compaction() {
            if let Some(c) = &self.compactor {
                c.schedule(queue, &self.store);
            }
        }
    }

    /// Counters for listings.
    pub fn stats(&self) -> StoreStats {
        self.lock().stats()
    }

    /// Writes `queue_stat` (clean shutdown).
    pub fn write_stat(&self, queue: &str) {
        if let Err(e) = self.lock().write_stat() {
            log::warn!("queue '{queue}': cannot write queue_stat: {e}");
        }
    }

    /// Reads a stored, not settled message back from its segment (a body that was paged
    /// out), checksums verified. A read, never a write or an fsync: callable under the
    /// queue lock. Works on a store that is out of service too (its records are intact).
    ///
    /// # Errors
    /// A text saying why (record unknown or settled, damaged bytes, an I/O error).
    pub fn read(&self, record: RecordRef) -> Result<Message, String> {
        let m = self.lock().read(record).map_err(|e| e.to_string())?;
        Ok(Message::new(
            &m.exchange,
            &m.routing_key,
            m.properties,
            m.body,
        ))
    }
}
