//! Users and permissions in `meta.db` (schema version 2; the tables are shown in
//! [`crate::storage::meta`]). Each write is one transaction, committed before it returns.

use crate::storage::error::StorageError;
use crate::storage::meta::MetaStore;
use rusqlite::{params, OptionalExtension};

/// A stored user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDef {
    /// Name.
    pub name: String,
    /// Name of the hashing algorithm (`argon2id`, `rabbit_password_hashing_sha256`, …).
    pub hash_algorithm: String,
    /// The hash, in that algorithm's text form.
    pub password_hash: String,
    /// Tags, in order.
    pub tags: Vec<String>,
}

/// A stored permission: a user's three patterns in one vhost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRow {
    /// User name.
    pub user: String,
    /// Vhost name.
    pub vhost: String,
    /// Configure pattern.
    pub configure: String,
    /// Write pattern.
    pub write: String,
    /// Read pattern.
    pub read: String,
}

/// Every user and permission stored, each sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessDefs {
    /// Users by name.
    pub users: Vec<UserDef>,
    /// Permissions by (user, vhost).
    pub permissions: Vec<PermissionRow>,
    /// The default user has not been created yet (first start with schema version 2).
    pub default_user_pending: bool,
    /// User limits by (user, name) (schema version 4).
    pub user_limits: Vec<crate::storage::meta_limits::LimitRow>,
}

impl MetaStore {
    /// Every stored user and permission.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn load_access(&self) -> Result<AccessDefs, StorageError> {
        self.write("load_access", |tx| {
            let users = {
                let mut stmt = tx.prepare(
                    "SELECT name, hash_algorithm, password_hash, tags FROM users ORDER BY name",
                )?;
                let rows = stmt.query_map([], |r| {
                    let tags: String = r.get(3)?;
                    Ok(UserDef {
                        name: r.get(0)?,
                        hash_algorithm: r.get(1)?,
                        password_hash: r.get(2)?,
                        tags: split_tags(&tags),
                    })
                })?;
                rows.collect::<rusqlite::Result<Vec<_>>>()?
            };
            let permissions = {
                let mut stmt = tx.prepare(
                    "SELECT user, vhost, configure, write, read FROM permissions
                     ORDER BY user, vhost",
                )?;
                let rows = stmt.query_map([], |r| {
                    Ok(PermissionRow {
                        user: r.get(0)?,
                        vhost: r.get(1)?,
                        configure: r.get(2)?,
                        write: r.get(3)?,
                        read: r.get(4)?,
                    })
                })?;
                rows.collect::<rusqlite::Result<Vec<_>>>()?
            };
            let default_user_pending = tx
                .query_row("SELECT 1 FROM default_user_pending", [], |_| Ok(()))
                .optional()?
                .is_some();
            let user_limits = crate::storage::meta_limits::load_user_limits(tx)?;
            Ok(AccessDefs {
                users,
                permissions,
                default_user_pending,
                user_limits,
            })
        })
    }

    /// Creates the default user with its permission and clears the pending marker, in one
    /// transaction (so it happens exactly once).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails (nothing is written then).
    pub fn seed_default_user(
        &self,
        user: &UserDef,
        permission: &PermissionRow,
    ) -> Result<(), StorageError> {
        self.write("seed_default_user", |tx| {
            insert_user(tx, user)?;
            insert_permission(tx, permission)?;
            tx.execute("DELETE FROM default_user_pending", [])?;
            Ok(())
        })
    }

    /// Stores a user, replacing one of the same name (its permissions stay).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn put_user(&self, user: &UserDef) -> Result<(), StorageError> {
        self.write("put_user", |tx| insert_user(tx, user))
    }

    /// Deletes a user and its permissions; returns whether it existed.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_user(&self, name: &str) -> Result<bool, StorageError> {
        self.write("delete_user", |tx| {
            tx.execute("DELETE FROM permissions WHERE user = ?1", params![name])?;
            tx.execute("DELETE FROM user_limits WHERE user = ?1", params![name])?;
            Ok(tx.execute("DELETE FROM users WHERE name = ?1", params![name])? > 0)
        })
    }

    /// Stores a permission, replacing the user's patterns in that vhost.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost or user is not stored or SQLite fails.
    pub fn put_permission(&self, p: &PermissionRow) -> Result<(), StorageError> {
        self.write_in_vhost("put_permission", &p.vhost, |tx| insert_permission(tx, p))
    }

    /// Deletes a user's permission in a vhost; returns whether there was one.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_permission(&self, user: &str, vhost: &str) -> Result<bool, StorageError> {
        self.write("delete_permission", |tx| {
            Ok(tx.execute(
                "DELETE FROM permissions WHERE user = ?1 AND vhost = ?2",
                params![user, vhost],
            )? > 0)
        })
    }
}

/// Stores a user in `tx`, replacing one of the same name (its permissions stay).
pub(super) fn insert_user(tx: &rusqlite::Transaction<'_>, u: &UserDef) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO users (name, hash_algorithm, password_hash, tags) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET hash_algorithm = excluded.hash_algorithm,
             password_hash = excluded.password_hash, tags = excluded.tags",
        params![u.name, u.hash_algorithm, u.password_hash, u.tags.join(",")],
    )?;
    Ok(())
}

/// Stores a permission in `tx`, replacing the user's patterns in that vhost.
pub(super) fn insert_permission(
    tx: &rusqlite::Transaction<'_>,
    p: &PermissionRow,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO permissions (user, vhost, configure, write, read) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (user, vhost) DO UPDATE SET configure = excluded.configure,
             write = excluded.write, read = excluded.read",
        params![p.user, p.vhost, p.configure, p.write, p.read],
    )?;
    Ok(())
}

fn split_tags(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> UserDef {
        UserDef {
            name: name.into(),
            hash_algorithm: "argon2id".into(),
            password_hash: "$argon2id$x".into(),
            tags: vec!["administrator".into(), "management".into()],
        }
    }

    fn perm(user: &str, vhost: &str) -> PermissionRow {
        PermissionRow {
            user: user.into(),
            vhost: vhost.into(),
            configure: ".*".into(),
            write: "^$".into(),
            read: "q.*".into(),
        }
    }

    #[test]
    fn users_and_permissions_round_trip_and_the_seed_happens_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let m = MetaStore::open(&path).unwrap();
        m.put_vhost("/").unwrap();
        let first = m.load_access().unwrap();
        assert!(first.default_user_pending);
        assert!(first.users.is_empty());
        m.seed_default_user(&user("guest"), &perm("guest", "/"))
            .unwrap();
        m.put_user(&user("bob")).unwrap();
        m.put_permission(&perm("bob", "/")).unwrap();
        drop(m);
        let m = MetaStore::open(&path).unwrap();
        let loaded = m.load_access().unwrap();
        assert!(!loaded.default_user_pending);
        assert_eq!(loaded.users, vec![user("bob"), user("guest")]);
        assert_eq!(
            loaded.permissions,
            vec![perm("bob", "/"), perm("guest", "/")]
        );
        assert!(m.delete_permission("bob", "/").unwrap());
        assert!(!m.delete_permission("bob", "/").unwrap());
        assert!(m.delete_user("guest").unwrap());
        assert!(!m.delete_user("guest").unwrap());
        let loaded = m.load_access().unwrap();
        assert_eq!(loaded.users, vec![user("bob")]);
        assert!(loaded.permissions.is_empty());
    }

    #[test]
    fn deleting_a_vhost_deletes_its_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(&dir.path().join("meta.db")).unwrap();
        m.put_vhost("v").unwrap();
        m.put_user(&user("bob")).unwrap();
        m.put_permission(&perm("bob", "v")).unwrap();
        m.delete_vhost("v").unwrap();
        assert!(m.load_access().unwrap().permissions.is_empty());
        assert!(m.put_permission(&perm("bob", "v")).is_err());
    }
}
