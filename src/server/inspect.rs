//! The queue tools' requests and answers as JSON, written once for the two adapters that
//! offer them: the HTTP API (`POST /api/queues/{vhost}/{queue}/peek|replay|search`) takes
//! the request as its body, the native protocol (`queue.peek`, `queue.replay`,
//! `queue.search`, docs/protocol.md §7) as an `lstr`; both answer the same JSON
//! (docs/http-api.md, "Beyond RabbitMQ"). The unacked listing (`GET
//! /api/queues/{vhost}/{queue}/unacked`, `queue.unacked`) takes the API's query parameters
//! as its request object. The `pause` and `resume` actions of `POST
//! /api/queues/{vhost}/{queue}/actions` are read here too ([`QueueAction`]). The operations
//! and their permission checks are the core's ([`crate::broker::queue_tools`]).
//!
//! A message is shown as `POST /api/queues/{vhost}/{queue}/get` shows it (RabbitMQ's
//! `rabbit_mgmt_wm_queue_get` fields: `payload_bytes`, `redelivered`, `exchange`,
//! `routing_key`, `message_count`, `properties`, `payload`, `payload_encoding`), with its
//! `position` and `delivery_count`.

use crate::broker::channel::unacked::{UnackedDelivery, UNACKED_LIST_DEFAULT, UNACKED_LIST_MAX};
use crate::broker::dead_letter::replay::ReplayTarget;
use crate::broker::listing::connection_name;
use crate::broker::message::Message;
use crate::broker::node::ConnectionInfo;
use crate::broker::queue::expiry::now_ms;
use crate::broker::queue::inspect::{Peeked, SEARCH_LIMIT_MAX};
use crate::broker::Session;
use crate::error::{BrokerError, ReplyCode};
use crate::types::{BasicProperties, FieldValue};
use base64::Engine;
use serde_json::{json, Map, Value};

/// Messages a peek returns when the request names no `count`.
pub const PEEK_COUNT_DEFAULT: usize = 10;

/// Matches a search returns when the request names no `limit`.
pub const SEARCH_LIMIT_DEFAULT: usize = 20;

/// Payload bytes shown per message when the request names no `truncate` (peek shows
/// whole payloads, as `/get` does; search and the unacked listing answer many at once).
pub const SEARCH_TRUNCATE_DEFAULT: usize = 2000;

/// Why a request was not answered.
#[derive(Debug)]
pub enum InspectError {
    /// A field of the request is missing or malformed (HTTP 400; native 406).
    Bad(String),
    /// The core refused (permissions, absent or exclusive queue, bounds).
    Broker(BrokerError),
}

impl From<BrokerError> for InspectError {
    fn from(e: BrokerError) -> InspectError {
        InspectError::Broker(e)
    }
}

impl InspectError {
    /// As a channel error of the native protocol: a bad request is 406
    /// PRECONDITION_FAILED.
    pub fn into_broker_error(self) -> BrokerError {
        match self {
            InspectError::Bad(text) => BrokerError::new(ReplyCode::PreconditionFailed, text),
            InspectError::Broker(e) => e,
        }
    }
}

/// One queue tool as both adapters call it: (session, channel, queue, request) → answer.
pub type Tool = fn(&mut Session, u16, &str, &Map<String, Value>) -> Result<Value, InspectError>;

fn bad(text: impl Into<String>) -> InspectError {
    InspectError::Bad(text.into())
}

/// A non-negative integer field: a number, or a string of digits (as `/get` takes its
/// `count`); `default` when absent or `null`.
fn count_field(
    body: &Map<String, Value>,
    key: &str,
    default: usize,
) -> Result<usize, InspectError> {
    let v = match body.get(key) {
        None | Some(Value::Null) => return Ok(default),
        Some(v) => v,
    };
    let n = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match n.map(usize::try_from) {
        Some(Ok(n)) => Ok(n),
        _ => Err(bad(format!(
            "{key} must be a non-negative integer, got {v}"
        ))),
    }
}

/// How payloads are shown: `encoding` (`auto`: text when UTF-8, else base64; `base64`)
/// and `truncate` (bytes shown at most).
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    /// Always base64.
    pub base64_only: bool,
    /// Payload bytes shown at most (`payload_bytes` still gives the whole size).
    pub truncate: Option<usize>,
}

impl Shown {
    /// Reads `encoding` and `truncate` from a request.
    ///
    /// # Errors
    /// `/get`'s text for another encoding; a `truncate` that is not a non-negative
    /// integer.
    pub fn from_request(
        body: &Map<String, Value>,
        truncate_default: Option<usize>,
    ) -> Result<Shown, InspectError> {
        let base64_only = match body.get("encoding") {
            None | Some(Value::Null) => false,
            Some(v) => match v.as_str() {
                Some("auto") => false,
                Some("base64") => true,
                _ => return Err(bad("Unsupported encoding. Please use auto or base64.")),
            },
        };
        let truncate = match body.get("truncate") {
            None | Some(Value::Null) => truncate_default,
            Some(_) => Some(count_field(body, "truncate", 0)?),
        };
        Ok(Shown {
            base64_only,
            truncate,
        })
    }
}

/// A message as `/get` shows it: the payload cut to `truncate` bytes, as text when it is
/// UTF-8 and `auto` allows it, else in base64.
pub fn message_json(
    msg: &Message,
    redelivered: bool,
    message_count: usize,
    shown: Shown,
) -> Map<String, Value> {
    let body = msg.body.as_slice();
    let cut = &body[..shown.truncate.map_or(body.len(), |t| t.min(body.len()))];
    let (payload, encoding) = match std::str::from_utf8(cut) {
        Ok(text) if !shown.base64_only => (text.to_string(), "string"),
        _ => (
            base64::engine::general_purpose::STANDARD.encode(cut),
            "base64",
        ),
    };
    let v = json!({
        "payload_bytes": body.len(),
        "redelivered": redelivered,
        "exchange": msg.exchange(),
        "routing_key": msg.routing_key(),
        "message_count": message_count,
        "properties": msg.properties().to_json(),
        "payload": payload,
        "payload_encoding": encoding,
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A peeked or found message: `/get`'s fields (`message_count`: the ready messages behind
/// it) plus `position` and `delivery_count`.
fn peeked_json(p: &Peeked, ready: usize, shown: Shown) -> Value {
    let behind = ready.saturating_sub(p.position + 1);
    let mut m = message_json(&p.msg, p.redelivered, behind, shown);
    m.insert("position".into(), json!(p.position));
    m.insert("delivery_count".into(), json!(p.delivery_count));
    Value::Object(m)
}

/// Peek: `{"count": 10, "offset": 0, "encoding": "auto", "truncate": N}` → an array of
/// messages in delivery order.
///
/// # Errors
/// [`InspectError::Bad`] for a malformed field; the core's refusals.
pub fn peek(
    session: &mut Session,
    ch: u16,
    queue: &str,
    body: &Map<String, Value>,
) -> Result<Value, InspectError> {
    let count = count_field(body, "count", PEEK_COUNT_DEFAULT)?;
    let offset = count_field(body, "offset", 0)?;
    let shown = Shown::from_request(body, None)?;
    let page = session.queue_peek(ch, queue, offset, count)?;
    Ok(Value::Array(
        page.items
            .iter()
            .map(|p| peeked_json(p, page.ready, shown))
            .collect(),
    ))
}

/// The target of a replay request.
fn replay_target(body: &Map<String, Value>) -> Result<ReplayTarget, InspectError> {
    let text = |key: &str| match body.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Err(bad(format!("a replay to this target needs \"{key}\""))),
        Some(other) => Err(bad(format!("{key} must be a string, got {other}"))),
    };
    match body.get("target").and_then(Value::as_str) {
        Some("origin") => Ok(ReplayTarget::Origin),
        Some("exchange") => Ok(ReplayTarget::Exchange {
            exchange: text("exchange")?,
            routing_key: match body.get("routing_key") {
                None | Some(Value::Null) => String::new(),
                Some(_) => text("routing_key")?,
            },
        }),
        Some("queue") => Ok(ReplayTarget::Queue(text("queue")?)),
        _ => Err(bad(
            "target must be \"origin\", \"exchange\" (with \"exchange\" and \"routing_key\") \
             or \"queue\" (with \"queue\")",
        )),
    }
}

/// Replay: `{"target": "origin"}` | `{"target": "exchange", "exchange": X, "routing_key":
/// K}` | `{"target": "queue", "queue": Q}`, optional `count` and `positions` → `{"moved",
/// "skipped", "errors": [{"position", "reason"}]}`.
///
/// # Errors
/// [`InspectError::Bad`] for a malformed field; the core's refusals.
pub fn replay(
    session: &mut Session,
    ch: u16,
    queue: &str,
    body: &Map<String, Value>,
) -> Result<Value, InspectError> {
    let target = replay_target(body)?;
    let count = match body.get("count") {
        None | Some(Value::Null) => None,
        Some(_) => Some(count_field(body, "count", 0)?),
    };
    let positions = match body.get("positions") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| {
                            bad(format!("positions must be non-negative integers, got {v}"))
                        })
                })
                .collect::<Result<Vec<usize>, InspectError>>()?,
        ),
        Some(other) => return Err(bad(format!("positions must be an array, got {other}"))),
    };
    let out = session.queue_replay(ch, queue, &target, positions.as_deref(), count)?;
    let errors: Vec<Value> = out
        .errors
        .iter()
        .map(|(position, reason)| json!({"position": position, "reason": reason}))
        .collect();
    Ok(json!({"moved": out.moved, "skipped": out.skipped, "errors": errors}))
}

/// One unacked delivery: `/get`'s message fields (without `message_count`), the consumer
/// (`null` for a `basic.get`), its channel as `/api/consumers` rows show it (without
/// `node`), and how long it has been out.
fn unacked_json(
    d: &UnackedDelivery,
    connection: Option<&ConnectionInfo>,
    now_ms: u64,
    shown: Shown,
) -> Value {
    let mut m = message_json(&d.message, d.redelivered, 0, shown);
    m.remove("message_count");
    let conn = connection.map_or_else(|| d.connection_id.to_string(), connection_name);
    let (user, peer_host, peer_port) = match connection {
        Some(c) => (c.user.as_str(), c.peer.ip().to_string(), c.peer.port()),
        None => ("", String::new(), 0),
    };
    m.insert(
        "consumer_tag".into(),
        d.consumer_tag.as_deref().map_or(Value::Null, |t| json!(t)),
    );
    m.insert(
        "channel_details".into(),
        json!({
            "name": format!("{conn} ({})", d.channel),
            "number": d.channel,
            "connection_name": conn,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": user,
        }),
    );
    m.insert("delivery_tag".into(), json!(d.delivery_tag));
    m.insert("delivery_count".into(), json!(d.delivery_count));
    m.insert(
        "out_for_ms".into(),
        json!(now_ms.saturating_sub(d.delivered_at_ms)),
    );
    m.insert(
        "delivered_at".into(),
        crate::server::http::api::stats::timestamp(d.delivered_at_ms),
    );
    Value::Object(m)
}

/// Unacked deliveries: `{"limit": 100, "encoding": "auto", "truncate": 2000}` (the HTTP
/// API takes them as query parameters) → an array of the queue's deliveries awaiting
/// their ack, oldest first, at most `limit` ([`UNACKED_LIST_MAX`]).
///
/// # Errors
/// [`InspectError::Bad`] for a malformed field or a `limit` over [`UNACKED_LIST_MAX`];
/// the core's refusals.
pub fn unacked(
    session: &mut Session,
    ch: u16,
    queue: &str,
    body: &Map<String, Value>,
) -> Result<Value, InspectError> {
    let limit = count_field(body, "limit", UNACKED_LIST_DEFAULT)?;
    if limit > UNACKED_LIST_MAX {
        return Err(bad(format!(
            "limit must be between 0 and {UNACKED_LIST_MAX}, got {limit}"
        )));
    }
    let shown = Shown::from_request(body, Some(SEARCH_TRUNCATE_DEFAULT))?;
    let rows = session.queue_unacked(ch, queue, limit)?;
    let ids: std::collections::HashSet<u64> = rows.iter().map(|d| d.connection_id).collect();
    let connections: std::collections::HashMap<u64, ConnectionInfo> = session
        .broker()
        .connections()
        .into_iter()
        .filter(|c| ids.contains(&c.id))
        .map(|c| (c.id, c))
        .collect();
    let now = now_ms();
    Ok(Value::Array(
        rows.iter()
            .map(|d| unacked_json(d, connections.get(&d.connection_id), now, shown))
            .collect(),
    ))
}

/// A queue action RelayMQ adds to RabbitMQ's `POST /api/queues/{vhost}/{queue}/actions`
/// (`{"action": "pause"}` or `{"action": "resume"}`; docs/lifecycle.md, "Pausing a
/// queue"). The native protocol has a method for each (`queue.pause`, `queue.resume`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueAction {
    /// Deliver nothing to the queue's consumers until resumed.
    Pause,
    /// Deliver again.
    Resume,
}

impl QueueAction {
    /// The action an `actions` request names, if it is one of RelayMQ's (`None`: not
    /// ours, RabbitMQ's answer applies).
    pub fn from_request(body: &Map<String, Value>) -> Option<QueueAction> {
        match body.get("action").and_then(Value::as_str) {
            Some("pause") => Some(QueueAction::Pause),
            Some("resume") => Some(QueueAction::Resume),
            _ => None,
        }
    }

    /// Runs the action ([`Session::queue_pause`]); doing it twice is not an error.
    ///
    /// # Errors
    /// The core's refusals (403 without `configure` on the queue, 404, 405).
    pub fn run(self, session: &mut Session, ch: u16, queue: &str) -> Result<(), BrokerError> {
        session
            .queue_pause(ch, queue, self == QueueAction::Pause)
            .map(|_| ())
    }
}

/// What a search looks in.
#[derive(Debug, Clone, Copy)]
struct Places {
    body: bool,
    headers: bool,
    properties: bool,
}

/// The text forms of a header value: strings as they are, numbers in decimal, booleans
/// as `true`/`false`, byte arrays as UTF-8 when they are, nested tables and arrays by
/// their values.
fn value_texts(v: &FieldValue, out: &mut Vec<String>) {
    match v {
        FieldValue::Table(t) => {
            for (_, inner) in t.iter() {
                value_texts(inner, out);
            }
        }
        FieldValue::Array(items) => {
            for inner in items {
                value_texts(inner, out);
            }
        }
        other => {
            if let Some(s) = other.as_str() {
                out.push(s.to_string());
            } else {
                match other.to_json() {
                    Value::String(s) => out.push(s),
                    Value::Null => {}
                    j => out.push(j.to_string()),
                }
            }
        }
    }
}

/// The searched properties: content_type, content_encoding, correlation_id, reply_to,
/// expiration, message_id, type, user_id, app_id.
fn property_texts(p: &BasicProperties) -> impl Iterator<Item = &str> {
    [
        &p.content_type,
        &p.content_encoding,
        &p.correlation_id,
        &p.reply_to,
        &p.expiration,
        &p.message_id,
        &p.kind,
        &p.user_id,
        &p.app_id,
    ]
    .into_iter()
    .filter_map(|v| v.as_deref())
}

/// Whether `hay` contains `needle` (`needle` lowercased already when `fold`).
fn contains(hay: &str, needle: &str, fold: bool) -> bool {
    if fold {
        hay.to_lowercase().contains(needle)
    } else {
        hay.contains(needle)
    }
}

/// Whether `msg` has `needle` in one of `places`.
fn message_matches(msg: &Message, needle: &str, fold: bool, places: Places) -> bool {
    if places.body {
        let body = String::from_utf8_lossy(msg.body.as_slice());
        if contains(&body, needle, fold) {
            return true;
        }
    }
    if places.headers {
        if let Some(h) = msg.headers() {
            let mut texts = Vec::new();
            for (key, v) in h.iter() {
                texts.push(key.to_string());
                value_texts(v, &mut texts);
            }
            if texts.iter().any(|t| contains(t, needle, fold)) {
                return true;
            }
        }
    }
    places.properties && property_texts(msg.properties()).any(|t| contains(t, needle, fold))
}

/// Search: `{"query": T, "in": ["body", "headers", "properties"], "offset": 0, "limit":
/// 20, "ignore_case": false, "encoding": "auto", "truncate": 2000}` → `{"items",
/// "scanned", "next_offset", "ready"}`.
///
/// # Errors
/// [`InspectError::Bad`] for a malformed field; the core's refusals.
pub fn search(
    session: &mut Session,
    ch: u16,
    queue: &str,
    body: &Map<String, Value>,
) -> Result<Value, InspectError> {
    let query = match body.get("query") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(bad("query must be a non-empty string")),
    };
    let places = match body.get("in") {
        None | Some(Value::Null) => Places {
            body: true,
            headers: true,
            properties: true,
        },
        Some(Value::Array(items)) => {
            let mut p = Places {
                body: false,
                headers: false,
                properties: false,
            };
            for v in items {
                match v.as_str() {
                    Some("body") => p.body = true,
                    Some("headers") => p.headers = true,
                    Some("properties") => p.properties = true,
                    _ => {
                        return Err(bad(format!(
                            "\"in\" takes \"body\", \"headers\" and \"properties\", got {v}"
                        )))
                    }
                }
            }
            p
        }
        Some(other) => return Err(bad(format!("\"in\" must be an array, got {other}"))),
    };
    let fold = match body.get("ignore_case") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(bad(format!("ignore_case must be a boolean, got {other}"))),
    };
    let offset = count_field(body, "offset", 0)?;
    let limit = count_field(body, "limit", SEARCH_LIMIT_DEFAULT)?;
    if limit > SEARCH_LIMIT_MAX {
        return Err(bad(format!(
            "limit must be between 0 and {SEARCH_LIMIT_MAX}, got {limit}"
        )));
    }
    let shown = Shown::from_request(body, Some(SEARCH_TRUNCATE_DEFAULT))?;
    let needle = if fold { query.to_lowercase() } else { query };
    let page = session.queue_search(ch, queue, offset, limit, |m| {
        message_matches(m, &needle, fold, places)
    })?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|p| peeked_json(p, page.ready, shown))
        .collect();
    Ok(json!({
        "items": items,
        "scanned": page.scanned,
        "next_offset": page.next_offset,
        "ready": page.ready,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FieldTable;

    fn message(props: BasicProperties, body: &str) -> Message {
        Message::new("x", "rk", props, body.as_bytes().to_vec())
    }

    #[test]
    fn matching_looks_in_the_places_asked_for() {
        let mut nested = FieldTable::new();
        nested.insert("order".into(), FieldValue::I64(4711));
        let mut headers = FieldTable::new();
        headers.insert("customer".into(), FieldValue::string("ACME Corp"));
        headers.insert("meta".into(), FieldValue::Table(nested));
        let m = message(
            BasicProperties {
                headers: Some(headers),
                correlation_id: Some("corr-9".into()),
                ..BasicProperties::default()
            },
            "hello world",
        );
        let all = Places {
            body: true,
            headers: true,
            properties: true,
        };
        let only = |body, headers, properties| Places {
            body,
            headers,
            properties,
        };
        assert!(message_matches(&m, "world", false, all));
        assert!(!message_matches(
            &m,
            "world",
            false,
            only(false, true, true)
        ));
        assert!(message_matches(&m, "4711", false, only(false, true, false)));
        assert!(message_matches(&m, "acme", true, only(false, true, false)));
        assert!(!message_matches(&m, "acme", false, all));
        assert!(message_matches(
            &m,
            "corr-9",
            false,
            only(false, false, true)
        ));
        assert!(!message_matches(
            &m,
            "corr-9",
            false,
            only(true, true, false)
        ));
    }

    #[test]
    fn requests_are_checked() {
        let body = |v: Value| v.as_object().cloned().unwrap();
        assert!(matches!(
            count_field(&body(json!({"count": -1})), "count", 0),
            Err(InspectError::Bad(_))
        ));
        assert_eq!(
            count_field(&body(json!({"count": "7"})), "count", 0).unwrap(),
            7
        );
        assert_eq!(count_field(&body(json!({})), "count", 10).unwrap(), 10);
        assert!(replay_target(&body(json!({"target": "nowhere"}))).is_err());
        assert!(replay_target(&body(json!({"target": "queue"}))).is_err());
        assert_eq!(
            replay_target(&body(
                json!({"target": "exchange", "exchange": "x", "routing_key": "k"})
            ))
            .unwrap(),
            ReplayTarget::Exchange {
                exchange: "x".into(),
                routing_key: "k".into()
            }
        );
        assert!(Shown::from_request(&body(json!({"encoding": "hex"})), None).is_err());
        let m = message(BasicProperties::default(), "abcdef");
        let shown = Shown {
            base64_only: false,
            truncate: Some(3),
        };
        let j = message_json(&m, false, 0, shown);
        assert_eq!(j["payload"], json!("abc"));
        assert_eq!(j["payload_bytes"], json!(6));
    }
}
