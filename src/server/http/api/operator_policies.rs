//! Operator policies (RabbitMQ 4.x): `GET /api/operator-policies`,
//! `/api/operator-policies/{vhost}` (`rabbit_mgmt_wm_operator_policies`: any management
//! user, the vhosts they may use), `GET/PUT/DELETE /api/operator-policies/{vhost}/{name}`
//! (`rabbit_mgmt_wm_operator_policy`: administrators only). The body is a policy's:
//! `pattern` and `definition` required, `priority` (default 0) and `apply-to` (default
//! `all`) optional; only the keys of
//! [`crate::broker::policy::operator::OPERATOR_POLICY_KEYS`] are accepted. They are
//! enforced: a queue's settings merge its policy with its operator policy, the lower value
//! of each numeric key winning (`crate::broker::queue::settings`).

use super::auth::{require, require_vhost, sees_vhost, Need};
use super::list::{self, ListSpec};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::broker::policy::PolicyDef;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use std::sync::Arc;

fn list_operator_policies(ctx: &Ctx<'_>, only: Option<&str>) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if let Some(v) = only {
        require_vhost(broker, &ctx.caller, v)?;
        broker.vhost(v).ok_or_else(ApiError::not_found)?;
    }
    let items: Vec<PolicyDef> = broker
        .operator_policies()
        .into_iter()
        .filter(|p| only.is_none_or(|v| p.vhost == v))
        .filter(|p| ctx.caller.is_admin() || sees_vhost(broker, &ctx.caller, &p.vhost))
        .collect();
    list::reply(
        ctx.request,
        items,
        ListSpec {
            default_sort: &["priority"],
            cheap: super::policies::cheap_policy,
            render: Arc::new(PolicyDef::to_rabbitmq_json),
        },
    )
}

fn put_operator_policy(
    ctx: &Ctx<'_>,
    vhost: &str,
    name: &str,
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if broker.vhost(vhost).is_none() {
        return Err(ApiError::new(404, "not_found", "vhost_not_found"));
    }
    let body = ctx.json_body(body)?;
    let def = super::policies::policy_from_body(body, vhost, name)?;
    let replaced = broker.set_operator_policy(def)?;
    log::info!(
        "operator policy '{}' in vhost '{}' set over HTTP by '{}'",
        name.escape_debug(),
        vhost.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(if replaced { 204 } else { 201 }))
}

/// Answers `/api/operator-policies...`.
///
/// # Errors
/// As RabbitMQ: 400 for a bad operator policy (with the validation text), 401 for a
/// change or a read of one by a user who is not an administrator, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["operator-policies"]) => list_operator_policies(ctx, None),
        ("GET", ["operator-policies", vhost]) => list_operator_policies(ctx, Some(vhost)),
        (_, ["operator-policies", vhost, name]) => {
            require(&ctx.caller, Need::Administrator)?;
            match method {
                "GET" => {
                    let p = ctx
                        .broker()
                        .operator_policies()
                        .into_iter()
                        .find(|p| p.vhost == *vhost && p.name == *name)
                        .ok_or_else(ApiError::not_found)?;
                    Ok(json_reply(200, &p.to_rabbitmq_json()))
                }
                "PUT" => put_operator_policy(ctx, vhost, name, body),
                "DELETE" => {
                    ctx.broker().clear_operator_policy(vhost, name)?;
                    log::info!(
                        "operator policy '{}' in vhost '{}' cleared over HTTP by '{}'",
                        name.escape_debug(),
                        vhost.escape_debug(),
                        ctx.caller.name.escape_debug()
                    );
                    Ok(Response::empty(204))
                }
                _ => Err(method_not_allowed()),
            }
        }
        (_, ["operator-policies", ..]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
