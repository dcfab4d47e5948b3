//! Connections, channels and consumers: `GET /api/connections`,
//! `GET/DELETE /api/connections/{name}`, `/api/connections/{name}/channels`,
//! `GET/DELETE /api/connections/username/{user}`, `/api/vhosts/{vhost}/connections`,
//! `/api/channels`, `/api/channels/{name}`, `/api/vhosts/{vhost}/channels`,
//! `/api/consumers`, `/api/consumers/{vhost}` (RabbitMQ 4.x: `rabbit_mgmt_wm_connection*`,
//! `rabbit_mgmt_wm_channel*`, `rabbit_mgmt_wm_consumers`).
//!
//! Who sees what (`is_authorized_user`): monitors and administrators every connection and
//! channel; other management users their own. Only administrators close other users'
//! connections.

use super::auth::{require_vhost, sees_vhost};
use super::list::{self, ListSpec};
use super::queues::table_json;
use super::stats::{object_stats, rate, timestamp};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::broker::channel::Channel;
use crate::broker::node::{ConnectionInfo, PROTOCOL_AMQP};
use crate::broker::rates::{channel_counters, channel_counts, CounterKey, Rates};
use crate::broker::vhost::VirtualHost;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// The reason given to a client whose connection is closed over HTTP without an
/// `X-Reason` header (RabbitMQ's text).
pub const CLOSE_REASON_HTTP_DEFAULT: &str = "Closed via management plugin";

/// A connection's name as RabbitMQ forms it: `"PEER -> LOCAL"`.
pub fn connection_name(c: &ConnectionInfo) -> String {
    format!("{} -> {}", c.peer, c.local)
}

/// A channel's name: its connection's and its number, `"PEER -> LOCAL (N)"`.
fn channel_name(connection: &str, number: u16) -> String {
    format!("{connection} ({number})")
}

fn protocol(c: &ConnectionInfo) -> &'static str {
    if c.protocol == PROTOCOL_AMQP {
        "AMQP 0-9-1"
    } else {
        "RelayMQ native"
    }
}

/// The ports of the TLS listeners (a connection to one of them is `ssl`).
fn tls_ports(ctx: &Ctx<'_>) -> Vec<u16> {
    ctx.api
        .identity
        .listeners
        .iter()
        .filter(|(p, _)| p.ends_with("/ssl"))
        .map(|(_, a)| a.port())
        .collect()
}

/// A connection as RabbitMQ's management API shows it; `tls_ports` are the TLS
/// listeners' ports.
fn render_connection(node: &str, tls_ports: &[u16], c: &ConnectionInfo, rates: &Rates) -> Value {
    let [recv_oct, recv_cnt, send_oct, send_cnt] = c.traffic.read();
    let r = rates.object(&CounterKey::Connection(c.id));
    let mut client_properties = table_json(&c.client_properties);
    if !c.client_name.is_empty() && client_properties.get("connection_name").is_none() {
        client_properties["connection_name"] = json!(c.client_name);
    }
    let at_ms = c
        .connected_at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let tls = tls_ports.contains(&c.local.port());
    json!({
        "name": connection_name(c),
        "node": node,
        "type": "network",
        "state": "running",
        "protocol": protocol(c),
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "channels": c.channels.load(Ordering::Relaxed),
        "channel_max": c.channel_max,
        "frame_max": c.frame_max,
        "timeout": c.heartbeat_s,
        "auth_mechanism": "PLAIN",
        "connected_at": at_ms,
        "user_provided_name": c.client_name,
        "client_properties": client_properties,
        "ssl": tls,
        "ssl_protocol": null,
        "ssl_key_exchange": null,
        "ssl_cipher": null,
        "ssl_hash": null,
        "peer_cert_subject": null,
        "peer_cert_issuer": null,
        "peer_cert_validity": null,
        "recv_oct": recv_oct,
        "recv_oct_details": rate(r.rates[0]),
        "recv_cnt": recv_cnt,
        "send_oct": send_oct,
        "send_oct_details": rate(r.rates[2]),
        "send_cnt": send_cnt,
        "send_pend": 0,
        "reductions": 0,
        "reductions_details": rate(0.0),
        "garbage_collection": {"fullsweep_after": 0, "max_heap_size": 0, "min_bin_vheap_size": 0, "min_heap_size": 0, "minor_gcs": 0},
    })
}

fn cheap_connection(c: &ConnectionInfo, field: &str) -> Option<Value> {
    Some(match field {
        "name" => json!(connection_name(c)),
        "vhost" => json!(c.vhost),
        "user" => json!(c.user),
        "connected_at" => json!(c
            .connected_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
        _ => return None,
    })
}

/// The connections `ctx`'s caller may see, optionally of one vhost or one user.
fn visible_connections(
    ctx: &Ctx<'_>,
    vhost: Option<&str>,
    user: Option<&str>,
) -> Vec<ConnectionInfo> {
    ctx.broker()
        .connections()
        .into_iter()
        .filter(|c| ctx.caller.is_monitor() || c.user == ctx.caller.name)
        .filter(|c| vhost.is_none_or(|v| c.vhost == v))
        .filter(|c| user.is_none_or(|u| c.user == u))
        .collect()
}

fn list_connections(ctx: &Ctx<'_>, items: Vec<ConnectionInfo>) -> Result<Response, ApiError> {
    let node = ctx.api.identity.node.clone();
    let tls = tls_ports(ctx);
    let broker = Arc::clone(ctx.broker());
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &["vhost", "name"],
            cheap: cheap_connection,
            render: Arc::new(move |c| render_connection(&node, &tls, c, broker.rates())),
        },
    )
}

/// The connection called `name` that the caller may see.
fn find_connection(ctx: &Ctx<'_>, name: &str) -> Result<ConnectionInfo, ApiError> {
    let c = ctx
        .broker()
        .connections()
        .into_iter()
        .find(|c| connection_name(c) == name)
        .ok_or_else(ApiError::not_found)?;
    if ctx.caller.is_monitor() || c.user == ctx.caller.name {
        Ok(c)
    } else {
        Err(ApiError::not_authorised(
            "User not authorised to access object",
        ))
    }
}

/// Closes `c` as `ctx`'s caller (administrators any, others their own), with the
/// `X-Reason` header's text or RabbitMQ's default.
fn close(ctx: &Ctx<'_>, c: &ConnectionInfo) -> Result<(), ApiError> {
    if !ctx.caller.is_admin() && c.user != ctx.caller.name {
        return Err(ApiError::not_authorised(
            "User not authorised to access object",
        ));
    }
    let reason = ctx
        .request
        .header("x-reason")
        .filter(|r| !r.is_empty())
        .unwrap_or(CLOSE_REASON_HTTP_DEFAULT);
    crate::server::native::admin::close_connection(ctx.broker(), &ctx.caller.name, c.id, reason)?;
    Ok(())
}

/// One channel's row, with its connection and consumer count.
struct ChannelRow {
    channel: Arc<Channel>,
    vhost: Arc<VirtualHost>,
    connection: Option<ConnectionInfo>,
    consumers: usize,
}

/// A channel's `message_stats` fields and where each is in its sampled counters.
const CHANNEL_STATS: [(&str, usize); 12] = [
    ("publish", channel_counters::PUBLISH),
    ("confirm", channel_counters::CONFIRM),
    ("return_unroutable", channel_counters::RETURN_UNROUTABLE),
    ("drop_unroutable", channel_counters::DROP_UNROUTABLE),
    ("deliver", channel_counters::DELIVER),
    ("deliver_no_ack", channel_counters::DELIVER_NO_ACK),
    ("get", channel_counters::GET),
    ("get_no_ack", channel_counters::GET_NO_ACK),
    ("get_empty", channel_counters::GET_EMPTY),
    ("redeliver", channel_counters::REDELIVER),
    ("deliver_get", channel_counters::DELIVER_GET),
    ("ack", channel_counters::ACK),
];

fn render_channel(node: &str, r: &ChannelRow, rates: &Rates) -> Value {
    let info = r.channel.info();
    let counts = channel_counts(&r.channel.counters, &info.sent);
    let sampled = rates.object(&CounterKey::Channel(
        r.channel.connection_id,
        r.channel.number,
    ));
    let k = &r.channel.counters;
    let (conn_name, user, peer_host, peer_port) = match &r.connection {
        Some(c) => (
            connection_name(c),
            c.user.clone(),
            c.peer.ip().to_string(),
            c.peer.port(),
        ),
        None => (
            r.channel.connection_id.to_string(),
            String::new(),
            String::new(),
            0,
        ),
    };
    let mut row = json!({
        "name": channel_name(&conn_name, r.channel.number),
        "node": node,
        "number": r.channel.number,
        "user": user,
        "user_who_performed_action": user,
        "vhost": &*r.vhost.name,
        "state": "running",
        "connection_details": {"name": conn_name, "peer_host": peer_host, "peer_port": peer_port},
        "consumer_count": r.consumers,
        "messages_unacknowledged": info.unacked,
        "messages_unconfirmed": 0,
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "pending_raft_commands": 0,
        "prefetch_count": info.consumer_prefetch,
        "global_prefetch_count": info.channel_prefetch,
        "confirm": k.confirm_mode.load(Ordering::Relaxed),
        "transactional": k.transactional.load(Ordering::Relaxed),
        "reductions": 0,
        "reductions_details": rate(0.0),
        "garbage_collection": {"fullsweep_after": 0, "max_heap_size": 0, "min_bin_vheap_size": 0, "min_heap_size": 0, "minor_gcs": 0},
        "message_stats": object_stats(&CHANNEL_STATS, &counts, &sampled),
    });
    if let Some(ms) = sampled.idle_since_ms {
        row["idle_since"] = timestamp(ms);
    }
    row
}

fn cheap_channel(r: &ChannelRow, field: &str) -> Option<Value> {
    Some(match field {
        "name" => json!(channel_name(
            &r.connection
                .as_ref()
                .map(connection_name)
                .unwrap_or_default(),
            r.channel.number
        )),
        "vhost" => json!(&*r.vhost.name),
        "number" => json!(r.channel.number),
        _ => return None,
    })
}

/// Consumers per (connection id, channel number), over the given vhosts.
fn consumer_counts(vhosts: &[Arc<VirtualHost>]) -> HashMap<(u64, u16), usize> {
    let mut counts = HashMap::new();
    for vh in vhosts {
        for q in vh.all_queues() {
            for c in q.consumers() {
                *counts
                    .entry((c.channel.connection_id, c.channel.number))
                    .or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Every open connection by id (to name the connection of a channel or consumer).
fn connections_by_id(ctx: &Ctx<'_>) -> HashMap<u64, ConnectionInfo> {
    ctx.broker()
        .connections()
        .into_iter()
        .map(|c| (c.id, c))
        .collect()
}

/// The channels the caller may see, optionally of one vhost or one connection.
fn visible_channels(
    ctx: &Ctx<'_>,
    vhost: Option<&str>,
    connection: Option<u64>,
) -> Vec<ChannelRow> {
    let connections = connections_by_id(ctx);
    let vhosts: Vec<Arc<VirtualHost>> = ctx.broker().vhosts();
    let counts = consumer_counts(&vhosts);
    ctx.broker()
        .channel_registry()
        .all()
        .into_iter()
        .filter(|(c, vh)| {
            vhost.is_none_or(|v| *vh.name == *v)
                && connection.is_none_or(|id| c.connection_id == id)
        })
        .filter_map(|(channel, vhost)| {
            let connection = connections.get(&channel.connection_id).cloned();
            let visible = ctx.caller.is_monitor()
                || connection
                    .as_ref()
                    .is_some_and(|c| c.user == ctx.caller.name);
            visible.then(|| ChannelRow {
                consumers: counts
                    .get(&(channel.connection_id, channel.number))
                    .copied()
                    .unwrap_or(0),
                channel,
                vhost,
                connection,
            })
        })
        .collect()
}

fn list_channels(ctx: &Ctx<'_>, items: Vec<ChannelRow>) -> Result<Response, ApiError> {
    let node = ctx.api.identity.node.clone();
    let broker = Arc::clone(ctx.broker());
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &["vhost", "name"],
            cheap: cheap_channel,
            render: Arc::new(move |r| render_channel(&node, r, broker.rates())),
        },
    )
}

/// One consumer's row.
struct ConsumerRow {
    vhost: Arc<str>,
    queue: Arc<str>,
    consumer: Arc<crate::broker::consumer::Consumer>,
    connection: Option<ConnectionInfo>,
}

/// `consumer_details` of a queue or a channel: the given (vhost, queue, consumer)s as
/// `/api/consumers` rows.
pub(super) fn consumer_details(
    ctx: &Ctx<'_>,
    consumers: impl Iterator<Item = (Arc<str>, Arc<str>, Arc<crate::broker::consumer::Consumer>)>,
) -> Value {
    let connections = connections_by_id(ctx);
    Value::Array(
        consumers
            .map(|(vhost, queue, consumer)| {
                render_consumer(
                    &ctx.api.identity.node,
                    &ConsumerRow {
                        vhost,
                        queue,
                        connection: connections.get(&consumer.channel.connection_id).cloned(),
                        consumer,
                    },
                )
            })
            .collect(),
    )
}

/// RabbitMQ's consumer `activity_status`: `up`, or on a queue with a single active
/// consumer `single_active` / `waiting`; `down` once cancelled by the server.
fn activity_status(r: &ConsumerRow) -> &'static str {
    let c = &r.consumer;
    if c.is_cancelled() {
        "down"
    } else if c.is_waiting() {
        "waiting"
    } else if c.on_single_active_queue() {
        "single_active"
    } else {
        "up"
    }
}

fn render_consumer(node: &str, r: &ConsumerRow) -> Value {
    let c = &r.consumer;
    let conn = r
        .connection
        .as_ref()
        .map_or_else(|| c.channel.connection_id.to_string(), connection_name);
    let (user, peer_host, peer_port) = match &r.connection {
        Some(ci) => (ci.user.as_str(), ci.peer.ip().to_string(), ci.peer.port()),
        None => ("", String::new(), 0),
    };
    json!({
        "consumer_tag": &*c.tag,
        "queue": {"name": &*r.queue, "vhost": &*r.vhost},
        "channel_details": {
            "name": channel_name(&conn, c.channel.number),
            "number": c.channel.number,
            "connection_name": conn,
            "node": node,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": user,
        },
        "ack_required": !c.no_ack,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch,
        "active": !c.is_cancelled() && !c.is_waiting(),
        "activity_status": activity_status(r),
        "priority": c.priority,
        "arguments": table_json(&c.arguments),
    })
}

fn list_consumers(ctx: &Ctx<'_>, only: Option<&str>) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if let Some(v) = only {
        require_vhost(broker, &ctx.caller, v)?;
        broker.vhost(v).ok_or_else(ApiError::not_found)?;
    }
    let connections = connections_by_id(ctx);
    let mut rows = Vec::new();
    for vh in broker.vhosts() {
        if only.is_some_and(|v| *vh.name != *v) || !sees_vhost(broker, &ctx.caller, &vh.name) {
            continue;
        }
        let vname: Arc<str> = Arc::from(&*vh.name);
        for q in vh.all_queues() {
            for c in q.consumers() {
                rows.push(ConsumerRow {
                    vhost: Arc::clone(&vname),
                    queue: Arc::from(&*q.name),
                    connection: connections.get(&c.channel.connection_id).cloned(),
                    consumer: c,
                });
            }
        }
    }
    let node = ctx.api.identity.node.clone();
    list::reply(
        ctx.request,
        rows,
        ListSpec {
            default_sort: &["queue.vhost", "queue.name"],
            cheap: |_, _| None,
            render: Arc::new(move |r| render_consumer(&node, r)),
        },
    )
}

/// Answers `/api/connections...`, `/api/channels...`, `/api/consumers...` and the vhost
/// forms `/api/vhosts/{vhost}/connections|channels`.
///
/// # Errors
/// As RabbitMQ: 401, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    _body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["connections"]) => list_connections(ctx, visible_connections(ctx, None, None)),
        ("GET", ["connections", "username", user]) => {
            list_connections(ctx, visible_connections(ctx, None, Some(user)))
        }
        ("DELETE", ["connections", "username", user]) => {
            for c in visible_connections(ctx, None, Some(user)) {
                close(ctx, &c)?;
            }
            Ok(Response::empty(204))
        }
        ("GET", ["connections", name]) => {
            let c = find_connection(ctx, name)?;
            Ok(json_reply(
                200,
                &render_connection(
                    &ctx.api.identity.node,
                    &tls_ports(ctx),
                    &c,
                    ctx.broker().rates(),
                ),
            ))
        }
        ("DELETE", ["connections", name]) => {
            let c = find_connection(ctx, name)?;
            close(ctx, &c)?;
            Ok(Response::empty(204))
        }
        ("GET", ["connections", name, "channels"]) => {
            let c = find_connection(ctx, name)?;
            list_channels(ctx, visible_channels(ctx, None, Some(c.id)))
        }
        ("GET", ["connections", _, "sessions"]) => Ok(json_reply(200, &json!([]))),
        ("GET", ["vhosts", vhost, "connections"]) => {
            require_vhost(ctx.broker(), &ctx.caller, vhost)?;
            ctx.broker().vhost(vhost).ok_or_else(ApiError::not_found)?;
            list_connections(ctx, visible_connections(ctx, Some(vhost), None))
        }
        ("GET", ["channels"]) => list_channels(ctx, visible_channels(ctx, None, None)),
        ("GET", ["channels", name]) => {
            let row = visible_channels(ctx, None, None)
                .into_iter()
                .find(|r| cheap_channel(r, "name").is_some_and(|n| n.as_str() == Some(name)))
                .ok_or_else(ApiError::not_found)?;
            let mut rendered = render_channel(&ctx.api.identity.node, &row, ctx.broker().rates());
            let vname: Arc<str> = Arc::from(&*row.vhost.name);
            let mine = row.vhost.all_queues().into_iter().flat_map(|q| {
                let (v, qn) = (Arc::clone(&vname), Arc::from(&*q.name));
                q.consumers()
                    .into_iter()
                    .filter(|c| Arc::ptr_eq(&c.channel, &row.channel))
                    .map(move |c| (Arc::clone(&v), Arc::clone(&qn), c))
            });
            rendered["consumer_details"] = consumer_details(ctx, mine);
            Ok(json_reply(200, &rendered))
        }
        ("GET", ["vhosts", vhost, "channels"]) => {
            require_vhost(ctx.broker(), &ctx.caller, vhost)?;
            ctx.broker().vhost(vhost).ok_or_else(ApiError::not_found)?;
            list_channels(ctx, visible_channels(ctx, Some(vhost), None))
        }
        ("GET", ["consumers"]) => list_consumers(ctx, None),
        ("GET", ["consumers", vhost]) => list_consumers(ctx, Some(vhost)),
        (_, ["connections", ..]) | (_, ["channels", ..]) | (_, ["consumers", ..]) => {
            Err(method_not_allowed())
        }
        (_, ["vhosts", _, "connections" | "channels"]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
