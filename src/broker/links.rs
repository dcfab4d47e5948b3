//! The broker's side of its links to other brokers (shovels and federation, which live
//! above the core in `crate::links`, with the AMQP client): what the core tells them and
//! asks of them. The server registers the runtime at start ([`Broker::set_links`]);
//! without one (the core alone, in tests) parameters are only stored.

use crate::broker::node::Broker;
use serde_json::Value;
use std::any::Any;
use std::sync::Arc;

/// What runs shovels and federation links, as the core calls it.
pub trait LinkRuntime: Send + Sync {
    /// Shovel `name` of `vhost` was set (or imported, or recovered) with `value`: start
    /// it, or restart it when its definition changed.
    fn shovel_set(&self, vhost: &str, name: &str, value: &Value);
    /// Shovel `name` of `vhost` was cleared: stop it.
    fn shovel_cleared(&self, vhost: &str, name: &str);
    /// Why shovel `name` of `vhost` may not be set now (too many run), if so.
    fn shovel_refusal(&self, vhost: &str, name: &str) -> Option<String>;
    /// `vhost` was deleted: stop what runs in it.
    fn vhost_deleted(&self, vhost: &str);
    /// Outbound sockets open now (counted with the client sockets).
    fn sockets_open(&self) -> usize;
    /// The runtime itself, for the adapters that show its status.
    fn as_any(&self) -> &dyn Any;
}

impl Broker {
    /// Registers the link runtime (once; later calls are ignored).
    pub fn set_links(&self, links: Arc<dyn LinkRuntime>) {
        let _ = self.links.set(links);
    }

    /// The link runtime, once registered.
    pub fn links(&self) -> Option<&Arc<dyn LinkRuntime>> {
        self.links.get()
    }
}
