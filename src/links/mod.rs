//! Links to other brokers, above the core: dynamic shovels ([`shovel`]) and exchange
//! federation ([`federation`]), built on the AMQP 0-9-1 client for their remote ends and
//! on in-process sessions for their local ones. The server starts them
//! ([`Links::start`]) and registers them with the broker, which tells them of parameter
//! and vhost changes through [`crate::broker::links::LinkRuntime`]; the adapters show
//! their status ([`Links::of`]).

pub mod federation;
pub mod shovel;

use crate::broker::links::LinkRuntime;
use crate::broker::node::Broker;
use crate::client::TlsOptions;
use serde_json::Value;
use std::any::Any;
use std::sync::Arc;

/// The shovels and federation links of one broker.
#[derive(Debug, Default)]
pub struct Links {
    /// The dynamic shovels.
    pub shovels: shovel::Shovels,
    /// The federation links.
    pub federation: federation::Federation,
}

impl Links {
    /// Starts the shovels (every stored one) and the federation manager of `broker`
    /// and registers them with it. `node` names this node in statuses; `tls` is the
    /// server's TLS CA and certificate (for `amqps://` URIs naming none); `sockets_max`
    /// bounds the outbound connections (0: no bound).
    ///
    /// # Errors
    /// The federation manager's thread cannot be spawned.
    pub fn start(
        broker: &Arc<Broker>,
        node: &str,
        tls: Option<TlsOptions>,
        sockets_max: usize,
    ) -> std::io::Result<Arc<Links>> {
        let links = Arc::new(Links::default());
        broker.set_links(Arc::clone(&links) as Arc<dyn LinkRuntime>);
        links.shovels.init(broker, node, tls, sockets_max);
        links.federation.start(broker, Arc::downgrade(&links))?;
        Ok(links)
    }

    /// The links registered with `broker`, if the server started them.
    pub fn of(broker: &Broker) -> Option<&Links> {
        broker.links()?.as_any().downcast_ref::<Links>()
    }

    /// Stops every shovel and link (the broker stops).
    pub fn stop(&self) {
        self.shovels.stop_all();
        self.federation.stop();
    }
}

/// A status's JSON object as a native list row (a field table); not an object: empty.
pub(crate) fn row(status: &Value) -> crate::types::FieldTable {
    status
        .as_object()
        .map(crate::broker::listing::json_table)
        .unwrap_or_default()
}

impl LinkRuntime for Links {
    fn shovel_set(&self, vhost: &str, name: &str, value: &Value) {
        self.shovels.adjust(vhost, name, value);
    }

    fn shovel_cleared(&self, vhost: &str, name: &str) {
        self.shovels.stop(vhost, name);
    }

    fn shovel_refusal(&self, vhost: &str, name: &str) -> Option<String> {
        (!self.shovels.has_room_for(vhost, name)).then(|| {
            format!(
                "{} shovels run already, the most a broker runs",
                shovel::SHOVELS_MAX
            )
        })
    }

    fn vhost_deleted(&self, vhost: &str) {
        self.shovels.stop_vhost(vhost);
    }

    fn sockets_open(&self) -> usize {
        self.shovels.sockets_open()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
