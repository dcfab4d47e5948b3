//! Logins, users and permissions as the broker runs them: `meta.db` is written first, the
//! in-memory registry second, so what a client was told survives a crash (RabbitMQ's
//! access-control model: docs/security.md).

pub mod login_checker;
pub mod session;

use crate::auth::password::StoredHash;
use crate::auth::permission::PermissionDef;
use crate::auth::throttle::Verdict;
use crate::auth::users::{
    check_user_name, vhost_refused, User, TAG_ADMINISTRATOR, TAG_MANAGEMENT, TAG_MONITORING,
};
use crate::broker::access::login_checker::{LoginChecker, LoginJob};
use crate::broker::node::{Broker, DEFAULT_VHOST};
use crate::broker::vhost::VirtualHost;
use crate::error::{BrokerError, ReplyCode};
use crate::storage::meta_users::{PermissionRow, UserDef};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// What [`Broker::login_quick`] could decide without a password check.
#[derive(Debug)]
pub enum LoginStep {
    /// Decided: accepted or refused.
    Done(Result<(), BrokerError>),
    /// The password needs checking (argon2): hand the login to [`Broker::submit_login`].
    Slow,
}

/// How a user's password is given to `user add`.
#[derive(Debug, Clone)]
pub enum Credential {
    /// A password in clear, hashed here with argon2id.
    Password(String),
    /// A hash imported as it is: (algorithm name, hash text), e.g. from RabbitMQ's
    /// definitions (`rabbit_password_hashing_sha256`).
    Hash(String, String),
}

fn to_def(user: &User) -> UserDef {
    UserDef {
        name: user.name.clone(),
        hash_algorithm: user.hash.algorithm.clone(),
        password_hash: user.hash.hash.clone(),
        tags: user.tags.clone(),
    }
}

fn full_access() -> PermissionDef {
    PermissionDef {
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
    }
}

/// An argon2 hash no password matches, checked for unknown users so a wrong user name
/// costs as much as a wrong password (no user enumeration by timing).
fn decoy_hash() -> &'static Option<StoredHash> {
    static DECOY: OnceLock<Option<StoredHash>> = OnceLock::new();
    DECOY.get_or_init(|| StoredHash::new(&uuid::Uuid::new_v4().to_string()).ok())
}

impl Broker {
    /// Loads users and permissions from `meta.db` (recovery step 2), creating the default
    /// user (`administrator`, full permissions on `/`) when the store says it has never
    /// been created. An in-memory broker gets the default user directly.
    ///
    /// # Errors
    /// 541 INTERNAL_ERROR when the store cannot be read or written.
    pub fn load_access(&self) -> Result<(), BrokerError> {
        let defs = match self.durability() {
            Some(d) => d.meta("users", |m| m.load_access())?,
            None => Default::default(),
        };
        for u in defs.users {
            let hash = StoredHash {
                algorithm: u.hash_algorithm,
                hash: u.password_hash,
            };
            self.users.put_user(User {
                name: u.name,
                hash,
                tags: u.tags,
            });
        }
        for row in defs.user_limits {
            let mut limits = self.users.limits(&row.owner);
            limits.insert(row.name, row.value);
            self.users.put_limits(&row.owner, limits);
        }
        for p in defs.permissions {
            let def = PermissionDef {
                configure: p.configure,
                write: p.write,
                read: p.read,
            };
            if let Err(e) = self.users.put_permission(&p.user, &p.vhost, def) {
                log::error!(
                    "permissions of user '{}' in vhost '{}' not loaded: {}",
                    p.user,
                    p.vhost,
                    e.text
                );
            }
        }
        let seed = match self.durability() {
            Some(_) => defs.default_user_pending,
            None => self.users.is_empty(),
        };
        if seed {
            let name = self.config.default_user.clone();
            check_user_name(&name)?;
            let user = User {
                name: name.clone(),
                hash: StoredHash::new(&self.config.default_pass)?,
                tags: vec![TAG_ADMINISTRATOR.to_string()],
            };
            if let Some(d) = self.durability() {
                let perm = PermissionRow {
                    user: name.clone(),
                    vhost: DEFAULT_VHOST.into(),
                    configure: ".*".into(),
                    write: ".*".into(),
                    read: ".*".into(),
                };
                d.meta("default user", |m| {
                    m.seed_default_user(&to_def(&user), &perm)
                })?;
            }
            self.users.put_user(user);
            self.users
                .put_permission(&name, DEFAULT_VHOST, full_access())?;
            log::info!("created default user '{name}' (administrator, full access to '/')");
        }
        Ok(())
    }

    /// Checks a login: throttling of the source address, then the password (argon2, or a
    /// RabbitMQ hash that is then replaced by ours), then the loopback-only rule for
    /// `guest` (RabbitMQ's `loopback_users`). Failures are logged with the peer address,
    /// never with the password.
    ///
    /// # Errors
    /// 403 ACCESS_REFUSED for a wrong user name or password, a user that may only connect
    /// from loopback, or an address refused for now after repeated failures.
    pub fn login(&self, user: &str, password: &str, peer: &SocketAddr) -> Result<(), BrokerError> {
        if let LoginStep::Done(result) = self.login_quick(user, password, peer) {
            return result;
        }
        let ip = peer.ip();
        let known = self.users.user(user);
        let ok = match &known {
            Some(u) => {
                let ok = u.hash.verify(password);
                if ok {
                    self.users.remember_verified(user, password);
                    if u.hash.needs_rehash() {
                        self.rehash(u, password);
                    }
                }
                ok
            }
            None => {
                if let Some(decoy) = decoy_hash() {
                    decoy.verify(password);
                }
                false
            }
        };
        if !ok {
            let failures = self.login_throttle.failed(ip, user, Instant::now());
            log::warn!(
                "login refused for user '{}' from {peer}: wrong user name or password \
                 ({failures} recent failures for this user from {ip})",
                user.escape_debug()
            );
            return Err(BrokerError::access_refused(format!(
                "login refused for user '{user}': wrong user name or password"
            )));
        }
        self.accepted(user, peer)
    }

    /// Decides a login without a password check when it can: refused while its address
    /// and user are throttled (§3.4), accepted when the password is the one that last
    /// verified for the user; otherwise [`LoginStep::Slow`].
    pub fn login_quick(&self, user: &str, password: &str, peer: &SocketAddr) -> LoginStep {
        let ip = peer.ip();
        if let Verdict::Wait {
            retry_after_ms,
            first,
        } = self.login_throttle.verdict(ip, user, Instant::now())
        {
            if first {
                log::warn!(
                    "logins as user '{}' from {ip} refused for {retry_after_ms} ms after \
                     repeated failures",
                    user.escape_debug()
                );
            }
            return LoginStep::Done(Err(BrokerError::access_refused(format!(
                "login refused: too many failed logins as '{user}' from {ip}; retry in \
                 {retry_after_ms} ms"
            ))));
        }
        if self.users.user(user).is_some() && self.users.verified_before(user, password) {
            return LoginStep::Done(self.accepted(user, peer));
        }
        LoginStep::Slow
    }

    /// The checks after a right password: the loopback-only rule, then the throttle is
    /// cleared for this address and user.
    fn accepted(&self, user: &str, peer: &SocketAddr) -> Result<(), BrokerError> {
        let ip = peer.ip();
        let loopback = ip.is_loopback() && !self.config.nonlocal_peers.contains(&ip);
        if !loopback && self.config.loopback_users.iter().any(|u| u == user) {
            log::warn!(
                "login refused for user '{}' from {peer}: loopback-only user",
                user.escape_debug()
            );
            return Err(BrokerError::access_refused(format!(
                "user '{user}' can only connect via localhost"
            )));
        }
        self.login_throttle.succeeded(ip, user);
        Ok(())
    }

    /// Starts the thread that checks passwords (`relaymq-auth`); without it,
    /// [`Broker::submit_login`] checks on the caller's thread.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start_login_checker(self: &Arc<Self>) -> std::io::Result<()> {
        let checker = LoginChecker::start(Arc::downgrade(self))?;
        let _ = self.login_checker.set(checker);
        Ok(())
    }

    /// Checks a login that needs its password checked on the checker thread; `job.done`
    /// gets the outcome there (or at once when the queue is full).
    pub fn submit_login(&self, job: LoginJob) {
        match self.login_checker.get() {
            Some(c) => c.submit(job),
            None => {
                let result = self.login(&job.user, &job.password, &job.peer);
                (job.done)(result);
            }
        }
    }

    /// Replaces an imported hash by an argon2id one after a successful login with it.
    fn rehash(&self, user: &User, password: &str) {
        let Ok(hash) = StoredHash::new(password) else {
            return;
        };
        let from = user.hash.algorithm.clone();
        let updated = User {
            hash,
            ..user.clone()
        };
        let stored = match self.durability() {
            Some(d) => d.meta("user", |m| m.put_user(&to_def(&updated))).is_ok(),
            None => true,
        };
        if stored {
            self.users.put_user(updated);
            self.users.remember_verified(&user.name, password);
            log::info!(
                "user '{}': password hash upgraded from {from} to argon2id",
                user.name
            );
        }
    }

    /// The vhost `vhost` for a connection of `user` being opened.
    ///
    /// # Errors
    /// 402 INVALID_PATH when it does not exist; 530 NOT_ALLOWED when the user has no
    /// permissions there (RabbitMQ: "access to vhost 'v' refused for user 'u'").
    pub fn open_vhost(&self, user: &str, vhost: &str) -> Result<Arc<VirtualHost>, BrokerError> {
        let vh = self.vhost_for_open(vhost)?;
        if self.users.permissions(user, vhost).is_none() {
            log::warn!("access to vhost '{vhost}' refused for user '{user}'");
            return Err(vhost_refused(vhost, user));
        }
        Ok(vh)
    }

    /// The vhost `vhost` for a native-protocol connection of `user` being opened
    /// (`relaymq-cli`, the client library): as [`Broker::open_vhost`], except that an
    /// administrator may open a vhost without permissions there, to administer it (set
    /// its permissions and policies, list it), as `rabbitmqctl -p VHOST` and the
    /// management API work on any vhost. Declaring, publishing and consuming there still
    /// need permissions: without them every such request is refused with 403. AMQP 0-9-1
    /// connections keep RabbitMQ's rule ([`Broker::open_vhost`]).
    ///
    /// # Errors
    /// As [`Broker::open_vhost`] for a user without the administrator tag.
    pub fn open_vhost_to_administer(
        &self,
        user: &str,
        vhost: &str,
    ) -> Result<Arc<VirtualHost>, BrokerError> {
        let is_admin = self
            .users
            .user(user)
            .is_some_and(|u| u.has_tag(TAG_ADMINISTRATOR));
        if is_admin && self.users.permissions(user, vhost).is_none() {
            let vh = self.vhost_for_open(vhost)?;
            log::info!(
                "administrator '{user}' opened vhost '{vhost}' without permissions there, to administer it"
            );
            return Ok(vh);
        }
        self.open_vhost(user, vhost)
    }

    /// Checks that `user` has one of `tags` for the admin operation `what`.
    ///
    /// # Errors
    /// 403 ACCESS_REFUSED naming the operation and the tags it needs; the refusal is logged.
    pub fn require_tag(&self, user: &str, tags: &[&str], what: &str) -> Result<(), BrokerError> {
        let has = self
            .users
            .user(user)
            .is_some_and(|u| tags.iter().any(|t| u.has_tag(t)));
        if has {
            return Ok(());
        }
        log::warn!(
            "{what} refused for user '{user}': needs tag {}",
            tags.join(" or ")
        );
        Err(BrokerError::access_refused(format!(
            "{what} refused for user '{user}': needs the {} tag",
            tags.join(" or ")
        )))
    }

    /// Checks that `user` may administer users, permissions and vhosts.
    ///
    /// # Errors
    /// As [`Broker::require_tag`].
    pub fn require_administrator(&self, user: &str, what: &str) -> Result<(), BrokerError> {
        self.require_tag(user, &[TAG_ADMINISTRATOR], what)
    }

    /// Checks that `user` may list the broker's objects (`administrator`, `monitoring` or
    /// `management`, as RabbitMQ's management tags).
    ///
    /// # Errors
    /// As [`Broker::require_tag`].
    pub fn require_management(&self, user: &str, what: &str) -> Result<(), BrokerError> {
        self.require_tag(
            user,
            &[TAG_ADMINISTRATOR, TAG_MONITORING, TAG_MANAGEMENT],
            what,
        )
    }

    /// Creates a user (`relaymq-cli user add`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED for an existing user, a bad name, tag, password or hash;
    /// 541 when the store fails.
    pub fn add_user(
        &self,
        name: &str,
        credential: &Credential,
        tags: Vec<String>,
    ) -> Result<(), BrokerError> {
        check_user_name(name)?;
        if self.users.user(name).is_some() {
            return Err(BrokerError::precondition(format!(
                "user '{name}' already exists"
            )));
        }
        let hash = match credential {
            Credential::Password(p) => StoredHash::new(p)?,
            Credential::Hash(algorithm, hash) => StoredHash::import(algorithm, hash)?,
        };
        let user = User {
            name: name.to_string(),
            hash,
            tags,
        };
        if let Some(d) = self.durability() {
            d.meta("user", |m| m.put_user(&to_def(&user)))?;
        }
        self.users.put_user(user);
        Ok(())
    }

    /// Replaces an existing user's password hash and tags, as RabbitMQ's definitions import
    /// overwrites a user it already has (`import definitions`).
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown user; 406 for a hash of an unknown algorithm or shape;
    /// 541 when the store fails.
    pub fn replace_user(
        &self,
        name: &str,
        algorithm: &str,
        hash: &str,
        tags: Vec<String>,
    ) -> Result<(), BrokerError> {
        let user = self.user_or_404(name)?;
        let updated = User {
            hash: StoredHash::import(algorithm, hash)?,
            tags,
            ..user
        };
        if let Some(d) = self.durability() {
            d.meta("user", |m| m.put_user(&to_def(&updated)))?;
        }
        self.users.put_user(updated);
        Ok(())
    }

    /// Changes a user's password (`relaymq-cli user passwd`).
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown user; 406 for a bad password; 541 when the store fails.
    pub fn change_password(&self, name: &str, password: &str) -> Result<(), BrokerError> {
        let user = self.user_or_404(name)?;
        let updated = User {
            hash: StoredHash::new(password)?,
            ..user
        };
        if let Some(d) = self.durability() {
            d.meta("user", |m| m.put_user(&to_def(&updated)))?;
        }
        self.users.put_user(updated);
        Ok(())
    }

    /// Replaces a user's tags.
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown user; 541 when the store fails.
    pub fn set_user_tags(&self, name: &str, tags: Vec<String>) -> Result<(), BrokerError> {
        let user = self.user_or_404(name)?;
        let updated = User { tags, ..user };
        if let Some(d) = self.durability() {
            d.meta("user", |m| m.put_user(&to_def(&updated)))?;
        }
        self.users.put_user(updated);
        Ok(())
    }

    /// Deletes a user and its permissions; its open connections are closed with 320
    /// CONNECTION_FORCED, as RabbitMQ does.
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown user; 541 when the store fails.
    pub fn delete_user(&self, name: &str) -> Result<(), BrokerError> {
        self.user_or_404(name)?;
        if let Some(d) = self.durability() {
            d.meta("user deletion", |m| m.delete_user(name))?;
        }
        self.users.remove_user(name);
        for c in self.connections() {
            if c.user == name {
                c.sink.force_close(
                    ReplyCode::ConnectionForced,
                    &format!("user '{name}' was deleted"),
                );
            }
        }
        Ok(())
    }

    /// Sets `user`'s permissions in `vhost`; they apply to its open connections at their
    /// next operation.
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown user or vhost; 406 for a pattern that does not
    /// compile; 541 when the store fails.
    pub fn set_permission(
        &self,
        user: &str,
        vhost: &str,
        def: PermissionDef,
    ) -> Result<(), BrokerError> {
        self.user_or_404(user)?;
        if self.vhost(vhost).is_none() {
            return Err(BrokerError::not_found(format!("no vhost '{vhost}'")));
        }
        // Compile first: a bad pattern must not reach the store.
        crate::auth::Permissions::compile(&def)?;
        if let Some(d) = self.durability() {
            let row = PermissionRow {
                user: user.into(),
                vhost: vhost.into(),
                configure: def.configure.clone(),
                write: def.write.clone(),
                read: def.read.clone(),
            };
            d.meta("permission", |m| m.put_permission(&row))?;
        }
        self.users.put_permission(user, vhost, def)?;
        Ok(())
    }

    /// Clears `user`'s permissions in `vhost` (its open connections there lose access at
    /// their next operation).
    ///
    /// # Errors
    /// 404 NOT_FOUND when the user has none there; 541 when the store fails.
    pub fn clear_permission(&self, user: &str, vhost: &str) -> Result<(), BrokerError> {
        if self.users.permissions(user, vhost).is_none() {
            return Err(BrokerError::not_found(format!(
                "user '{user}' has no permissions in vhost '{vhost}'"
            )));
        }
        if let Some(d) = self.durability() {
            d.meta("permission", |m| m.delete_permission(user, vhost))?;
        }
        self.users.remove_permission(user, vhost);
        Ok(())
    }

    /// Gives `user` full permissions in a vhost it just created (as RabbitMQ's HTTP API
    /// does for the creating user), unless it has some there already. Returns whether it
    /// granted them.
    ///
    /// # Errors
    /// 541 when the store fails.
    pub fn grant_creator(&self, user: &str, vhost: &str) -> Result<bool, BrokerError> {
        if self.users.user(user).is_none() || self.users.permissions(user, vhost).is_some() {
            return Ok(false);
        }
        self.set_permission(user, vhost, full_access())?;
        Ok(true)
    }

    fn user_or_404(&self, name: &str) -> Result<User, BrokerError> {
        self.users
            .user(name)
            .ok_or_else(|| BrokerError::not_found(format!("no user '{name}'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::password::{rabbit_sha256, RABBIT_SHA256};
    use crate::broker::BrokerConfig;

    fn peer(ip: &str) -> SocketAddr {
        format!("{ip}:40000").parse().unwrap()
    }

    fn broker() -> Broker {
        let b = Broker::new(BrokerConfig::default());
        b.load_access().unwrap();
        b
    }

    #[test]
    fn the_default_user_is_seeded_as_administrator_and_guest_is_loopback_only() {
        let b = broker();
        b.login("guest", "guest", &peer("127.0.0.1")).unwrap();
        b.require_administrator("guest", "user add").unwrap();
        let e = b.login("guest", "guest", &peer("192.0.2.7")).unwrap_err();
        assert_eq!(e.code, ReplyCode::AccessRefused);
        assert!(
            e.text.contains("can only connect via localhost"),
            "{}",
            e.text
        );
        let e = b.login("guest", "nope", &peer("127.0.0.1")).unwrap_err();
        assert!(e.text.contains("wrong user name or password"));
    }

    #[test]
    fn an_imported_rabbitmq_hash_logs_in_and_is_replaced_by_argon2() {
        let b = broker();
        let hash = rabbit_sha256([7, 7, 7, 7], "wonderland");
        b.add_user(
            "alice",
            &Credential::Hash(RABBIT_SHA256.into(), hash),
            vec![],
        )
        .unwrap();
        b.login("alice", "wonderland", &peer("192.0.2.1")).unwrap();
        let u = b.users.user("alice").unwrap();
        assert_eq!(u.hash.algorithm, "argon2id");
        assert!(u.hash.verify("wonderland"));
        // A different password does not pass through the verified memory.
        assert!(b.login("alice", "wonderlanD", &peer("192.0.2.1")).is_err());
    }

    #[test]
    fn repeated_failures_from_one_address_are_refused_without_checking() {
        let b = broker();
        let from = peer("192.0.2.9");
        for _ in 0..crate::auth::throttle::FAILED_LOGINS_FREE {
            let e = b.login("guest", "x", &from).unwrap_err();
            assert!(e.text.contains("wrong user name or password"));
        }
        let e = b.login("guest", "guest", &from).unwrap_err();
        assert!(e.text.contains("too many failed logins"), "{}", e.text);
        // Another address is unaffected.
        b.login("guest", "guest", &peer("127.0.0.1")).unwrap();
    }

    #[test]
    fn vhost_access_needs_a_permission_entry_and_admin_ops_need_the_tag() {
        let b = broker();
        b.add_user("bob", &Credential::Password("pw".into()), vec![])
            .unwrap();
        let e = b.open_vhost("bob", "/").unwrap_err();
        assert_eq!(e.code, ReplyCode::NotAllowed);
        assert_eq!(e.text, "access to vhost '/' refused for user 'bob'");
        b.set_permission(
            "bob",
            "/",
            PermissionDef {
                configure: "".into(),
                write: "".into(),
                read: "".into(),
            },
        )
        .unwrap();
        b.open_vhost("bob", "/").unwrap();
        let e = b.require_administrator("bob", "user add").unwrap_err();
        assert_eq!(e.code, ReplyCode::AccessRefused);
        assert!(b
            .add_user("bob", &Credential::Password("x".into()), vec![])
            .is_err());
        b.delete_user("bob").unwrap();
        assert!(b.open_vhost("bob", "/").is_err());
        assert_eq!(b.delete_user("bob").unwrap_err().code, ReplyCode::NotFound);
    }
}
