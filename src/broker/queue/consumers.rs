//! A queue's consumers and the order a message is offered to them: consumer priorities
//! (`x-priority`) and single active consumer (`x-single-active-consumer`).
//!
//! **Priorities** (RabbitMQ's "Consumer Priorities"): a message goes to the
//! highest-priority consumer that can take it (prefetch not reached, connection not
//! saturated); only when every consumer of that priority is blocked does a lower one get
//! it. Within a priority consumers take turns (round-robin, one cursor per priority). With
//! every consumer at the default priority 0 this is plain round-robin (AMQP 0-9-1 §3.1.4).
//!
//! **Single active consumer**: only one consumer, the active one, gets messages; the others
//! wait. When the active one goes (cancel, channel or connection closed) the next takes
//! over at once: the highest priority, then the earliest registered. On a quorum queue a
//! consumer of a higher priority than the active one takes over as soon as the active one
//! has no unacked deliveries; until then the active one gets nothing more (RabbitMQ 4.x
//! `rabbit_fifo:activate_next_consumer`, "quiescing"). A classic queue never preempts its
//! active consumer.

use crate::broker::consumer::Consumer;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One priority's consumers: a range of the list and whose turn it is.
#[derive(Debug, Clone, Copy)]
struct Group {
    priority: i64,
    start: usize,
    len: usize,
    /// Offset in the group of the consumer to offer first.
    cursor: usize,
}

/// A queue's consumers, highest priority first, registration order within a priority.
#[derive(Debug, Default)]
pub(crate) struct ConsumerSet {
    list: Vec<Arc<Consumer>>,
    groups: Vec<Group>,
    /// `x-single-active-consumer`: only `active` gets messages.
    single_active: bool,
    /// A higher-priority consumer preempts the active one (quorum queues).
    preempts: bool,
    active: Option<Arc<Consumer>>,
}

impl ConsumerSet {
    /// An empty set; `single_active` for a queue with `x-single-active-consumer`,
    /// `preempts` for a quorum queue.
    pub(crate) fn new(single_active: bool, preempts: bool) -> ConsumerSet {
        ConsumerSet {
            single_active,
            preempts,
            ..ConsumerSet::default()
        }
    }

    /// Consumers attached.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether none is attached.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every consumer, highest priority first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Consumer>> {
        self.list.iter()
    }

    /// The active consumer of a single-active-consumer queue (`None` for other queues, or
    /// with no consumer).
    pub(crate) fn active(&self) -> Option<&Arc<Consumer>> {
        self.active.as_ref()
    }

    /// Whether the set is in single-active-consumer mode.
    pub(crate) fn is_single_active(&self) -> bool {
        self.single_active
    }

    /// Adds a consumer after those of its priority.
    pub(crate) fn push(&mut self, consumer: Arc<Consumer>) {
        let at = self
            .list
            .iter()
            .position(|c| c.priority < consumer.priority)
            .unwrap_or(self.list.len());
        if self.single_active {
            consumer.single_active.store(true, Ordering::Relaxed);
            consumer.waiting.store(true, Ordering::Relaxed);
        }
        self.list.insert(at, consumer);
        self.regroup();
        if self.single_active && self.active.is_none() {
            self.set_active(self.list.first().cloned());
        }
    }

    /// Removes the consumers `matches` picks; returns how many.
    pub(crate) fn remove_where(&mut self, matches: impl Fn(&Arc<Consumer>) -> bool) -> usize {
        let before = self.list.len();
        self.list.retain(|c| !matches(c));
        let removed = before - self.list.len();
        if removed > 0 {
            self.regroup();
            if self.active.as_ref().is_some_and(&matches) {
                // The next takes over at once (RabbitMQ 4.x).
                self.active = None;
                self.set_active(self.list.first().cloned());
            }
        }
        removed
    }

    /// Removes and returns every consumer.
    pub(crate) fn take_all(&mut self) -> Vec<Arc<Consumer>> {
        self.groups.clear();
        self.active = None;
        std::mem::take(&mut self.list)
    }

    /// Makes `next` the active consumer (single active consumer mode).
    fn set_active(&mut self, next: Option<Arc<Consumer>>) {
        if let Some(old) = &self.active {
            old.waiting.store(true, Ordering::Relaxed);
        }
        if let Some(new) = &next {
            new.waiting.store(false, Ordering::Relaxed);
        }
        self.active = next;
    }

    /// Rebuilds the priority groups after the list changed, keeping each surviving
    /// priority's cursor within its group.
    fn regroup(&mut self) {
        let old = std::mem::take(&mut self.groups);
        let mut start = 0;
        while start < self.list.len() {
            let priority = self.list[start].priority;
            let len = self.list[start..]
                .iter()
                .take_while(|c| c.priority == priority)
                .count();
            let cursor = old
                .iter()
                .find(|g| g.priority == priority)
                .map_or(0, |g| g.cursor % len);
            self.groups.push(Group {
                priority,
                start,
                len,
                cursor,
            });
            start += len;
        }
    }

    /// Offers one message: calls `take` with each consumer in turn, in offer order, until
    /// one takes it (returns true); that consumer's priority's turn moves past it. Returns
    /// whether one took it.
    pub(crate) fn offer(&mut self, mut take: impl FnMut(&Arc<Consumer>) -> bool) -> bool {
        if self.single_active {
            let Some(active) = self.current_active() else {
                return false;
            };
            return take(&active);
        }
        for group in &mut self.groups {
            for i in 0..group.len {
                let offset = (group.cursor + i) % group.len;
                if take(&self.list[group.start + offset]) {
                    group.cursor = (offset + 1) % group.len;
                    return true;
                }
            }
        }
        false
    }

    /// The active consumer that may take messages now, after a preemption that is due:
    /// `None` while a quiescing active consumer still has unacked deliveries.
    fn current_active(&mut self) -> Option<Arc<Consumer>> {
        let active = match &self.active {
            Some(a) => Arc::clone(a),
            None => {
                self.set_active(self.list.first().cloned());
                Arc::clone(self.active.as_ref()?)
            }
        };
        if !self.preempts {
            return Some(active);
        }
        let best = self.list.first()?;
        if best.priority <= active.priority {
            return Some(active);
        }
        if active.unacked() > 0 {
            // Quiescing: it finishes what it has, then the higher priority takes over.
            return None;
        }
        let best = Arc::clone(best);
        self.set_active(Some(Arc::clone(&best)));
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::channel::Channel;
    use crate::broker::sink::{CancelReason, ClientSink};
    use crate::error::ReplyCode;
    use crate::types::{FieldTable, FieldValue};

    #[derive(Debug)]
    struct NoSink;
    impl ClientSink for NoSink {
        fn deliver(&self, _: u16, _: &str, _: u64, _: bool, _: &crate::broker::message::Message) {}
        fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
        fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &crate::broker::message::Message) {
        }
        fn confirm(&self, _: u16, _: u64, _: bool, _: bool) {}
        fn is_saturated(&self) -> bool {
            false
        }
        fn force_close(&self, _: ReplyCode, _: &str) {}
    }

    fn consumer(tag: &str, priority: Option<i64>) -> Arc<Consumer> {
        let mut arguments = FieldTable::new();
        if let Some(p) = priority {
            arguments.insert("x-priority".into(), FieldValue::I64(p));
        }
        let channel = Arc::new(Channel::new(1, 1, Arc::new(NoSink)));
        Arc::new(Consumer::new(
            Arc::from(tag),
            Arc::from("q"),
            channel,
            false,
            false,
            0,
            arguments,
        ))
    }

    /// The tags `offer` picks for `n` messages when every consumer takes.
    fn picks(set: &mut ConsumerSet, n: usize, refuse: &[&str]) -> Vec<String> {
        (0..n)
            .filter_map(|_| {
                let mut got = None;
                set.offer(|c| {
                    if refuse.contains(&&*c.tag) {
                        return false;
                    }
                    got = Some(c.tag.to_string());
                    true
                });
                got
            })
            .collect()
    }

    #[test]
    fn the_highest_priority_takes_round_robin_and_lower_ones_only_when_it_is_blocked() {
        let mut set = ConsumerSet::new(false, false);
        for (tag, p) in [
            ("low", None),
            ("hi1", Some(5)),
            ("hi2", Some(5)),
            ("mid", Some(1)),
        ] {
            set.push(consumer(tag, p));
        }
        assert_eq!(picks(&mut set, 4, &[]), ["hi1", "hi2", "hi1", "hi2"]);
        assert_eq!(picks(&mut set, 2, &["hi1", "hi2"]), ["mid", "mid"]);
        assert_eq!(picks(&mut set, 1, &["hi1", "hi2", "mid"]), ["low"]);
        assert!(picks(&mut set, 1, &["hi1", "hi2", "mid", "low"]).is_empty());
        // Equal priorities are plain round-robin.
        let mut flat = ConsumerSet::new(false, false);
        for tag in ["a", "b", "c"] {
            flat.push(consumer(tag, None));
        }
        assert_eq!(picks(&mut flat, 4, &["b"]), ["a", "c", "a", "c"]);
        assert_eq!(flat.remove_where(|c| &*c.tag == "a"), 1);
        assert_eq!(picks(&mut flat, 2, &[]), ["b", "c"]);
    }

    #[test]
    fn a_single_active_consumer_hands_over_to_the_next_when_it_goes() {
        let mut set = ConsumerSet::new(true, false);
        set.push(consumer("first", None));
        set.push(consumer("second", None));
        set.push(consumer("urgent", Some(9)));
        // A classic queue does not preempt: the first stays active.
        assert_eq!(
            set.active().map(|c| c.tag.to_string()).as_deref(),
            Some("first")
        );
        assert_eq!(picks(&mut set, 2, &[]), ["first", "first"]);
        assert!(picks(&mut set, 1, &["first"]).is_empty());
        set.remove_where(|c| &*c.tag == "first");
        // The next by priority, then registration.
        assert_eq!(picks(&mut set, 1, &[]), ["urgent"]);
        set.remove_where(|c| &*c.tag == "urgent");
        assert_eq!(picks(&mut set, 1, &[]), ["second"]);
    }

    #[test]
    fn on_a_quorum_queue_a_higher_priority_takes_over_once_the_active_is_idle() {
        let mut set = ConsumerSet::new(true, true);
        let first = consumer("first", None);
        set.push(Arc::clone(&first));
        assert_eq!(picks(&mut set, 1, &[]), ["first"]);
        first.unacked.store(1, std::sync::atomic::Ordering::Relaxed);
        set.push(consumer("urgent", Some(3)));
        // Quiescing: nobody gets anything while the old active one has unacked messages.
        assert!(picks(&mut set, 1, &[]).is_empty());
        first.unacked.store(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(picks(&mut set, 1, &[]), ["urgent"]);
        assert_eq!(
            set.active().map(|c| c.tag.to_string()).as_deref(),
            Some("urgent")
        );
        assert!(first.is_waiting());
        assert!(!set.active().unwrap().is_waiting());
    }
}
