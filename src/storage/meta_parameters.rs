//! Runtime parameters, global parameters and operator policies in `meta.db` (schema
//! version 5; the tables are shown in [`crate::storage::meta`]). Each write is one
//! transaction, committed before it returns. Values are JSON texts kept as written
//! (RabbitMQ's `rabbit_runtime_parameters`, `rabbit_policy` `operator_policy`).

use crate::storage::error::StorageError;
use crate::storage::meta::MetaStore;
use crate::storage::meta_policies::PolicyRow;
use rusqlite::{params, Transaction};

/// A stored runtime parameter of a vhost (`federation-upstream`, `shovel`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterRow {
    /// Vhost name.
    pub vhost: String,
    /// The component (`federation-upstream`, ...).
    pub component: String,
    /// The parameter's name, unique in (vhost, component).
    pub name: String,
    /// Its value, JSON text.
    pub value: String,
}

/// A stored global parameter (`cluster_name`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalParameterRow {
    /// Its name.
    pub name: String,
    /// Its value, JSON text.
    pub value: String,
}

/// Stores a runtime parameter in `tx`, replacing one of the same key.
pub(crate) fn upsert_parameter(tx: &Transaction<'_>, p: &ParameterRow) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO runtime_parameters (vhost, component, name, value) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (vhost, component, name) DO UPDATE SET value = excluded.value",
        params![p.vhost, p.component, p.name, p.value],
    )?;
    Ok(())
}

/// Stores a global parameter in `tx`, replacing one of the same name.
pub(crate) fn upsert_global_parameter(
    tx: &Transaction<'_>,
    p: &GlobalParameterRow,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO global_parameters (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![p.name, p.value],
    )?;
    Ok(())
}

/// Stores an operator policy in `tx`, replacing one of the same vhost and name.
pub(crate) fn upsert_operator_policy(tx: &Transaction<'_>, p: &PolicyRow) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO operator_policies (vhost, name, pattern, apply_to, priority, definition)
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

/// Every stored runtime parameter, sorted by (vhost, component, name), read in `tx`.
pub(crate) fn load_parameters(tx: &Transaction<'_>) -> rusqlite::Result<Vec<ParameterRow>> {
    let mut stmt = tx.prepare(
        "SELECT vhost, component, name, value FROM runtime_parameters
         ORDER BY vhost, component, name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(ParameterRow {
            vhost: r.get(0)?,
            component: r.get(1)?,
            name: r.get(2)?,
            value: r.get(3)?,
        })
    })?;
    rows.collect()
}

/// Every stored global parameter, sorted by name, read in `tx`.
pub(crate) fn load_global_parameters(
    tx: &Transaction<'_>,
) -> rusqlite::Result<Vec<GlobalParameterRow>> {
    let mut stmt = tx.prepare("SELECT name, value FROM global_parameters ORDER BY name")?;
    let rows = stmt.query_map([], |r| {
        Ok(GlobalParameterRow {
            name: r.get(0)?,
            value: r.get(1)?,
        })
    })?;
    rows.collect()
}

/// Every stored operator policy, sorted by (vhost, name), read in `tx`.
pub(crate) fn load_operator_policies(tx: &Transaction<'_>) -> rusqlite::Result<Vec<PolicyRow>> {
    let mut stmt = tx.prepare(
        "SELECT vhost, name, pattern, apply_to, priority, definition FROM operator_policies
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

impl MetaStore {
    /// Stores a runtime parameter, replacing one of the same (vhost, component, name).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_parameter(&self, p: &ParameterRow) -> Result<(), StorageError> {
        self.write_in_vhost("put_parameter", &p.vhost, |tx| upsert_parameter(tx, p))
    }

    /// Deletes a runtime parameter; returns whether it existed.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_parameter(
        &self,
        vhost: &str,
        component: &str,
        name: &str,
    ) -> Result<bool, StorageError> {
        self.write("delete_parameter", |tx| {
            Ok(tx.execute(
                "DELETE FROM runtime_parameters WHERE vhost = ?1 AND component = ?2 AND name = ?3",
                params![vhost, component, name],
            )? > 0)
        })
    }

    /// Stores a global parameter, replacing one of the same name.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn put_global_parameter(&self, p: &GlobalParameterRow) -> Result<(), StorageError> {
        self.write("put_global_parameter", |tx| upsert_global_parameter(tx, p))
    }

    /// Deletes a global parameter; returns whether it existed.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_global_parameter(&self, name: &str) -> Result<bool, StorageError> {
        self.write("delete_global_parameter", |tx| {
            Ok(tx.execute(
                "DELETE FROM global_parameters WHERE name = ?1",
                params![name],
            )? > 0)
        })
    }

    /// Stores an operator policy, replacing one of the same vhost and name.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_operator_policy(&self, p: &PolicyRow) -> Result<(), StorageError> {
        self.write_in_vhost("put_operator_policy", &p.vhost, |tx| {
            upsert_operator_policy(tx, p)
        })
    }

    /// Deletes an operator policy; returns whether it existed.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_operator_policy(&self, vhost: &str, name: &str) -> Result<bool, StorageError> {
        self.write("delete_operator_policy", |tx| {
            Ok(tx.execute(
                "DELETE FROM operator_policies WHERE vhost = ?1 AND name = ?2",
                params![vhost, name],
            )? > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_4_file_migrates_to_5_keeping_what_it_has() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let m = MetaStore::open(&path).unwrap();
        m.put_vhost("v").unwrap();
        m.put_vhost_limits("v", &[("max-queues".to_string(), 2)])
            .unwrap();
        drop(m);
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(
            "DROP TABLE runtime_parameters; DROP TABLE global_parameters;
             DROP TABLE operator_policies; ALTER TABLE queues DROP COLUMN paused;
             UPDATE schema_version SET version = 4;",
        )
        .unwrap();
        drop(db);
        let m = MetaStore::open(&path).unwrap();
        let d = m.load().unwrap();
        assert_eq!(d.vhosts, vec!["v".to_string()]);
        assert_eq!(d.vhost_limits.len(), 1);
        m.put_global_parameter(&GlobalParameterRow {
            name: "cluster_name".into(),
            value: "\"c\"".into(),
        })
        .unwrap();
        assert_eq!(m.load().unwrap().global_parameters.len(), 1);
    }

    #[test]
    fn parameters_round_trip_and_go_with_their_vhost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let m = MetaStore::open(&path).unwrap();
        m.put_vhost("v").unwrap();
        let p = ParameterRow {
            vhost: "v".into(),
            component: "shovel".into(),
            name: "s".into(),
            value: "{\"src-uri\":\"amqp://\"}".into(),
        };
        m.put_parameter(&p).unwrap();
        let op = PolicyRow {
            vhost: "v".into(),
            name: "op".into(),
            pattern: ".*".into(),
            apply_to: "queues".into(),
            priority: 1,
            definition: "{\"max-length\":5}".into(),
        };
        m.put_operator_policy(&op).unwrap();
        m.put_global_parameter(&GlobalParameterRow {
            name: "cluster_name".into(),
            value: "\"one\"".into(),
        })
        .unwrap();
        m.put_global_parameter(&GlobalParameterRow {
            name: "cluster_name".into(),
            value: "\"two\"".into(),
        })
        .unwrap();
        assert!(m
            .put_parameter(&ParameterRow {
                vhost: "nowhere".into(),
                ..p.clone()
            })
            .is_err());
        drop(m);
        let m = MetaStore::open(&path).unwrap();
        let d = m.load().unwrap();
        assert_eq!(d.parameters, vec![p]);
        assert_eq!(d.operator_policies, vec![op]);
        assert_eq!(d.global_parameters[0].value, "\"two\"");
        assert!(m.delete_global_parameter("cluster_name").unwrap());
        assert!(!m.delete_global_parameter("cluster_name").unwrap());
        m.delete_vhost("v").unwrap();
        let d = m.load().unwrap();
        assert!(d.parameters.is_empty() && d.operator_policies.is_empty());
        assert!(d.global_parameters.is_empty());
    }

    #[test]
    fn deletes_report_whether_the_row_existed() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(&dir.path().join("meta.db")).unwrap();
        m.put_vhost("v").unwrap();
        assert!(!m.delete_parameter("v", "shovel", "s").unwrap());
        assert!(!m.delete_operator_policy("v", "op").unwrap());
    }
}
