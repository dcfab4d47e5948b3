//! Operator policies (RabbitMQ's `rabbitmqctl set_operator_policy`, `rabbit_policy`
//! `operator_policy`): policies an operator sets over what users set, restricted to a few
//! keys ([`OPERATOR_POLICY_KEYS`]). The winning operator policy of a queue is merged with
//! its winning user policy key by key ([`merge_definitions`]): the lower value of each
//! numeric key wins, the operator's `overflow` wins. The merged settings are what the queue
//! acts on ([`crate::broker::queue::settings::QueueSettings::effective`]).

use crate::broker::policy::{self, Policy, PolicyDef, POLICIES_PER_VHOST_MAX};
use crate::broker::queue::queue_type::QueueType;
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::error::BrokerError;
use serde_json::{Map, Value};
use std::sync::{Arc, MutexGuard};

/// The keys an operator policy may set (RabbitMQ 4.x `rabbit_policies`
/// `operator_policy_validator`). `max-in-memory-length`, `max-in-memory-bytes` and
/// `queue-version` are stored and reported but not acted on, as in a user policy.
pub const OPERATOR_POLICY_KEYS: [&str; 12] = [
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
    "queue-version",
    "overflow",
    "delayed-retry-type",
    "delayed-retry-min",
    "delayed-retry-max",
];

/// Operator policies one vhost may hold at most (as user policies).
pub const OPERATOR_POLICIES_PER_VHOST_MAX: usize = POLICIES_PER_VHOST_MAX;

/// Validates and compiles an operator policy: a policy whose definition keys are all in
/// [`OPERATOR_POLICY_KEYS`].
///
/// # Errors
/// 406 PRECONDITION_FAILED naming a key outside the set, or anything
/// [`Policy::compile`] refuses.
pub fn compile(def: PolicyDef) -> Result<Policy, BrokerError> {
    let refused: Vec<String> = def
        .definition
        .keys()
        .filter(|k| !OPERATOR_POLICY_KEYS.contains(&k.as_str()))
        .map(|k| format!("'{k}'"))
        .collect();
    if !refused.is_empty() {
        return Err(BrokerError::precondition(format!(
            "Validation failed: operator policy definition key(s) {} are not recognised \
             operator policy settings (allowed: {})",
            refused.join(", "),
            OPERATOR_POLICY_KEYS.join(", ")
        )));
    }
    Policy::compile(def)
}

/// The definition a queue acts on: `policy`'s merged with `operator`'s
/// (`rabbit_policy:merge_operator_definitions/2`, `rabbit_policies:merge_policy_value/3`):
/// a key in one only is taken as is; for a key in both, the smaller number (`delivery-limit`
/// included: RelayMQ has no negative one) except `delayed-retry-min`, the larger
/// (`rabbit_quorum_queue:merge_policy_value/3`), and the operator's value for anything
/// else (`overflow`, `queue-version`, `delayed-retry-type`).
pub fn merge_definitions(policy: Option<&Policy>, operator: Option<&Policy>) -> Map<String, Value> {
    let mut out = policy.map(|p| p.def.definition.clone()).unwrap_or_default();
    let Some(op) = operator else { return out };
    for (key, op_value) in &op.def.definition {
        let merged = match (out.get(key), op_value) {
            (Some(Value::Number(a)), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
                (Some(x), Some(y)) if key == "delayed-retry-min" && x >= y => {
                    Value::Number(a.clone())
                }
                (Some(_), Some(_)) if key == "delayed-retry-min" => op_value.clone(),
                (Some(x), Some(y)) if x <= y => Value::Number(a.clone()),
                _ => op_value.clone(),
            },
            _ => op_value.clone(),
        };
        out.insert(key.clone(), merged);
    }
    out
}

impl VirtualHost {
    pub(crate) fn operator_policy_list(&self) -> MutexGuard<'_, Vec<Arc<Policy>>> {
        self.operator_policies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Every operator policy of the vhost, sorted by name.
    pub fn operator_policies(&self) -> Vec<Arc<Policy>> {
        let mut all = self.operator_policy_list().clone();
        all.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        all
    }

    /// The operator policy that applies to queue `name` of type `queue_type` now, if any.
    pub fn operator_policy_for_queue(
        &self,
        name: &str,
        queue_type: QueueType,
    ) -> Option<Arc<Policy>> {
        policy::for_queue(&self.operator_policy_list(), name, queue_type).cloned()
    }

    /// Adds an operator policy at recovery (no commit, no queue yet).
    pub(crate) fn restore_operator_policy(&self, policy: Policy) {
        self.operator_policy_list().push(Arc::new(policy));
    }

    /// Sets (adds or replaces) an operator policy and applies it at once to every queue of
    /// the vhost; returns whether it replaced one.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED at [`OPERATOR_POLICIES_PER_VHOST_MAX`]; 541 INTERNAL_ERROR
    /// when `meta.db` refuses the commit (nothing changed).
    pub fn set_operator_policy(&self, policy: Policy) -> Result<bool, BrokerError> {
        let policy = Arc::new(policy);
        let changes = self.changes();
        let replaces = {
            let list = self.operator_policy_list();
            let replaces = list.iter().any(|p| p.def.name == policy.def.name);
            if !replaces && list.len() >= OPERATOR_POLICIES_PER_VHOST_MAX {
                return Err(BrokerError::precondition(format!(
                    "vhost '{}' has {OPERATOR_POLICIES_PER_VHOST_MAX} operator policies, the \
                     most allowed",
                    self.name
                )));
            }
            replaces
        };
        let row = policy.def.to_row();
        self.persist("operator policy", |m| m.put_operator_policy(&row))?;
        {
            let mut list = self.operator_policy_list();
            list.retain(|p| p.def.name != policy.def.name);
            list.push(Arc::clone(&policy));
        }
        let dropped = self.reevaluate_queues();
        drop(changes);
        self.dead_letter_dropped(dropped);
        Ok(replaces)
    }

    /// Sets operator policies without committing them (a definitions import commits them
    /// with the rest of the file), as [`VirtualHost::install_policies`].
    pub(crate) fn install_operator_policies(
        &self,
        policies: Vec<Policy>,
    ) -> Vec<(
        Arc<crate::broker::queue::Queue>,
        Vec<crate::broker::queue::Leaving>,
    )> {
        if policies.is_empty() {
            return Vec::new();
        }
        {
            let mut list = self.operator_policy_list();
            for policy in policies {
                list.retain(|p| p.def.name != policy.def.name);
                list.push(Arc::new(policy));
            }
        }
        self.reevaluate_queues()
    }

    /// Clears an operator policy; its queues fall back at once.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the vhost has no operator policy of that name; 541 when
    /// `meta.db` refuses the commit.
    pub fn clear_operator_policy(&self, name: &str) -> Result<(), BrokerError> {
        let changes = self.changes();
        if !self
            .operator_policy_list()
            .iter()
            .any(|p| p.def.name == name)
        {
            return Err(BrokerError::not_found(format!(
                "operator policy '{name}' does not exist in vhost '{}'",
                self.name
            )));
        }
        let vhost = self.name.to_string();
        self.persist("operator policy", |m| {
            m.delete_operator_policy(&vhost, name)
        })?;
        self.operator_policy_list().retain(|p| p.def.name != name);
        let dropped = self.reevaluate_queues();
        drop(changes);
        self.dead_letter_dropped(dropped);
        Ok(())
    }
}

impl Broker {
    /// Every operator policy of every vhost as written, sorted by (vhost, name).
    pub fn operator_policies(&self) -> Vec<PolicyDef> {
        let mut all: Vec<PolicyDef> = self
            .vhosts()
            .iter()
            .flat_map(|vh| vh.operator_policies())
            .map(|p| p.def.clone())
            .collect();
        all.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        all
    }

    /// Sets an operator policy in `def.vhost` (RabbitMQ's `set_operator_policy`), commits it
    /// and applies it at once; returns whether it replaced one. Keys RelayMQ does not act on
    /// are logged as "stored but not acted on".
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown vhost; 406 as [`compile`]; 541 when `meta.db` fails.
    pub fn set_operator_policy(&self, def: PolicyDef) -> Result<bool, BrokerError> {
        let vh = self
            .vhost(&def.vhost)
            .ok_or_else(|| BrokerError::not_found(format!("no vhost '{}'", def.vhost)))?;
        let policy = compile(def)?;
        let not_honoured = policy.not_honoured.clone();
        let (name, vhost) = (policy.def.name.clone(), policy.def.vhost.clone());
        let replaced = vh.set_operator_policy(policy)?;
        if !not_honoured.is_empty() {
            log::warn!(
                "operator policy '{name}' in vhost '{vhost}': key(s) {} stored but not acted \
                 on by RelayMQ",
                not_honoured.join(", ")
            );
        }
        Ok(replaced)
    }

    /// Clears an operator policy (RabbitMQ's `clear_operator_policy`).
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown vhost or operator policy; 541 when `meta.db` fails.
    pub fn clear_operator_policy(&self, vhost: &str, name: &str) -> Result<(), BrokerError> {
        let vh = self
            .vhost(vhost)
            .ok_or_else(|| BrokerError::not_found(format!("no vhost '{vhost}'")))?;
        vh.clear_operator_policy(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(definition: Value) -> PolicyDef {
        PolicyDef {
            vhost: "/".into(),
            name: "op".into(),
            pattern: ".*".into(),
            apply_to: "queues".into(),
            priority: 0,
            definition: definition.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn only_operator_keys_are_accepted() {
        let e = compile(def(serde_json::json!({"dead-letter-exchange": "x"}))).unwrap_err();
        assert!(e.text.contains("'dead-letter-exchange'"), "{}", e.text);
        let p = compile(def(
            serde_json::json!({"max-length": 3, "queue-version": 2}),
        ))
        .unwrap();
        assert_eq!(p.settings.max_length, Some(3));
        assert_eq!(p.not_honoured, vec!["queue-version".to_string()]);
    }

    #[test]
    fn merge_takes_the_lower_number_and_the_operators_overflow() {
        let user = Policy::compile(PolicyDef {
            name: "u".into(),
            ..def(serde_json::json!({"max-length": 10, "message-ttl": 100,
                                    "overflow": "drop-head", "dead-letter-exchange": "d"}))
        })
        .unwrap();
        let op = compile(def(
            serde_json::json!({"max-length": 5, "message-ttl": 1000,
                                                "overflow": "reject-publish", "expires": 9}),
        ))
        .unwrap();
        let m = merge_definitions(Some(&user), Some(&op));
        assert_eq!(
            Value::Object(m),
            serde_json::json!({"max-length": 5, "message-ttl": 100, "overflow": "reject-publish",
                               "dead-letter-exchange": "d", "expires": 9})
        );
        assert_eq!(merge_definitions(None, Some(&op)), op.def.definition);
        assert!(merge_definitions(None, None).is_empty());
    }
}
