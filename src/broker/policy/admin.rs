//! The broker's policy operations, the API `policy.set` /
//! `policy.clear` / `list policies` and the import and export of definitions use:
//! [`Broker::policies`], [`Broker::set_policy`], [`Broker::clear_policy`].

use crate::auth::users::{TAG_ADMINISTRATOR, TAG_POLICYMAKER};
use crate::broker::policy::{Policy, PolicyDef};
use crate::broker::Broker;
use crate::error::BrokerError;

impl Broker {
    /// Every policy of every vhost as written, sorted by (vhost, name): what `list
    /// policies` shows and what an export of definitions writes.
    pub fn policies(&self) -> Vec<PolicyDef> {
        let mut all: Vec<PolicyDef> = self
            .vhosts()
            .iter()
            .flat_map(|vh| vh.policies())
            .map(|p| p.def.clone())
            .collect();
        all.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        all
    }

    /// Validates `def` (the same checks as [`Broker::set_policy`]) without setting it;
    /// returns the definition keys RelayMQ does not act on, sorted (an import can report
    /// them before it changes anything).
    ///
    /// # Errors
    /// As [`Policy::compile`]: 406 naming the bad name, pattern, apply-to or key.
    pub fn check_policy(def: &PolicyDef) -> Result<Vec<String>, BrokerError> {
        Policy::compile(def.clone()).map(|p| p.not_honoured)
    }

    /// Sets (adds or replaces) a policy in `def.vhost`, commits it to `meta.db` and applies
    /// it at once to every queue of the vhost (RabbitMQ's `set_policy`). Returns the keys
    /// of its definition RelayMQ stores but does not act on ([`crate::broker::policy::NOT_HONOURED_KEYS`]),
    /// sorted, so the caller can report them; they are logged too.
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown vhost; 406 PRECONDITION_FAILED naming a bad name,
    /// pattern, apply-to or definition key, or a vhost at
    /// [`crate::broker::policy::POLICIES_PER_VHOST_MAX`]; 541 when `meta.db` fails.
    pub fn set_policy(&self, def: PolicyDef) -> Result<Vec<String>, BrokerError> {
        let vh = self
            .vhost(&def.vhost)
            .ok_or_else(|| BrokerError::not_found(format!("no vhost '{}'", def.vhost)))?;
        let policy = Policy::compile(def)?;
        let not_honoured = policy.not_honoured.clone();
        let (name, vhost) = (policy.def.name.clone(), policy.def.vhost.clone());
        vh.set_policy(policy)?;
        if !not_honoured.is_empty() {
            log::warn!(
                "policy '{name}' in vhost '{vhost}': key(s) {} stored but not acted on by \
                 RelayMQ",
                not_honoured.join(", ")
            );
        }
        Ok(not_honoured)
    }

    /// Clears a policy (RabbitMQ's `clear_policy`): its queues fall back to the next
    /// matching policy or their arguments alone, at once.
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown vhost or policy; 541 when `meta.db` fails.
    pub fn clear_policy(&self, vhost: &str, name: &str) -> Result<(), BrokerError> {
        let vh = self
            .vhost(vhost)
            .ok_or_else(|| BrokerError::not_found(format!("no vhost '{vhost}'")))?;
        vh.clear_policy(name)?;
        Ok(())
    }

    /// Checks that `user` may manage the policies of `vhost`: RabbitMQ's `policymaker` or
    /// `administrator` tag, and a `policymaker` also needs permissions in the vhost.
    ///
    /// # Errors
    /// 403 ACCESS_REFUSED naming the operation and what is missing.
    pub fn require_policymaker(
        &self,
        user: &str,
        vhost: &str,
        what: &str,
    ) -> Result<(), BrokerError> {
        self.require_tag(user, &[TAG_POLICYMAKER, TAG_ADMINISTRATOR], what)?;
        let is_admin = self
            .users()
            .user(user)
            .is_some_and(|u| u.has_tag(TAG_ADMINISTRATOR));
        if !is_admin && self.users().permissions(user, vhost).is_none() {
            return Err(BrokerError::access_refused(format!(
                "{what} refused for user '{user}': no access to vhost '{vhost}'"
            )));
        }
        Ok(())
    }
}
