//! Federation upstreams: the value of a `federation-upstream` runtime parameter and of a
//! `federation-upstream-set`, validated and read as RabbitMQ's
//! `rabbit_federation_parameters` reads them (keys, defaults, refusal texts).

use crate::broker::shovel_definition::AckMode;
use crate::types::amqp_uri::{redact, AmqpUri};
use serde_json::{Map, Value};
use std::time::Duration;

/// The runtime parameter component of upstreams.
pub const UPSTREAM_COMPONENT: &str = "federation-upstream";

/// The runtime parameter component of upstream sets.
pub const UPSTREAM_SET_COMPONENT: &str = "federation-upstream-set";

/// Prefetch of the link's consumer when the upstream gives none (RabbitMQ's default).
pub const PREFETCH_COUNT_DEFAULT: u16 = 1000;

/// `max-hops` when the upstream gives none (RabbitMQ's default).
pub const MAX_HOPS_DEFAULT: u32 = 1;

/// `reconnect-delay` when the upstream gives none, seconds (RabbitMQ's default).
pub const RECONNECT_DELAY_S_DEFAULT: u64 = 5;

/// Largest `reconnect-delay` taken, seconds (a day).
const RECONNECT_DELAY_S_MAX: u64 = 86_400;

/// The keys an upstream may have (RabbitMQ 4.x).
const KEYS: [&str; 16] = [
    "uri",
    "prefetch-count",
    "reconnect-delay",
    "ack-mode",
    "resource-cleanup-mode",
    "queue-type",
    "bind-nowait",
    "channel-use-mode",
    "trust-user-id",
    "exchange",
    "queue",
    "consumer-tag",
    "max-hops",
    "expires",
    "message-ttl",
    "ha-policy",
];

/// A validated upstream.
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    /// The upstream's name (the parameter's).
    pub name: String,
    /// `uri`: one or more (one picked at random per connection).
    pub uris: Vec<String>,
    /// `exchange`: the upstream exchange; `None`: the downstream exchange's name.
    pub exchange: Option<String>,
    /// `max-hops`.
    pub max_hops: u32,
    /// `prefetch-count`.
    pub prefetch_count: u16,
    /// `reconnect-delay`.
    pub reconnect_delay: Duration,
    /// `ack-mode`.
    pub ack_mode: AckMode,
    /// `expires`: the upstream queue's `x-expires`, ms.
    pub expires: Option<u64>,
    /// `message-ttl`: the upstream queue's `x-message-ttl`, ms.
    pub message_ttl: Option<u64>,
    /// `trust-user-id`: keep the messages' `user_id` (else it is cleared).
    pub trust_user_id: bool,
    /// `resource-cleanup-mode` `default` (true): a link removed for good deletes its
    /// upstream queue; `never` (false) keeps it.
    pub resource_cleanup: bool,
}

impl Upstream {
    /// Validates and reads upstream `name`, with `overrides` (an upstream set's entry)
    /// taking precedence over `value`'s keys.
    ///
    /// # Errors
    /// The first problem, in RabbitMQ's words (`Key "uri" not found in NAME`, `max-hops
    /// should be a number, actually was …`, an invalid URI with its credentials left out).
    pub fn parse(
        name: &str,
        value: &Value,
        overrides: Option<&Map<String, Value>>,
    ) -> Result<Upstream, String> {
        let mut def = value
            .as_object()
            .cloned()
            .ok_or_else(|| format!("{name} should be a JSON object, actually was {value}"))?;
        if let Some(o) = overrides {
            for (k, v) in o {
                if k != "upstream" {
                    def.insert(k.clone(), v.clone());
                }
            }
        }
        let unknown: Vec<String> = def
            .keys()
            .filter(|k| !KEYS.contains(&k.as_str()))
            .map(|k| format!("\"{k}\""))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "Unrecognised terms [{}] in {name}",
                unknown.join(",")
            ));
        }
        let number = |k: &str, max: u64| -> Result<Option<u64>, String> {
            match def.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => match n.as_u64() {
                    Some(v) if v <= max => Ok(Some(v)),
                    _ => Err(format!(
                        "{k} should be a number from 0 to {max}, actually was {n}"
                    )),
                },
                Some(v) => Err(format!("{k} should be a number, actually was {v}")),
            }
        };
        let uris = match def.get("uri") {
            None => return Err(format!("Key \"uri\" not found in {name}")),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!(
                            "uri should be binary, actually was {}",
                            redact(&v.to_string())
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(format!(
                    "uri should be binary, actually was {}",
                    redact(&v.to_string())
                ))
            }
        };
        for u in &uris {
            let parsed =
                AmqpUri::parse(u).map_err(|e| format!("\"{}\" not a valid URI: {e}", redact(u)))?;
            if parsed.is_local() {
                return Err(format!(
                    "\"{}\": an upstream must name another broker's host",
                    redact(u)
                ));
            }
        }
        let ack_mode = AckMode::from_json(def.get("ack-mode"))?;
        let exchange = match def.get("exchange") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return Err(format!("exchange should be binary, actually was {v}")),
        };
        let trust_user_id = match def.get("trust-user-id") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(format!("trust-user-id should be boolean, actually was {v}")),
        };
        Ok(Upstream {
            name: name.to_string(),
            uris,
            exchange,
            max_hops: number("max-hops", u64::from(u32::MAX))?
                .map_or(MAX_HOPS_DEFAULT, |n| n as u32),
            prefetch_count: number("prefetch-count", u64::from(u16::MAX))?
                .map_or(PREFETCH_COUNT_DEFAULT, |n| n as u16),
            reconnect_delay: Duration::from_secs(
                number("reconnect-delay", RECONNECT_DELAY_S_MAX)?
                    .unwrap_or(RECONNECT_DELAY_S_DEFAULT),
            ),
            ack_mode,
            expires: number("expires", crate::limits::EXPIRY_MS_MAX)?,
            message_ttl: number("message-ttl", crate::limits::EXPIRY_MS_MAX)?,
            trust_user_id,
            resource_cleanup: match def.get("resource-cleanup-mode") {
                None => true,
                Some(Value::String(m)) if m == "default" => true,
                Some(Value::String(m)) if m == "never" => false,
                Some(v) => {
                    return Err(format!(
                        "resource-cleanup-mode should be one of [default,never], actually was {v}"
                    ))
                }
            },
        })
    }
}

/// Checks a `federation-upstream-set` value: a list of objects each naming an
/// `upstream` (`rabbit_federation_parameters:validate/5`).
///
/// # Errors
/// RabbitMQ's words for what is wrong.
pub fn check_set(name: &str, value: &Value) -> Result<(), String> {
    let list = value
        .as_array()
        .ok_or_else(|| format!("{name} should be list, actually was {value}"))?;
    for e in list {
        let o = e
            .as_object()
            .ok_or_else(|| format!("{name} should be a list of objects, actually was {e}"))?;
        match o.get("upstream") {
            Some(Value::String(_)) => {}
            Some(v) => return Err(format!("upstream should be binary, actually was {v}")),
            None => return Err(format!("Key \"upstream\" not found in {name}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_overrides_and_refusals() {
        let u = Upstream::parse("up", &json!({"uri": "amqp://h"}), None).unwrap();
        assert_eq!(
            (u.max_hops, u.prefetch_count, u.ack_mode),
            (1, 1000, AckMode::OnConfirm)
        );
        assert_eq!(u.reconnect_delay, Duration::from_secs(5));
        let o = json!({"upstream": "up", "max-hops": 3});
        let u = Upstream::parse(
            "up",
            &json!({"uri": ["amqp://h"], "exchange": "x"}),
            o.as_object(),
        )
        .unwrap();
        assert_eq!((u.max_hops, u.exchange.as_deref()), (3, Some("x")));
        assert_eq!(
            Upstream::parse("up", &json!({}), None).unwrap_err(),
            "Key \"uri\" not found in up"
        );
        let e = Upstream::parse(
            "up",
            &json!({"uri": "amqp://u:secret@h", "max-hops": "x"}),
            None,
        )
        .unwrap_err();
        assert!(e.starts_with("max-hops should be a number"), "{e}");
        let e = Upstream::parse("up", &json!({"uri": "ftp://u:secret@h"}), None).unwrap_err();
        assert!(
            e.contains("not a valid URI") && !e.contains("secret"),
            "{e}"
        );
        assert!(Upstream::parse("up", &json!({"uri": "amqp://"}), None).is_err());
        assert!(
            Upstream::parse("up", &json!({"uri": "amqp://h", "colour": 1}), None)
                .unwrap_err()
                .starts_with("Unrecognised terms")
        );
        assert!(check_set("s", &json!([{"upstream": "a"}])).is_ok());
        assert!(check_set("s", &json!([{"x": "a"}])).is_err());
        assert!(check_set("s", &json!({})).is_err());
    }
}
