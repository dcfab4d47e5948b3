//! Users and permissions (RabbitMQ 4.x, administrators only): `GET /api/users`,
//! `/api/users/without-permissions`, `GET/PUT/DELETE /api/users/{name}`,
//! `POST /api/users/bulk-delete`, `GET /api/users/{name}/permissions` and
//! `/topic-permissions`, `GET /api/permissions`, `GET/PUT/DELETE
//! /api/permissions/{vhost}/{user}`, `GET /api/topic-permissions`,
//! `GET /api/auth/hash_password/{password}` (`rabbit_mgmt_wm_users`, `rabbit_mgmt_wm_user`,
//! `rabbit_mgmt_wm_users_bulk_delete`, `rabbit_mgmt_wm_permissions_user`,
//! `rabbit_mgmt_wm_permissions`, `rabbit_mgmt_wm_permission`,
//! `rabbit_mgmt_wm_topic_permissions`, `rabbit_mgmt_wm_hash_password`). Changes run the
//! broker's own operations (those of the native protocol's admin requests) and are logged
//! with the administrator's name. RelayMQ has no topic permissions: their lists are empty.

use super::auth::{require, Need};
use super::list::{self, ListSpec};
use super::vhosts::{permission_row, rows_reply};
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::auth::password::{rabbit_sha256, RABBIT_SHA256};
use crate::auth::permission::PermissionDef;
use crate::auth::users::{parse_tags, User, USER_TAGS_MAX};
use crate::broker::access::Credential;
use crate::broker::limits::{self, USER_LIMITS, USER_LIMITS_TERM};
use crate::broker::Broker;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The tag that protects a user from changes over HTTP (RabbitMQ's `protected`,
/// `rabbit_web_dispatch_access_control:is_protected_user/1`).
pub const TAG_PROTECTED: &str = "protected";

/// RabbitMQ's refusal to change or delete a protected user over HTTP (400).
pub const PROTECTED_USER: &str = "Protected users cannot be modified via the HTTP API";

/// Users `POST /api/users/bulk-delete` deletes at most in one request.
pub const BULK_DELETE_USERS_MAX: usize = 10_000;

/// A user as RabbitMQ's management API shows it: the hash and its algorithm (as in a
/// definitions export), tags as a list, limits.
pub(super) fn render(broker: &Broker, u: &User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.hash.hash,
        "hashing_algorithm": u.hash.algorithm,
        "tags": u.tags,
        "limits": limits::to_json(&broker.users().limits(&u.name)),
    })
}

fn cheap_user(u: &User, field: &str) -> Option<Value> {
    (field == "name").then(|| json!(u.name))
}

fn list_users(ctx: &Ctx<'_>, users: Vec<User>) -> Result<Response, ApiError> {
    let broker = Arc::clone(ctx.broker());
    list::reply(
        ctx.request,
        users,
        ListSpec {
            default_sort: &["name"],
            cheap: cheap_user,
            render: Arc::new(move |u| render(&broker, u)),
        },
    )
}

/// Whether user `name` exists and carries the `protected` tag.
fn is_protected(broker: &Broker, name: &str) -> bool {
    broker
        .users()
        .user(name)
        .is_some_and(|u| u.has_tag(TAG_PROTECTED))
}

/// RabbitMQ's 400 for required body keys that are missing
/// (`rabbit_mgmt_util:with_decode/5`): `[{key_missing,configure}]`.
fn keys_missing(body: &Map<String, Value>, keys: &[&str]) -> Result<(), ApiError> {
    let missing: Vec<String> = keys
        .iter()
        .filter(|k| !body.contains_key(**k))
        .map(|k| format!("{{key_missing,{k}}}"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!("[{}]", missing.join(","))))
    }
}

/// The tags of a `PUT /api/users/{name}` body: `tags` as a comma-separated string or a
/// list, or RabbitMQ 2.x's `administrator` boolean (`rabbit_auth_backend_internal:
/// put_user/3`).
///
/// # Errors
/// 400 `tags_not_present` when neither is there; RabbitMQ's "A user can have at most N
/// tags (received M)"; a tag RelayMQ refuses.
fn user_tags(body: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let text = match (body.get("tags"), body.get("administrator")) {
        (None | Some(Value::Null), None | Some(Value::Null)) => {
            return Err(ApiError::bad_request("tags_not_present"))
        }
        (None | Some(Value::Null), Some(admin)) => {
            let yes =
                matches!(admin, Value::Bool(true)) || admin.as_str().is_some_and(|s| s == "true");
            if yes { "administrator" } else { "" }.to_string()
        }
        (Some(Value::String(s)), _) => s.clone(),
        (Some(Value::Array(items)), _) => {
            let mut tags = Vec::with_capacity(items.len());
            for t in items {
                match t.as_str() {
                    Some(t) => tags.push(t.trim()),
                    None => return Err(ApiError::bad_request("tags must be strings")),
                }
            }
            tags.join(",")
        }
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "tags must be a string or a list, got {other}"
            )))
        }
    };
    let received = text.split(',').filter(|t| !t.trim().is_empty()).count();
    if received > USER_TAGS_MAX {
        return Err(ApiError::bad_request(format!(
            "A user can have at most {USER_TAGS_MAX} tags (received {received})"
        )));
    }
    Ok(parse_tags(&text)?)
}

/// What a `PUT /api/users/{name}` body sets as the user's credential.
enum Secret {
    /// `password`: hashed here (argon2id); an empty one is no password.
    Password(String),
    /// `password_hash` with `hashing_algorithm`; an empty hash is no password.
    Hash(String, String),
    /// Neither: no password (an existing user's is cleared, as RabbitMQ does).
    None,
}

fn user_secret(body: &Map<String, Value>) -> Result<Secret, ApiError> {
    let text = |key: &str| match body.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key} must be a string, got {other}"
        ))),
    };
    match (text("password")?, text("password_hash")?) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "both_password_and_password_hash_are_provided",
        )),
        (Some(p), None) => Ok(Secret::Password(p)),
        (None, Some(h)) => {
            let algorithm = text("hashing_algorithm")?.unwrap_or_else(|| RABBIT_SHA256.into());
            Ok(Secret::Hash(algorithm, h))
        }
        (None, None) => Ok(Secret::None),
    }
}

/// `PUT /api/users/{name}`: creates the user (201) or replaces its password and tags (204),
/// by RabbitMQ's rules (`rabbit_auth_backend_internal:put_user/3`).
fn put_user(ctx: &Ctx<'_>, name: &str, body: &mut Body<'_>) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if is_protected(broker, name) {
        return Err(ApiError::bad_request(PROTECTED_USER));
    }
    let body = ctx.json_body(body)?;
    let tags = user_tags(&body)?;
    let secret = user_secret(&body)?;
    let limits = match body.get("limits") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(limits::validate(USER_LIMITS_TERM, &USER_LIMITS, m)?),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "limits must be an object, got {other}"
            )))
        }
    };
    let by = ctx.caller.name.escape_debug().to_string();
    let shown = tags.join(", ");
    let existing = broker.users().user(name);
    match &existing {
        Some(user) => {
            let (algorithm, hash) = match secret {
                Secret::Password(p) if p.is_empty() => (user.hash.algorithm.clone(), String::new()),
                Secret::Password(p) => {
                    let h = crate::auth::StoredHash::new(&p)?;
                    (h.algorithm, h.hash)
                }
                Secret::Hash(a, h) => (a, h),
                Secret::None => (user.hash.algorithm.clone(), String::new()),
            };
            let cleared = hash.is_empty();
            broker.replace_user(name, &algorithm, &hash, tags)?;
            log::info!(
                "user '{}' updated over HTTP by '{by}' (tags [{}]{})",
                name.escape_debug(),
                shown.escape_debug(),
                if cleared { ", no password" } else { "" }
            );
        }
        None => {
            let credential = match secret {
                Secret::Password(p) if p.is_empty() => {
                    Credential::Hash(RABBIT_SHA256.into(), String::new())
                }
                Secret::Password(p) => Credential::Password(p),
                Secret::Hash(a, h) => Credential::Hash(a, h),
                Secret::None => Credential::Hash(RABBIT_SHA256.into(), String::new()),
            };
            broker.add_user(name, &credential, tags)?;
            log::info!(
                "user '{}' created over HTTP by '{by}' (tags [{}])",
                name.escape_debug(),
                shown.escape_debug()
            );
        }
    }
    if let Some(limits) = limits.filter(|l| !l.is_empty()) {
        broker.update_user_limits(name, &limits, None)?;
    }
    Ok(Response::empty(if existing.is_some() { 204 } else { 201 }))
}

/// Deletes user `name` (its connections are closed), logged.
fn delete_one(ctx: &Ctx<'_>, name: &str) -> Result<(), ApiError> {
    ctx.broker().delete_user(name)?;
    log::info!(
        "user '{}' deleted over HTTP by '{}'; its connections are closed",
        name.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(())
}

/// `POST /api/users/bulk-delete` `{"users": [...]}`: deletes each user that exists and is
/// not protected; the others are skipped, as RabbitMQ does.
fn bulk_delete(ctx: &Ctx<'_>, body: &mut Body<'_>) -> Result<Response, ApiError> {
    let body = ctx.json_body(body)?;
    keys_missing(&body, &["users"])?;
    let Some(names) = body.get("users").and_then(Value::as_array) else {
        return Err(ApiError::bad_request("users must be a list of user names"));
    };
    if names.len() > BULK_DELETE_USERS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {BULK_DELETE_USERS_MAX} users can be deleted in one request"
        )));
    }
    let broker = ctx.broker();
    for name in names.iter().filter_map(Value::as_str) {
        if broker.users().user(name).is_some() && !is_protected(broker, name) {
            delete_one(ctx, name)?;
        }
    }
    Ok(Response::empty(204))
}

/// The permissions of `user` in `vhost` as a row, when the user, the vhost and the
/// permissions exist.
fn permission_of(broker: &Broker, vhost: &str, user: &str) -> Option<Value> {
    broker
        .users()
        .all_permissions()
        .into_iter()
        .find(|(u, v, _)| u == user && v == vhost)
        .map(|(u, v, p)| permission_row(&u, &v, &p))
}

/// A permission pattern of a body.
fn pattern(body: &Map<String, Value>, key: &str) -> Result<String, ApiError> {
    match body.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        other => Err(ApiError::bad_request(format!(
            "{key} must be a string, got {}",
            other.cloned().unwrap_or(Value::Null)
        ))),
    }
}

/// `PUT /api/permissions/{vhost}/{user}` `{"configure", "write", "read"}`: 201 when the
/// user had none there, 204 when they are replaced.
fn put_permission(
    ctx: &Ctx<'_>,
    vhost: &str,
    user: &str,
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    if broker.users().user(user).is_none() || broker.vhost(vhost).is_none() {
        return Err(ApiError::bad_request("vhost_or_user_not_found"));
    }
    let body = ctx.json_body(body)?;
    keys_missing(&body, &["configure", "write", "read"])?;
    let def = PermissionDef {
        configure: pattern(&body, "configure")?,
        write: pattern(&body, "write")?,
        read: pattern(&body, "read")?,
    };
    let existed = broker.users().permissions(user, vhost).is_some();
    let shown = format!(
        "configure '{}', write '{}', read '{}'",
        def.configure.escape_debug(),
        def.write.escape_debug(),
        def.read.escape_debug()
    );
    broker.set_permission(user, vhost, def)?;
    log::info!(
        "permissions of user '{}' in vhost '{}' set over HTTP by '{}' ({shown})",
        user.escape_debug(),
        vhost.escape_debug(),
        ctx.caller.name.escape_debug()
    );
    Ok(Response::empty(if existed { 204 } else { 201 }))
}

/// `GET /api/auth/hash_password/{password}`: `{"ok": HASH}`, the password hashed as
/// RabbitMQ's default `rabbit_password_hashing_sha256` does (base64 of a random 4-byte
/// salt and SHA-256 of salt and password), for `password_hash` in a `PUT
/// /api/users/{name}` or a definitions file. Cheap: one SHA-256.
fn hash_password(password: &str) -> Value {
    let random = uuid::Uuid::new_v4();
    let b = random.as_bytes();
    json!({"ok": rabbit_sha256([b[0], b[1], b[2], b[3]], password)})
}

/// Answers `/api/users...`, `/api/permissions...`, `/api/topic-permissions...` and
/// `/api/auth/hash_password/{password}`.
///
/// # Errors
/// As RabbitMQ: 401 for a non-administrator, 400, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    require(&ctx.caller, Need::Administrator)?;
    let broker = ctx.broker();
    let users = broker.users();
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
        ("POST", ["users", "bulk-delete"]) => bulk_delete(ctx, body),
        (_, ["users", "bulk-delete"]) => Err(method_not_allowed()),
        ("GET", ["users", name]) => {
            let u = users.user(name).ok_or_else(ApiError::not_found)?;
            Ok(json_reply(200, &render(broker, &u)))
        }
        ("PUT", ["users", name]) => put_user(ctx, name, body),
        ("DELETE", ["users", name]) => {
            users.user(name).ok_or_else(ApiError::not_found)?;
            if is_protected(broker, name) {
                return Err(ApiError::bad_request(PROTECTED_USER));
            }
            delete_one(ctx, name)?;
            Ok(Response::empty(204))
        }
        ("GET", ["users", name, "permissions"]) => {
            users.user(name).ok_or_else(ApiError::not_found)?;
            let rows = users
                .all_permissions()
                .into_iter()
                .filter(|(u, _, _)| u == name)
                .map(|(u, v, p)| permission_row(&u, &v, &p))
                .collect();
            rows_reply(ctx, rows, &["vhost", "user"])
        }
        ("GET", ["users", name, "topic-permissions"]) => {
            users.user(name).ok_or_else(ApiError::not_found)?;
            rows_reply(ctx, Vec::new(), &["vhost", "user"])
        }
        ("GET", ["permissions"]) => {
            let rows = users
                .all_permissions()
                .into_iter()
                .map(|(u, v, p)| permission_row(&u, &v, &p))
                .collect();
            rows_reply(ctx, rows, &["vhost", "user"])
        }
        ("GET", ["permissions", vhost, user]) => permission_of(broker, vhost, user)
            .map(|row| json_reply(200, &row))
            .ok_or_else(ApiError::not_found),
        ("PUT", ["permissions", vhost, user]) => put_permission(ctx, vhost, user, body),
        ("DELETE", ["permissions", vhost, user]) => {
            permission_of(broker, vhost, user).ok_or_else(ApiError::not_found)?;
            broker.clear_permission(user, vhost)?;
            log::info!(
                "permissions of user '{}' in vhost '{}' cleared over HTTP by '{}'",
                user.escape_debug(),
                vhost.escape_debug(),
                ctx.caller.name.escape_debug()
            );
            Ok(Response::empty(204))
        }
        ("GET", ["topic-permissions"]) => rows_reply(ctx, Vec::new(), &["vhost", "user"]),
        ("GET", ["auth", "hash_password", password]) => {
            Ok(json_reply(200, &hash_password(password)))
        }
        (_, ["users", ..])
        | (_, ["permissions", ..])
        | (_, ["topic-permissions"])
        | (_, ["auth", "hash_password", _]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
