//! Vhost limits, user limits and vhost metadata in `meta.db` (schema version 4; the tables
//! are shown in [`crate::storage::meta`]). Each write is one transaction, committed before
//! it returns. A limit is a (name, value) pair as RabbitMQ stores it (`max-connections`,
//! `max-queues`, `max-channels`); a negative value is kept as set and means "no limit"
//! (`rabbit_vhost_limit`, `rabbit_auth_backend_internal`).

use crate::storage::error::StorageError;
use crate::storage::meta::MetaStore;
use rusqlite::{params, Transaction};

/// One stored limit of a vhost or a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRow {
    /// The vhost's or the user's name.
    pub owner: String,
    /// The limit's name (`max-connections`, ...).
    pub name: String,
    /// Its value; negative means no limit.
    pub value: i64,
}

/// A vhost's metadata as the management API shows it (`PUT /api/vhosts/{name}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VhostMetadataRow {
    /// Vhost name.
    pub vhost: String,
    /// Free text.
    pub description: String,
    /// Tags, in order.
    pub tags: Vec<String>,
    /// RabbitMQ's `default_queue_type` (`classic`, `quorum`, `stream`).
    pub default_queue_type: String,
}

/// Replaces every stored limit of `vhost` by `limits` in `tx`.
pub(crate) fn replace_vhost_limits(
    tx: &Transaction<'_>,
    vhost: &str,
    limits: &[(String, i64)],
) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM vhost_limits WHERE vhost = ?1", params![vhost])?;
    for (name, value) in limits {
        tx.execute(
            "INSERT INTO vhost_limits (vhost, name, value) VALUES (?1, ?2, ?3)",
            params![vhost, name, value],
        )?;
    }
    Ok(())
}

/// Replaces every stored limit of `user` by `limits` in `tx`.
pub(crate) fn replace_user_limits(
    tx: &Transaction<'_>,
    user: &str,
    limits: &[(String, i64)],
) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM user_limits WHERE user = ?1", params![user])?;
    for (name, value) in limits {
        tx.execute(
            "INSERT INTO user_limits (user, name, value) VALUES (?1, ?2, ?3)",
            params![user, name, value],
        )?;
    }
    Ok(())
}

/// Stores a vhost's metadata in `tx`, replacing what was stored.
pub(crate) fn upsert_vhost_metadata(
    tx: &Transaction<'_>,
    m: &VhostMetadataRow,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO vhost_metadata (vhost, description, tags, default_queue_type)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (vhost) DO UPDATE SET description = excluded.description,
             tags = excluded.tags, default_queue_type = excluded.default_queue_type",
        params![
            m.vhost,
            m.description,
            m.tags.join(","),
            m.default_queue_type
        ],
    )?;
    Ok(())
}

/// Every stored vhost limit, sorted by (vhost, name), read in `tx`.
pub(crate) fn load_vhost_limits(tx: &Transaction<'_>) -> rusqlite::Result<Vec<LimitRow>> {
    load_rows(
        tx,
        "SELECT vhost, name, value FROM vhost_limits ORDER BY vhost, name",
    )
}

/// Every stored user limit, sorted by (user, name), read in `tx`.
pub(crate) fn load_user_limits(tx: &Transaction<'_>) -> rusqlite::Result<Vec<LimitRow>> {
    load_rows(
        tx,
        "SELECT user, name, value FROM user_limits ORDER BY user, name",
    )
}

fn load_rows(tx: &Transaction<'_>, sql: &str) -> rusqlite::Result<Vec<LimitRow>> {
    let mut stmt = tx.prepare(sql)?;
    let rows = stmt.query_map([], |r| {
        Ok(LimitRow {
            owner: r.get(0)?,
            name: r.get(1)?,
            value: r.get(2)?,
        })
    })?;
    rows.collect()
}

/// Every stored vhost metadata row, sorted by vhost, read in `tx`.
pub(crate) fn load_vhost_metadata(tx: &Transaction<'_>) -> rusqlite::Result<Vec<VhostMetadataRow>> {
    let mut stmt = tx.prepare(
        "SELECT vhost, description, tags, default_queue_type FROM vhost_metadata ORDER BY vhost",
    )?;
    let rows = stmt.query_map([], |r| {
        let tags: String = r.get(2)?;
        Ok(VhostMetadataRow {
            vhost: r.get(0)?,
            description: r.get(1)?,
            tags: tags
                .split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            default_queue_type: r.get(3)?,
        })
    })?;
    rows.collect()
}

impl MetaStore {
    /// Replaces every limit of `vhost` by `limits` (none: the vhost has no limits).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_vhost_limits(
        &self,
        vhost: &str,
        limits: &[(String, i64)],
    ) -> Result<(), StorageError> {
        self.write_in_vhost("put_vhost_limits", vhost, |tx| {
            replace_vhost_limits(tx, vhost, limits)
        })
    }

    /// Replaces every limit of `user` by `limits`.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the user is not stored or SQLite fails.
    pub fn put_user_limits(
        &self,
        user: &str,
        limits: &[(String, i64)],
    ) -> Result<(), StorageError> {
        self.write("put_user_limits", |tx| {
            replace_user_limits(tx, user, limits)
        })
    }

    /// Stores a vhost's metadata.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_vhost_metadata(&self, m: &VhostMetadataRow) -> Result<(), StorageError> {
        self.write_in_vhost("put_vhost_metadata", &m.vhost, |tx| {
            upsert_vhost_metadata(tx, m)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::meta_users::UserDef;

    fn pairs(p: &[(&str, i64)]) -> Vec<(String, i64)> {
        p.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn a_schema_3_file_migrates_to_4_keeping_what_it_has() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let m = MetaStore::open(&path).unwrap();
        m.put_vhost("v").unwrap();
        drop(m);
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(
            "DROP TABLE vhost_limits; DROP TABLE user_limits; DROP TABLE vhost_metadata;
             DROP TABLE runtime_parameters; DROP TABLE global_parameters;
             DROP TABLE operator_policies; ALTER TABLE queues DROP COLUMN paused;
             UPDATE schema_version SET version = 3;",
        )
        .unwrap();
        drop(db);
        let m = MetaStore::open(&path).unwrap();
        assert_eq!(m.load().unwrap().vhosts, vec!["v".to_string()]);
        m.put_vhost_limits("v", &pairs(&[("max-queues", 1)]))
            .unwrap();
        assert_eq!(m.load().unwrap().vhost_limits.len(), 1);
    }

    #[test]
    fn limits_and_metadata_round_trip_and_go_with_their_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let m = MetaStore::open(&path).unwrap();
        m.put_vhost("v").unwrap();
        m.put_user(&UserDef {
            name: "u".into(),
            hash_algorithm: "argon2id".into(),
            password_hash: String::new(),
            tags: vec![],
        })
        .unwrap();
        m.put_vhost_limits("v", &pairs(&[("max-queues", 3), ("max-connections", -1)]))
            .unwrap();
        m.put_user_limits("u", &pairs(&[("max-channels", 2)]))
            .unwrap();
        let meta = VhostMetadataRow {
            vhost: "v".into(),
            description: "d, with a comma".into(),
            tags: vec!["a".into(), "b".into()],
            default_queue_type: "quorum".into(),
        };
        m.put_vhost_metadata(&meta).unwrap();
        assert!(m.put_vhost_limits("nowhere", &[]).is_err());
        drop(m);
        let m = MetaStore::open(&path).unwrap();
        let d = m.load().unwrap();
        assert_eq!(
            d.vhost_limits,
            vec![
                LimitRow {
                    owner: "v".into(),
                    name: "max-connections".into(),
                    value: -1
                },
                LimitRow {
                    owner: "v".into(),
                    name: "max-queues".into(),
                    value: 3
                }
            ]
        );
        assert_eq!(d.vhost_metadata, vec![meta]);
        let access = m.load_access().unwrap();
        assert_eq!(access.user_limits.len(), 1);
        m.delete_user("u").unwrap();
        m.delete_vhost("v").unwrap();
        let d = m.load().unwrap();
        assert!(d.vhost_limits.is_empty() && d.vhost_metadata.is_empty());
        assert!(m.load_access().unwrap().user_limits.is_empty());
    }
}
