//! Topic exchanges: binding keys are patterns of dot-separated words with `*` and `#`.
//!
//! Routing and binding keys are split on `.` into words; an empty key has no words (as in
//! RabbitMQ, so `*` does not match it) and `a..b` has an empty middle word. In a binding
//! key the word `*` matches exactly one word and `#` zero or more; anything else,
//! including `a*` or `#a`, is a literal word (AMQP 0-9-1 §3.1.3.3; RabbitMQ docs: topic
//! exchange).
//!
//! The bindings form a trie of words. Routing walks the trie with the routing key's
//! words, remembering the (node, word position) pairs already visited, so its cost
//! depends on the routing key's length and the trie's shape — at most nodes × (words + 1)
//! steps, never the number of bindings nor exponential in the number of `#`s.

use super::bindings::{BindingSet, IndexedBindings};
use super::{Binding, Destination};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The word that matches exactly one word (AMQP 0-9-1 §3.1.3.3).
const STAR: &str = "*";
/// The word that matches zero or more words (AMQP 0-9-1 §3.1.3.3).
const HASH: &str = "#";

/// The words of a routing or binding key: none for the empty key (RabbitMQ's
/// `split_topic_key`, so that `*` needs a word), else the `.`-separated parts.
fn words(key: &str) -> impl Iterator<Item = &str> {
    key.split('.').filter(move |_| !key.is_empty())
}

/// One trie node: the binding-key prefix spelled by the edges from the root.
#[derive(Clone, Debug, Default)]
struct Node {
    /// Children by literal word.
    words: HashMap<Box<str>, Node>,
    /// The child for the word `*`.
    star: Option<Box<Node>>,
    /// The child for the word `#`.
    hash: Option<Box<Node>>,
    /// Destinations of the binding keys ending here → number of such bindings (they
    /// differ in arguments).
    destinations: BTreeMap<Destination, usize>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.words.is_empty()
            && self.star.is_none()
            && self.hash.is_none()
            && self.destinations.is_empty()
    }

    /// The child for `word`, created if missing.
    fn child_or_insert(&mut self, word: &str) -> &mut Node {
        match word {
            STAR => self.star.get_or_insert_with(Box::default),
            HASH => self.hash.get_or_insert_with(Box::default),
            _ => self.words.entry(Box::from(word)).or_default(),
        }
    }

    /// Decrements `destination` at the end of the path `words`, pruning nodes left
    /// empty; returns whether this node is now empty.
    fn unindex<'k>(
        &mut self,
        mut words: impl Iterator<Item = &'k str>,
        destination: &Destination,
    ) -> bool {
        match words.next() {
            None => {
                if let Some(count) = self.destinations.get_mut(destination) {
                    *count -= 1;
                    if *count == 0 {
                        self.destinations.remove(destination);
                    }
                }
            }
            Some(STAR) => {
                if let Some(child) = self.star.as_deref_mut() {
                    if child.unindex(words, destination) {
                        self.star = None;
                    }
                }
            }
            Some(HASH) => {
                if let Some(child) = self.hash.as_deref_mut() {
                    if child.unindex(words, destination) {
                        self.hash = None;
                    }
                }
            }
            Some(word) => {
                if let Some(child) = self.words.get_mut(word) {
                    if child.unindex(words, destination) {
                        self.words.remove(word);
                    }
                }
            }
        }
        self.is_empty()
    }
}

/// The bindings of a topic exchange, as a trie of binding-key words.
///
/// A message reaches every destination whose binding key, as a pattern, matches the
/// whole routing key: `*` stands for exactly one word, `#` for zero or more, other words
/// match themselves (AMQP 0-9-1 §3.1.3.3; RabbitMQ docs: topic exchange).
#[derive(Clone, Debug, Default)]
pub struct TopicRouter {
    set: BindingSet,
    root: Node,
}

impl TopicRouter {
    /// An empty router.
    ///
    /// A new exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new() -> TopicRouter {
        TopicRouter::default()
    }

    /// Adds a binding; false (and no change) when an identical binding exists.
    ///
    /// Identity is the whole triple (RabbitMQ docs: bindings). Any key is a valid
    /// pattern (AMQP 0-9-1 §3.1.3.3).
    pub fn add(&mut self, binding: Binding) -> bool {
        if !self.set.insert(&binding) {
            return false;
        }
        let mut node = &mut self.root;
        for word in words(&binding.binding_key) {
            node = node.child_or_insert(word);
        }
        *node.destinations.entry(binding.destination).or_insert(0) += 1;
        true
    }

    /// Removes an identical binding, pruning trie nodes left empty; whether one was
    /// removed.
    ///
    /// Identity is the whole triple (RabbitMQ docs: bindings).
    pub fn remove(&mut self, binding: &Binding) -> bool {
        if !self.set.remove(binding) {
            return false;
        }
        self.root
            .unindex(words(&binding.binding_key), &binding.destination);
        true
    }

    /// Removes every binding to `destination`; how many.
    ///
    /// A deleted queue or exchange loses its bindings (AMQP 0-9-1 §3.1.3).
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        let taken = self.set.take_destination(destination);
        for binding in &taken {
            self.root.unindex(words(&binding.binding_key), destination);
        }
        taken.len()
    }

    /// Appends the destinations of every binding key matching `routing_key`.
    ///
    /// A destination appears once per trie node that matches (so at most once per
    /// distinct binding key). AMQP 0-9-1 §3.1.3.3.
    pub fn route(&self, routing_key: &str, out: &mut Vec<Destination>) {
        let words: Vec<&str> = words(routing_key).collect();
        let n = words.len();
        // (node, words consumed, whether the node is a `#` node that may consume more).
        let mut pending: Vec<(&Node, usize, bool)> = vec![(&self.root, 0, false)];
        let mut visited: HashSet<(*const Node, usize)> = HashSet::new();
        while let Some((node, at, is_hash)) = pending.pop() {
            if !visited.insert((node as *const Node, at)) {
                continue;
            }
            if is_hash && at < n {
                // The `#` that led here swallows one more word.
                pending.push((node, at + 1, true));
            }
            if at == n {
                out.extend(node.destinations.keys().cloned());
            } else {
                if let Some(child) = node.words.get(words[at]) {
                    pending.push((child, at + 1, false));
                }
                if let Some(child) = node.star.as_deref() {
                    pending.push((child, at + 1, false));
                }
            }
            if let Some(child) = node.hash.as_deref() {
                // `#` matching zero words so far.
                pending.push((child, at, true));
            }
        }
    }
}

impl IndexedBindings for TopicRouter {
    fn binding_set(&self) -> &BindingSet {
        &self.set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::routing::test_support::q;
    use crate::types::field_table::{FieldTable, FieldValue};
    use std::collections::BTreeSet;
    use std::sync::Arc;

    fn binding(queue: &str, key: &str) -> Binding {
        Binding {
            destination: q(queue),
            binding_key: key.to_string(),
            arguments: FieldTable::new(),
        }
    }

    fn route(r: &TopicRouter, key: &str) -> Vec<Destination> {
        let mut out = Vec::new();
        r.route(key, &mut out);
        out.sort();
        out
    }

    /// The distinct destinations reached (the caller's dedup).
    fn route_set(r: &TopicRouter, key: &str) -> Vec<Destination> {
        let mut out = route(r, key);
        out.dedup();
        out
    }

    fn matches(pattern: &str, key: &str) -> bool {
        let mut r = TopicRouter::new();
        r.add(binding("q", pattern));
        let out = route(&r, key);
        assert!(out.len() <= 1, "{pattern:?} vs {key:?}: {out:?}");
        !out.is_empty()
    }

    /// The specification's rule, directly: a reference for the trie.
    fn reference(pattern: &[&str], key: &[&str]) -> bool {
        match pattern.split_first() {
            None => key.is_empty(),
            Some((&"#", rest)) => (0..=key.len()).any(|skip| reference(rest, &key[skip..])),
            Some((&"*", rest)) => !key.is_empty() && reference(rest, &key[1..]),
            Some((word, rest)) => key.first() == Some(word) && reference(rest, &key[1..]),
        }
    }

    fn reference_str(pattern: &str, key: &str) -> bool {
        let p: Vec<&str> = words(pattern).collect();
        let k: Vec<&str> = words(key).collect();
        reference(&p, &k)
    }

    const TABLE: &[(&str, &str, bool)] = &[
        // Exact words.
        ("a", "a", true),
        ("a", "b", false),
        ("a.b", "a.b", true),
        ("a.b", "a.c", false),
        ("a.b", "a", false),
        ("a", "a.b", false),
        ("a.b.c", "a.b.c", true),
        ("A", "a", false),
        // `*` at start, middle, end.
        ("*.b", "a.b", true),
        ("*.b", "b", false),
        ("*.b", "a.a.b", false),
        ("a.*.c", "a.b.c", true),
        ("a.*.c", "a.c", false),
        ("a.*.c", "a.b.b.c", false),
        ("a.*", "a.b", true),
        ("a.*", "a", false),
        ("a.*", "a.b.c", false),
        ("*", "a", true),
        ("*", "a.b", false),
        // `*.*` against one word.
        ("*.*", "a", false),
        ("*.*", "a.b", true),
        ("*.*", "a.b.c", false),
        // `#` at start, middle, end, and matching zero words.
        ("#", "a", true),
        ("#", "a.b.c", true),
        ("#.c", "a.b.c", true),
        ("#.c", "c", true),
        ("#.c", "c.d", false),
        ("#.a", "a", true),
        ("a.#", "a", true),
        ("a.#", "a.b", true),
        ("a.#", "a.b.c", true),
        ("a.#", "b.a", false),
        ("a.#.b", "a.b", true),
        ("a.#.b", "a.x.b", true),
        ("a.#.b", "a.x.y.z.b", true),
        ("a.#.b", "a.x.y.z", false),
        ("a.#.b", "a.b.c", false),
        // Several `#`.
        ("#.#", "a", true),
        ("#.#", "a.b.c", true),
        ("#.a.#", "a", true),
        ("#.a.#", "x.a.y", true),
        ("#.a.#", "x.y", false),
        ("a.#.#.b", "a.b", true),
        ("#.#.#.#", "", true),
        // `*` with `#`.
        ("*.#", "a", true),
        ("*.#", "a.b.c", true),
        ("#.*", "a", true),
        ("#.*", "a.b", true),
        ("*.#.*", "a", false),
        ("*.#.*", "a.b", true),
        ("a.*.#", "a", false),
        ("a.*.#", "a.b", true),
        ("a.*.#", "a.b.c.d", true),
        ("a.*.#", "b.b", false),
        ("#.*.b", "b", false),
        ("#.*.b", "a.b", true),
        // The greedy-matcher bugs.
        ("#.b.c", "b.x.b.c", true),
        ("#.b.c", "b.c.b.c", true),
        ("#.b.c", "b.c.b", false),
        ("#.a.b", "a.a.b", true),
        ("a.#.a", "a.a.a.a", true),
        // Empty words.
        ("a..b", "a..b", true),
        ("a..b", "a.b", false),
        ("a.*.b", "a..b", true),
        ("a.#.b", "a..b", true),
        (".a", ".a", true),
        (".a", "a", false),
        ("*.a", ".a", true),
        ("a.", "a.", true),
        ("a.", "a", false),
        ("a.#", "a.", true),
        ("a.*", "a.", true),
        ("", "", true),
        ("", "a", false),
        ("a", "", false),
        ("#", "", true),
        ("*", "", false),
        ("*.#", "", false),
        ("#.*", "", false),
        ("*.*", "", false),
        ("#.#", "", true),
        ("", ".", false),
        ("*.*", ".", true),
        ("#", "..", true),
        // Literal words that merely contain wildcard characters.
        ("a*", "a*", true),
        ("a*", "ab", false),
        ("a*", "a", false),
        ("*a", "ba", false),
        ("*a", "*a", true),
        ("a#", "a", false),
        ("a#", "a.b", false),
        ("a#", "a#", true),
        ("#a", "a", false),
        ("#a", "x.a", false),
        ("**", "a", false),
        ("##", "a.b", false),
        // A routing key containing wildcard characters is literal.
        ("a", "*", false),
        ("*", "*", true),
        ("#", "#", true),
        ("a.b", "a.*", false),
        // Long keys.
        (
            "#.z",
            "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z",
            true,
        ),
        (
            "a.#.m.#.z",
            "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z",
            true,
        ),
        (
            "a.#.m.#.m.#.z",
            "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z",
            false,
        ),
        ("*.*.*.*.*.*.*.*.*.*", "1.2.3.4.5.6.7.8.9.10", true),
        ("*.*.*.*.*.*.*.*.*.*", "1.2.3.4.5.6.7.8.9", false),
        // Non-ASCII words.
        ("café.*", "café.crème", true),
        ("café.*", "cafe.crème", false),
        ("#.日本", "東京.日本", true),
        ("*.日本", "日本", false),
        ("ü.#", "ü", true),
    ];

    #[test]
    fn table() {
        assert!(TABLE.len() >= 60);
        for &(pattern, key, expected) in TABLE {
            assert_eq!(matches(pattern, key), expected, "{pattern:?} vs {key:?}");
            assert_eq!(
                reference_str(pattern, key),
                expected,
                "reference: {pattern:?} vs {key:?}"
            );
        }
    }

    #[test]
    fn table_in_one_trie() {
        let mut r = TopicRouter::new();
        for (i, &(pattern, _, _)) in TABLE.iter().enumerate() {
            r.add(binding(&format!("{i}"), pattern));
        }
        for &(_, key, _) in TABLE {
            let got: BTreeSet<Destination> = route(&r, key).into_iter().collect();
            let expected: BTreeSet<Destination> = TABLE
                .iter()
                .enumerate()
                .filter(|(_, (pattern, _, _))| reference_str(pattern, key))
                .map(|(i, _)| q(&format!("{i}")))
                .collect();
            assert_eq!(got, expected, "{key:?}");
        }
    }

    /// All dot-joined sequences of 1..=max words over `alphabet`.
    fn all_keys(alphabet: &[&str], max: usize) -> Vec<String> {
        let mut all = Vec::new();
        let mut level: Vec<Vec<&str>> = vec![vec![]];
        for _ in 0..max {
            let mut next = Vec::new();
            for prefix in &level {
                for &w in alphabet {
                    let mut words = prefix.clone();
                    words.push(w);
                    all.push(words.join("."));
                    next.push(words);
                }
            }
            level = next;
        }
        all
    }

    fn exhaustive(pattern_words: &[&str], key_words: &[&str]) {
        let patterns = all_keys(pattern_words, 4);
        let keys = all_keys(key_words, 4);
        let mut r = TopicRouter::new();
        for (i, p) in patterns.iter().enumerate() {
            assert!(r.add(binding(&format!("{i}"), p)));
        }
        let check = |r: &TopicRouter, live: &dyn Fn(usize) -> bool| {
            for key in &keys {
                let got = route(r, key);
                let unique: BTreeSet<Destination> = got.iter().cloned().collect();
                assert_eq!(unique.len(), got.len(), "duplicates for {key:?}");
                let expected: BTreeSet<Destination> = patterns
                    .iter()
                    .enumerate()
                    .filter(|&(i, p)| live(i) && reference_str(p, key))
                    .map(|(i, _)| q(&format!("{i}")))
                    .collect();
                assert_eq!(unique, expected, "{key:?}");
            }
        };
        check(&r, &|_| true);
        // Remove every other binding: the remaining trie must still agree.
        for (i, p) in patterns.iter().enumerate() {
            if i % 2 == 0 {
                assert!(r.remove(&binding(&format!("{i}"), p)));
            }
        }
        check(&r, &|i| i % 2 == 1);
        for (i, p) in patterns.iter().enumerate() {
            assert_eq!(r.remove(&binding(&format!("{i}"), p)), i % 2 == 1);
        }
        assert_eq!(r.len(), 0);
        assert!(r.root.is_empty());
    }

    #[test]
    fn exhaustive_against_reference() {
        exhaustive(&["a", "b", "*", "#"], &["a", "b"]);
    }

    #[test]
    fn exhaustive_with_empty_words() {
        exhaustive(&["a", "", "*", "#"], &["a", ""]);
    }

    #[test]
    fn single_pattern_exhaustive() {
        // Each pattern alone in its trie (no sharing of prefixes).
        let patterns = all_keys(&["a", "b", "*", "#"], 3);
        let keys = all_keys(&["a", "b"], 4);
        for p in &patterns {
            for k in &keys {
                assert_eq!(matches(p, k), reference_str(p, k), "{p:?} vs {k:?}");
            }
        }
    }

    #[test]
    fn identity_dedup_and_same_key_destinations() {
        let mut r = TopicRouter::new();
        assert!(r.add(binding("q1", "a.*")));
        assert!(!r.add(binding("q1", "a.*")));
        assert!(r.add(binding("q2", "a.*")));
        let mut args = FieldTable::new();
        args.insert("x".into(), FieldValue::string("y"));
        let with_args = Binding {
            arguments: args,
            ..binding("q1", "a.*")
        };
        assert!(r.add(with_args.clone()));
        assert_eq!(r.len(), 3);
        assert_eq!(route(&r, "a.b"), vec![q("q1"), q("q2")]);
        assert!(r.remove(&binding("q1", "a.*")));
        assert!(!r.remove(&binding("q1", "a.*")));
        // The binding with arguments still leads to q1.
        assert_eq!(route(&r, "a.b"), vec![q("q1"), q("q2")]);
        assert!(r.remove(&with_args));
        assert_eq!(route(&r, "a.b"), vec![q("q2")]);
        assert!(!r.remove(&binding("q2", "a.#")));
        assert!(!r.remove(&binding("q3", "a.*")));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn remove_destination_and_pruning() {
        let mut r = TopicRouter::new();
        let x = Destination::Exchange(Arc::from("q1"));
        for key in ["a.b.c", "a.#", "#", "*.b", "", "a..b"] {
            assert!(r.add(binding("q1", key)));
            assert!(r.add(binding("q2", key)));
        }
        assert!(r.add(Binding {
            destination: x.clone(),
            binding_key: "a.b.c".into(),
            arguments: FieldTable::new(),
        }));
        assert_eq!(r.len(), 13);
        assert_eq!(route_set(&r, "a.b.c"), vec![q("q1"), q("q2"), x.clone()]);
        assert_eq!(r.remove_destination(&q("q1")), 6);
        assert_eq!(r.remove_destination(&q("q1")), 0);
        assert!(!r.has_destination(&q("q1")));
        assert!(r.has_destination(&x));
        assert_eq!(route_set(&r, "a.b.c"), vec![q("q2"), x.clone()]);
        assert_eq!(route_set(&r, "z"), vec![q("q2")]);
        assert_eq!(r.bindings().len(), 7);
        for b in r.bindings() {
            assert!(r.remove(&b));
        }
        assert_eq!(r.len(), 0);
        assert_eq!(r.len(), 0);
        assert!(r.root.is_empty(), "trie not pruned: {:?}", r.root);
        for key in ["a.b.c", "", "a", "z.b", "a..b"] {
            assert!(route(&r, key).is_empty());
        }
    }

    #[test]
    fn pathological_pattern_finishes() {
        let mut r = TopicRouter::new();
        let pattern = "#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.z";
        r.add(binding("q", pattern));
        r.add(binding("q2", "#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.y"));
        let words: Vec<String> = (0..200).map(|i| format!("w{i}")).collect();
        let miss = words.join(".");
        assert!(route(&r, &miss).is_empty());
        let hit = format!("{miss}.z");
        assert_eq!(route(&r, &hit), vec![q("q")]);
        let alternating: Vec<&str> = (0..200)
            .map(|i| if i % 2 == 0 { "z" } else { "y" })
            .collect();
        assert_eq!(route(&r, &alternating.join(".")), vec![q("q2")]);
    }
}
