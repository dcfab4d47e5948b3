//! Shovel status (RabbitMQ's `rabbitmq_shovel_management`): `GET /api/shovels`,
//! `/api/shovels/{vhost}`, `/api/shovels/vhost/{vhost}/{name}`, `DELETE` of the last to
//! delete a shovel (its parameter) and `DELETE …/{name}/restart` to restart it. Shovels
//! are created and changed through `/api/parameters/shovel/{vhost}/{name}`.

use super::auth::{require_vhost, sees_vhost};
use super::parameters::require_policies;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::links::shovel::{ShovelStatus, SHOVEL_COMPONENT};
use crate::links::Links;
use crate::server::http::response::Response;
use serde_json::Value;

/// The statuses `ctx`'s caller may see, of `vhost` when given, sorted by vhost and name.
fn visible(ctx: &Ctx<'_>, vhost: Option<&str>) -> Vec<ShovelStatus> {
    let broker = ctx.broker();
    let mut all: Vec<ShovelStatus> = Links::of(broker)
        .map_or_else(Vec::new, |l| l.shovels.statuses())
        .into_iter()
        .filter(|s| vhost.is_none_or(|v| s.vhost == v))
        .filter(|s| ctx.caller.is_admin() || sees_vhost(broker, &ctx.caller, &s.vhost))
        .collect();
    all.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    all
}

/// The node name statuses show.
fn node(ctx: &Ctx<'_>) -> String {
    Links::of(ctx.broker()).map_or_else(String::new, |l| l.shovels.node())
}

fn list(ctx: &Ctx<'_>, vhost: Option<&str>) -> Response {
    let node = node(ctx);
    let items: Vec<Value> = visible(ctx, vhost)
        .iter()
        .map(|s| s.to_json(&node))
        .collect();
    json_reply(200, &Value::Array(items))
}

/// Answers `/api/shovels…`.
///
/// # Errors
/// 404 for an unknown vhost or shovel, 401 for a caller who may not change shovels of
/// the vhost (RabbitMQ's policymaker rule of parameters), 405.
pub(super) fn route(ctx: &Ctx<'_>, method: &str, path: &[&str]) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    match (method, path) {
        ("GET", ["shovels"]) => Ok(list(ctx, None)),
        ("GET", ["shovels", vhost]) => {
            require_vhost(broker, &ctx.caller, vhost)?;
            broker.vhost(vhost).ok_or_else(ApiError::not_found)?;
            Ok(list(ctx, Some(vhost)))
        }
        ("GET", ["shovels", "vhost", vhost, name]) => {
            require_vhost(broker, &ctx.caller, vhost)?;
            let node = node(ctx);
            visible(ctx, Some(vhost))
                .into_iter()
                .find(|s| s.name == *name)
                .map(|s| json_reply(200, &s.to_json(&node)))
                .ok_or_else(ApiError::not_found)
        }
        ("DELETE", ["shovels", "vhost", vhost, name]) => {
            require_policies(ctx, Some(vhost))?;
            broker.clear_parameter(vhost, SHOVEL_COMPONENT, name)?;
            log::info!(
                "shovel '{}' in vhost '{}' deleted by '{}' over HTTP",
                name.escape_debug(),
                vhost.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        ("DELETE", ["shovels", "vhost", vhost, name, "restart"]) => {
            require_policies(ctx, Some(vhost))?;
            let p = broker
                .parameter(vhost, SHOVEL_COMPONENT, name)
                .ok_or_else(ApiError::not_found)?;
            if let Some(l) = Links::of(broker) {
                l.shovels.restart(vhost, name, &p.value);
            }
            Ok(Response::empty(204))
        }
        (_, ["shovels", ..]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
