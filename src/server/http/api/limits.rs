//! Vhost and user limits (RabbitMQ 4.x): `GET /api/vhost-limits`,
//! `/api/vhost-limits/{vhost}`, `PUT/DELETE /api/vhost-limits/{vhost}/{name}` with
//! `{"value": N}` (`max-connections`, `max-queues`); `GET /api/user-limits`,
//! `/api/user-limits/{user}`, `PUT/DELETE /api/user-limits/{user}/{name}`
//! (`max-connections`, `max-channels`) — `rabbit_mgmt_wm_limits`, `rabbit_mgmt_wm_limit`,
//! `rabbit_mgmt_wm_user_limits`, `rabbit_mgmt_wm_user_limit`. The broker enforces them
//! (`crate::broker::limits`) and stores them in `meta.db`. A negative value is kept as
//! set and means no limit, as in RabbitMQ; DELETE removes a limit (204 also when it was not
//! set).

use super::auth::{require, require_vhost, sees_vhost, Need};
use super::list::{self, ListSpec};
use super::{method_not_allowed, ApiError, Ctx};
use crate::broker::limits::{self, LimitMap};
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// A list of limit rows in the order given (RabbitMQ sorts them by nothing), with the
/// list conventions.
fn rows(ctx: &Ctx<'_>, rows: Vec<Value>) -> Result<Response, ApiError> {
    list::reply(
        ctx.request,
        rows,
        ListSpec {
            default_sort: &[],
            cheap: |v, f| v.get(f).cloned(),
            render: Arc::new(Value::clone),
        },
    )
}

/// `{"vhost": v, "value": {...}}` or `{"user": u, "value": {...}}`.
fn row(key: &str, owner: &str, limits: &LimitMap) -> Value {
    json!({key: owner, "value": limits::to_json(limits)})
}

/// The `value` of a `PUT` body (`rabbit_mgmt_util:with_decode([value], ...)`).
///
/// # Errors
/// 400 `[{key_missing,value}]` when absent; 400 for a body that is not a JSON object.
fn value(ctx: &Ctx<'_>, body: &mut Body<'_>) -> Result<Value, ApiError> {
    let body = ctx.json_body(body)?;
    body.get("value")
        .cloned()
        .ok_or_else(|| ApiError::bad_request("[{key_missing,value}]"))
}

/// 404 `{"error":"not_found","reason":"vhost_not_found"}` (`rabbit_mgmt_wm_limit`).
fn vhost_not_found() -> ApiError {
    ApiError::new(404, "not_found", "vhost_not_found")
}

/// 404 `{"error":"not_found","reason":"user_not_found"}` (`rabbit_mgmt_wm_user_limit`).
fn user_not_found() -> ApiError {
    ApiError::new(404, "not_found", "user_not_found")
}

fn vhost_limits(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    match (method, path) {
        ("GET", ["vhost-limits"]) => {
            let all = broker
                .vhosts()
                .into_iter()
                .filter(|vh| sees_vhost(broker, &ctx.caller, &vh.name))
                .filter_map(|vh| {
                    let own = vh.own_limits();
                    (!own.is_empty()).then(|| row("vhost", &vh.name, &own))
                })
                .collect();
            rows(ctx, all)
        }
        ("GET", ["vhost-limits", vhost]) => {
            require_vhost(broker, &ctx.caller, vhost)?;
            let own = broker
                .vhost_limits(vhost)
                .map_err(|_| ApiError::not_found())?;
            let all = if own.is_empty() {
                Vec::new()
            } else {
                vec![row("vhost", vhost, &own)]
            };
            rows(ctx, all)
        }
        ("PUT", ["vhost-limits", vhost, name]) => {
            require(&ctx.caller, Need::Administrator)?;
            if broker.vhost(vhost).is_none() {
                return Err(vhost_not_found());
            }
            let v = value(ctx, body)?;
            broker.set_vhost_limit(vhost, name, Some(&v))?;
            log::info!(
                "limit '{}' of vhost '{}' set to {v} over HTTP by '{}'",
                name.escape_debug(),
                vhost.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        ("DELETE", ["vhost-limits", vhost, name]) => {
            require(&ctx.caller, Need::Administrator)?;
            if broker.vhost(vhost).is_none() {
                return Err(vhost_not_found());
            }
            broker.set_vhost_limit(vhost, name, None)?;
            log::info!(
                "limit '{}' of vhost '{}' cleared over HTTP by '{}'",
                name.escape_debug(),
                vhost.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        (_, ["vhost-limits"]) | (_, ["vhost-limits", _]) | (_, ["vhost-limits", _, _]) => {
            Err(method_not_allowed())
        }
        _ => Err(ApiError::not_found()),
    }
}

fn user_limits(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    match (method, path) {
        ("GET", ["user-limits"]) => {
            require(&ctx.caller, Need::Administrator)?;
            let all = broker
                .users()
                .users()
                .into_iter()
                .filter_map(|u| {
                    let own = broker.users().limits(&u.name);
                    (!own.is_empty()).then(|| row("user", &u.name, &own))
                })
                .collect();
            rows(ctx, all)
        }
        ("GET", ["user-limits", user]) => {
            // An administrator or monitor, or the user itself (`is_authorized_user`).
            if *user != ctx.caller.name {
                require(&ctx.caller, Need::Monitor)?;
            }
            let own = broker
                .user_limits(user)
                .map_err(|_| ApiError::not_found())?;
            let all = if own.is_empty() {
                Vec::new()
            } else {
                vec![row("user", user, &own)]
            };
            rows(ctx, all)
        }
        ("PUT", ["user-limits", user, name]) => {
            require(&ctx.caller, Need::Administrator)?;
            if broker.users().user(user).is_none() {
                return Err(user_not_found());
            }
            let v = value(ctx, body)?;
            broker.set_user_limit(user, name, Some(&v))?;
            log::info!(
                "limit '{}' of user '{}' set to {v} over HTTP by '{}'",
                name.escape_debug(),
                user.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        ("DELETE", ["user-limits", user, name]) => {
            require(&ctx.caller, Need::Administrator)?;
            if broker.users().user(user).is_none() {
                return Err(user_not_found());
            }
            broker.set_user_limit(user, name, None)?;
            log::info!(
                "limit '{}' of user '{}' cleared over HTTP by '{}'",
                name.escape_debug(),
                user.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        (_, ["user-limits"]) | (_, ["user-limits", _]) | (_, ["user-limits", _, _]) => {
            Err(method_not_allowed())
        }
        _ => Err(ApiError::not_found()),
    }
}

/// Answers `/api/vhost-limits...` and `/api/user-limits...`.
///
/// # Errors
/// As RabbitMQ: 401 for a missing tag, 400 for a bad value or limit name, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match path.first() {
        Some(&"vhost-limits") => vhost_limits(ctx, method, path, body),
        _ => user_limits(ctx, method, path, body),
    }
}
