//! Bindings: `GET /api/bindings`, `/api/bindings/{vhost}`,
//! `GET/POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`,
//! `GET/DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`,
//! `GET /api/exchanges/{vhost}/{name}/bindings/source|destination` and
//! `GET /api/queues/{vhost}/{name}/bindings` (RabbitMQ 4.x: `rabbit_mgmt_wm_bindings`,
//! `rabbit_mgmt_wm_binding`; rows of `rabbit_mgmt_format:binding/1`).
//!
//! A binding is named in a path by its `properties_key` (`pack_binding_props`): `~` for
//! an empty routing key without arguments, the routing key URL-encoded
//! (`quote_plus`, with `~` written `%7E`), and `~` then a hash of the arguments when
//! there are any. RabbitMQ's hash is Erlang's `phash2` of its argument list; RelayMQ's is
//! a CRC-32 of the table's AMQP encoding in the same form (four bytes, URL-safe base64
//! without padding, six characters), so a key is as stable but not equal to RabbitMQ's
//! for the same arguments: clients take keys from the listings, never compute them.
//!
//! As in RabbitMQ, the default exchange's implicit binding to every queue (routing key =
//! the queue's name) is listed, and a binding `POST` answers 201 with a `Location`
//! relative to the request's path.

use super::auth::{require_vhost, sees_vhost};
use super::direct;
use super::exchanges::exchange_name;
use super::list::{self, ListSpec};
use super::queues::{arguments, table_json};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::permission::{Access, Resource};
use crate::broker::exchange::{Binding, Destination};
use crate::broker::vhost::VirtualHost;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use crate::types::field_table::encode_table;
use crate::types::FieldTable;
use base64::Engine;
use serde_json::{json, Value};
use std::sync::Arc;

/// The connection a management operation acts as: none owns an exclusive queue
/// (connection ids start at 1), so another connection's exclusive queue is refused as
/// RabbitMQ's `direct_request` refuses it.
const NO_CONNECTION: u64 = 0;

/// One binding row: vhost, source, destination, routing key, arguments.
#[derive(Debug, Clone)]
pub struct Row {
    /// The vhost.
    pub vhost: Arc<str>,
    /// The source exchange ("" is the default exchange).
    pub source: Arc<str>,
    /// The destination queue or exchange.
    pub destination: Destination,
    /// The routing (binding) key.
    pub key: String,
    /// The binding's arguments.
    pub arguments: FieldTable,
}

impl Row {
    fn new(vhost: &Arc<str>, source: &Arc<str>, b: Binding) -> Row {
        Row {
            vhost: Arc::clone(vhost),
            source: Arc::clone(source),
            destination: b.destination,
            key: b.binding_key,
            arguments: b.arguments,
        }
    }

    /// The default exchange's implicit binding to the queue `queue`.
    fn implicit(vhost: &Arc<str>, queue: &Arc<str>) -> Row {
        Row {
            vhost: Arc::clone(vhost),
            source: Arc::from(""),
            destination: Destination::Queue(Arc::clone(queue)),
            key: queue.to_string(),
            arguments: FieldTable::new(),
        }
    }

    fn destination_name(&self) -> &str {
        match &self.destination {
            Destination::Queue(n) | Destination::Exchange(n) => n,
        }
    }

    fn destination_type(&self) -> &'static str {
        match &self.destination {
            Destination::Queue(_) => "queue",
            Destination::Exchange(_) => "exchange",
        }
    }

    /// The row as RabbitMQ's management API shows it.
    pub fn render(&self) -> Value {
        json!({
            "source": &*self.source,
            "vhost": &*self.vhost,
            "destination": self.destination_name(),
            "destination_type": self.destination_type(),
            "routing_key": self.key,
            "arguments": table_json(&self.arguments),
            "properties_key": properties_key(&self.key, &self.arguments),
        })
    }
}

/// RabbitMQ's `rabbit_http_util:quote_plus/1`: letters, digits and `.-~_` as they are,
/// a space as `+`, every other byte `%XX` (upper-case hex).
pub fn quote_plus(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'~' | b'_' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `quote_plus` with `~` written `%7E`: `~` separates the parts of a properties key.
fn quote_binding(s: &str) -> String {
    quote_plus(s).replace('~', "%7E")
}

/// RabbitMQ's `rabbit_http_util:unquote/1`: `+` is a space, `%XX` a byte.
fn unquote(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// The hash of a binding's arguments in its properties key: a CRC-32 of the table's AMQP
/// encoding (keys sorted), big-endian, in URL-safe base64 without padding.
pub fn arguments_hash(arguments: &FieldTable) -> String {
    let mut encoded = Vec::new();
    encode_table(&mut encoded, arguments);
    let crc = crc32fast::hash(&encoded);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(crc.to_be_bytes())
}

/// A binding's `properties_key` (`rabbit_mgmt_format:pack_binding_props/2`).
pub fn properties_key(key: &str, arguments: &FieldTable) -> String {
    match (key.is_empty(), arguments.is_empty()) {
        (true, true) => "~".to_string(),
        (_, true) => quote_binding(key),
        _ => format!(
            "{}~{}",
            quote_binding(key),
            quote_binding(&arguments_hash(arguments))
        ),
    }
}

/// A properties key taken apart (`rabbit_mgmt_wm_binding:unpack/3`): the routing key and,
/// when it has one, the arguments' hash; `None` for more than two parts.
fn unpack(props: &str) -> Option<(String, Option<String>)> {
    // RabbitMQ's `tokenise/1`: split at each `~`; nothing after the last `~` is no part
    // (so `~` alone is the one empty key).
    let mut parts: Vec<&str> = props.split('~').collect();
    if parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    match parts.as_slice() {
        [key] => Some((unquote(key), None)),
        [key, hash] => Some((unquote(key), Some(unquote(hash)))),
        _ => None,
    }
}

/// The bindings of `source` (RabbitMQ's `list_for_source`): the default exchange's are
/// the implicit ones, one per queue.
fn for_source(vh: &VirtualHost, source: &str) -> Vec<Row> {
    let vhost: Arc<str> = Arc::clone(&vh.name);
    if source.is_empty() {
        return implicit(vh);
    }
    match vh.exchange(source) {
        Some(e) => {
            let bindings = e.router().bindings();
            bindings
                .into_iter()
                .map(|b| Row::new(&vhost, &e.name, b))
                .collect()
        }
        None => Vec::new(),
    }
}

/// The default exchange's implicit bindings, one per queue of `vh`.
fn implicit(vh: &VirtualHost) -> Vec<Row> {
    let vhost: Arc<str> = Arc::clone(&vh.name);
    vh.all_queues()
        .iter()
        .map(|q| Row::implicit(&vhost, &q.name))
        .collect()
}

/// Every binding of `vh` (RabbitMQ's `rabbit_binding:list/1`): the implicit ones, then
/// those declared.
fn all(vh: &VirtualHost) -> Vec<Row> {
    let vhost: Arc<str> = Arc::clone(&vh.name);
    let mut rows = implicit(vh);
    rows.extend(
        vh.all_bindings()
            .into_iter()
            .map(|(source, b)| Row::new(&vhost, &source, b)),
    );
    rows
}

/// The bindings leading to `destination` (`list_for_destination`): a queue's start with
/// its implicit binding, which RabbitMQ lists whether or not the queue exists.
fn for_destination(vh: &VirtualHost, destination: &Destination) -> Vec<Row> {
    let vhost: Arc<str> = Arc::clone(&vh.name);
    let mut rows = match destination {
        Destination::Queue(q) => vec![Row::implicit(&vhost, q)],
        Destination::Exchange(_) => Vec::new(),
    };
    rows.extend(
        vh.all_bindings()
            .into_iter()
            .filter(|(_, b)| b.destination == *destination)
            .map(|(source, b)| Row::new(&vhost, &source, b)),
    );
    rows
}

/// The bindings from `source` to `destination` (`list_for_source_and_destination`).
fn between(vh: &VirtualHost, source: &str, destination: &Destination) -> Vec<Row> {
    if let (true, Destination::Queue(q)) = (source.is_empty(), destination) {
        return vec![Row::implicit(&vh.name, q)];
    }
    let mut rows = for_source(vh, source);
    rows.retain(|r| r.destination == *destination);
    rows
}

/// The fields sorted on without rendering (RabbitMQ's default sort: vhost, source,
/// destination, routing key, properties key).
fn cheap(row: &Row, field: &str) -> Option<Value> {
    Some(match field {
        "vhost" => json!(&*row.vhost),
        "source" => json!(&*row.source),
        "destination" => json!(row.destination_name()),
        "destination_type" => json!(row.destination_type()),
        "routing_key" => json!(row.key),
        "properties_key" => json!(properties_key(&row.key, &row.arguments)),
        _ => return None,
    })
}

fn reply(ctx: &Ctx<'_>, rows: Vec<Row>) -> Result<Response, ApiError> {
    list::reply(
        ctx.request,
        rows,
        ListSpec {
            default_sort: &[
                "vhost",
                "source",
                "destination",
                "routing_key",
                "properties_key",
            ],
            cheap,
            render: Arc::new(Row::render),
        },
    )
}

/// The vhost `name` of a listing: the caller must see it, and it must exist.
///
/// # Errors
/// 404 hidden for a vhost the caller may not use; 404 Object Not Found when absent.
fn listed_vhost(ctx: &Ctx<'_>, name: &str) -> Result<Arc<VirtualHost>, ApiError> {
    require_vhost(ctx.broker(), &ctx.caller, name)?;
    ctx.broker().vhost(name).ok_or_else(ApiError::not_found)
}

/// A destination named in a path: `q` a queue, `e` an exchange (`amq.default` is the
/// default exchange).
fn destination(kind: &str, name: &str) -> Option<Destination> {
    match kind {
        "q" => Some(Destination::Queue(Arc::from(name))),
        "e" => Some(Destination::Exchange(Arc::from(exchange_name(name)))),
        _ => None,
    }
}

/// Checks the permissions of `queue.bind`/`exchange.bind` and their unbinds (write on
/// the destination, read on the source) after refusing the default exchange at either
/// end, in RabbitMQ's order (`binding_action_with_checks`).
///
/// # Errors
/// 401 "Access refused.".
fn permit_binding(
    ctx: &Ctx<'_>,
    vh: &str,
    source: &str,
    destination: &Destination,
) -> Result<(), ApiError> {
    let (resource, name) = match destination {
        Destination::Queue(q) => (Resource::Queue, &**q),
        Destination::Exchange(x) => (Resource::Exchange, &**x),
    };
    direct::permit(ctx, vh, Access::Write, resource, name)?;
    if source.is_empty() || (resource == Resource::Exchange && name.is_empty()) {
        return Err(direct::direct_error(
            crate::broker::vhost::default_exchange_refused(),
        ));
    }
    direct::permit(ctx, vh, Access::Read, Resource::Exchange, source)
}

/// RabbitMQ's `rabbit_web_dispatch_util:relativise/2`: the path `to` relative to the
/// path `from` (both absolute, `/`-separated), as a binding `POST` answers its
/// `Location`.
pub fn relativise(from: &str, to: &str) -> String {
    fn walk(from: &[&str], to: &[&str]) -> Vec<String> {
        match (from, to) {
            ([f], [t, ..]) if f == t => to.iter().map(|s| s.to_string()).collect(),
            ([f, from @ ..], [t, to @ ..]) if f == t => walk(from, to),
            (from, []) => vec!["..".to_string(); from.len()],
            ([_, from @ ..], to) => {
                let mut up = vec!["..".to_string(); from.len()];
                up.extend(to.iter().map(|s| s.to_string()));
                up
            }
            ([], to) => to.iter().map(|s| s.to_string()).collect(),
        }
    }
    let parts = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (from, to) = (parts(from), parts(to));
    let from: Vec<&str> = from.iter().map(String::as_str).collect();
    let to: Vec<&str> = to.iter().map(String::as_str).collect();
    walk(&from, &to).join("/")
}

/// `POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`: binds with the body's
/// `routing_key` (default "") and `arguments`; 201 with the new binding's `Location`.
fn post_binding(
    ctx: &Ctx<'_>,
    vh: &str,
    source: &str,
    kind: &str,
    destination_name: &str,
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let destination = destination(kind, destination_name).ok_or_else(ApiError::not_found)?;
    let v = direct::vhost(broker, vh)?;
    let body = direct::json_body(body, super::API_BODY_BYTES_MAX)?;
    let key = direct::string_field(&body, "routing_key", "")?.to_string();
    let args = arguments(&body)?;
    let source = exchange_name(source);
    permit_binding(ctx, vh, source, &destination)?;
    v.bind(source, &destination, &key, &args, NO_CONNECTION)
        .map_err(direct::direct_error)?;
    log::info!(
        "binding from exchange '{}' to {} '{}' in vhost '{}' (key '{}') added over HTTP by '{}'",
        source.escape_debug(),
        if kind == "q" { "queue" } else { "exchange" },
        destination_name.escape_debug(),
        vh.escape_debug(),
        key.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    // RabbitMQ quotes every part of the new URL, the properties key included (which is
    // thereby quoted twice), then makes it relative to the request's path.
    let to = format!(
        "/api/bindings/{}/e/{}/{}/{}/{}",
        quote_plus(vh),
        quote_plus(source),
        quote_plus(kind),
        quote_plus(destination_name),
        quote_plus(&properties_key(&key, &args))
    );
    let location = relativise(&ctx.request.path, &to);
    Ok(Response::empty(201).with_header("location", location))
}

/// The binding a properties key names, if it exists (`rabbit_mgmt_wm_binding:binding/1`
/// and `resource_exists/2`).
fn find(vh: &VirtualHost, source: &str, destination: &Destination, props: &str) -> Option<Row> {
    let (key, hash) = unpack(props)?;
    between(vh, source, destination)
        .into_iter()
        .find(|r| match &hash {
            None => r.key == key && r.arguments.is_empty(),
            Some(h) => {
                r.key == key && !r.arguments.is_empty() && arguments_hash(&r.arguments) == *h
            }
        })
}

/// `GET` and `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`.
fn one_binding(
    ctx: &Ctx<'_>,
    method: &str,
    vh: &str,
    source: &str,
    kind: &str,
    destination_name: &str,
    props: &str,
) -> Result<Response, ApiError> {
    let v = listed_vhost(ctx, vh)?;
    let destination = destination(kind, destination_name).ok_or_else(ApiError::not_found)?;
    let source = exchange_name(source);
    let row = find(&v, source, &destination, props).ok_or_else(ApiError::not_found)?;
    if method == "GET" {
        return Ok(json_reply(200, &row.render()));
    }
    permit_binding(ctx, vh, source, &destination)?;
    v.unbind(
        source,
        &destination,
        &row.key,
        &row.arguments,
        NO_CONNECTION,
    )
    .map_err(direct::direct_error)?;
    log::info!(
        "binding from exchange '{}' to {} '{}' in vhost '{}' (key '{}') deleted over HTTP by '{}'",
        source.escape_debug(),
        row.destination_type(),
        destination_name.escape_debug(),
        vh.escape_debug(),
        row.key.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(204))
}

/// Answers `/api/bindings...`, `/api/exchanges/{v}/{x}/bindings/...` and
/// `/api/queues/{v}/{q}/bindings`.
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
        ("GET", ["bindings"]) => {
            let broker = ctx.broker();
            let mut rows = Vec::new();
            for vh in broker.vhosts() {
                if sees_vhost(broker, &ctx.caller, &vh.name) {
                    rows.extend(all(&vh));
                }
            }
            reply(ctx, rows)
        }
        ("GET", ["bindings", vh]) => reply(ctx, all(&*listed_vhost(ctx, vh)?)),
        ("GET", ["bindings", vh, "e", source, kind, dest]) => {
            let v = listed_vhost(ctx, vh)?;
            let d = destination(kind, dest).ok_or_else(ApiError::not_found)?;
            reply(ctx, between(&v, exchange_name(source), &d))
        }
        ("POST", ["bindings", vh, "e", source, kind, dest]) => {
            post_binding(ctx, vh, source, kind, dest, body)
        }
        ("GET" | "DELETE", ["bindings", vh, "e", source, kind, dest, props]) => {
            one_binding(ctx, method, vh, source, kind, dest, props)
        }
        ("GET", ["exchanges", vh, x, "bindings", "source"]) => {
            reply(ctx, for_source(&*listed_vhost(ctx, vh)?, exchange_name(x)))
        }
        ("GET", ["exchanges", vh, x, "bindings", "destination"]) => {
            let d = Destination::Exchange(Arc::from(exchange_name(x)));
            reply(ctx, for_destination(&*listed_vhost(ctx, vh)?, &d))
        }
        ("GET", ["queues", vh, q, "bindings"]) => {
            let d = Destination::Queue(Arc::from(*q));
            reply(ctx, for_destination(&*listed_vhost(ctx, vh)?, &d))
        }
        (_, ["bindings"])
        | (_, ["bindings", _])
        | (_, ["bindings", _, "e", _, "q" | "e", _])
        | (_, ["bindings", _, "e", _, "q" | "e", _, _])
        | (_, ["exchanges", _, _, "bindings", _])
        | (_, ["queues", _, _, "bindings"]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FieldValue;

    #[test]
    fn properties_keys_are_rabbitmqs() {
        let none = FieldTable::new();
        assert_eq!(properties_key("", &none), "~");
        assert_eq!(properties_key("order.#", &none), "order.%23");
        assert_eq!(properties_key("a b~c/é", &none), "a+b%7Ec%2F%C3%A9");
        let mut args = FieldTable::new();
        args.insert("x-match".into(), FieldValue::string("all"));
        let hash = arguments_hash(&args);
        assert_eq!(hash.len(), 6, "four bytes in base64 without padding");
        assert_eq!(
            properties_key("", &args),
            format!("~{}", quote_binding(&hash))
        );
        assert_eq!(
            properties_key("k", &args),
            format!("k~{}", quote_binding(&hash))
        );
        let mut other = args.clone();
        other.insert("x".into(), FieldValue::I64(1));
        assert_ne!(arguments_hash(&other), hash);
    }

    #[test]
    fn properties_keys_unpack_to_what_they_were_made_of() {
        for key in ["", "order.#", "a b~c/é", "+%"] {
            let packed = properties_key(key, &FieldTable::new());
            assert_eq!(unpack(&packed), Some((key.to_string(), None)), "{packed}");
        }
        assert_eq!(
            unpack("k~abc"),
            Some(("k".to_string(), Some("abc".to_string())))
        );
        assert_eq!(unpack("a~b~c"), None);
        assert_eq!(unpack("~"), Some((String::new(), None)));
        assert_eq!(unpack("k~"), Some(("k".to_string(), None)));
    }

    #[test]
    fn locations_are_relative_to_the_request_as_rabbitmq_makes_them() {
        assert_eq!(
            relativise(
                "/api/bindings/orders/e/orders.events/q/orders.created",
                "/api/bindings/orders/e/orders.events/q/orders.created/order.created"
            ),
            "orders.created/order.created"
        );
        assert_eq!(
            relativise("/api/bindings/%2f/e/x/q/y", "/api/bindings/%2F/e/x/q/y/~"),
            "../../../../%2F/e/x/q/y/~"
        );
        assert_eq!(relativise("/a/b", "/a/b"), "b");
        assert_eq!(relativise("/a/b/c", "/a"), "../..");
    }
}
