//! A session's view of its user's permissions in its vhost, reloaded when the user
//! registry changes (one atomic load per check when nothing changed).

use crate::auth::permission::{refused, Access, Permissions, Resource};
use crate::auth::users::UserRegistry;
use crate::error::BrokerError;
use std::sync::Arc;

/// The permissions one connection works under.
#[derive(Debug)]
pub struct SessionAccess {
    user: String,
    vhost: Arc<str>,
    /// Registry version `perms` was read at.
    version: u64,
    /// `None`: the user has no access to the vhost (any more).
    perms: Option<Arc<Permissions>>,
}

impl SessionAccess {
    /// The access of `user` in `vhost`, read now.
    pub fn new(users: &UserRegistry, user: &str, vhost: Arc<str>) -> SessionAccess {
        let version = users.version();
        SessionAccess {
            perms: users.permissions(user, &vhost),
            user: user.to_string(),
            vhost,
            version,
        }
    }

    /// Whether the registry changed since the permissions were read; reloads them if so.
    pub fn refresh(&mut self, users: &UserRegistry) -> bool {
        let now = users.version();
        if now == self.version {
            return false;
        }
        self.version = now;
        self.perms = users.permissions(&self.user, &self.vhost);
        true
    }

    /// Checks `access` to the resource `name`.
    ///
    /// # Errors
    /// 403 ACCESS_REFUSED naming the resource, vhost and user (RabbitMQ's text); the
    /// refusal is logged with the kind of access that was missing.
    pub fn check(
        &mut self,
        users: &UserRegistry,
        access: Access,
        resource: Resource,
        name: &str,
    ) -> Result<(), BrokerError> {
        self.refresh(users);
        if self
            .perms
            .as_ref()
            .is_some_and(|p| p.allows(access, resource, name))
        {
            return Ok(());
        }
        let err = refused(resource, name, &self.vhost, &self.user);
        log::warn!("{} ({access} permission)", err.text);
        Err(err)
    }
}
