//! Virtual hosts: `GET /api/vhosts`, `GET/PUT/DELETE /api/vhosts/{name}`,
//! `GET /api/vhosts/{name}/permissions` and `/topic-permissions` (RabbitMQ 4.x:
//! `rabbit_mgmt_wm_vhosts`, `rabbit_mgmt_wm_vhost`, `rabbit_mgmt_wm_permissions_vhost`,
//! `rabbit_mgmt_wm_topic_permissions_vhost`). Changes are for administrators and run the
//! broker's own operations (those of the native protocol's admin requests), logged with
//! the administrator's name.

use super::auth::{require, sees_vhost, Need};
use super::list::{self, ListSpec};
use super::stats::rate;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::permission::PermissionDef;
use crate::broker::limits::{
    check_queue_type, split_vhost_tags, VhostMetadata, DEFAULT_QUEUE_TYPE,
};
use crate::broker::rates::CounterKey;
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The bytes of a vhost's connections: `(recv_oct, send_oct)` and their rates.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Traffic {
    oct: [u64; 2],
    rates: [f64; 2],
}

/// Every vhost's [`Traffic`], the connections read once for a whole list.
pub(super) fn traffic_by_vhost(broker: &Broker) -> HashMap<String, Traffic> {
    let mut by = HashMap::<String, Traffic>::new();
    for c in broker.connections() {
        let [recv, _, send, _] = c.traffic.read();
        let sampled = broker.rates().object(&CounterKey::Connection(c.id));
        let t = by.entry(c.vhost).or_default();
        t.oct[0] += recv;
        t.oct[1] += send;
        t.rates[0] += sampled.rates[0];
        t.rates[1] += sampled.rates[2];
    }
    by
}

/// A vhost as RabbitMQ's management API shows it; `traffic` is its connections' bytes
/// ([`traffic_by_vhost`]).
pub(super) fn render(broker: &Broker, node: &str, vh: &VirtualHost, traffic: Traffic) -> Value {
    let (mut ready, mut unacked) = (0usize, 0usize);
    let mut counters = super::stats::Counters::default();
    for q in vh.all_queues() {
        let st = q.stats();
        ready += st.ready;
        unacked += st.unacked;
        counters.add(&super::stats::Counters::of(&st));
    }
    let r = broker.rates().vhost(&vh.name);
    let meta = vh.metadata();
    let events = vh.counters().snapshot();
    json!({
        "name": &*vh.name,
        "description": meta.description,
        "tags": meta.tags,
        "default_queue_type": meta.default_queue_type,
        "metadata": {
            "description": meta.description,
            "tags": meta.tags,
            "default_queue_type": meta.default_queue_type,
        },
        "tracing": false,
        "protected_from_deletion": false,
        "cluster_state": {node: "running"},
        "messages": ready + unacked,
        "messages_details": rate(r.ready + r.unacked),
        "messages_ready": ready,
        "messages_ready_details": rate(r.ready),
        "messages_unacknowledged": unacked,
        "messages_unacknowledged_details": rate(r.unacked),
        "message_stats": {
            "confirm": events.confirmed,
            "confirm_details": rate(0.0),
            "drop_unroutable": events.unroutable_dropped,
            "drop_unroutable_details": rate(0.0),
            "return_unroutable": events.returned,
            "return_unroutable_details": rate(0.0),
            "publish": super::stats::published(vh),
            "publish_details": rate(r.publish),
            "deliver": counters.deliver,
            "deliver_details": rate(r.deliver),
            "deliver_no_ack": counters.deliver_no_ack,
            "deliver_no_ack_details": rate(r.deliver_no_ack),
            "get": counters.get,
            "get_details": rate(r.get),
            "get_no_ack": counters.get_no_ack,
            "get_no_ack_details": rate(r.get_no_ack),
            "get_empty": counters.get_empty,
            "get_empty_details": rate(r.get_empty),
            "deliver_get": counters.deliver_get,
            "deliver_get_details": rate(r.deliver_get),
            "redeliver": counters.redeliver,
            "redeliver_details": rate(r.redeliver),
            "ack": counters.ack,
            "ack_details": rate(r.ack),
        },
        "recv_oct": traffic.oct[0],
        "recv_oct_details": rate(traffic.rates[0]),
        "send_oct": traffic.oct[1],
        "send_oct_details": rate(traffic.rates[1]),
    })
}

fn cheap(vh: &Arc<VirtualHost>, field: &str) -> Option<Value> {
    (field == "name").then(|| json!(&*vh.name))
}

/// A body field that is a string, or absent (`null` too).
///
/// # Errors
/// 400 when it is something else.
fn string_field<'a>(body: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key} must be a string, got {other}"
        ))),
    }
}

/// The vhost tags of a body: a comma-separated string or a list of strings
/// (`rabbit_vhost:parse_tags/1`); absent is none.
///
/// # Errors
/// 400 for another value.
fn tags_field(body: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    match body.get("tags") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if s == "undefined" || s == "null" => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(split_vhost_tags(s)),
        Some(Value::Array(items)) => items
            .iter()
            .map(|t| {
                t.as_str()
                    .map(|t| t.trim().to_string())
                    .ok_or_else(|| ApiError::bad_request("tags must be strings"))
            })
            .filter(|t| t.as_ref().map_or(true, |t| !t.is_empty()))
            .collect(),
        Some(other) => Err(ApiError::bad_request(format!(
            "tags must be a string or a list, got {other}"
        ))),
    }
}

/// `PUT /api/vhosts/{name}` (`rabbit_vhost:put_vhost/6`): creates the vhost, its creator
/// getting full permissions there, or updates an existing one's metadata — a field left
/// out is reset (`description` to "", `tags` to none) except `default_queue_type`, which
/// is kept. `tracing` must be a boolean (RabbitMQ's `parse_bool`: `true`, `false` or
/// their strings); `true` is refused, as RelayMQ has no firehose tracer to turn on.
fn put_vhost(ctx: &Ctx<'_>, name: &str, body: &mut Body<'_>) -> Result<Response, ApiError> {
    let body = ctx.json_body(body)?;
    let broker = ctx.broker();
    match body.get("tracing") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::String(s)) if s == "false" => {}
        Some(Value::Bool(true)) => return Err(tracing_refused()),
        Some(Value::String(s)) if s == "true" => return Err(tracing_refused()),
        Some(other) => return Err(ApiError::bad_request(format!("{{not_boolean,{other}}}"))),
    }
    let description = string_field(&body, "description")?
        .unwrap_or("")
        .to_string();
    let tags = tags_field(&body)?;
    // `defaultqueuetype` was RabbitMQ 3.11.0's name for it (rabbitmq-server#7734).
    let queue_type = match string_field(&body, "default_queue_type")? {
        Some(t) => Some(t),
        None => string_field(&body, "defaultqueuetype")?,
    };
    let queue_type = queue_type.filter(|t| !t.is_empty() && *t != "undefined");
    if let Some(t) = queue_type {
        check_queue_type(t)?;
    }
    let by = ctx.caller.name.escape_debug().to_string();
    let existed = broker.vhost(name);
    let previous_type = existed.as_ref().map(|vh| vh.metadata().default_queue_type);
    let metadata = VhostMetadata {
        description,
        tags,
        default_queue_type: queue_type
            .map(str::to_string)
            .or(previous_type)
            .unwrap_or_else(|| DEFAULT_QUEUE_TYPE.to_string()),
    };
    if existed.is_none() {
        broker.declare_vhost(name)?;
        log::info!(
            "vhost '{}' created over HTTP by '{by}'",
            name.escape_debug()
        );
        if broker.grant_creator(&ctx.caller.name, name)? {
            log::info!(
                "permissions of user '{by}' in vhost '{}' set by '{by}' (full access, as its creator)",
                name.escape_debug()
            );
        }
    }
    if existed.as_ref().is_none_or(|vh| vh.metadata() != metadata) {
        broker.set_vhost_metadata(name, metadata)?;
        if existed.is_some() {
            log::info!(
                "vhost '{}' updated over HTTP by '{by}'",
                name.escape_debug()
            );
        }
    }
    Ok(Response::empty(if existed.is_some() { 204 } else { 201 }))
}

/// The refusal of `tracing: true`.
fn tracing_refused() -> ApiError {
    ApiError::bad_request(
        "tracing (the firehose, amq.rabbitmq.trace) is not supported by RelayMQ".to_string(),
    )
}

/// `DELETE /api/vhosts/{name}`: the vhost and everything in it; its connections are
/// closed.
fn delete_vhost(ctx: &Ctx<'_>, name: &str) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if broker.vhost(name).is_none() {
        return Err(ApiError::not_found());
    }
    let gone = broker.delete_vhost(name)?;
    log::info!(
        "vhost '{}' deleted over HTTP by '{}': {} queues with {} messages deleted, {} connections closed",
        name.escape_debug(),
        ctx.caller.name.escape_debug(),
        gone.queues,
        gone.messages,
        gone.connections
    );
    Ok(Response::empty(204))
}

/// A permission row as RabbitMQ's management API shows it.
pub(super) fn permission_row(user: &str, vhost: &str, p: &PermissionDef) -> Value {
    json!({"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read})
}

/// A list of JSON rows with RabbitMQ's list conventions, sorted by `default_sort`.
pub(super) fn rows_reply(
    ctx: &Ctx<'_>,
    rows: Vec<Value>,
    default_sort: &'static [&'static str],
) -> Result<Response, ApiError> {
    list::reply(
        ctx.request,
        rows,
        ListSpec {
            default_sort,
            cheap: |v, f| v.get(f).cloned(),
            render: Arc::new(Value::clone),
        },
    )
}

/// Answers `/api/vhosts...`.
///
/// # Errors
/// As RabbitMQ: 401, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    match (method, path) {
        ("GET", ["vhosts"]) => {
            let items: Vec<Arc<VirtualHost>> = broker
                .vhosts()
                .into_iter()
                .filter(|vh| sees_vhost(broker, &ctx.caller, &vh.name))
                .collect();
            let (owner, node) = (Arc::clone(broker), ctx.api.identity.node.clone());
            let traffic = traffic_by_vhost(broker);
            list::reply(
                ctx.request,
                items,
                ListSpec {
                    default_sort: &["name"],
                    cheap,
                    render: Arc::new(move |vh| {
                        let t = traffic.get(&*vh.name).copied().unwrap_or_default();
                        render(&owner, &node, vh, t)
                    }),
                },
            )
        }
        ("GET", ["vhosts", name]) => {
            // RabbitMQ 4.x: one vhost's page is for administrators
            // (`rabbit_mgmt_wm_vhost:is_authorized/2`); the list is for every user.
            require(&ctx.caller, Need::Administrator)?;
            let vh = broker.vhost(name).ok_or_else(ApiError::not_found)?;
            Ok(json_reply(
                200,
                &render(
                    broker,
                    &ctx.api.identity.node,
                    &vh,
                    traffic_by_vhost(broker)
                        .get(&*vh.name)
                        .copied()
                        .unwrap_or_default(),
                ),
            ))
        }
        ("PUT", ["vhosts", name]) => {
            require(&ctx.caller, Need::Administrator)?;
            put_vhost(ctx, name, body)
        }
        ("DELETE", ["vhosts", name]) => {
            require(&ctx.caller, Need::Administrator)?;
            delete_vhost(ctx, name)
        }
        ("GET", ["vhosts", name, "permissions"]) => {
            require(&ctx.caller, Need::Administrator)?;
            broker.vhost(name).ok_or_else(ApiError::not_found)?;
            let rows = broker
                .users()
                .all_permissions()
                .into_iter()
                .filter(|(_, v, _)| v == name)
                .map(|(u, v, p)| permission_row(&u, &v, &p))
                .collect();
            rows_reply(ctx, rows, &["vhost", "user"])
        }
        ("GET", ["vhosts", name, "topic-permissions"]) => {
            // RelayMQ has no topic permissions: an existing vhost has none.
            require(&ctx.caller, Need::Administrator)?;
            broker.vhost(name).ok_or_else(ApiError::not_found)?;
            rows_reply(ctx, Vec::new(), &["vhost", "user"])
        }
        (_, ["vhosts"])
        | (_, ["vhosts", _])
        | (_, ["vhosts", _, "permissions"])
        | (_, ["vhosts", _, "topic-permissions"]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
