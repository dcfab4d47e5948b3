//! What RabbitMQ's API has for clusters and plugins, answered as a one-node broker
//! without those plugins answers it, so that tools listing them do not fail: feature
//! flags and deprecated features (none), federation links (their status), stream
//! connections, consumers and publishers (empty lists: RelayMQ has no streams; shovels
//! are `shovels.rs`), authentication
//! attempts (empty), and `/api/version` (unauthenticated, as RabbitMQ's).

use super::auth::{require, require_vhost, sees_vhost, Need};
use super::node::RABBITMQ_VERSION_FOLLOWED;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::links::federation::LinkState;
use crate::server::http::response::Response;
use serde_json::json;

/// Whether `path` (after `/api/`) is answered without credentials.
pub(super) fn is_public(path: &[&str]) -> bool {
    matches!(path, ["version"])
}

/// Answers a public path.
pub(super) fn public(method: &str, path: &[&str]) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["version"]) => Ok(json_reply(200, &json!(RABBITMQ_VERSION_FOLLOWED))),
        _ => Err(method_not_allowed()),
    }
}

fn empty() -> Response {
    json_reply(200, &json!([]))
}

/// `/api/federation-links[/{vhost}][/state/down]`: the links' status
/// (`rabbit_federation_mgmt`), those not running with `down`, of the vhosts the caller
/// sees, sorted by vhost, exchange and upstream.
fn links(ctx: &Ctx<'_>, vhost: Option<&str>, down: bool) -> Response {
    let broker = ctx.broker();
    let Some(links) = crate::links::Links::of(broker) else {
        return json_reply(200, &serde_json::json!([]));
    };
    let node = links.shovels.node();
    let mut all = links.federation.statuses();
    all.retain(|l| {
        vhost.is_none_or(|v| l.vhost == v)
            && (!down || l.state != LinkState::Running)
            && (ctx.caller.is_admin() || sees_vhost(broker, &ctx.caller, &l.vhost))
    });
    all.sort_by(|a, b| {
        (&a.vhost, &a.exchange, &a.upstream).cmp(&(&b.vhost, &b.exchange, &b.upstream))
    });
    json_reply(
        200,
        &serde_json::Value::Array(all.iter().map(|l| l.to_json(&node)).collect()),
    )
}

/// A vhost in a plugin list's path must exist and be visible.
fn vhost_in_path(ctx: &Ctx<'_>, vhost: &str) -> Result<(), ApiError> {
    require_vhost(ctx.broker(), &ctx.caller, vhost)?;
    ctx.broker()
        .vhost(vhost)
        .map(|_| ())
        .ok_or_else(ApiError::not_found)
}

/// Answers the cluster and plugin families.
///
/// # Errors
/// 401 (authentication attempts are for administrators, as in RabbitMQ), 404 for a named
/// object (none exist), 405.
pub(super) fn route(ctx: &Ctx<'_>, method: &str, path: &[&str]) -> Result<Response, ApiError> {
    match (method, path) {
        ("GET", ["feature-flags"]) => Ok(empty()),
        ("PUT", ["feature-flags", _, "enable"]) => Err(ApiError::not_found()),
        ("GET", ["deprecated-features"]) | ("GET", ["deprecated-features", "used"]) => Ok(empty()),
        ("GET", ["federation-links"]) => Ok(links(ctx, None, false)),
        ("GET", ["federation-links", "state", "down"]) => Ok(links(ctx, None, true)),
        ("GET", ["federation-links", vhost]) => {
            vhost_in_path(ctx, vhost)?;
            Ok(links(ctx, Some(vhost), false))
        }
        ("GET", ["federation-links", vhost, "state", "down"]) => {
            vhost_in_path(ctx, vhost)?;
            Ok(links(ctx, Some(vhost), true))
        }
        ("GET", ["stream", "connections" | "consumers" | "publishers"]) => Ok(empty()),
        ("GET", ["stream", "connections" | "consumers" | "publishers", vhost]) => {
            vhost_in_path(ctx, vhost)?;
            Ok(empty())
        }
        ("GET", ["stream", "connections", _, _]) | ("GET", ["stream", "publishers", _, _]) => {
            Err(ApiError::not_found())
        }
        ("GET", ["auth", "attempts", node]) | ("GET", ["auth", "attempts", node, "source"]) => {
            require(&ctx.caller, Need::Administrator)?;
            if *node != ctx.api.identity.node {
                return Err(ApiError::not_found());
            }
            Ok(empty())
        }
        (
            _,
            ["feature-flags", ..]
            | ["deprecated-features", ..]
            | ["federation-links", ..]
            | ["stream", ..]
            | ["auth", "attempts", ..],
        ) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
