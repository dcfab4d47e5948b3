//! A dynamic shovel's definition: the value of a `shovel` runtime parameter, validated
//! and read as RabbitMQ's `rabbit_shovel_parameters` and `rabbit_amqp091_shovel` read
//! it (key names, defaults, the legacy aliases, the refusal texts).

use crate::types::amqp_uri::{redact, AmqpUri};
use crate::types::{BasicProperties, FieldTable, FieldValue};
use serde_json::{Map, Value};
use std::time::Duration;

/// The runtime parameter component of shovels (`rabbit_shovel_parameters`).
pub const SHOVEL_COMPONENT: &str = "shovel";

/// Prefetch of the source consumer when the definition gives none
/// (`src-prefetch-count`, RabbitMQ's default).
pub const SRC_PREFETCH_COUNT_DEFAULT: u16 = 1000;

/// Time between a shovel's failure and its next attempt when the definition gives no
/// `reconnect-delay`, seconds (RabbitMQ's `?DEFAULT_RECONNECT_DELAY`).
pub const RECONNECT_DELAY_S_DEFAULT: u64 = 5;

/// Largest `reconnect-delay` taken, seconds (a day); larger values are capped.
pub const RECONNECT_DELAY_S_MAX: u64 = 86_400;

/// URIs a shovel end may list at most (one is chosen at random per connection).
pub const URIS_PER_END_MAX: usize = 16;

/// When the source acknowledges a message (RabbitMQ's `ack-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckMode {
    /// After the destination confirmed it (the default; nothing is lost).
    OnConfirm,
    /// As soon as it was published to the destination.
    OnPublish,
    /// Never: the source delivers without acknowledgements.
    NoAck,
}

impl AckMode {
    /// The `ack-mode` key's value (absent: `on-confirm`), as shovels and federation
    /// upstreams take it.
    ///
    /// # Errors
    /// RabbitMQ's text for another value.
    pub fn from_json(v: Option<&Value>) -> Result<AckMode, String> {
        match v {
            None => Ok(AckMode::OnConfirm),
            Some(Value::String(s)) if s == "on-confirm" => Ok(AckMode::OnConfirm),
            Some(Value::String(s)) if s == "on-publish" => Ok(AckMode::OnPublish),
            Some(Value::String(s)) if s == "no-ack" => Ok(AckMode::NoAck),
            Some(v) => Err(format!(
                "ack-mode should be one of [no-ack,on-publish,on-confirm], actually was {v}"
            )),
        }
    }

    /// RabbitMQ's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            AckMode::OnConfirm => "on-confirm",
            AckMode::OnPublish => "on-publish",
            AckMode::NoAck => "no-ack",
        }
    }
}

/// When the shovel deletes itself (RabbitMQ's `src-delete-after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteAfter {
    /// Runs until its parameter is cleared.
    Never,
    /// After moving as many messages as the source queue held when it started.
    QueueLength,
    /// After moving this many messages.
    Count(u64),
}

/// What the shovel consumes from.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSpec {
    /// A queue (`src-queue`), declared durable with `args` when missing unless
    /// `predeclared`.
    Queue {
        /// The queue's name.
        name: String,
        /// `src-queue-args`, used when the shovel declares it.
        args: FieldTable,
        /// `src-predeclared`: the queue must exist.
        predeclared: bool,
    },
    /// An exchange (`src-exchange`, `src-exchange-key`): an exclusive server-named queue
    /// bound to it with the key.
    Exchange {
        /// The exchange's name.
        name: String,
        /// The binding key.
        key: String,
    },
}

/// A validated shovel definition.
#[derive(Clone, Debug, PartialEq)]
pub struct ShovelDef {
    /// `src-uri`: one or more URIs (one is picked at random per connection).
    pub src_uris: Vec<String>,
    /// What to consume.
    pub source: SourceSpec,
    /// `src-prefetch-count` (alias `prefetch-count`).
    pub src_prefetch_count: u16,
    /// `src-delete-after` (alias `delete-after`).
    pub src_delete_after: DeleteAfter,
    /// `src-consumer-args`.
    pub src_consumer_args: FieldTable,
    /// `src-consumer-name`: the source consumer's tag (empty: the server's).
    pub src_consumer_name: String,
    /// `dest-uri`.
    pub dest_uris: Vec<String>,
    /// `dest-exchange`: publish there instead of to the message's own exchange.
    pub dest_exchange: Option<String>,
    /// `dest-exchange-key`: the routing key instead of the message's own.
    pub dest_exchange_key: Option<String>,
    /// `dest-queue`: publish to this queue through the default exchange.
    pub dest_queue: Option<String>,
    /// `dest-queue-args`, used when the shovel declares the queue.
    pub dest_queue_args: FieldTable,
    /// `dest-predeclared`: the destination queue must exist.
    pub dest_predeclared: bool,
    /// `ack-mode`.
    pub ack_mode: AckMode,
    /// `reconnect-delay`.
    pub reconnect_delay: Duration,
    /// `dest-add-forward-headers` (alias `add-forward-headers`): the `x-shovelled`
    /// header.
    pub add_forward_headers: bool,
    /// `dest-add-timestamp-header` (alias `add-timestamp-header`): the
    /// `x-shovelled-timestamp` header.
    pub add_timestamp_header: bool,
    /// `dest-publish-properties` (alias `publish-properties`): properties overriding the
    /// message's.
    pub publish_properties: Map<String, Value>,
}

/// The keys a definition may have (the AMQP 0-9-1 protocol's, RabbitMQ 4.x).
const KEYS: [&str; 31] = [
    "internal",
    "internal_owner",
    "reconnect-delay",
    "ack-mode",
    "src-protocol",
    "dest-protocol",
    "src-uri",
    "src-exchange",
    "src-exchange-key",
    "src-queue",
    "src-queue-args",
    "src-consumer-args",
    "src-consumer-name",
    "prefetch-count",
    "src-prefetch-count",
    "delete-after",
    "src-delete-after",
    "src-delete-after-duration",
    "src-predeclared",
    "dest-uri",
    "dest-exchange",
    "dest-exchange-key",
    "dest-queue",
    "dest-queue-args",
    "add-forward-headers",
    "add-timestamp-header",
    "dest-add-forward-headers",
    "dest-add-timestamp-header",
    "publish-properties",
    "dest-publish-properties",
    "dest-predeclared",
];

/// The message properties `dest-publish-properties` may set, and whether each is a
/// number (else a string) (`rabbit_amqp091_shovel:validate_properties/2`).
const PUBLISH_PROPERTIES: [(&str, bool); 13] = [
    ("content_type", false),
    ("content_encoding", false),
    ("delivery_mode", true),
    ("priority", true),
    ("correlation_id", false),
    ("reply_to", false),
    ("expiration", false),
    ("message_id", false),
    ("timestamp", true),
    ("type", false),
    ("user_id", false),
    ("app_id", false),
    ("cluster_id", false),
];

/// JSON shown in a refusal text.
fn shown(v: &Value) -> String {
    v.to_string()
}

impl ShovelDef {
    /// Validates and reads the definition of shovel `name`.
    ///
    /// # Errors
    /// The first problem found, in RabbitMQ's words: `Key "src-uri" not found in NAME`,
    /// `Must specify 'src-exchange' or 'src-queue'`, `ack-mode should be one of …`, a
    /// URI that does not parse, `Cannot specify 'no-ack' and numerical 'delete-after'`,
    /// a key no protocol knows (`Unrecognised terms …`); `src-protocol`/`dest-protocol`
    /// other than `amqp091` (AMQP 1.0 shovels are not supported).
    pub fn parse(name: &str, value: &Value) -> Result<ShovelDef, String> {
        let def = value
            .as_object()
            .ok_or_else(|| format!("{name} should be a JSON object, actually was {value}"))?;
        let unknown: Vec<&String> = def.keys().filter(|k| !KEYS.contains(&k.as_str())).collect();
        for proto in ["src-protocol", "dest-protocol"] {
            match def.get(proto) {
                None => {}
                Some(Value::String(p)) if p == "amqp091" => {}
                Some(v @ Value::String(p)) if p == "amqp10" || p == "local" => {
                    return Err(format!(
                        "{proto} {} is not supported by RelayMQ: only amqp091 (AMQP 0-9-1) \
                         shovels are",
                        shown(v)
                    ))
                }
                Some(v) => {
                    return Err(format!(
                        "{proto} should be one of [amqp091,amqp10,local], actually was {}",
                        shown(v)
                    ))
                }
            }
        }
        let str_of = |k: &str| -> Result<Option<String>, String> {
            match def.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(format!("{k} should be binary, actually was {}", shown(v))),
            }
        };
        let bool_of = |k: &str| -> Result<Option<bool>, String> {
            match def.get(k) {
                None => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(v) => Err(format!("{k} should be boolean, actually was {}", shown(v))),
            }
        };
        let number_of = |k: &str| -> Result<Option<f64>, String> {
            match def.get(k) {
                None => Ok(None),
                Some(Value::Number(n)) => Ok(n.as_f64()),
                Some(v) => Err(format!("{k} should be a number, actually was {}", shown(v))),
            }
        };
        let table_of = |k: &str| -> Result<FieldTable, String> {
            match def.get(k) {
                None => Ok(FieldTable::new()),
                Some(Value::Object(m)) => Ok(m
                    .iter()
                    .map(|(k, v)| (k.clone(), FieldValue::from_json(v)))
                    .collect()),
                Some(v) => Err(format!(
                    "{k} should be a JSON object, actually was {}",
                    shown(v)
                )),
            }
        };
        let ack_mode = AckMode::from_json(def.get("ack-mode"))?;
        let src_uris = uris(name, def, "src-uri")?;
        let (src_exchange, src_queue) = (str_of("src-exchange")?, str_of("src-queue")?);
        let source = match (src_exchange, src_queue) {
            (None, None) => return Err("Must specify 'src-exchange' or 'src-queue'".into()),
            (Some(_), Some(_)) => {
                return Err("Cannot specify 'src-exchange' and 'src-queue'".into())
            }
            (Some(x), None) => SourceSpec::Exchange {
                name: x,
                key: str_of("src-exchange-key")?.unwrap_or_default(),
            },
            (None, Some(q)) if q.is_empty() => {
                return Err("src-queue must name a queue (it is empty)".into())
            }
            (None, Some(q)) => SourceSpec::Queue {
                name: q,
                args: table_of("src-queue-args")?,
                predeclared: bool_of("src-predeclared")?.unwrap_or(false),
            },
        };
        let delete_after_key = if def.contains_key("src-delete-after") {
            "src-delete-after"
        } else {
            "delete-after"
        };
        let src_delete_after = match def.get(delete_after_key) {
            None => DeleteAfter::Never,
            Some(Value::String(s)) if s == "never" => DeleteAfter::Never,
            Some(Value::String(s)) if s == "queue-length" => DeleteAfter::QueueLength,
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                if ack_mode == AckMode::NoAck {
                    return Err("Cannot specify 'no-ack' and numerical 'delete-after'".into());
                }
                DeleteAfter::Count(n.as_u64().unwrap_or(0))
            }
            Some(v) => {
                return Err(format!(
                    "{delete_after_key} should be a number greater than or equal to 0, \
                     \"never\" or \"queue-length\", actually was {}",
                    shown(v)
                ))
            }
        };
        if def.contains_key("src-delete-after-duration") {
            return Err("src-delete-after-duration is not supported by RelayMQ".into());
        }
        let prefetch_key = if def.contains_key("src-prefetch-count") {
            "src-prefetch-count"
        } else {
            "prefetch-count"
        };
        let src_prefetch_count = match number_of(prefetch_key)? {
            None => SRC_PREFETCH_COUNT_DEFAULT,
            Some(n) if (0.0..=f64::from(u16::MAX)).contains(&n) && n.fract() == 0.0 => n as u16,
            Some(n) => {
                return Err(format!(
                    "{prefetch_key} should be a whole number from 0 to {}, actually was {n}",
                    u16::MAX
                ))
            }
        };
        let dest_uris = uris(name, def, "dest-uri")?;
        let dest_exchange = str_of("dest-exchange")?;
        let dest_queue = str_of("dest-queue")?;
        if dest_exchange.is_some() && dest_queue.is_some() {
            return Err("Cannot specify 'dest-exchange' and 'dest-queue'".into());
        }
        if let Some(q) = &dest_queue {
            if q.is_empty() {
                return Err("dest-queue must name a queue (it is empty)".into());
            }
            if q.len() > crate::limits::SHORT_STRING_BYTES_MAX {
                return Err(format!(
                    "dest-queue should be less than 255 bytes, actually was {}",
                    q.len()
                ));
            }
        }
        let reconnect_delay = match number_of("reconnect-delay")? {
            None => Duration::from_secs(RECONNECT_DELAY_S_DEFAULT),
            Some(s) if s >= 0.0 => Duration::from_secs_f64(s.min(RECONNECT_DELAY_S_MAX as f64)),
            Some(s) => {
                return Err(format!(
                    "reconnect-delay should be 0 or more, actually was {s}"
                ))
            }
        };
        let either = |new: &str, old: &str| -> Result<bool, String> {
            Ok(bool_of(new)?.or(bool_of(old)?).unwrap_or(false))
        };
        let props_key = if def.contains_key("dest-publish-properties") {
            "dest-publish-properties"
        } else {
            "publish-properties"
        };
        let publish_properties = match def.get(props_key) {
            None => Map::new(),
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    match PUBLISH_PROPERTIES.iter().find(|(p, _)| p == k) {
                        None => return Err(format!("Unrecognised terms [\"{k}\"] in {props_key}")),
                        Some((_, true)) if !v.is_u64() => {
                            return Err(format!("{k} should be a number, actually was {v}"))
                        }
                        Some((_, false)) if !v.is_string() => {
                            return Err(format!("{k} should be binary, actually was {v}"))
                        }
                        _ => {}
                    }
                }
                m.clone()
            }
            Some(v) => {
                return Err(format!("{props_key} not a list {}", shown(v)));
            }
        };
        if let Some(v) = def.get("internal") {
            if !v.is_boolean() {
                return Err(format!("internal should be boolean, actually was {v}"));
            }
        }
        if !unknown.is_empty() {
            let list: Vec<String> = unknown.iter().map(|k| format!("\"{k}\"")).collect();
            return Err(format!("Unrecognised terms [{}] in {name}", list.join(",")));
        }
        Ok(ShovelDef {
            src_uris,
            source,
            src_prefetch_count,
            src_delete_after,
            src_consumer_args: table_of("src-consumer-args")?,
            src_consumer_name: str_of("src-consumer-name")?.unwrap_or_default(),
            dest_uris,
            dest_exchange,
            dest_exchange_key: str_of("dest-exchange-key")?,
            dest_queue,
            dest_queue_args: table_of("dest-queue-args")?,
            dest_predeclared: bool_of("dest-predeclared")?.unwrap_or(false),
            ack_mode,
            reconnect_delay,
            add_forward_headers: either("dest-add-forward-headers", "add-forward-headers")?,
            add_timestamp_header: either("dest-add-timestamp-header", "add-timestamp-header")?,
            publish_properties,
        })
    }

    /// The exchange and routing key a message from `exchange` with `routing_key` is
    /// published with (`rabbit_amqp091_shovel:fields_fun/5`): `dest-queue` through the
    /// default exchange, else `dest-exchange` (and `dest-exchange-key`) in place of the
    /// message's own.
    pub fn route<'a>(&'a self, exchange: &'a str, routing_key: &'a str) -> (&'a str, &'a str) {
        if let Some(q) = &self.dest_queue {
            return ("", q);
        }
        (
            self.dest_exchange.as_deref().unwrap_or(exchange),
            self.dest_exchange_key.as_deref().unwrap_or(routing_key),
        )
    }

    /// Applies `dest-publish-properties` to `p`.
    pub fn set_publish_properties(&self, p: &mut BasicProperties) {
        for (k, v) in &self.publish_properties {
            let s = || v.as_str().map(str::to_string);
            let n = v.as_u64();
            match k.as_str() {
                "content_type" => p.content_type = s(),
                "content_encoding" => p.content_encoding = s(),
                "delivery_mode" => p.delivery_mode = n.map(|n| n.min(255) as u8),
                "priority" => p.priority = n.map(|n| n.min(255) as u8),
                "correlation_id" => p.correlation_id = s(),
                "reply_to" => p.reply_to = s(),
                "expiration" => p.expiration = s(),
                "message_id" => p.message_id = s(),
                "timestamp" => p.timestamp = n,
                "type" => p.kind = s(),
                "user_id" => p.user_id = s(),
                "app_id" => p.app_id = s(),
                "cluster_id" => p.cluster_id = s(),
                _ => {}
            }
        }
    }

    /// The source end as RabbitMQ's status shows it: `src_queue`, or `src_exchange` and
    /// `src_exchange_key`.
    pub fn source_fields(&self) -> Vec<(&'static str, String)> {
        match &self.source {
            SourceSpec::Queue { name, .. } => vec![("src_queue", name.clone())],
            SourceSpec::Exchange { name, key } => vec![
                ("src_exchange", name.clone()),
                ("src_exchange_key", key.clone()),
            ],
        }
    }

    /// The destination end as RabbitMQ's status shows it: `dest_queue`, `dest_exchange`,
    /// `dest_exchange_key` (those given).
    pub fn dest_fields(&self) -> Vec<(&'static str, String)> {
        let mut f = Vec::new();
        if let Some(x) = &self.dest_exchange {
            f.push(("dest_exchange", x.clone()));
        }
        if let Some(k) = &self.dest_exchange_key {
            f.push(("dest_exchange_key", k.clone()));
        }
        if let Some(q) = &self.dest_queue {
            f.push(("dest_queue", q.clone()));
        }
        f
    }
}

/// The URIs of `key`: a string or a non-empty list of strings, each a valid AMQP URI.
///
/// # Errors
/// `Key "src-uri" not found in NAME`; a URI that does not parse (its credentials left
/// out of the text).
fn uris(name: &str, def: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    let list: Vec<&Value> = match def.get(key) {
        None => return Err(format!("Key \"{key}\" not found in {name}")),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= URIS_PER_END_MAX => a.iter().collect(),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(format!("{key} should be a URI or a non-empty list of URIs"))
        }
        Some(Value::Array(_)) => {
            return Err(format!("{key} lists more than {URIS_PER_END_MAX} URIs"))
        }
        Some(v) => vec![v],
    };
    list.into_iter()
        .map(|v| match v {
            Value::String(s) => AmqpUri::parse(s)
                .map(|_| s.clone())
                .map_err(|e| format!("\"{}\" not a valid URI: {e}", redact(s))),
            v => Err(format!(
                "{key} should be binary, actually was {}",
                redact(&v.to_string())
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ShovelDef, String> {
        ShovelDef::parse("s", &v)
    }

    #[test]
    fn defaults_and_aliases() {
        let d = parse(json!({"src-uri": "amqp://", "src-queue": "a",
                             "dest-uri": ["amqp://h"], "dest-queue": "b"}))
        .unwrap();
        assert_eq!(d.ack_mode, AckMode::OnConfirm);
        assert_eq!(d.src_prefetch_count, 1000);
        assert_eq!(d.src_delete_after, DeleteAfter::Never);
        assert_eq!(d.reconnect_delay, Duration::from_secs(5));
        assert_eq!(d.route("x", "k"), ("", "b"));
        let d = parse(
            json!({"src-uri": "amqp://", "src-exchange": "x", "src-exchange-key": "k",
            "dest-uri": "amqp://", "dest-exchange": "y", "prefetch-count": 10,
            "delete-after": "queue-length", "add-forward-headers": true,
            "publish-properties": {"delivery_mode": 2, "app_id": "me"}}),
        )
        .unwrap();
        assert_eq!(d.src_prefetch_count, 10);
        assert_eq!(d.src_delete_after, DeleteAfter::QueueLength);
        assert!(d.add_forward_headers && !d.add_timestamp_header);
        assert_eq!(d.route("x", "k"), ("y", "k"));
        let mut p = BasicProperties::default();
        d.set_publish_properties(&mut p);
        assert_eq!(
            (p.delivery_mode, p.app_id.as_deref()),
            (Some(2), Some("me"))
        );
    }

    #[test]
    fn refusals_in_rabbitmq_words() {
        let base = json!({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a"});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            parse(b).unwrap_err()
        };
        assert_eq!(
            parse(json!({"src-uri": "amqp://", "dest-uri": "amqp://"})).unwrap_err(),
            "Must specify 'src-exchange' or 'src-queue'"
        );
        assert_eq!(
            with("src-exchange", json!("x")),
            "Cannot specify 'src-exchange' and 'src-queue'"
        );
        assert_eq!(
            parse(json!({"src-queue": "a", "dest-uri": "amqp://"})).unwrap_err(),
            "Key \"src-uri\" not found in s"
        );
        assert!(with("ack-mode", json!("sometimes")).starts_with("ack-mode should be one of"));
        let mut b = base.clone();
        b["ack-mode"] = json!("no-ack");
        b["src-delete-after"] = json!(5);
        assert_eq!(
            parse(b).unwrap_err(),
            "Cannot specify 'no-ack' and numerical 'delete-after'"
        );
        assert!(with("src-delete-after", json!("later")).contains("\"queue-length\""));
        assert!(with("bogus", json!(1)).starts_with("Unrecognised terms [\"bogus\"]"));
        let bad = with("dest-uri", json!("http://bob:secret@h"));
        assert!(
            bad.contains("not a valid URI") && !bad.contains("secret"),
            "{bad}"
        );
        assert!(with("src-protocol", json!("amqp10")).contains("not supported"));
        assert!(with("dest-publish-properties", json!({"colour": "red"}))
            .starts_with("Unrecognised terms"));
        assert!(with("src-prefetch-count", json!("ten")).contains("should be a number"));
        assert!(with("src-queue", json!("")).contains("empty"));
        assert!(with("dest-queue", json!("")).contains("empty"));
    }
}
