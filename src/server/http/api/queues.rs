//! Queues: `GET /api/queues`, `/api/queues/detailed`, `/api/queues/{vhost}`,
//! `GET/PUT/DELETE /api/queues/{vhost}/{name}` (RabbitMQ 4.x: `rabbit_mgmt_wm_queues`,
//! `rabbit_mgmt_wm_queue`; fields of `rabbit_mgmt_format:queue/1` plus the statistics).

use super::auth::{require_vhost, sees_vhost};
use super::direct;
use super::list::{self, ListSpec};
use super::stats;
use super::stats::rate;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::permission::{refused, Access, Resource};
use crate::broker::queue::queue_type::QueueType;
use crate::broker::queue::Queue;
use crate::broker::vhost::{QueueSpec, VirtualHost};
use crate::broker::Broker;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use crate::types::{FieldTable, FieldValue};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Checks `caller`'s `access` to the resource `name` in `vhost` (their permissions there).
///
/// # Errors
/// 401 `not_authorised` with RabbitMQ's "access to queue 'q' in vhost 'v' refused for
/// user 'u'" text.
pub(super) fn permit(
    ctx: &Ctx<'_>,
    vhost: &str,
    access: Access,
    resource: Resource,
    name: &str,
) -> Result<(), ApiError> {
    let allowed = ctx
        .broker()
        .users()
        .permissions(&ctx.caller.name, vhost)
        .is_some_and(|p| p.allows(access, resource, name));
    if allowed {
        Ok(())
    } else {
        Err(refused(resource, name, vhost, &ctx.caller.name).into())
    }
}

/// The vhost `name`, or 404.
///
/// # Errors
/// 404 when it does not exist.
pub(super) fn vhost(broker: &Broker, name: &str) -> Result<Arc<VirtualHost>, ApiError> {
    broker.vhost(name).ok_or_else(ApiError::not_found)
}

/// A field table as JSON.
pub(super) fn table_json(t: &FieldTable) -> Value {
    FieldValue::Table(t.clone()).to_json()
}

/// A queue as RabbitMQ's management API shows it; `windows` ask for history
/// ([`stats::windows`]).
pub(super) fn render(
    node: &str,
    vhost: &str,
    q: &Queue,
    rates: &crate::broker::rates::Rates,
    windows: (Option<stats::Window>, Option<stats::Window>),
) -> Value {
    let st = q.stats();
    let r = rates.queue(vhost, &q.name);
    let history = if windows.0.is_some() || windows.1.is_some() {
        rates.queue_history(vhost, &q.name)
    } else {
        crate::broker::rates::History::default()
    };
    let stored = q.storage.as_ref().map(|x| x.stats()).unwrap_or_default();
    let settings = q.settings();
    let policy = settings.policy.as_ref().map(|p| json!(p.def.name));
    let operator_policy = settings.operator_policy.as_ref().map(|p| json!(p.def.name));
    let definition = Value::Object(crate::broker::policy::operator::merge_definitions(
        settings.policy.as_deref(),
        settings.operator_policy.as_deref(),
    ));
    let consumers = q.consumers();
    let exclusive_tag = consumers
        .iter()
        .find(|c| c.exclusive)
        .map(|c| c.tag.to_string());
    let active = consumers.iter().filter(|c| !c.is_cancelled()).count();
    // RabbitMQ's consumer utilisation is the share of time the queue could deliver at
    // once; RelayMQ reports it at this moment: 1.0 when nothing waits or a consumer has
    // room, 0.0 when messages wait and every consumer is at its prefetch (or none), or
    // the queue is paused.
    let utilisation = if active == 0 {
        0.0
    } else if st.ready == 0 || (!q.is_paused() && consumers.iter().any(|c| c.has_capacity())) {
        1.0
    } else {
        0.0
    };
    let messages = st.ready + st.unacked;
    let persistent = usize::try_from(stored.records_valid).unwrap_or(usize::MAX);
    let mut row = json!({
        "name": &*q.name,
        "vhost": vhost,
        "type": q.queue_type.as_str(),
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive,
        "arguments": table_json(&q.arguments),
        "node": node,
        "state": state(q),
        "paused": q.is_paused(),
        "policy": policy,
        "operator_policy": operator_policy,
        "effective_policy_definition": definition,
        "exclusive_consumer_tag": exclusive_tag,
        "single_active_consumer_tag": q.single_active_consumer().map(|c| c.tag.to_string()),
        "consumers": st.consumers,
        "consumer_capacity": utilisation,
        "consumer_utilisation": utilisation,
        "messages_ram": messages - st.ready_paged.min(messages),
        "messages_ready_ram": st.ready - st.ready_paged.min(st.ready),
        "messages_unacknowledged_ram": st.unacked,
        "messages_paged_out": st.ready_paged,
        "messages_persistent": persistent,
        "message_bytes": st.ready_bytes,
        "message_bytes_ready": st.ready_bytes,
        "message_bytes_unacknowledged": 0,
        "message_bytes_ram": st.ready_memory_bytes,
        "message_bytes_paged_out": st.ready_bytes.saturating_sub(st.ready_memory_bytes),
        "message_bytes_persistent": stored.bytes_on_disk,
        "head_message_timestamp": null,
        "memory": st.ready_memory_bytes,
        "reductions": 0,
        "reductions_details": rate(0.0),
        "recoverable_slaves": null,
        "garbage_collection": {"fullsweep_after": 0, "max_heap_size": 0, "min_bin_vheap_size": 0, "min_heap_size": 0, "minor_gcs": 0},
        "backing_queue_status": {
            "mode": "default",
            "version": 2,
            "len": st.ready,
            "avg_ingress_rate": r.publish,
            "avg_egress_rate": r.deliver_get,
            "avg_ack_ingress_rate": 0.0,
            "avg_ack_egress_rate": r.ack,
        },
    });
    if let Value::Object(m) = &mut row {
        stats::lengths(m, st.ready, st.unacked, &r, &history, windows.1);
        let counters = stats::Counters::of(&st);
        m.insert(
            "message_stats".into(),
            Value::Object(stats::message_stats(&counters, &r, &history, windows.0)),
        );
        if q.queue_type == QueueType::Quorum {
            // RabbitMQ's quorum-queue fields; one node holds every quorum queue's one member.
            m.insert("leader".into(), json!(node));
            m.insert("members".into(), json!([node]));
            m.insert("online".into(), json!([node]));
            let limit = settings.lifecycle.delivery_limit;
            m.insert("delivery_limit".into(), json!(limit.map_or(-1, i64::from)));
            // RabbitMQ 4.3's delayed retry: the setting, the messages waiting (in the
            // queue, not ready) and the earliest due time (ms since the Unix epoch).
            let retry = settings.delayed_retry;
            m.insert(
                "delayed_retry".into(),
                json!(retry.map_or_else(|| "disabled".to_string(), |r| r.describe())),
            );
            let (delayed, next) = q.delayed_retries();
            m.insert("messages_delayed".into(), json!(delayed));
            m.insert("messages".into(), json!(st.ready + st.unacked + delayed));
            if let Some(next) = next {
                m.insert("next_delayed_at".into(), json!(next));
            }
        }
        // RabbitMQ shows `idle_since` only on a queue that is idle.
        if let Some(ms) = rates.queue_idle_since(vhost, &q.name) {
            m.insert("idle_since".into(), stats::timestamp(ms));
        }
    }
    row
}

/// A queue's `state`: `down` when its store failed (RabbitMQ's word for a queue that
/// cannot serve), `paused` while an operator paused it (LavinMQ's word; docs/lifecycle.md,
/// "Pausing a queue"), else `running`.
fn state(q: &Queue) -> &'static str {
    if q.storage_id.is_some() && q.storage.as_ref().is_none_or(|x| x.is_failed()) {
        "down"
    } else if q.is_paused() {
        "paused"
    } else {
        "running"
    }
}

/// The queue fields sorted on without rendering.
fn cheap(item: &(Arc<str>, Arc<Queue>), field: &str) -> Option<Value> {
    let (vhost, q) = item;
    Some(match field {
        "name" => json!(&*q.name),
        "vhost" => json!(&**vhost),
        "durable" => json!(q.durable),
        "auto_delete" => json!(q.auto_delete),
        "exclusive" => json!(q.exclusive),
        "type" => json!(q.queue_type.as_str()),
        "messages" => json!(q.message_count()),
        "consumers" => json!(q.consumer_count()),
        "state" => json!(state(q)),
        "paused" => json!(q.is_paused()),
        _ => return None,
    })
}

fn list_queues(ctx: &Ctx<'_>, only: Option<&str>) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    let vhosts = match only {
        Some(v) => {
            require_vhost(broker, &ctx.caller, v)?;
            vec![vhost(broker, v)?]
        }
        None => broker
            .vhosts()
            .into_iter()
            .filter(|vh| sees_vhost(broker, &ctx.caller, &vh.name))
            .collect(),
    };
    let mut items: Vec<(Arc<str>, Arc<Queue>)> = Vec::new();
    for vh in &vhosts {
        let name: Arc<str> = Arc::from(&*vh.name);
        items.extend(vh.all_queues().into_iter().map(|q| (Arc::clone(&name), q)));
    }
    let node = ctx.api.identity.node.clone();
    let owner = Arc::clone(broker);
    let windows = stats::windows(ctx.request);
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &["vhost", "name"],
            cheap,
            render: Arc::new(move |(vh, q)| render(&node, vh, q, owner.rates(), windows)),
        },
    )
}

/// The `arguments` object of a body as a field table.
///
/// # Errors
/// 400 when it is not an object.
pub(super) fn arguments(body: &Map<String, Value>) -> Result<FieldTable, ApiError> {
    match body.get("arguments") {
        None | Some(Value::Null) => Ok(FieldTable::new()),
        Some(v @ Value::Object(_)) => match FieldValue::from_json(v) {
            FieldValue::Table(t) => Ok(t),
            _ => Ok(FieldTable::new()),
        },
        Some(Value::Array(a)) if a.is_empty() => Ok(FieldTable::new()),
        Some(other) => Err(ApiError::bad_request(format!(
            "arguments must be an object, got {other}"
        ))),
    }
}

fn put_queue(
    ctx: &Ctx<'_>,
    vh: &str,
    name: &str,
    body: &mut Body<'_>,
) -> Result<Response, direct::Refusal> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let v = direct::vhost(broker, vh)?;
    let body = ctx.json_body(body)?;
    direct::permit(ctx, vh, Access::Configure, Resource::Queue, name)?;
    let mut args = arguments(&body)?;
    if let Some(kind) = body.get("type").and_then(Value::as_str) {
        args.entry("x-queue-type".to_string())
            .or_insert_with(|| FieldValue::string(kind));
    }
    if let Some(dlx) = args.get("x-dead-letter-exchange").and_then(|v| v.as_str()) {
        direct::permit(ctx, vh, Access::Write, Resource::Exchange, dlx)?;
        direct::permit(ctx, vh, Access::Read, Resource::Queue, name)?;
    }
    let spec = QueueSpec {
        name: name.to_string(),
        passive: false,
        durable: direct::bool_field(&body, "durable", false)?,
        exclusive: false,
        auto_delete: direct::bool_field(&body, "auto_delete", false)?,
        arguments: args,
    };
    let existed = v.queue(name).is_some();
    v.declare_queue(&spec, 0).map_err(direct::direct_error)?;
    log::info!(
        "queue '{}' in vhost '{}' declared over HTTP by '{}'",
        name.escape_debug(),
        vh.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(if existed { 204 } else { 201 }))
}

fn delete_queue(ctx: &Ctx<'_>, vh: &str, name: &str) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let v = direct::vhost(broker, vh)?;
    let q = v.queue(name).ok_or_else(ApiError::not_found)?;
    direct::permit(ctx, vh, Access::Configure, Resource::Queue, name)?;
    let if_empty = ctx.request.query("if-empty") == Some("true");
    let if_unused = ctx.request.query("if-unused") == Some("true");
    // The management API may delete an exclusive queue: it acts as its owner.
    let owner = q.owner.unwrap_or(0);
    v.delete_queue(name, if_unused, if_empty, owner)
        .map_err(direct::direct_error)?;
    log::info!(
        "queue '{}' in vhost '{}' deleted over HTTP by '{}'",
        name.escape_debug(),
        vh.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(204))
}

/// Answers `/api/queues...`.
///
/// # Errors
/// As RabbitMQ: 401, 404, 405, 400.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["queues"]) | ("GET", ["queues", "detailed"]) => list_queues(ctx, None),
        ("GET", ["queues", vh]) => list_queues(ctx, Some(vh)),
        ("GET", ["queues", vh, name]) => {
            let broker = ctx.broker();
            require_vhost(broker, &ctx.caller, vh)?;
            let v = vhost(broker, vh)?;
            let q = v.queue(name).ok_or_else(ApiError::not_found)?;
            let windows = stats::windows(ctx.request);
            let mut row = render(&ctx.api.identity.node, vh, &q, broker.rates(), windows);
            row["consumer_details"] = super::connections::consumer_details(
                ctx,
                q.consumers()
                    .into_iter()
                    .map(|c| (Arc::from(*vh), Arc::clone(&q.name), c)),
            );
            row["deliveries"] = json!([]);
            row["incoming"] = json!([]);
            Ok(json_reply(200, &row))
        }
        ("PUT", ["queues", vh, name]) => direct::answer(put_queue(ctx, vh, name, body)),
        ("DELETE", ["queues", vh, name]) => delete_queue(ctx, vh, name),
        (_, ["queues"]) | (_, ["queues", _]) | (_, ["queues", _, _]) => Err(method_not_allowed()),
        (_, ["queues", _, _, "bindings"]) => super::bindings::route(ctx, method, path, body),
        (_, ["queues", _, _, "contents" | "get" | "actions"])
        | (_, ["queues", _, _, "peek" | "replay" | "search" | "unacked"]) => {
            super::messages::route(ctx, method, path, body)
        }
        _ => Err(ApiError::not_found()),
    }
}
