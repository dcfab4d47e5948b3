//! Virtual hosts: `GET /api/vhosts`, `GET /api/vhosts/{name}` (RabbitMQ 4.x:
//! `rabbit_mgmt_wm_vhosts`, `rabbit_mgmt_wm_vhost`).

use super::auth::{require_vhost, sees_vhost};
use super::list::{self, ListSpec};
use super::node::rate;
use super::{json_reply, method_not_allowed, ApiError, Ctx};
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// A vhost as RabbitMQ's management API shows it.
pub(super) fn render(broker: &Broker, node: &str, vh: &VirtualHost) -> Value {
    let (mut ready, mut unacked) = (0usize, 0usize);
    for q in vh.all_queues() {
        let st = q.stats();
        ready += st.ready;
        unacked += st.unacked;
    }
    let r = broker.rates().vhost(&vh.name);
    json!({
        "name": &*vh.name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "metadata": {"description": "", "tags": [], "default_queue_type": "classic"},
        "tracing": false,
        "protected_from_deletion": false,
        "cluster_state": {node: "running"},
        "messages": ready + unacked,
        "messages_details": rate(0.0),
        "messages_ready": ready,
        "messages_ready_details": rate(0.0),
        "messages_unacknowledged": unacked,
        "messages_unacknowledged_details": rate(0.0),
        "message_stats": {
            "publish": 0,
            "publish_details": rate(r.publish),
            "deliver_get": 0,
            "deliver_get_details": rate(r.deliver_get),
            "ack": 0,
            "ack_details": rate(r.ack),
        },
        "recv_oct": 0,
        "recv_oct_details": rate(0.0),
        "send_oct": 0,
        "send_oct_details": rate(0.0),
    })
}

fn cheap(vh: &Arc<VirtualHost>, field: &str) -> Option<Value> {
    (field == "name").then(|| json!(&*vh.name))
}

/// Answers `/api/vhosts...`.
///
/// # Errors
/// As RabbitMQ: 401, 404, 405.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    _body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    let broker = ctx.broker();
    match (method, path) {
        ("GET", ["vhosts"]) => {
            let items: Vec<Arc<VirtualHost>> = broker
                .vhosts()
                .into_iter()
                .filter(|vh| sees_vhost(broker, &ctx.caller, &vh.name))
                .collect();
            let (owner, node) = (Arc::clone(broker), ctx.api.identity.node.clone());
            list::reply(
                ctx.request,
                items,
                ListSpec {
                    default_sort: &["name"],
                    cheap,
                    render: Arc::new(move |vh| render(&owner, &node, vh)),
                },
            )
        }
        ("GET", ["vhosts", name]) => {
            require_vhost(broker, &ctx.caller, name)?;
            let vh = broker.vhost(name).ok_or_else(ApiError::not_found)?;
            Ok(json_reply(
                200,
                &render(broker, &ctx.api.identity.node, &vh),
            ))
        }
        (_, ["vhosts"]) | (_, ["vhosts", _]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}
