//! The broker-wide topology version, and the small route cache a session keeps with it.
//!
//! Every change to an exchange map, a queue map or a router takes that structure's write
//! lock and then bumps [`version`] (while holding the lock). A publisher reads the version
//! *before* it routes: if it read the new value, the change's lock was already held, so
//! its own reads of the maps wait for the change to finish and see it; if it read the old
//! value, the cache entry it stores is stale by construction and the next lookup
//! recomputes. Changes are rare next to publishes, so one counter for the whole process
//! (every broker in it) is enough: an unrelated change only costs a recomputation.

use crate::broker::exchange::Exchange;
use crate::broker::message::RouteNames;
use crate::broker::queue::Queue;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Routes a session remembers (the producer's recent exchange and routing key pairs).
pub const ROUTE_CACHE_ENTRIES: usize = 8;

/// The version counter on a cache line of its own: every publish reads it, so a
/// neighbour written by another thread must not drag the line away.
#[repr(align(128))]
struct Version(AtomicU64);

static VERSION: Version = Version(AtomicU64::new(0));

/// The current topology version.
pub fn version() -> u64 {
    VERSION.0.load(Ordering::SeqCst)
}

/// Marks a topology change. Call while holding the write lock of what changes.
pub fn bump() {
    VERSION.0.fetch_add(1, Ordering::SeqCst);
}

/// One remembered route: what publishing to `exchange` with `routing_key` resolved to.
pub struct CachedRoute {
    /// Topology version the route was computed at.
    version: u64,
    /// The exchange, checked publishable (present, not internal).
    pub exchange: Arc<Exchange>,
    /// The exchange and routing key names, shared by the messages published with them.
    pub names: Arc<RouteNames>,
    /// The queues it routes to, deduplicated.
    pub queues: Arc<[Arc<Queue>]>,
}

/// A session's recent routes, [`ROUTE_CACHE_ENTRIES`] at most, replaced round-robin.
///
/// Only routes that depend on the exchange and routing key alone are stored (not those
/// through a headers exchange).
#[derive(Default)]
pub struct RouteCache {
    entries: Vec<CachedRoute>,
    next_victim: usize,
}

impl RouteCache {
    /// The route for `exchange` / `routing_key`, if remembered at version `now` (the
    /// caller's [`version`] combined with what else a route depends on).
    pub fn get(&self, now: u64, exchange: &str, routing_key: &str) -> Option<&CachedRoute> {
        self.entries.iter().find(|e| {
            e.version == now
                && e.names.routing_key() == routing_key
                && *e.exchange.name == *exchange
        })
    }

    /// Remembers a route computed at version `version` (as given to [`RouteCache::get`]).
    pub fn insert(
        &mut self,
        version: u64,
        exchange: Arc<Exchange>,
        names: Arc<RouteNames>,
        queues: Arc<[Arc<Queue>]>,
    ) {
        let entry = CachedRoute {
            version,
            exchange,
            names,
            queues,
        };
        if let Some(stale) = self.entries.iter_mut().find(|e| e.version != version) {
            *stale = entry;
        } else if self.entries.len() < ROUTE_CACHE_ENTRIES {
            self.entries.push(entry);
        } else {
            self.entries[self.next_victim] = entry;
            self.next_victim = (self.next_victim + 1) % ROUTE_CACHE_ENTRIES;
        }
    }

    /// Forgets every route (their queues and exchanges are released).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}
