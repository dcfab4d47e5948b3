//! An exchange: its declaration and its bindings, indexed by its router.

mod bindings;
mod consistent_hash;
mod direct;
mod fanout;
pub mod header_routes;
mod headers;
mod routing;
mod topic;

pub use routing::*;

use crate::broker::delayed::DelayedMessages;
use crate::types::FieldTable;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The standard exchanges every virtual host has (AMQP 0-9-1 §3.1.3 and RabbitMQ):
/// name and type. The nameless default exchange is handled separately.
pub const STANDARD_EXCHANGES: [(&str, ExchangeKind); 5] = [
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];

/// One exchange of a virtual host.
#[derive(Debug)]
pub struct Exchange {
    /// Exchange name; "" is the default exchange.
    pub name: Arc<str>,
    /// Routing type.
    pub kind: ExchangeKind,
    /// Declared durable.
    pub durable: bool,
    /// Deleted when its last binding (as source) is removed.
    pub auto_delete: bool,
    /// Cannot be published to by clients; only reachable through exchange bindings.
    pub internal: bool,
    /// Arguments as declared.
    pub arguments: FieldTable,
    /// Messages in and out, for the management API.
    pub counters: ExchangeCounters,
    router: RwLock<Router>,
    /// An `x-delayed-message` exchange's held messages.
    delayed: Option<Arc<DelayedMessages>>,
}

/// An exchange's message counts (RabbitMQ's exchange `message_stats`): one relaxed add
/// each per publish.
#[derive(Debug, Default)]
pub struct ExchangeCounters {
    /// Messages published to the exchange (`publish_in`).
    pub publish_in: std::sync::atomic::AtomicU64,
    /// Messages it routed, once per queue reached (`publish_out`: RabbitMQ counts the
    /// publishes out to each queue).
    pub publish_out: std::sync::atomic::AtomicU64,
}

impl ExchangeCounters {
    /// One message published to the exchange that reached `queues` queues.
    pub fn published(&self, queues: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.publish_in.fetch_add(1, Relaxed);
        if queues > 0 {
            self.publish_out.fetch_add(queues, Relaxed);
        }
    }

    /// Messages routed after their delay (by a delayed-message exchange), reaching
    /// `queues` queues: `publish_out` only (their `publish_in` was counted at publish).
    pub fn routed_later(&self, queues: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if queues > 0 {
            self.publish_out.fetch_add(queues, Relaxed);
        }
    }

    /// `(publish_in, publish_out)` now.
    pub fn read(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.publish_in.load(Relaxed),
            self.publish_out.load(Relaxed),
        )
    }
}

impl Exchange {
    /// A new exchange with no bindings; its router is built for `kind` and `arguments`
    /// ([`Router::with_arguments`]: what a consistent-hash exchange hashes).
    pub fn new(
        name: Arc<str>,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> Exchange {
        let router = RwLock::new(Router::with_arguments(kind, &arguments));
        Exchange {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
            counters: ExchangeCounters::default(),
            router,
            delayed: None,
        }
    }

    /// The exchange holding its delayed messages in `delayed` (an `x-delayed-message`
    /// exchange).
    pub fn with_delayed(mut self, delayed: Arc<DelayedMessages>) -> Exchange {
        self.delayed = Some(delayed);
        self
    }

    /// An `x-delayed-message` exchange's held messages (`None` for other types).
    pub fn delayed(&self) -> Option<&Arc<DelayedMessages>> {
        self.delayed.as_ref()
    }

    /// The exchange's alternate exchange (its `alternate-exchange` argument, RabbitMQ's
    /// extension): where a message its bindings do not match goes.
    pub fn alternate_exchange(&self) -> Option<&str> {
        self.arguments
            .get("alternate-exchange")
            .and_then(|v| v.as_str())
    }

    /// Whether this is the nameless default exchange.
    pub fn is_default(&self) -> bool {
        self.name.is_empty()
    }

    /// Read access to the bindings.
    pub fn router(&self) -> RwLockReadGuard<'_, Router> {
        self.router.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the bindings (bumps the topology version: cached routes through
    /// this exchange are recomputed).
    pub fn router_mut(&self) -> RwLockWriteGuard<'_, Router> {
        let guard = self.router.write().unwrap_or_else(|e| e.into_inner());
        crate::broker::topology::bump();
        guard
    }
}
