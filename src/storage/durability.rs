//! The broker's handle on its data directory: the lock, `meta.db`, the group-commit
//! flusher and where each durable queue's files live.

use crate::error::{BrokerError, ReplyCode};
use crate::storage::compactor::Compactor;
use crate::storage::flusher::{Flusher, FsyncMode};
use crate::storage::lock::DataDirLock;
use crate::storage::meta::{is_valid_queue_id, Definitions, MetaStore};
use crate::storage::{Backend, StorageError, StoreConfig};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Name of the directory holding one sub-directory per durable queue.
pub const QUEUES_DIR: &str = "queues";

/// Name of the definitions database.
pub const META_DB: &str = "meta.db";

/// Open storage of a running broker.
pub struct Durability {
    data_dir: PathBuf,
    backend: Arc<dyn Backend>,
    meta: Mutex<MetaStore>,
    flusher: Arc<Flusher>,
    compactor: Compactor,
    store_config: StoreConfig,
    _lock: DataDirLock,
}

impl std::fmt::Debug for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durability")
            .field("data_dir", &self.data_dir)
            .finish()
    }
}

impl Durability {
    /// Locks `data_dir` (creating it), opens `meta.db` (creating or migrating it), makes
    /// sure the default vhost `/` is stored, removes queue directories that `meta.db` does
    /// not know (left by a crash between a queue's deletion and its files' removal), starts
    /// the flusher, and returns the stored definitions.
    ///
    /// # Errors
    /// [`StorageError::Locked`] when another server holds the directory; I/O and
    /// `meta.db` errors otherwise.
    pub fn open(
        data_dir: &Path,
        fsync: FsyncMode,
        store_config: StoreConfig,
        backend: Arc<dyn Backend>,
    ) -> Result<(Arc<Durability>, Definitions), StorageError> {
        let lock = DataDirLock::acquire(data_dir)?;
        let meta = MetaStore::open(&data_dir.join(META_DB))?;
        meta.put_vhost(crate::types::DEFAULT_VHOST)?;
        let definitions = meta.load()?;
        let queues_dir = data_dir.join(QUEUES_DIR);
        backend
            .create_dir_all(&queues_dir)
            .map_err(|e| StorageError::io(&queues_dir, e))?;
        let mut known: HashSet<String> = meta.queue_ids()?.into_iter().collect();
        // A durable delayed-message exchange's store (`broker/delayed`); a transient
        // one's is left to this removal.
        known.extend(
            definitions
                .exchanges
                .iter()
                .filter(|e| e.kind == "x-delayed-message")
                .map(|e| super::meta::delayed_store_id(&e.vhost, &e.name)),
        );
        remove_orphans(backend.as_ref(), &queues_dir, &known)?;
        let flusher = Flusher::start(fsync, backend.file_budget().map(|b| &**b))
            .map_err(|e| StorageError::io(data_dir, e))?;
        let compactor = Compactor::start().map_err(|e| StorageError::io(data_dir, e))?;
        let durability = Durability {
            data_dir: data_dir.to_path_buf(),
            backend,
            meta: Mutex::new(meta),
            flusher: Arc::new(flusher),
            compactor,
            store_config,
            _lock: lock,
        };
        Ok((Arc::new(durability), definitions))
    }

    /// Runs `f` on `meta.db` (one transaction per call, committed when it returns).
    ///
    /// # Errors
    /// 541 INTERNAL_ERROR naming what could not be stored (RabbitMQ answers a failed
    /// metadata store so); the definition is then not changed.
    pub fn meta<R>(
        &self,
        what: &str,
        f: impl FnOnce(&MetaStore) -> Result<R, StorageError>,
    ) -> Result<R, BrokerError> {
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        f(&meta).map_err(|e| {
            log::error!("cannot store {what}: {e}");
            BrokerError::new(
                ReplyCode::InternalError,
                format!("cannot store {what}: {e}"),
            )
        })
    }

    /// The group-commit flusher.
    pub fn flusher(&self) -> &Arc<Flusher> {
        &self.flusher
    }

    /// The background compactor.
    pub fn compactor(&self) -> &Compactor {
        &self.compactor
    }

    /// The file-system backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Message-store settings.
    pub fn store_config(&self) -> StoreConfig {
        self.store_config
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory of the durable queue with `id` (an id from `meta.db`, never a name).
    pub fn queue_dir(&self, id: &str) -> PathBuf {
        self.data_dir.join(QUEUES_DIR).join(id)
    }

    /// Removes a deleted queue's directory (after its deletion was committed).
    pub fn remove_queue_dir(&self, id: &str) {
        let dir = self.queue_dir(id);
        if self.backend.exists(&dir) {
            if let Err(e) = self.backend.remove_dir_all(&dir) {
                // The next start removes it as an orphan.
                log::error!("cannot remove {}: {e}", dir.display());
            }
        }
    }
}

/// Deletes every entry of `queues_dir` that is not the directory of a known queue id: one
/// warning with their count (a crash during a definitions import can leave thousands),
/// each path at debug.
fn remove_orphans(
    backend: &dyn Backend,
    queues_dir: &Path,
    known: &HashSet<String>,
) -> Result<(), StorageError> {
    let entries = backend
        .list_dir(queues_dir)
        .map_err(|e| StorageError::io(queues_dir, e))?;
    let mut removed = 0usize;
    for entry in entries {
        let path = if entry.is_absolute() {
            entry.clone()
        } else {
            queues_dir.join(&entry)
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if is_valid_queue_id(&name) && known.contains(&name) {
            continue;
        }
        log::debug!("removing {}: no queue in meta.db owns it", path.display());
        backend
            .remove_dir_all(&path)
            .or_else(|_| backend.remove_file(&path))
            .map_err(|e| StorageError::io(&path, e))?;
        removed += 1;
    }
    if removed > 0 {
        log::warn!(
            "removed {removed} entries of {} that no queue in meta.db owns (left by a crash \
             while queues were created or deleted, a definitions import included)",
            queues_dir.display()
        );
    }
    Ok(())
}
