//! Rows for `list` and `status`, with the field names of RabbitMQ's management API
//! (`messages_ready`, `auto_delete`, …) so scripts written for `rabbitmqadmin` read them.
//! Fields are only ever added.

use crate::broker::exchange::Destination;
use crate::broker::node::{Broker, ConnectionInfo};
use crate::broker::vhost::VirtualHost;
use crate::types::{FieldTable, FieldValue};
use std::time::UNIX_EPOCH;

fn row(fields: Vec<(&str, FieldValue)>) -> FieldTable {
    fields
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

fn s(v: &str) -> FieldValue {
    FieldValue::string(v)
}

fn n(v: impl TryInto<i64>) -> FieldValue {
    FieldValue::I64(v.try_into().unwrap_or(i64::MAX))
}

/// A JSON object as a field table.
pub(crate) fn json_table(map: &serde_json::Map<String, serde_json::Value>) -> FieldTable {
    map.iter()
        .map(|(k, v)| (k.clone(), FieldValue::from_json(v)))
        .collect()
}

/// One row per policy of the vhost, sorted by name, with `rabbitmqctl list_policies`'
/// fields: `vhost`, `name`, `pattern`, `apply-to`, `definition` (a table), `priority`.
pub fn policies(vh: &VirtualHost) -> Vec<FieldTable> {
    vh.policies()
        .iter()
        .map(|p| {
            row(vec![
                ("vhost", s(&p.def.vhost)),
                ("name", s(&p.def.name)),
                ("pattern", s(&p.def.pattern)),
                ("apply-to", s(&p.def.apply_to)),
                (
                    "definition",
                    FieldValue::Table(json_table(&p.def.definition)),
                ),
                ("priority", n(p.def.priority)),
            ])
        })
        .collect()
}

/// A rate in messages per second, rounded to 0.1 as RabbitMQ shows them.
fn rate(v: f64) -> FieldValue {
    FieldValue::F64((v * 10.0).round() / 10.0)
}

/// One row per vhost: `name`, `messages_ready`, `messages_unacknowledged`, `queues`, and
/// the sums of its queues' rates `publish_rate`, `deliver_get_rate`, `ack_rate` (messages
/// per second, [`crate::broker::rates`]).
pub fn vhosts(broker: &Broker) -> Vec<FieldTable> {
    broker
        .vhosts()
        .iter()
        .map(|vh| {
            let (mut ready, mut unacked) = (0usize, 0usize);
            let queues = vh.all_queues();
            for q in &queues {
                let st = q.stats();
                ready += st.ready;
                unacked += st.unacked;
            }
            let r = broker.rates().vhost(&vh.name);
            row(vec![
                ("name", s(&vh.name)),
                ("messages_ready", n(ready)),
                ("messages_unacknowledged", n(unacked)),
                ("messages", n(ready + unacked)),
                ("queues", n(queues.len())),
                ("publish_rate", rate(r.publish)),
                ("deliver_get_rate", rate(r.deliver_get)),
                ("ack_rate", rate(r.ack)),
            ])
        })
        .collect()
}

/// One row per exchange, sorted by name: `name`, `vhost`, `type`, `durable`,
/// `auto_delete`, `internal`, `arguments`, `bindings`, `messages_delayed` (messages an
/// `x-delayed-message` exchange holds; void for other types).
pub fn exchanges(vh: &VirtualHost) -> Vec<FieldTable> {
    let mut all = vh.all_exchanges();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter()
        .map(|e| {
            row(vec![
                ("name", s(&e.name)),
                ("vhost", s(&vh.name)),
                ("type", s(e.kind.as_str())),
                ("durable", FieldValue::Bool(e.durable)),
                ("auto_delete", FieldValue::Bool(e.auto_delete)),
                ("internal", FieldValue::Bool(e.internal)),
                ("arguments", FieldValue::Table(e.arguments.clone())),
                ("bindings", n(e.router().len())),
                (
                    "messages_delayed",
                    e.delayed().map_or(FieldValue::Void, |d| n(d.waiting())),
                ),
            ])
        })
        .collect()
}

/// One row per queue, sorted by name: `name`, `vhost`, `durable`, `auto_delete`,
/// `exclusive`, `arguments`, `messages_ready`, `messages_unacknowledged`, `messages`
/// (ready, unacked and waiting for a delayed retry), `messages_delayed` (waiting for a
/// quorum queue's delayed retry), `message_bytes_ready`, `consumers`, totals `publish`, `deliver_get`, `ack`,
/// `redeliver`, and for stored queues `messages_persistent` (records not yet settled),
/// `disk_bytes` (the queue's files) and `storage_failed` (out of service); `policy` (the
/// name of the policy that applies, void when none) and `effective_policy_definition` (its
/// definition, an empty table when none), as RabbitMQ's management API; rates
/// `publish_rate`, `deliver_get_rate`, `ack_rate` in messages per second
/// ([`crate::broker::rates`]; RabbitMQ's `message_stats.*_details.rate`; zero here, see
/// [`queues_with_rates`]).
pub fn queues(vh: &VirtualHost) -> Vec<FieldTable> {
    queues_with_rates(vh, &crate::broker::rates::Rates::default())
}

/// [`queues`] with the rates of `rates` (the broker's, [`Broker::rates`]).
pub fn queues_with_rates(vh: &VirtualHost, rates: &crate::broker::rates::Rates) -> Vec<FieldTable> {
    let mut all = vh.all_queues();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter()
        .map(|q| {
            let st = q.stats();
            let r = rates.queue(&vh.name, &q.name);
            let stored = q.storage.as_ref().map(|x| x.stats()).unwrap_or_default();
            let storage_failed =
                q.storage_id.is_some() && q.storage.as_ref().is_none_or(|x| x.is_failed());
            let settings = q.settings();
            let policy_name = settings
                .policy
                .as_ref()
                .map_or(FieldValue::Void, |p| s(&p.def.name));
            // The policy merged with the operator policy, as RabbitMQ shows it.
            let policy_definition =
                json_table(&crate::broker::policy::operator::merge_definitions(
                    settings.policy.as_deref(),
                    settings.operator_policy.as_deref(),
                ));
            row(vec![
                ("name", s(&q.name)),
                ("vhost", s(&vh.name)),
                ("durable", FieldValue::Bool(q.durable)),
                ("auto_delete", FieldValue::Bool(q.auto_delete)),
                ("exclusive", FieldValue::Bool(q.exclusive)),
                ("type", s(q.queue_type.as_str())),
                ("arguments", FieldValue::Table(q.arguments.clone())),
                ("messages_ready", n(st.ready)),
                ("messages_unacknowledged", n(st.unacked)),
                ("messages", n(st.ready + st.unacked + st.delayed)),
                ("messages_delayed", n(st.delayed)),
                ("message_bytes_ready", n(st.ready_bytes)),
                ("consumers", n(st.consumers)),
                (
                    "single_active_consumer_tag",
                    q.single_active_consumer()
                        .map_or(FieldValue::Void, |c| s(&c.tag)),
                ),
                ("publish", n(st.published)),
                ("deliver_get", n(st.delivered)),
                ("ack", n(st.acked)),
                ("redeliver", n(st.redelivered)),
                ("expired", n(st.expired)),
                ("dropped", n(st.dropped)),
                ("refused", n(st.refused)),
                ("messages_persistent", n(stored.records_valid)),
                ("disk_bytes", n(stored.bytes_on_disk)),
                ("storage_failed", FieldValue::Bool(storage_failed)),
                ("paused", FieldValue::Bool(q.is_paused())),
                ("policy", policy_name),
                (
                    "effective_policy_definition",
                    FieldValue::Table(policy_definition),
                ),
                ("publish_rate", rate(r.publish)),
                ("deliver_get_rate", rate(r.deliver_get)),
                ("ack_rate", rate(r.ack)),
            ])
        })
        .collect()
}

/// One row per binding, including the default exchange's implicit binding of every
/// queue (as RabbitMQ lists them): `source`, `vhost`, `destination`, `destination_type`,
/// `routing_key`, `arguments`.
pub fn bindings(vh: &VirtualHost) -> Vec<FieldTable> {
    let mut queues: Vec<String> = vh.all_queues().iter().map(|q| q.name.to_string()).collect();
    queues.sort();
    let mut rows: Vec<(String, String, &str, String, FieldTable)> = queues
        .into_iter()
        .map(|q| (String::new(), q.clone(), "queue", q, FieldTable::new()))
        .collect();
    let mut explicit: Vec<_> = vh
        .all_bindings()
        .into_iter()
        .map(|(source, b)| {
            let (dest, kind) = match &b.destination {
                Destination::Queue(q) => (q.to_string(), "queue"),
                Destination::Exchange(x) => (x.to_string(), "exchange"),
            };
            (source.to_string(), dest, kind, b.binding_key, b.arguments)
        })
        .collect();
    explicit.sort_by(|a, b| (&a.0, &a.1, &a.3).cmp(&(&b.0, &b.1, &b.3)));
    rows.extend(explicit);
    rows.into_iter()
        .map(|(source, dest, kind, key, args)| {
            row(vec![
                ("source", s(&source)),
                ("vhost", s(&vh.name)),
                ("destination", s(&dest)),
                ("destination_type", s(kind)),
                ("routing_key", s(&key)),
                ("arguments", FieldValue::Table(args)),
            ])
        })
        .collect()
}

/// One row per consumer of the vhost's queues, in RabbitMQ's management shape:
/// `consumer_tag`, `queue` (`{name, vhost}`), `channel_details` (`{connection_name,
/// number}`), `ack_required`, `exclusive`, `prefetch_count`, `arguments`, and RelayMQ's
/// `unacked`.
pub fn consumers(vh: &VirtualHost, broker: &Broker) -> Vec<FieldTable> {
    let names: std::collections::HashMap<u64, String> = broker
        .connections()
        .iter()
        .map(|c| (c.id, connection_name(c)))
        .collect();
    let mut all = vh.all_queues();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    for q in all {
        for c in q.consumers() {
            let conn_name = names
                .get(&c.channel.connection_id)
                .cloned()
                .unwrap_or_else(|| c.channel.connection_id.to_string());
            out.push(row(vec![
                ("consumer_tag", s(&c.tag)),
                (
                    "queue",
                    FieldValue::Table(row(vec![("name", s(&q.name)), ("vhost", s(&vh.name))])),
                ),
                (
                    "channel_details",
                    FieldValue::Table(row(vec![
                        ("connection_name", s(&conn_name)),
                        ("number", n(c.channel.number)),
                    ])),
                ),
                ("ack_required", FieldValue::Bool(!c.no_ack)),
                ("exclusive", FieldValue::Bool(c.exclusive)),
                ("prefetch_count", n(c.prefetch)),
                ("unacked", n(c.unacked())),
                ("arguments", FieldValue::Table(c.arguments.clone())),
            ]));
        }
    }
    out
}

/// A connection's name as RabbitMQ forms it: `"PEER -> LOCAL"`.
pub fn connection_name(c: &ConnectionInfo) -> String {
    format!("{} -> {}", c.peer, c.local)
}

/// One row per connection, in RabbitMQ's management shape: `name` (`"peer -> local"`),
/// `user`, `vhost`, `peer_host`, `peer_port`, `channels`, `frame_max`, `timeout`
/// (heartbeat, s), `user_provided_name` (the client's name), `connected_at` (ms since the
/// Unix epoch), and RelayMQ's `id`.
pub fn connections(broker: &Broker) -> Vec<FieldTable> {
    broker
        .connections()
        .iter()
        .map(|c| {
            let at_ms = c
                .connected_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            row(vec![
                ("id", n(c.id)),
                ("name", s(&connection_name(c))),
                ("user", s(&c.user)),
                ("vhost", s(&c.vhost)),
                ("peer_host", s(&c.peer.ip().to_string())),
                ("peer_port", n(c.peer.port())),
                (
                    "channels",
                    n(c.channels.load(std::sync::atomic::Ordering::Relaxed)),
                ),
                ("frame_max", n(c.frame_max)),
                ("timeout", n(c.heartbeat_s)),
                ("user_provided_name", s(&c.client_name)),
                ("protocol", s(c.protocol)),
                ("connected_at", n(at_ms)),
            ])
        })
        .collect()
}

/// Server status: `version`, `uptime_s`, `connections`, `channels`, `vhosts`,
/// `exchanges`, `queues`, `consumers`, `messages` (ready + unacked), the split
/// `messages_ready`, `messages_unacknowledged`, the resource alarm fields
/// ([`crate::alarm::ResourceAlarms::status_fields`]: `mem_used`, `mem_limit`, `mem_alarm`,
/// `disk_free`, `disk_free_limit`, `disk_free_alarm`, ...) and the file-descriptor ones
/// (`fd_used`, `fd_total`, `sockets_used`, `sockets_total`, `store_files_used`,
/// `store_files_total`).
pub fn status(broker: &Broker) -> FieldTable {
    let vhosts = broker.vhosts();
    let (mut exchanges, mut queues, mut ready, mut unacked, mut consumers) = (0, 0, 0, 0, 0);
    for vh in &vhosts {
        exchanges += vh.all_exchanges().len();
        for q in vh.all_queues() {
            let st = q.stats();
            queues += 1;
            ready += st.ready;
            unacked += st.unacked;
            consumers += st.consumers;
        }
    }
    let connections = broker.connections();
    let channels: usize = connections
        .iter()
        .map(|c| c.channels.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let mut fields = vec![
        ("version", s(env!("CARGO_PKG_VERSION"))),
        ("uptime_s", n(broker.uptime().as_secs())),
        ("connections", n(connections.len())),
        ("channels", n(channels)),
        ("vhosts", n(vhosts.len())),
        ("exchanges", n(exchanges)),
        ("queues", n(queues)),
        ("consumers", n(consumers)),
        ("messages", n(ready + unacked)),
        ("messages_ready", n(ready)),
        ("messages_unacknowledged", n(unacked)),
    ];
    fields.extend(broker.alarms().status_fields());
    fields.extend(fd_fields(broker));
    row(fields)
}

/// The file-descriptor fields of `status`, with RabbitMQ's management names where it has
/// them: `fd_used` (open now, `/proc/self/fd`), `fd_total` (the open-files limit),
/// `sockets_used` / `sockets_total` (client sockets open, and the budget's part for them),
/// `store_files_used` / `store_files_total` (the message store's open files and its
/// budget). Fields without a budget (an in-memory broker) are left out.
fn fd_fields(broker: &Broker) -> Vec<(&'static str, FieldValue)> {
    let mut fields = Vec::new();
    if let Some(used) = crate::limits::fds::open_fds() {
        fields.push(("fd_used", n(used)));
    }
    if let Some(b) = broker.config.fd_budget {
        fields.push(("fd_total", n(b.limit)));
        fields.push(("sockets_used", n(broker.sockets_open())));
        fields.push(("sockets_total", n(b.sockets)));
    }
    if let Some(f) = broker.file_budget() {
        fields.push(("store_files_used", n(f.open)));
        fields.push(("store_files_total", n(f.limit)));
    }
    fields
}

/// One row per user, sorted by name: `name`, `tags` (comma-separated),
/// `hashing_algorithm` (RabbitMQ's field names; the hash itself is never listed).
pub fn users(broker: &Broker) -> Vec<FieldTable> {
    broker
        .users()
        .users()
        .iter()
        .map(|u| {
            row(vec![
                ("name", s(&u.name)),
                ("tags", s(&u.tags.join(","))),
                ("hashing_algorithm", s(&u.hash.algorithm)),
            ])
        })
        .collect()
}

/// One row per (user, vhost) permission, sorted: `user`, `vhost`, `configure`, `write`,
/// `read`.
pub fn permissions(broker: &Broker) -> Vec<FieldTable> {
    broker
        .users()
        .all_permissions()
        .into_iter()
        .map(|(user, vhost, p)| {
            row(vec![
                ("user", s(&user)),
                ("vhost", s(&vhost)),
                ("configure", s(&p.configure)),
                ("write", s(&p.write)),
                ("read", s(&p.read)),
            ])
        })
        .collect()
}

/// A JSON value as a row field: its field-table form (objects as tables), or its JSON text
/// as a string when that form would nest deeper than a decoder accepts
/// ([`crate::types::field_table::check_nesting`]), so every stored value can be listed.
fn json_field(v: &serde_json::Value) -> FieldValue {
    let value = FieldValue::from_json(v);
    let probe: FieldTable = std::iter::once(("value".to_string(), value.clone())).collect();
    match crate::types::field_table::check_nesting(&probe, "value") {
        Ok(()) => value,
        Err(_) => s(&v.to_string()),
    }
}

/// A limits map as a table (`{"max-queues": 10}`).
fn limits_table(limits: &crate::broker::limits::LimitMap) -> FieldValue {
    FieldValue::Table(limits.iter().map(|(k, v)| (k.clone(), n(*v))).collect())
}

/// One row per vhost that has limits, sorted by vhost: `vhost`, `value` (a table of
/// limit name → integer), as `GET /api/vhost-limits` and `rabbitmqctl list_vhost_limits
/// --global`.
pub fn vhost_limits(broker: &Broker) -> Vec<FieldTable> {
    let mut vhosts = broker.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    vhosts
        .iter()
        .filter_map(|vh| {
            let own = vh.own_limits();
            (!own.is_empty())
                .then(|| row(vec![("vhost", s(&vh.name)), ("value", limits_table(&own))]))
        })
        .collect()
}

/// One row per user that has limits, sorted by user: `user`, `value` (a table of limit
/// name → integer), as `GET /api/user-limits` and `rabbitmqctl list_user_limits`.
pub fn user_limits(broker: &Broker) -> Vec<FieldTable> {
    broker
        .users()
        .users()
        .iter()
        .filter_map(|u| {
            let own = broker.users().limits(&u.name);
            (!own.is_empty())
                .then(|| row(vec![("user", s(&u.name)), ("value", limits_table(&own))]))
        })
        .collect()
}

/// One row per runtime parameter, sorted by (vhost, component, name): `vhost`,
/// `component`, `name`, `value` (the JSON value), as `GET /api/parameters` and
/// `rabbitmqctl list_parameters`.
pub fn parameters(broker: &Broker) -> Vec<FieldTable> {
    broker
        .parameters()
        .iter()
        .map(|p| {
            row(vec![
                ("vhost", s(&p.vhost)),
                ("component", s(&p.component)),
                ("name", s(&p.name)),
                ("value", json_field(&p.value)),
            ])
        })
        .collect()
}

/// One row per global parameter, sorted by name: `name`, `value` (the JSON value), as
/// `GET /api/global-parameters` and `rabbitmqctl list_global_parameters`.
pub fn global_parameters(broker: &Broker) -> Vec<FieldTable> {
    broker
        .global_parameters()
        .iter()
        .map(|(name, value)| row(vec![("name", s(name)), ("value", json_field(value))]))
        .collect()
}

/// One row per operator policy of every vhost, sorted by (vhost, name), with the fields
/// of [`policies`]: `vhost`, `name`, `pattern`, `apply-to`, `definition` (a table),
/// `priority` (`rabbitmqctl list_operator_policies`).
pub fn operator_policies(broker: &Broker) -> Vec<FieldTable> {
    broker
        .operator_policies()
        .iter()
        .map(|p| {
            row(vec![
                ("vhost", s(&p.vhost)),
                ("name", s(&p.name)),
                ("pattern", s(&p.pattern)),
                ("apply-to", s(&p.apply_to)),
                ("definition", FieldValue::Table(json_table(&p.definition))),
                ("priority", n(p.priority)),
            ])
        })
        .collect()
}
