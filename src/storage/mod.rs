//! Durable storage: definitions in SQLite (`meta.db`), persistent messages of durable
//! queues in checksummed, length-prefixed segment files, group-committed fsync, recovery.
//!
//! Layout of a data directory (byte-level formats in `docs/storage.md`):
//!
//! ```text
//! <data-dir>/LOCK                      held (flock) by the running server
//! <data-dir>/meta.db                   vhosts, durable exchanges/queues, bindings, users,
//!                                      permissions, policies, limits (WAL)
//! <data-dir>/queues/<id>/queue_data.N  message records of one durable queue
//! <data-dir>/queues/<id>/queue_acks.N  delivered/settled entries for segment N
//! <data-dir>/queues/<id>/queue_stat    "N\ttotal\tvalid" per segment (a rebuildable hint)
//! ```
//!
//! `<id>` is a stable identifier from `meta.db`, never the queue's name, so any name stays
//! inside the data directory.

pub mod ack_log;
pub mod backend;
pub mod budgeted_backend;
pub mod check;
pub mod compactor;
pub mod durability;
pub mod error;
pub mod file_budget;
pub mod flusher;
pub mod handle_cache;
pub mod lock;
pub mod meta;
pub mod meta_batch;
pub mod meta_limits;
pub mod meta_parameters;
pub mod meta_policies;
pub mod meta_users;
pub mod queue_store;
pub mod record;
#[cfg(any(test, feature = "test-support"))]
pub mod sim_backend;
pub mod stat;
pub mod types;

pub use backend::{Backend, OsBackend, StorageFile};
pub use budgeted_backend::BudgetedBackend;
pub use check::{check_dir, CheckReport};
pub use error::StorageError;
pub use file_budget::{FileBudget, FileBudgetStats};
pub use handle_cache::HandleCache;
pub use meta::{delayed_store_id, new_queue_id};
pub use queue_store::{QueueStore, Recovered};
#[cfg(any(test, feature = "test-support"))]
pub use sim_backend::SimBackend;
pub use types::{
    MessageData, RecordRef, RecoveredMessage, RecoveryReport, StoreConfig, StoreStats,
};
