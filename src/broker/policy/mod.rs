//! Policies (RabbitMQ's `rabbitmqctl set_policy`, parameters.html "Policies"): a named,
//! prioritised pattern over queue or exchange names in one vhost, with a definition of
//! settings that apply to every matching object without redeclaring it.
//!
//! This module is the model and its validation, shared by `policy.set` and the import of
//! definitions: [`Policy::compile`] checks the name, pattern (RabbitMQ's regular-expression
//! dialect, lookarounds included, through `fancy-regex`), apply-to, and every key of the
//! definition. The settings a policy gives a queue, and how they combine with the queue's
//! own arguments, are in [`crate::broker::queue::settings`]; docs/operations.md "Policies"
//! is the user's page.

pub mod admin;
pub mod operator;
pub mod vhost;

use crate::auth::permission::{REGEX_BACKTRACK_STEPS_MAX, REGEX_COMPILED_BYTES_MAX};
use crate::broker::queue::length_limit::Overflow;
use crate::broker::queue::queue_type::QueueType;
use crate::error::BrokerError;
use crate::storage::meta_policies::PolicyRow;
use fancy_regex::Regex;
use serde_json::{Map, Value};

/// Longest policy pattern accepted, in bytes.
pub const POLICY_PATTERN_BYTES_MAX: usize = 4096;

/// Longest policy definition accepted, as JSON text, in bytes.
pub const POLICY_DEFINITION_BYTES_MAX: usize = 64 * 1024;

/// Policies one vhost may hold at most.
pub const POLICIES_PER_VHOST_MAX: usize = 1024;

/// Longest policy name, in bytes (an AMQP shortstr, like every name).
pub const POLICY_NAME_BYTES_MAX: usize = 255;

/// Definition keys RabbitMQ accepts that RelayMQ stores, lists and exports but does not
/// act on (alternate exchanges by policy: only the exchange argument is honoured; mirroring, lazy mode,
/// stream and quorum-queue settings): a definitions file from RabbitMQ
/// imports with them, and they are reported by name.
pub const NOT_HONOURED_KEYS: [&str; 19] = [
    "alternate-exchange",
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-mode",
    "queue-master-locator",
    "queue-leader-locator",
    "queue-version",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "max-age",
    "stream-max-segment-size-bytes",
    "initial-cluster-size",
    "target-group-size",
    "consumer-timeout",
    "dead-letter-strategy",
];

/// Which objects a policy applies to (RabbitMQ's `--apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues of every type (`queues`).
    Queues,
    /// Classic queues only (RabbitMQ 3.12+ `classic_queues`).
    ClassicQueues,
    /// Quorum queues only (RabbitMQ 3.12+ `quorum_queues`).
    QuorumQueues,
    /// Exchanges only.
    Exchanges,
    /// Queues and exchanges (RabbitMQ's default).
    All,
    /// RabbitMQ 3.12's `streams`: accepted so their definitions import, but RelayMQ has
    /// no streams, so it matches nothing.
    NoQueueHere,
}

impl ApplyTo {
    /// Parses an apply-to value.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED with RabbitMQ's text for another value.
    pub fn parse(text: &str) -> Result<ApplyTo, BrokerError> {
        Ok(match text {
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "exchanges" => ApplyTo::Exchanges,
            "all" | "" => ApplyTo::All,
            "streams" => ApplyTo::NoQueueHere,
            other => {
                return Err(BrokerError::precondition(format!(
                    "Validation failed: apply-to '{other}' unrecognised; should be 'queues', \
                     'exchanges' or 'all'"
                )))
            }
        })
    }

    fn queues(self, queue_type: QueueType) -> bool {
        match self {
            ApplyTo::Queues | ApplyTo::All => true,
            ApplyTo::ClassicQueues => queue_type == QueueType::Classic,
            ApplyTo::QuorumQueues => queue_type == QueueType::Quorum,
            ApplyTo::Exchanges | ApplyTo::NoQueueHere => false,
        }
    }

    fn exchanges(self) -> bool {
        matches!(self, ApplyTo::Exchanges | ApplyTo::All)
    }
}

/// A policy as the operator wrote it (RabbitMQ's fields: `vhost`, `name`, `pattern`,
/// `apply-to`, `priority`, `definition`).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name, unique in the vhost.
    pub name: String,
    /// Regular expression matched anywhere in a name (anchor it with `^…$`).
    pub pattern: String,
    /// `queues`, `exchanges` or `all` (3.12's `classic_queues`, `quorum_queues`,
    /// `streams` are accepted too: [`ApplyTo`]).
    pub apply_to: String,
    /// The highest-priority matching policy applies; default 0.
    pub priority: i64,
    /// The settings, a JSON object (`{"max-length": 10, …}`).
    pub definition: Map<String, Value>,
}

impl PolicyDef {
    /// The policy as RabbitMQ's definitions file writes it (`rabbitmqctl
    /// export_definitions`, element of `policies`): `vhost`, `name`, `pattern`,
    /// `apply-to`, `definition`, `priority`.
    pub fn to_rabbitmq_json(&self) -> Value {
        serde_json::json!({
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": Value::Object(self.definition.clone()),
            "priority": self.priority,
        })
    }

    /// A policy from an element of a RabbitMQ definitions file's `policies`; `apply-to`
    /// defaults to `all` and `priority` to 0 when absent, as RabbitMQ's import does. Only
    /// the shape is checked here; [`Policy::compile`] validates the rest.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED naming the field that is missing or of the wrong type.
    pub fn from_rabbitmq_json(v: &Value) -> Result<PolicyDef, BrokerError> {
        let field = |key: &str| -> Result<String, BrokerError> {
            v.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| {
                    BrokerError::precondition(format!("policy: '{key}' must be a string"))
                })
        };
        let apply_to = match v.get("apply-to") {
            None => "all".to_string(),
            Some(_) => field("apply-to")?,
        };
        let priority = match v.get("priority") {
            None => 0,
            Some(p) => p.as_i64().ok_or_else(|| {
                BrokerError::precondition(format!("policy: 'priority' {p} is not an integer"))
            })?,
        };
        let definition = v
            .get("definition")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| BrokerError::precondition("policy: 'definition' must be an object"))?;
        Ok(PolicyDef {
            vhost: field("vhost")?,
            name: field("name")?,
            pattern: field("pattern")?,
            apply_to,
            priority,
            definition,
        })
    }

    /// Its `meta.db` row (the definition as JSON text).
    pub fn to_row(&self) -> PolicyRow {
        PolicyRow {
            vhost: self.vhost.clone(),
            name: self.name.clone(),
            pattern: self.pattern.clone(),
            apply_to: self.apply_to.clone(),
            priority: self.priority,
            definition: Value::Object(self.definition.clone()).to_string(),
        }
    }

    /// The policy of a `meta.db` row.
    ///
    /// # Errors
    /// A text naming the fault when the definition is not a JSON object.
    pub fn from_row(row: &PolicyRow) -> Result<PolicyDef, String> {
        let definition = match serde_json::from_str::<Value>(&row.definition) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("the definition is not a JSON object".into()),
            Err(e) => return Err(format!("the definition is not JSON: {e}")),
        };
        Ok(PolicyDef {
            vhost: row.vhost.clone(),
            name: row.name.clone(),
            pattern: row.pattern.clone(),
            apply_to: row.apply_to.clone(),
            priority: row.priority,
            definition,
        })
    }
}

/// The settings a policy's definition gives; `None` is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySettings {
    /// `message-ttl`, ms: any integer ≥ 0, as RabbitMQ's policy validator accepts
    /// (`rabbit_policies`; a queue argument stops at
    /// [`EXPIRY_MS_MAX`](crate::limits::EXPIRY_MS_MAX)).
    pub message_ttl_ms: Option<u64>,
    /// `expires`, ms: any integer ≥ 1 (as `message-ttl`).
    pub expires_ms: Option<u64>,
    /// `max-length`, ready messages (≥ 0).
    pub max_length: Option<usize>,
    /// `max-length-bytes`, body bytes of ready messages (≥ 0).
    pub max_length_bytes: Option<usize>,
    /// `overflow`: `drop-head`, `reject-publish` or `reject-publish-dlx`.
    pub overflow: Option<Overflow>,
    /// `dead-letter-exchange` ("" is the default exchange).
    pub dead_letter_exchange: Option<String>,
    /// `dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `delivery-limit`: any integer, as RabbitMQ's validator takes it (`rabbit_policies`);
    /// a negative one is no limit.
    pub delivery_limit: Option<i64>,
    /// `delayed-retry-type` (quorum queues, RabbitMQ 4.3): `all`, `failed`, `returned` or
    /// `disabled`.
    pub delayed_retry_type: Option<String>,
    /// `delayed-retry-min`, ms (> 0).
    pub delayed_retry_min: Option<i64>,
    /// `delayed-retry-max`, ms (> 0, not below `delayed-retry-min`).
    pub delayed_retry_max: Option<i64>,
}

/// A validated, compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// As written.
    pub def: PolicyDef,
    /// Parsed apply-to.
    pub apply_to: ApplyTo,
    /// The settings of its definition.
    pub settings: PolicySettings,
    /// Keys of its definition RelayMQ does not act on ([`NOT_HONOURED_KEYS`]), sorted.
    pub not_honoured: Vec<String>,
    regex: Regex,
}

fn invalid(key: &str, value: &Value, what: &str) -> BrokerError {
    BrokerError::precondition(format!(
        "Validation failed: policy definition key '{key}': {value} is not a valid {what}"
    ))
}

/// An integer in `min..=max`, else the 406 naming `key`.
fn integer(key: &str, value: &Value, min: i64, max: i64, what: &str) -> Result<i64, BrokerError> {
    match value.as_i64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(key, value, what)),
    }
}

fn text(key: &str, value: &Value, what: &str) -> Result<String, BrokerError> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| invalid(key, value, what))
}

fn size(n: i64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl PolicySettings {
    /// Reads a definition: every key honoured is checked and parsed, the keys of
    /// [`NOT_HONOURED_KEYS`] are returned by name, anything else is refused (RabbitMQ
    /// refuses unknown keys the same way, "are not recognised policy settings").
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED naming the key: an empty definition, an unknown key
    /// (`max-priority` included: RabbitMQ does not let a policy make a priority queue), a
    /// value of the wrong type or out of range.
    pub fn parse(
        definition: &Map<String, Value>,
    ) -> Result<(PolicySettings, Vec<String>), BrokerError> {
        if definition.is_empty() {
            return Err(BrokerError::precondition(
                "Validation failed: no policy provided",
            ));
        }
        let mut s = PolicySettings::default();
        let mut not_honoured = Vec::new();
        let mut unknown = Vec::new();
        for (key, v) in definition {
            match key.as_str() {
                "message-ttl" => {
                    s.message_ttl_ms = Some(integer(key, v, 0, i64::MAX, "message TTL")? as u64)
                }
                "expires" => {
                    s.expires_ms = Some(integer(key, v, 1, i64::MAX, "queue expiry")? as u64)
                }
                "max-length" => {
                    s.max_length = Some(size(integer(key, v, 0, i64::MAX, "maximum length")?))
                }
                "max-length-bytes" => {
                    s.max_length_bytes = Some(size(integer(
                        key,
                        v,
                        0,
                        i64::MAX,
                        "maximum length in bytes",
                    )?))
                }
                "delivery-limit" => {
                    s.delivery_limit = Some(integer(key, v, i64::MIN, i64::MAX, "delivery limit")?)
                }
                "overflow" => {
                    s.overflow = Some(match v.as_str() {
                        Some("drop-head") => Overflow::DropHead,
                        Some("reject-publish") => Overflow::RejectPublish,
                        Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
                        _ => return Err(invalid(key, v, "overflow value")),
                    })
                }
                "dead-letter-exchange" => {
                    s.dead_letter_exchange = Some(text(key, v, "exchange name")?)
                }
                "dead-letter-routing-key" => {
                    s.dead_letter_routing_key = Some(text(key, v, "routing key")?)
                }
                "delayed-retry-type" => match v.as_str() {
                    Some(t @ ("all" | "failed" | "returned" | "disabled")) => {
                        s.delayed_retry_type = Some(t.to_string())
                    }
                    _ => {
                        return Err(BrokerError::precondition(format!(
                            "Validation failed: {v} is not a valid delayed retry type. Must be \
                             one of: all, failed, returned, disabled"
                        )))
                    }
                },
                "delayed-retry-min" | "delayed-retry-max" => {
                    let Some(n) = v.as_i64().filter(|&n| n > 0) else {
                        let what = if key == "delayed-retry-min" {
                            "minimum"
                        } else {
                            "maximum"
                        };
                        return Err(BrokerError::precondition(format!(
                            "Validation failed: {v} is not a valid delayed retry {what} delay. \
                             Must be a positive integer"
                        )));
                    };
                    if key == "delayed-retry-min" {
                        s.delayed_retry_min = Some(n);
                    } else {
                        s.delayed_retry_max = Some(n);
                    }
                }
                // Read by the federation manager (`broker/federation`) from the definition.
                "federation-upstream" | "federation-upstream-set" => {
                    if !v.is_string() {
                        return Err(BrokerError::precondition(format!(
                            "Validation failed\n\n{key} should be binary, actually was {v}\n"
                        )));
                    }
                }
                k if NOT_HONOURED_KEYS.contains(&k) => not_honoured.push(key.clone()),
                _ => unknown.push(key.clone()),
            }
        }
        // RabbitMQ 4.3 `rabbit_quorum_queue:validate_delayed_retry_constraints`.
        if let (Some(t), None) = (&s.delayed_retry_type, s.delayed_retry_min) {
            if t != "disabled" {
                return Err(BrokerError::precondition(format!(
                    "Validation failed: delayed-retry-min is required when delayed-retry-type \
                     is {t}"
                )));
            }
        }
        if let (Some(min), Some(max)) = (s.delayed_retry_min, s.delayed_retry_max) {
            if max < min {
                return Err(BrokerError::precondition(format!(
                    "Validation failed: delayed-retry-max ({max}) must not be smaller than \
                     delayed-retry-min ({min})"
                )));
            }
        }
        if !unknown.is_empty() {
            let names: Vec<String> = unknown.iter().map(|k| format!("'{k}'")).collect();
            return Err(BrokerError::precondition(format!(
                "Validation failed: policy definition key(s) {} are not recognised policy \
                 settings",
                names.join(", ")
            )));
        }
        Ok((s, not_honoured))
    }
}

impl Policy {
    /// Validates and compiles a policy.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED naming what is wrong: an empty or over-long name, a pattern
    /// over [`POLICY_PATTERN_BYTES_MAX`] or that does not compile ("invalid policy pattern
    /// '…': …"), an unknown apply-to, a definition key ([`PolicySettings::parse`]).
    pub fn compile(def: PolicyDef) -> Result<Policy, BrokerError> {
        if def.name.is_empty() || def.name.len() > POLICY_NAME_BYTES_MAX {
            return Err(BrokerError::precondition(format!(
                "invalid policy name '{}': 1 to {POLICY_NAME_BYTES_MAX} bytes",
                def.name
            )));
        }
        if def.pattern.len() > POLICY_PATTERN_BYTES_MAX {
            return Err(BrokerError::precondition(format!(
                "invalid policy pattern: longer than {POLICY_PATTERN_BYTES_MAX} bytes"
            )));
        }
        let regex = fancy_regex::RegexBuilder::new(&def.pattern)
            .delegate_size_limit(REGEX_COMPILED_BYTES_MAX)
            .backtrack_limit(REGEX_BACKTRACK_STEPS_MAX)
            .build()
            .map_err(|e| {
                BrokerError::precondition(format!(
                    "Validation failed: invalid policy pattern '{}': {e}",
                    def.pattern
                ))
            })?;
        let apply_to = ApplyTo::parse(&def.apply_to)?;
        let (settings, not_honoured) = PolicySettings::parse(&def.definition)?;
        Ok(Policy {
            def,
            apply_to,
            settings,
            not_honoured,
            regex,
        })
    }

    fn matches(&self, name: &str) -> bool {
        // A match past the backtracking bound counts as no match.
        self.regex.is_match(name).unwrap_or(false)
    }

    /// Whether the policy applies to the queue `name` of type `queue_type` (its apply-to:
    /// `queues`, `all`, or the queue's type, RabbitMQ 3.12+).
    pub fn matches_queue(&self, name: &str, queue_type: QueueType) -> bool {
        self.apply_to.queues(queue_type) && self.matches(name)
    }

    /// Whether the policy applies to the exchange `name`.
    pub fn matches_exchange(&self, name: &str) -> bool {
        self.apply_to.exchanges() && self.matches(name)
    }

    /// Whether `self` wins over `other` when both match: the higher priority, and between
    /// equal priorities the lower name (RabbitMQ leaves that case to the order of its
    /// internal table; a fixed rule keeps the outcome the same after a restart).
    pub fn wins_over(&self, other: &Policy) -> bool {
        (self.def.priority, std::cmp::Reverse(&self.def.name))
            > (other.def.priority, std::cmp::Reverse(&other.def.name))
    }
}

/// The policy that applies to a queue: the winner among `policies` matching `name` and
/// its `queue_type`.
pub fn for_queue<'a, P: AsRef<Policy>>(
    policies: &'a [P],
    name: &str,
    queue_type: QueueType,
) -> Option<&'a P> {
    best(policies, |p| p.matches_queue(name, queue_type))
}

/// The policy that applies to an exchange: the winner among `policies` matching `name`.
pub fn for_exchange<'a, P: AsRef<Policy>>(policies: &'a [P], name: &str) -> Option<&'a P> {
    best(policies, |p| p.matches_exchange(name))
}

fn best<P: AsRef<Policy>>(policies: &[P], matches: impl Fn(&Policy) -> bool) -> Option<&P> {
    let mut winner: Option<&P> = None;
    for p in policies.iter().filter(|p| matches(p.as_ref())) {
        if winner.is_none_or(|w| p.as_ref().wins_over(w.as_ref())) {
            winner = Some(p);
        }
    }
    winner
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ReplyCode;
    use std::sync::Arc;

    fn def(name: &str, pattern: &str, priority: i64, definition: Value) -> PolicyDef {
        PolicyDef {
            vhost: "/".into(),
            name: name.into(),
            pattern: pattern.into(),
            apply_to: "all".into(),
            priority,
            definition: definition.as_object().cloned().unwrap_or_default(),
        }
    }

    fn refused(d: PolicyDef) -> String {
        let e = Policy::compile(d).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        e.text
    }

    #[test]
    fn every_honoured_key_is_parsed() {
        let p = Policy::compile(def(
            "p",
            "^a",
            0,
            serde_json::json!({
                "message-ttl": 0, "expires": 1, "max-length": 3, "max-length-bytes": 100,
                "overflow": "reject-publish-dlx", "dead-letter-exchange": "",
                "dead-letter-routing-key": "k", "delivery-limit": 2,
                "alternate-exchange": "ae", "ha-mode": "all", "delayed-retry-type": "failed",
                "delayed-retry-min": 100, "delayed-retry-max": 800
            }),
        ))
        .unwrap();
        assert_eq!(
            p.settings,
            PolicySettings {
                message_ttl_ms: Some(0),
                expires_ms: Some(1),
                max_length: Some(3),
                max_length_bytes: Some(100),
                overflow: Some(Overflow::RejectPublishDlx),
                dead_letter_exchange: Some(String::new()),
                dead_letter_routing_key: Some("k".into()),
                delivery_limit: Some(2),
                delayed_retry_type: Some("failed".into()),
                delayed_retry_min: Some(100),
                delayed_retry_max: Some(800),
            }
        );
        assert_eq!(
            p.not_honoured,
            vec!["alternate-exchange".to_string(), "ha-mode".to_string()]
        );
    }

    #[test]
    fn delayed_retry_keys_are_refused_with_rabbitmq_4_3_texts() {
        let text = |d: serde_json::Value| Policy::compile(def("p", "^q", 0, d)).unwrap_err().text;
        assert_eq!(
            text(serde_json::json!({"delayed-retry-type": "often", "delayed-retry-min": 1})),
            "Validation failed: \"often\" is not a valid delayed retry type. Must be one of: \
             all, failed, returned, disabled"
        );
        assert_eq!(
            text(serde_json::json!({"delayed-retry-min": 0})),
            "Validation failed: 0 is not a valid delayed retry minimum delay. Must be a \
             positive integer"
        );
        assert_eq!(
            text(serde_json::json!({"delayed-retry-max": "x"})),
            "Validation failed: \"x\" is not a valid delayed retry maximum delay. Must be a \
             positive integer"
        );
        assert_eq!(
            text(serde_json::json!({"delayed-retry-type": "all"})),
            "Validation failed: delayed-retry-min is required when delayed-retry-type is all"
        );
        assert_eq!(
            text(serde_json::json!({"delayed-retry-min": 10, "delayed-retry-max": 5})),
            "Validation failed: delayed-retry-max (5) must not be smaller than \
             delayed-retry-min (10)"
        );
        assert!(Policy::compile(def(
            "p",
            "^q",
            0,
            serde_json::json!({"delayed-retry-type": "disabled"})
        ))
        .is_ok());
    }

    #[test]
    fn rabbitmq_definitions_json_round_trips() {
        let v = serde_json::json!({
            "vhost": "/", "name": "ha", "pattern": "^ha\\.", "apply-to": "queues",
            "definition": {"ha-mode": "all", "max-length": 5}, "priority": 2
        });
        let d = PolicyDef::from_rabbitmq_json(&v).unwrap();
        assert_eq!(d.apply_to, "queues");
        assert_eq!(d.priority, 2);
        assert_eq!(d.to_rabbitmq_json(), v);
        let bare = serde_json::json!({"vhost": "/", "name": "p", "pattern": ".*",
                                      "definition": {"expires": 10}});
        let d = PolicyDef::from_rabbitmq_json(&bare).unwrap();
        assert_eq!((d.apply_to.as_str(), d.priority), ("all", 0));
        let e = PolicyDef::from_rabbitmq_json(&serde_json::json!({"vhost": "/"})).unwrap_err();
        assert!(
            e.text.contains("'name'") || e.text.contains("'definition'"),
            "{}",
            e.text
        );
    }

    #[test]
    fn bad_keys_values_and_patterns_are_named() {
        let t = refused(def("p", "^a", 0, serde_json::json!({"max-length": -1})));
        assert!(t.contains("'max-length'") && t.contains("-1"), "{t}");
        let t = refused(def("p", "^a", 0, serde_json::json!({"expires": 0})));
        assert!(t.contains("'expires'"), "{t}");
        let t = refused(def("p", "^a", 0, serde_json::json!({"overflow": "x"})));
        assert!(t.contains("'overflow'"), "{t}");
        let t = refused(def("p", "^a", 0, serde_json::json!({"message-ttl": "5"})));
        assert!(t.contains("'message-ttl'"), "{t}");
        let t = refused(def("p", "^a", 0, serde_json::json!({"max-priority": 5})));
        assert!(
            t.contains("'max-priority'") && t.contains("not recognised"),
            "{t}"
        );
        let t = refused(def("p", "^a", 0, serde_json::json!({})));
        assert!(t.contains("no policy provided"), "{t}");
        let t = refused(def("p", "(", 0, serde_json::json!({"max-length": 1})));
        assert!(t.contains("invalid policy pattern '('"), "{t}");
        let mut d = def("p", "^a", 0, serde_json::json!({"max-length": 1}));
        d.apply_to = "bad".into();
        assert!(refused(d).contains("apply-to 'bad'"));
    }

    #[test]
    fn priority_then_name_decides_and_apply_to_filters() {
        let mk = |name: &str, pattern: &str, prio: i64, apply: &str| {
            let mut d = def(name, pattern, prio, serde_json::json!({"max-length": 1}));
            d.apply_to = apply.into();
            Arc::new(Policy::compile(d).unwrap())
        };
        let ps = vec![
            mk("b", "q", 0, "queues"),
            mk("a", "q", 0, "all"),
            mk("x", "^q", 5, "exchanges"),
            mk("look", "^(?!tmp\\.)q", 1, "queues"),
        ];
        let classic = QueueType::Classic;
        assert_eq!(for_queue(&ps, "q1", classic).unwrap().def.name, "look");
        assert_eq!(for_queue(&ps, "tmp.q1", classic).unwrap().def.name, "a");
        assert_eq!(for_exchange(&ps, "q1").unwrap().def.name, "x");
        assert!(for_queue(&ps, "other", classic).is_none());
        // RabbitMQ 3.12+: `quorum_queues` and `classic_queues` match their type only;
        // `streams` nothing here.
        let quorum = mk("qq", ".*", 9, "quorum_queues");
        assert!(quorum.matches_queue("q1", QueueType::Quorum));
        assert!(!quorum.matches_queue("q1", classic) && !quorum.matches_exchange("q1"));
        let classic_only = mk("cq", ".*", 9, "classic_queues");
        assert!(classic_only.matches_queue("q1", classic));
        assert!(!classic_only.matches_queue("q1", QueueType::Quorum));
        let streams = mk("st", ".*", 9, "streams");
        assert!(!streams.matches_queue("q1", classic));
        assert!(!streams.matches_queue("q1", QueueType::Quorum));
    }
}
