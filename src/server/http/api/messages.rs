//! Messages over HTTP, for diagnostics: `POST /api/exchanges/{vhost}/{name}/publish`,
//! `POST /api/queues/{vhost}/{name}/get`, `DELETE /api/queues/{vhost}/{name}/contents`
//! (purge) and `POST /api/queues/{vhost}/{name}/actions` (RabbitMQ 4.x:
//! `rabbit_mgmt_wm_exchange_publish`, `rabbit_mgmt_wm_queue_get`,
//! `rabbit_mgmt_wm_queue_purge`, `rabbit_mgmt_wm_queue_actions`).
//!
//! Publish and get run on a channel of an internal session, as RabbitMQ runs them on a
//! channel of a direct connection: [`ManagementChannel`], a [`Session`] of the caller
//! with one channel, whose [`ClientSink`] keeps the publisher confirm and the mandatory
//! return the request waits for and discards everything else. So an HTTP publish goes
//! through exactly what an AMQP `basic.publish` does: the user's write permission and
//! `user_id` check, routing with alternate exchanges and `CC`/`BCC`, queue length limits
//! and dead-lettering; and, as RabbitMQ 4.x does, it is published in confirm mode and
//! `mandatory`, answered once confirmed (a persistent message routed to a durable queue
//! after its fsync under `--fsync always`), `{"routed": false}` when it was returned,
//! 400 when nacked (a full queue refusing it). A get takes messages with `basic.get`
//! and settles them as the ack mode says: `ack_requeue_true` and `reject_requeue_true`
//! requeue (redelivered next time), `ack_requeue_false` removes, `reject_requeue_false`
//! rejects (dead-lettered when the queue has a dead-letter exchange).
//!
//! Unlike RabbitMQ, whose API publishes through a direct connection that resource alarms
//! do not block, an HTTP publish during a memory or disk alarm is refused (503), so a
//! script cannot fill a disk that AMQP publishers are kept off.

use super::auth::{require, require_vhost, Need};
use super::direct::{self, Refusal};
use super::exchanges::exchange_name;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::permission::{Access, Resource};
use crate::broker::channel::Channel;
use crate::broker::sink::{CancelReason, ClientSink};
use crate::broker::vhost::VirtualHost;
use crate::broker::{GetResult, Message, Session};
use crate::error::ReplyCode;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use crate::server::inspect::{self, InspectError};
use crate::types::{BasicProperties, FieldValue};
use base64::Engine;
use serde_json::{json, Map, Value};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Largest publish request body, in bytes (RabbitMQ's `max_http_body_size` default,
/// 20 MB): room for a message of the default 16 MiB limit, base64-encoded.
pub const PUBLISH_BODY_BYTES_MAX: usize = 20_000_000;

/// Longest wait for a publish's confirm, in ms (RabbitMQ's `publish_timeout`, 30 s).
pub const PUBLISH_CONFIRM_TIMEOUT_MS: u64 = 30_000;

/// Most messages one get may ask for (RabbitMQ has no bound; a `count` past it is 400).
pub const GET_COUNT_MAX: i64 = 10_000;

/// Payload bytes a get collects at most, in bytes: once reached it takes no further
/// message (those stay in the queue, untouched), so one answer holds at most this plus
/// one message.
pub const GET_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The channel number of a management session.
const CHANNEL: u16 = 1;

/// What the sink of a management channel has been told.
#[derive(Debug, Default)]
struct Outcome {
    /// The publish was returned unroutable (`basic.return`).
    returned: bool,
    /// The publish's confirm: true for an ack, false for a nack.
    confirm: Option<bool>,
}

/// The [`ClientSink`] of a management channel: keeps the confirm and the return, wakes
/// the request waiting for them, drops the rest (a management channel has no consumers).
#[derive(Debug, Default)]
struct HttpSink {
    outcome: Mutex<Outcome>,
    changed: Condvar,
}

impl HttpSink {
    fn lock(&self) -> MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The confirm, waiting until `deadline` for it; `None` when it did not come.
    fn wait_confirm(&self, deadline: Instant) -> Option<bool> {
        let mut outcome = self.lock();
        loop {
            if let Some(ack) = outcome.confirm {
                return Some(ack);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            outcome = self
                .changed
                .wait_timeout(outcome, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl ClientSink for HttpSink {
    fn deliver(&self, _: u16, _: &str, _: u64, _: bool, _: &Message) {}

    fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}

    fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {
        self.lock().returned = true;
    }

    fn confirm(&self, _: u16, _: u64, _: bool, ack: bool) {
        self.lock().confirm = Some(ack);
        self.changed.notify_all();
    }

    fn is_saturated(&self) -> bool {
        false
    }

    fn force_close(&self, _: ReplyCode, _: &str) {}
}

/// A channel of an internal session of the caller in one vhost (RabbitMQ's
/// `with_channel`: a direct connection's channel), closed when dropped: deliveries it
/// took and did not settle go back to their queues.
struct ManagementChannel {
    session: Session,
    sink: Arc<HttpSink>,
}

impl ManagementChannel {
    /// Opens the channel as `user` on `vhost`, with a connection id of its own (a queue
    /// exclusive to another connection is refused, as RabbitMQ refuses it).
    fn open(ctx: &Ctx<'_>, vhost: Arc<VirtualHost>) -> Result<ManagementChannel, ApiError> {
        let broker = Arc::clone(ctx.broker());
        let sink = Arc::new(HttpSink::default());
        let id = broker.next_connection_id();
        let mut session = Session::new(
            broker,
            id,
            vhost,
            Arc::clone(&sink) as Arc<dyn ClientSink>,
            CHANNEL,
            Arc::new(AtomicUsize::new(0)),
        )
        .with_user(&ctx.caller.name);
        session
            .open_channel(CHANNEL)
            .map_err(direct::channel_error)?;
        Ok(ManagementChannel { session, sink })
    }
}

impl Drop for ManagementChannel {
    fn drop(&mut self) {
        self.session.close_channel(CHANNEL);
    }
}

/// The vhost and the existence check of a POST on a queue or exchange
/// (`rabbit_mgmt_util:set_resp_not_found/2`).
///
/// # Errors
/// 404 `{"error":"not_found","reason":"vhost_not_found"}` or with `what_not_found`.
fn target_vhost(
    ctx: &Ctx<'_>,
    vh: &str,
    exists: impl FnOnce(&VirtualHost) -> bool,
    what_not_found: &str,
) -> Result<Arc<VirtualHost>, ApiError> {
    require_vhost(ctx.broker(), &ctx.caller, vh)?;
    let v = direct::vhost(ctx.broker(), vh)?;
    if !exists(&v) {
        return Err(ApiError::new(404, "not_found", what_not_found));
    }
    Ok(v)
}

/// Message properties from RabbitMQ's JSON (`rabbit_mgmt_format:to_basic_properties/1`):
/// AMQP's names, `delivery_mode`, `priority` and `timestamp` integers, `headers` an
/// object, the others strings; unknown keys are ignored.
///
/// # Errors
/// RabbitMQ's 400 `["not_int", K]` or `["not_string", K]`; 400 for headers nested deeper
/// than a field table may ([`crate::types::field_table::check_nesting`]).
pub fn properties_from_json(
    json: &Map<String, Value>,
) -> Result<Option<Box<BasicProperties>>, Refusal> {
    let mut p = BasicProperties::default();
    for (key, v) in json {
        let text = || match v {
            Value::String(s) => Ok(Some(s.clone())),
            _ => Err(Refusal::term("not_string", json!(key))),
        };
        let int = |max: u64| match v.as_u64() {
            Some(n) if n <= max => Ok(n),
            _ => Err(Refusal::term("not_int", json!(key))),
        };
        match key.as_str() {
            "content_type" => p.content_type = text()?,
            "content_encoding" => p.content_encoding = text()?,
            "correlation_id" => p.correlation_id = text()?,
            "reply_to" => p.reply_to = text()?,
            "expiration" => p.expiration = text()?,
            "message_id" => p.message_id = text()?,
            "type" => p.kind = text()?,
            "user_id" => p.user_id = text()?,
            "app_id" => p.app_id = text()?,
            "cluster_id" => p.cluster_id = text()?,
            "delivery_mode" => p.delivery_mode = Some(int(u64::from(u8::MAX))? as u8),
            "priority" => p.priority = Some(int(u64::from(u8::MAX))? as u8),
            "timestamp" => p.timestamp = Some(int(u64::MAX)?),
            "headers" => match FieldValue::from_json(v) {
                // Built from JSON, the headers could nest deeper than the store and the
                // clients decode (AMQP's decoder already refuses such tables).
                FieldValue::Table(t) => {
                    crate::types::field_table::check_nesting(&t, "message headers")
                        .map_err(ApiError::bad_request)?;
                    p.headers = Some(t);
                }
                _ => return Err(Refusal::term("not_table", json!(key))),
            },
            _ => {}
        }
    }
    Ok(p.into_boxed())
}

/// A payload as sent: `string` as it is, `base64` decoded (padding optional).
///
/// # Errors
/// RabbitMQ's 400 `["not_base64", P]` or `["unsupported_encoding", E]`.
fn decode_payload(payload: &str, encoding: &Value) -> Result<Vec<u8>, Refusal> {
    match encoding.as_str() {
        Some("string") => Ok(payload.as_bytes().to_vec()),
        Some("base64") => {
            let engine = base64::engine::GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                base64::engine::GeneralPurposeConfig::new()
                    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
            );
            engine
                .decode(payload)
                .map_err(|_| Refusal::term("not_base64", json!(payload)))
        }
        _ => Err(Refusal::term("unsupported_encoding", encoding.clone())),
    }
}

/// `POST /api/exchanges/{vhost}/{name}/publish`.
fn publish(ctx: &Ctx<'_>, vh: &str, x: &str, body: &mut Body<'_>) -> Result<Response, Refusal> {
    let v = target_vhost(ctx, vh, |v| v.exchange(x).is_some(), "exchange_not_found")?;
    let body = direct::json_body(body, PUBLISH_BODY_BYTES_MAX)?;
    let keys = direct::require_keys(
        &body,
        &["routing_key", "properties", "payload", "payload_encoding"],
    )?;
    let [routing_key, props, payload, encoding] = keys.as_slice() else {
        return Err(ApiError::bad_request("missing keys").into());
    };
    let Value::String(payload) = payload else {
        return Err(ApiError::bad_request("payload_not_string").into());
    };
    let Value::String(routing_key) = routing_key else {
        return Err(ApiError::bad_request("routing_key must be a string").into());
    };
    let properties = match props {
        Value::Object(m) => properties_from_json(m)?,
        Value::Null => None,
        _ => return Err(ApiError::bad_request("properties must be an object").into()),
    };
    let bytes = decode_payload(payload, encoding)?;
    let alarms = ctx.broker().alarms();
    if alarms.is_alarmed() {
        return Err(ApiError::new(
            503,
            "service_unavailable",
            format!(
                "Unable to publish message: publishers are blocked by a resource alarm ({})",
                crate::alarm::blocked_reason(alarms.bits())
            ),
        )
        .into());
    }
    let mut channel = ManagementChannel::open(ctx, v)?;
    let session = &mut channel.session;
    session
        .confirm_select(CHANNEL)
        .map_err(direct::channel_error)?;
    session
        .basic_publish(CHANNEL, x, routing_key, true, properties, bytes)
        .map_err(direct::channel_error)?;
    session.flush_confirms(CHANNEL);
    let deadline = Instant::now() + Duration::from_millis(PUBLISH_CONFIRM_TIMEOUT_MS);
    match channel.sink.wait_confirm(deadline) {
        Some(true) => {
            let routed = !channel.sink.lock().returned;
            Ok(json_reply(200, &json!({ "routed": routed })))
        }
        Some(false) => Err(ApiError::bad_request(
            "rejected Unable to publish message. Check queue limits.",
        )
        .into()),
        None => Err(ApiError::bad_request(
            "confirm_timeout Timed out waiting for a publisher confirm. The message may \
             still have been enqueued. Check the health of the queues bound to this exchange.",
        )
        .into()),
    }
}

/// How a get settles what it took (`rabbit_mgmt_wm_queue_get`'s ack modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckMode {
    /// Taken, then requeued (`basic.nack` with requeue).
    AckRequeueTrue,
    /// Taken and removed (`basic.get` with `no_ack`).
    AckRequeueFalse,
    /// Taken, then rejected with requeue.
    RejectRequeueTrue,
    /// Taken, then rejected without requeue: dead-lettered or dropped.
    RejectRequeueFalse,
}

impl AckMode {
    fn parse(v: &Value) -> Result<AckMode, ApiError> {
        Ok(match v.as_str() {
            Some("ack_requeue_true") => AckMode::AckRequeueTrue,
            Some("ack_requeue_false") => AckMode::AckRequeueFalse,
            Some("reject_requeue_true") => AckMode::RejectRequeueTrue,
            Some("reject_requeue_false") => AckMode::RejectRequeueFalse,
            _ => {
                let shown = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                return Err(ApiError::bad_request(format!(
                    "Invalid ackmode value: {shown}. Valid values are: ack_requeue_true, \
                     ack_requeue_false, reject_requeue_true, reject_requeue_false"
                )));
            }
        })
    }
}

/// RabbitMQ's `rabbit_misc:parse_int/1`: an integer, a number truncated, or a string of
/// digits (`rabbitmqadmin` sends `"count": "1"`).
///
/// # Errors
/// RabbitMQ's 400 `["not_integer", V]`.
fn parse_int(v: &Value) -> Result<i64, Refusal> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
            .ok_or_else(|| Refusal::term("not_integer", v.clone())),
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| Refusal::term("not_integer", v.clone())),
        _ => Err(Refusal::term("not_integer", v.clone())),
    }
}

/// One message of a get's answer ([`inspect::message_json`], shared with peek and
/// search).
fn render_got(got: &GetResult, base64_only: bool, truncate: Option<usize>) -> Value {
    let shown = inspect::Shown {
        base64_only,
        truncate,
    };
    let count = got.message_count as usize;
    Value::Object(inspect::message_json(
        &got.message,
        got.redelivered,
        count,
        shown,
    ))
}

/// `POST /api/queues/{vhost}/{name}/peek|replay|search`: the queue tools of
/// [`inspect`] on a management channel of the caller (docs/http-api.md, "Beyond
/// RabbitMQ"); 404 for an unknown vhost or queue as `/get`, 400 for a malformed request.
fn queue_tool(
    ctx: &Ctx<'_>,
    vh: &str,
    q: &str,
    body: &mut Body<'_>,
    tool: inspect::Tool,
) -> Result<Response, Refusal> {
    let v = target_vhost(ctx, vh, |v| v.queue(q).is_some(), "queue_not_found")?;
    let body = direct::json_body(body, super::API_BODY_BYTES_MAX)?;
    let mut channel = ManagementChannel::open(ctx, v)?;
    match tool(&mut channel.session, CHANNEL, q, &body) {
        Ok(answer) => Ok(json_reply(200, &answer)),
        Err(InspectError::Bad(text)) => Err(ApiError::bad_request(text).into()),
        Err(InspectError::Broker(e)) => Err(direct::channel_error(e).into()),
    }
}

/// The query parameters the unacked listing reads, as its request.
const UNACKED_PARAMETERS: [&str; 3] = ["limit", "encoding", "truncate"];

/// `GET /api/queues/{vhost}/{name}/unacked?limit=100&encoding=auto&truncate=2000`: the
/// deliveries awaiting their ack ([`inspect::unacked`]); the query parameters are its
/// request; 404 for an unknown vhost or queue, 400 for a malformed parameter.
fn unacked(ctx: &Ctx<'_>, vh: &str, q: &str) -> Result<Response, Refusal> {
    let v = target_vhost(ctx, vh, |v| v.queue(q).is_some(), "queue_not_found")?;
    let request: Map<String, Value> = UNACKED_PARAMETERS
        .iter()
        .filter_map(|k| Some(((*k).to_string(), json!(ctx.request.query(k)?))))
        .collect();
    let mut channel = ManagementChannel::open(ctx, v)?;
    match inspect::unacked(&mut channel.session, CHANNEL, q, &request) {
        Ok(answer) => Ok(json_reply(200, &answer)),
        Err(InspectError::Bad(text)) => Err(ApiError::bad_request(text).into()),
        Err(InspectError::Broker(e)) => Err(direct::channel_error(e).into()),
    }
}

/// `POST /api/queues/{vhost}/{name}/get`.
fn get(ctx: &Ctx<'_>, vh: &str, q: &str, body: &mut Body<'_>) -> Result<Response, Refusal> {
    let v = target_vhost(ctx, vh, |v| v.queue(q).is_some(), "queue_not_found")?;
    let body = direct::json_body(body, super::API_BODY_BYTES_MAX)?;
    let keys = direct::require_keys(&body, &["ackmode", "count", "encoding"])?;
    let [ackmode, count, encoding] = keys.as_slice() else {
        return Err(ApiError::bad_request("missing keys").into());
    };
    let mode = AckMode::parse(ackmode)?;
    let count = parse_int(count)?;
    let base64_only = match encoding.as_str() {
        Some("auto") => false,
        Some("base64") => true,
        _ => {
            return Err(
                ApiError::bad_request("Unsupported encoding. Please use auto or base64.").into(),
            )
        }
    };
    let truncate = match body.get("truncate") {
        None | Some(Value::Null) => None,
        Some(t) => Some(parse_int(t)?),
    };
    if !(0..=GET_COUNT_MAX).contains(&count) {
        return Err(ApiError::bad_request(format!(
            "count must be between 0 and {GET_COUNT_MAX}, got {count}"
        ))
        .into());
    }
    let truncate = match truncate.map(usize::try_from) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => {
            return Err(ApiError::bad_request("truncate must not be negative").into());
        }
    };
    let mut channel = ManagementChannel::open(ctx, v)?;
    let session = &mut channel.session;
    let no_ack = mode == AckMode::AckRequeueFalse;
    let mut got: Vec<GetResult> = Vec::new();
    let mut bytes = 0usize;
    while (got.len() as i64) < count && bytes < GET_PAYLOAD_BYTES_MAX {
        let mut taken = None;
        let any = session
            .basic_get(CHANNEL, q, no_ack, |r| taken = Some(r))
            .map_err(direct::channel_error)?;
        match taken {
            Some(r) if any => {
                bytes += truncate.map_or(r.message.body_size(), |t| t.min(r.message.body_size()));
                got.push(r);
            }
            _ => break,
        }
    }
    // Settled only once all are taken: a requeued message would else be taken again.
    for r in &got {
        let settled = match mode {
            AckMode::AckRequeueFalse => Ok(()),
            AckMode::AckRequeueTrue => session.basic_nack(CHANNEL, r.delivery_tag, false, true),
            AckMode::RejectRequeueTrue => session.basic_reject(CHANNEL, r.delivery_tag, true),
            AckMode::RejectRequeueFalse => session.basic_reject(CHANNEL, r.delivery_tag, false),
        };
        settled.map_err(direct::channel_error)?;
    }
    let rendered: Vec<Value> = got
        .iter()
        .map(|r| render_got(r, base64_only, truncate))
        .collect();
    Ok(json_reply(200, &Value::Array(rendered)))
}

/// `DELETE /api/queues/{vhost}/{name}/contents`: `queue.purge` (read permission), 204.
fn purge(ctx: &Ctx<'_>, vh: &str, name: &str) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let v = broker.vhost(vh).ok_or_else(ApiError::not_found)?;
    if v.queue(name).is_none() {
        return Err(ApiError::not_found());
    }
    direct::permit(ctx, vh, Access::Read, Resource::Queue, name)?;
    // No management connection owns a queue: another connection's exclusive queue is
    // refused (405 RESOURCE_LOCKED, answered 400 as RabbitMQ does).
    let q = v.queue_for(name, 0).map_err(direct::direct_error)?;
    let purged = q.purge();
    log::info!(
        "queue '{}' in vhost '{}' purged over HTTP by '{}' ({purged} messages)",
        name.escape_debug(),
        vh.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(204))
}

/// `POST /api/queues/{vhost}/{name}/actions`: RabbitMQ 4.x knows no action any more
/// (`sync` and `cancel_sync` were for classic mirrored queues, removed in 4.0), so every
/// other action is 400 `["unknown", Action]`, administrators only, as there. RelayMQ adds
/// `pause` and `resume` ([`inspect::QueueAction`]): 204, `configure` permission on the
/// queue, on a management channel of the caller.
fn actions(ctx: &Ctx<'_>, vh: &str, q: &str, body: &mut Body<'_>) -> Result<Response, Refusal> {
    let parsed = direct::json_body(body, super::API_BODY_BYTES_MAX);
    if let Some(action) = parsed
        .as_ref()
        .ok()
        .and_then(inspect::QueueAction::from_request)
    {
        let v = target_vhost(ctx, vh, |v| v.queue(q).is_some(), "queue_not_found")?;
        let mut channel = ManagementChannel::open(ctx, v)?;
        action
            .run(&mut channel.session, CHANNEL, q)
            .map_err(direct::channel_error)?;
        return Ok(Response::empty(204));
    }
    require(&ctx.caller, Need::Administrator)?;
    target_vhost(ctx, vh, |v| v.queue(q).is_some(), "queue_not_found")?;
    let body = parsed?;
    let keys = direct::require_keys(&body, &["action"])?;
    let action = keys.first().map_or(Value::Null, |a| (*a).clone());
    Err(Refusal::term("unknown", action))
}

/// Answers `/api/exchanges/{v}/{x}/publish` and `/api/queues/{v}/{q}/contents|get|actions`
/// (and RelayMQ's `peek|replay|search|unacked`).
///
/// # Errors
/// As RabbitMQ: 401, 404, 405, 400 (503 for a publish during a resource alarm).
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("POST", ["exchanges", vh, x, "publish"]) => {
            direct::answer(publish(ctx, vh, exchange_name(x), body))
        }
        ("POST", ["queues", vh, q, "get"]) => direct::answer(get(ctx, vh, q, body)),
        ("POST", ["queues", vh, q, "peek"]) => {
            direct::answer(queue_tool(ctx, vh, q, body, inspect::peek))
        }
        ("POST", ["queues", vh, q, "replay"]) => {
            direct::answer(queue_tool(ctx, vh, q, body, inspect::replay))
        }
        ("POST", ["queues", vh, q, "search"]) => {
            direct::answer(queue_tool(ctx, vh, q, body, inspect::search))
        }
        ("GET", ["queues", vh, q, "unacked"]) => direct::answer(unacked(ctx, vh, q)),
        ("DELETE", ["queues", vh, q, "contents"]) => purge(ctx, vh, q),
        ("POST", ["queues", vh, q, "actions"]) => direct::answer(actions(ctx, vh, q, body)),
        (_, ["exchanges", _, _, "publish"])
        | (_, ["queues", _, _, "get" | "contents" | "actions"])
        | (_, ["queues", _, _, "peek" | "replay" | "search" | "unacked"]) => {
            Err(method_not_allowed())
        }
        _ => Err(ApiError::not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_term(r: Result<impl std::fmt::Debug, Refusal>) -> Vec<Value> {
        match r {
            Err(Refusal::Term(t)) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn properties_are_read_as_rabbitmq_reads_them() {
        let json = json!({"delivery_mode": 2, "content_type": "text/plain",
                          "headers": {"a": 1, "b": "x"}, "type": "t", "unknown": 3});
        let p = properties_from_json(json.as_object().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(p.delivery_mode, Some(2));
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(p.kind.as_deref(), Some("t"));
        assert_eq!(p.headers.unwrap().get("a"), Some(&FieldValue::I64(1)));
        assert!(properties_from_json(&Map::new()).unwrap().is_none());
        let bad = json!({"delivery_mode": "2"});
        assert_eq!(
            refused_term(properties_from_json(bad.as_object().unwrap())),
            [json!("not_int"), json!("delivery_mode")]
        );
        let bad = json!({"app_id": 5});
        assert_eq!(
            refused_term(properties_from_json(bad.as_object().unwrap())),
            [json!("not_string"), json!("app_id")]
        );
    }

    #[test]
    fn payloads_decode_and_counts_parse_as_rabbitmqs() {
        assert_eq!(decode_payload("aGk=", &json!("base64")).unwrap(), b"hi");
        assert_eq!(decode_payload("aGk", &json!("base64")).unwrap(), b"hi");
        assert_eq!(decode_payload("hi", &json!("string")).unwrap(), b"hi");
        assert_eq!(
            refused_term(decode_payload("*", &json!("base64"))),
            [json!("not_base64"), json!("*")]
        );
        assert_eq!(
            refused_term(decode_payload("x", &json!("hex"))),
            [json!("unsupported_encoding"), json!("hex")]
        );
        assert_eq!(parse_int(&json!("3")).unwrap(), 3);
        assert_eq!(parse_int(&json!(2.9)).unwrap(), 2);
        assert_eq!(
            refused_term(parse_int(&json!("x"))),
            [json!("not_integer"), json!("x")]
        );
    }
}
