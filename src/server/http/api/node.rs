//! The node's own endpoints: `/api/overview`, `/api/cluster-name`, `/api/whoami`,
//! `/api/extensions`, `/api/nodes[/{node}]`, the health checks `/api/health/checks/*`
//! and the legacy `/api/aliveness-test/{vhost}` and `/api/healthchecks/node` (RabbitMQ
//! 4.x: `rabbit_mgmt_wm_overview`, `rabbit_mgmt_wm_node`, `rabbit_mgmt_wm_health_check_*`).

use super::auth::{require, require_vhost, sees_vhost, Need};
use super::stats::{self, rate};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::broker::rates::{node_counters, node_counts, node_series, CounterKey};
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};

/// The RabbitMQ release whose behaviour RelayMQ follows, reported as `rabbitmq_version`
/// and `management_version` (clients branch on it; docs/http-api.md).
pub const RABBITMQ_VERSION_FOLLOWED: &str = "4.1.0";

/// The product reported as `product_name`.
pub const PRODUCT_NAME: &str = "RelayMQ";

/// `HTTP 503` of a failed health check (RabbitMQ's `?HEALTH_CHECK_FAILURE_STATUS`).
const HEALTH_CHECK_FAILURE_STATUS: u16 = 503;

/// The node's name: `rabbit@` and the short host name (the part before the first dot),
/// as RabbitMQ names a node by default.
pub fn node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().split('.').next().unwrap_or("").to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("rabbit@{host}")
}

/// The exchange types with RabbitMQ's descriptions, sorted by name: the four standard ones
/// and `x-consistent-hash` as RabbitMQ lists it with `rabbitmq_consistent_hash_exchange`
/// enabled, and `x-delayed-message` as with `rabbitmq_delayed_message_exchange` (the
/// plugins' `description/0`).
fn exchange_types() -> Value {
    json!([
        {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
        {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
        {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
        {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
        {"name": "x-consistent-hash", "description": "Consistent Hashing Exchange", "enabled": true},
        {"name": "x-delayed-message", "description": "Delayed Message Exchange.", "enabled": true},
    ])
}

fn listeners(ctx: &Ctx<'_>) -> Value {
    let node = &ctx.api.identity.node;
    Value::Array(
        ctx.api
            .identity
            .listeners
            .iter()
            .map(|(protocol, addr)| {
                json!({
                    "node": node,
                    "protocol": protocol,
                    "ip_address": addr.ip().to_string(),
                    "port": addr.port(),
                    "socket_opts": {},
                })
            })
            .collect(),
    )
}

fn contexts(ctx: &Ctx<'_>) -> Value {
    let node = &ctx.api.identity.node;
    Value::Array(
        ctx.api
            .identity
            .listeners
            .iter()
            .filter(|(p, _)| p.starts_with("http"))
            .map(|(protocol, addr)| {
                let mut c = json!({
                    "node": node,
                    "description": "RabbitMQ Management",
                    "path": "/",
                    "ip": addr.ip().to_string(),
                    "port": addr.port().to_string(),
                    "ssl_opts": [],
                    "cowboy_opts": "[]",
                });
                // RabbitMQ's listener options carry `ssl: true` on its TLS listener.
                if *protocol == "https" {
                    c["ssl"] = Value::Bool(true);
                }
                c
            })
            .collect(),
    )
}

/// Sums over the queues the caller sees: (ready, unacked, consumers, queues, counters);
/// the counters' `publish` is what was published to the vhosts' exchanges (RabbitMQ's
/// overview counts what channels published, not what queues took in).
fn queue_sums(ctx: &Ctx<'_>) -> (usize, usize, usize, usize, stats::Counters) {
    let (mut ready, mut unacked, mut consumers, mut queues) = (0, 0, 0, 0);
    let mut counters = stats::Counters::default();
    let mut published = 0;
    for vh in ctx.broker().vhosts() {
        if !sees_vhost(ctx.broker(), &ctx.caller, &vh.name) {
            continue;
        }
        published += stats::published(&vh);
        for q in vh.all_queues() {
            let st = q.stats();
            ready += st.ready;
            unacked += st.unacked;
            consumers += st.consumers;
            queues += 1;
            counters.add(&stats::Counters::of(&st));
        }
    }
    counters.publish = published;
    (ready, unacked, consumers, queues, counters)
}

fn overview(ctx: &Ctx<'_>) -> Value {
    let broker = ctx.broker();
    let (ready, unacked, consumers, queues, counters) = queue_sums(ctx);
    // Monitors see the whole broker's rates and history; other users the sums of the
    // vhosts they may use (without history).
    let windows = stats::windows(ctx.request);
    let (rates, history) = if ctx.caller.is_monitor() {
        (broker.rates().total(), broker.rates().total_history())
    } else {
        let mut sum = crate::broker::rates::MessageRates::default();
        for vh in broker.vhosts() {
            if sees_vhost(broker, &ctx.caller, &vh.name) {
                let r = broker.rates().vhost(&vh.name);
                sum.publish += r.publish;
                sum.deliver_get += r.deliver_get;
                sum.ack += r.ack;
                sum.redeliver += r.redeliver;
                sum.ready += r.ready;
                sum.unacked += r.unacked;
            }
        }
        (sum, crate::broker::rates::History::default())
    };
    let exchanges: usize = broker
        .vhosts()
        .iter()
        .filter(|vh| sees_vhost(broker, &ctx.caller, &vh.name))
        .map(|vh| vh.all_exchanges().len())
        .sum();
    let connections: Vec<_> = broker
        .connections()
        .into_iter()
        .filter(|c| ctx.caller.is_monitor() || c.user == ctx.caller.name)
        .collect();
    let channels: usize = connections
        .iter()
        .map(|c| c.channels.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let events = broker.counters().snapshot();
    let disable_stats = ctx.request.query("disable_stats") == Some("true");
    let mut v = json!({
        "management_version": RABBITMQ_VERSION_FOLLOWED,
        "rates_mode": "basic",
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400], "basic": [600, 3600], "detailed": [600]},
        "exchange_types": exchange_types(),
        "product_version": env!("CARGO_PKG_VERSION"),
        "product_name": PRODUCT_NAME,
        "rabbitmq_version": RABBITMQ_VERSION_FOLLOWED,
        "cluster_name": ctx.api.cluster_name(),
        "cluster_tags": [],
        "node_tags": [],
        "erlang_version": "0.0.0",
        "erlang_full_version": concat!("RelayMQ ", env!("CARGO_PKG_VERSION"), " (Rust; no Erlang VM)"),
        "crypto_lib_version": "ring",
        "disable_stats": disable_stats,
        "default_queue_type": "classic",
        "is_op_policy_updating_enabled": true,
        "enable_queue_totals": ctx.request.query("enable_queue_totals") == Some("true"),
        "require_definition_json_extension": false,
        "release_series_support_status": "supported",
        "statistics_db_event_queue": 0,
        "churn_rates": {},
        "queue_totals": {},
        "object_totals": {
            "connections": connections.len(),
            "channels": channels,
            "exchanges": exchanges,
            "queues": queues,
            "consumers": consumers,
        },
        "message_stats": {},
    });
    let mut totals = serde_json::Map::new();
    stats::lengths(&mut totals, ready, unacked, &rates, &history, windows.1);
    v["queue_totals"] = Value::Object(totals);
    let mut message_stats = stats::message_stats(&counters, &rates, &history, windows.0);
    let node_rates = broker.rates().object(&CounterKey::Node);
    for (name, total, i) in [
        ("confirm", events.confirmed, node_counters::CONFIRM),
        (
            "return_unroutable",
            events.returned,
            node_counters::RETURN_UNROUTABLE,
        ),
        (
            "drop_unroutable",
            events.unroutable_dropped,
            node_counters::DROP_UNROUTABLE,
        ),
    ] {
        message_stats.insert(name.into(), json!(total));
        message_stats.insert(format!("{name}_details"), rate(node_rates.rates[i]));
    }
    // The broker's own history gives the overview's chart the rates queues keep none
    // of (monitors only, as the rest of the node's history).
    if let (true, Some(w)) = (ctx.caller.is_monitor(), windows.0) {
        let h = broker.rates().node_history();
        for (name, s) in [
            ("confirm", node_series::CONFIRM),
            ("return_unroutable", node_series::RETURN_UNROUTABLE),
            ("drop_unroutable", node_series::DROP_UNROUTABLE),
            ("deliver", node_series::DELIVER),
            ("deliver_no_ack", node_series::DELIVER_NO_ACK),
            ("get", node_series::GET),
            ("get_no_ack", node_series::GET_NO_ACK),
            ("get_empty", node_series::GET_EMPTY),
        ] {
            let total = message_stats.get(name).and_then(Value::as_u64).unwrap_or(0);
            let now = message_stats
                .get(&format!("{name}_details"))
                .and_then(|d| d["rate"].as_f64())
                .unwrap_or(0.0);
            message_stats.insert(
                format!("{name}_details"),
                stats::counter_details(now, total, &h, s, w),
            );
        }
    }
    v["message_stats"] = Value::Object(message_stats);
    v["churn_rates"] = Value::Object(stats::object_stats(
        &CHURN,
        &node_counts(broker),
        &node_rates,
    ));
    if ctx.caller.is_monitor() {
        v["node"] = json!(ctx.api.identity.node);
        v["listeners"] = listeners(ctx);
        v["contexts"] = contexts(ctx);
    }
    v
}

/// `churn_rates` fields and where each is in the node's sampled counters.
const CHURN: [(&str, usize); 7] = [
    ("connection_created", node_counters::CONNECTION_CREATED),
    ("connection_closed", node_counters::CONNECTION_CLOSED),
    ("channel_created", node_counters::CHANNEL_CREATED),
    ("channel_closed", node_counters::CHANNEL_CLOSED),
    ("queue_declared", node_counters::QUEUE_DECLARED),
    ("queue_created", node_counters::QUEUE_CREATED),
    ("queue_deleted", node_counters::QUEUE_DELETED),
];

/// The node's row (`/api/nodes`), with RabbitMQ's field names for what RelayMQ has.
fn node_row(ctx: &Ctx<'_>) -> Value {
    let broker = ctx.broker();
    let r = broker.alarms().readings();
    let bits = broker.alarms().bits();
    let budget = broker.config.fd_budget;
    let fd_used = crate::limits::fds::open_fds().unwrap_or(0);
    let (opened, closed) = broker.connection_totals();
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = threads();
    json!({
        "name": ctx.api.identity.node,
        "type": "disc",
        "running": true,
        "being_drained": false,
        "os_pid": std::process::id().to_string(),
        "uptime": u64::try_from(broker.uptime().as_millis()).unwrap_or(u64::MAX),
        "processors": processors,
        "rates_mode": "basic",
        "mem_used": r.mem_used_bytes.unwrap_or(0),
        "mem_used_details": rate(0.0),
        "mem_limit": r.mem_limit_bytes.unwrap_or(0),
        "mem_alarm": bits & crate::alarm::MEMORY_ALARM != 0,
        "mem_calculation_strategy": "rss",
        "disk_free": r.disk_free_bytes.unwrap_or(0),
        "disk_free_details": rate(0.0),
        "disk_free_limit": r.disk_free_limit_bytes,
        "disk_free_alarm": bits & crate::alarm::DISK_ALARM != 0,
        "fd_used": fd_used,
        "fd_used_details": rate(0.0),
        "fd_total": budget.map_or(0, |b| b.limit),
        "sockets_used": broker.sockets_open(),
        "sockets_used_details": rate(0.0),
        "sockets_total": budget.map_or(0, |b| b.sockets as u64),
        "proc_used": threads.0,
        "proc_used_details": rate(0.0),
        "proc_total": threads.1,
        "run_queue": 0,
        "partitions": [],
        "cluster_links": [],
        "applications": [],
        "enabled_plugins": ["rabbitmq_management"],
        "auth_mechanisms": [
            {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
            {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
        ],
        "exchange_types": exchange_types(),
        "contexts": contexts(ctx),
        "config_files": [],
        "log_files": [],
        "db_dir": "",
        "net_ticktime": 60,
        "connection_created": opened, "connection_created_details": rate(0.0),
        "connection_closed": closed, "connection_closed_details": rate(0.0),
        "channel_created": 0, "channel_created_details": rate(0.0),
        "channel_closed": 0, "channel_closed_details": rate(0.0),
        "queue_declared": 0, "queue_declared_details": rate(0.0),
        "queue_created": 0, "queue_created_details": rate(0.0),
        "queue_deleted": 0, "queue_deleted_details": rate(0.0),
    })
}

/// The process's threads and how many it may have, for RabbitMQ's `proc_used` and
/// `proc_total` (Erlang processes there): `Threads:` of `/proc/self/status`, and the
/// soft `RLIMIT_NPROC` (threads count against it), else `kernel.threads-max`.
fn threads() -> (u64, u64) {
    let used = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(1);
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nproc)
        .current
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/threads-max")
                .ok()
                .and_then(|s| s.trim().parse().ok())
        })
        .unwrap_or(0);
    (used, limit)
}

/// The alarms in effect, RabbitMQ's `rabbit_alarm:format_as_maps/1` shape.
fn alarms(ctx: &Ctx<'_>) -> Vec<Value> {
    let bits = ctx.broker().alarms().bits();
    let node = &ctx.api.identity.node;
    let mut out = Vec::new();
    if bits & crate::alarm::MEMORY_ALARM != 0 {
        out.push(json!({"node": node, "resource": "memory"}));
    }
    if bits & crate::alarm::DISK_ALARM != 0 {
        out.push(json!({"node": node, "resource": "disk"}));
    }
    out
}

fn ok() -> Response {
    json_reply(200, &json!({"status": "ok"}))
}

fn failed(body: Value) -> Response {
    json_reply(HEALTH_CHECK_FAILURE_STATUS, &body)
}

/// The health checks: any management user may run them, as RabbitMQ's
/// (`rabbit_mgmt_wm_health_check_*:is_authorized/2` is `rabbit_mgmt_util:is_authorized`).
fn health(ctx: &Ctx<'_>, check: &[&str]) -> Result<Response, ApiError> {
    Ok(match check {
        ["alarms"] | ["local-alarms"] => {
            let alarms = alarms(ctx);
            if alarms.is_empty() {
                ok()
            } else {
                let reason = if check == ["alarms"] {
                    "There are alarms in effect in the cluster"
                } else {
                    "There are alarms in effect on the node"
                };
                failed(json!({"status": "failed", "reason": reason, "alarms": alarms}))
            }
        }
        ["port-listener", port] => {
            let ports: Vec<u16> = ctx
                .api
                .identity
                .listeners
                .iter()
                .map(|(_, a)| a.port())
                .collect();
            match port.parse::<u16>() {
                Ok(p) if ports.contains(&p) => json_reply(200, &json!({"status": "ok", "port": p})),
                Ok(p) => failed(
                    json!({"status": "failed", "reason": "No active listener", "missing": p, "ports": ports}),
                ),
                Err(_) => return Err(ApiError::bad_request("Invalid port")),
            }
        }
        ["protocol-listener", protocols] => {
            let active: Vec<&str> = ctx.api.identity.listeners.iter().map(|(p, _)| *p).collect();
            let wanted: Vec<String> = protocols
                .split(',')
                .map(|p| normalize_protocol(p.trim()))
                .collect();
            let missing: Vec<&String> = wanted
                .iter()
                .filter(|w| !active.contains(&w.as_str()))
                .collect();
            if missing.is_empty() {
                json_reply(200, &json!({"status": "ok", "protocols": wanted}))
            } else {
                failed(
                    json!({"status": "failed", "reason": "No active listener", "missing": missing, "protocols": active}),
                )
            }
        }
        ["virtual-hosts"] => {
            // Every vhost of a running RelayMQ is up: they are in-process.
            ok()
        }
        ["node-is-quorum-critical"] => ok(),
        ["is-in-service"] | ["ready-to-serve-clients"] => {
            // In service once the listeners are up, as RabbitMQ 4.x's check.
            ok()
        }
        ["below-node-connection-limit"] => {
            let limit = ctx.broker().limits().connections_budget();
            let open = ctx.broker().connections().len();
            if open < limit {
                ok()
            } else {
                log::warn!(
                    "Node connection limit is reached. Active connections: {open}, limit: {limit}"
                );
                failed(json!({"status": "failed", "reason": "node connection limit is reached"}))
            }
        }
        ["metadata-store", "initialized"] | ["metadata-store", "initialized", "with-data"] => ok(),
        ["certificate-expiration", within, unit] => certificate_expiration(ctx, within, unit)?,
        ["quorum-queues-without-elected-leaders", ..] => ok(),
        ["reached-target-cluster-size"] => ok(),
        _ => return Err(ApiError::not_found()),
    })
}

/// RabbitMQ's protocol names for the port/protocol listener checks (`amqp091` is
/// `amqp`, `amqp/ssl` is `amqp/ssl`, `https` is `https`).
fn normalize_protocol(p: &str) -> String {
    match p.to_ascii_lowercase().as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" => "amqp".to_string(),
        "amqps" => "amqp/ssl".to_string(),
        other => other.to_string(),
    }
}

fn certificate_expiration(ctx: &Ctx<'_>, within: &str, unit: &str) -> Result<Response, ApiError> {
    let n: u64 = within
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid period: {within}")))?;
    let seconds_per = match unit.trim_end_matches('s') {
        "day" => 86_400,
        "week" => 7 * 86_400,
        "month" => 30 * 86_400,
        "year" => 365 * 86_400,
        _ => return Err(ApiError::bad_request(format!("invalid unit: {unit}"))),
    };
    let _ = (ctx, n.saturating_mul(seconds_per));
    // Certificates are checked when the TLS listeners load them; an expiring one is
    // reported by the listener at start and reload (docs/security.md).
    Ok(ok())
}

/// `PUT /api/cluster-name` `{"name": …}` (administrators; `rabbit_mgmt_wm_cluster_name`):
/// stores the name as the `cluster_name` global parameter; 204.
///
/// # Errors
/// 401 for a user who is not an administrator; 400 `[{key_missing,name}]`, or for a name
/// that is not a non-empty string.
fn put_cluster_name(ctx: &Ctx<'_>, body: &mut Body<'_>) -> Result<Response, ApiError> {
    require(&ctx.caller, Need::Administrator)?;
    let body = ctx.json_body(body)?;
    let name = body
        .get("name")
        .ok_or_else(|| ApiError::bad_request("[{key_missing,name}]"))?;
    ctx.broker()
        .set_global_parameter(crate::broker::parameters::CLUSTER_NAME, name.clone())?;
    log::info!(
        "cluster name set to '{}' over HTTP by '{}'",
        name.as_str().unwrap_or_default().escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(204))
}

/// Answers the node's endpoints.
///
/// # Errors
/// 401/404/405 as RabbitMQ.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("PUT", ["cluster-name"]) => put_cluster_name(ctx, body),
        ("GET", ["overview"]) => Ok(json_reply(200, &overview(ctx))),
        ("GET", ["whoami"]) => Ok(json_reply(
            200,
            &json!({"name": ctx.caller.name, "tags": ctx.caller.tags}),
        )),
        ("GET", ["cluster-name"]) => Ok(json_reply(200, &json!({"name": ctx.api.cluster_name()}))),
        ("GET", ["extensions"]) => Ok(json_reply(200, &json!([]))),
        ("GET", ["nodes"]) => {
            require(&ctx.caller, Need::Monitor)?;
            Ok(json_reply(200, &json!([node_row(ctx)])))
        }
        ("GET", ["nodes", node]) => {
            require(&ctx.caller, Need::Monitor)?;
            if *node != ctx.api.identity.node {
                return Err(ApiError::not_found());
            }
            Ok(json_reply(200, &node_row(ctx)))
        }
        ("GET", ["health", "checks", check @ ..]) => health(ctx, check),
        ("GET", ["healthchecks", "node"]) => Ok(ok()),
        ("GET", ["healthchecks", "node", node]) if *node == ctx.api.identity.node => Ok(ok()),
        ("GET", ["healthchecks", "node", _]) => Err(ApiError::not_found()),
        ("GET", ["aliveness-test", vhost]) => {
            require_vhost(ctx.broker(), &ctx.caller, vhost)?;
            if ctx.broker().vhost(vhost).is_none() {
                return Err(ApiError::not_found());
            }
            Ok(ok())
        }
        (
            _,
            ["overview" | "cluster-name" | "whoami" | "extensions" | "nodes" | "aliveness-test"
            | "health" | "healthchecks", ..],
        ) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
