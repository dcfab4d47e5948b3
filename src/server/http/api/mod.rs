//! The management HTTP API (`/api/...`): RabbitMQ's management plugin's API, field for
//! field, so that tools written for RabbitMQ (`rabbitmqadmin`, monitoring checks,
//! provisioning providers, autoscalers) work against RelayMQ by changing the host.
//! docs/http-api.md lists every endpoint, the tags table and what differs.
//!
//! Each request is authenticated ([`auth`]: HTTP Basic against the user database, tags
//! decide access as `rabbit_web_dispatch_access_control` does), routed by its path
//! segments ([`ManagementApi::route`]) to the family module that answers it, and
//! answered with JSON. Lists follow RabbitMQ's conventions ([`list`]: sort, columns,
//! pagination). Errors are `{"error": …, "reason": …}` with RabbitMQ's status codes.

mod auth;
mod bindings;
mod cluster;
mod connections;
mod csrf;
mod definitions;
mod direct;
mod error;
mod exchanges;
mod limits;
mod list;
mod messages;
pub(crate) mod node;
mod operator_policies;
mod parameters;
mod policies;
mod queues;
mod shovels;
pub(crate) mod stats;
mod users;
mod vhosts;

pub use auth::Caller;
pub use definitions::DEFINITIONS_BODY_BYTES_MAX;
pub use error::ApiError;

use super::request::{Body, BodyError, Request};
use super::response::Response;
use super::server::Service;
use crate::broker::Broker;
use serde_json::Value;
use std::sync::Arc;

/// Largest JSON body of a request other than a definitions upload, in bytes.
pub const API_BODY_BYTES_MAX: usize = 1024 * 1024;

/// The media type of every JSON answer (RabbitMQ's, without a charset).
pub const JSON: &str = "application/json";

/// What the API reports about this node and the broker it follows.
#[derive(Debug, Clone)]
pub struct NodeIdentity {
    /// The node's name, `rabbit@HOSTNAME` unless configured.
    pub node: String,
    /// The addresses and ports of the listeners, for `/api/overview`'s `listeners` and
    /// the port-listener health check: (protocol, address).
    pub listeners: Vec<(&'static str, std::net::SocketAddr)>,
}

/// The management API: a [`Service`] for [`super::server::HttpServer`].
pub struct ManagementApi {
    broker: Arc<Broker>,
    identity: NodeIdentity,
}

/// One request being answered: the API, the request and who sent it.
pub(crate) struct Ctx<'a> {
    api: &'a ManagementApi,
    request: &'a Request,
    caller: Caller,
}

impl Ctx<'_> {
    fn broker(&self) -> &Arc<Broker> {
        &self.api.broker
    }

    /// The request's JSON body: an object (a missing or empty body is an empty object).
    ///
    /// # Errors
    /// 400 for malformed JSON or a body that is not an object; 413 past
    /// [`API_BODY_BYTES_MAX`].
    fn json_body(&self, body: &mut Body<'_>) -> Result<serde_json::Map<String, Value>, ApiError> {
        // RabbitMQ's `rabbit_mgmt_util:decode/1`: 400 `not_json` for anything but an
        // object; an empty body, `null` or `undefined` is an empty object.
        direct::decode(&read_body(body, API_BODY_BYTES_MAX)?)
    }
}

/// Reads a whole body of at most `max` bytes.
///
/// # Errors
/// 413 past `max`; 400 when it is cut short, late or malformed.
fn read_body(body: &mut Body<'_>, max: usize) -> Result<Vec<u8>, ApiError> {
    body.read_to_vec(max).map_err(|e| match e {
        BodyError::TooLarge(max) => ApiError::new(
            413,
            "payload_too_large",
            format!("request body larger than {max} bytes"),
        )
        .closing(),
        BodyError::Io(e) => {
            ApiError::bad_request(format!("request body not received: {e}")).closing()
        }
    })
}

/// Binds the addresses of `listen` (HTTP, HTTPS or both) and serves the management API
/// of `broker` to at most `connections_max` connections; `listeners` are the broker's
/// other listeners as the API reports them (the API's own are added as `http` and
/// `https`, RabbitMQ's protocol names).
///
/// # Errors
/// `cannot listen on ADDR (management API, HTTP): …`; a thread cannot be started.
pub fn start(
    listen: super::server::HttpListen,
    broker: Arc<Broker>,
    connections_max: usize,
    mut listeners: Vec<(&'static str, std::net::SocketAddr)>,
) -> std::io::Result<super::server::HttpServer> {
    // Port 0 is only known once bound: bind first, then report the real port.
    let api = Arc::new(std::sync::OnceLock::<ManagementApi>::new());
    let service: Arc<dyn Service> = Arc::new(Deferred(Arc::clone(&api)));
    let server =
        super::server::HttpServer::start(listen, "management API", connections_max, service)?;
    if let Some(a) = server.local_addr() {
        listeners.push(("http", a));
    }
    if let Some(a) = server.tls_addr() {
        listeners.push(("https", a));
    }
    let _ = api.set(ManagementApi::new(
        broker,
        NodeIdentity {
            node: node::node_name(),
            listeners,
        },
    ));
    Ok(server)
}

/// The API once it is set (the server answers 503 before).
struct Deferred(Arc<std::sync::OnceLock<ManagementApi>>);

impl Service for Deferred {
    fn handle(&self, request: &Request, body: &mut Body<'_>) -> Response {
        match self.0.get() {
            Some(api) => api.handle(request, body),
            None => ApiError::new(503, "service_unavailable", "starting").into_response(),
        }
    }
}

impl ManagementApi {
    /// The API of `broker`, reporting `identity`.
    pub fn new(broker: Arc<Broker>, identity: NodeIdentity) -> ManagementApi {
        ManagementApi { broker, identity }
    }

    /// The cluster's name: the one set (`PUT /api/cluster-name`, the `cluster_name`
    /// global parameter), else the node's name (`rabbit_nodes:cluster_name/0`).
    fn cluster_name(&self) -> String {
        self.broker
            .cluster_name()
            .unwrap_or_else(|| self.identity.node.clone())
    }

    /// Answers an authenticated request whose path is `/api/` + `path`.
    fn route(
        &self,
        ctx: &Ctx<'_>,
        method: &str,
        path: &[&str],
        body: &mut Body<'_>,
    ) -> Result<Response, ApiError> {
        match path {
            ["overview"]
            | ["cluster-name"]
            | ["whoami"]
            | ["extensions"]
            | ["nodes", ..]
            | ["health", ..]
            | ["healthchecks", ..]
            | ["aliveness-test", _] => node::route(ctx, method, path, body),
            ["feature-flags", ..]
            | ["deprecated-features", ..]
            | ["federation-links", ..]
            | ["stream", ..]
            | ["auth", "attempts", ..] => cluster::route(ctx, method, path),
            ["shovels", ..] => shovels::route(ctx, method, path),
            ["vhosts", _, "connections" | "channels"]
            | ["connections", ..]
            | ["channels", ..]
            | ["consumers", ..] => connections::route(ctx, method, path, body),
            ["vhosts", ..] => vhosts::route(ctx, method, path, body),
            ["queues", ..] => queues::route(ctx, method, path, body),
            ["policies", ..] => policies::route(ctx, method, path, body),
            ["parameters", ..] | ["global-parameters", ..] => {
                parameters::route(ctx, method, path, body)
            }
            ["operator-policies", ..] => operator_policies::route(ctx, method, path, body),
            ["exchanges", ..] => exchanges::route(ctx, method, path, body),
            ["bindings", ..] => bindings::route(ctx, method, path, body),
            ["users", ..]
            | ["permissions", ..]
            | ["topic-permissions", ..]
            | ["auth", "hash_password", _] => users::route(ctx, method, path, body),
            ["vhost-limits", ..] | ["user-limits", ..] => limits::route(ctx, method, path, body),
            ["definitions", ..] | ["all-configuration"] => {
                definitions::route(ctx, method, path, body)
            }
            _ => Err(ApiError::not_found()),
        }
    }
}

impl Service for ManagementApi {
    fn handle(&self, request: &Request, body: &mut Body<'_>) -> Response {
        let segments = match request.segments() {
            Ok(s) => s,
            Err(_) => {
                return ApiError::bad_request(
                    "malformed path: a bad percent-encoding or not UTF-8 once decoded",
                )
                .into_response()
            }
        };
        if super::ui::is_ui_path(&request.path) {
            return super::ui::serve(request);
        }
        let path: Vec<&str> = segments.iter().map(String::as_str).collect();
        let Some(("api", rest)) = path.split_first().map(|(a, r)| (*a, r)) else {
            return ApiError::not_found().into_response();
        };
        let method = request.method.as_str();
        // cowboy_rest's `known_methods`: any other is 501.
        if !matches!(
            method,
            "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS"
        ) {
            return ApiError::new(501, "not_implemented", "Not Implemented").into_response();
        }
        if method == "OPTIONS" {
            return Response::empty(200).with_header("allow", allowed_methods(rest));
        }
        if let Err(e) = csrf::check(request, rest) {
            return e.into_response();
        }
        if cluster::is_public(rest) {
            return cluster::public(method, rest).unwrap_or_else(ApiError::into_response);
        }
        let caller = match auth::authenticate(&self.broker, request) {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        };
        let ctx = Ctx {
            api: self,
            request,
            caller,
        };
        // HEAD answers as GET, without the body (the server drops it).
        let method = if method == "HEAD" { "GET" } else { method };
        match self.route(&ctx, method, rest, body) {
            Ok(r) => single_object_columns(request, r),
            // RFC 9110 §15.5.6: a 405 names the methods the resource takes (cowboy_rest's
            // `allowed_methods`).
            Err(e) if e.status == 405 => e
                .into_response()
                .with_header("allow", allowed_methods(rest)),
            Err(e) => e.into_response(),
        }
    }
}

/// The methods the resource at `/api/` + `path` takes, for the `Allow` header of a 405
/// (RabbitMQ's handlers' `allowed_methods`; HEAD and OPTIONS always).
fn allowed_methods(path: &[&str]) -> &'static str {
    const READ: &str = "GET, HEAD, OPTIONS";
    const CRUD: &str = "GET, PUT, DELETE, HEAD, OPTIONS";
    match path {
        ["users", "bulk-delete"] => "POST, OPTIONS",
        ["queues", _, _] | ["exchanges", _, _] | ["users", _] | ["vhosts", _] => CRUD,
        ["permissions" | "topic-permissions", _, _] => CRUD,
        ["policies" | "operator-policies", _, _] => CRUD,
        ["parameters", _, _, _] | ["global-parameters", _] => CRUD,
        ["queues", _, _, "contents"] => "DELETE, OPTIONS",
        ["queues", _, _, "get" | "actions"] | ["exchanges", _, _, "publish"] => "POST, OPTIONS",
        ["queues", _, _, "peek" | "replay" | "search"] => "POST, OPTIONS",
        ["queues", _, _, "unacked"] => READ,
        ["bindings", _, "e", _, "q" | "e", _] => "GET, POST, HEAD, OPTIONS",
        ["bindings", _, "e", _, "q" | "e", _, _] => "GET, DELETE, HEAD, OPTIONS",
        ["definitions"] | ["definitions", _] => "GET, POST, HEAD, OPTIONS",
        ["connections", _] | ["connections", "username", _] => "GET, DELETE, HEAD, OPTIONS",
        ["vhost-limits" | "user-limits", _, _] => "PUT, DELETE, OPTIONS",
        ["cluster-name"] => "GET, PUT, HEAD, OPTIONS",
        ["shovels", "vhost", _, _] => "GET, DELETE, HEAD, OPTIONS",
        ["shovels", "vhost", _, _, "restart"] => "DELETE, OPTIONS",
        _ => READ,
    }
}

/// `columns=` applied to a single object (`/api/overview`, `/api/queues/{v}/{q}`, …) as
/// RabbitMQ's `reply/3` applies it to every reply; lists apply it themselves
/// ([`list::reply`]) and are streamed, so only a whole JSON object is filtered here.
fn single_object_columns(request: &Request, r: Response) -> Response {
    // A page of a list is an object too, whose items were filtered already.
    let Some(cols) = request
        .query("columns")
        .filter(|_| request.query("page").is_none())
    else {
        return r;
    };
    let super::response::ResponseBody::Bytes(bytes) = &r.body else {
        return r;
    };
    let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(bytes) else {
        return r;
    };
    let cols: Vec<Vec<String>> = cols
        .split(',')
        .filter(|c| !c.is_empty())
        .map(|c| c.split('.').map(str::to_string).collect())
        .collect();
    json_reply(r.status, &list::keep_columns(v, &cols))
}

/// A JSON answer.
pub(crate) fn json_reply(status: u16, v: &Value) -> Response {
    Response::bytes(status, JSON, v.to_string().into_bytes())
}

/// 405 for a method the path does not take.
pub(crate) fn method_not_allowed() -> ApiError {
    ApiError::new(405, "method_not_allowed", "Method Not Allowed")
}
