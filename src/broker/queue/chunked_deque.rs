//! A FIFO deque stored in fixed-size blocks: the ready messages of one queue level.
//!
//! A `VecDeque` doubles when full, so a backlog of 10 million entries holds 2^24 slots
//! (up to twice what it needs) and keeps them after it drains. Here memory grows and
//! shrinks by one block of [`BLOCK_ENTRIES`] slots: a block is freed as soon as the head
//! leaves it. A deque that never had more than a few entries holds one small block
//! (from [`FIRST_BLOCK_ENTRIES`] slots, doubling up to a full block), so thousands of
//! quiet queues cost little.
//!
//! Layout: position `p` (counted from the first slot of the first block) is slot
//! `p % BLOCK_ENTRIES` of block `p / BLOCK_ENTRIES`; the entries are positions
//! `head .. head + len`. Only a deque with a single block may have a block smaller than
//! [`BLOCK_ENTRIES`], so the arithmetic holds for every block. Every block holds at least
//! one entry, except the single block of an empty deque (kept, `head` = 0). Random access
//! is O(1); `insert`/`remove` in the middle move O(min(i, len − i)) entries, as
//! `VecDeque`'s do.

use std::collections::VecDeque;

/// Slots of a full block: 1024 (24 KiB of 24-byte ready entries). A power of two, so the
/// position arithmetic is shifts and masks.
pub(crate) const BLOCK_ENTRIES: usize = 1024;

/// Slots of the first block a deque allocates; it doubles up to [`BLOCK_ENTRIES`] while it
/// is the only one.
pub(crate) const FIRST_BLOCK_ENTRIES: usize = 8;

/// Block slots the block list itself keeps room for once the deque is empty again
/// (room for more is released).
const IDLE_BLOCK_LIST_ENTRIES: usize = 4;

/// One block: `BLOCK_ENTRIES` slots (fewer for the single block of a small deque).
type Block<T> = Box<[Option<T>]>;

/// A double-ended queue of `T` in fixed-size blocks (see the module doc).
pub(crate) struct ChunkedDeque<T> {
    /// The blocks, first to last; a full block each when there are two or more.
    blocks: VecDeque<Block<T>>,
    /// Position of the first entry within `blocks[0]`.
    head: usize,
    /// Entries.
    len: usize,
}

impl<T> Default for ChunkedDeque<T> {
    fn default() -> ChunkedDeque<T> {
        ChunkedDeque::new()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ChunkedDeque<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

fn new_block<T>(slots: usize) -> Block<T> {
    std::iter::repeat_with(|| None).take(slots).collect()
}

impl<T> ChunkedDeque<T> {
    /// An empty deque; allocates nothing until the first push.
    pub(crate) fn new() -> ChunkedDeque<T> {
        ChunkedDeque {
            blocks: VecDeque::new(),
            head: 0,
            len: 0,
        }
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated (entries it can hold without allocating).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.blocks.iter().map(|b| b.len()).sum()
    }

    /// The slot of entry `i` (`i < len`).
    fn slot(&self, i: usize) -> Option<&Option<T>> {
        let p = self.head + i;
        self.blocks.get(p / BLOCK_ENTRIES)?.get(p % BLOCK_ENTRIES)
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut Option<T>> {
        let p = self.head + i;
        self.blocks
            .get_mut(p / BLOCK_ENTRIES)?
            .get_mut(p % BLOCK_ENTRIES)
    }

    /// Entry `i` from the front.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        self.slot(i)?.as_ref()
    }

    /// Entry `i` from the front, mutably.
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        self.slot_mut(i)?.as_mut()
    }

    /// The first entry.
    pub(crate) fn front(&self) -> Option<&T> {
        // The head is always in the first block (the fast path of dispatch).
        self.blocks.front()?.get(self.head)?.as_ref()
    }

    /// The first entry, mutably.
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        self.blocks.front_mut()?.get_mut(self.head)?.as_mut()
    }

    /// The last entry.
    #[cfg(test)]
    fn back(&self) -> Option<&T> {
        self.get(self.len.checked_sub(1)?)
    }

    /// The last entry, mutably.
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        self.get_mut(self.len.checked_sub(1)?)
    }

    /// Appends `value`.
    pub(crate) fn push_back(&mut self, value: T) {
        // Fast path: the tail slot is in the last block (always so unless it is full).
        let last = self.blocks.len().wrapping_sub(1);
        let p = self.head + self.len;
        if let Some(block) = self.blocks.back_mut() {
            if let Some(slot) = block.get_mut(p.wrapping_sub(last * BLOCK_ENTRIES)) {
                debug_assert!(slot.is_none(), "tail slot must be free");
                *slot = Some(value);
                self.len += 1;
                return;
            }
        }
        self.make_room_at_back();
        let i = self.len;
        self.len += 1;
        let slot = self.slot_mut(i);
        debug_assert!(matches!(slot, Some(None)), "tail slot must be free");
        if let Some(slot) = slot {
            *slot = Some(value);
        }
    }

    /// Makes sure position `head + len` is a slot of an allocated block.
    #[cold]
    #[inline(never)]
    fn make_room_at_back(&mut self) {
        let p = self.head + self.len;
        let Some(first) = self.blocks.front() else {
            self.blocks.push_back(new_block(FIRST_BLOCK_ENTRIES));
            return;
        };
        if self.blocks.len() > 1 || p < first.len() {
            if p / BLOCK_ENTRIES == self.blocks.len() {
                self.blocks.push_back(new_block(BLOCK_ENTRIES));
            }
            return;
        }
        // The single block is full up to its end.
        let cap = first.len();
        if self.len <= cap / 2 {
            self.move_single(cap, 0);
        } else if cap < BLOCK_ENTRIES {
            self.move_single((cap * 2).min(BLOCK_ENTRIES), 0);
        } else {
            self.blocks.push_back(new_block(BLOCK_ENTRIES));
        }
    }

    /// Moves the entries of the single block to slot `to` of a block of `slots` slots (the
    /// same block when it has that size already; `to + len ≤ slots`).
    fn move_single(&mut self, slots: usize, to: usize) {
        let (head, len) = (self.head, self.len);
        let Some(old) = self.blocks.front_mut() else {
            return;
        };
        debug_assert!(to + len <= slots);
        if old.len() == slots {
            // Each target slot is free or already moved from when it is written.
            if to < head {
                (0..len).for_each(|i| old.swap(to + i, head + i));
            } else {
                (0..len).rev().for_each(|i| old.swap(to + i, head + i));
            }
        } else {
            let mut block = new_block(slots);
            for (to, from) in block[to..].iter_mut().zip(&mut old[head..head + len]) {
                *to = from.take();
            }
            *old = block;
        }
        self.head = to;
    }

    /// Inserts `value` before the first entry.
    pub(crate) fn push_front(&mut self, value: T) {
        if self.blocks.is_empty() {
            self.blocks.push_back(new_block(FIRST_BLOCK_ENTRIES));
        }
        if self.head == 0 && self.len > 0 {
            self.make_room_at_front();
        }
        if self.len > 0 {
            self.head -= 1;
        }
        self.len += 1;
        if let Some(slot) = self.slot_mut(0) {
            debug_assert!(slot.is_none(), "head slot must be free");
            *slot = Some(value);
        }
    }

    /// Makes room before the first entry (at `head` = 0): a single block at most half
    /// full centres its entries (so pushes at either end have a quarter of it free); a
    /// fuller small one doubles; otherwise a full block goes in front.
    fn make_room_at_front(&mut self) {
        let cap = self.blocks.front().map_or(0, |b| b.len());
        if self.blocks.len() == 1 && (self.len <= cap / 2 || cap < BLOCK_ENTRIES) {
            let slots = if self.len <= cap / 2 {
                cap
            } else {
                (cap * 2).min(BLOCK_ENTRIES)
            };
            self.move_single(slots, (slots - self.len).div_ceil(2));
            return;
        }
        self.blocks.push_front(new_block(BLOCK_ENTRIES));
        self.head = BLOCK_ENTRIES;
    }

    /// Takes the first entry. A block the head leaves is freed, except the last one.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let value = self.blocks.front_mut()?.get_mut(self.head)?.take();
        self.len -= 1;
        self.head += 1;
        if self.len == 0 {
            self.head = 0;
            self.release_idle_block_list();
        } else if self.head == BLOCK_ENTRIES {
            self.blocks.pop_front();
            self.head = 0;
        }
        value
    }

    /// Takes the last entry. A block the tail leaves is freed, except the first one.
    pub(crate) fn pop_back(&mut self) -> Option<T> {
        let i = self.len.checked_sub(1)?;
        let value = self.slot_mut(i)?.take();
        self.len -= 1;
        let p = self.head + i;
        if self.len == 0 {
            self.head = 0;
            self.blocks.truncate(1);
            self.release_idle_block_list();
        } else if p.is_multiple_of(BLOCK_ENTRIES) && self.blocks.len() > 1 {
            self.blocks.pop_back();
        }
        value
    }

    /// Once empty, gives back the room of a long block list (a drained backlog).
    fn release_idle_block_list(&mut self) {
        if self.blocks.capacity() > IDLE_BLOCK_LIST_ENTRIES {
            self.shrink_block_list();
        }
    }

    #[cold]
    #[inline(never)]
    fn shrink_block_list(&mut self) {
        self.blocks.shrink_to(IDLE_BLOCK_LIST_ENTRIES);
    }

    /// Swaps entries `i` and `j` (both `< len`).
    fn swap(&mut self, i: usize, j: usize) {
        let a = self.slot_mut(i).and_then(Option::take);
        let b = self.slot_mut(j).and_then(Option::take);
        if let Some(slot) = self.slot_mut(i) {
            *slot = b;
        }
        if let Some(slot) = self.slot_mut(j) {
            *slot = a;
        }
    }

    /// Inserts `value` so that it becomes entry `at` (`at ≤ len`; beyond, it is appended).
    /// Moves the entries on the shorter side.
    pub(crate) fn insert(&mut self, at: usize, value: T) {
        let at = at.min(self.len);
        if at <= self.len / 2 {
            self.push_front(value);
            for i in 0..at {
                self.swap(i, i + 1);
            }
        } else {
            self.push_back(value);
            for i in (at..self.len - 1).rev() {
                self.swap(i, i + 1);
            }
        }
    }

    /// Removes and returns entry `at`. Moves the entries on the shorter side.
    pub(crate) fn remove(&mut self, at: usize) -> Option<T> {
        if at >= self.len {
            return None;
        }
        if at < self.len / 2 {
            for i in (0..at).rev() {
                self.swap(i, i + 1);
            }
            self.pop_front()
        } else {
            for i in at..self.len - 1 {
                self.swap(i, i + 1);
            }
            self.pop_back()
        }
    }

    /// The index of the first entry for which `pred` is false, the entries being
    /// partitioned (all `true` before all `false`), as `VecDeque::partition_point`.
    pub(crate) fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(x) if pred(x) => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// Binary search for `key` in entries sorted by `f`, as
    /// `VecDeque::binary_search_by_key`.
    ///
    /// # Errors
    /// `Err(i)`: `key` is absent and would be inserted at `i`.
    pub(crate) fn binary_search_by_key<K: Ord>(
        &self,
        key: &K,
        mut f: impl FnMut(&T) -> K,
    ) -> Result<usize, usize> {
        let at = self.partition_point(|x| f(x) < *key);
        match self.get(at) {
            Some(x) if f(x) == *key => Ok(at),
            _ => Err(at),
        }
    }

    /// The entries, front to back.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.blocks
            .iter()
            .flat_map(|b| b.iter())
            .skip(self.head)
            .take(self.len)
            .filter_map(Option::as_ref)
    }
}

/// Owning iterator: pops from the front.
pub(crate) struct IntoIter<T>(ChunkedDeque<T>);

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.0.pop_front()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.0.len, Some(self.0.len))
    }
}

impl<T> IntoIterator for ChunkedDeque<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        IntoIter(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the layout invariants and compares the contents with `model`.
    fn check(d: &ChunkedDeque<u64>, model: &VecDeque<u64>) {
        assert_eq!(d.len(), model.len());
        assert!(d.iter().eq(model.iter()), "{d:?} vs {model:?}");
        for (i, x) in model.iter().enumerate() {
            assert_eq!(d.get(i), Some(x));
        }
        assert_eq!(d.get(model.len()), None);
        assert_eq!(d.front(), model.front());
        assert_eq!(d.back(), model.back());
        if d.blocks.len() > 1 {
            assert!(d.blocks.iter().all(|b| b.len() == BLOCK_ENTRIES));
        }
        if d.len == 0 {
            assert!(d.blocks.len() <= 1 && d.head == 0);
        } else {
            // Every block holds an entry: no block is held for nothing.
            let last = (d.head + d.len - 1) / BLOCK_ENTRIES;
            assert_eq!(d.blocks.len(), last + 1, "blocks");
            assert!(d.head < d.blocks[0].len());
        }
        let filled = d.blocks.iter().flat_map(|b| b.iter()).flatten().count();
        assert_eq!(filled, d.len, "no stray entries");
    }

    /// A small deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn fifo_across_many_blocks_frees_blocks_as_it_drains() {
        let mut d = ChunkedDeque::new();
        assert_eq!(d.capacity(), 0);
        let n = 10 * BLOCK_ENTRIES as u64 + 7;
        for x in 0..n {
            d.push_back(x);
        }
        assert_eq!(d.len(), n as usize);
        assert_eq!(d.capacity(), 11 * BLOCK_ENTRIES);
        for x in 0..5 * BLOCK_ENTRIES as u64 {
            assert_eq!(d.pop_front(), Some(x));
        }
        assert_eq!(d.capacity(), 6 * BLOCK_ENTRIES);
        let rest: Vec<u64> = d.into_iter().collect();
        assert!(rest.into_iter().eq(5 * BLOCK_ENTRIES as u64..n));
    }

    #[test]
    fn a_small_deque_keeps_a_small_block() {
        let mut d = ChunkedDeque::new();
        for round in 0..10_000u64 {
            d.push_back(round);
            if d.len() > 3 {
                d.pop_front();
            }
        }
        assert_eq!(d.capacity(), FIRST_BLOCK_ENTRIES);
        while d.pop_front().is_some() {}
        assert_eq!(d.capacity(), FIRST_BLOCK_ENTRIES);
    }

    #[test]
    fn insert_and_remove_keep_order() {
        let mut d = ChunkedDeque::new();
        let mut model = VecDeque::new();
        for x in (0..3000).map(|x| x * 2) {
            d.push_back(x);
            model.push_back(x);
        }
        for x in [1, 2999, 5999, 3001, 4001, 7] {
            let at = d.partition_point(|&y| y < x);
            assert_eq!(at, model.partition_point(|&y| y < x));
            d.insert(at, x);
            model.insert(at, x);
            check(&d, &model);
        }
        for at in [0, 1, 2000, 1500, d.len() - 1] {
            assert_eq!(d.remove(at), model.remove(at));
            check(&d, &model);
        }
        assert_eq!(d.remove(d.len()), None);
        for key in [0, 1, 4000, 4003, 5999, 6000, 9999] {
            assert_eq!(
                d.binary_search_by_key(&key, |&y| y),
                model.binary_search_by_key(&key, |&y| y)
            );
        }
    }

    #[test]
    fn requeues_at_the_front_of_a_small_deque_keep_it_small() {
        let mut d = ChunkedDeque::new();
        let mut model = VecDeque::new();
        for x in 0..3u64 {
            d.push_back(x);
            model.push_back(x);
        }
        for x in 100..110u64 {
            d.push_front(x);
            model.push_front(x);
            check(&d, &model);
            d.push_back(x);
            model.push_back(x);
            check(&d, &model);
        }
        assert!(d.capacity() <= 4 * FIRST_BLOCK_ENTRIES, "{}", d.capacity());
    }

    #[test]
    fn push_front_on_a_small_block_grows_it() {
        let mut d = ChunkedDeque::new();
        let mut model = VecDeque::new();
        for x in 0..5 {
            d.push_back(x);
            model.push_back(x);
        }
        d.push_front(100);
        model.push_front(100);
        check(&d, &model);
        d.push_front(101);
        model.push_front(101);
        check(&d, &model);
    }

    #[test]
    fn randomized_against_vecdeque() {
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut d = ChunkedDeque::new();
            let mut model = VecDeque::new();
            let mut next = 0u64;
            for step in 0..20_000 {
                // Bias towards growth in the first half, shrinking in the second, so the
                // deque spans several blocks and drains back.
                let grow = if step < 10_000 { 6 } else { 3 };
                match rng.below(10) {
                    r if r < grow => {
                        let burst = 1 + rng.below(300);
                        for _ in 0..burst {
                            next += 1;
                            d.push_back(next);
                            model.push_back(next);
                        }
                    }
                    6 => {
                        let burst = 1 + rng.below(400);
                        for _ in 0..burst {
                            assert_eq!(d.pop_front(), model.pop_front());
                        }
                    }
                    7 => {
                        let at = rng.below(model.len() + 1);
                        next += 1;
                        d.insert(at, next);
                        model.insert(at, next);
                    }
                    8 => {
                        let at = rng.below(model.len() + 1);
                        assert_eq!(d.remove(at), model.remove(at));
                    }
                    _ => match rng.below(4) {
                        0 => {
                            next += 1;
                            d.push_front(next);
                            model.push_front(next);
                        }
                        1 => assert_eq!(d.pop_back(), model.pop_back()),
                        2 => {
                            if let (Some(a), Some(b)) = (d.back_mut(), model.back_mut()) {
                                *a += 1;
                                *b += 1;
                            }
                        }
                        _ => {
                            let i = rng.below(model.len() + 1);
                            if let (Some(a), Some(b)) = (d.get_mut(i), model.get_mut(i)) {
                                *a ^= 1;
                                *b ^= 1;
                            }
                        }
                    },
                }
                if step % 97 == 0 {
                    check(&d, &model);
                }
            }
            check(&d, &model);
            while let Some(x) = model.pop_front() {
                assert_eq!(d.pop_front(), Some(x));
            }
            check(&d, &model);
            assert!(d.capacity() <= BLOCK_ENTRIES);
        }
    }
}
