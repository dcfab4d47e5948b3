//! A queue: ready messages in FIFO order (per priority level), its consumers, round-robin
//! dispatch, and the timed parts of the message lifecycle (TTL, `x-expires`).
//!
//! Each queue has its own mutex (docs/architecture.md §8). Dispatch runs under it and offers the
//! head message to consumers in round-robin order (AMQP 0-9-1 §3.1.4 "round-robin
//! between consumers"); a consumer whose prefetch is reached or whose connection's
//! outbound buffer is saturated is skipped. Every message carries a queue sequence
//! number, so a requeued message goes back to its original position, ahead of newer
//! ones (RabbitMQ's behaviour since 2.7). A priority queue (`x-max-priority`) offers its
//! highest-priority message first ([`crate::broker::queue::ready`]).
//!
//! Memory budget: a queue keeps the bodies of its ready messages in memory up to
//! [`Queue::memory_bytes_max`]. Past it, a persistent message of a stored queue keeps only
//! its place in the store (record, body size: it is *paged out*) and is read back from its
//! segment when it reaches the head and is offered, so a backlog is bounded by disk, not RAM
//! (docs/storage.md, "Memory budget").
//!
//! TTL: a message with a deadline (`x-message-ttl`, `expiration`) is in the queue's
//! expiry index. A message due at the head is never offered: dispatch moves it aside, and
//! the housekeeper ([`crate::broker::housekeeping`]) takes every due message, wherever it
//! is, with [`Queue::expire`] (docs/lifecycle.md).

pub mod args;
pub(crate) mod chunked_deque;
pub(crate) mod consumers;
pub mod expiry;
pub mod inspect;
pub mod length_limit;
pub mod queue_type;
pub mod ready;
pub mod settings;
pub mod storage;

use crate::broker::channel::Offer;
use crate::broker::consumer::Consumer;
use crate::broker::dead_letter::DeadLetter;
use crate::broker::delayed::schedule::{DelaySchedule, DueTarget};
use crate::broker::message::Message;
use crate::broker::queue::args::{effective_ttl_ms, LifecycleArgs};
use crate::broker::queue::consumers::ConsumerSet;
use crate::broker::queue::expiry::{now_ms, ExpiryIndex};
use crate::broker::queue::length_limit::{LengthLimit, Overflow};
use crate::broker::queue::queue_type::{QueueType, QUORUM_PRIORITY_DEFAULT, QUORUM_PRIORITY_MAX};
use crate::broker::queue::ready::{Ready, ReadyList};
use crate::broker::queue::settings::QueueSettings;
use crate::broker::queue::storage::QueueStorage;
use crate::error::BrokerError;
use crate::limits::{CONSUMER_TIMEOUT_MS_DEFAULT, QUEUE_MEMORY_BYTES_DEFAULT};
use crate::storage::flusher::SyncWaiter;
use crate::storage::queue_store::Recovered;
use crate::storage::RecordRef;
use crate::types::{FieldTable, FieldValue};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// A message taken from a queue (delivered or got, held by its channel until settled): its
/// position and whether it was delivered before. Its body is always in memory.
#[derive(Debug, Clone)]
pub struct QueuedMessage {
    /// Position in the queue, increasing with each enqueue.
    pub seq: u64,
    /// The shared message.
    pub msg: Arc<Message>,
    /// Delivered at least once before (AMQP `redelivered`).
    pub redelivered: bool,
    /// Where the message is stored (a persistent message in a durable queue).
    pub record: Option<RecordRef>,
    /// Deliveries so far, this one included once it is handed out (`x-delivery-limit`).
    pub delivery_count: u32,
    /// When it expires if it comes back ready, ms since the Unix epoch (a requeued message
    /// keeps its deadline, as in RabbitMQ).
    pub deadline_ms: Option<u64>,
}

/// What became of a message offered to a queue.
#[derive(Debug)]
pub enum Enqueued {
    /// Taken; `sync` is the epoch a publisher confirm must wait for, if any.
    Accepted {
        /// Flusher epoch covering the stored record (`--fsync always`).
        sync: Option<u64>,
        /// Messages a length limit dropped from the head to make room, to dead-letter
        /// (reason `maxlen`; empty when the queue has no dead-letter exchange).
        dropped: Vec<Leaving>,
        /// The message itself when its TTL is 0 and no consumer took it at once (RabbitMQ
        /// expires such a message on arrival), with any other message already due, to
        /// dead-letter (reason `expired`; empty without a dead-letter exchange).
        expired: Vec<Leaving>,
    },
    /// The queue was deleted meanwhile; the message was not taken.
    Gone,
    /// The queue could not store the persistent message (storage failure, full disk), or
    /// it is full (`x-overflow reject-publish`).
    Refused(String),
    /// The queue is full and `x-overflow` is `reject-publish-dlx`: the message is refused
    /// (nacked) and dead-lettered (reason `maxlen`).
    RefusedToDeadLetter(String),
}

/// A message leaving its queue to be dead-lettered (expired, dropped by a length limit,
/// past its delivery limit). Its stored record is still valid: settle it with
/// [`Queue::settle_records`] once the dead letter is in its targets, so a crash in between
/// leaves it in both, never in neither (at-least-once; docs/lifecycle.md).
#[derive(Debug, Clone)]
pub struct Leaving {
    /// The message as it was in the queue.
    pub msg: Arc<Message>,
    /// Its record in the queue's store, when it is stored.
    pub record: Option<RecordRef>,
}

impl Leaving {
    /// A message that was never stored in the queue it leaves.
    pub fn unstored(msg: Arc<Message>) -> Leaving {
        Leaving { msg, record: None }
    }
}

/// Counters of a queue since it was declared, for listings and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages ready for delivery.
    pub ready: usize,
    /// Body bytes of ready messages.
    pub ready_bytes: usize,
    /// Messages delivered and not yet acked.
    pub unacked: usize,
    /// Consumers attached.
    pub consumers: usize,
    /// Messages enqueued.
    pub published: u64,
    /// Messages delivered (pushed or got).
    pub delivered: u64,
    /// Of those, pushed to consumers without acks (RabbitMQ's `deliver_no_ack`).
    pub delivered_no_ack: u64,
    /// Of those, fetched by `basic.get` awaiting an ack (RabbitMQ's `get`).
    pub got: u64,
    /// Of those, fetched by `basic.get` without an ack (RabbitMQ's `get_no_ack`).
    pub got_no_ack: u64,
    /// `basic.get` requests that found the queue empty (RabbitMQ's `get_empty`).
    pub get_empty: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Deliveries (pushed or got) of messages delivered before (RabbitMQ's `redeliver`).
    pub redelivered: u64,
    /// Body bytes of ready messages held in memory (the rest are paged out).
    pub ready_memory_bytes: usize,
    /// Ready messages whose body is only in the store (paged out).
    pub ready_paged: usize,
    /// Paged-out messages dropped because their record could not be read back.
    pub unreadable: u64,
    /// Messages dropped by a length limit (`x-overflow drop-head`) or past their delivery
    /// limit (dead-lettered or not).
    pub dropped: u64,
    /// Messages removed because their TTL passed.
    pub expired: u64,
    /// Publishes a full queue refused (`x-overflow reject-publish` / `reject-publish-dlx`).
    pub refused: u64,
    /// Returned messages waiting for their delayed retry (a quorum queue's
    /// `delayed-retry-type`): in the queue, not ready yet.
    pub delayed: usize,
}

impl QueueStats {
    /// Counts a message entering the ready list.
    fn add_ready(&mut self, r: &Ready) {
        let size = r.body_size();
        self.ready_bytes += size;
        if r.is_paged() {
            self.ready_paged += 1;
        } else {
            self.ready_memory_bytes += size;
        }
    }

    /// Counts a message leaving the ready list.
    fn remove_ready(&mut self, r: &Ready) {
        let size = r.body_size();
        self.ready_bytes -= size;
        if r.is_paged() {
            self.ready_paged -= 1;
        } else {
            self.ready_memory_bytes -= size;
        }
    }

    /// Counts a ready message's body leaving memory.
    fn paged_out(&mut self, size: usize) {
        self.ready_memory_bytes -= size;
        self.ready_paged += 1;
    }
}

#[derive(Debug, Default)]
struct QueueState {
    /// Ready messages, by priority level then `seq`.
    ready: ReadyList,
    /// Ready messages with a deadline.
    expiry: ExpiryIndex,
    /// Expired messages dispatch found at the head and moved aside (no longer counted as
    /// ready), waiting for the housekeeper to dead-letter and settle them.
    expired_aside: Vec<Ready>,
    next_seq: u64,
    /// The message being enqueued and its deadline, while `enqueue` dispatches it: it is
    /// not in the expiry index yet (a consumer ready now takes even a TTL-0 message), but
    /// a delivery of it must carry its deadline back if it is requeued.
    fresh: Option<(u64, u64)>,
    /// Consumers, in the order messages are offered to them.
    consumers: ConsumerSet,
    deleted: bool,
    /// A consumer was attached at some point (auto-delete fires only after one).
    had_consumers: bool,
    stats: QueueStats,
    /// Returned messages waiting for their delayed retry (a quorum queue's
    /// `delayed-retry-type`), by (due time in ms since the Unix epoch, seq).
    delayed: BTreeMap<(u64, u64), QueuedMessage>,
    /// The due time handed to the delay timer and not fired yet (0: none).
    delayed_scheduled_ms: u64,
}

/// One queue of a virtual host.
#[derive(Debug)]
pub struct Queue {
    /// Queue name.
    pub name: Arc<str>,
    /// Declared durable (kept across restarts by the store).
    pub durable: bool,
    /// Declared exclusive: usable only by `owner`, deleted when it closes.
    pub exclusive: bool,
    /// Deleted when its last consumer goes (after it had one).
    pub auto_delete: bool,
    /// The connection that owns an exclusive queue.
    pub owner: Option<u64>,
    /// Arguments as declared.
    pub arguments: FieldTable,
    /// `classic` or `quorum` (its `x-queue-type` argument).
    pub queue_type: QueueType,
    /// Id of the stored queue in `meta.db` (durable, non-exclusive queues of a broker with
    /// storage); also the name of its directory.
    pub storage_id: Option<String>,
    /// The message store of a stored queue (`None` also when it could not be opened at
    /// start: persistent publishes to it are then refused).
    pub storage: Option<QueueStorage>,
    /// Body bytes of ready messages kept in memory before stored ones are paged out
    /// (`--queue-memory-bytes`). Set before the queue is shared.
    pub memory_bytes_max: usize,
    /// `x-message-ttl`, `x-expires`, `x-max-priority`, `x-consumer-timeout`,
    /// `x-delivery-limit` as declared (the arguments alone; what the queue acts on is
    /// [`Queue::settings`], which merges its policy in).
    pub declared: LifecycleArgs,
    /// The effective settings: arguments merged with the policy that applies
    ///, replaced whole when a policy changes. A leaf lock: held only to
    /// clone or swap the `Arc`.
    settings: RwLock<Arc<QueueSettings>>,
    /// Time a delivery from this queue may stay unacked before its consumer is cancelled
    /// and it is requeued, in ms (0 = never): `x-consumer-timeout` when declared, else the
    /// server's `--consumer-timeout-ms` ([`Queue::resolve_consumer_timeout`], called
    /// before the queue is shared; docs/lifecycle.md, "Consumer timeout").
    pub consumer_timeout_ms: u64,
    /// The earliest moment the housekeeper has work here, ms since the Unix epoch
    /// (`u64::MAX`: none; 0: expired messages are waiting). Read without the lock.
    next_deadline_ms: AtomicU64,
    /// When the queue was last used (declared, consumed from, got from, or its last
    /// consumer left), ms since the Unix epoch: `x-expires` counts from here.
    last_used_ms: AtomicU64,
    /// Paused by an operator: consumers stay attached and dispatch offers them nothing
    /// until it is resumed (docs/lifecycle.md, "Pausing a queue"). Written under the
    /// queue lock, so a dispatch sees it before it offers a message; read without it by
    /// listings.
    paused: AtomicBool,
    state: Mutex<QueueState>,
    /// The broker's delay timer, for delayed retries (set before the queue is shared; a
    /// queue without one releases its delayed retries only when
    /// [`Queue::release_delayed`] is called).
    pub delay_schedule: Option<Arc<DelaySchedule>>,
}

/// The message with its `x-delivery-count` header set to `count` (a copy: messages are
/// shared between queues and immutable).
fn with_delivery_count(msg: &Arc<Message>, count: u32) -> Arc<Message> {
    let mut properties = msg.properties().clone();
    properties
        .headers
        .get_or_insert_with(FieldTable::new)
        .insert("x-delivery-count".into(), FieldValue::I64(i64::from(count)));
    Arc::new(Message::with_names(
        Arc::clone(msg.names()),
        properties.into_boxed(),
        msg.body.clone(),
    ))
}

/// Settlements waiting for the writes of their dead letters ([`Queue::settle_records_after`]);
/// called on the flusher thread.
struct SettleAfter {
    queue: Arc<Queue>,
    records: Mutex<Vec<RecordRef>>,
    epoch: u64,
}

impl SyncWaiter for SettleAfter {
    fn synced(&self, synced: u64) -> bool {
        if synced < self.epoch {
            return true;
        }
        let records = std::mem::take(&mut *self.records.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(storage) = &self.queue.storage {
            for record in records {
                storage.settle_soon(&self.queue.name, record);
            }
        }
        false
    }

    fn failed(&self, epoch: u64) -> bool {
        if epoch < self.epoch {
            return true;
        }
        log::warn!(
            "queue '{}': {} dead-lettered message(s) kept in the queue's store: the write \
             to their target failed",
            self.queue.name,
            self.records.lock().unwrap_or_else(|e| e.into_inner()).len()
        );
        false
    }
}

/// Whether queue `arguments` ask for a single active consumer.
fn single_active(arguments: &FieldTable) -> bool {
    matches!(
        arguments.get("x-single-active-consumer"),
        Some(FieldValue::Bool(true))
    )
}

/// What removing a consumer left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerRemoved {
    /// No consumer with that tag on that channel.
    NotFound,
    /// Removed; the queue stays.
    Removed,
    /// Removed, and it was the last consumer of an auto-delete queue: delete the queue.
    LastOfAutoDelete,
}

impl Queue {
    /// A new empty queue.
    pub fn new(
        name: Arc<str>,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        owner: Option<u64>,
        arguments: FieldTable,
    ) -> Queue {
        // Validated at declare; a stored queue whose arguments no longer parse (an older
        // version's) recovers without them rather than not at all.
        let queue_type = QueueType::of(&arguments);
        let lifecycle = LifecycleArgs::for_type(&arguments, queue_type).unwrap_or_default();
        let ready = match queue_type {
            QueueType::Classic => ReadyList::new(lifecycle.max_priority),
            QueueType::Quorum => {
                ReadyList::with_default_level(QUORUM_PRIORITY_MAX, QUORUM_PRIORITY_DEFAULT)
            }
        };
        let state = QueueState {
            ready,
            consumers: ConsumerSet::new(single_active(&arguments), queue_type == QueueType::Quorum),
            ..QueueState::default()
        };
        Queue {
            name,
            durable,
            exclusive,
            auto_delete,
            owner,
            queue_type,
            storage_id: None,
            storage: None,
            memory_bytes_max: QUEUE_MEMORY_BYTES_DEFAULT,
            settings: RwLock::new(Arc::new(QueueSettings::effective(&arguments, None, None))),
            consumer_timeout_ms: lifecycle
                .consumer_timeout_ms
                .unwrap_or(CONSUMER_TIMEOUT_MS_DEFAULT),
            declared: lifecycle,
            arguments,
            next_deadline_ms: AtomicU64::new(u64::MAX),
            last_used_ms: AtomicU64::new(now_ms()),
            paused: AtomicBool::new(false),
            state: Mutex::new(state),
            delay_schedule: None,
        }
    }

    /// Sets [`Queue::consumer_timeout_ms`]: the queue's `x-consumer-timeout` when it has
    /// one, else `server_default_ms` (`--consumer-timeout-ms`; 0 = never).
    pub fn resolve_consumer_timeout(&mut self, server_default_ms: u64) {
        self.consumer_timeout_ms = self
            .declared
            .consumer_timeout_ms
            .unwrap_or(server_default_ms);
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The effective settings in force (arguments merged with the queue's policy).
    pub fn settings(&self) -> Arc<QueueSettings> {
        Arc::clone(&self.settings.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Where the queue dead-letters, if anywhere (effective setting).
    pub fn dead_letter(&self) -> Option<DeadLetter> {
        self.settings().dead_letter.clone()
    }

    /// Replaces the effective settings (a policy was set, changed or cleared) and applies them to what the queue holds now, as RabbitMQ 3.10 does: a
    /// lower length limit with `drop-head` drops from the head at once (returned for
    /// dead-lettering, reason `maxlen`; `reject-publish` keeps what is queued and refuses
    /// new publishes); an `expires` lease starts again; a new TTL applies to messages
    /// published from now on (RabbitMQ computes a message's expiry when it is queued).
    pub fn apply_settings(&self, settings: QueueSettings) -> Vec<Leaving> {
        let limit = settings.length_limit;
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(settings);
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
        let mut st = self.lock();
        if st.deleted || !limit.is_set() || limit.overflow != Overflow::DropHead {
            return Vec::new();
        }
        let dropped = self.drop_head_over(&mut st, limit);
        self.publish_deadline(&st);
        dropped
    }

    /// Checks that connection `connection_id` may use this queue.
    ///
    /// # Errors
    /// 405 RESOURCE_LOCKED when the queue is exclusive to another connection (RabbitMQ's
    /// text).
    pub fn check_access(&self, connection_id: u64, vhost: &str) -> Result<(), BrokerError> {
        match self.owner {
            Some(owner) if owner != connection_id => Err(BrokerError::resource_locked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '{vhost}'. It \
                 could be originally declared on another connection or the exclusive \
                 property value does not match that of the original declaration.",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Appends a message and dispatches. A persistent message (delivery mode 2) of a
    /// stored queue is written to the queue's store first; the returned epoch tells when it
    /// is fsynced.
    pub fn enqueue(self: &Arc<Self>, msg: Arc<Message>) -> Enqueued {
        let mut st = self.lock();
        if st.deleted {
            return Enqueued::Gone;
        }
        let settings = self.settings();
        let limit = settings.length_limit;
        if limit.overflow != Overflow::DropHead
            && limit.exceeded(st.ready.len() + 1, st.stats.ready_bytes + msg.body_size())
        {
            st.stats.refused += 1;
            let text = format!(
                "queue '{}' is full (x-overflow {})",
                self.name,
                limit.overflow.as_str()
            );
            return match limit.overflow {
                Overflow::RejectPublishDlx => Enqueued::RefusedToDeadLetter(text),
                _ => Enqueued::Refused(text),
            };
        }
        let ttl = effective_ttl_ms(settings.lifecycle.message_ttl_ms, msg.properties());
        // A quorum queue stores every message, whatever its delivery mode (RabbitMQ).
        let stored = self.storage_id.is_some()
            && (msg.properties().is_persistent() || self.queue_type == QueueType::Quorum);
        let now = if ttl.is_some() || stored { now_ms() } else { 0 };
        let mut written = None;
        let mut record = None;
        if stored {
            let Some(storage) = &self.storage else {
                return Enqueued::Refused(format!(
                    "queue '{}' is out of service: its store could not be opened",
                    self.name
                ));
            };
            match storage.append(&self.name, &msg, now) {
                Ok((r, w)) => {
                    record = Some(r);
                    written = Some(w);
                }
                Err(text) => return Enqueued::Refused(text),
            }
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.stats.published += 1;
        let level = st.ready.level_of_message(&msg);
        let entry = Ready::in_memory(seq, false, 0, msg, record);
        st.stats.add_ready(&entry);
        st.ready.push_back(level, entry);
        // A consumer ready now takes even a message whose TTL is 0 (RabbitMQ): the deadline
        // enters the index after this dispatch; one nobody took may be due at once.
        let deadline = ttl.map(|ttl| now.saturating_add(ttl));
        st.fresh = deadline.map(|d| (seq, d));
        self.dispatch_locked(&mut st);
        st.fresh = None;
        let mut expired_now = Vec::new();
        if let Some(d) = deadline {
            if st.ready.get_mut(level, seq).is_some() {
                st.expiry.insert(seq, level, d);
                // Due already (a TTL of 0) and nobody took it: it expires on arrival, as
                // in RabbitMQ, rather than at the housekeeper's next pass.
                if d <= now {
                    let due = st.expiry.take_due(now);
                    expired_now = st.ready.remove(due);
                    for r in &expired_now {
                        st.stats.remove_ready(r);
                    }
                    st.stats.expired += expired_now.len() as u64;
                }
            }
        }
        let mut dropped = Vec::new();
        if limit.is_set() && limit.overflow == Overflow::DropHead {
            dropped = self.drop_head_over(&mut st, limit);
        }
        // Over the budget, the newest message (still ready: nobody could take it) leaves
        // memory; the older ones, nearer the head, stay.
        if st.stats.ready_memory_bytes > self.memory_bytes_max {
            if let Some(size) = st.ready.back_mut(level).and_then(Ready::page_out) {
                st.stats.paged_out(size);
            }
        }
        self.publish_deadline(&st);
        drop(st);
        let sync = match (&self.storage, written) {
            (Some(storage), Some(w)) => storage.submit(w),
            _ => None,
        };
        let mut expired = Vec::new();
        for r in expired_now {
            self.leave(r, &mut expired);
        }
        Enqueued::Accepted {
            sync,
            dropped,
            expired,
        }
    }

    /// Puts the messages recovered from the store in the queue, in order (start-up only).
    /// Bodies are kept in memory while they fit in the budget; the others are paged out
    /// (a delivered-before message comes back redelivered). Deadlines count from when each
    /// message was first stored, so a message whose TTL passed while the broker was down
    /// expires at the housekeeper's first round.
    pub fn restore(&self, messages: impl IntoIterator<Item = Recovered>) {
        let queue_ttl_ms = self.settings().lifecycle.message_ttl_ms;
        let mut st = self.lock();
        for m in messages {
            let seq = st.next_seq;
            st.next_seq += 1;
            let (entry, level, deadline) = match m {
                Recovered::Loaded(m) => {
                    let m = *m;
                    let (record, redelivered, count) = (
                        m.record,
                        m.delivery_count > 0,
                        self.recovered_count(m.delivery_count),
                    );
                    let level = st.ready.level_of(m.properties.priority);
                    let deadline = effective_ttl_ms(queue_ttl_ms, &m.properties)
                        .map(|ttl| m.timestamp_ms.saturating_add(ttl));
                    let size = m.body.len();
                    let fits = st.stats.ready_memory_bytes + size <= self.memory_bytes_max;
                    let entry = if fits {
                        let msg =
                            Message::from_stored(&m.exchange, &m.routing_key, m.properties, m.body);
                        let msg = self.with_count_header(Arc::new(msg), count);
                        Ready::in_memory(seq, redelivered, count, msg, Some(record))
                    } else {
                        Ready::paged(seq, redelivered, count, record, size)
                    };
                    (entry, level, deadline)
                }
                Recovered::Paged(p) => {
                    let ttl = match (queue_ttl_ms, p.expiration_ms) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let entry = Ready::paged(
                        seq,
                        p.delivery_count > 0,
                        self.recovered_count(p.delivery_count),
                        p.record,
                        usize::try_from(p.body_bytes).unwrap_or(usize::MAX),
                    );
                    let level = st.ready.level_of(p.priority);
                    (entry, level, ttl.map(|t| p.timestamp_ms.saturating_add(t)))
                }
            };
            st.stats.add_ready(&entry);
            st.ready.push_back(level, entry);
            if let Some(d) = deadline {
                st.expiry.insert(seq, level, d);
            }
        }
        self.publish_deadline(&st);
    }

    /// Makes sure the head's body is in memory, reading a paged-out one back from the
    /// store (under the queue lock: a read, never an fsync). A head that cannot be read is
    /// dropped and reported, and the next one tried; its record stays in the store, so a
    /// restart that can read it recovers it. A head whose TTL passed is moved aside for
    /// the housekeeper, never offered. Returns false when nothing is ready.
    fn load_head(&self, st: &mut QueueState) -> bool {
        self.set_aside_expired_heads(st);
        loop {
            let Some(front) = st.ready.front() else {
                return false;
            };
            let Some((record, size)) = front.paged_record() else {
                return true;
            };
            let count = front.delivery_count();
            match self.read_checked(record, size) {
                Ok(msg) => {
                    if let Some(front) = st.ready.front_mut() {
                        front.page_in(self.with_count_header(msg, count));
                    }
                    st.stats.ready_paged -= 1;
                    st.stats.ready_memory_bytes += size;
                    return true;
                }
                Err(()) => {
                    if let Some(dropped) = Self::pop_head(st) {
                        st.expiry.remove(dropped.seq);
                    }
                    st.stats.unreadable += 1;
                }
            }
        }
    }

    /// A message read back from the store as it was before it left memory: under a
    /// delivery limit, a message delivered before carries `x-delivery-count` (the store
    /// keeps the count, not the header).
    fn with_count_header(&self, msg: Arc<Message>, count: u32) -> Arc<Message> {
        let counted = self.queue_type == QueueType::Quorum
            || self.settings().lifecycle.delivery_limit.is_some();
        if counted && count > 0 {
            with_delivery_count(&msg, count)
        } else {
            msg
        }
    }

    /// The delivery count of a message recovered with `marks` delivered entries in its ack
    /// log. A classic queue writes one per delivery awaiting an ack. A quorum queue writes
    /// one at its first such delivery (so it comes back redelivered) and one per failed
    /// delivery ([`Queue::requeue`] with `failed`): its count is the failed ones. A broker
    /// restart is not a failed delivery.
    fn recovered_count(&self, marks: u32) -> u32 {
        match self.queue_type {
            QueueType::Classic => marks,
            QueueType::Quorum => marks.saturating_sub(1),
        }
    }

    /// Whether a delivery of `entry` that awaits an ack writes a delivered entry: every one
    /// in a classic queue, the first in a quorum queue ([`Queue::recovered_count`]).
    fn marks_delivery(&self, entry: &QueuedMessage) -> bool {
        self.queue_type == QueueType::Classic || !entry.redelivered
    }

    /// Counts a delivery: a classic queue counts every delivery, a quorum queue only the
    /// failed ones (RabbitMQ 4.3 `rabbit_fifo`: `basic.reject` with requeue, a consumer's
    /// channel or connection gone), counted when the message comes back.
    fn count_delivery(&self, entry: &mut QueuedMessage) {
        if self.queue_type == QueueType::Classic {
            entry.delivery_count = entry.delivery_count.saturating_add(1);
        }
    }

    /// Reads a paged-out body back; logs and reports a record that cannot be read.
    fn read_checked(&self, record: RecordRef, size: usize) -> Result<Arc<Message>, ()> {
        let read = match &self.storage {
            Some(storage) => storage.read(record),
            None => Err("the queue has no store".to_string()),
        };
        let why = match read {
            Ok(msg) if msg.body_size() == size => return Ok(Arc::new(msg)),
            Ok(msg) => format!("body of {} bytes where {size} were stored", msg.body_size()),
            Err(e) => e,
        };
        log::error!(
            "queue '{}': message in segment {} record {} cannot be read back and is \
             dropped: {why}",
            self.name,
            record.segment,
            record.id
        );
        Err(())
    }

    /// The body of a message leaving the ready list, read back if it was paged out
    /// (`None`, logged, when it cannot be read).
    fn body_of(&self, r: &Ready) -> Option<Arc<Message>> {
        match (r.message(), r.paged_record()) {
            (Some(m), _) => Some(Arc::clone(m)),
            (None, Some((record, size))) => self.read_checked(record, size).ok(),
            (None, None) => None,
        }
    }

    /// Moves heads whose deadline has passed out of the ready list, to `expired_aside`.
    fn set_aside_expired_heads(&self, st: &mut QueueState) {
        if st.expiry.len() == 0 {
            return;
        }
        let now = now_ms();
        while let Some(seq) = st.ready.front().map(|f| f.seq) {
            if !st.expiry.is_due(seq, now) {
                break;
            }
            st.expiry.remove(seq);
            if let Some(r) = Self::pop_head(st) {
                st.stats.expired += 1;
                st.expired_aside.push(r);
            }
        }
    }

    /// Drops ready messages while the queue is over its length limit (`x-overflow
    /// drop-head`): the oldest of the lowest priority first. Returns them (bodies read
    /// back if they were paged out, records still valid) when the queue dead-letters;
    /// otherwise their records are settled here.
    fn drop_head_over(&self, st: &mut QueueState, limit: LengthLimit) -> Vec<Leaving> {
        let mut out = Vec::new();
        while limit.exceeded(st.ready.len(), st.stats.ready_bytes) {
            let Some(dropped) = st.ready.pop_lowest() else {
                break;
            };
            st.stats.remove_ready(&dropped);
            st.expiry.remove(dropped.seq);
            st.stats.dropped += 1;
            self.leave(dropped, &mut out);
        }
        out
    }

    /// Hands a message that left the ready list to the dead-letterer (`out`) when the
    /// queue has a dead-letter exchange and its body can be read; otherwise settles its
    /// record now.
    fn leave(&self, r: Ready, out: &mut Vec<Leaving>) {
        let record = r.record();
        if self.settings().dead_letter.is_some() {
            if let Some(msg) = self.body_of(&r) {
                out.push(Leaving { msg, record });
                return;
            }
        }
        self.settle_records(record.as_slice());
    }

    /// Takes the head off the ready list, keeping the counters.
    fn pop_head(st: &mut QueueState) -> Option<Ready> {
        let entry = st.ready.pop_front()?;
        st.stats.remove_ready(&entry);
        // Queue accounting (the counters' subtractions check the rest under the test
        // profile's overflow checks): paged and in-memory parts stay within the ready list.
        debug_assert!(
            st.stats.ready_paged <= st.ready.len()
                && st.stats.ready_memory_bytes <= st.stats.ready_bytes,
            "queue accounting: {} paged of {} ready, {} of {} bytes in memory",
            st.stats.ready_paged,
            st.ready.len(),
            st.stats.ready_memory_bytes,
            st.stats.ready_bytes
        );
        Some(entry)
    }

    /// Tells the housekeeper when this queue next has timed work (lock held).
    fn publish_deadline(&self, st: &QueueState) {
        let next = if st.expired_aside.is_empty() {
            st.expiry.next().unwrap_or(u64::MAX)
        } else {
            0
        };
        self.next_deadline_ms.store(next, Ordering::Release);
    }

    /// Whether the housekeeper has expired messages to take here at `now_ms` (no lock).
    pub fn has_expired(&self, now_ms: u64) -> bool {
        self.next_deadline_ms.load(Ordering::Acquire) <= now_ms
    }

    /// Takes every message whose TTL passed by `now_ms`, wherever it is in the queue
    /// (docs/lifecycle.md, "TTL"), earliest deadline first. Without a dead-letter exchange
    /// their records are settled at once; with one, they are returned for dead-lettering
    /// (reason `expired`).
    pub fn expire(&self, now_ms: u64) -> Vec<Leaving> {
        let mut st = self.lock();
        let due = st.expiry.take_due(now_ms);
        let mut taken = std::mem::take(&mut st.expired_aside);
        let removed = st.ready.remove(due);
        for r in &removed {
            st.stats.remove_ready(r);
        }
        st.stats.expired += removed.len() as u64;
        taken.extend(removed);
        self.publish_deadline(&st);
        drop(st);
        let mut out = Vec::new();
        for r in taken {
            self.leave(r, &mut out);
        }
        out
    }

    /// Settles stored records of messages that left the queue (dead-lettered) once
    /// flusher epoch `after` is durable: the epoch of the writes that put their dead
    /// letters in their targets, so a crash never finds a message settled here and not
    /// yet written there (at-least-once). A failed round leaves them unsettled: the
    /// message comes back at the next start (a duplicate, never a loss). `None`: at once.
    pub fn settle_records_after(self: &Arc<Self>, records: Vec<RecordRef>, after: Option<u64>) {
        match (&self.storage, after) {
            (Some(storage), Some(epoch)) if !records.is_empty() => storage.when_durable(
                epoch,
                Arc::new(SettleAfter {
                    queue: Arc::clone(self),
                    records: Mutex::new(records),
                    epoch,
                }),
            ),
            _ => self.settle_records(&records),
        }
    }

    /// Settles stored records of messages that left the queue (dead-lettered).
    pub fn settle_records(&self, records: &[RecordRef]) {
        if let Some(storage) = &self.storage {
            for &record in records {
                storage.settle(&self.name, record);
            }
        }
    }

    /// Offers ready messages to consumers until none is ready or none can take more.
    pub fn dispatch(self: &Arc<Self>) {
        let mut st = self.lock();
        self.dispatch_locked(&mut st);
        self.publish_deadline(&st);
    }

    fn dispatch_locked(self: &Arc<Self>, st: &mut QueueState) {
        if st.consumers.is_empty() || self.paused.load(Ordering::Relaxed) {
            return;
        }
        while self.load_head(st) {
            let Some(mut front) = st.ready.front().and_then(Ready::to_delivery) else {
                break;
            };
            self.count_delivery(&mut front);
            let marks = self.marks_delivery(&front);
            front.deadline_ms = st.expiry.remove(front.seq).or(match st.fresh {
                Some((seq, d)) if seq == front.seq => Some(d),
                _ => None,
            });
            let mut taken = None;
            st.consumers.offer(|consumer| {
                // A delivery awaiting its ack is stored before the channel writes it to the
                // client: a crash right after the client has it brings it back redelivered.
                let record = front.record;
                let offered = consumer.channel.offer(consumer, self, &front, |tracked| {
                    if tracked && marks {
                        self.store_delivery(record);
                    }
                });
                if let Offer::Delivered { tracked } = offered {
                    taken = Some(tracked);
                    return true;
                }
                false
            });
            // Not taken: the head stays in memory, so the next dispatch does not read it
            // again (the budget is exceeded by at most this one message).
            let Some(tracked) = taken else {
                if let Some(d) = front.deadline_ms {
                    let level = st.ready.level_of_message(&front.msg);
                    st.expiry.insert(front.seq, level, d);
                }
                break;
            };
            Self::pop_head(st);
            st.stats.delivered += 1;
            st.stats.redelivered += u64::from(front.redelivered);
            if tracked {
                st.stats.unacked += 1;
            } else {
                st.stats.delivered_no_ack += 1;
                // Without an ack the record is settled once the delivery is written.
                self.settle_delivered(front.record);
            }
        }
    }

    /// Stores that a stored message was delivered and awaits its ack (its delivered entry:
    /// the redelivered flag and delivery count survive a crash).
    fn store_delivery(&self, record: Option<RecordRef>) {
        if let (Some(storage), Some(record)) = (&self.storage, record) {
            storage.mark_delivered(&self.name, record);
        }
    }

    /// Settles the record of a stored message delivered without an ack (it left for good).
    fn settle_delivered(&self, record: Option<RecordRef>) {
        if let (Some(storage), Some(record)) = (&self.storage, record) {
            storage.settle(&self.name, record);
        }
    }

    /// Pauses (`true`) or resumes (`false`) deliveries to consumers; resuming dispatches
    /// at once. Returns whether the state changed. `basic.get`, TTL expiry and consumer
    /// timeouts are not affected (docs/lifecycle.md, "Pausing a queue").
    pub fn set_paused(self: &Arc<Self>, paused: bool) -> bool {
        let mut st = self.lock();
        let was = self.paused.swap(paused, Ordering::Relaxed);
        if was && !paused {
            self.dispatch_locked(&mut st);
            self.publish_deadline(&st);
        }
        was != paused
    }

    /// Marks a queue being recovered paused, as `meta.db` says (start-up only, before it
    /// is shared).
    pub fn restore_paused(&mut self, paused: bool) {
        *self.paused.get_mut() = paused;
    }

    /// Whether deliveries to consumers are paused ([`Queue::set_paused`]).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Marks the queue used now (`x-expires` counts from the last use).
    pub fn touch(&self) {
        // Only x-expires reads it: spare `basic.get` and consume a clock read otherwise.
        if self.settings().lifecycle.expires_ms.is_some() {
            self.last_used_ms.store(now_ms(), Ordering::Relaxed);
        }
    }

    /// Whether the queue has `x-expires` and has been unused (no consumer, no get, not
    /// redeclared) for that long at `now_ms` (RabbitMQ's definition of unused).
    pub fn is_expired(&self, now_ms: u64) -> bool {
        let Some(expires) = self.settings().lifecycle.expires_ms else {
            return false;
        };
        let idle = now_ms.saturating_sub(self.last_used_ms.load(Ordering::Relaxed));
        idle >= expires && self.consumer_count() == 0
    }

    /// Attaches a consumer and dispatches to it.
    ///
    /// # Errors
    /// 403 ACCESS_REFUSED when the queue has an exclusive consumer, or `consumer` is
    /// exclusive and the queue has consumers (RabbitMQ's text); 404 NOT_FOUND when the
    /// queue was deleted meanwhile.
    /// `accepted` runs under the queue lock once the consumer is accepted and before any
    /// delivery to it, so the adapter's `consume-ok` reply precedes every delivery.
    pub fn add_consumer(
        self: &Arc<Self>,
        consumer: Arc<Consumer>,
        vhost: &str,
        accepted: impl FnOnce(),
    ) -> Result<(), BrokerError> {
        let mut st = self.lock();
        if st.deleted {
            return Err(BrokerError::not_found(format!(
                "no queue '{}' in vhost '{vhost}'",
                self.name
            )));
        }
        let in_exclusive_use = st.consumers.iter().any(|c| c.exclusive);
        if in_exclusive_use || (consumer.exclusive && !st.consumers.is_empty()) {
            return Err(BrokerError::access_refused(format!(
                "queue '{}' in vhost '{vhost}' in exclusive use",
                self.name
            )));
        }
        accepted();
        st.consumers.push(consumer);
        st.had_consumers = true;
        st.stats.consumers = st.consumers.len();
        self.touch();
        self.dispatch_locked(&mut st);
        self.publish_deadline(&st);
        Ok(())
    }

    /// Detaches the consumer with `tag` on channel (`connection_id`, `channel`).
    pub fn remove_consumer(
        self: &Arc<Self>,
        tag: &str,
        connection_id: u64,
        channel: u16,
    ) -> ConsumerRemoved {
        self.remove_consumer_where(|c| {
            &*c.tag == tag
                && c.channel.connection_id == connection_id
                && c.channel.number == channel
        })
    }

    /// Detaches exactly `consumer` (not another one that reuses its tag on its channel);
    /// `NotFound` when it was already detached (cancelled by its client, queue deleted).
    pub fn detach_consumer(self: &Arc<Self>, consumer: &Arc<Consumer>) -> ConsumerRemoved {
        self.remove_consumer_where(|c| Arc::ptr_eq(c, consumer))
    }

    /// Removes consumers; with a single active consumer, the next one takes over at once
    /// (and gets what is ready).
    fn remove_consumer_where(
        self: &Arc<Self>,
        matches: impl Fn(&Arc<Consumer>) -> bool,
    ) -> ConsumerRemoved {
        let mut st = self.lock();
        if st.consumers.remove_where(matches) == 0 {
            return ConsumerRemoved::NotFound;
        }
        st.stats.consumers = st.consumers.len();
        if st.consumers.is_single_active() && !st.consumers.is_empty() {
            self.dispatch_locked(&mut st);
            self.publish_deadline(&st);
        }
        if st.consumers.is_empty() {
            // Unused from now on: x-expires counts from here.
            self.touch();
        }
        if self.auto_delete && st.consumers.is_empty() && st.had_consumers && !st.deleted {
            ConsumerRemoved::LastOfAutoDelete
        } else {
            ConsumerRemoved::Removed
        }
    }

    /// Puts delivered messages back at their original positions, marked redelivered, and
    /// dispatches. Messages of a deleted queue are dropped. A message delivered more than
    /// `x-delivery-limit` times is not requeued: it is returned for dead-lettering (reason
    /// `delivery_limit`, record still valid), or settled and dropped when the queue has no
    /// dead-letter exchange. Under a delivery limit a requeued message carries the
    /// `x-delivery-count` header (deliveries so far), as RabbitMQ's quorum queues do. A
    /// requeued message keeps its TTL deadline.
    ///
    /// `failed`: the deliveries failed (`basic.reject`, their channel or connection
    /// closed) rather than were handed back unprocessed (`basic.nack`, `basic.recover`, a
    /// consumer timeout). A quorum queue counts only failed deliveries, and its messages
    /// carry `x-delivery-count` whenever it is above 0 (RabbitMQ 4.3); a classic queue
    /// counts every delivery.
    pub fn requeue(
        self: &Arc<Self>,
        mut entries: Vec<QueuedMessage>,
        failed: bool,
    ) -> Vec<Leaving> {
        // Newest first: requeued messages are usually older than every ready one, so each
        // goes in at the front of its level in O(1). Oldest first would insert each behind
        // the previous one, shifting them all: quadratic for a channel closing with
        // hundreds of thousands of unacked deliveries.
        entries.sort_unstable_by_key(|e| std::cmp::Reverse(e.seq));
        let mut st = self.lock();
        let n = entries.len();
        debug_assert!(
            st.stats.unacked >= n,
            "a delivery is requeued once: {n} requeued, {} unacked",
            st.stats.unacked
        );
        st.stats.unacked = st.stats.unacked.saturating_sub(n);
        let mut over_limit = Vec::new();
        if st.deleted {
            return over_limit;
        }
        let mut stored = Vec::new();
        let settings = self.settings();
        let quorum = self.queue_type == QueueType::Quorum;
        let retry = settings
            .delayed_retry
            .filter(|r| quorum && r.applies(failed));
        // Rounded up, as a delayed exchange's: released no earlier than the wait. Read only
        // when a return waits (no clock read on a plain requeue).
        let now = retry.map_or(0, |_| crate::broker::delayed::hold_now_ms());
        let mut earliest_delayed = u64::MAX;
        for mut entry in entries {
            if quorum && failed {
                entry.delivery_count = entry.delivery_count.saturating_add(1);
            }
            if let Some(limit) = settings.lifecycle.delivery_limit {
                if entry.delivery_count > limit {
                    st.stats.dropped += 1;
                    if settings.dead_letter.is_some() {
                        over_limit.push(Leaving {
                            msg: with_delivery_count(&entry.msg, entry.delivery_count),
                            record: entry.record,
                        });
                    } else {
                        self.settle_records(entry.record.as_slice());
                    }
                    continue;
                }
                if !quorum {
                    entry.msg = with_delivery_count(&entry.msg, entry.delivery_count);
                }
            }
            if quorum && entry.delivery_count > 0 {
                entry.msg = with_delivery_count(&entry.msg, entry.delivery_count);
                if failed {
                    // The failed delivery survives a restart.
                    self.store_delivery(entry.record);
                }
            }
            entry.redelivered = true;
            if let Some(r) = retry {
                // RabbitMQ 4.3's delayed retry: ready again once the wait has passed.
                let due = now.saturating_add(r.delay_ms(entry.delivery_count));
                earliest_delayed = earliest_delayed.min(due);
                st.delayed.insert((due, entry.seq), entry);
                continue;
            }
            if let Some(seq) = Self::return_to_ready(&mut st, entry) {
                stored.push(seq);
            }
        }
        self.schedule_delayed(&mut st, earliest_delayed);
        self.dispatch_locked(&mut st);
        // Requeued messages come back in memory, so a consumer that takes them at once
        // does not read them from disk; those still ready over the budget go back out,
        // newest first.
        stored.sort_unstable();
        while st.stats.ready_memory_bytes > self.memory_bytes_max {
            let Some((seq, level)) = stored.pop() else {
                break;
            };
            let released = st.ready.get_mut(level, seq).and_then(Ready::page_out);
            if let Some(size) = released {
                st.stats.paged_out(size);
            }
        }
        self.publish_deadline(&st);
        // Dead-lettered in the order they were published.
        over_limit.reverse();
        over_limit
    }

    /// Puts a returned message back among the ready ones (at its place by `seq`); returns
    /// its (seq, level) when it is stored (so it may be paged out again).
    fn return_to_ready(st: &mut QueueState, entry: QueuedMessage) -> Option<(u64, u8)> {
        let level = st.ready.level_of_message(&entry.msg);
        let (seq, deadline) = (entry.seq, entry.deadline_ms);
        let stored = entry.record.is_some().then_some((seq, level));
        let entry = Ready::returned(entry);
        st.stats.add_ready(&entry);
        st.ready.insert(level, entry);
        if let Some(d) = deadline {
            st.expiry.insert(seq, level, d);
        }
        stored
    }

    /// Hands `due_ms` to the delay timer when it is earlier than what the timer will wake
    /// this queue for (`u64::MAX`: nothing new).
    fn schedule_delayed(self: &Arc<Self>, st: &mut QueueState, due_ms: u64) {
        if due_ms == u64::MAX || (st.delayed_scheduled_ms != 0 && st.delayed_scheduled_ms <= due_ms)
        {
            return;
        }
        st.delayed_scheduled_ms = due_ms;
        if let Some(s) = &self.delay_schedule {
            s.add(due_ms, DueTarget::Queue(Arc::downgrade(self)));
        }
    }

    /// Makes the messages whose delayed retry is due at `now_ms` ready again (at their
    /// place, as any returned message) and offers them to consumers; the delay timer calls
    /// it at their due time.
    pub fn release_delayed(self: &Arc<Self>, now_ms: u64) {
        let mut st = self.lock();
        st.delayed_scheduled_ms = 0;
        if st.deleted {
            return;
        }
        while let Some(entry) = st.delayed.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let entry = entry.remove();
            Self::return_to_ready(&mut st, entry);
        }
        if let Some(&(next, _)) = st.delayed.keys().next() {
            self.schedule_delayed(&mut st, next);
        }
        self.dispatch_locked(&mut st);
        self.publish_deadline(&st);
    }

    /// Messages waiting for their delayed retry, and the earliest due time (ms since the
    /// Unix epoch) among them (RabbitMQ 4.3's `messages_delayed`, `next_delayed_at`).
    pub fn delayed_retries(&self) -> (usize, Option<u64>) {
        let st = self.lock();
        (st.delayed.len(), st.delayed.keys().next().map(|k| k.0))
    }

    /// Records that delivered messages were rejected to be dead-lettered: counted as
    /// settled, their stored records left to the dead-letter jobs, which settle them once
    /// the dead letters are durable in their targets ([`Queue::settle_records_after`]).
    pub fn settle_dead_lettered(&self, entries: &[QueuedMessage]) {
        self.count_settled(entries.len(), false);
    }

    /// Counts `n` deliveries as no longer unacked (`acked`: by `basic.ack`).
    fn count_settled(&self, n: usize, acked: bool) {
        let mut st = self.lock();
        debug_assert!(
            st.stats.unacked >= n,
            "a delivery is settled once: {n} settled, {} unacked",
            st.stats.unacked
        );
        st.stats.unacked = st.stats.unacked.saturating_sub(n);
        if acked {
            st.stats.acked += n as u64;
        }
    }

    /// Records that delivered messages were acked (or dropped by nack/reject): their
    /// stored records are settled.
    pub fn settle(&self, entries: &[QueuedMessage], acked: bool) {
        self.count_settled(entries.len(), acked);
        if let Some(storage) = &self.storage {
            for record in entries.iter().filter_map(|e| e.record) {
                storage.settle(&self.name, record);
            }
        }
    }

    /// Takes the head message for `basic.get`; returns it with the count of messages
    /// still ready. `record` gets the head and the count that will be left, and assigns the
    /// delivery tag (under the queue lock, so the channel's tags stay ordered); when it
    /// returns `None` the message stays.
    pub fn get(
        self: &Arc<Self>,
        record: impl FnOnce(&QueuedMessage, usize) -> Option<u64>,
        tracked: bool,
    ) -> Option<(u64, QueuedMessage, usize)> {
        self.touch();
        let mut st = self.lock();
        let got = self.get_locked(&mut st, record, tracked);
        self.publish_deadline(&st);
        got
    }

    fn get_locked(
        &self,
        st: &mut QueueState,
        record: impl FnOnce(&QueuedMessage, usize) -> Option<u64>,
        tracked: bool,
    ) -> Option<(u64, QueuedMessage, usize)> {
        if !self.load_head(st) {
            st.stats.get_empty += 1;
            return None;
        }
        let left = st.ready.len().checked_sub(1)?;
        let mut entry = st.ready.front().and_then(Ready::to_delivery)?;
        self.count_delivery(&mut entry);
        entry.deadline_ms = st.expiry.remove(entry.seq);
        // A delivery awaiting its ack is stored before `record` writes the get-ok: a crash
        // right after the client has it brings the message back redelivered. (Should the
        // channel be closing and the message stay, a later crash brings it back marked
        // redelivered: allowed, the flag means "may have been delivered before".) Without
        // an ack the record is settled only once the get-ok is written, below.
        if tracked && self.marks_delivery(&entry) {
            self.store_delivery(entry.record);
        }
        let Some(tag) = record(&entry, left) else {
            if let Some(d) = entry.deadline_ms {
                let level = st.ready.level_of_message(&entry.msg);
                st.expiry.insert(entry.seq, level, d);
            }
            return None;
        };
        Self::pop_head(st)?;
        st.stats.delivered += 1;
        st.stats.redelivered += u64::from(entry.redelivered);
        if tracked {
            st.stats.unacked += 1;
            st.stats.got += 1;
        } else {
            st.stats.got_no_ack += 1;
        }
        let left = st.ready.len();
        if !tracked {
            self.settle_delivered(entry.record);
        }
        Some((tag, entry, left))
    }

    /// Removes every ready message; returns how many (AMQP `queue.purge`).
    pub fn purge(&self) -> usize {
        let mut st = self.lock();
        let purged = st.ready.take_all();
        // Messages waiting for a delayed retry are in the queue too.
        let delayed = std::mem::take(&mut st.delayed);
        st.expiry.clear();
        st.stats.ready_bytes = 0;
        st.stats.ready_memory_bytes = 0;
        st.stats.ready_paged = 0;
        self.publish_deadline(&st);
        drop(st);
        if let Some(storage) = &self.storage {
            let waiting = delayed.values().filter_map(|m| m.record);
            for record in purged.iter().filter_map(Ready::record).chain(waiting) {
                storage.settle(&self.name, record);
            }
        }
        purged.len() + delayed.len()
    }

    /// Marks the queue deleted, drops its ready messages, and returns their count and the
    /// consumers that must be told they were cancelled.
    pub fn mark_deleted(&self) -> (usize, Vec<Arc<Consumer>>) {
        let mut st = self.lock();
        st.deleted = true;
        let n = st.ready.take_all().len() + std::mem::take(&mut st.delayed).len();
        st.expiry.clear();
        st.expired_aside.clear();
        st.stats.ready_bytes = 0;
        st.stats.ready_memory_bytes = 0;
        st.stats.ready_paged = 0;
        let consumers = st.consumers.take_all();
        for c in &consumers {
            c.cancelled.store(true, Ordering::Relaxed);
        }
        st.stats.consumers = 0;
        self.publish_deadline(&st);
        (n, consumers)
    }

    /// Whether the queue was deleted.
    pub fn is_deleted(&self) -> bool {
        self.lock().deleted
    }

    /// Ready messages.
    pub fn message_count(&self) -> usize {
        self.lock().ready.len()
    }

    /// Attached consumers.
    pub fn consumer_count(&self) -> usize {
        self.lock().consumers.len()
    }

    /// A snapshot of the queue's counters.
    pub fn stats(&self) -> QueueStats {
        let st = self.lock();
        QueueStats {
            ready: st.ready.len(),
            delayed: st.delayed.len(),
            ..st.stats
        }
    }

    /// The active consumer of a queue with `x-single-active-consumer` (`None` for other
    /// queues, or with no consumer yet).
    pub fn single_active_consumer(&self) -> Option<Arc<Consumer>> {
        self.lock().consumers.active().cloned()
    }

    /// Whether the queue has `x-single-active-consumer` set.
    pub fn is_single_active(&self) -> bool {
        single_active(&self.arguments)
    }

    /// The attached consumers, in the order messages are offered to them (highest
    /// priority first).
    pub fn consumers(&self) -> Vec<Arc<Consumer>> {
        self.lock().consumers.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::channel::Channel;
    use crate::broker::sink::{CancelReason, ClientSink};
    use crate::error::ReplyCode;
    use crate::storage::flusher::{Flusher, FsyncMode};
    use crate::storage::{QueueStore, SimBackend, StoreConfig};
    use crate::types::BasicProperties;
    use std::path::PathBuf;

    const BODY: usize = 100;

    /// Records deliveries: (delivery tag, redelivered, body).
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u64, bool, Vec<u8>)>>);

    impl ClientSink for Recorder {
        fn deliver(&self, _: u16, _: &str, tag: u64, redelivered: bool, message: &Message) {
            let mut v = self.0.lock().unwrap();
            v.push((tag, redelivered, message.body.to_vec()));
        }
        fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
        fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {}
        fn confirm(&self, _: u16, _: u64, _: bool, _: bool) {}
        fn is_saturated(&self) -> bool {
            false
        }
        fn force_close(&self, _: ReplyCode, _: &str) {}
    }

    fn body(i: u8) -> Vec<u8> {
        vec![i; BODY]
    }

    fn message(i: u8, persistent: bool) -> Arc<Message> {
        let properties = BasicProperties {
            delivery_mode: Some(if persistent { 2 } else { 1 }),
            ..BasicProperties::default()
        };
        Arc::new(Message::new("", "q", properties, body(i)))
    }

    fn store_config() -> StoreConfig {
        StoreConfig {
            segment_bytes: 1024,
        }
    }

    /// A stored queue over `sim` with a budget of `budget_messages` bodies.
    fn stored_queue(sim: &SimBackend, budget_messages: usize) -> Arc<Queue> {
        let (store, _, _) =
            QueueStore::open(Arc::new(sim.clone()), PathBuf::from("/q"), store_config()).unwrap();
        queue_over(store, budget_messages)
    }

    fn queue_over(store: QueueStore, budget_messages: usize) -> Arc<Queue> {
        let flusher = Arc::new(Flusher::start(FsyncMode::Never, None).unwrap());
        let mut q = Queue::new("q".into(), true, false, false, None, FieldTable::new());
        q.storage_id = Some("id".into());
        q.storage = Some(QueueStorage::new(store, flusher, None));
        q.memory_bytes_max = budget_messages * BODY;
        Arc::new(q)
    }

    fn publish(q: &Arc<Queue>, i: u8, persistent: bool) -> Arc<Message> {
        let m = message(i, persistent);
        assert!(matches!(
            q.enqueue(Arc::clone(&m)),
            Enqueued::Accepted { .. }
        ));
        m
    }

    /// Checks the counters against the ready list itself.
    fn check_accounting(q: &Queue) -> QueueStats {
        let st = q.lock();
        let total: usize = st.ready.iter().map(Ready::body_size).sum();
        let memory: usize = st
            .ready
            .iter()
            .filter(|e| !e.is_paged())
            .map(Ready::body_size)
            .sum();
        let paged = st.ready.iter().filter(|e| e.is_paged()).count();
        assert_eq!(st.stats.ready_bytes, total, "ready_bytes");
        assert_eq!(st.stats.ready_memory_bytes, memory, "ready_memory_bytes");
        assert_eq!(st.stats.ready_paged, paged, "ready_paged");
        for level in st.ready.levels() {
            let seqs: Vec<u64> = level.iter().map(|e| e.seq).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq order {seqs:?}");
        }
        drop(st);
        q.stats()
    }

    fn consumer(q: &Arc<Queue>, sink: &Arc<Recorder>, prefetch: u16) -> Arc<Channel> {
        let channel = Arc::new(Channel::new(1, 1, Arc::clone(sink) as Arc<dyn ClientSink>));
        let c = Arc::new(Consumer::new(
            "c".into(),
            Arc::clone(&q.name),
            Arc::clone(&channel),
            false,
            false,
            prefetch,
            FieldTable::new(),
        ));
        q.add_consumer(c, "/", || {}).unwrap();
        channel
    }

    fn get(q: &Arc<Queue>) -> Option<QueuedMessage> {
        let mut tag = 0;
        q.get(
            |_, _| {
                tag += 1;
                Some(tag)
            },
            false,
        )
        .map(|(_, e, _)| e)
    }

    /// Bytes in `/q/queue_acks.1` of `sim` now (0 when the file does not exist yet).
    fn ack_log_bytes(sim: &SimBackend) -> u64 {
        use crate::storage::Backend;
        sim.open(std::path::Path::new("/q/queue_acks.1"), false)
            .map_or(0, |f| f.len().unwrap())
    }

    /// A sink that notes how many bytes the ack log held when each delivery was written.
    struct AckLogAtDelivery {
        sim: SimBackend,
        seen: Mutex<Vec<u64>>,
    }

    impl ClientSink for AckLogAtDelivery {
        fn deliver(&self, _: u16, _: &str, _: u64, _: bool, _: &Message) {
            self.seen.lock().unwrap().push(ack_log_bytes(&self.sim));
        }
        fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
        fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {}
        fn confirm(&self, _: u16, _: u64, _: bool, _: bool) {}
        fn is_saturated(&self) -> bool {
            false
        }
        fn force_close(&self, _: ReplyCode, _: &str) {}
    }

    /// A delivery awaiting its ack is in the ack log before the client can have it (pushed
    /// or got), so a process crash right after brings the message back redelivered.
    #[test]
    fn a_delivery_is_stored_before_the_client_gets_it() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 10);
        publish(&q, 1, true);
        publish(&q, 2, true);
        let entry = crate::storage::ack_log::ENTRY_BYTES as u64;

        let mut at_get_ok = None;
        let got = q.get(
            |_, _| {
                at_get_ok = Some(ack_log_bytes(&sim));
                Some(1)
            },
            true,
        );
        assert!(got.is_some());
        assert_eq!(at_get_ok, Some(entry), "basic.get: get-ok before the entry");

        let sink = Arc::new(AckLogAtDelivery {
            sim: sim.clone(),
            seen: Mutex::new(Vec::new()),
        });
        let channel = Arc::new(Channel::new(1, 1, Arc::clone(&sink) as Arc<dyn ClientSink>));
        let c = Arc::new(Consumer::new(
            "c".into(),
            Arc::clone(&q.name),
            Arc::clone(&channel),
            false,
            false,
            0,
            FieldTable::new(),
        ));
        q.add_consumer(c, "/", || {}).unwrap();
        q.dispatch();
        assert_eq!(
            *sink.seen.lock().unwrap(),
            vec![2 * entry],
            "basic.deliver before the entry"
        );
    }

    #[test]
    fn newest_stored_messages_leave_memory_beyond_the_budget() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 3);
        let mut published = Vec::new();
        for i in 0..10 {
            // Every third one is transient: it cannot leave memory.
            published.push(publish(&q, i, i % 3 != 2));
        }
        let s = check_accounting(&q);
        assert_eq!(s.ready, 10);
        assert_eq!(s.ready_bytes, 10 * BODY);
        // 0, 1 fit; 2 (transient) fits; 3.. are paged out except the transient 5 and 8.
        assert_eq!(s.ready_paged, 5);
        assert_eq!(s.ready_memory_bytes, 5 * BODY);
        for (i, m) in published.iter().enumerate() {
            let paged = i >= 3 && i % 3 != 2;
            // The queue let go of a paged-out message: only the test holds it.
            assert_eq!(Arc::strong_count(m) == 1, paged, "message {i}");
        }
        // All come back in order, bodies read from their segments.
        for i in 0..10u8 {
            let e = get(&q).expect("ready");
            assert_eq!(e.msg.body, body(i));
            assert_eq!(e.record.is_some(), i % 3 != 2);
            check_accounting(&q);
        }
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.ready_bytes, s.ready_memory_bytes), (0, 0, 0));
        assert_eq!((s.delivered, s.unacked, s.unreadable), (10, 0, 0));
    }

    #[test]
    fn consumers_get_paged_out_messages_in_order_and_requeues_respect_the_budget() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 0);
        for i in 0..5 {
            publish(&q, i, true);
        }
        let s = check_accounting(&q);
        assert_eq!((s.ready_paged, s.ready_memory_bytes), (5, 0));

        let sink = Arc::new(Recorder::default());
        let channel = consumer(&q, &sink, 2);
        // Two delivered (read back); the next head was read for the offer and stays in
        // memory for the next attempt: one message over the budget.
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.ready_paged, s.ready_memory_bytes), (3, 2, BODY));
        assert_eq!(s.unacked, 2);

        // Requeue the first: it goes back to the head, and to the consumer at once.
        let first = channel.take(1, false).unwrap();
        q.requeue(first.into_iter().map(|u| u.entry).collect(), true);
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.ready_paged, s.ready_memory_bytes), (3, 2, BODY));

        // Acks let the rest through, in order, the requeued one first and redelivered.
        for _ in 0..5 {
            let taken = channel.take(0, true).unwrap();
            for u in &taken {
                q.settle(std::slice::from_ref(&u.entry), true);
            }
            q.dispatch();
            check_accounting(&q);
        }
        let delivered = sink.0.lock().unwrap().clone();
        let bodies: Vec<(bool, Vec<u8>)> = delivered.into_iter().map(|(_, r, b)| (r, b)).collect();
        let expected = vec![
            (false, body(0)),
            (false, body(1)),
            (true, body(0)),
            (false, body(2)),
            (false, body(3)),
            (false, body(4)),
        ];
        assert_eq!(bodies, expected);
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.ready_bytes, s.ready_paged), (0, 0, 0));
        let stored = q.storage.as_ref().unwrap().stats();
        assert_eq!(stored.records_valid, 0);
    }

    #[test]
    fn requeued_messages_beyond_the_budget_leave_memory_newest_first() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 1);
        for i in 0..3 {
            publish(&q, i, true);
        }
        let tracked = |q: &Arc<Queue>| q.get(|_, _| Some(1), true).unwrap().1;
        let taken = vec![tracked(&q), tracked(&q)];
        let s = check_accounting(&q);
        assert_eq!(
            (s.ready, s.ready_paged, s.ready_memory_bytes, s.unacked),
            (1, 1, 0, 2)
        );
        q.requeue(taken, true);
        let s = check_accounting(&q);
        assert_eq!(
            (s.ready, s.ready_paged, s.ready_memory_bytes, s.unacked),
            (3, 2, BODY, 0)
        );
        {
            let st = q.lock();
            let paged: Vec<bool> = st.ready.iter().map(Ready::is_paged).collect();
            assert_eq!(paged, [false, true, true]);
        }
        for i in 0..3u8 {
            let e = get(&q).unwrap();
            assert_eq!((e.msg.body.to_vec(), e.redelivered), (body(i), i < 2));
        }
    }

    #[test]
    fn a_requeue_taken_at_once_is_not_read_back() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 1);
        let m = publish(&q, 7, true);
        let sink = Arc::new(Recorder::default());
        let channel = consumer(&q, &sink, 1);
        let taken = channel.take(1, false).unwrap();
        q.requeue(taken.into_iter().map(|u| u.entry).collect(), true);
        // Delivered again straight from memory: the same shared message.
        let again = channel.take(0, true).unwrap();
        assert!(Arc::ptr_eq(&again[0].entry.msg, &m));
        assert!(again[0].entry.redelivered);
    }

    #[test]
    fn an_unreadable_message_is_dropped_and_counted() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 0);
        for i in 0..3 {
            publish(&q, i, true);
        }
        // The second one's record disappears from under the queue (settled in the store).
        let record = q.lock().ready.iter().nth(1).unwrap().record().unwrap();
        q.storage.as_ref().unwrap().settle("q", record);
        assert_eq!(get(&q).unwrap().msg.body, body(0));
        assert_eq!(get(&q).unwrap().msg.body, body(2));
        assert!(get(&q).is_none());
        let s = check_accounting(&q);
        assert_eq!(
            (s.ready, s.ready_bytes, s.unreadable, s.delivered),
            (0, 0, 1, 2)
        );
    }

    #[test]
    fn purge_settles_paged_out_messages() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 2);
        for i in 0..6 {
            publish(&q, i, true);
        }
        assert_eq!(q.purge(), 6);
        let s = check_accounting(&q);
        assert_eq!(
            (s.ready_bytes, s.ready_memory_bytes, s.ready_paged),
            (0, 0, 0)
        );
        assert_eq!(q.storage.as_ref().unwrap().stats().records_valid, 0);
    }

    #[test]
    fn restore_keeps_the_oldest_bodies_within_the_budget() {
        let sim = SimBackend::new();
        {
            let q = stored_queue(&sim, 100);
            for i in 0..8 {
                publish(&q, i, true);
            }
            // The first two were delivered before the stop.
            let sink = Arc::new(Recorder::default());
            let channel = consumer(&q, &sink, 2);
            drop(channel.close());
        }
        // A budget smaller than what the store loaded still holds.
        let (store, recovered, _) = QueueStore::open_with_budget(
            Arc::new(sim.clone()),
            PathBuf::from("/q"),
            store_config(),
            u64::MAX,
        )
        .unwrap();
        let q = queue_over(store, 1);
        q.restore(recovered);
        let s = check_accounting(&q);
        assert_eq!((s.ready_memory_bytes, s.ready_paged), (BODY, 7));
        drop(q);

        let (store, recovered, _) = QueueStore::open_with_budget(
            Arc::new(sim.clone()),
            PathBuf::from("/q"),
            store_config(),
            3 * BODY as u64,
        )
        .unwrap();
        assert_eq!(recovered.len(), 8);
        let q = queue_over(store, 3);
        q.restore(recovered);
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.ready_bytes), (8, 8 * BODY));
        assert_eq!((s.ready_memory_bytes, s.ready_paged), (3 * BODY, 5));
        for i in 0..8u8 {
            let e = get(&q).unwrap();
            assert_eq!(e.msg.body, body(i));
            assert_eq!(e.redelivered, i < 2, "message {i}");
        }
        check_accounting(&q);
    }

    fn queue_with(
        sim: &SimBackend,
        budget_messages: usize,
        args: &[(&str, FieldValue)],
    ) -> Arc<Queue> {
        let (store, _, _) =
            QueueStore::open(Arc::new(sim.clone()), PathBuf::from("/q"), store_config()).unwrap();
        let flusher = Arc::new(Flusher::start(FsyncMode::Never, None).unwrap());
        let mut arguments = FieldTable::new();
        for (k, v) in args {
            arguments.insert((*k).into(), v.clone());
        }
        let mut q = Queue::new("q".into(), true, false, false, None, arguments);
        q.storage_id = Some("id".into());
        q.storage = Some(QueueStorage::new(store, flusher, None));
        q.memory_bytes_max = budget_messages * BODY;
        Arc::new(q)
    }

    fn publish_with(q: &Arc<Queue>, i: u8, expiration: Option<&str>, priority: Option<u8>) {
        let properties = BasicProperties {
            delivery_mode: Some(2),
            expiration: expiration.map(str::to_string),
            priority,
            ..BasicProperties::default()
        };
        let m = Arc::new(Message::new("", "q", properties, body(i)));
        assert!(matches!(q.enqueue(m), Enqueued::Accepted { .. }));
    }

    fn dlx() -> Vec<(&'static str, FieldValue)> {
        vec![("x-dead-letter-exchange", FieldValue::string("dlx"))]
    }

    #[test]
    fn expiry_takes_due_messages_anywhere_even_paged_out_and_settles_after() {
        let sim = SimBackend::new();
        // Room for two bodies: the later messages are paged out.
        let q = queue_with(&sim, 2, &dlx());
        // TTL 1 ms, not 0: a message with TTL 0 expires on arrival, in `enqueue`.
        publish_with(&q, 0, None, None);
        publish_with(&q, 1, Some("1"), None);
        publish_with(&q, 2, None, None);
        publish_with(&q, 3, Some("1"), None);
        publish_with(&q, 4, Some("3600000"), None);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(q.has_expired(now_ms()));
        let expired = q.expire(now_ms());
        let bodies: Vec<Vec<u8>> = expired.iter().map(|l| l.msg.body.to_vec()).collect();
        assert_eq!(bodies, [body(1), body(3)]);
        let records: Vec<RecordRef> = expired.iter().filter_map(|l| l.record).collect();
        assert_eq!(records.len(), 2);
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.expired), (3, 2));
        // Still stored until the caller settles them (after dead-lettering).
        assert_eq!(q.storage.as_ref().unwrap().stats().records_valid, 5);
        q.settle_records(&records);
        assert_eq!(q.storage.as_ref().unwrap().stats().records_valid, 3);
        // The hour-long one is not due; the next deadline is published for the housekeeper.
        assert!(!q.has_expired(now_ms()));
        assert!(q.has_expired(now_ms() + 3_600_001));
        for i in [0, 2, 4] {
            assert_eq!(get(&q).unwrap().msg.body, body(i));
        }
    }

    #[test]
    fn a_due_head_is_never_handed_out_and_waits_for_the_housekeeper() {
        let sim = SimBackend::new();
        let q = queue_with(&sim, 10, &dlx());
        publish_with(&q, 0, Some("1"), None);
        publish_with(&q, 1, None, None);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(get(&q).unwrap().msg.body, body(1));
        // The expired head was set aside: not ready, but waiting to be dead-lettered.
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.expired), (0, 1));
        assert!(q.has_expired(0));
        let expired = q.expire(now_ms());
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].msg.body, body(0));
        assert!(!q.has_expired(u64::MAX - 1));
    }

    #[test]
    fn a_ttl_of_zero_expires_on_arrival_unless_taken() {
        let sim = SimBackend::new();
        let q = queue_with(&sim, 10, &dlx());
        publish_with(&q, 0, None, None);
        let m = Arc::new(Message::new(
            "",
            "q",
            BasicProperties {
                delivery_mode: Some(2),
                expiration: Some("0".into()),
                ..BasicProperties::default()
            },
            body(1),
        ));
        let Enqueued::Accepted { expired, .. } = q.enqueue(m) else {
            panic!("refused")
        };
        let bodies: Vec<Vec<u8>> = expired.iter().map(|l| l.msg.body.to_vec()).collect();
        assert_eq!(
            bodies,
            [body(1)],
            "expired on arrival, for the dead-letterer"
        );
        let s = check_accounting(&q);
        assert_eq!((s.ready, s.expired), (1, 1));
        assert!(
            q.expire(now_ms()).is_empty(),
            "nothing left for the housekeeper"
        );
    }

    #[test]
    fn without_a_dead_letter_exchange_expired_records_are_settled_at_once() {
        let sim = SimBackend::new();
        let q = queue_with(&sim, 0, &[]);
        publish_with(&q, 0, Some("0"), None);
        let expired = q.expire(now_ms());
        assert!(expired.is_empty());
        assert_eq!(q.storage.as_ref().unwrap().stats().records_valid, 0);
    }

    #[test]
    fn priority_levels_keep_the_accounting_and_recover_in_order() {
        let sim = SimBackend::new();
        let args = [("x-max-priority", FieldValue::I64(5))];
        {
            let q = queue_with(&sim, 2, &args);
            for (i, p) in [(0, 1), (1, 5), (2, 3), (3, 5), (4, 0)] {
                publish_with(&q, i, None, Some(p));
            }
            let s = check_accounting(&q);
            assert_eq!((s.ready, s.ready_paged), (5, 3));
        }
        for budget in [0, 100] {
            let (store, recovered, _) = QueueStore::open_with_budget(
                Arc::new(sim.clone()),
                PathBuf::from("/q"),
                store_config(),
                (budget * BODY) as u64,
            )
            .unwrap();
            let flusher = Arc::new(Flusher::start(FsyncMode::Never, None).unwrap());
            let mut arguments = FieldTable::new();
            arguments.insert("x-max-priority".into(), FieldValue::I64(5));
            let mut q = Queue::new("q".into(), true, false, false, None, arguments);
            q.storage_id = Some("id".into());
            q.storage = Some(QueueStorage::new(store, flusher, None));
            q.memory_bytes_max = budget * BODY;
            let q = Arc::new(q);
            q.restore(recovered);
            check_accounting(&q);
            let order: Vec<u8> =
                std::iter::from_fn(|| q.get(|_, _| Some(1), true).map(|(_, e, _)| e.msg.body[0]))
                    .collect();
            assert_eq!(order, [1, 3, 2, 0, 4], "budget {budget}");
            // Taken but not settled: they stay stored for the next round.
        }
    }

    #[test]
    fn messages_leaving_for_a_dead_letter_exchange_stay_stored_until_settled() {
        let sim = SimBackend::new();
        let mut args = dlx();
        args.push(("x-max-length", FieldValue::I64(1)));
        args.push(("x-delivery-limit", FieldValue::I64(0)));
        let q = queue_with(&sim, 10, &args);
        let valid = |q: &Queue| q.storage.as_ref().unwrap().stats().records_valid;
        publish_with(&q, 0, None, None);
        // A second message takes the queue over x-max-length: the first is dropped, but its
        // record stays valid until the dead letter is in its target.
        let m = Arc::new(Message::new(
            "",
            "q",
            BasicProperties {
                delivery_mode: Some(2),
                ..BasicProperties::default()
            },
            body(1),
        ));
        let Enqueued::Accepted { dropped, .. } = q.enqueue(m) else {
            panic!("not accepted");
        };
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].msg.body, body(0));
        assert_eq!(valid(&q), 2);
        q.settle_records(dropped[0].record.as_slice());
        assert_eq!(valid(&q), 1);
        // Past the delivery limit on its way back: returned, still stored.
        let taken = q.get(|_, _| Some(1), true).unwrap().1;
        let over = q.requeue(vec![taken], true);
        assert_eq!(over.len(), 1);
        assert_eq!(valid(&q), 1);
        q.settle_records(over[0].record.as_slice());
        assert_eq!(valid(&q), 0);
    }

    #[test]
    fn redeliver_counts_deliveries_of_redelivered_messages_not_requeues() {
        let sim = SimBackend::new();
        let q = stored_queue(&sim, 10);
        publish(&q, 0, false);
        let taken = q.get(|_, _| Some(1), true).unwrap().1;
        q.requeue(vec![taken], true);
        assert_eq!(q.stats().redelivered, 0);
        let again = get(&q).unwrap();
        assert!(again.redelivered);
        assert_eq!((q.stats().redelivered, q.stats().delivered), (1, 2));
    }
}
