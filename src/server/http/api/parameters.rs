//! Runtime and global parameters (RabbitMQ 4.x): `GET /api/parameters`,
//! `/api/parameters/{component}`, `/api/parameters/{component}/{vhost}`,
//! `GET/PUT/DELETE /api/parameters/{component}/{vhost}/{name}` with `{"value": …}`
//! (`rabbit_mgmt_wm_parameters`, `rabbit_mgmt_wm_parameter`); `GET /api/global-parameters`,
//! `GET/PUT/DELETE /api/global-parameters/{name}` (`rabbit_mgmt_wm_global_parameters`,
//! `rabbit_mgmt_wm_global_parameter`). What each component does is in
//! [`crate::broker::parameters`]: `vhost-limits` are the vhost's limits (the same as
//! `/api/vhost-limits`), `operator_policy` the operator policies, `federation-upstream`,
//! `shovel`, ... are stored and not acted on.
//!
//! Runtime parameters need `administrator`, or `policymaker` with permissions in the
//! vhost (`is_authorized_policies`, GET included); lists show the vhosts the user may use.
//! Global parameters need `policymaker` or `administrator`
//! (`is_authorized_global_parameters`, GET included). A body's `component`, `vhost` and
//! `name` fields are ignored, as RabbitMQ ignores them: the path decides.

use super::auth::require_vhost;
use super::list::{self, ListSpec};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::broker::parameters::RuntimeParameter;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// RabbitMQ's refusal for a user without the tag (`is_authorized_policies`,
/// `is_authorized_global_parameters`).
const NOT_AUTHORISED: &str = "User not authorised to access object";

/// `is_authorized_policies`: an administrator, or a policymaker with permissions in
/// `vhost` (when given and existing).
///
/// # Errors
/// 401 "User not authorised to access object"; 404 `not_found` for a vhost the user may
/// not use.
pub(super) fn require_policies(ctx: &Ctx<'_>, vhost: Option<&str>) -> Result<(), ApiError> {
    if ctx.caller.is_admin() {
        return Ok(());
    }
    if !ctx.caller.is_policymaker() {
        return Err(ApiError::not_authorised(NOT_AUTHORISED));
    }
    match vhost {
        Some(v) => require_vhost(ctx.broker(), &ctx.caller, v),
        None => Ok(()),
    }
}

/// `is_authorized_global_parameters`: `policymaker` or `administrator`.
///
/// # Errors
/// 401 "User not authorised to access object".
fn require_policymaker(ctx: &Ctx<'_>) -> Result<(), ApiError> {
    if ctx.caller.is_policymaker() {
        Ok(())
    } else {
        Err(ApiError::not_authorised(NOT_AUTHORISED))
    }
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

/// 404 `{"error":"not_found","reason":"vhost_not_found"}` (`rabbit_mgmt_wm_parameter`).
fn vhost_not_found() -> ApiError {
    ApiError::new(404, "not_found", "vhost_not_found")
}

fn list_parameters(
    ctx: &Ctx<'_>,
    component: Option<&str>,
    vhost: Option<&str>,
) -> Result<Response, ApiError> {
    require_policies(ctx, vhost)?;
    let broker = ctx.broker();
    if let Some(v) = vhost {
        broker.vhost(v).ok_or_else(ApiError::not_found)?;
    }
    let items: Vec<RuntimeParameter> = broker
        .parameters()
        .into_iter()
        .filter(|p| component.is_none_or(|c| p.component == c))
        .filter(|p| vhost.is_none_or(|v| p.vhost == v))
        .filter(|p| {
            ctx.caller.is_admin()
                || broker
                    .users()
                    .permissions(&ctx.caller.name, &p.vhost)
                    .is_some()
        })
        .collect();
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &[],
            cheap: |p, f| match f {
                "name" => Some(json!(p.name)),
                "vhost" => Some(json!(p.vhost)),
                "component" => Some(json!(p.component)),
                _ => None,
            },
            render: Arc::new(RuntimeParameter::to_json),
        },
    )
}

fn parameter(
    ctx: &Ctx<'_>,
    method: &str,
    component: &str,
    vhost: &str,
    name: &str,
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    require_policies(ctx, Some(vhost))?;
    let broker = ctx.broker();
    let who = ctx.caller.name.escape_debug();
    match method {
        "GET" => {
            let p = broker
                .parameter(vhost, component, name)
                .ok_or_else(ApiError::not_found)?;
            Ok(json_reply(200, &p.to_json()))
        }
        "PUT" => {
            if broker.vhost(vhost).is_none() {
                return Err(vhost_not_found());
            }
            let value = value(ctx, body)?;
            let created =
                broker.set_parameter_as(&ctx.caller.name, vhost, component, name, value)?;
            log::info!(
                "runtime parameter '{}' of component '{}' in vhost '{}' set over HTTP by \
                 '{who}'",
                name.escape_debug(),
                component.escape_debug(),
                vhost.escape_debug()
            );
            Ok(Response::empty(if created { 201 } else { 204 }))
        }
        "DELETE" => {
            broker
                .parameter(vhost, component, name)
                .ok_or_else(ApiError::not_found)?;
            broker.clear_parameter(vhost, component, name)?;
            log::info!(
                "runtime parameter '{}' of component '{}' in vhost '{}' cleared over HTTP by \
                 '{who}'",
                name.escape_debug(),
                component.escape_debug(),
                vhost.escape_debug()
            );
            Ok(Response::empty(204))
        }
        _ => Err(method_not_allowed()),
    }
}

fn global_parameter(
    ctx: &Ctx<'_>,
    method: &str,
    name: &str,
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    require_policymaker(ctx)?;
    let broker = ctx.broker();
    let who = ctx.caller.name.escape_debug();
    match method {
        "GET" => {
            let value = broker
                .global_parameter(name)
                .ok_or_else(ApiError::not_found)?;
            Ok(json_reply(200, &json!({"name": name, "value": value})))
        }
        "PUT" => {
            let value = value(ctx, body)?;
            let created = broker.set_global_parameter(name, value)?;
            log::info!(
                "global parameter '{}' set over HTTP by '{who}'",
                name.escape_debug()
            );
            Ok(Response::empty(if created { 201 } else { 204 }))
        }
        "DELETE" => {
            broker.clear_global_parameter(name)?;
            log::info!(
                "global parameter '{}' cleared over HTTP by '{who}'",
                name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        _ => Err(method_not_allowed()),
    }
}

fn list_global_parameters(ctx: &Ctx<'_>) -> Result<Response, ApiError> {
    require_policymaker(ctx)?;
    let items: Vec<Value> = ctx
        .broker()
        .global_parameters()
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &[],
            cheap: |v, f| v.get(f).cloned(),
            render: Arc::new(Value::clone),
        },
    )
}

/// Answers `/api/parameters...` and `/api/global-parameters...`.
///
/// # Errors
/// As RabbitMQ: 400 with the validation text, 401, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["parameters"]) => list_parameters(ctx, None, None),
        ("GET", ["parameters", component]) => list_parameters(ctx, Some(component), None),
        ("GET", ["parameters", component, vhost]) => {
            list_parameters(ctx, Some(component), Some(vhost))
        }
        (_, ["parameters", component, vhost, name]) => {
            parameter(ctx, method, component, vhost, name, body)
        }
        ("GET", ["global-parameters"]) => list_global_parameters(ctx),
        (_, ["global-parameters", name]) => global_parameter(ctx, method, name, body),
        (_, ["parameters" | "global-parameters"]) => Err(method_not_allowed()),
        (_, ["parameters", _] | ["parameters", _, _]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
