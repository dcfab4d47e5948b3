//! The ready messages of a queue: FIFO by queue sequence number within each priority
//! level, the highest level first (RabbitMQ's priority queues, `x-max-priority`).
//!
//! A queue without `x-max-priority` has one level. A priority queue has one level per
//! priority 0..=max; a message's level is its `priority` property capped at the maximum
//! (absent = 0), as RabbitMQ does. A bitmap of non-empty levels finds the head in a few
//! instructions whatever the maximum.
//!
//! Memory: each level is a `ChunkedDeque` (blocks of `BLOCK_ENTRIES` = 1024 entries,
//! allocated and freed one block at a time) of 24-byte `Ready` entries. A queued transient message costs its entry
//! plus its `Arc<Message>` (one 64-byte malloc chunk when the body is inline): 88 bytes
//! (docs/benchmarks.md, "Memory per queued message").

use crate::broker::message::Message;
use crate::broker::queue::chunked_deque::ChunkedDeque;
use crate::broker::queue::QueuedMessage;
use crate::storage::RecordRef;
use std::sync::Arc;

/// A ready message: its queue position and where its body is. 24 bytes (a test checks
/// it): a transient message is its position, its delivery state and the message pointer;
/// a stored one keeps its record and paging state in a [`Stored`] box.
#[derive(Debug)]
pub(crate) struct Ready {
    pub(crate) seq: u64,
    body: Body,
}

/// Where a ready message's body is, with its delivery state (in the variants so the tag
/// shares a word with them).
#[derive(Debug)]
enum Body {
    /// In memory and not stored (a transient message, or a queue without a store): it
    /// cannot leave memory.
    Transient {
        redelivered: bool,
        /// Deliveries so far.
        delivery_count: u32,
        msg: Arc<Message>,
    },
    /// Stored (a persistent message of a stored queue), in memory or paged out.
    Stored {
        redelivered: bool,
        /// Deliveries so far (persisted by the store's delivered entries).
        delivery_count: u32,
        stored: Box<Stored>,
    },
}

/// A stored ready message's place in the store and its body, if in memory.
#[derive(Debug)]
struct Stored {
    record: RecordRef,
    /// Body size in bytes, kept while paged out so `ready_bytes` stays exact.
    size: usize,
    /// The message; `None` while it is only in the store (paged out).
    msg: Option<Arc<Message>>,
}

impl Ready {
    /// A message in memory: stored when `record` is given.
    pub(crate) fn in_memory(
        seq: u64,
        redelivered: bool,
        delivery_count: u32,
        msg: Arc<Message>,
        record: Option<RecordRef>,
    ) -> Ready {
        let body = match record {
            None => Body::Transient {
                redelivered,
                delivery_count,
                msg,
            },
            Some(record) => Body::Stored {
                redelivered,
                delivery_count,
                stored: Box::new(Stored {
                    record,
                    size: msg.body_size(),
                    msg: Some(msg),
                }),
            },
        };
        Ready { seq, body }
    }

    /// A stored message whose body of `size` bytes is only in the store.
    pub(crate) fn paged(
        seq: u64,
        redelivered: bool,
        delivery_count: u32,
        record: RecordRef,
        size: usize,
    ) -> Ready {
        Ready {
            seq,
            body: Body::Stored {
                redelivered,
                delivery_count,
                stored: Box::new(Stored {
                    record,
                    size,
                    msg: None,
                }),
            },
        }
    }

    /// A message back from a channel (requeued), body in memory.
    pub(crate) fn returned(e: QueuedMessage) -> Ready {
        Ready::in_memory(e.seq, e.redelivered, e.delivery_count, e.msg, e.record)
    }

    /// Delivered at least once before (AMQP `redelivered`).
    pub(crate) fn redelivered(&self) -> bool {
        match &self.body {
            Body::Transient { redelivered, .. } | Body::Stored { redelivered, .. } => *redelivered,
        }
    }

    /// Deliveries so far.
    pub(crate) fn delivery_count(&self) -> u32 {
        match &self.body {
            Body::Transient { delivery_count, .. } | Body::Stored { delivery_count, .. } => {
                *delivery_count
            }
        }
    }

    /// The message, when its body is in memory.
    pub(crate) fn message(&self) -> Option<&Arc<Message>> {
        match &self.body {
            Body::Transient { msg, .. } => Some(msg),
            Body::Stored { stored, .. } => stored.msg.as_ref(),
        }
    }

    /// Body size in bytes, in memory or not.
    pub(crate) fn body_size(&self) -> usize {
        match &self.body {
            Body::Transient { msg, .. } => msg.body_size(),
            Body::Stored { stored, .. } => stored.size,
        }
    }

    /// Where the message is stored, if it is.
    pub(crate) fn record(&self) -> Option<RecordRef> {
        match &self.body {
            Body::Transient { .. } => None,
            Body::Stored { stored, .. } => Some(stored.record),
        }
    }

    /// Whether its body is only in the store.
    pub(crate) fn is_paged(&self) -> bool {
        matches!(&self.body, Body::Stored { stored, .. } if stored.msg.is_none())
    }

    /// The record and body size of a paged-out message, to read it back.
    pub(crate) fn paged_record(&self) -> Option<(RecordRef, usize)> {
        match &self.body {
            Body::Stored { stored, .. } if stored.msg.is_none() => {
                Some((stored.record, stored.size))
            }
            _ => None,
        }
    }

    /// Puts the body read back from the store in memory (a paged-out message only).
    pub(crate) fn page_in(&mut self, msg: Arc<Message>) {
        if let Body::Stored { stored, .. } = &mut self.body {
            debug_assert!(stored.msg.is_none(), "page_in of a message in memory");
            stored.msg = Some(msg);
        }
    }

    /// Drops the body of a stored message held in memory; returns the bytes released.
    pub(crate) fn page_out(&mut self) -> Option<usize> {
        let Body::Stored { stored, .. } = &mut self.body else {
            return None;
        };
        stored.msg.take()?;
        Some(stored.size)
    }

    /// The message as handed to a channel; `None` while it is paged out.
    pub(crate) fn to_delivery(&self) -> Option<QueuedMessage> {
        Some(QueuedMessage {
            seq: self.seq,
            msg: Arc::clone(self.message()?),
            redelivered: self.redelivered(),
            delivery_count: self.delivery_count(),
            record: self.record(),
            deadline_ms: None,
        })
    }
}

/// Words of the non-empty-levels bitmap: 4 × 64 bits cover levels 0..=255.
const LEVEL_WORDS: usize = 4;

/// Ready messages by priority level, each level in `seq` order.
#[derive(Debug)]
pub(crate) struct ReadyList {
    levels: Vec<ChunkedDeque<Ready>>,
    /// Bit `l` set when level `l` holds messages.
    nonempty: [u64; LEVEL_WORDS],
    /// Words of `nonempty` in use (1 for up to 64 levels).
    words: usize,
    len: usize,
    /// The level of a message without a `priority` property.
    default_level: u8,
}

impl Default for ReadyList {
    fn default() -> ReadyList {
        ReadyList::new(None)
    }
}

impl ReadyList {
    /// An empty list with levels 0..=`max_priority` (one level when `None`).
    pub(crate) fn new(max_priority: Option<u8>) -> ReadyList {
        ReadyList::with_default_level(max_priority.unwrap_or(0), 0)
    }

    /// An empty list with levels 0..=`max_priority`, where a message without a priority
    /// goes to `default_level` (a quorum queue's 32 levels, absent = 4: RabbitMQ 4.x).
    pub(crate) fn with_default_level(max_priority: u8, default_level: u8) -> ReadyList {
        let levels = usize::from(max_priority) + 1;
        ReadyList {
            levels: (0..levels).map(|_| ChunkedDeque::new()).collect(),
            nonempty: [0; LEVEL_WORDS],
            words: levels.div_ceil(64),
            len: 0,
            default_level: default_level.min(max_priority),
        }
    }

    /// The level of a message with `priority`: capped at the highest level; absent is the
    /// default level (0 for a classic queue).
    pub(crate) fn level_of(&self, priority: Option<u8>) -> u8 {
        let top = self.levels.len() - 1;
        usize::from(priority.unwrap_or(self.default_level)).min(top) as u8
    }

    /// The level of `msg`.
    pub(crate) fn level_of_message(&self, msg: &Message) -> u8 {
        self.level_of(msg.properties().priority)
    }

    /// Ready messages.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn mark(&mut self, level: usize) {
        let nonempty = !self.levels[level].is_empty();
        let (w, b) = (level / 64, level % 64);
        if nonempty {
            self.nonempty[w] |= 1 << b;
        } else {
            self.nonempty[w] &= !(1 << b);
        }
    }

    /// The highest non-empty level.
    fn top(&self) -> Option<usize> {
        (0..self.words)
            .rev()
            .find(|&w| self.nonempty[w] != 0)
            .map(|w| w * 64 + 63 - self.nonempty[w].leading_zeros() as usize)
    }

    /// The lowest non-empty level.
    fn bottom(&self) -> Option<usize> {
        (0..self.words)
            .find(|&w| self.nonempty[w] != 0)
            .map(|w| w * 64 + self.nonempty[w].trailing_zeros() as usize)
    }

    /// The next message to deliver.
    pub(crate) fn front(&self) -> Option<&Ready> {
        self.levels[self.top()?].front()
    }

    /// The next message to deliver, mutably.
    pub(crate) fn front_mut(&mut self) -> Option<&mut Ready> {
        let top = self.top()?;
        self.levels[top].front_mut()
    }

    /// Takes the next message to deliver.
    pub(crate) fn pop_front(&mut self) -> Option<Ready> {
        let top = self.top()?;
        self.take_front(top)
    }

    /// Takes the oldest message of the lowest priority (what a length limit drops first).
    pub(crate) fn pop_lowest(&mut self) -> Option<Ready> {
        let bottom = self.bottom()?;
        self.take_front(bottom)
    }

    fn take_front(&mut self, level: usize) -> Option<Ready> {
        let r = self.levels[level].pop_front()?;
        self.len -= 1;
        self.mark(level);
        Some(r)
    }

    /// Appends a new message (the newest: highest `seq`) at `level`.
    pub(crate) fn push_back(&mut self, level: u8, r: Ready) {
        let level = usize::from(level);
        self.levels[level].push_back(r);
        self.len += 1;
        self.mark(level);
    }

    /// The newest message of `level`.
    pub(crate) fn back_mut(&mut self, level: u8) -> Option<&mut Ready> {
        self.levels[usize::from(level)].back_mut()
    }

    /// Puts a message back at its place by `seq` within `level` (a requeue).
    pub(crate) fn insert(&mut self, level: u8, r: Ready) {
        let level = usize::from(level);
        let l = &mut self.levels[level];
        // Requeued messages are usually older than everything ready: check the front
        // first, then fall back to a binary search.
        let at = match l.front() {
            Some(f) if f.seq > r.seq => 0,
            None => 0,
            _ => l.partition_point(|m| m.seq < r.seq),
        };
        l.insert(at, r);
        self.len += 1;
        self.mark(level);
    }

    /// The message with `seq` at `level`, mutably.
    pub(crate) fn get_mut(&mut self, level: u8, seq: u64) -> Option<&mut Ready> {
        let l = &mut self.levels[usize::from(level)];
        let at = l.binary_search_by_key(&seq, |m| m.seq).ok()?;
        l.get_mut(at)
    }

    /// Removes the messages with the given (level, seq) pairs; returns those found.
    /// Few removals shift in place; many are one pass over each level.
    pub(crate) fn remove(&mut self, mut which: Vec<(u8, u64)>) -> Vec<Ready> {
        /// Above this many removals from one level, one `retain` pass beats shifting.
        const SHIFTS_MAX: usize = 16;
        which.sort_unstable();
        let mut out = Vec::with_capacity(which.len());
        for chunk in which.chunk_by(|a, b| a.0 == b.0) {
            let level = usize::from(chunk[0].0);
            let l = &mut self.levels[level];
            if chunk.len() <= SHIFTS_MAX {
                for &(_, seq) in chunk {
                    if let Ok(at) = l.binary_search_by_key(&seq, |m| m.seq) {
                        out.extend(l.remove(at));
                    }
                }
            } else {
                let mut kept = ChunkedDeque::new();
                for r in std::mem::take(l) {
                    if chunk.binary_search(&(chunk[0].0, r.seq)).is_ok() {
                        out.push(r);
                    } else {
                        kept.push_back(r);
                    }
                }
                *l = kept;
            }
            self.mark(level);
        }
        self.len -= out.len();
        out
    }

    /// Every ready message, level by level (lowest first), each level in `seq` order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Ready> {
        self.levels.iter().flat_map(ChunkedDeque::iter)
    }

    /// The ready messages in delivery order (the highest level first, each level in `seq`
    /// order) from position `offset` (0 = the head), each with its position and level:
    /// what peek, search and replay walk. Skipping to `offset` costs one step per level.
    pub(crate) fn walk_from(
        &self,
        offset: usize,
    ) -> impl Iterator<Item = (usize, u8, &Ready)> + '_ {
        // (level, first index in it, position of that index), highest level first.
        let mut skip = offset;
        let mut position = offset;
        let mut starts = Vec::new();
        for (level, l) in self.levels.iter().enumerate().rev() {
            let n = l.len();
            if skip >= n {
                skip -= n;
                continue;
            }
            starts.push((level, skip, position));
            position += n - skip;
            skip = 0;
        }
        starts
            .into_iter()
            .flat_map(move |(level, start, position)| {
                let l = &self.levels[level];
                (start..l.len()).filter_map(move |i| {
                    let at = position + (i - start);
                    l.get(i).map(|r| (at, level as u8, r))
                })
            })
    }

    /// Every level's messages in `seq` order, lowest level first.
    #[cfg(test)]
    pub(crate) fn levels(&self) -> impl Iterator<Item = &ChunkedDeque<Ready>> {
        self.levels.iter()
    }

    /// Removes every message: returns them as a list of their own (same levels), to drop
    /// or walk after the queue lock is released.
    pub(crate) fn take_all(&mut self) -> ReadyList {
        let empty = ReadyList {
            levels: (0..self.levels.len())
                .map(|_| ChunkedDeque::new())
                .collect(),
            nonempty: [0; LEVEL_WORDS],
            words: self.words,
            len: 0,
            default_level: self.default_level,
        };
        std::mem::replace(self, empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::BasicProperties;

    #[test]
    fn positions_follow_delivery_order_across_levels() {
        let mut list = ReadyList::new(Some(3));
        for (seq, level) in [(0, 0), (1, 3), (2, 1), (3, 3), (4, 0)] {
            list.push_back(level, ready(seq));
        }
        let all: Vec<(usize, u8, u64)> = list.walk_from(0).map(|(p, l, r)| (p, l, r.seq)).collect();
        assert_eq!(all, [(0, 3, 1), (1, 3, 3), (2, 1, 2), (3, 0, 0), (4, 0, 4)]);
        let tail: Vec<(usize, u64)> = list.walk_from(3).map(|(p, _, r)| (p, r.seq)).collect();
        assert_eq!(tail, [(3, 0), (4, 4)]);
        let mid: Vec<(usize, u64)> = list.walk_from(1).map(|(p, _, r)| (p, r.seq)).collect();
        assert_eq!(mid, [(1, 3), (2, 2), (3, 0), (4, 4)]);
        assert_eq!(list.walk_from(5).count(), 0);
        let order: Vec<u64> = std::iter::from_fn(|| list.pop_front().map(|r| r.seq)).collect();
        assert_eq!(order, [1, 3, 2, 0, 4], "the order dispatch uses");
    }

    fn ready(seq: u64) -> Ready {
        let msg = Message::new("", "q", BasicProperties::default(), vec![seq as u8]);
        Ready::in_memory(seq, false, 0, Arc::new(msg), None)
    }

    fn drain(list: &mut ReadyList) -> Vec<u64> {
        std::iter::from_fn(|| list.pop_front().map(|r| r.seq)).collect()
    }

    #[test]
    fn a_ready_message_costs_24_bytes_in_memory_or_not() {
        assert_eq!(std::mem::size_of::<Ready>(), 24);
        // The chunked deque's slots are `Option<Ready>`: the tag's niche makes it free.
        assert_eq!(std::mem::size_of::<Option<Ready>>(), 24);
    }

    #[test]
    fn a_stored_message_pages_out_and_in() {
        let msg = Arc::new(Message::new(
            "",
            "q",
            BasicProperties::default(),
            vec![1; 40],
        ));
        let record = RecordRef { segment: 3, id: 9 };
        let mut r = Ready::in_memory(5, true, 2, Arc::clone(&msg), Some(record));
        assert_eq!(
            (r.record(), r.body_size(), r.is_paged()),
            (Some(record), 40, false)
        );
        assert_eq!(r.page_out(), Some(40));
        assert_eq!(r.page_out(), None);
        assert!(r.is_paged() && r.to_delivery().is_none());
        assert_eq!(r.paged_record(), Some((record, 40)));
        r.page_in(msg);
        let d = r
            .to_delivery()
            .map(|d| (d.seq, d.redelivered, d.delivery_count, d.record));
        assert_eq!(d, Some((5, true, 2, Some(record))));
        let mut t = ready(1);
        assert_eq!(
            (t.record(), t.page_out(), t.paged_record()),
            (None, None, None)
        );
    }

    #[test]
    fn higher_levels_first_and_fifo_within_a_level() {
        let mut list = ReadyList::new(Some(255));
        let levels = [0u8, 9, 1, 9, 255, 0, 64, 63, 128];
        for (seq, &level) in levels.iter().enumerate() {
            list.push_back(level, ready(seq as u64));
        }
        assert_eq!(list.len(), levels.len());
        assert_eq!(list.front().map(|r| r.seq), Some(4));
        assert_eq!(drain(&mut list), [4, 8, 6, 7, 1, 3, 2, 0, 5]);
        assert_eq!(list.len(), 0);
        assert!(list.front().is_none());
    }

    #[test]
    fn priorities_are_capped_at_the_maximum() {
        let list = ReadyList::new(Some(5));
        assert_eq!(list.level_of(Some(200)), 5);
        assert_eq!(list.level_of(Some(3)), 3);
        assert_eq!(list.level_of(None), 0);
        let plain = ReadyList::new(None);
        assert_eq!(plain.level_of(Some(9)), 0);
    }

    #[test]
    fn requeue_goes_back_to_its_place_within_its_level() {
        let mut list = ReadyList::new(Some(2));
        for seq in [1, 3, 5] {
            list.push_back(1, ready(seq));
        }
        list.push_back(2, ready(6));
        list.insert(1, ready(4));
        list.insert(1, ready(0));
        list.insert(2, ready(2));
        assert_eq!(drain(&mut list), [2, 6, 0, 1, 3, 4, 5]);
    }

    #[test]
    fn lowest_priority_oldest_is_dropped_first() {
        let mut list = ReadyList::new(Some(9));
        list.push_back(9, ready(0));
        list.push_back(1, ready(1));
        list.push_back(1, ready(2));
        assert_eq!(list.pop_lowest().map(|r| r.seq), Some(1));
        assert_eq!(list.pop_lowest().map(|r| r.seq), Some(2));
        assert_eq!(list.pop_lowest().map(|r| r.seq), Some(0));
        assert!(list.pop_lowest().is_none());
    }

    #[test]
    fn removal_by_seq_few_or_many() {
        let mut list = ReadyList::new(Some(1));
        for seq in 0..100 {
            list.push_back((seq % 2) as u8, ready(seq));
        }
        // Few from level 1, many from level 0, and some that are not there.
        let mut which: Vec<(u8, u64)> = vec![(1, 1), (1, 51), (1, 2)];
        which.extend((0..60).step_by(2).map(|s| (0u8, s)));
        let removed = list.remove(which);
        assert_eq!(removed.len(), 32);
        assert_eq!(list.len(), 68);
        let left: Vec<u64> = drain(&mut list);
        let expected: Vec<u64> = (0..100)
            .filter(|s| s % 2 == 1 && *s != 1 && *s != 51)
            .chain((60..100).step_by(2))
            .collect();
        assert_eq!(left, expected);
    }
}
