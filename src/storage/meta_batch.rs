//! Many definitions written to `meta.db` in one transaction (a definitions import): either
//! every row is committed or none is. A failed statement, a vhost that is not stored, or a
//! crash before the commit leaves the file as it was (SQLite's atomic commit, WAL with
//! `synchronous = FULL`; docs/operations.md, "How an import runs").

use crate::storage::error::StorageError;
use crate::storage::meta::{
    insert_binding, insert_vhost, is_valid_queue_id, upsert_exchange, upsert_queue, BindingDef,
    ExchangeDef, MetaStore, QueueDef,
};
use crate::storage::meta_limits::{
    replace_user_limits, replace_vhost_limits, upsert_vhost_metadata, VhostMetadataRow,
};
use crate::storage::meta_parameters::{
    upsert_global_parameter, upsert_operator_policy, upsert_parameter, GlobalParameterRow,
    ParameterRow,
};
use crate::storage::meta_policies::{upsert_policy, PolicyRow};
use crate::storage::meta_users::{insert_permission, insert_user, PermissionRow, UserDef};
use rusqlite::{params, Transaction};
use std::collections::BTreeSet;

/// The rows of one batch, written in this order (vhosts before what refers to them, users
/// before their permissions). Each is stored as the single-row methods store it: users,
/// permissions, policies, exchanges and queues replace a stored row of the same key;
/// vhosts and bindings already stored stay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetaBatch {
    /// Vhosts to store.
    pub vhosts: Vec<String>,
    /// Users to store.
    pub users: Vec<UserDef>,
    /// Permissions to store; their users and vhosts are stored or in this batch.
    pub permissions: Vec<PermissionRow>,
    /// Policies to store.
    pub policies: Vec<PolicyRow>,
    /// Durable exchanges to store.
    pub exchanges: Vec<ExchangeDef>,
    /// Durable queues to store; each id names a directory the caller created.
    pub queues: Vec<QueueDef>,
    /// Bindings between durable ends to store.
    pub bindings: Vec<BindingDef>,
    /// Vhost metadata to store (each replaces the stored row).
    pub vhost_metadata: Vec<VhostMetadataRow>,
    /// Vhosts whose limits are replaced by the given set.
    pub vhost_limits: Vec<(String, Vec<(String, i64)>)>,
    /// Users whose limits are replaced by the given set.
    pub user_limits: Vec<(String, Vec<(String, i64)>)>,
    /// Runtime parameters to store (each replaces the stored row of its key).
    pub parameters: Vec<ParameterRow>,
    /// Global parameters to store (each replaces the stored row of its name).
    pub global_parameters: Vec<GlobalParameterRow>,
    /// Operator policies to store (each replaces the stored row of its vhost and name).
    pub operator_policies: Vec<PolicyRow>,
}

impl MetaBatch {
    /// Rows in the batch, all sections together.
    pub fn len(&self) -> usize {
        self.vhosts.len()
            + self.users.len()
            + self.permissions.len()
            + self.policies.len()
            + self.exchanges.len()
            + self.queues.len()
            + self.bindings.len()
            + self.vhost_metadata.len()
            + self.vhost_limits.len()
            + self.user_limits.len()
            + self.parameters.len()
            + self.global_parameters.len()
            + self.operator_policies.len()
    }

    /// Whether the batch has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every vhost a row of the batch belongs to, once each.
    fn referenced_vhosts(&self) -> BTreeSet<&str> {
        let mut all = BTreeSet::new();
        all.extend(self.permissions.iter().map(|p| p.vhost.as_str()));
        all.extend(self.policies.iter().map(|p| p.vhost.as_str()));
        all.extend(self.exchanges.iter().map(|x| x.vhost.as_str()));
        all.extend(self.queues.iter().map(|q| q.vhost.as_str()));
        all.extend(self.bindings.iter().map(|b| b.vhost.as_str()));
        all.extend(self.vhost_metadata.iter().map(|m| m.vhost.as_str()));
        all.extend(self.vhost_limits.iter().map(|(v, _)| v.as_str()));
        all.extend(self.parameters.iter().map(|p| p.vhost.as_str()));
        all.extend(self.operator_policies.iter().map(|p| p.vhost.as_str()));
        all
    }
}

/// Runs one statement of a batch, naming the row when it fails.
fn row<T>(what: impl FnOnce() -> String, r: rusqlite::Result<T>) -> Result<T, BatchError> {
    r.map_err(|e| BatchError(format!("{}: {e}", what())))
}

/// Why a batch was not committed, naming the row.
struct BatchError(String);

impl From<rusqlite::Error> for BatchError {
    fn from(e: rusqlite::Error) -> BatchError {
        BatchError(e.to_string())
    }
}

impl MetaStore {
    /// Stores every row of `batch` in one transaction, committed before it returns.
    ///
    /// # Errors
    /// [`StorageError::Meta`] naming the row when a queue id is not 32 lowercase hex chars,
    /// a row's vhost is neither stored nor in the batch, a permission's user is neither
    /// stored nor in the batch, or SQLite fails (the commit included); nothing is written
    /// then.
    pub fn write_batch(&self, batch: &MetaBatch) -> Result<(), StorageError> {
        if let Some(q) = batch.queues.iter().find(|q| !is_valid_queue_id(&q.id)) {
            return Err(StorageError::Meta(format!(
                "write_batch: queue id {:?} of queue {:?} is not 32 lowercase hex chars",
                q.id, q.name
            )));
        }
        let mut failure = None;
        let out = self.write("write_batch", |tx| match write_rows(tx, batch) {
            Ok(()) => Ok(()),
            Err(e) => {
                failure = Some(e.0);
                // Abandons the transaction; the error below replaces this one.
                Err(rusqlite::Error::QueryReturnedNoRows)
            }
        });
        match failure {
            Some(why) => Err(StorageError::Meta(format!("write_batch: {why}"))),
            None => out,
        }
    }
}

/// The statements of [`MetaStore::write_batch`], in its transaction.
fn write_rows(tx: &Transaction<'_>, batch: &MetaBatch) -> Result<(), BatchError> {
    for v in &batch.vhosts {
        row(|| format!("vhost {v:?}"), insert_vhost(tx, v))?;
    }
    for v in batch.referenced_vhosts() {
        let stored: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM vhosts WHERE name = ?1)",
            params![v],
            |r| r.get(0),
        )?;
        if !stored {
            return Err(BatchError(format!("vhost {v:?} is not stored")));
        }
    }
    for u in &batch.users {
        row(|| format!("user {:?}", u.name), insert_user(tx, u))?;
    }
    for p in &batch.permissions {
        let what = || format!("permission of user {:?} in vhost {:?}", p.user, p.vhost);
        row(what, insert_permission(tx, p))?;
    }
    for p in &batch.policies {
        let what = || format!("policy {:?} in vhost {:?}", p.name, p.vhost);
        row(what, upsert_policy(tx, p))?;
    }
    for x in &batch.exchanges {
        let what = || format!("exchange {:?} in vhost {:?}", x.name, x.vhost);
        row(what, upsert_exchange(tx, x))?;
    }
    for q in &batch.queues {
        let what = || format!("queue {:?} in vhost {:?}", q.name, q.vhost);
        row(what, upsert_queue(tx, q))?;
    }
    for b in &batch.bindings {
        let what = || {
            format!(
                "binding {:?} -> {:?} in vhost {:?}",
                b.source, b.destination, b.vhost
            )
        };
        row(what, insert_binding(tx, b))?;
    }
    for m in &batch.vhost_metadata {
        let what = || format!("metadata of vhost {:?}", m.vhost);
        row(what, upsert_vhost_metadata(tx, m))?;
    }
    for (v, limits) in &batch.vhost_limits {
        let what = || format!("limits of vhost {v:?}");
        row(what, replace_vhost_limits(tx, v, limits))?;
    }
    for (u, limits) in &batch.user_limits {
        let what = || format!("limits of user {u:?}");
        row(what, replace_user_limits(tx, u, limits))?;
    }
    for p in &batch.parameters {
        let what = || {
            format!(
                "parameter {:?} of component {:?} in vhost {:?}",
                p.name, p.component, p.vhost
            )
        };
        row(what, upsert_parameter(tx, p))?;
    }
    for p in &batch.global_parameters {
        let what = || format!("global parameter {:?}", p.name);
        row(what, upsert_global_parameter(tx, p))?;
    }
    for p in &batch.operator_policies {
        let what = || format!("operator policy {:?} in vhost {:?}", p.name, p.vhost);
        row(what, upsert_operator_policy(tx, p))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::meta::new_queue_id;
    use crate::types::FieldTable;

    fn batch() -> MetaBatch {
        MetaBatch {
            vhosts: vec!["v".into()],
            users: vec![UserDef {
                name: "u".into(),
                hash_algorithm: "argon2id".into(),
                password_hash: "$argon2id$x".into(),
                tags: vec![],
            }],
            permissions: vec![PermissionRow {
                user: "u".into(),
                vhost: "v".into(),
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            }],
            policies: vec![PolicyRow {
                vhost: "v".into(),
                name: "p".into(),
                pattern: ".*".into(),
                apply_to: "all".into(),
                priority: 0,
                definition: "{\"max-length\":1}".into(),
            }],
            exchanges: vec![ExchangeDef {
                vhost: "v".into(),
                name: "x".into(),
                kind: "direct".into(),
                auto_delete: false,
                internal: false,
                arguments: FieldTable::new(),
            }],
            queues: vec![QueueDef {
                vhost: "v".into(),
                name: "q".into(),
                id: new_queue_id(),
                auto_delete: false,
                arguments: FieldTable::new(),
                paused: false,
            }],
            bindings: vec![BindingDef {
                vhost: "v".into(),
                source: "x".into(),
                destination: "q".into(),
                destination_is_exchange: false,
                routing_key: "k".into(),
                arguments: FieldTable::new(),
            }],
            ..MetaBatch::default()
        }
    }

    #[test]
    fn a_batch_is_stored_whole() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(&dir.path().join("meta.db")).unwrap();
        let b = batch();
        assert_eq!(b.len(), 7);
        m.write_batch(&b).unwrap();
        // Twice is the same: every row is replaced or kept.
        m.write_batch(&b).unwrap();
        let d = m.load().unwrap();
        assert_eq!(d.vhosts, vec!["v".to_string()]);
        assert_eq!(d.exchanges, b.exchanges);
        assert_eq!(d.queues, b.queues);
        assert_eq!(d.bindings, b.bindings);
        assert_eq!(d.policies, b.policies);
        let access = m.load_access().unwrap();
        assert_eq!(access.users, b.users);
        assert_eq!(access.permissions, b.permissions);
    }

    #[test]
    fn a_batch_failing_on_its_last_row_stores_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(&dir.path().join("meta.db")).unwrap();
        let before = (m.load().unwrap(), m.load_access().unwrap());

        // The last binding's vhost is neither stored nor in the batch.
        let mut b = batch();
        let mut stray = b.bindings[0].clone();
        stray.vhost = "nowhere".into();
        b.bindings.push(stray);
        let err = m.write_batch(&b).unwrap_err().to_string();
        assert!(err.contains("vhost \"nowhere\" is not stored"), "{err}");
        assert_eq!((m.load().unwrap(), m.load_access().unwrap()), before);

        // A permission whose user is nowhere: the foreign key fails, named.
        let mut b = batch();
        b.permissions[0].user = "ghost".into();
        let err = m.write_batch(&b).unwrap_err().to_string();
        assert!(
            err.contains("permission of user \"ghost\" in vhost \"v\""),
            "{err}"
        );
        assert_eq!((m.load().unwrap(), m.load_access().unwrap()), before);

        // A malformed queue id is refused before anything.
        let mut b = batch();
        b.queues[0].id = "../x".into();
        assert!(m.write_batch(&b).is_err());
        assert_eq!((m.load().unwrap(), m.load_access().unwrap()), before);
    }
}
