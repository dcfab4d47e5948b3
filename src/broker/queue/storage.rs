//! The message store of one durable queue as the queue uses it: append persistent
//! messages, record deliveries and settlements, hand written files to the group-commit
//! flusher, and go out of service after a storage failure.
//!
//! Under `--fsync always` the store buffers: records and ack entries wait in memory and
//! the flusher has them written, one `write` per file per round, just before it syncs
//! (docs/architecture.md §14.1).
//!
//! Lock order: a queue's state lock, then this store's lock (docs/architecture.md §8); fsync
//! never runs under either (the flusher writes under the store's lock alone, then syncs
//! the handles without it).

use crate::broker::message::Message;
use crate::error::{BrokerError, ReplyCode};
use crate::storage::compactor::Compactor;
use crate::storage::durability::Durability;
use crate::storage::flusher::{Flusher, FsyncMode, SyncSource, SyncWaiter};
use crate::storage::meta::new_queue_id;
use crate::storage::{MessageData, QueueStore, RecordRef, StorageError, StorageFile, StoreStats};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Settlements between two looks at whether a store needs compacting (the look walks the
/// store's segments).
const COMPACTION_CHECK_SETTLES: u32 = 256;

/// A durable queue's store, its failure flag and the flusher that syncs it.
pub struct QueueStorage {
    store: Arc<Mutex<QueueStore>>,
    /// The store as the flusher sees it (the same store and failure flag).
    source: Arc<dyn SyncSource>,
    /// Settlements since compaction was last considered.
    settled: AtomicU32,
    /// Where stores that may need compacting are sent (the compactor thread).
    compactor: Option<Compactor>,
    /// Set when a write or an fsync of this store failed: persistent publishes are refused.
    failed: Arc<AtomicBool>,
    flusher: Arc<Flusher>,
}

/// What the flusher holds of a store: it writes the store's buffers and syncs its files.
struct StoreSource {
    store: Arc<Mutex<QueueStore>>,
    failed: Arc<AtomicBool>,
    /// In the flusher's batch (see [`SyncSource::queued`]).
    queued: AtomicBool,
}

impl SyncSource for StoreSource {
    fn take_files(&self) -> Result<Vec<Arc<dyn StorageFile>>, String> {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        store
            .take_files_to_sync()
            .map_err(|e| format!("{}: {e}", store.dir().display()))
    }

    fn mark_failed(&self) {
        self.failed.store(true, Ordering::Release);
    }

    fn queued(&self) -> &AtomicBool {
        &self.queued
    }
}

impl std::fmt::Debug for QueueStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueStorage")
            .field("failed", &self.is_failed())
            .finish()
    }
}

/// Proof of an append, to hand to the flusher ([`QueueStorage::submit`]) once the queue
/// lock is released.
pub struct Written(());

impl QueueStorage {
    /// Wraps an opened store; `compactor` compacts it in the background when settlements
    /// leave sealed segments mostly empty.
    pub fn new(
        mut store: QueueStore,
        flusher: Arc<Flusher>,
        compactor: Option<Compactor>,
    ) -> QueueStorage {
        // Only `always` has a round right behind every publish; the other modes confirm
        // after the write, so it must happen at once.
        let buffered = flusher.mode() == FsyncMode::Always;
        let failed = Arc::new(AtomicBool::new(false));
        if let Err(e) = store.set_write_buffering(buffered) {
            // Nothing is buffered in a store just opened; the store is out of service.
            log::error!("{}: {e}", store.dir().display());
            failed.store(true, Ordering::Release);
        }
        let store = Arc::new(Mutex::new(store));
        let source: Arc<dyn SyncSource> = Arc::new(StoreSource {
            store: Arc::clone(&store),
            failed: Arc::clone(&failed),
            queued: AtomicBool::new(false),
        });
        QueueStorage {
            store,
            source,
            settled: AtomicU32::new(0),
            compactor,
            failed,
            flusher,
        }
    }

    /// Creates the store of a new durable queue named `queue`: a new id from
    /// [`new_queue_id`], its directory `queues/<id>/` with an empty segment, ack log and
    /// `queue_stat`. Returns the id, which the caller stores in `meta.db` afterwards (files
    /// first: a crash before that commit leaves an orphan directory that the next start
    /// removes; the reverse could leave a stored queue without files).
    ///
    /// # Errors
    /// 541 INTERNAL_ERROR naming the queue and the I/O error (a full disk, too many open
    /// files: each store holds two); what was created is removed then.
    pub fn create(
        durability: &Durability,
        queue: &str,
    ) -> Result<(String, QueueStorage), BrokerError> {
        let id = new_queue_id();
        let opened = QueueStore::open(
            Arc::clone(durability.backend()),
            durability.queue_dir(&id),
            durability.store_config(),
        );
        match opened {
            Ok((store, _, _)) => Ok((
                id,
                QueueStorage::new(
                    store,
                    Arc::clone(durability.flusher()),
                    Some(durability.compactor().clone()),
                ),
            )),
            Err(e) => {
                durability.remove_queue_dir(&id);
                Err(store_creation_error(queue, &e))
            }
        }
    }

    /// Closes the files of a store that was created but never committed to `meta.db` and
    /// removes its directory (an import that failed or did not need it).
    pub fn discard(self, durability: &Durability, id: &str) {
        drop(self);
        durability.remove_queue_dir(id);
    }

    /// Hands the store to the flusher after a write without a waiter (an ack-log entry).
    /// Under `--fsync never` nothing is synced: the list of written files is dropped.
    fn written_lazily(&self, store: &mut QueueStore) {
        if self.flusher.mode() == FsyncMode::Never {
            // Nothing is synced: the list (and an early sync's failure) is dropped.
            let _ = store.files_to_sync();
        } else {
            self.flusher.submit(&self.source, false);
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
        // BCC keys are kept in the record only (sender-selected distribution).
        let with_bcc = msg
            .header_routes()
            .and_then(|h| h.stored_properties(msg.properties()));
        let mut store = self.lock();
        let record = store
            .append(&MessageData {
                timestamp_ms,
                exchange: msg.exchange(),
                routing_key: msg.routing_key(),
                properties: with_bcc.as_ref().unwrap_or(msg.properties()),
                body: &msg.body,
            })
            .map_err(|e| {
                log::error!("queue '{queue}': cannot store a persistent message: {e}");
                format!("queue '{queue}' cannot store the message: {e}")
            })?;
        if self.flusher.mode() == FsyncMode::Never {
            // Nothing is synced: the list (and an early sync's failure) is dropped.
            let _ = store.files_to_sync();
        }
        Ok((record, Written(())))
    }

    /// Gives the store to the flusher after an append (call with no lock held); returns
    /// the epoch a confirm must wait for (`--fsync always`).
    pub fn submit(&self, written: Written) -> Option<u64> {
        let Written(()) = written;
        self.flusher.submit(&self.source, true)
    }

    /// Tells `waiter` once flusher epoch `epoch` is durable (or failed): for work that
    /// must wait for writes to other stores ([`crate::broker::dead_letter::jobs`]).
    pub fn when_durable(&self, epoch: u64, waiter: Arc<dyn SyncWaiter>) {
        self.flusher.wait(epoch, waiter);
    }

    /// Records a delivery (persists the redelivered flag and the delivery count).
    pub fn mark_delivered(&self, queue: &str, record: RecordRef) {
        let mut store = self.lock();
        match store.mark_delivered(record) {
            Ok(()) => self.written_lazily(&mut store),
            Err(e) => log::error!("queue '{queue}': cannot record a delivery: {e}"),
        }
    }

    /// Records that a message left the queue for good (ack, reject, drop, purge).
    pub fn settle(&self, queue: &str, record: RecordRef) {
        self.settle_with(queue, record, false);
    }

    /// As [`QueueStorage::settle`], written at the flusher's next round rather than within
    /// its lazy delay: a dead-lettered message's settlement, so a crash soon after finds
    /// few duplicates.
    pub fn settle_soon(&self, queue: &str, record: RecordRef) {
        self.settle_with(queue, record, true);
    }

    fn settle_with(&self, queue: &str, record: RecordRef, soon: bool) {
        let mut store = self.lock();
        if let Err(e) = store.settle(record) {
            log::error!("queue '{queue}': cannot record a settlement: {e}");
            return;
        }
        if soon && self.flusher.mode() != FsyncMode::Never {
            self.flusher.submit(&self.source, true);
        } else {
            self.written_lazily(&mut store);
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
        Ok(Message::from_stored(
            &m.exchange,
            &m.routing_key,
            m.properties,
            m.body,
        ))
    }
}

/// The error a declare gets when its queue's store cannot be created: running out of file
/// descriptors (the store's budget, or the OS's limit) is a channel error, 406 with
/// RabbitMQ's limit wording, so the client's other channels and connections go on; any
/// other failure is 541 INTERNAL_ERROR, as RabbitMQ answers a failed queue start.
fn store_creation_error(name: &str, e: &StorageError) -> BrokerError {
    if e.is_out_of_files() {
        log::warn!("cannot declare queue '{name}': no file descriptor for its files: {e}");
        return BrokerError::precondition(format!(
            "cannot declare queue '{name}': file descriptor limit reached ({e})"
        ));
    }
    BrokerError::new(
        ReplyCode::InternalError,
        format!("cannot create the store of queue '{name}': {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_at_declare_is_a_channel_error() {
        let emfile = StorageError::io("/d/q", std::io::Error::from_raw_os_error(24));
        let e = store_creation_error("q", &emfile);
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        assert!(
            e.text.contains("file descriptor limit reached"),
            "{}",
            e.text
        );
        let budget = StorageError::io(
            "/d/q",
            std::io::Error::other(crate::storage::file_budget::FilesExhausted { limit: 45 }),
        );
        assert_eq!(
            store_creation_error("q", &budget).code,
            ReplyCode::PreconditionFailed
        );
        let disk = StorageError::io("/d/q", std::io::Error::from_raw_os_error(28));
        assert_eq!(
            store_creation_error("q", &disk).code,
            ReplyCode::InternalError
        );
    }
}
