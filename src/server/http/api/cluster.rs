//! What RabbitMQ's API has for clusters and plugins, answered as a one-node broker
//! without those plugins answers it, so that tools listing them do not fail: feature
//! flags and deprecated features (none), federation links and stream connections,
//! consumers and publishers (empty lists; RelayMQ has no streams and no federation
//! yet; shovels are `shovels.rs`), authentication
//! attempts (empty), and `/api/version` (unauthenticated, as RabbitMQ's).

use super::auth::{require, require_vhost, Need};
use super::node::RABBITMQ_VERSION_FOLLOWED;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
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
        ("GET", ["federation-links"])
        | ("GET", ["federation-links", "state", "down"])
        | ("GET", ["stream", "connections" | "consumers" | "publishers"]) => Ok(empty()),
        ("GET", ["federation-links", vhost])
        | ("GET", ["federation-links", vhost, "state", "down"])
        | ("GET", ["stream", "connections" | "consumers" | "publishers", vhost]) => {
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
