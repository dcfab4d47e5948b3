//! The expiry index of a queue: its ready messages that have a deadline (`x-message-ttl`
//! or a per-message `expiration`), by deadline, so a message expires on time wherever it
//! is in the queue, not only when it reaches the head (docs/lifecycle.md, "TTL").
//!
//! Deadlines are wall-clock ms since the Unix epoch, so a stored message's deadline
//! (its store timestamp + TTL) means the same after a restart.

use std::collections::{BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Ready messages with a deadline: (deadline, seq) in order, and each seq's deadline and
/// priority level.
#[derive(Debug, Default)]
pub(crate) struct ExpiryIndex {
    by_deadline: BTreeSet<(u64, u64)>,
    by_seq: HashMap<u64, (u64, u8)>,
}

impl ExpiryIndex {
    /// Adds message `seq` at priority `level`, due at `deadline_ms`.
    pub(crate) fn insert(&mut self, seq: u64, level: u8, deadline_ms: u64) {
        if let Some((old, _)) = self.by_seq.insert(seq, (deadline_ms, level)) {
            self.by_deadline.remove(&(old, seq));
        }
        self.by_deadline.insert((deadline_ms, seq));
    }

    /// Forgets message `seq` (delivered, dropped); returns its deadline.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<u64> {
        if self.by_seq.is_empty() {
            // The common case (no TTLs): skip hashing.
            return None;
        }
        let (deadline, _) = self.by_seq.remove(&seq)?;
        self.by_deadline.remove(&(deadline, seq));
        Some(deadline)
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<u64> {
        self.by_deadline.first().map(|&(d, _)| d)
    }

    /// Whether message `seq` is due at `now_ms`.
    pub(crate) fn is_due(&self, seq: u64, now_ms: u64) -> bool {
        self.by_seq.get(&seq).is_some_and(|&(d, _)| d <= now_ms)
    }

    /// Takes every message due at `now_ms`, as (level, seq), earliest first.
    pub(crate) fn take_due(&mut self, now_ms: u64) -> Vec<(u8, u64)> {
        let mut out = Vec::new();
        while let Some(&(deadline, seq)) = self.by_deadline.first() {
            if deadline > now_ms {
                break;
            }
            self.by_deadline.pop_first();
            if let Some((_, level)) = self.by_seq.remove(&seq) {
                out.push((level, seq));
            }
        }
        out
    }

    /// Messages in the index.
    pub(crate) fn len(&self) -> usize {
        self.by_seq.len()
    }

    /// Forgets everything (purge, deletion).
    pub(crate) fn clear(&mut self) {
        self.by_deadline.clear();
        self.by_seq.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_messages_come_out_earliest_first_wherever_they_were_added() {
        let mut x = ExpiryIndex::default();
        x.insert(1, 0, 500);
        x.insert(2, 3, 100);
        x.insert(3, 0, 300);
        x.insert(4, 0, 900);
        assert_eq!(x.next(), Some(100));
        assert!(x.is_due(3, 300) && !x.is_due(3, 299) && !x.is_due(9, 1000));
        assert_eq!(x.take_due(499), [(3, 2), (0, 3)]);
        assert_eq!(x.remove(4), Some(900));
        assert_eq!(x.remove(4), None);
        assert_eq!(x.len(), 1);
        assert_eq!(x.take_due(u64::MAX), [(0, 1)]);
        assert_eq!(x.next(), None);
    }

    #[test]
    fn reinserting_moves_the_deadline() {
        let mut x = ExpiryIndex::default();
        x.insert(1, 0, 500);
        x.insert(1, 0, 50);
        assert_eq!(x.len(), 1);
        assert_eq!(x.take_due(60), [(0, 1)]);
        assert!(x.take_due(u64::MAX).is_empty());
    }
}
