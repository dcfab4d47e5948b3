//! A queue: ready messages in FIFO order, its consumers, round-robin dispatch.
//!
//! Each queue has its own mutex (ARCHITECTURE.md §4). Dispatch runs under it and offers the
//! head message to consumers in round-robin order (AMQP 0-9-1 §3.1.4 "round-robin
//! between consumers"); a consumer whose prefetch is reached or whose connection's
//! outbound buffer is saturated is skipped. Every message carries a queue sequence
//! number, so a requeued message goes back to its original position, ahead of newer
//! ones (RabbitMQ's behaviour since 2.7).

use crate::broker::channel::Offer;
use crate::broker::consumer::Consumer;
use crate::broker::message::Message;
use crate::broker::queue_storage::QueueStorage;
use crate::error::BrokerError;
use crate::storage::RecordRef;
use crate::types::FieldTable;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// A message in a queue: its position and whether it was delivered before.
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
}

/// What became of a message offered to a queue.
#[derive(Debug)]
pub enum Enqueued {
    /// Taken; `sync` is the epoch a publisher confirm must wait for, if any.
    Accepted {
        /// Flusher epoch covering the stored record (`--fsync always`).
        sync: Option<u64>,
    },
    /// The queue was deleted meanwhile; the message was not taken.
    Gone,
    /// The queue could not store the persistent message (storage failure, full disk).
    Refused(String),
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
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages requeued for redelivery.
    pub redelivered: u64,
}

#[derive(Debug, Default)]
struct QueueState {
    ready: VecDeque<QueuedMessage>,
    next_seq: u64,
    consumers: Vec<Arc<Consumer>>,
    /// Index of the consumer to offer the next message to first.
    round_robin: usize,
    deleted: bool,
    /// A consumer was attached at some point (auto-delete fires only after one).
    had_consumers: bool,
    stats: QueueStats,
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
    /// Id of the stored queue in `meta.db` (durable, non-exclusive queues of a broker with
    /// storage); also the name of its directory.
    pub storage_id: Option<String>,
    /// The message store of a stored queue (`None` also when it could not be opened at
    /// start: persistent publishes to it are then refused).
    pub storage: Option<QueueStorage>,
    state: Mutex<QueueState>,
}

/// A recovered message: the message, its redelivered flag, its record.
pub type QueuedMessageParts = (Arc<Message>, bool, RecordRef);

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
        Queue {
            name,
            durable,
            exclusive,
            auto_delete,
            owner,
            arguments,
            storage_id: None,
            storage: None,
            state: Mutex::new(QueueState::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
        let mut written = None;
        let mut record = None;
        if self.storage_id.is_some() && msg.properties().is_persistent() {
            let Some(storage) = &self.storage else {
                return Enqueued::Refused(format!(
                    "queue '{}' is out of service: its store could not be opened",
                    self.name
                ));
            };
            match storage.append(&self.name, &msg) {
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
        st.stats.ready_bytes += msg.body_size();
        st.ready.push_back(QueuedMessage {
            seq,
            msg,
            redelivered: false,
            record,
        });
        self.dispatch_locked(&mut st);
        drop(st);
        let sync = match (&self.storage, written) {
            (Some(storage), Some(w)) => storage.submit(w),
            _ => None,
        };
        Enqueued::Accepted { sync }
    }

    /// Puts recovered messages in the queue, in order (start-up only).
    pub fn restore(&self, messages: impl IntoIterator<Item = QueuedMessageParts>) {
        let mut st = self.lock();
        for (msg, redelivered, record) in messages {
            let seq = st.next_seq;
            st.next_seq += 1;
            st.stats.ready_bytes += msg.body_size();
            st.ready.push_back(QueuedMessage {
                seq,
                msg,
                redelivered,
                record: Some(record),
            });
        }
    }

    /// Offers ready messages to consumers until none is ready or none can take more.
    pub fn dispatch(self: &Arc<Self>) {
        let mut st = self.lock();
        self.dispatch_locked(&mut st);
    }

    fn dispatch_locked(self: &Arc<Self>, st: &mut QueueState) {
        let n = st.consumers.len();
        if n == 0 {
            return;
        }
        while let Some(front) = st.ready.front() {
            let mut taken = None;
            for i in 0..n {
                let idx = (st.round_robin + i) % n;
                let consumer = &st.consumers[idx];
                if let Offer::Delivered { tracked } = consumer.channel.offer(consumer, self, front)
                {
                    taken = Some((idx, tracked));
                    break;
                }
            }
            let Some((idx, tracked)) = taken else { break };
            st.round_robin = (idx + 1) % n;
            let mut delivered_record = None;
            if let Some(entry) = st.ready.pop_front() {
                st.stats.ready_bytes -= entry.msg.body_size();
                delivered_record = entry.record;
            }
            st.stats.delivered += 1;
            if tracked {
                st.stats.unacked += 1;
            }
            self.store_delivered(delivered_record, tracked);
        }
    }

    /// Records a delivery of a stored message: a delivered entry when it awaits an ack, a
    /// settlement when it was delivered without one.
    fn store_delivered(&self, record: Option<RecordRef>, tracked: bool) {
        if let (Some(storage), Some(record)) = (&self.storage, record) {
            if tracked {
                storage.mark_delivered(&self.name, record);
            } else {
                storage.settle(&self.name, record);
            }
        }
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
        self.dispatch_locked(&mut st);
        Ok(())
    }

    /// Detaches the consumer with `tag` on channel (`connection_id`, `channel`).
    pub fn remove_consumer(&self, tag: &str, connection_id: u64, channel: u16) -> ConsumerRemoved {
        let mut st = self.lock();
        let before = st.consumers.len();
        st.consumers.retain(|c| {
            !(&*c.tag == tag
                && c.channel.connection_id == connection_id
                && c.channel.number == channel)
        });
        if st.consumers.len() == before {
            return ConsumerRemoved::NotFound;
        }
        st.stats.consumers = st.consumers.len();
        if st.round_robin >= st.consumers.len() {
            st.round_robin = 0;
        }
        if self.auto_delete && st.consumers.is_empty() && st.had_consumers && !st.deleted {
            ConsumerRemoved::LastOfAutoDelete
        } else {
            ConsumerRemoved::Removed
        }
    }

    /// Puts delivered messages back at their original positions, marked redelivered, and
    /// dispatches. Messages of a deleted queue are dropped.
    pub fn requeue(self: &Arc<Self>, entries: Vec<QueuedMessage>) {
        let mut st = self.lock();
        let n = entries.len();
        st.stats.unacked = st.stats.unacked.saturating_sub(n);
        if st.deleted {
            return;
        }
        st.stats.redelivered += n as u64;
        for mut entry in entries {
            entry.redelivered = true;
            st.stats.ready_bytes += entry.msg.body_size();
            // Requeued messages are usually older than everything ready: check the front
            // first, then fall back to a binary search.
            let at = match st.ready.front() {
                Some(f) if f.seq > entry.seq => 0,
                None => 0,
                _ => st.ready.partition_point(|m| m.seq < entry.seq),
            };
            st.ready.insert(at, entry);
        }
        self.dispatch_locked(&mut st);
    }

    /// Records that delivered messages were acked (or dropped by nack/reject): their
    /// stored records are settled.
    pub fn settle(&self, entries: &[QueuedMessage], acked: bool) {
        let n = entries.len();
        {
            let mut st = self.lock();
            st.stats.unacked = st.stats.unacked.saturating_sub(n);
            if acked {
                st.stats.acked += n as u64;
            }
        }
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
        let mut st = self.lock();
        let left = st.ready.len().checked_sub(1)?;
        let front = st.ready.front()?;
        let tag = record(front, left)?;
        let entry = st.ready.pop_front()?;
        st.stats.ready_bytes -= entry.msg.body_size();
        st.stats.delivered += 1;
        if tracked {
            st.stats.unacked += 1;
        }
        let left = st.ready.len();
        self.store_delivered(entry.record, tracked);
        Some((tag, entry, left))
    }

    /// Removes every ready message; returns how many (AMQP `queue.purge`).
    pub fn purge(&self) -> usize {
        let mut st = self.lock();
        let n = st.ready.len();
        let purged = std::mem::take(&mut st.ready);
        st.stats.ready_bytes = 0;
        if let Some(storage) = &self.storage {
            for record in purged.iter().filter_map(|e| e.record) {
                storage.settle(&self.name, record);
            }
        }
        n
    }

    /// Marks the queue deleted, drops its ready messages, and returns their count and the
    /// consumers that must be told they were cancelled.
    pub fn mark_deleted(&self) -> (usize, Vec<Arc<Consumer>>) {
        let mut st = self.lock();
        st.deleted = true;
        let n = st.ready.len();
        st.ready.clear();
        st.stats.ready_bytes = 0;
        let consumers = std::mem::take(&mut st.consumers);
        for c in &consumers {
            c.cancelled.store(true, Ordering::Relaxed);
        }
        st.stats.consumers = 0;
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
            ..st.stats
        }
    }

    /// The attached consumers.
    pub fn consumers(&self) -> Vec<Arc<Consumer>> {
        self.lock().consumers.clone()
    }
}
