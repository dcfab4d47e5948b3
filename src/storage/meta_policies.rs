//! Policies in `meta.db` (schema version 3; the table is shown in
//! [`crate::storage::meta`]). Each write is one transaction, committed before it returns.

use crate::storage::error::StorageError;
use crate::storage::meta::MetaStore;
use rusqlite::{params, Transaction};

/// A stored policy: RabbitMQ's fields, the definition as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRow {
    /// Vhost name.
    pub vhost: String,
    /// Policy name.
    pub name: String,
    /// Regular expression over names.
    pub pattern: String,
    /// `queues`, `exchanges`, `all` (or RabbitMQ 3.12's queue-type values).
    pub apply_to: String,
    /// Priority; the highest matching policy applies.
    pub priority: i64,
    /// The definition, a JSON object as text.
    pub definition: String,
}

/// Every stored policy, sorted by (vhost, name), read in `tx`.
pub(crate) fn load_policies(tx: &Transaction<'_>) -> rusqlite::Result<Vec<PolicyRow>> {
    let mut stmt = tx.prepare(
        "SELECT vhost, name, pattern, apply_to, priority, definition FROM policies
         ORDER BY vhost, name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(PolicyRow {
            vhost: r.get(0)?,
            name: r.get(1)?,
            pattern: r.get(2)?,
            apply_to: r.get(3)?,
            priority: r.get(4)?,
            definition: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// Stores a policy in `tx`, replacing one of the same vhost and name.
pub(crate) fn upsert_policy(tx: &Transaction<'_>, p: &PolicyRow) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO policies (vhost, name, pattern, apply_to, priority, definition)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (vhost, name) DO UPDATE SET pattern = excluded.pattern,
             apply_to = excluded.apply_to, priority = excluded.priority,
             definition = excluded.definition",
        params![
            p.vhost,
            p.name,
            p.pattern,
            p.apply_to,
            p.priority,
            p.definition
        ],
    )?;
    Ok(())
}

impl MetaStore {
    /// Stores a policy, replacing one of the same vhost and name.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_policy(&self, p: &PolicyRow) -> Result<(), StorageError> {
        self.write_in_vhost("put_policy", &p.vhost, |tx| upsert_policy(tx, p))
    }

    /// Deletes a policy; returns whether it existed.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_policy(&self, vhost: &str, name: &str) -> Result<bool, StorageError> {
        self.write("delete_policy", |tx| {
            Ok(tx.execute(
                "DELETE FROM policies WHERE vhost = ?1 AND name = ?2",
                params![vhost, name],
            )? > 0)
        })
    }
}
