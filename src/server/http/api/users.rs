//! Users and permissions: `GET /api/users`, `/api/users/without-permissions`,
//! `/api/users/{name}`, `GET /api/permissions` (RabbitMQ 4.x: `rabbit_mgmt_wm_users`,
//! `rabbit_mgmt_wm_user`, `rabbit_mgmt_wm_permissions`; administrators only).

use super::auth::{require, Need};
use super::list::{self, ListSpec};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::users::User;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// A user as RabbitMQ's management API shows it: the hash and its algorithm (as in a
/// definitions export), tags as a list, limits.
pub(super) fn render(u: &User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.hash.hash,
        "hashing_algorithm": u.hash.algorithm,
        "tags": u.tags,
        "limits": {},
    })
}

fn cheap_user(u: &User, field: &str) -> Option<Value> {
    (field == "name").then(|| json!(u.name))
}

fn list_users(ctx: &Ctx<'_>, users: Vec<User>) -> Result<Response, ApiError> {
    list::reply(
        ctx.request,
        users,
        ListSpec {
            default_sort: &["name"],
            cheap: cheap_user,
            render: Arc::new(render),
        },
    )
}

/// Answers `/api/users...` and `/api/permissions`.
///
/// # Errors
/// As RabbitMQ: 401 for a non-administrator, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    _body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    require(&ctx.caller, Need::Administrator)?;
    let users = ctx.broker().users();
    match (method, path) {
        ("GET", ["users"]) => list_users(ctx, users.users()),
        ("GET", ["users", "without-permissions"]) => {
            let with: std::collections::HashSet<String> = users
                .all_permissions()
                .into_iter()
                .map(|(u, _, _)| u)
                .collect();
            let without = users
                .users()
                .into_iter()
                .filter(|u| !with.contains(&u.name))
                .collect();
            list_users(ctx, without)
        }
        ("GET", ["users", name]) => {
            let u = users.user(name).ok_or_else(ApiError::not_found)?;
            Ok(json_reply(200, &render(&u)))
        }
        ("GET", ["permissions"]) => {
            let rows: Vec<Value> = users
                .all_permissions()
                .into_iter()
                .map(|(user, vhost, p)| {
                    json!({"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read})
                })
                .collect();
            list::reply(
                ctx.request,
                rows,
                ListSpec {
                    default_sort: &["vhost", "user"],
                    cheap: |v, f| v.get(f).cloned(),
                    render: Arc::new(Value::clone),
                },
            )
        }
        (_, ["users", ..]) | (_, ["permissions"]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
