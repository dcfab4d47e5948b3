//! Fanout exchanges: a message goes to every bound destination.

use super::bindings::{BindingSet, IndexedBindings};
use super::{Binding, Destination};

/// The bindings of a fanout exchange.
///
/// Every message reaches every bound destination; binding and routing keys are ignored
/// (AMQP 0-9-1 §3.1.3.2).
#[derive(Clone, Debug, Default)]
pub struct FanoutRouter {
    set: BindingSet,
}

impl FanoutRouter {
    /// An empty router.
    ///
    /// A new exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new() -> FanoutRouter {
        FanoutRouter::default()
    }

    /// Adds a binding; false (and no change) when an identical binding exists.
    ///
    /// Identity is the whole triple, key included even though routing ignores it
    /// (RabbitMQ docs: bindings).
    pub fn add(&mut self, binding: Binding) -> bool {
        self.set.insert(&binding)
    }

    /// Removes an identical binding; whether one was removed.
    ///
    /// Identity is the whole triple (RabbitMQ docs: bindings).
    pub fn remove(&mut self, binding: &Binding) -> bool {
        self.set.remove(binding)
    }

    /// Removes every binding to `destination`; how many.
    ///
    /// A deleted queue or exchange loses its bindings (AMQP 0-9-1 §3.1.3).
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        self.set.take_destination(destination).len()
    }

    /// Appends every bound destination, each once.
    ///
    /// AMQP 0-9-1 §3.1.3.2.
    pub fn route(&self, out: &mut Vec<Destination>) {
        out.extend(self.set.destinations().cloned());
    }
}

impl IndexedBindings for FanoutRouter {
    fn binding_set(&self) -> &BindingSet {
        &self.set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::routing::test_support::{binding, q};
    use std::sync::Arc;

    fn route(r: &FanoutRouter) -> Vec<Destination> {
        let mut out = Vec::new();
        r.route(&mut out);
        out.sort();
        out
    }

    #[test]
    fn every_destination_once_key_ignored() {
        let mut r = FanoutRouter::new();
        let x = Destination::Exchange(Arc::from("x"));
        assert!(route(&r).is_empty());
        assert!(r.add(binding(q("q1"), "")));
        assert!(r.add(binding(q("q1"), "other")));
        assert!(!r.add(binding(q("q1"), "other")));
        assert!(r.add(binding(q("q2"), "whatever")));
        assert!(r.add(binding(x.clone(), "")));
        assert_eq!(r.len(), 4);
        assert_eq!(route(&r), vec![q("q1"), q("q2"), x.clone()]);
        assert!(r.remove(&binding(q("q1"), "")));
        assert_eq!(route(&r), vec![q("q1"), q("q2"), x.clone()]);
        assert!(r.remove(&binding(q("q1"), "other")));
        assert_eq!(route(&r), vec![q("q2"), x.clone()]);
        assert_eq!(r.remove_destination(&x), 1);
        assert!(!r.has_destination(&x));
        assert_eq!(r.bindings(), vec![binding(q("q2"), "whatever")]);
        assert_eq!(r.remove_destination(&q("q2")), 1);
        assert_eq!(r.len(), 0);
        assert!(route(&r).is_empty());
    }
}
