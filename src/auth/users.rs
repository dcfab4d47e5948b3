//! The user registry in memory: users with their hashes and tags, and their permissions
//! per vhost, mirrored from `meta.db` (the broker writes the store first, then here).
//!
//! Every change bumps a version counter; a session compares it (one atomic load) before
//! trusting the permissions it holds, so `permission set` and `user delete` apply to open
//! connections at their next operation.
//!
//! Checking an argon2 hash costs tens of milliseconds, and clients open connections far
//! more often than passwords change. After a successful check, the registry remembers a
//! keyed SHA-256 of the password (the key is random per process and never stored), so the
//! next login with the same password costs microseconds; a wrong password always takes the
//! slow path. The memory is dropped when the user's password changes or the user goes.

use crate::auth::password::StoredHash;
use crate::auth::permission::{PermissionDef, Permissions};
use crate::error::{BrokerError, ReplyCode};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Longest user name, in bytes (an AMQP shortstr).
pub const USER_NAME_BYTES_MAX: usize = 255;

/// Tags a user may carry at most.
pub const USER_TAGS_MAX: usize = 16;

/// The tag that allows managing users, permissions and vhosts (RabbitMQ's).
pub const TAG_ADMINISTRATOR: &str = "administrator";

/// The tag that allows listing (RabbitMQ's management tag).
pub const TAG_MANAGEMENT: &str = "management";

/// The tag that allows listing everything (RabbitMQ's).
pub const TAG_MONITORING: &str = "monitoring";

/// The tag that allows managing policies of the vhosts the user may access (RabbitMQ's).
pub const TAG_POLICYMAKER: &str = "policymaker";

/// One user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Name.
    pub name: String,
    /// Password hash with its algorithm.
    pub hash: StoredHash,
    /// Tags (`administrator`, `management`, …), as given.
    pub tags: Vec<String>,
}

impl User {
    /// Whether the user has `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

#[derive(Debug, Clone)]
struct Grant {
    def: PermissionDef,
    compiled: Arc<Permissions>,
}

#[derive(Debug, Default)]
struct Inner {
    users: HashMap<String, User>,
    /// user → vhost → permissions.
    grants: HashMap<String, HashMap<String, Grant>>,
    /// user → RabbitMQ's user limits (`max-connections`, `max-channels`), as set.
    limits: HashMap<String, BTreeMap<String, i64>>,
}

/// Users and permissions in memory.
#[derive(Debug)]
pub struct UserRegistry {
    inner: RwLock<Inner>,
    version: AtomicU64,
    /// user → keyed digest of the last password that verified.
    verified: Mutex<HashMap<String, [u8; 32]>>,
    key: [u8; 16],
}

impl Default for UserRegistry {
    fn default() -> UserRegistry {
        UserRegistry {
            inner: RwLock::default(),
            version: AtomicU64::new(0),
            verified: Mutex::default(),
            key: *uuid::Uuid::new_v4().as_bytes(),
        }
    }
}

/// Checks a user name.
///
/// # Errors
/// 406 PRECONDITION_FAILED for an empty name, one over [`USER_NAME_BYTES_MAX`], or one
/// with control characters (they would forge log lines).
pub fn check_user_name(name: &str) -> Result<(), BrokerError> {
    if name.is_empty() || name.len() > USER_NAME_BYTES_MAX {
        return Err(BrokerError::precondition(format!(
            "user name must be 1 to {USER_NAME_BYTES_MAX} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(BrokerError::precondition(
            "user name must not contain control characters",
        ));
    }
    Ok(())
}

/// Splits and checks a tag list (`administrator,management`; empty = none).
///
/// # Errors
/// 406 PRECONDITION_FAILED for more than [`USER_TAGS_MAX`] tags or a tag that is empty,
/// longer than 255 bytes or not made of letters, digits, `_` and `-`.
pub fn parse_tags(text: &str) -> Result<Vec<String>, BrokerError> {
    let tags: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if tags.len() > USER_TAGS_MAX {
        return Err(BrokerError::precondition(format!(
            "a user may have at most {USER_TAGS_MAX} tags"
        )));
    }
    for t in &tags {
        if t.len() > 255
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(BrokerError::precondition(format!(
                "invalid tag '{t}': use letters, digits, '_' and '-'"
            )));
        }
    }
    Ok(tags)
}

impl UserRegistry {
    /// The change counter: it moves whenever a user or permission changes.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    fn changed(&self) {
        // Sessions' cached routes were checked against the old permissions: they compare
        // this version too (`broker::topology::RouteCache`).
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The user named `name`.
    pub fn user(&self, name: &str) -> Option<User> {
        self.read().users.get(name).cloned()
    }

    /// Every user, sorted by name.
    pub fn users(&self) -> Vec<User> {
        let mut all: Vec<User> = self.read().users.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Whether there is no user at all.
    pub fn is_empty(&self) -> bool {
        self.read().users.is_empty()
    }

    /// Adds or replaces a user (its permissions stay).
    pub fn put_user(&self, user: User) {
        self.forget_verified(&user.name);
        self.write().users.insert(user.name.clone(), user);
        self.changed();
    }

    /// Removes a user and its permissions; returns whether it existed.
    pub fn remove_user(&self, name: &str) -> bool {
        self.forget_verified(name);
        let mut inner = self.write();
        let existed = inner.users.remove(name).is_some();
        inner.grants.remove(name);
        inner.limits.remove(name);
        drop(inner);
        self.changed();
        existed
    }

    /// `user`'s limits as set (empty when none or no such user).
    pub fn limits(&self, user: &str) -> BTreeMap<String, i64> {
        self.read().limits.get(user).cloned().unwrap_or_default()
    }

    /// Replaces `user`'s limits (an empty map removes them); nothing for an unknown user.
    pub fn put_limits(&self, user: &str, limits: BTreeMap<String, i64>) {
        let mut inner = self.write();
        if !inner.users.contains_key(user) {
            return;
        }
        if limits.is_empty() {
            inner.limits.remove(user);
        } else {
            inner.limits.insert(user.to_string(), limits);
        }
    }

    /// Sets `user`'s permissions in `vhost`.
    ///
    /// # Errors
    /// As [`Permissions::compile`].
    pub fn put_permission(
        &self,
        user: &str,
        vhost: &str,
        def: PermissionDef,
    ) -> Result<(), BrokerError> {
        let compiled = Arc::new(Permissions::compile(&def)?);
        self.write()
            .grants
            .entry(user.to_string())
            .or_default()
            .insert(vhost.to_string(), Grant { def, compiled });
        self.changed();
        Ok(())
    }

    /// Clears `user`'s permissions in `vhost`; returns whether there were any.
    pub fn remove_permission(&self, user: &str, vhost: &str) -> bool {
        let mut inner = self.write();
        let existed = inner
            .grants
            .get_mut(user)
            .is_some_and(|m| m.remove(vhost).is_some());
        drop(inner);
        self.changed();
        existed
    }

    /// Forgets every permission in `vhost` (the vhost was deleted).
    pub fn remove_vhost(&self, vhost: &str) {
        for grants in self.write().grants.values_mut() {
            grants.remove(vhost);
        }
        self.changed();
    }

    /// `user`'s compiled permissions in `vhost`; `None` = no access to the vhost.
    pub fn permissions(&self, user: &str, vhost: &str) -> Option<Arc<Permissions>> {
        self.read()
            .grants
            .get(user)?
            .get(vhost)
            .map(|g| Arc::clone(&g.compiled))
    }

    /// Every permission as (user, vhost, patterns), sorted by user then vhost.
    pub fn all_permissions(&self) -> Vec<(String, String, PermissionDef)> {
        let inner = self.read();
        let mut all: Vec<(String, String, PermissionDef)> = inner
            .grants
            .iter()
            .flat_map(|(u, m)| {
                m.iter()
                    .map(move |(v, g)| (u.clone(), v.clone(), g.def.clone()))
            })
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        all
    }

    /// Whether `password` is the one that last verified for `user` (the fast path).
    pub fn verified_before(&self, user: &str, password: &str) -> bool {
        let digest = self.digest(user, password);
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(user)
            .is_some_and(|d| *d == digest)
    }

    /// Remembers that `password` verified for `user` (see the module documentation).
    pub fn remember_verified(&self, user: &str, password: &str) {
        let digest = self.digest(user, password);
        let mut map = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded by the number of users: entries exist only for users that exist.
        map.insert(user.to_string(), digest);
    }

    fn forget_verified(&self, user: &str) {
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(user);
    }

    fn digest(&self, user: &str, password: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update((user.len() as u64).to_be_bytes());
        h.update(user.as_bytes());
        h.update(password.as_bytes());
        h.finalize().into()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The refusal for a user without access to a vhost: 530 NOT_ALLOWED, RabbitMQ's text.
pub fn vhost_refused(vhost: &str, user: &str) -> BrokerError {
    BrokerError::new(
        ReplyCode::NotAllowed,
        format!("access to vhost '{vhost}' refused for user '{user}'"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::password::{rabbit_sha256, RABBIT_SHA256};

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            hash: StoredHash::import(RABBIT_SHA256, &rabbit_sha256([1, 2, 3, 4], "pw")).unwrap(),
            tags: vec![],
        }
    }

    #[test]
    fn permissions_follow_puts_and_removals_and_each_change_moves_the_version() {
        let r = UserRegistry::default();
        let v0 = r.version();
        r.put_user(user("bob"));
        assert!(r.version() > v0);
        assert!(r.permissions("bob", "/").is_none());
        let def = PermissionDef {
            configure: "".into(),
            write: ".*".into(),
            read: "^q$".into(),
        };
        r.put_permission("bob", "/", def.clone()).unwrap();
        assert!(r.permissions("bob", "/").is_some());
        assert_eq!(
            r.all_permissions(),
            vec![("bob".to_string(), "/".to_string(), def)]
        );
        let v1 = r.version();
        r.remove_vhost("/");
        assert!(r.version() > v1);
        assert!(r.permissions("bob", "/").is_none());
        assert!(r.remove_user("bob"));
        assert!(!r.remove_user("bob"));
    }

    #[test]
    fn the_verified_memory_matches_only_the_same_password_and_goes_with_a_change() {
        let r = UserRegistry::default();
        r.put_user(user("bob"));
        assert!(!r.verified_before("bob", "pw"));
        r.remember_verified("bob", "pw");
        assert!(r.verified_before("bob", "pw"));
        assert!(!r.verified_before("bob", "pw2"));
        assert!(!r.verified_before("bo", "bpw"));
        r.put_user(user("bob"));
        assert!(!r.verified_before("bob", "pw"));
    }

    #[test]
    fn tags_are_split_and_checked() {
        assert_eq!(
            parse_tags("administrator, management").unwrap(),
            vec!["administrator", "management"]
        );
        assert!(parse_tags("").unwrap().is_empty());
        assert!(parse_tags("bad tag").is_err());
        assert!(check_user_name("").is_err());
        assert!(check_user_name(&"u".repeat(256)).is_err());
        assert!(check_user_name("eve\r[INFO] forged").is_err());
        assert!(check_user_name("zoë").is_ok());
    }
}
