//! The bindings of one exchange as a set, indexed by destination.
//!
//! Every router keeps one of these beside its type-specific index: it decides binding
//! identity (the whole triple destination, binding key, arguments — RabbitMQ docs:
//! bindings), answers "is anything bound to this queue?" and finds the bindings to remove
//! when a queue or exchange is deleted, without scanning the whole exchange.

use super::{Binding, Destination};
use crate::types::field_table::{FieldTable, FieldValue};
use std::collections::{BTreeMap, HashMap};

/// Bindings grouped by destination, then by binding key; each key holds the distinct
/// argument tables bound with it (usually one).
#[derive(Clone, Debug, Default)]
pub(super) struct BindingSet {
    by_destination: BTreeMap<Destination, HashMap<String, Vec<FieldTable>>>,
    len: usize,
}

impl BindingSet {
    /// Adds `binding`; false (and no change) when an identical binding is present.
    pub(super) fn insert(&mut self, binding: &Binding) -> bool {
        let tables = self
            .by_destination
            .entry(binding.destination.clone())
            .or_default()
            .entry(binding.binding_key.clone())
            .or_default();
        if tables
            .iter()
            .any(|t| identical_tables(t, &binding.arguments))
        {
            return false;
        }
        tables.push(binding.arguments.clone());
        self.len += 1;
        true
    }

    /// Removes the binding identical to `binding`; whether one was present.
    pub(super) fn remove(&mut self, binding: &Binding) -> bool {
        let Some(keys) = self.by_destination.get_mut(&binding.destination) else {
            return false;
        };
        let Some(tables) = keys.get_mut(binding.binding_key.as_str()) else {
            return false;
        };
        let Some(at) = tables
            .iter()
            .position(|t| identical_tables(t, &binding.arguments))
        else {
            return false;
        };
        tables.swap_remove(at);
        if tables.is_empty() {
            keys.remove(binding.binding_key.as_str());
            if keys.is_empty() {
                self.by_destination.remove(&binding.destination);
            }
        }
        self.len -= 1;
        true
    }

    /// Removes and returns every binding to `destination`.
    pub(super) fn take_destination(&mut self, destination: &Destination) -> Vec<Binding> {
        let Some(keys) = self.by_destination.remove(destination) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        for (binding_key, tables) in keys {
            for arguments in tables {
                taken.push(Binding {
                    destination: destination.clone(),
                    binding_key: binding_key.clone(),
                    arguments,
                });
            }
        }
        self.len -= taken.len();
        taken
    }

    /// Whether a binding identical to `binding` is present.
    pub(super) fn contains(&self, binding: &Binding) -> bool {
        self.by_destination
            .get(&binding.destination)
            .and_then(|keys| keys.get(binding.binding_key.as_str()))
            .is_some_and(|tables| {
                tables
                    .iter()
                    .any(|t| identical_tables(t, &binding.arguments))
            })
    }

    /// Whether any binding leads to `destination`.
    pub(super) fn contains_destination(&self, destination: &Destination) -> bool {
        self.by_destination.contains_key(destination)
    }

    /// Every distinct destination, in order, once each.
    pub(super) fn destinations(&self) -> impl Iterator<Item = &Destination> {
        self.by_destination.keys()
    }

    /// Every binding, as owned values.
    pub(super) fn to_vec(&self) -> Vec<Binding> {
        let mut all = Vec::with_capacity(self.len);
        for (destination, keys) in &self.by_destination {
            for (binding_key, tables) in keys {
                for arguments in tables {
                    all.push(Binding {
                        destination: destination.clone(),
                        binding_key: binding_key.clone(),
                        arguments: arguments.clone(),
                    });
                }
            }
        }
        all
    }

    /// Number of bindings.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// Whether two bindings are the same binding (destination, key and arguments).
///
/// Arguments are compared as [`identical_tables`] does, so a binding read back from
/// `bindings()` can always be removed, even with a NaN float among its arguments.
pub(super) fn identical_bindings(a: &Binding, b: &Binding) -> bool {
    a.destination == b.destination
        && a.binding_key == b.binding_key
        && identical_tables(&a.arguments, &b.arguments)
}

/// Structural equality of two tables, floats compared by bit pattern (so NaN equals
/// itself); otherwise the same as `==`, types included (RabbitMQ compares binding
/// arguments as Erlang terms, type tags included).
pub(super) fn identical_tables(a: &FieldTable, b: &FieldTable) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && identical_values(va, vb))
}

fn identical_values(a: &FieldValue, b: &FieldValue) -> bool {
    match (a, b) {
        (FieldValue::F32(x), FieldValue::F32(y)) => x.to_bits() == y.to_bits(),
        (FieldValue::F64(x), FieldValue::F64(y)) => x.to_bits() == y.to_bits(),
        (FieldValue::Array(x), FieldValue::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical_values(p, q))
        }
        (FieldValue::Table(x), FieldValue::Table(y)) => identical_tables(x, y),
        _ => a == b,
    }
}

/// The read side every router shares: its bindings are a [`BindingSet`], whatever index it
/// keeps for routing.
pub(super) trait IndexedBindings {
    /// The router's bindings.
    fn binding_set(&self) -> &BindingSet;

    /// All bindings, in no particular order (RabbitMQ docs: bindings).
    fn bindings(&self) -> Vec<Binding> {
        self.binding_set().to_vec()
    }

    /// Number of distinct bindings (RabbitMQ docs: bindings).
    fn len(&self) -> usize {
        self.binding_set().len()
    }

    /// Whether a binding identical to `binding` (destination, key and arguments) exists.
    fn contains(&self, binding: &Binding) -> bool {
        self.binding_set().contains(binding)
    }

    /// Whether any binding leads to `destination` (AMQP 0-9-1 §1.6.2.3, if-unused).
    fn has_destination(&self, destination: &Destination) -> bool {
        self.binding_set().contains_destination(destination)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn binding(q: &str, key: &str, args: FieldTable) -> Binding {
        Binding {
            destination: Destination::Queue(Arc::from(q)),
            binding_key: key.to_string(),
            arguments: args,
        }
    }

    #[test]
    fn identity_is_the_whole_triple() {
        let mut set = BindingSet::default();
        let mut args = FieldTable::new();
        args.insert("k".into(), FieldValue::I32(1));
        assert!(set.insert(&binding("q", "k", FieldTable::new())));
        assert!(!set.insert(&binding("q", "k", FieldTable::new())));
        assert!(set.insert(&binding("q", "k", args.clone())));
        assert!(set.contains(&binding("q", "k", args.clone())));
        assert!(!set.contains(&binding("q", "k2", args.clone())));
        assert!(set.insert(&binding("q", "k2", FieldTable::new())));
        assert!(set.insert(&binding("r", "k", FieldTable::new())));
        assert_eq!(set.len(), 4);
        assert_eq!(set.to_vec().len(), 4);
        assert!(set.remove(&binding("q", "k", args)));
        assert!(!set.remove(&binding("q", "k", {
            let mut t = FieldTable::new();
            t.insert("k".into(), FieldValue::I32(1));
            t
        })));
        assert_eq!(
            set.take_destination(&binding("q", "", FieldTable::new()).destination)
                .len(),
            2
        );
        assert_eq!(set.len(), 1);
        assert!(!set.contains_destination(&Destination::Queue(Arc::from("q"))));
        assert!(set.contains_destination(&Destination::Queue(Arc::from("r"))));
    }

    #[test]
    fn nan_arguments_are_identical_to_themselves() {
        let mut set = BindingSet::default();
        let mut args = FieldTable::new();
        args.insert("f".into(), FieldValue::F64(f64::NAN));
        let b = binding("q", "k", args);
        assert!(set.insert(&b));
        assert!(!set.insert(&b));
        assert!(identical_bindings(&b, &b));
        assert!(set.remove(&b));
        assert_eq!(set.len(), 0);
    }
}
