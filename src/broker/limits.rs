//! RabbitMQ's vhost limits and user limits, set by an administrator per vhost or per user
//! (the management API's `/api/vhost-limits` and `/api/user-limits`, definitions files),
//! on top of the server-wide bounds of [`crate::limits`]:
//!
//! | limit | of | enforced at | refusal (RabbitMQ's) |
//! |---|---|---|---|
//! | `max-connections` | vhost | `connection.open` | 530 "access to vhost 'v' refused for user 'u': connection limit (N) is reached" |
//! | `max-queues` | vhost | `queue.declare`, an import | 406 "cannot declare queue 'q': queue limit in vhost 'v' (N) is reached" |
//! | `max-connections` | user | `connection.open` | 530 "connection refused for user 'u': user connection limit (N) is reached" |
//! | `max-channels` | user | `channel.open` | 530 "number of channels opened for user 'u' has reached the maximum allowed user limit of N" |
//!
//! A user's `max-channels` counts the channels of all its connections together, as
//! RabbitMQ's `rabbit_channel_tracking` does. A negative value is kept as set and means no
//! limit; 0 allows nothing (`rabbit_vhost_limit:is_over_connection_limit`,
//! `rabbit_auth_backend_internal:is_over_limit`). Limits are stored in `meta.db` (schema
//! version 4) before they apply; connections and queues that already exist stay.

use crate::broker::node::Broker;
use crate::broker::vhost::VirtualHost;
use crate::error::BrokerError;
use crate::storage::meta_limits::VhostMetadataRow;
use serde_json::Value;
use std::collections::BTreeMap;

/// Limits by name (`max-connections` → 10).
pub type LimitMap = BTreeMap<String, i64>;

/// The vhost limit on connections to the vhost.
pub const MAX_CONNECTIONS: &str = "max-connections";

/// The vhost limit on queues in the vhost.
pub const MAX_QUEUES: &str = "max-queues";

/// The user limit on channels over all the user's connections.
pub const MAX_CHANNELS: &str = "max-channels";

/// The limits a vhost may have (`rabbit_vhost_limit:vhost_limit_validation/0`).
pub const VHOST_LIMITS: [&str; 2] = [MAX_CONNECTIONS, MAX_QUEUES];

/// The limits a user may have (`rabbit_auth_backend_internal:user_limit_validation/0`).
pub const USER_LIMITS: [&str; 2] = [MAX_CONNECTIONS, MAX_CHANNELS];

/// The name RabbitMQ's validation gives the vhost limits in its messages (the runtime
/// parameter's name).
pub const VHOST_LIMITS_TERM: &str = "limits";

/// The name RabbitMQ's validation gives the user limits in its messages.
pub const USER_LIMITS_TERM: &str = "user-limits";

/// The `component` of the runtime parameter that holds a vhost's limits in RabbitMQ's
/// definitions (`parameters`), named `limits`.
pub const VHOST_LIMITS_COMPONENT: &str = "vhost-limits";

/// Splits a vhost's tags given as one string (`"a, b"`), as `rabbit_vhost:parse_tags/1`.
pub fn split_vhost_tags(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// The default queue type of a vhost whose creator named none (RabbitMQ's default).
pub const DEFAULT_QUEUE_TYPE: &str = "classic";

/// The queue types a vhost's `default_queue_type` may name
/// (`rabbit_queue_type:validate_default_queue_type/1`).
pub const QUEUE_TYPES: [&str; 3] = ["classic", "quorum", "stream"];

/// A vhost's metadata: what `PUT /api/vhosts/{name}` sets and the vhost rows show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostMetadata {
    /// Free text.
    pub description: String,
    /// Tags, in order.
    pub tags: Vec<String>,
    /// `classic`, `quorum` or `stream` (RelayMQ's queues are classic whatever it says).
    pub default_queue_type: String,
}

impl Default for VhostMetadata {
    fn default() -> VhostMetadata {
        VhostMetadata {
            description: String::new(),
            tags: Vec::new(),
            default_queue_type: DEFAULT_QUEUE_TYPE.to_string(),
        }
    }
}

impl VhostMetadata {
    /// The stored row of vhost `vhost`.
    pub fn to_row(&self, vhost: &str) -> VhostMetadataRow {
        VhostMetadataRow {
            vhost: vhost.to_string(),
            description: self.description.clone(),
            tags: self.tags.clone(),
            default_queue_type: self.default_queue_type.clone(),
        }
    }

    /// The metadata of a stored row.
    pub fn from_row(row: &VhostMetadataRow) -> VhostMetadata {
        VhostMetadata {
            description: row.description.clone(),
            tags: row.tags.clone(),
            default_queue_type: row.default_queue_type.clone(),
        }
    }
}

/// Checks a `default_queue_type` (RabbitMQ's `validate_default_queue_type`).
///
/// # Errors
/// 406 PRECONDITION_FAILED "X is not a valid queue type".
pub fn check_queue_type(kind: &str) -> Result<(), BrokerError> {
    if QUEUE_TYPES.contains(&kind) {
        Ok(())
    } else if kind.is_empty() {
        Err(BrokerError::precondition(
            "default_queue_type must not be an empty string",
        ))
    } else {
        Err(BrokerError::precondition(format!(
            "{kind} is not a valid queue type"
        )))
    }
}

/// The value of limit `name` in force: `None` when absent or negative.
pub fn in_force(limits: &LimitMap, name: &str) -> Option<u64> {
    limits.get(name).and_then(|v| u64::try_from(*v).ok())
}

/// A JSON value as Erlang's `~tp` shows it in RabbitMQ's messages (`<<"x">>` for a string).
fn erlang_term(v: &Value) -> String {
    match v {
        Value::String(s) => format!("<<\"{s}\">>"),
        other => other.to_string(),
    }
}

/// Checks a limits object as `rabbit_parameter_validation:proplist/3` does: every key one
/// of `known`, every value an integer.
///
/// # Errors
/// 406 PRECONDITION_FAILED with RabbitMQ's text: "max-queues should be a number, actually
/// was <<\"x\">>", "Unrecognised terms [{<<\"max-foo\">>,1}] in limits" (`term` names the
/// limits: [`VHOST_LIMITS_TERM`], [`USER_LIMITS_TERM`]).
pub fn validate(
    term: &str,
    known: &[&str],
    object: &serde_json::Map<String, Value>,
) -> Result<LimitMap, BrokerError> {
    let mut out = LimitMap::new();
    let mut unknown = Vec::new();
    for (name, value) in object {
        if !known.contains(&name.as_str()) {
            unknown.push(format!("{{<<\"{name}\">>,{}}}", erlang_term(value)));
            continue;
        }
        match value.as_i64() {
            Some(n) => {
                out.insert(name.clone(), n);
            }
            None => {
                return Err(BrokerError::precondition(format!(
                    "{name} should be a number, actually was {}",
                    erlang_term(value)
                )))
            }
        }
    }
    if !unknown.is_empty() {
        return Err(BrokerError::precondition(format!(
            "Unrecognised terms [{}] in {term}",
            unknown.join(",")
        )));
    }
    Ok(out)
}

/// A limits map as a JSON object.
pub fn to_json(limits: &LimitMap) -> Value {
    Value::Object(
        limits
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(*v)))
            .collect(),
    )
}

/// A limits map as stored rows.
pub fn to_pairs(limits: &LimitMap) -> Vec<(String, i64)> {
    limits.iter().map(|(k, v)| (k.clone(), *v)).collect()
}

impl VirtualHost {
    /// The vhost limits set on this vhost, as set (negative values included).
    pub fn own_limits(&self) -> LimitMap {
        self.own_limits
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The value of the vhost limit `name` in force (`None`: no limit).
    pub fn limit_in_force(&self, name: &str) -> Option<u64> {
        in_force(
            &self.own_limits.read().unwrap_or_else(|e| e.into_inner()),
            name,
        )
    }

    /// Replaces the vhost's limits in memory (after they were stored).
    pub(crate) fn put_own_limits(&self, limits: LimitMap) {
        *self.own_limits.write().unwrap_or_else(|e| e.into_inner()) = limits;
    }

    /// The vhost's metadata.
    pub fn metadata(&self) -> VhostMetadata {
        self.metadata
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the vhost's metadata in memory (after it was stored).
    pub(crate) fn put_metadata(&self, metadata: VhostMetadata) {
        *self.metadata.write().unwrap_or_else(|e| e.into_inner()) = metadata;
    }
}

impl Broker {
    /// The limits of vhost `vhost`, as set.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the vhost does not exist.
    pub fn vhost_limits(&self, vhost: &str) -> Result<LimitMap, BrokerError> {
        Ok(self.existing_vhost(vhost)?.own_limits())
    }

    /// Sets (`Some`) or clears (`None`) the vhost limit `name` of `vhost`, as
    /// `rabbit_vhost_limit:update_limit/4` and `clear_limit/3`; stored first.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the vhost does not exist; 406 for a limit RabbitMQ does not know
    /// (its text); 541 when the store fails.
    pub fn set_vhost_limit(
        &self,
        vhost: &str,
        name: &str,
        value: Option<&Value>,
    ) -> Result<(), BrokerError> {
        let vh = self.existing_vhost(vhost)?;
        let _changes = vh.changes();
        let mut limits = vh.own_limits();
        match value {
            Some(v) => {
                let mut one = serde_json::Map::new();
                one.insert(name.to_string(), v.clone());
                limits.extend(validate(VHOST_LIMITS_TERM, &VHOST_LIMITS, &one)?);
            }
            None => {
                limits.remove(name);
            }
        }
        self.store_vhost_limits(&vh, limits)
    }

    /// Replaces every limit of `vhost` (a definitions import's `vhost-limits` parameter);
    /// the caller holds the vhost's changes lock or the vhost is not shared yet.
    ///
    /// # Errors
    /// 541 when the store fails.
    pub(crate) fn store_vhost_limits(
        &self,
        vh: &VirtualHost,
        limits: LimitMap,
    ) -> Result<(), BrokerError> {
        if let Some(d) = self.durability() {
            d.meta("vhost limits", |m| {
                m.put_vhost_limits(&vh.name, &to_pairs(&limits))
            })?;
        }
        vh.put_own_limits(limits);
        Ok(())
    }

    /// Sets the metadata of `vhost` (`PUT /api/vhosts/{name}`); stored first.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the vhost does not exist; 406 for a bad default queue type; 541
    /// when the store fails.
    pub fn set_vhost_metadata(
        &self,
        vhost: &str,
        metadata: VhostMetadata,
    ) -> Result<(), BrokerError> {
        check_queue_type(&metadata.default_queue_type)?;
        let vh = self.existing_vhost(vhost)?;
        let _changes = vh.changes();
        if let Some(d) = self.durability() {
            d.meta("vhost metadata", |m| {
                m.put_vhost_metadata(&metadata.to_row(vhost))
            })?;
        }
        vh.put_metadata(metadata);
        Ok(())
    }

    /// The limits of user `user`, as set.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the user does not exist.
    pub fn user_limits(&self, user: &str) -> Result<LimitMap, BrokerError> {
        if self.users.user(user).is_none() {
            return Err(BrokerError::not_found(format!("no user '{user}'")));
        }
        Ok(self.users.limits(user))
    }

    /// Sets (`Some`) or clears (`None`; `all` clears every one) the user limit `name` of
    /// `user`, as `rabbitmqctl set_user_limits` / `clear_user_limits`; stored first.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the user does not exist; 406 for a limit RabbitMQ does not know
    /// or a value that is not an integer (its texts); 541 when the store fails.
    pub fn set_user_limit(
        &self,
        user: &str,
        name: &str,
        value: Option<&Value>,
    ) -> Result<(), BrokerError> {
        match value {
            Some(v) => {
                let mut one = serde_json::Map::new();
                one.insert(name.to_string(), v.clone());
                let set = validate(USER_LIMITS_TERM, &USER_LIMITS, &one)?;
                self.update_user_limits(user, &set, None)
            }
            None => self.update_user_limits(user, &LimitMap::new(), Some(name)),
        }
    }

    /// Merges `set` into the limits of `user` and removes `clear` from them
    /// (`rabbit_auth_backend_internal:set_user_limits/3`, `clear_user_limits/3`; `all`
    /// clears every limit); stored first.
    ///
    /// # Errors
    /// 404 NOT_FOUND when the user does not exist; 541 when the store fails.
    pub fn update_user_limits(
        &self,
        user: &str,
        set: &LimitMap,
        clear: Option<&str>,
    ) -> Result<(), BrokerError> {
        let _changes = self.user_limits_changes();
        let mut limits = self.user_limits(user)?;
        limits.extend(set.iter().map(|(k, v)| (k.clone(), *v)));
        match clear {
            Some("all") => limits.clear(),
            Some(name) => {
                limits.remove(name);
            }
            None => {}
        }
        if let Some(d) = self.durability() {
            d.meta("user limits", |m| {
                m.put_user_limits(user, &to_pairs(&limits))
            })?;
        }
        self.users.put_limits(user, limits);
        Ok(())
    }

    /// Channels open over every connection of `user`.
    pub fn user_channel_count(&self, user: &str) -> usize {
        self.connections()
            .iter()
            .filter(|c| c.user == user)
            .map(|c| c.channels.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Checks the `max-channels` limit of `user` before one more channel opens
    /// (`rabbit_reader:is_over_limits/1`).
    ///
    /// # Errors
    /// 530 NOT_ALLOWED "number of channels opened for user 'u' has reached the maximum
    /// allowed user limit of N".
    pub fn check_user_channel_limit(&self, user: &str) -> Result<(), BrokerError> {
        let Some(max) = in_force(&self.users.limits(user), MAX_CHANNELS) else {
            return Ok(());
        };
        if self.user_channel_count(user) as u64 >= max {
            return Err(BrokerError::new(
                crate::error::ReplyCode::NotAllowed,
                format!(
                    "number of channels opened for user '{user}' has reached the maximum \
                     allowed user limit of {max}"
                ),
            ));
        }
        Ok(())
    }

    fn existing_vhost(&self, vhost: &str) -> Result<std::sync::Arc<VirtualHost>, BrokerError> {
        self.vhost(vhost)
            .ok_or_else(|| BrokerError::not_found(format!("no vhost '{vhost}'")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(json: &str) -> serde_json::Map<String, Value> {
        match serde_json::from_str(json) {
            Ok(Value::Object(m)) => m,
            _ => panic!("not an object: {json}"),
        }
    }

    #[test]
    fn limits_are_validated_with_rabbitmq_texts() {
        let ok = validate(
            VHOST_LIMITS_TERM,
            &VHOST_LIMITS,
            &object(r#"{"max-queues": 3, "max-connections": -1}"#),
        )
        .unwrap();
        assert_eq!(in_force(&ok, MAX_QUEUES), Some(3));
        assert_eq!(in_force(&ok, MAX_CONNECTIONS), None);
        let e = validate(
            VHOST_LIMITS_TERM,
            &VHOST_LIMITS,
            &object(r#"{"max-queues": "x"}"#),
        )
        .unwrap_err();
        assert_eq!(
            e.text,
            "max-queues should be a number, actually was <<\"x\">>"
        );
        let e = validate(
            USER_LIMITS_TERM,
            &USER_LIMITS,
            &object(r#"{"max-queues": 1}"#),
        )
        .unwrap_err();
        assert_eq!(
            e.text,
            "Unrecognised terms [{<<\"max-queues\">>,1}] in user-limits"
        );
        assert!(check_queue_type("quorum").is_ok());
        assert_eq!(
            check_queue_type("lazy").unwrap_err().text,
            "lazy is not a valid queue type"
        );
    }
}
