//! Looking into a queue without consuming it (peek, search) and taking chosen ready
//! messages out of it one at a time (dead-letter replay): operations RabbitMQ's
//! management API does not have (docs/http-api.md, "Beyond RabbitMQ").
//!
//! Peek and search never change what they look at: no redelivered flag, no delivery
//! count, no position, no counter moves, and a paged-out body is read from the store into
//! the answer only, never paged in (the queue's memory accounting stays as it was). They
//! copy a bounded chunk of entries under the queue lock (shared message pointers, or the
//! record of a paged-out one) and read and match outside it, so a long scan does not hold
//! up publishers and consumers.
//!
//! Positions are 0-based from the head in delivery order: the highest priority level
//! first, each level oldest first, as dispatch offers them ([`super::ready`]).

use super::ready::Ready;
use super::Queue;
use crate::broker::message::Message;
use crate::storage::RecordRef;
use std::sync::Arc;

/// Most messages one peek returns (a larger `count` is refused).
pub const PEEK_COUNT_MAX: usize = 1000;

/// Body bytes one peek or search answer holds at most, in bytes: past them it stops
/// (always with at least one message), and the caller pages on from the next position.
/// A thousand 16 MiB messages would otherwise be read into memory at once.
pub const PEEK_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Most messages one search looks at, in messages; the answer says where to go on.
pub const SEARCH_SCAN_MAX: usize = 100_000;

/// Most matches one search returns, in messages.
pub const SEARCH_LIMIT_MAX: usize = 1000;

/// Entries a search copies under the queue lock at a time, in messages: the lock is held
/// for one copy of this many pointers, then matching runs without it.
pub const SEARCH_CHUNK_MESSAGES: usize = 256;

/// A ready message as peek and search show it.
#[derive(Debug, Clone)]
pub struct Peeked {
    /// Its position, 0-based from the head in delivery order, when it was looked at.
    pub position: usize,
    /// Delivered before (AMQP `redelivered`).
    pub redelivered: bool,
    /// Deliveries so far (`x-delivery-limit` counts these).
    pub delivery_count: u32,
    /// The message (read from the store when it was paged out).
    pub msg: Arc<Message>,
}

/// What a peek saw.
#[derive(Debug, Clone, Default)]
pub struct PeekPage {
    /// Ready messages in the queue when it looked.
    pub ready: usize,
    /// The messages from the requested position on, in delivery order.
    pub items: Vec<Peeked>,
}

/// What a search found.
#[derive(Debug, Clone, Default)]
pub struct SearchPage {
    /// The matches, in delivery order.
    pub items: Vec<Peeked>,
    /// Messages looked at.
    pub scanned: usize,
    /// Where the next page starts (`None`: the scan reached the end of the queue).
    pub next_offset: Option<usize>,
    /// Ready messages in the queue when the scan ended.
    pub ready: usize,
}

/// Where a copied entry's body is.
enum Held {
    /// Shared with the queue.
    Memory(Arc<Message>),
    /// Only in the store: its record and body size.
    Paged(RecordRef, usize),
}

/// An entry copied under the queue lock, read and matched after it is released.
struct Copied {
    position: usize,
    redelivered: bool,
    delivery_count: u32,
    held: Held,
}

/// A ready message taken out of its queue by replay: still stored (its record is settled
/// only once it is safe in its target), put back with [`Queue::put_back`] when it cannot
/// go.
#[derive(Debug)]
pub struct TakenReady {
    level: u8,
    deadline_ms: Option<u64>,
    ready: Ready,
}

impl TakenReady {
    /// Its record in the queue's store, if it is stored.
    pub fn record(&self) -> Option<RecordRef> {
        self.ready.record()
    }
}

impl Queue {
    /// Copies up to `count` entries from position `offset` (lock held only for the copy);
    /// returns them and the number of ready messages.
    fn copy_ready(&self, offset: usize, count: usize) -> (usize, Vec<Copied>) {
        let st = self.lock();
        let items = st
            .ready
            .walk_from(offset)
            .take(count)
            .filter_map(|(position, _, r)| {
                let held = match (r.message(), r.paged_record()) {
                    (Some(m), _) => Held::Memory(Arc::clone(m)),
                    (None, Some((record, size))) => Held::Paged(record, size),
                    // An entry is in memory or paged out: not reached.
                    (None, None) => return None,
                };
                Some(Copied {
                    position,
                    redelivered: r.redelivered(),
                    delivery_count: r.delivery_count(),
                    held,
                })
            })
            .collect();
        (st.ready.len(), items)
    }

    /// The message of a copied entry, read from the store when paged out (no queue lock
    /// held). `None` when its record is gone meanwhile (consumed since the copy).
    fn read_copied(&self, c: Copied) -> Option<Peeked> {
        let msg = match c.held {
            Held::Memory(m) => m,
            Held::Paged(record, size) => {
                let read = self.storage.as_ref()?.read(record);
                match read {
                    Ok(m) if m.body_size() == size => {
                        self.with_count_header(Arc::new(m), c.delivery_count)
                    }
                    Ok(_) | Err(_) => {
                        log::debug!(
                            "queue '{}': a message at position {} left before it was read",
                            self.name,
                            c.position
                        );
                        return None;
                    }
                }
            }
        };
        Some(Peeked {
            position: c.position,
            redelivered: c.redelivered,
            delivery_count: c.delivery_count,
            msg,
        })
    }

    /// Reads up to `count` ready messages from position `offset` in delivery order,
    /// without consuming or changing them (see the module doc). The caller bounds `count`
    /// ([`PEEK_COUNT_MAX`]).
    pub fn peek(&self, offset: usize, count: usize) -> PeekPage {
        let (ready, copied) = self.copy_ready(offset, count);
        let mut items = Vec::with_capacity(copied.len());
        let mut bytes = 0usize;
        for c in copied {
            if bytes >= PEEK_BODY_BYTES_MAX {
                break;
            }
            if let Some(p) = self.read_copied(c) {
                bytes += p.msg.body_size();
                items.push(p);
            }
        }
        PeekPage { ready, items }
    }

    /// Looks at up to `scan_max` ready messages from position `offset` and returns up to
    /// `limit` of those `matches` accepts, copying [`SEARCH_CHUNK_MESSAGES`] entries at a
    /// time under the lock and matching outside it. Messages that move meanwhile may be
    /// seen twice or not at all: a search is a look, not a snapshot. The caller bounds
    /// `scan_max` ([`SEARCH_SCAN_MAX`]) and `limit` ([`SEARCH_LIMIT_MAX`]).
    pub fn search(
        &self,
        offset: usize,
        scan_max: usize,
        limit: usize,
        matches: impl Fn(&Message) -> bool,
    ) -> SearchPage {
        let mut page = SearchPage::default();
        let mut next = offset;
        // Found bodies held, in bytes: past PEEK_BODY_BYTES_MAX the page is full.
        let mut bytes = 0usize;
        let limit_of = |found: usize, bytes: usize| found >= limit || bytes >= PEEK_BODY_BYTES_MAX;
        loop {
            let want = SEARCH_CHUNK_MESSAGES.min(scan_max - page.scanned);
            if want == 0 || limit_of(page.items.len(), bytes) {
                page.next_offset = Some(next);
                break;
            }
            let (ready, copied) = self.copy_ready(next, want);
            page.ready = ready;
            let got = copied.len();
            for c in copied {
                let position = c.position;
                page.scanned += 1;
                next = position + 1;
                if let Some(p) = self.read_copied(c) {
                    if matches(&p.msg) {
                        bytes += p.msg.body_size();
                        page.items.push(p);
                    }
                }
                if limit_of(page.items.len(), bytes) {
                    break;
                }
            }
            if got < want && !limit_of(page.items.len(), bytes) {
                page.next_offset = None;
                break;
            }
            if next >= ready && !limit_of(page.items.len(), bytes) {
                page.next_offset = None;
                break;
            }
        }
        page
    }

    /// The (position, level, queue sequence number) of the ready messages at `positions`
    /// (those past the end are left out), or of the first `count` when `positions` is
    /// `None`; and the number of ready messages. Sequence numbers identify the messages
    /// while others come and go.
    pub fn locate(&self, positions: Option<&[usize]>, count: usize) -> (usize, Vec<Located>) {
        let st = self.lock();
        let found = match positions {
            None => st
                .ready
                .walk_from(0)
                .take(count)
                .map(|(position, level, r)| Located {
                    position,
                    level,
                    seq: r.seq,
                })
                .collect(),
            Some(wanted) => {
                let mut wanted = wanted.to_vec();
                wanted.sort_unstable();
                wanted.dedup();
                let mut out = Vec::with_capacity(wanted.len());
                let mut want = wanted.into_iter().peekable();
                if let Some(&first) = want.peek() {
                    for (position, level, r) in st.ready.walk_from(first) {
                        match want.peek() {
                            None => break,
                            Some(&w) if w == position => {
                                out.push(Located {
                                    position,
                                    level,
                                    seq: r.seq,
                                });
                                want.next();
                            }
                            Some(_) => {}
                        }
                    }
                }
                out
            }
        };
        (st.ready.len(), found)
    }

    /// Takes the ready message `at` out of the ready list, keeping its stored record (see
    /// [`TakenReady`]); `None` when it is no longer ready (consumed, expired, purged).
    pub fn take_ready(&self, at: &Located) -> Option<TakenReady> {
        let mut st = self.lock();
        let ready = st.ready.remove(vec![(at.level, at.seq)]).pop()?;
        st.stats.remove_ready(&ready);
        let deadline_ms = st.expiry.remove(at.seq);
        self.publish_deadline(&st);
        Some(TakenReady {
            level: at.level,
            deadline_ms,
            ready,
        })
    }

    /// The message of a taken entry, read from the store when it was paged out (`None`,
    /// logged, when it cannot be read).
    pub fn message_of(&self, t: &TakenReady) -> Option<Arc<Message>> {
        let msg = self.body_of(&t.ready)?;
        if t.ready.is_paged() {
            Some(self.with_count_header(msg, t.ready.delivery_count()))
        } else {
            Some(msg)
        }
    }

    /// Puts a taken message back where it was (its queue sequence number keeps its place,
    /// its flags and deadline are unchanged) and dispatches. On a deleted queue it is
    /// dropped.
    pub fn put_back(self: &Arc<Self>, t: TakenReady) {
        let mut st = self.lock();
        if st.deleted {
            return;
        }
        let seq = t.ready.seq;
        st.stats.add_ready(&t.ready);
        st.ready.insert(t.level, t.ready);
        if let Some(d) = t.deadline_ms {
            st.expiry.insert(seq, t.level, d);
        }
        self.dispatch_locked(&mut st);
        self.publish_deadline(&st);
    }
}

/// A ready message found by [`Queue::locate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// Its position when located.
    pub position: usize,
    /// Its priority level.
    level: u8,
    /// Its queue sequence number.
    seq: u64,
}
