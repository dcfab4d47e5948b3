//! Policies: `GET /api/policies`, `/api/policies/{vhost}`,
//! `GET/PUT/DELETE /api/policies/{vhost}/{name}` (RabbitMQ 4.x: `rabbit_mgmt_wm_policies`,
//! `rabbit_mgmt_wm_policy`), on the broker's policies (docs/operations.md, "Policies").
//!
//! Lists need access to the vhost; changes need `policymaker` (with permissions in the
//! vhost) or `administrator` (`is_authorized_policies`).

use super::auth::{require_vhost, sees_vhost};
use super::list::{self, ListSpec};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::broker::policy::PolicyDef;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// `is_authorized_policies`: an administrator, or a policymaker with permissions in the
/// vhost.
///
/// # Errors
/// 401 "User not authorised to access object"; 404 `not_found` for a vhost the user
/// may not use.
fn require_policies(ctx: &Ctx<'_>, vhost: &str) -> Result<(), ApiError> {
    if ctx.caller.is_admin() {
        return Ok(());
    }
    if !ctx.caller.is_policymaker() {
        return Err(ApiError::not_authorised(
            "User not authorised to access object",
        ));
    }
    require_vhost(ctx.broker(), &ctx.caller, vhost)
}

fn list_policies(ctx: &Ctx<'_>, only: Option<&str>) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if let Some(v) = only {
        require_vhost(broker, &ctx.caller, v)?;
        broker.vhost(v).ok_or_else(ApiError::not_found)?;
    }
    let items: Vec<PolicyDef> = broker
        .policies()
        .into_iter()
        .filter(|p| only.is_none_or(|v| p.vhost == v))
        .filter(|p| sees_vhost(broker, &ctx.caller, &p.vhost) || ctx.caller.is_admin())
        .collect();
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &["vhost", "name"],
            cheap: cheap_policy,
            render: Arc::new(PolicyDef::to_rabbitmq_json),
        },
    )
}

/// `priority` as a number or a numeric string (`rabbitmqadmin` sends strings).
fn priority(v: Option<&Value>) -> Result<i64, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| ApiError::bad_request(format!("{n} priority must be a number"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| ApiError::bad_request(format!("\"{s}\" priority must be a number"))),
        Some(other) => Err(ApiError::bad_request(format!(
            "{other} priority must be a number"
        ))),
    }
}

/// The policy a `PUT` body describes, for `vhost` and `name` from the path: `pattern`,
/// `definition` (an object, or its JSON text as `rabbitmqadmin` sends it), `priority`
/// (default 0) and `apply-to` (default `all`), as policies and operator policies both
/// take them (`rabbit_mgmt_wm_policy`, `rabbit_mgmt_wm_operator_policy`).
///
/// # Errors
/// 400 for a definition that is not JSON, a priority that is not a number, or a field of
/// the wrong type.
pub(super) fn policy_from_body(
    mut body: Map<String, Value>,
    vhost: &str,
    name: &str,
) -> Result<PolicyDef, ApiError> {
    // `rabbit_mgmt_util:with_decode([pattern, definition], …)`.
    super::direct::require_keys(&body, &["pattern", "definition"])?;
    if let Some(Value::String(text)) = body.get("definition") {
        let parsed: Value = serde_json::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("definition is not JSON: {e}")))?;
        body.insert("definition".into(), parsed);
    }
    let priority = priority(body.get("priority"))?;
    body.insert("priority".into(), json!(priority));
    if body.get("apply-to").is_none_or(Value::is_null) {
        body.insert("apply-to".into(), json!("all"));
    }
    body.insert("vhost".into(), json!(vhost));
    body.insert("name".into(), json!(name));
    Ok(PolicyDef::from_rabbitmq_json(&Value::Object(body))?)
}

/// The policy fields lists sort on without rendering.
pub(super) fn cheap_policy(p: &PolicyDef, field: &str) -> Option<Value> {
    match field {
        "name" => Some(json!(p.name)),
        "vhost" => Some(json!(p.vhost)),
        "priority" => Some(json!(p.priority)),
        _ => None,
    }
}

fn put_policy(
    ctx: &Ctx<'_>,
    vhost: &str,
    name: &str,
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    require_policies(ctx, vhost)?;
    let broker = ctx.broker();
    let vh = broker
        .vhost(vhost)
        .ok_or_else(|| ApiError::new(404, "not_found", "vhost_not_found"))?;
    let def = policy_from_body(ctx.json_body(body)?, vhost, name)?;
    let existed = vh.policies().iter().any(|p| p.def.name == name);
    broker.set_policy(def)?;
    log::info!(
        "policy '{}' in vhost '{}' set over HTTP by '{}'",
        name.escape_debug(),
        vhost.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(if existed { 204 } else { 201 }))
}

/// Answers `/api/policies...`.
///
/// # Errors
/// As RabbitMQ: 400 for a bad policy (with the validation text), 401, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["policies"]) => list_policies(ctx, None),
        ("GET", ["policies", vhost]) => list_policies(ctx, Some(vhost)),
        ("GET", ["policies", vhost, name]) => {
            require_policies(ctx, vhost)?;
            let p = ctx
                .broker()
                .policies()
                .into_iter()
                .find(|p| p.vhost == *vhost && p.name == *name)
                .ok_or_else(ApiError::not_found)?;
            Ok(json_reply(200, &p.to_rabbitmq_json()))
        }
        ("PUT", ["policies", vhost, name]) => put_policy(ctx, vhost, name, body),
        ("DELETE", ["policies", vhost, name]) => {
            require_policies(ctx, vhost)?;
            ctx.broker().clear_policy(vhost, name)?;
            log::info!(
                "policy '{}' in vhost '{}' cleared over HTTP by '{}'",
                name.escape_debug(),
                vhost.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        (_, ["policies", ..]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
