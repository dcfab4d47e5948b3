//! A queue's effective settings: its declare arguments merged with the one policy that
//! applies to it (RabbitMQ 3.10's `rabbit_amqqueue_process`
//! `process_args_policy`, checked against a running 3.10.8).
//!
//! Precedence per key (docs/operations.md "Policies"):
//!
//! | argument | policy key | effective value |
//! |---|---|---|
//! | `x-message-ttl` | `message-ttl` | the smaller |
//! | `x-expires` | `expires` | the smaller |
//! | `x-max-length` | `max-length` | the smaller |
//! | `x-max-length-bytes` | `max-length-bytes` | the smaller |
//! | `x-delivery-limit` | `delivery-limit` | the smaller (RabbitMQ's quorum queues) |
//! | `x-overflow` | `overflow` | the argument when given |
//! | `x-dead-letter-exchange` | `dead-letter-exchange` | the argument when given |
//! | `x-dead-letter-routing-key` | `dead-letter-routing-key` | the argument when given |
//! | `x-max-priority` | — | the argument only (a policy cannot make a priority queue) |
//! | `x-consumer-timeout` | — | the argument only |
//!
//! An operator policy (`crate::broker::policy::operator`) that applies too is merged in
//! as RabbitMQ 4.x merges it: each numeric key (`message-ttl`, `expires`, `max-length`,
//! `max-length-bytes`, `delivery-limit`) takes the smallest of the argument, the policy
//! and the operator policy; `overflow` is the argument's when given, else the operator
//! policy's, else the policy's.

use crate::broker::dead_letter::DeadLetter;
use crate::broker::policy::{Policy, PolicySettings};
use crate::broker::queue::args::LifecycleArgs;
use crate::broker::queue::length_limit::{LengthLimit, Overflow};
use crate::broker::queue::queue_type::{
    quorum_delivery_limit, DelayedRetry, QueueType, RetrySource,
};
use crate::types::{FieldTable, FieldValue};
use std::sync::Arc;

/// What a queue acts on: arguments and policy merged.
#[derive(Debug, Clone, Default)]
pub struct QueueSettings {
    /// TTL, expiry, delivery limit (merged); priority levels and consumer timeout (the
    /// arguments').
    pub lifecycle: LifecycleArgs,
    /// Length limits and overflow (merged).
    pub length_limit: LengthLimit,
    /// Where dead letters go (merged); `None`: they are dropped.
    pub dead_letter: Option<DeadLetter>,
    /// A quorum queue's delayed retry (RabbitMQ 4.3: `x-delayed-retry-*` arguments,
    /// `delayed-retry-*` policy keys); `None` for classic queues or when disabled.
    pub delayed_retry: Option<DelayedRetry>,
    /// The policy that applies, if any.
    pub policy: Option<Arc<Policy>>,
    /// The operator policy that applies, if any.
    pub operator_policy: Option<Arc<Policy>>,
}

fn smaller<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A policy's `delivery-limit` as a classic queue takes it: a negative one is no limit.
fn classic_limit(s: &PolicySettings) -> Option<u32> {
    s.delivery_limit
        .and_then(|n| u32::try_from(n.max(0)).ok().filter(|_| n >= 0))
}

/// The delayed-retry keys of a queue's policy merged with its operator policy's, as
/// RabbitMQ 4.3 merges them (`rabbit_quorum_queue:merge_policy_value/3`): the operator's
/// type, the larger min, the smaller max.
fn policy_retry(policy: Option<&Policy>, operator: Option<&Policy>) -> RetrySource {
    let user = policy.map(|p| &p.settings);
    let op = operator.map(|p| &p.settings);
    let pick = |a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> i64| match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    };
    RetrySource {
        kind: op
            .and_then(|s| s.delayed_retry_type.clone())
            .or_else(|| user.and_then(|s| s.delayed_retry_type.clone())),
        min: pick(
            user.and_then(|s| s.delayed_retry_min),
            op.and_then(|s| s.delayed_retry_min),
            i64::max,
        ),
        max: pick(
            user.and_then(|s| s.delayed_retry_max),
            op.and_then(|s| s.delayed_retry_max),
            i64::min,
        ),
    }
}

fn text_argument(arguments: &FieldTable, key: &str) -> Option<String> {
    arguments
        .get(key)
        .and_then(FieldValue::as_str)
        .map(str::to_string)
}

impl QueueSettings {
    /// The effective settings of a queue declared with `arguments` (already validated at
    /// declare; an argument that no longer parses counts as absent) under `policy` and
    /// `operator_policy`.
    pub fn effective(
        arguments: &FieldTable,
        policy: Option<Arc<Policy>>,
        operator_policy: Option<Arc<Policy>>,
    ) -> QueueSettings {
        let queue_type = QueueType::of(arguments);
        let mut lifecycle = LifecycleArgs::for_type(arguments, queue_type).unwrap_or_default();
        let mut length_limit = LengthLimit::from_arguments(arguments).unwrap_or_default();
        let mut exchange = text_argument(arguments, "x-dead-letter-exchange");
        let mut routing_key = text_argument(arguments, "x-dead-letter-routing-key");
        if let Some(p) = &policy {
            let s = &p.settings;
            lifecycle.message_ttl_ms = smaller(lifecycle.message_ttl_ms, s.message_ttl_ms);
            lifecycle.expires_ms = smaller(lifecycle.expires_ms, s.expires_ms);
            lifecycle.delivery_limit = smaller(lifecycle.delivery_limit, classic_limit(s));
            length_limit.max_messages = smaller(length_limit.max_messages, s.max_length);
            length_limit.max_bytes = smaller(length_limit.max_bytes, s.max_length_bytes);
            if !arguments.contains_key("x-overflow") {
                if let Some(o) = s.overflow {
                    length_limit.overflow = o;
                }
            }
            exchange = exchange.or_else(|| s.dead_letter_exchange.clone());
            routing_key = routing_key.or_else(|| s.dead_letter_routing_key.clone());
        }
        if let Some(op) = &operator_policy {
            let s = &op.settings;
            lifecycle.message_ttl_ms = smaller(lifecycle.message_ttl_ms, s.message_ttl_ms);
            lifecycle.expires_ms = smaller(lifecycle.expires_ms, s.expires_ms);
            lifecycle.delivery_limit = smaller(lifecycle.delivery_limit, classic_limit(s));
            length_limit.max_messages = smaller(length_limit.max_messages, s.max_length);
            length_limit.max_bytes = smaller(length_limit.max_bytes, s.max_length_bytes);
            if !arguments.contains_key("x-overflow") {
                if let Some(o) = s.overflow {
                    length_limit.overflow = o;
                }
            }
        }
        if queue_type == QueueType::Quorum {
            // RabbitMQ's own rule for quorum queues: negatives mean unlimited, 20 when
            // nothing sets it.
            lifecycle.delivery_limit = quorum_delivery_limit([
                arguments
                    .get("x-delivery-limit")
                    .and_then(FieldValue::as_i64),
                policy.as_ref().and_then(|p| p.settings.delivery_limit),
                operator_policy
                    .as_ref()
                    .and_then(|p| p.settings.delivery_limit),
            ]);
            // A quorum queue has no `reject-publish-dlx`: RabbitMQ logs and drops from the
            // head instead.
            if length_limit.overflow == Overflow::RejectPublishDlx {
                length_limit.overflow = Overflow::DropHead;
            }
        }
        // A routing key without an exchange dead-letters nothing (RabbitMQ).
        let dead_letter = exchange.map(|exchange| DeadLetter {
            exchange,
            routing_key,
        });
        let delayed_retry = if queue_type == QueueType::Quorum {
            DelayedRetry::resolve(
                &RetrySource::of_arguments(arguments),
                &policy_retry(policy.as_deref(), operator_policy.as_deref()),
            )
        } else {
            None
        };
        QueueSettings {
            lifecycle,
            length_limit,
            dead_letter,
            delayed_retry,
            policy,
            operator_policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::policy::PolicyDef;

    fn policy(definition: serde_json::Value) -> Option<Arc<Policy>> {
        Some(Arc::new(
            Policy::compile(PolicyDef {
                vhost: "/".into(),
                name: "p".into(),
                pattern: ".*".into(),
                apply_to: "all".into(),
                priority: 0,
                definition: definition.as_object().cloned().unwrap_or_default(),
            })
            .unwrap(),
        ))
    }

    fn args(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn numeric_limits_take_the_smaller_and_the_rest_the_argument() {
        let p = policy(serde_json::json!({
            "message-ttl": 300, "expires": 1000, "max-length": 2, "max-length-bytes": 50,
            "delivery-limit": 9, "overflow": "drop-head", "dead-letter-exchange": "pol",
            "dead-letter-routing-key": "pk"
        }));
        let a = args(&[
            ("x-message-ttl", FieldValue::I64(60_000)),
            ("x-expires", FieldValue::I64(500)),
            ("x-max-length", FieldValue::I64(5)),
            ("x-delivery-limit", FieldValue::I64(3)),
            ("x-overflow", FieldValue::string("reject-publish")),
            ("x-dead-letter-exchange", FieldValue::string("arg")),
        ]);
        let s = QueueSettings::effective(&a, p.clone(), None);
        assert_eq!(s.lifecycle.message_ttl_ms, Some(300));
        assert_eq!(s.lifecycle.expires_ms, Some(500));
        assert_eq!(s.lifecycle.delivery_limit, Some(3));
        assert_eq!(s.length_limit.max_messages, Some(2));
        assert_eq!(s.length_limit.max_bytes, Some(50));
        assert_eq!(s.length_limit.overflow, Overflow::RejectPublish);
        assert_eq!(
            s.dead_letter,
            Some(DeadLetter {
                exchange: "arg".into(),
                routing_key: Some("pk".into())
            })
        );
        let plain = QueueSettings::effective(&FieldTable::new(), p, None);
        assert_eq!(plain.length_limit.overflow, Overflow::DropHead);
        assert_eq!(plain.dead_letter.unwrap().exchange, "pol");
        let none = QueueSettings::effective(&a, None, None);
        assert_eq!(none.length_limit.max_messages, Some(5));
        assert_eq!(none.lifecycle.message_ttl_ms, Some(60_000));
    }

    #[test]
    fn an_operator_policy_lowers_limits_and_sets_overflow() {
        let user = policy(serde_json::json!({"max-length": 10, "message-ttl": 50,
                                             "overflow": "drop-head"}));
        let op = policy(serde_json::json!({"max-length": 4, "message-ttl": 500,
                                           "overflow": "reject-publish", "expires": 7}));
        let a = args(&[("x-max-length", FieldValue::I64(8))]);
        let s = QueueSettings::effective(&a, user, op.clone());
        assert_eq!(s.length_limit.max_messages, Some(4));
        assert_eq!(s.lifecycle.message_ttl_ms, Some(50));
        assert_eq!(s.lifecycle.expires_ms, Some(7));
        assert_eq!(s.length_limit.overflow, Overflow::RejectPublish);
        assert!(s.operator_policy.is_some());
        let only = QueueSettings::effective(&FieldTable::new(), None, op);
        assert_eq!(only.length_limit.max_messages, Some(4));
    }
}
