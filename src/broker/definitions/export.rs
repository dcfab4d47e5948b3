//! Export: the broker's definitions as `rabbitmqctl export_definitions` writes them
//! (RabbitMQ 3.10 format), with what RabbitMQ's export holds (`rabbit_definitions`
//! `list_queues`, `list_exchanges`, `list_bindings`, the same in 3.10 and 4.x): every queue
//! but exclusive ones, durable or not; every exchange but the default one and `amq.*`,
//! durable or not. Two differences, both so that an export always imports back whole:
//! internal exchanges are exported (RabbitMQ leaves them out but exports the bindings to
//! them), and bindings are exported when both ends are (RabbitMQ also exports those of
//! exclusive queues, which it does not export). Users keep their hash and its algorithm
//! (`argon2id` for ours, which our import reads back; RabbitMQ's
//! `rabbit_password_hashing_sha256` hashes as imported).

use super::RABBIT_FORMAT_VERSION;
use crate::broker::exchange::Destination;
use crate::broker::limits;
use crate::broker::names;
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::types::field_table::table_to_json;
use serde_json::{json, Value};

/// The whole document as a JSON value; every list is sorted (by vhost, then name), so two
/// exports of the same definitions are equal byte for byte.
pub fn export(broker: &Broker) -> Value {
    let mut vhosts = broker.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    json!({
        "rabbit_version": RABBIT_FORMAT_VERSION,
        "rabbitmq_version": RABBIT_FORMAT_VERSION,
        "product_name": "RelayMQ",
        "product_version": env!("CARGO_PKG_VERSION"),
        "users": users(broker),
        "vhosts": vhosts.iter().map(|v| vhost(v)).collect::<Vec<_>>(),
        "permissions": permissions(broker),
        "topic_permissions": [],
        "parameters": vhosts.iter().flat_map(|v| v.runtime_parameters()).map(|p| p.to_json()).collect::<Vec<_>>(),
        "global_parameters": broker.global_parameters().into_iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>(),
        "policies": broker.policies().iter().map(|p| p.to_rabbitmq_json()).collect::<Vec<_>>(),
        "queues": vhosts.iter().flat_map(|v| queues(v)).collect::<Vec<_>>(),
        "exchanges": vhosts.iter().flat_map(|v| exchanges(v)).collect::<Vec<_>>(),
        "bindings": vhosts.iter().flat_map(|v| bindings(v)).collect::<Vec<_>>(),
    })
}

/// `users`: name, password_hash, hashing_algorithm, tags (a list, as RabbitMQ 3.10),
/// limits (an object, `{}` when none).
fn users(broker: &Broker) -> Vec<Value> {
    let mut all = broker.users().users();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter()
        .map(|u| {
            json!({
                "name": u.name,
                "password_hash": u.hash.hash,
                "hashing_algorithm": u.hash.algorithm,
                "tags": u.tags,
                "limits": limits::to_json(&broker.users().limits(&u.name)),
            })
        })
        .collect()
}

/// One `vhosts` element: name, limits (`[]` when none, as RabbitMQ 3.10 writes it; an
/// object otherwise, as 4.x) and metadata (description and tags; the default queue type
/// when it is not `classic`).
pub fn vhost(v: &VirtualHost) -> Value {
    let own = v.own_limits();
    let meta = v.metadata();
    let mut metadata = json!({"description": meta.description, "tags": meta.tags});
    if meta.default_queue_type != limits::DEFAULT_QUEUE_TYPE {
        metadata["default_queue_type"] = json!(meta.default_queue_type);
    }
    json!({
        "name": &*v.name,
        "limits": if own.is_empty() { json!([]) } else { limits::to_json(&own) },
        "metadata": metadata,
    })
}

/// `permissions`: user, vhost, configure, write, read.
fn permissions(broker: &Broker) -> Vec<Value> {
    broker
        .users()
        .all_permissions()
        .into_iter()
        .map(|(user, vhost, def)| {
            json!({
                "user": user,
                "vhost": vhost,
                "configure": def.configure,
                "write": def.write,
                "read": def.read,
            })
        })
        .collect()
}

/// Queues other than exclusive ones (they die with their connection: RabbitMQ leaves
/// them out too), durable or not, by name.
pub fn queues(v: &VirtualHost) -> Vec<Value> {
    let mut all: Vec<_> = v
        .all_queues()
        .into_iter()
        .filter(|q| !q.exclusive)
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter()
        .map(|q| {
            json!({
                "name": &*q.name,
                "vhost": &*v.name,
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "type": q.queue_type.as_str(),
                "arguments": table_to_json(&q.arguments),
            })
        })
        .collect()
}

/// Whether an exchange is exported: any but the default one and `amq.*`, durable or not.
fn exported_exchange(name: &str) -> bool {
    !name.is_empty() && !names::is_reserved(name)
}

/// Exchanges other than the default one and `amq.*`, durable or not, by name.
pub fn exchanges(v: &VirtualHost) -> Vec<Value> {
    let mut all: Vec<_> = v
        .all_exchanges()
        .into_iter()
        .filter(|e| exported_exchange(&e.name))
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter()
        .map(|e| {
            json!({
                "name": &*e.name,
                "vhost": &*v.name,
                "type": e.kind.as_str(),
                "durable": e.durable,
                "auto_delete": e.auto_delete,
                "internal": e.internal,
                "arguments": table_to_json(&e.arguments),
            })
        })
        .collect()
}

/// Bindings whose both ends are in the export or built in (an `amq.*` exchange, as
/// RabbitMQ): not those of exclusive queues, nor the default exchange's implicit ones.
pub fn bindings(v: &VirtualHost) -> Vec<Value> {
    let mut rows: Vec<(String, String, &'static str, String, Value)> = Vec::new();
    for (source, b) in v.all_bindings() {
        if source.is_empty() {
            continue;
        }
        let (destination, kind, exported) = match &b.destination {
            Destination::Queue(q) => (
                q.to_string(),
                "queue",
                v.queue(q).is_some_and(|q| !q.exclusive),
            ),
            Destination::Exchange(x) => (x.to_string(), "exchange", !x.is_empty()),
        };
        if exported {
            rows.push((
                source.to_string(),
                destination,
                kind,
                b.binding_key,
                table_to_json(&b.arguments),
            ));
        }
    }
    rows.sort_by(|a, b| {
        (&a.0, &a.1, a.2, &a.3, a.4.to_string()).cmp(&(&b.0, &b.1, b.2, &b.3, b.4.to_string()))
    });
    rows.into_iter()
        .map(|(source, destination, kind, key, arguments)| {
            json!({
                "source": source,
                "vhost": &*v.name,
                "destination": destination,
                "destination_type": kind,
                "routing_key": key,
                "arguments": arguments,
            })
        })
        .collect()
}
