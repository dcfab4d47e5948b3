//! A channel's acknowledgement state: delivery tags, unacked deliveries and prefetch.
//!
//! Shared between the connection's session (acks, nacks, close) and every queue that
//! delivers to one of the channel's consumers. Delivery tags are assigned and the delivery
//! is written to the outbound buffer under the same lock, so a client always sees tags in
//! increasing order (AMQP 0-9-1 §1.8.3.13: tags are channel-scoped and increase).
//!
//! Consumer timeout: each tracked delivery has a deadline (delivered at + its queue's
//! [`Queue::consumer_timeout_ms`]); the earliest is kept in an atomic the housekeeper reads
//! without the lock. [`Channel::take_timed_out`] takes what is past it, and the tags it
//! took are remembered (at most [`TIMED_OUT_TAGS_MAX`]) so a late ack of one is ignored
//! rather than a channel error (docs/lifecycle.md, "Consumer timeout").

pub mod confirm;
pub mod hasher;
pub mod timeout;
pub mod unacked;

use crate::broker::consumer::Consumer;
use crate::broker::message::Message;
use crate::broker::queue::expiry::now_ms;
use crate::broker::queue::{Queue, QueuedMessage};
use crate::broker::sink::ClientSink;
use crate::error::BrokerError;
use crate::limits::TIMED_OUT_TAGS_MAX;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A delivery the client has not acknowledged yet.
#[derive(Debug, Clone)]
pub struct Unacked {
    /// Its delivery tag on the channel.
    pub tag: u64,
    /// The queue it came from (requeued there on nack, reject or close).
    pub queue: Arc<Queue>,
    /// The message and its position in the queue.
    pub entry: QueuedMessage,
    /// The consumer it went to; `None` for `basic.get`.
    pub consumer: Option<Arc<Consumer>>,
    /// When it was recorded (delivered or got), ms since the Unix epoch: the unacked
    /// browser's `delivered_at` ([`unacked`]).
    pub delivered_at_ms: u64,
    /// When it times out, ms since the Unix epoch: delivered at + its queue's consumer
    /// timeout; `None` when that timeout is 0 (off).
    pub deadline_ms: Option<u64>,
}

/// What [`Channel::take_timed_out`] took from a channel.
#[derive(Debug, Default)]
pub struct TimedOut {
    /// The consumers that had a delivery past its deadline, now marked cancelled (no
    /// delivery is offered to them any more). The caller detaches them from their queues
    /// and tells their clients.
    pub consumers: Vec<Arc<Consumer>>,
    /// Every unacked delivery of those consumers, and the `basic.get` deliveries past their
    /// deadline, in tag order: to requeue.
    pub deliveries: Vec<Unacked>,
}

/// The deadline of a delivery from `queue` made at `now_ms` (`None`: its timeout is off).
fn deadline_for(queue: &Queue, now_ms: u64) -> Option<u64> {
    match queue.consumer_timeout_ms {
        0 => None,
        ms => Some(now_ms.saturating_add(ms)),
    }
}

/// Outcome of offering a message to a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Delivered; `tracked` says whether it awaits an ack.
    Delivered {
        /// The delivery awaits an ack (manual-ack consumer).
        tracked: bool,
    },
    /// The consumer cannot take more now (prefetch reached or outbound saturated).
    Full,
    /// The channel is closed.
    Closed,
}

/// Outcome of pushing a direct reply to a channel ([`Channel::deliver_reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyOffer {
    /// Written to the client.
    Delivered,
    /// The connection's outbound backlog had no room for it ([`ClientSink::deliver_reply`]):
    /// dropped, no delivery tag used.
    Full,
    /// The channel is closed or the consumer cancelled: nobody to deliver to.
    Closed,
}

#[derive(Debug, Default)]
struct AckState {
    closed: bool,
    next_tag: u64,
    unacked: VecDeque<Unacked>,
    /// Unacked deliveries to consumers (not gets), counted against the channel prefetch.
    consumer_unacked: u32,
    /// `basic.qos global=true`: limit for the whole channel (0 = none).
    channel_prefetch: u16,
    /// `basic.qos global=false`: limit given to consumers created from now on.
    consumer_prefetch: u16,
    /// Tags of deliveries the consumer timeout took and that were not acked late yet
    /// (at most [`TIMED_OUT_TAGS_MAX`], the lowest forgotten first).
    timed_out: BTreeSet<u64>,
    /// Deliveries and gets so far, counted under the lock the delivery takes anyway.
    sent: SentCounts,
}

/// Messages a channel sent its client, by kind (RabbitMQ's channel `deliver`,
/// `deliver_no_ack`, `get`, `get_no_ack` and `redeliver` counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SentCounts {
    /// Pushed to consumers that ack.
    pub deliver: u64,
    /// Pushed to no-ack consumers.
    pub deliver_no_ack: u64,
    /// `basic.get` awaiting an ack.
    pub get: u64,
    /// `basic.get` without an ack.
    pub get_no_ack: u64,
    /// Any of the four with the redelivered flag.
    pub redeliver: u64,
}

/// Counters a channel's session bumps (one relaxed add per event, on the connection's
/// own channel; no lock): what RabbitMQ's channel `message_stats` count on the publish
/// and ack side.
#[derive(Debug, Default)]
pub struct ChannelCounters {
    /// Messages published on the channel (accepted for routing).
    pub publish: AtomicU64,
    /// Publishes confirmed with `basic.ack` (confirm mode).
    pub confirm: AtomicU64,
    /// Mandatory publishes no queue took, returned (`basic.return`).
    pub return_unroutable: AtomicU64,
    /// Publishes no queue took, dropped.
    pub drop_unroutable: AtomicU64,
    /// Messages acknowledged by the client (`basic.ack`; nack and reject not counted).
    pub ack: AtomicU64,
    /// `basic.get` that found the queue empty.
    pub get_empty: AtomicU64,
    /// The channel is in confirm mode (`confirm.select`).
    pub confirm_mode: std::sync::atomic::AtomicBool,
    /// The channel is transactional (`tx.select`).
    pub transactional: std::sync::atomic::AtomicBool,
}

impl ChannelCounters {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// What a channel holds now, read under its lock once (for the management API's channel
/// rows: RabbitMQ's `messages_unacknowledged`, `prefetch_count`, `global_prefetch_count`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelInfo {
    /// Deliveries and gets awaiting their ack, in messages.
    pub unacked: usize,
    /// The per-consumer prefetch new consumers get (`basic.qos global=false`), 0 = none.
    pub consumer_prefetch: u16,
    /// The channel-wide prefetch (`basic.qos global=true`), 0 = none.
    pub channel_prefetch: u16,
    /// The next delivery tag minus one: deliveries and gets so far.
    pub delivered: u64,
    /// Deliveries and gets by kind.
    pub sent: SentCounts,
}

/// One open channel of a connection, as the core sees it.
pub struct Channel {
    /// The owning connection's id.
    pub connection_id: u64,
    /// Channel number on that connection.
    pub number: u16,
    /// Where deliveries and other pushes for this channel go.
    pub sink: Arc<dyn ClientSink>,
    state: Mutex<AckState>,
    /// Publish, confirm, return and ack counts (the management API's channel rows).
    pub counters: ChannelCounters,
    /// The earliest deadline of an unacked delivery, ms since the Unix epoch (`u64::MAX`:
    /// none). Lowered under the lock when a delivery is recorded; may stay too early after
    /// acks until [`Channel::take_timed_out`] recomputes it. Read without the lock.
    earliest_deadline_ms: AtomicU64,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("connection_id", &self.connection_id)
            .field("number", &self.number)
            .finish()
    }
}

impl Channel {
    /// A new open channel with no deliveries; tags start at 1.
    pub fn new(connection_id: u64, number: u16, sink: Arc<dyn ClientSink>) -> Channel {
        Channel {
            connection_id,
            number,
            sink,
            state: Mutex::new(AckState {
                next_tag: 1,
                ..Default::default()
            }),
            counters: ChannelCounters::default(),
            earliest_deadline_ms: AtomicU64::new(u64::MAX),
        }
    }

    /// Records a delivery awaiting its ack (lock held), lowering the earliest deadline.
    fn track(&self, st: &mut AckState, unacked: Unacked) {
        if let Some(d) = unacked.deadline_ms {
            if d < self.earliest_deadline_ms.load(Ordering::Relaxed) {
                self.earliest_deadline_ms.store(d, Ordering::Relaxed);
            }
        }
        // Acks find their deliveries by binary search: tags must increase along the list.
        debug_assert!(
            st.unacked.back().is_none_or(|last| last.tag < unacked.tag),
            "delivery tags increase"
        );
        st.unacked.push_back(unacked);
    }

    /// Whether a delivery may be past its deadline at `now_ms` (one atomic load, no lock;
    /// a true answer may be stale, [`Channel::take_timed_out`] checks under the lock).
    pub fn may_have_timed_out(&self, now_ms: u64) -> bool {
        self.earliest_deadline_ms.load(Ordering::Relaxed) <= now_ms
    }

    /// Takes the deliveries the consumer timeout ends at `now_ms` (ms since the Unix
    /// epoch): for each consumer with a delivery past its deadline, the consumer is marked
    /// cancelled and all of its unacked deliveries are taken; a `basic.get` delivery past
    /// its deadline is taken alone. Their tags are remembered so a late ack of one is
    /// ignored ([`Channel::take`]). Recomputes the earliest deadline of what stays.
    pub fn take_timed_out(&self, now_ms: u64) -> TimedOut {
        let mut st = self.lock();
        let due = |u: &Unacked| u.deadline_ms.is_some_and(|d| d <= now_ms);
        let mut out = TimedOut::default();
        if !st.closed && st.unacked.iter().any(due) {
            for c in st
                .unacked
                .iter()
                .filter(|u| due(u))
                .filter_map(|u| u.consumer.as_ref())
            {
                if !out.consumers.iter().any(|x| Arc::ptr_eq(x, c)) {
                    // Under the channel lock: `offer` sees it and delivers nothing more.
                    c.cancelled.store(true, Ordering::Relaxed);
                    out.consumers.push(Arc::clone(c));
                }
            }
            let consumers = &out.consumers;
            let (taken, kept): (Vec<Unacked>, Vec<Unacked>) =
                st.unacked.drain(..).partition(|u| match &u.consumer {
                    Some(c) => consumers.iter().any(|x| Arc::ptr_eq(x, c)),
                    None => due(u),
                });
            st.unacked = kept.into();
            for u in &taken {
                st.timed_out.insert(u.tag);
            }
            while st.timed_out.len() > TIMED_OUT_TAGS_MAX {
                st.timed_out.pop_first();
            }
            Self::release(&mut st, &taken);
            out.deliveries = taken;
        }
        let earliest = st
            .unacked
            .iter()
            .filter_map(|u| u.deadline_ms)
            .min()
            .unwrap_or(u64::MAX);
        self.earliest_deadline_ms.store(earliest, Ordering::Relaxed);
        out
    }

    fn lock(&self) -> MutexGuard<'_, AckState> {
        // A poisoned lock means a worker panicked mid-update; the state is still
        // structurally valid (plain collections), so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets prefetch (AMQP `basic.qos`): `global` true limits the channel, false the
    /// consumers created afterwards (RabbitMQ's reinterpretation of `global`).
    pub fn set_prefetch(&self, count: u16, global: bool) {
        let mut st = self.lock();
        if global {
            st.channel_prefetch = count;
        } else {
            st.consumer_prefetch = count;
        }
    }

    /// Whether the channel was closed.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Its unacked count and prefetch settings, read once under its lock.
    pub fn info(&self) -> ChannelInfo {
        let st = self.lock();
        ChannelInfo {
            unacked: st.unacked.len(),
            consumer_prefetch: st.consumer_prefetch,
            channel_prefetch: st.channel_prefetch,
            delivered: st.next_tag.saturating_sub(1),
            sent: st.sent,
        }
    }

    /// The per-consumer prefetch new consumers get.
    pub fn consumer_prefetch(&self) -> u16 {
        self.lock().consumer_prefetch
    }

    /// Offers `entry` from `queue` to `consumer`: if the channel is open and the consumer has
    /// room, assigns the next delivery tag, records it as unacked (manual ack), calls
    /// `taken` with whether an ack is awaited (the queue stores the delivery there, before
    /// the client can have it) and pushes it to the sink, all under the channel lock.
    pub fn offer(
        &self,
        consumer: &Arc<Consumer>,
        queue: &Arc<Queue>,
        entry: &QueuedMessage,
        taken: impl FnOnce(bool),
    ) -> Offer {
        let mut st = self.lock();
        if st.closed || consumer.is_cancelled() {
            return Offer::Closed;
        }
        if self.sink.is_saturated() {
            return Offer::Full;
        }
        if !consumer.no_ack {
            let mine = consumer.unacked.load(Ordering::Relaxed);
            if consumer.prefetch > 0 && mine >= consumer.prefetch as u32 {
                return Offer::Full;
            }
            if st.channel_prefetch > 0 && st.consumer_unacked >= st.channel_prefetch as u32 {
                return Offer::Full;
            }
        }
        let tag = st.next_tag;
        st.next_tag += 1;
        if !consumer.no_ack {
            consumer.unacked.fetch_add(1, Ordering::Relaxed);
            st.consumer_unacked += 1;
            // One clock read per delivery awaiting an ack (none on the no-ack path); the
            // deadline counts from it.
            let now = now_ms();
            let unacked = Unacked {
                tag,
                queue: Arc::clone(queue),
                entry: entry.clone(),
                consumer: Some(Arc::clone(consumer)),
                delivered_at_ms: now,
                deadline_ms: deadline_for(queue, now),
            };
            self.track(&mut st, unacked);
        }
        taken(!consumer.no_ack);
        if consumer.no_ack {
            st.sent.deliver_no_ack += 1;
        } else {
            st.sent.deliver += 1;
        }
        st.sent.redeliver += u64::from(entry.redelivered);
        self.sink.deliver(
            self.number,
            &consumer.tag,
            tag,
            entry.redelivered,
            &entry.msg,
        );
        Offer::Delivered {
            tracked: !consumer.no_ack,
        }
    }

    /// Pushes a direct reply to `consumer` (the channel's `amq.rabbitmq.reply-to`
    /// consumer, no-ack): under the channel lock, so its delivery tag is the next one and
    /// is written in order with the queues' deliveries. The tag is used only when the sink
    /// wrote the reply. Counted as a no-ack delivery (`deliver_no_ack`).
    pub fn deliver_reply(&self, consumer: &Consumer, msg: &Message) -> ReplyOffer {
        let mut st = self.lock();
        if st.closed || consumer.is_cancelled() {
            return ReplyOffer::Closed;
        }
        let tag = st.next_tag;
        if !self
            .sink
            .deliver_reply(self.number, &consumer.tag, tag, msg)
        {
            return ReplyOffer::Full;
        }
        st.next_tag += 1;
        st.sent.deliver_no_ack += 1;
        ReplyOffer::Delivered
    }

    /// Marks `consumer` cancelled under the channel lock: once this returns, no delivery to
    /// it is being written and none will be.
    pub fn stop_consumer(&self, consumer: &Consumer) {
        let _state = self.lock();
        consumer.cancelled.store(true, Ordering::Relaxed);
    }

    /// Assigns a delivery tag to a message taken with `basic.get`, recording it as unacked
    /// unless `no_ack`, and calls `emit` with the tag under the channel lock, so the
    /// `get-ok` is written before any later delivery on the channel. Returns `None` (and
    /// emits nothing) when the channel is closed.
    pub fn record_get(
        &self,
        queue: &Arc<Queue>,
        entry: &QueuedMessage,
        no_ack: bool,
        emit: impl FnOnce(u64),
    ) -> Option<u64> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        let tag = st.next_tag;
        st.next_tag += 1;
        emit(tag);
        if no_ack {
            st.sent.get_no_ack += 1;
        } else {
            st.sent.get += 1;
        }
        st.sent.redeliver += u64::from(entry.redelivered);
        if !no_ack {
            let now = now_ms();
            let unacked = Unacked {
                tag,
                queue: Arc::clone(queue),
                entry: entry.clone(),
                consumer: None,
                delivered_at_ms: now,
                deadline_ms: deadline_for(queue, now),
            };
            self.track(&mut st, unacked);
        }
        Some(tag)
    }

    /// Removes and returns the deliveries an ack, nack or reject refers to: the one with
    /// `tag`, or with `multiple` every one up to and including it (tag 0: all).
    ///
    /// A `tag` the consumer timeout took (and still remembers, see [`TIMED_OUT_TAGS_MAX`])
    /// is a late ack: it is logged and ignored, once; with `multiple` the outstanding
    /// deliveries below it are still returned (docs/lifecycle.md, "Consumer timeout").
    /// A `multiple` ack also forgets the timed-out tags it covers.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED "unknown delivery tag N" when nothing matches (AMQP 0-9-1
    /// §1.8.3.13; RabbitMQ's text).
    pub fn take(&self, tag: u64, multiple: bool) -> Result<Vec<Unacked>, BrokerError> {
        let mut st = self.lock();
        let taken: Vec<Unacked> = if multiple && tag == 0 {
            st.timed_out.clear();
            st.unacked.drain(..).collect()
        } else {
            // The tag itself must be outstanding (or have timed out), with or without
            // `multiple` (RabbitMQ's collect_acks): acking "up to 5" after 5 was settled is
            // a client bug, not a licence to settle 1–4.
            let found = st.unacked.binary_search_by_key(&tag, |u| u.tag);
            let late = found.is_err() && st.timed_out.contains(&tag);
            if found.is_err() && !late {
                return Err(BrokerError::precondition(format!(
                    "unknown delivery tag {tag}"
                )));
            }
            if multiple && !st.timed_out.is_empty() {
                st.timed_out = st.timed_out.split_off(&tag.saturating_add(1));
            } else if late {
                st.timed_out.remove(&tag);
            }
            if late {
                log::warn!(
                    "late ack of delivery tag {tag} on channel {} (connection {}) ignored: it \
                     timed out and was requeued",
                    self.number,
                    self.connection_id
                );
            }
            match found {
                Ok(i) if multiple => st.unacked.drain(..=i).collect(),
                Ok(i) => st.unacked.remove(i).into_iter().collect(),
                Err(below) if multiple => st.unacked.drain(..below).collect(),
                Err(_) => Vec::new(),
            }
        };
        Self::release(&mut st, &taken);
        if st.unacked.is_empty() {
            self.earliest_deadline_ms.store(u64::MAX, Ordering::Relaxed);
        }
        Ok(taken)
    }

    /// Closes the channel for deliveries and returns every unacked delivery, for requeueing.
    pub fn close(&self) -> Vec<Unacked> {
        let mut st = self.lock();
        st.closed = true;
        let taken: Vec<Unacked> = st.unacked.drain(..).collect();
        Self::release(&mut st, &taken);
        self.earliest_deadline_ms.store(u64::MAX, Ordering::Relaxed);
        taken
    }

    /// Returns every unacked delivery (AMQP `basic.recover requeue=true`), leaving the
    /// channel open.
    pub fn take_all(&self) -> Vec<Unacked> {
        let mut st = self.lock();
        let taken: Vec<Unacked> = st.unacked.drain(..).collect();
        Self::release(&mut st, &taken);
        self.earliest_deadline_ms.store(u64::MAX, Ordering::Relaxed);
        taken
    }

    /// Up to `max` of the deliveries from `queue` awaiting their ack on this channel, in
    /// tag order (the order they were made), copied under the channel lock
    /// ([`unacked::of_queue`]).
    pub fn unacked_from(&self, queue: &Arc<Queue>, max: usize) -> Vec<unacked::UnackedDelivery> {
        let st = self.lock();
        st.unacked
            .iter()
            .filter(|u| Arc::ptr_eq(&u.queue, queue))
            .take(max)
            .map(|u| unacked::UnackedDelivery {
                connection_id: self.connection_id,
                channel: self.number,
                delivery_tag: u.tag,
                consumer_tag: u.consumer.as_ref().map(|c| Arc::clone(&c.tag)),
                message: Arc::clone(&u.entry.msg),
                redelivered: u.entry.redelivered,
                delivery_count: u.entry.delivery_count,
                delivered_at_ms: u.delivered_at_ms,
            })
            .collect()
    }

    fn release(st: &mut AckState, taken: &[Unacked]) {
        for u in taken {
            if let Some(c) = &u.consumer {
                c.unacked.fetch_sub(1, Ordering::Relaxed);
                st.consumer_unacked = st.consumer_unacked.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::message::Message;
    use crate::broker::sink::CancelReason;
    use crate::error::ReplyCode;
    use crate::types::{BasicProperties, FieldTable};

    /// Counts deliveries and server cancels.
    #[derive(Default)]
    struct Recorder {
        delivered: Mutex<Vec<u64>>,
    }

    impl ClientSink for Recorder {
        fn deliver(&self, _: u16, _: &str, tag: u64, _: bool, _: &Message) {
            self.delivered.lock().unwrap().push(tag);
        }
        fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
        fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {}
        fn confirm(&self, _: u16, _: u64, _: bool, _: bool) {}
        fn is_saturated(&self) -> bool {
            false
        }
        fn force_close(&self, _: ReplyCode, _: &str) {}
    }

    /// Later than any deadline a delivery made now can have.
    const LATER: u64 = u64::MAX - 1;

    fn queue(timeout_ms: u64) -> Arc<Queue> {
        let mut q = Queue::new("q".into(), false, false, false, None, FieldTable::new());
        q.consumer_timeout_ms = timeout_ms;
        Arc::new(q)
    }

    fn entry(seq: u64) -> QueuedMessage {
        QueuedMessage {
            seq,
            msg: Arc::new(Message::new(
                "",
                "q",
                BasicProperties::default(),
                b"m".to_vec(),
            )),
            redelivered: false,
            record: None,
            delivery_count: 1,
            deadline_ms: None,
        }
    }

    fn channel() -> Channel {
        Channel::new(7, 1, Arc::new(Recorder::default()))
    }

    /// A `basic.get` delivery from `q` awaiting its ack; returns its tag.
    fn get(ch: &Channel, q: &Arc<Queue>, seq: u64) -> u64 {
        ch.record_get(q, &entry(seq), false, |_| {})
            .expect("open channel")
    }

    fn tags(taken: &[Unacked]) -> Vec<u64> {
        taken.iter().map(|u| u.tag).collect()
    }

    fn unknown(result: Result<Vec<Unacked>, BrokerError>) -> String {
        let e = result.expect_err("406");
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        e.text
    }

    #[test]
    fn a_late_ack_of_a_timed_out_tag_is_ignored_once() {
        let ch = channel();
        let q = queue(1000);
        let tag = get(&ch, &q, 1);
        assert!(!ch.may_have_timed_out(now_ms()), "not due yet");
        assert!(ch.take_timed_out(now_ms()).deliveries.is_empty());
        assert!(ch.may_have_timed_out(LATER));
        let timed_out = ch.take_timed_out(LATER);
        assert_eq!(tags(&timed_out.deliveries), vec![tag]);
        assert!(timed_out.consumers.is_empty(), "a get has no consumer");
        assert!(!ch.may_have_timed_out(LATER), "nothing left to time out");

        assert!(ch.take(tag, false).unwrap().is_empty(), "late ack ignored");
        let text = unknown(ch.take(tag, false));
        assert_eq!(text, format!("unknown delivery tag {tag}"), "acked twice");
        assert_eq!(unknown(ch.take(99, false)), "unknown delivery tag 99");
    }

    #[test]
    fn a_queue_without_timeout_never_times_out() {
        let ch = channel();
        let tag = get(&ch, &queue(0), 1);
        assert!(!ch.may_have_timed_out(LATER));
        assert!(ch.take_timed_out(LATER).deliveries.is_empty());
        assert_eq!(tags(&ch.take(tag, false).unwrap()), vec![tag]);
    }

    #[test]
    fn a_late_multiple_ack_settles_the_outstanding_deliveries_below_it() {
        let ch = channel();
        let (off, short) = (queue(0), queue(1));
        let first = get(&ch, &off, 1);
        let timed = get(&ch, &short, 2);
        let last = get(&ch, &off, 3);
        assert_eq!(tags(&ch.take_timed_out(LATER).deliveries), vec![timed]);

        assert_eq!(tags(&ch.take(timed, true).unwrap()), vec![first]);
        assert_eq!(tags(&ch.take(last, false).unwrap()), vec![last]);
        // The multiple ack covered the timed-out tag: acking it again is a client bug.
        unknown(ch.take(timed, false));
    }

    #[test]
    fn a_multiple_ack_over_a_timed_out_tag_forgets_it() {
        let ch = channel();
        let (off, short) = (queue(0), queue(1));
        let timed = get(&ch, &short, 1);
        let outstanding = get(&ch, &off, 2);
        ch.take_timed_out(LATER);
        assert_eq!(
            tags(&ch.take(outstanding, true).unwrap()),
            vec![outstanding]
        );
        unknown(ch.take(timed, false));
    }

    #[test]
    fn the_timed_out_tags_remembered_are_bounded_oldest_forgotten_first() {
        let ch = channel();
        let q = queue(1);
        let n = TIMED_OUT_TAGS_MAX as u64 + 1;
        for seq in 1..=n {
            get(&ch, &q, seq);
        }
        assert_eq!(ch.take_timed_out(LATER).deliveries.len(), n as usize);
        assert_eq!(unknown(ch.take(1, false)), "unknown delivery tag 1");
        assert!(ch.take(2, false).unwrap().is_empty());
        assert!(ch.take(n, false).unwrap().is_empty());
    }

    #[test]
    fn a_timed_out_consumer_loses_all_its_deliveries_and_gets_no_more() {
        let ch = Arc::new(channel());
        let q = queue(1000);
        let consumer = Arc::new(Consumer::new(
            "c".into(),
            Arc::clone(&q.name),
            Arc::clone(&ch),
            false,
            false,
            0,
            FieldTable::new(),
        ));
        for seq in 1..=2 {
            let offered = ch.offer(&consumer, &q, &entry(seq), |_| {});
            assert_eq!(offered, Offer::Delivered { tracked: true });
        }
        let got = get(&ch, &queue(0), 3);
        let timed_out = ch.take_timed_out(LATER);
        assert_eq!(tags(&timed_out.deliveries), vec![1, 2]);
        assert_eq!(timed_out.consumers.len(), 1);
        assert!(consumer.is_cancelled());
        assert_eq!(consumer.unacked(), 0);
        assert_eq!(ch.offer(&consumer, &q, &entry(4), |_| {}), Offer::Closed);
        assert_eq!(
            tags(&ch.take(got, false).unwrap()),
            vec![got],
            "the get stays"
        );
    }
}
