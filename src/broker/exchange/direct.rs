//! Direct exchanges: a message goes to the bindings whose key equals its routing key.

use super::bindings::{BindingSet, IndexedBindings};
use super::{Binding, Destination};
use std::collections::{BTreeMap, HashMap};

/// The bindings of a direct exchange, indexed by binding key.
///
/// A message reaches every destination bound with a key exactly equal to its routing key
/// (AMQP 0-9-1 §3.1.3.1; byte-for-byte, case-sensitive, as in RabbitMQ). Routing is one
/// hash lookup, whatever the number of bindings.
#[derive(Clone, Debug, Default)]
pub struct DirectRouter {
    set: BindingSet,
    /// Binding key → destination → number of bindings (differing in arguments).
    by_key: HashMap<String, BTreeMap<Destination, usize>>,
}

impl DirectRouter {
    /// An empty router.
    ///
    /// A new exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new() -> DirectRouter {
        DirectRouter::default()
    }

    /// Adds a binding; false (and no change) when an identical binding exists.
    ///
    /// Identity is the whole triple (RabbitMQ docs: bindings).
    pub fn add(&mut self, binding: Binding) -> bool {
        if !self.set.insert(&binding) {
            return false;
        }
        *self
            .by_key
            .entry(binding.binding_key)
            .or_default()
            .entry(binding.destination)
            .or_insert(0) += 1;
        true
    }

    /// Removes an identical binding; whether one was removed.
    ///
    /// Identity is the whole triple (RabbitMQ docs: bindings).
    pub fn remove(&mut self, binding: &Binding) -> bool {
        if !self.set.remove(binding) {
            return false;
        }
        self.unindex(&binding.binding_key, &binding.destination);
        true
    }

    /// Removes every binding to `destination`; how many.
    ///
    /// A deleted queue or exchange loses its bindings (AMQP 0-9-1 §3.1.3).
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        let taken = self.set.take_destination(destination);
        for binding in &taken {
            self.unindex(&binding.binding_key, destination);
        }
        taken.len()
    }

    /// Appends the destinations bound with exactly `routing_key`, each once.
    ///
    /// AMQP 0-9-1 §3.1.3.1.
    pub fn route(&self, routing_key: &str, out: &mut Vec<Destination>) {
        if let Some(destinations) = self.by_key.get(routing_key) {
            out.extend(destinations.keys().cloned());
        }
    }

    fn unindex(&mut self, key: &str, destination: &Destination) {
        let Some(destinations) = self.by_key.get_mut(key) else {
            return;
        };
        if let Some(count) = destinations.get_mut(destination) {
            *count -= 1;
            if *count == 0 {
                destinations.remove(destination);
            }
        }
        if destinations.is_empty() {
            self.by_key.remove(key);
        }
    }
}

impl IndexedBindings for DirectRouter {
    fn binding_set(&self) -> &BindingSet {
        &self.set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::routing::test_support::q;
    use crate::types::field_table::{FieldTable, FieldValue};

    fn binding(queue: &str, key: &str) -> Binding {
        Binding {
            destination: q(queue),
            binding_key: key.to_string(),
            arguments: FieldTable::new(),
        }
    }

    fn route(r: &DirectRouter, key: &str) -> Vec<Destination> {
        let mut out = Vec::new();
        r.route(key, &mut out);
        out.sort();
        out
    }

    #[test]
    fn exact_key_only() {
        let mut r = DirectRouter::new();
        assert!(r.add(binding("q1", "a")));
        assert!(r.add(binding("q2", "a")));
        assert!(r.add(binding("q3", "b")));
        assert!(r.add(binding("q4", "")));
        assert_eq!(route(&r, "a"), vec![q("q1"), q("q2")]);
        assert_eq!(route(&r, "b"), vec![q("q3")]);
        assert_eq!(route(&r, ""), vec![q("q4")]);
        assert!(route(&r, "A").is_empty());
        assert!(route(&r, "a.b").is_empty());
        assert!(route(&r, "*").is_empty());
        assert!(route(&r, "#").is_empty());
    }

    #[test]
    fn identity_removal_and_pruning() {
        let mut r = DirectRouter::new();
        let mut args = FieldTable::new();
        args.insert("x".into(), FieldValue::I8(1));
        let with_args = Binding {
            arguments: args,
            ..binding("q1", "a")
        };
        assert!(r.add(binding("q1", "a")));
        assert!(!r.add(binding("q1", "a")));
        assert!(r.add(with_args.clone()));
        assert_eq!(r.len(), 2);
        // Two bindings to the same queue with the same key: the queue is listed once.
        assert_eq!(route(&r, "a"), vec![q("q1")]);
        assert!(r.remove(&binding("q1", "a")));
        assert!(!r.remove(&binding("q1", "a")));
        assert_eq!(route(&r, "a"), vec![q("q1")]);
        assert!(r.remove(&with_args));
        assert!(route(&r, "a").is_empty());
        assert_eq!(r.len(), 0);
        assert!(r.by_key.is_empty());

        for key in ["a", "b", "c"] {
            r.add(binding("q1", key));
            r.add(binding("q2", key));
        }
        assert_eq!(r.remove_destination(&q("q1")), 3);
        assert_eq!(r.remove_destination(&q("q1")), 0);
        assert!(!r.has_destination(&q("q1")));
        assert!(r.has_destination(&q("q2")));
        assert_eq!(route(&r, "b"), vec![q("q2")]);
        assert_eq!(r.remove_destination(&q("q2")), 3);
        assert_eq!(r.len(), 0);
        assert!(r.by_key.is_empty());
    }
}
