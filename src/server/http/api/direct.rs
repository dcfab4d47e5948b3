//! How RabbitMQ's management API runs an AMQP operation for an HTTP request and answers
//! its refusals (`rabbit_mgmt_util`), shared by the exchange, binding and message
//! endpoints:
//!
//! - `direct_request` (exchange declare and delete, bind and unbind, purge): the method is
//!   run for the caller; a refused permission is 401 "Access refused.", a missing object
//!   404 `not_found` with the AMQP text, any other refusal 400 with the AMQP text;
//! - `with_channel` (publish, get): the method runs on a channel of an internal
//!   connection, whose closing reply text (`ACCESS_REFUSED - …`) becomes the answer: 401
//!   for a refused permission, 404 for a missing object, otherwise 400 `"406
//!   PRECONDITION_FAILED - …"` (`bad_request_exception`'s `"~tp ~ts"`);
//! - the body: `rabbit_mgmt_util:decode/1` (an empty body or `null` is `{}`, anything
//!   but an object is 400 `not_json`) and `with_decode/4` (every listed key present,
//!   else 400 `[{key_missing,K}]`).
//!
//! Some of RabbitMQ's refusals carry an Erlang tuple as their `reason`, which it renders
//! as a JSON array (`rabbit_web_dispatch_access_control:format_reason/1`):
//! `{"error":"bad_request","reason":["not_boolean","yes"]}`. [`Refusal::Term`] is that.

use super::{json_reply, read_body, ApiError, Ctx};
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::error::{BrokerError, ReplyCode};
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The reason of a `direct_request` refused for a missing permission (RabbitMQ hides
/// which one).
pub const ACCESS_REFUSED_TEXT: &str = "Access refused.";

/// A refusal: an [`ApiError`], or RabbitMQ's 400 whose reason is an Erlang tuple.
#[derive(Debug)]
pub enum Refusal {
    /// An error answer with a text reason.
    Api(ApiError),
    /// 400 `bad_request` whose `reason` is this JSON array (a tuple such as
    /// `{not_boolean, V}` or `{unknown, Action}`).
    Term(Vec<Value>),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal::Api(e)
    }
}

impl Refusal {
    /// RabbitMQ's `{Tag, Value}` refusal.
    pub fn term(tag: &str, value: Value) -> Refusal {
        Refusal::Term(vec![json!(tag), value])
    }
}

/// The answer of an endpoint whose refusals may be [`Refusal::Term`]s.
///
/// # Errors
/// The refusal, when it is an [`ApiError`].
pub fn answer(result: Result<Response, Refusal>) -> Result<Response, ApiError> {
    match result {
        Ok(r) => Ok(r),
        Err(Refusal::Api(e)) => Err(e),
        Err(Refusal::Term(reason)) => Ok(json_reply(
            400,
            &json!({"error": "bad_request", "reason": reason}),
        )),
    }
}

/// The vhost `name` for an operation on it (`with_vhost_and_props`).
///
/// # Errors
/// 404 `{"error":"not_found","reason":"vhost_not_found"}` when it does not exist.
pub fn vhost(broker: &Broker, name: &str) -> Result<Arc<VirtualHost>, ApiError> {
    broker.vhost(name).ok_or_else(vhost_not_found)
}

/// 404 `not_found` `vhost_not_found` (`rabbit_mgmt_util:set_resp_not_found/2`).
pub fn vhost_not_found() -> ApiError {
    ApiError::new(404, "not_found", "vhost_not_found")
}

/// Reads and decodes a request body of at most `max` bytes as RabbitMQ's
/// `rabbit_mgmt_util:decode/1` does: empty, `null` or `undefined` is an empty object.
///
/// # Errors
/// 400 `Exceeded HTTP request body size limit` past `max` (the connection is then
/// closed: the body is left unread); 400 `not_json` for anything but a JSON object, or
/// RabbitMQ's text for a JSON string (a body encoded twice).
pub fn json_body(body: &mut Body<'_>, max: usize) -> Result<Map<String, Value>, ApiError> {
    let bytes = read_body(body, max).map_err(|e| {
        if e.status == 413 {
            ApiError::bad_request("Exceeded HTTP request body size limit").closing()
        } else {
            e
        }
    })?;
    decode(&bytes)
}

/// RabbitMQ's `rabbit_mgmt_util:decode/1` of a whole body.
///
/// # Errors
/// As [`json_body`].
pub fn decode(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let text = bytes.trim_ascii();
    if text.is_empty() || text == b"null" || text == b"undefined" {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::String(_)) => Err(ApiError::bad_request(
            "invalid payload: the request body JSON-decoded to a string. Is the input \
             doubly-JSON-encoded?",
        )),
        _ => Err(ApiError::bad_request("not_json")),
    }
}

/// The values of `keys` in `body`, in order (`rabbit_mgmt_util:with_decode/4`).
///
/// # Errors
/// 400 listing every missing key as RabbitMQ prints it:
/// `[{key_missing,routing_key},{key_missing,payload}]`.
pub fn require_keys<'a>(
    body: &'a Map<String, Value>,
    keys: &[&str],
) -> Result<Vec<&'a Value>, ApiError> {
    let missing: Vec<String> = keys
        .iter()
        .filter(|k| !body.contains_key(**k))
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!("[{}]", missing.join(","))));
    }
    Ok(keys.iter().filter_map(|k| body.get(*k)).collect())
}

/// A boolean field of a declaration (`rabbit_mgmt_format:format_accept_content/1`):
/// `true`, `false` or those words as strings (as `rabbitmqadmin` sends them); `default`
/// when absent or `null`.
///
/// # Errors
/// RabbitMQ's 400 `["not_boolean", V]`.
pub fn bool_field(body: &Map<String, Value>, key: &str, default: bool) -> Result<bool, Refusal> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" => Ok(true),
        Some(Value::String(s)) if s == "false" => Ok(false),
        Some(other) => Err(Refusal::term("not_boolean", other.clone())),
    }
}

/// A string field of a method (`routing_key`, `type`): `default` when absent or `null`.
///
/// # Errors
/// 400 naming the field when it is not a string.
pub fn string_field<'a>(
    body: &'a Map<String, Value>,
    key: &str,
    default: &'a str,
) -> Result<&'a str, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key} must be a string, got {other}"
        ))),
    }
}

/// A refusal of a `direct_request` operation as RabbitMQ answers it.
pub fn direct_error(e: BrokerError) -> ApiError {
    match e.code {
        ReplyCode::AccessRefused | ReplyCode::NotAllowed => {
            ApiError::not_authorised(ACCESS_REFUSED_TEXT)
        }
        ReplyCode::NotFound => ApiError::new(404, "not_found", e.text),
        // A failed commit to meta.db is the server's fault, not the request's.
        ReplyCode::InternalError => ApiError::new(500, "internal_server_error", e.text),
        _ => ApiError::bad_request(e.text),
    }
}

/// A refusal of an operation on an internal channel (`with_channel`) as RabbitMQ answers
/// it: the channel's closing reply text, `NAME - text`.
pub fn channel_error(e: BrokerError) -> ApiError {
    let text = format!("{} - {}", e.code.name(), e.text);
    match e.code {
        ReplyCode::AccessRefused => ApiError::not_authorised(text),
        ReplyCode::NotFound => ApiError::new(404, "not_found", text),
        code => ApiError::bad_request(format!("{} {text}", code.as_u16())),
    }
}

/// Checks `caller`'s `access` to a resource for a `direct_request` operation.
///
/// # Errors
/// 401 "Access refused." (RabbitMQ's `direct_request` answer; the log says which).
pub fn permit(
    ctx: &Ctx<'_>,
    vhost: &str,
    access: crate::auth::permission::Access,
    resource: crate::auth::permission::Resource,
    name: &str,
) -> Result<(), ApiError> {
    super::queues::permit(ctx, vhost, access, resource, name).map_err(|e| {
        log::warn!("HTTP API: {}", e.reason.escape_debug());
        ApiError::not_authorised(ACCESS_REFUSED_TEXT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_decode_as_rabbitmqs() {
        assert!(decode(b"").unwrap().is_empty());
        assert!(decode(b"null").unwrap().is_empty());
        assert!(decode(b" {\"a\": 1} ").unwrap().contains_key("a"));
        assert_eq!(decode(b"[1]").unwrap_err().reason, "not_json");
        assert_eq!(decode(b"{").unwrap_err().reason, "not_json");
        assert!(decode(b"\"{}\"").unwrap_err().reason.contains("doubly"));
    }

    #[test]
    fn missing_keys_are_listed_as_erlang_prints_them() {
        let body = decode(br#"{"routing_key": "k", "properties": {}}"#).unwrap();
        let e = require_keys(&body, &["routing_key", "payload", "payload_encoding"]).unwrap_err();
        assert_eq!(
            e.reason,
            "[{key_missing,payload},{key_missing,payload_encoding}]"
        );
        assert_eq!(
            require_keys(&body, &["properties", "routing_key"]).unwrap(),
            [&json!({}), &json!("k")]
        );
    }

    #[test]
    fn refusals_map_as_rabbitmqs() {
        let e = direct_error(BrokerError::access_refused("x"));
        assert_eq!((e.status, e.reason.as_str()), (401, ACCESS_REFUSED_TEXT));
        let e = direct_error(BrokerError::not_found("no queue 'q' in vhost '/'"));
        assert_eq!((e.status, e.error.as_str()), (404, "not_found"));
        let e = channel_error(BrokerError::precondition("too big"));
        assert_eq!(
            (e.status, e.reason.as_str()),
            (400, "406 PRECONDITION_FAILED - too big")
        );
        let e = channel_error(BrokerError::access_refused("access to queue 'q'"));
        assert_eq!(
            (e.status, e.reason.as_str()),
            (401, "ACCESS_REFUSED - access to queue 'q'")
        );
        match bool_field(&decode(br#"{"durable": "yes"}"#).unwrap(), "durable", false) {
            Err(Refusal::Term(t)) => assert_eq!(t, [json!("not_boolean"), json!("yes")]),
            other => panic!("{other:?}"),
        }
    }
}
