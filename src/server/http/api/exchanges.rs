//! Exchanges: `GET /api/exchanges`, `/api/exchanges/{vhost}`,
//! `GET/PUT/DELETE /api/exchanges/{vhost}/{name}` (RabbitMQ 4.x: `rabbit_mgmt_wm_exchanges`,
//! `rabbit_mgmt_wm_exchange`; rows of `rabbit_mgmt_format:exchange/1`), and the routes
//! under one exchange: its bindings (`bindings/source`, `bindings/destination`:
//! [`super::bindings`]) and `publish` ([`super::messages`]).
//!
//! In a path the default exchange is `amq.default` (`rabbit_web_dispatch_access_control:id/2`).

use super::auth::{require_vhost, sees_vhost};
use super::direct::{self, Refusal};
use super::list::{self, ListSpec};
use super::queues::{arguments, table_json};
use super::stats::rate;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::permission::{Access, Resource};
use crate::broker::exchange::{Exchange, STANDARD_EXCHANGES};
use crate::broker::policy::{self, Policy};
use crate::broker::rates::{CounterKey, Rates};
use crate::broker::vhost::ExchangeSpec;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// How the default exchange (named "") is written in a path.
pub const DEFAULT_EXCHANGE_ALIAS: &str = "amq.default";

/// `user_who_performed_action` of the exchanges every vhost is created with (RabbitMQ's
/// internal user's name). RelayMQ does not record who declared an exchange: the others
/// show "".
pub const INTERNAL_USER: &str = "rmq-internal";

/// The exchange name a path segment names: `amq.default` is the default exchange "".
pub fn exchange_name(segment: &str) -> &str {
    if segment == DEFAULT_EXCHANGE_ALIAS {
        ""
    } else {
        segment
    }
}

/// One exchange of a list: its vhost, the exchange and the vhost's policies (the one that
/// applies is found when the row is rendered).
type Item = (Arc<str>, Arc<Exchange>, Arc<Vec<Arc<Policy>>>);

/// An exchange as RabbitMQ's management API shows it, with its `message_stats`
/// (`publish_in`, `publish_out` and their rates from `rates`).
pub fn render(vhost: &str, e: &Exchange, policies: &[Arc<Policy>], rates: &Rates) -> Value {
    let (publish_in, publish_out) = e.counters.read();
    let r = rates.object(&CounterKey::Exchange(Arc::from(vhost), Arc::clone(&e.name)));
    let builtin = e.is_default() || STANDARD_EXCHANGES.iter().any(|(n, _)| **n == *e.name);
    let mut row = json!({
        "name": &*e.name,
        "vhost": vhost,
        "type": e.kind.as_str(),
        "durable": e.durable,
        "auto_delete": e.auto_delete,
        "internal": e.internal,
        "arguments": table_json(&e.arguments),
        "user_who_performed_action": if builtin { INTERNAL_USER } else { "" },
        "message_stats": {
            "publish_in": publish_in,
            "publish_in_details": rate(r.rates[0]),
            "publish_out": publish_out,
            "publish_out_details": rate(r.rates[1]),
        },
    });
    // The delayed-message plugin's `messages_delayed`, and when one waits the earliest
    // due time (ms since the Unix epoch; RabbitMQ 4.3 names it so on quorum queues).
    if let Some(d) = e.delayed() {
        row["messages_delayed"] = json!(d.waiting());
        if let Some(next) = d.next_due_ms() {
            row["next_delayed_at"] = json!(next);
        }
    }
    // RabbitMQ leaves `policy` out when none applies.
    if let Some(p) = policy::for_exchange(policies, &e.name) {
        row["policy"] = json!(p.def.name);
    }
    row
}

/// The exchange fields sorted on without rendering.
fn cheap(item: &Item, field: &str) -> Option<Value> {
    let (vhost, e, _) = item;
    Some(match field {
        "name" => json!(&*e.name),
        "vhost" => json!(&**vhost),
        "type" => json!(e.kind.as_str()),
        "durable" => json!(e.durable),
        "auto_delete" => json!(e.auto_delete),
        "internal" => json!(e.internal),
        _ => return None,
    })
}

fn list_exchanges(ctx: &Ctx<'_>, only: Option<&str>) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    let vhosts = match only {
        Some(v) => {
            require_vhost(broker, &ctx.caller, v)?;
            vec![broker.vhost(v).ok_or_else(ApiError::not_found)?]
        }
        None => broker
            .vhosts()
            .into_iter()
            .filter(|vh| sees_vhost(broker, &ctx.caller, &vh.name))
            .collect(),
    };
    let mut items: Vec<Item> = Vec::new();
    for vh in &vhosts {
        let name: Arc<str> = Arc::from(&*vh.name);
        let policies = Arc::new(vh.policies());
        items.extend(
            vh.all_exchanges()
                .into_iter()
                .map(|e| (Arc::clone(&name), e, Arc::clone(&policies))),
        );
    }
    let broker = Arc::clone(broker);
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &["vhost", "name"],
            cheap,
            render: Arc::new(move |(vh, e, policies)| render(vh, e, policies, broker.rates())),
        },
    )
}

fn get_exchange(ctx: &Ctx<'_>, vh: &str, name: &str) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let v = broker.vhost(vh).ok_or_else(ApiError::not_found)?;
    let e = v.exchange(name).ok_or_else(ApiError::not_found)?;
    let mut row = render(vh, &e, &v.policies(), broker.rates());
    // The single exchange's detail (`augment_exchanges(…, full)`): the channels that
    // published to it and the queues it routed to; RelayMQ keeps no such statistics.
    row["incoming"] = json!([]);
    row["outgoing"] = json!([]);
    Ok(json_reply(200, &row))
}

/// `PUT /api/exchanges/{vhost}/{name}`: `exchange.declare` with the body's `type`
/// (default `direct`), `durable`, `auto_delete`, `internal` (default false, as the AMQP
/// method's) and `arguments`.
fn put_exchange(
    ctx: &Ctx<'_>,
    vh: &str,
    name: &str,
    body: &mut Body<'_>,
) -> Result<Response, Refusal> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let v = direct::vhost(broker, vh)?;
    let body = direct::json_body(body, super::API_BODY_BYTES_MAX)?;
    let spec = ExchangeSpec {
        name: name.to_string(),
        kind: direct::string_field(&body, "type", "direct")?.to_string(),
        passive: false,
        durable: direct::bool_field(&body, "durable", false)?,
        auto_delete: direct::bool_field(&body, "auto_delete", false)?,
        internal: direct::bool_field(&body, "internal", false)?,
        arguments: arguments(&body)?,
    };
    if name.is_empty() {
        // `check_not_default_exchange` comes before the permission check.
        return Err(direct::direct_error(crate::broker::vhost::default_exchange_refused()).into());
    }
    direct::permit(ctx, vh, Access::Configure, Resource::Exchange, name)?;
    if let Some(ae) = spec
        .arguments
        .get("alternate-exchange")
        .and_then(|v| v.as_str())
    {
        if v.exchange(name).is_none() {
            direct::permit(ctx, vh, Access::Read, Resource::Exchange, name)?;
            direct::permit(ctx, vh, Access::Write, Resource::Exchange, ae)?;
        }
    }
    let existed = v.exchange(name).is_some();
    v.declare_exchange(&spec).map_err(direct::direct_error)?;
    log::info!(
        "exchange '{}' in vhost '{}' declared over HTTP by '{}'",
        name.escape_debug(),
        vh.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(if existed { 204 } else { 201 }))
}

/// `DELETE /api/exchanges/{vhost}/{name}` (`if-unused=true` keeps an exchange that is
/// the source of bindings).
fn delete_exchange(ctx: &Ctx<'_>, vh: &str, name: &str) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    require_vhost(broker, &ctx.caller, vh)?;
    let v = broker.vhost(vh).ok_or_else(ApiError::not_found)?;
    if v.exchange(name).is_none() {
        return Err(ApiError::not_found());
    }
    let if_unused = ctx.request.query("if-unused") == Some("true");
    // RabbitMQ's order: the default and `amq.*` exchanges are refused before the
    // permission is checked.
    if name.is_empty() || crate::broker::names::is_reserved(name) {
        return Err(ApiError::not_authorised(direct::ACCESS_REFUSED_TEXT));
    }
    direct::permit(ctx, vh, Access::Configure, Resource::Exchange, name)?;
    v.delete_exchange(name, if_unused)
        .map_err(direct::direct_error)?;
    log::info!(
        "exchange '{}' in vhost '{}' deleted over HTTP by '{}'",
        name.escape_debug(),
        vh.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(204))
}

/// Answers `/api/exchanges...`.
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
        ("GET", ["exchanges"]) => list_exchanges(ctx, None),
        ("GET", ["exchanges", vh]) => list_exchanges(ctx, Some(vh)),
        ("GET", ["exchanges", vh, name]) => get_exchange(ctx, vh, exchange_name(name)),
        ("PUT", ["exchanges", vh, name]) => {
            direct::answer(put_exchange(ctx, vh, exchange_name(name), body))
        }
        ("DELETE", ["exchanges", vh, name]) => delete_exchange(ctx, vh, exchange_name(name)),
        (_, ["exchanges", _, _, "bindings", "source" | "destination"]) => {
            super::bindings::route(ctx, method, path, body)
        }
        (_, ["exchanges", _, _, "publish"]) => super::messages::route(ctx, method, path, body),
        (_, ["exchanges"]) | (_, ["exchanges", _]) | (_, ["exchanges", _, _]) => {
            Err(method_not_allowed())
        }
        _ => Err(ApiError::not_found()),
    }
}
