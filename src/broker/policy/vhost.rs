//! A vhost's policies: set, clear, and the re-evaluation of every queue
//! when they change.
//!
//! Locks (docs/architecture.md §8): a change takes the vhost changes lock, commits to
//! `meta.db`, replaces the policy list (a leaf mutex), then swaps each affected queue's
//! settings (a leaf lock) and trims it under its queue lock, all under the changes lock,
//! so a queue declared meanwhile either sees the new list or is re-evaluated after it is
//! in the map. Messages a lowered length limit drops are dead-lettered after the changes
//! lock is released, like any other dead letter.

use crate::broker::dead_letter::jobs::{self, jobs};
use crate::broker::policy::{self, Policy, POLICIES_PER_VHOST_MAX};
use crate::broker::queue::queue_type::QueueType;
use crate::broker::queue::settings::QueueSettings;
use crate::broker::queue::{Leaving, Queue};
use crate::broker::vhost::VirtualHost;
use crate::error::BrokerError;
use std::sync::{Arc, MutexGuard};

impl VirtualHost {
    fn policy_list(&self) -> MutexGuard<'_, Vec<Arc<Policy>>> {
        self.policies.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every policy of the vhost, sorted by name.
    pub fn policies(&self) -> Vec<Arc<Policy>> {
        let mut all = self.policy_list().clone();
        all.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        all
    }

    /// The policy that applies to queue `name` of type `queue_type` now, if any.
    pub fn policy_for_queue(&self, name: &str, queue_type: QueueType) -> Option<Arc<Policy>> {
        policy::for_queue(&self.policy_list(), name, queue_type).cloned()
    }

    /// Gives a queue that is not shared yet (declare, recovery) its effective settings.
    pub(crate) fn apply_policies(&self, q: &Queue) {
        let winner = self.policy_for_queue(&q.name, q.queue_type);
        let operator = self.operator_policy_for_queue(&q.name, q.queue_type);
        // A fresh queue holds nothing to trim; a recovered one is trimmed by its next
        // publish, as with arguments.
        let _ = q.apply_settings(QueueSettings::effective(&q.arguments, winner, operator));
    }

    /// Adds a policy at recovery (no commit, no queue yet).
    pub(crate) fn restore_policy(&self, policy: Policy) {
        self.policy_list().push(Arc::new(policy));
    }

    /// Sets (adds or replaces) a policy and applies it at once to every queue of the vhost
    /// (RabbitMQ's `set_policy`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED when the vhost holds [`POLICIES_PER_VHOST_MAX`] policies
    /// already; 541 INTERNAL_ERROR when `meta.db` refuses the commit (nothing changed).
    pub fn set_policy(&self, policy: Policy) -> Result<(), BrokerError> {
        let policy = Arc::new(policy);
        let changes = self.changes();
        {
            let list = self.policy_list();
            let replaces = list.iter().any(|p| p.def.name == policy.def.name);
            if !replaces && list.len() >= POLICIES_PER_VHOST_MAX {
                return Err(BrokerError::precondition(format!(
                    "vhost '{}' has {POLICIES_PER_VHOST_MAX} policies, the most allowed",
                    self.name
                )));
            }
        }
        let row = policy.def.to_row();
        self.persist("policy", |m| m.put_policy(&row))?;
        {
            let mut list = self.policy_list();
            list.retain(|p| p.def.name != policy.def.name);
            list.push(Arc::clone(&policy));
        }
        let dropped = self.reevaluate_queues();
        drop(changes);
        self.dead_letter_dropped(dropped);
        Ok(())
    }

    /// Sets (adds or replaces) `policies` together, without committing them (a definitions
    /// import commits them with the rest of the file), and gives every queue whose winning
    /// policy changed its new settings. The caller holds the changes lock
    /// ([`VirtualHost::changes`]) and has checked [`POLICIES_PER_VHOST_MAX`]; it passes
    /// what this returns (what lowered length limits dropped) to
    /// [`VirtualHost::dead_letter_dropped`] once it released that lock.
    pub(crate) fn install_policies(
        &self,
        policies: Vec<Policy>,
    ) -> Vec<(Arc<Queue>, Vec<Leaving>)> {
        if policies.is_empty() {
            return Vec::new();
        }
        {
            let mut list = self.policy_list();
            for policy in policies {
                list.retain(|p| p.def.name != policy.def.name);
                list.push(Arc::new(policy));
            }
        }
        self.reevaluate_queues()
    }

    /// Clears a policy; the queues it applied to fall back to the next matching policy or
    /// their arguments alone (RabbitMQ's `clear_policy`).
    ///
    /// # Errors
    /// 404 NOT_FOUND when the vhost has no policy of that name (RabbitMQ: "Parameter does
    /// not exist"); 541 INTERNAL_ERROR when `meta.db` refuses the commit.
    pub fn clear_policy(&self, name: &str) -> Result<(), BrokerError> {
        let changes = self.changes();
        if !self.policy_list().iter().any(|p| p.def.name == name) {
            return Err(BrokerError::not_found(format!(
                "policy '{name}' does not exist in vhost '{}'",
                self.name
            )));
        }
        let vhost = self.name.to_string();
        self.persist("policy", |m| m.delete_policy(&vhost, name))?;
        self.policy_list().retain(|p| p.def.name != name);
        let dropped = self.reevaluate_queues();
        drop(changes);
        self.dead_letter_dropped(dropped);
        Ok(())
    }

    /// Gives every queue whose winning policy or operator policy changed its new settings
    /// (changes lock held); returns what lowered length limits dropped.
    pub(crate) fn reevaluate_queues(&self) -> Vec<(Arc<Queue>, Vec<Leaving>)> {
        let list = self.policy_list().clone();
        let operator_list = self.operator_policy_list().clone();
        let same = |a: &Option<Arc<Policy>>, b: &Option<Arc<Policy>>| match (a, b) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let mut dropped = Vec::new();
        for q in self.all_queues() {
            let winner = policy::for_queue(&list, &q.name, q.queue_type).cloned();
            let operator = policy::for_queue(&operator_list, &q.name, q.queue_type).cloned();
            let current = q.settings();
            if same(&winner, &current.policy) && same(&operator, &current.operator_policy) {
                continue;
            }
            let out = q.apply_settings(QueueSettings::effective(&q.arguments, winner, operator));
            if !out.is_empty() {
                dropped.push((q, out));
            }
        }
        dropped
    }

    /// Dead-letters (reason `maxlen`) what a lowered length limit dropped; no lock held.
    pub(crate) fn dead_letter_dropped(&self, dropped: Vec<(Arc<Queue>, Vec<Leaving>)>) {
        for (q, leaving) in dropped {
            jobs::run(self, jobs(&q, leaving, "maxlen"));
            q.dispatch();
        }
    }
}
