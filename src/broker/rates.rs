//! Message rates and their recent history, as RabbitMQ's management API shows them
//! (`message_stats.publish_details.rate`, `messages_details.samples`, ...), for `list
//! queues`, `list vhosts` and the management HTTP API.
//!
//! Nothing is counted for the queues' rates on the message path: the queues' own totals
//! (kept under the queue lock they already take) are read by one thread, the
//! housekeeper, every [`RATE_SAMPLE_INTERVAL_MS`]. Exchanges, channels and connections
//! keep a few relaxed atomic counters (a publish adds to its exchange's and channel's;
//! the I/O thread adds each read's and write's bytes) and a channel counts its
//! deliveries under the lock a delivery takes anyway; the same thread samples them into
//! rates ([`Rates::object`], no history). A rate is the difference between the last two samples
//! over the time between them. Each queue keeps the last [`RATE_HISTORY_SAMPLES`]
//! samples of [`HISTORY_SERIES`] series (publish, deliver/get, ack and redeliver
//! increments, ready and unacked lengths) as `u32`s: 24 bytes a sample, about 3 KiB a
//! queue for 10 minutes at 5 s, so 10,000 queues cost about 30 MB; the broker-wide sums
//! are kept the same way once. A queue's history goes with the queue (the next sample
//! forgets it). [`Rates::set_enabled`] turns sampling off (the rates then read zero and
//! no history is kept).

use crate::broker::node::Broker;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Time between two samples of the queues' totals, in ms (RabbitMQ's
/// `collect_statistics_interval` default, 5000 ms).
pub const RATE_SAMPLE_INTERVAL_MS: u64 = 5000;

/// Samples kept per queue and for the broker, in samples: 10 minutes at
/// [`RATE_SAMPLE_INTERVAL_MS`] and the one before (RabbitMQ's `basic` retention keeps
/// 600 s at 5 s first).
pub const RATE_HISTORY_SAMPLES: usize = 121;

/// The series kept in a queue's history: the increments of `publish`, `deliver_get`,
/// `ack` and `redeliver` over the interval before the sample, then the `messages_ready`
/// and `messages_unacknowledged` lengths at the sample.
pub const HISTORY_SERIES: usize = 6;

/// Index of each series in a history sample.
pub mod series {
    /// Messages enqueued in the interval.
    pub const PUBLISH: usize = 0;
    /// Messages delivered or fetched in the interval.
    pub const DELIVER_GET: usize = 1;
    /// Messages acknowledged in the interval.
    pub const ACK: usize = 2;
    /// Messages redelivered in the interval.
    pub const REDELIVER: usize = 3;
    /// Ready messages at the sample.
    pub const READY: usize = 4;
    /// Unacknowledged messages at the sample.
    pub const UNACKED: usize = 5;
}

/// The series of the broker's own history (beside the sums of the queues' [`series`]),
/// for the overview's message-rates chart: the increments over the interval before the
/// sample of what queues and channels count but queues keep no history of.
pub const NODE_HISTORY_SERIES: usize = 8;

/// Index of each series in a sample of the broker's own history.
pub mod node_series {
    /// Publisher confirms sent.
    pub const CONFIRM: usize = 0;
    /// Unroutable mandatory messages returned.
    pub const RETURN_UNROUTABLE: usize = 1;
    /// Unroutable messages dropped.
    pub const DROP_UNROUTABLE: usize = 2;
    /// Messages pushed to consumers that ack.
    pub const DELIVER: usize = 3;
    /// Messages pushed to consumers without acks.
    pub const DELIVER_NO_ACK: usize = 4;
    /// `basic.get`s awaiting an ack.
    pub const GET: usize = 5;
    /// `basic.get`s without an ack.
    pub const GET_NO_ACK: usize = 6;
    /// `basic.get`s that found nothing.
    pub const GET_EMPTY: usize = 7;
}

/// Messages per second over the last sample interval (RabbitMQ's `message_stats`
/// rates, and the lengths' rates of change).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MessageRates {
    /// Messages enqueued per second (`publish_details.rate`).
    pub publish: f64,
    /// Messages pushed to consumers that ack, per second (`deliver_details.rate`).
    pub deliver: f64,
    /// Messages pushed without acks, per second (`deliver_no_ack_details.rate`).
    pub deliver_no_ack: f64,
    /// `basic.get`s awaiting an ack, per second (`get_details.rate`).
    pub get: f64,
    /// `basic.get`s without an ack, per second (`get_no_ack_details.rate`).
    pub get_no_ack: f64,
    /// `basic.get`s that found nothing, per second (`get_empty_details.rate`).
    pub get_empty: f64,
    /// Messages delivered or fetched per second, all four kinds (`deliver_get_details.rate`).
    pub deliver_get: f64,
    /// Messages delivered again per second (`redeliver_details.rate`).
    pub redeliver: f64,
    /// Messages acknowledged per second (`ack_details.rate`).
    pub ack: f64,
    /// Change of `messages_ready` per second (`messages_ready_details.rate`).
    pub ready: f64,
    /// Change of `messages_unacknowledged` per second.
    pub unacked: f64,
}

impl MessageRates {
    fn add(&mut self, o: &MessageRates) {
        self.publish += o.publish;
        self.deliver += o.deliver;
        self.deliver_no_ack += o.deliver_no_ack;
        self.get += o.get;
        self.get_no_ack += o.get_no_ack;
        self.get_empty += o.get_empty;
        self.deliver_get += o.deliver_get;
        self.redeliver += o.redeliver;
        self.ack += o.ack;
        self.ready += o.ready;
        self.unacked += o.unacked;
    }
}

/// A queue's totals at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Totals {
    published: u64,
    delivered: u64,
    delivered_no_ack: u64,
    got: u64,
    got_no_ack: u64,
    get_empty: u64,
    redelivered: u64,
    acked: u64,
    ready: u64,
    unacked: u64,
}

impl Totals {
    /// The counters alone, without the lengths (what moves when a message does).
    fn counters(&self) -> Totals {
        Totals {
            ready: 0,
            unacked: 0,
            ..*self
        }
    }

    /// The history sample from `before` to `self`.
    fn sample(&self, before: &Totals) -> [u32; HISTORY_SERIES] {
        let d = |now: u64, then: u64| u32::try_from(now.saturating_sub(then)).unwrap_or(u32::MAX);
        let v = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        let mut s = [0u32; HISTORY_SERIES];
        s[series::PUBLISH] = d(self.published, before.published);
        s[series::DELIVER_GET] = d(self.delivered, before.delivered);
        s[series::ACK] = d(self.acked, before.acked);
        s[series::REDELIVER] = d(self.redelivered, before.redelivered);
        s[series::READY] = v(self.ready);
        s[series::UNACKED] = v(self.unacked);
        s
    }

    /// Adds the increments from `before` of what the broker's own history keeps
    /// (deliveries and gets by kind) to `into`.
    fn add_node_sample(&self, before: &Totals, into: &mut [u32; NODE_HISTORY_SERIES]) {
        // `delivered` counts every kind; pushed with acks is what the others leave.
        let pushed = |t: &Totals| {
            t.delivered
                .saturating_sub(t.delivered_no_ack + t.got + t.got_no_ack)
        };
        for (i, now, then) in [
            (node_series::DELIVER, pushed(self), pushed(before)),
            (
                node_series::DELIVER_NO_ACK,
                self.delivered_no_ack,
                before.delivered_no_ack,
            ),
            (node_series::GET, self.got, before.got),
            (node_series::GET_NO_ACK, self.got_no_ack, before.got_no_ack),
            (node_series::GET_EMPTY, self.get_empty, before.get_empty),
        ] {
            let d = u32::try_from(now.saturating_sub(then)).unwrap_or(u32::MAX);
            into[i] = into[i].saturating_add(d);
        }
    }

    fn rates(&self, b: &Totals, elapsed_ms: u64) -> MessageRates {
        let per_s = |now: u64, then: u64| per_second(now, then, elapsed_ms);
        let change = |now: u64, then: u64| (now as f64 - then as f64) * 1000.0 / elapsed_ms as f64;
        let gets = |t: &Totals| t.got + t.got_no_ack;
        let pushes = |t: &Totals| t.delivered - gets(t).min(t.delivered);
        let acked_pushes = |t: &Totals| pushes(t) - t.delivered_no_ack.min(pushes(t));
        MessageRates {
            publish: per_s(self.published, b.published),
            deliver: per_s(acked_pushes(self), acked_pushes(b)),
            deliver_no_ack: per_s(self.delivered_no_ack, b.delivered_no_ack),
            get: per_s(self.got, b.got),
            get_no_ack: per_s(self.got_no_ack, b.got_no_ack),
            get_empty: per_s(self.get_empty, b.get_empty),
            deliver_get: per_s(self.delivered, b.delivered),
            redeliver: per_s(self.redelivered, b.redelivered),
            ack: per_s(self.acked, b.acked),
            ready: change(self.ready, b.ready),
            unacked: change(self.unacked, b.unacked),
        }
    }
}

/// A queue's sampled state.
#[derive(Debug, Default)]
struct QueueSeries {
    last: Totals,
    rates: MessageRates,
    /// When a sample last saw its counters move (or first saw the queue), ms since the
    /// Unix epoch; the queue is idle since then when the newest sample saw no change.
    active_ms: u64,
    /// The newest sample saw no change.
    idle: bool,
    /// The newest last; aligned with the end of [`Inner::timestamps`].
    history: VecDeque<[u32; HISTORY_SERIES]>,
}

/// (vhost, queue).
type QueueKey = (Arc<str>, Arc<str>);

/// Counters sampled per exchange, channel or connection, at most.
pub const OBJECT_COUNTERS_MAX: usize = 12;

/// An object other than a queue whose counters are sampled for rates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CounterKey {
    /// (vhost, exchange): `[publish_in, publish_out]`.
    Exchange(Arc<str>, Arc<str>),
    /// (connection id, channel number): the [`channel_counters`] order.
    Channel(u64, u16),
    /// Connection id: `[recv_oct, recv_cnt, send_oct, send_cnt]`.
    Connection(u64),
    /// The node's churn and publisher events, in the [`node_counters`] order.
    Node,
}

/// The order of the node's sampled counters (`/api/overview`'s `churn_rates` and the
/// publisher side of its `message_stats`).
pub mod node_counters {
    /// Connections opened.
    pub const CONNECTION_CREATED: usize = 0;
    /// Connections closed.
    pub const CONNECTION_CLOSED: usize = 1;
    /// Channels opened.
    pub const CHANNEL_CREATED: usize = 2;
    /// Channels closed.
    pub const CHANNEL_CLOSED: usize = 3;
    /// Queue declarations.
    pub const QUEUE_DECLARED: usize = 4;
    /// Queues created.
    pub const QUEUE_CREATED: usize = 5;
    /// Queues deleted.
    pub const QUEUE_DELETED: usize = 6;
    /// Publishes confirmed.
    pub const CONFIRM: usize = 7;
    /// Unroutable publishes returned.
    pub const RETURN_UNROUTABLE: usize = 8;
    /// Unroutable publishes dropped.
    pub const DROP_UNROUTABLE: usize = 9;
}

/// The order of a channel's sampled counters.
pub mod channel_counters {
    /// Messages published.
    pub const PUBLISH: usize = 0;
    /// Publishes confirmed.
    pub const CONFIRM: usize = 1;
    /// Unroutable, returned.
    pub const RETURN_UNROUTABLE: usize = 2;
    /// Unroutable, dropped.
    pub const DROP_UNROUTABLE: usize = 3;
    /// Pushed to consumers that ack.
    pub const DELIVER: usize = 4;
    /// Pushed without acks.
    pub const DELIVER_NO_ACK: usize = 5;
    /// Gets awaiting an ack.
    pub const GET: usize = 6;
    /// Gets without an ack.
    pub const GET_NO_ACK: usize = 7;
    /// Gets on an empty queue.
    pub const GET_EMPTY: usize = 8;
    /// Redelivered.
    pub const REDELIVER: usize = 9;
    /// Acknowledged.
    pub const ACK: usize = 10;
    /// Delivered or fetched, the four kinds.
    pub const DELIVER_GET: usize = 11;
}

/// The sampled state of one exchange, channel or connection.
#[derive(Debug, Clone, Copy, Default)]
struct ObjectSeries {
    last: [u64; OBJECT_COUNTERS_MAX],
    rates: [f64; OBJECT_COUNTERS_MAX],
    active_ms: u64,
    idle: bool,
}

/// An object's counter rates and idleness, as the last sample saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ObjectRates {
    /// Per second over the last interval, in the object's counter order (zero before the
    /// second sample).
    pub rates: [f64; OBJECT_COUNTERS_MAX],
    /// When the object was last seen active, ms since the Unix epoch, when the newest
    /// sample saw no change (RabbitMQ's `idle_since`); `None` while it is active.
    pub idle_since_ms: Option<u64>,
}

/// One sample of an object's counters: updates `s` from `now` (`known`: `s` holds the
/// previous sample).
fn sample_object(
    s: &mut ObjectSeries,
    now: [u64; OBJECT_COUNTERS_MAX],
    known: bool,
    elapsed_ms: u64,
    now_ms: u64,
) {
    if known {
        for ((rate, n), last) in s.rates.iter_mut().zip(now).zip(s.last) {
            *rate = per_second(n, last, elapsed_ms);
        }
        s.idle = now == s.last;
        if !s.idle {
            s.active_ms = now_ms;
        }
    } else {
        s.active_ms = now_ms;
        s.idle = false;
    }
    s.last = now;
}

#[derive(Debug, Default)]
struct Inner {
    /// When the last sample was taken, ms since the Unix epoch (0: never).
    sampled_ms: u64,
    /// The sample times, oldest first (at most [`RATE_HISTORY_SAMPLES`]).
    timestamps: VecDeque<u64>,
    queues: HashMap<QueueKey, QueueSeries>,
    /// Exchanges, channels and connections.
    objects: HashMap<CounterKey, ObjectSeries>,
    /// Sums over every queue.
    total_rates: MessageRates,
    total_history: VecDeque<[u32; HISTORY_SERIES]>,
    /// The broker's own series ([`node_series`]).
    node_history: VecDeque<[u32; NODE_HISTORY_SERIES]>,
}

/// A history: sample times (ms since the Unix epoch) and, for each, the `N` values
/// ([`series`] for queues and their sums, [`node_series`] for the broker's own), oldest
/// first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History<const N: usize = HISTORY_SERIES> {
    /// When each sample was taken.
    pub timestamps: Vec<u64>,
    /// The samples.
    pub samples: Vec<[u32; N]>,
}

/// The rates and history of every queue, updated by [`Rates::sample`].
#[derive(Debug)]
pub struct Rates {
    inner: Mutex<Inner>,
    enabled: AtomicBool,
}

impl Default for Rates {
    fn default() -> Rates {
        Rates {
            inner: Mutex::new(Inner::default()),
            enabled: AtomicBool::new(true),
        }
    }
}

fn per_second(now: u64, before: u64, elapsed_ms: u64) -> f64 {
    now.saturating_sub(before) as f64 * 1000.0 / elapsed_ms as f64
}

fn push_bounded<T>(ring: &mut VecDeque<T>, v: T) {
    if ring.len() == RATE_HISTORY_SAMPLES {
        ring.pop_front();
    }
    ring.push_back(v);
}

impl Rates {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns sampling on or off (`--stats-collection`); off forgets every rate and
    /// history.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
        if !on {
            *self.lock() = Inner::default();
        }
    }

    /// Whether sampling is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Takes a sample at `now_ms` (ms since the Unix epoch) when
    /// [`RATE_SAMPLE_INTERVAL_MS`] passed since the last one; queues gone since are
    /// forgotten with their history. Called by the housekeeper every round; each queue's
    /// lock is taken once, the rates' own lock only to swap the results in.
    pub fn sample(&self, broker: &Broker, now_ms: u64) {
        if !self.is_enabled() {
            return;
        }
        let (last_ms, mut previous) = {
            let mut inner = self.lock();
            let elapsed = now_ms.saturating_sub(inner.sampled_ms);
            if elapsed < RATE_SAMPLE_INTERVAL_MS {
                return;
            }
            (inner.sampled_ms, std::mem::take(&mut inner.queues))
        };
        let first = last_ms == 0;
        let elapsed = now_ms.saturating_sub(last_ms).max(1);
        let mut queues = HashMap::with_capacity(previous.len());
        let mut total_rates = MessageRates::default();
        let mut total_sample = [0u32; HISTORY_SERIES];
        let mut node_sample = [0u32; NODE_HISTORY_SERIES];
        for vh in broker.vhosts() {
            for q in vh.all_queues() {
                let st = q.stats();
                let now = Totals {
                    published: st.published,
                    delivered: st.delivered,
                    delivered_no_ack: st.delivered_no_ack,
                    got: st.got,
                    got_no_ack: st.got_no_ack,
                    get_empty: st.get_empty,
                    redelivered: st.redelivered,
                    acked: st.acked,
                    ready: st.ready as u64,
                    unacked: st.unacked as u64,
                };
                let key = (Arc::clone(&vh.name), Arc::clone(&q.name));
                let prev = previous.remove(&key);
                let known = !first && prev.is_some();
                let mut s = prev.unwrap_or_default();
                let before = if known {
                    s.last
                } else {
                    Totals {
                        ready: now.ready,
                        unacked: now.unacked,
                        ..now
                    }
                };
                s.rates = if known {
                    now.rates(&before, elapsed)
                } else {
                    MessageRates::default()
                };
                s.idle = known && now.counters() == before.counters();
                if !s.idle {
                    s.active_ms = now_ms;
                }
                now.add_node_sample(&before, &mut node_sample);
                let sample = now.sample(&before);
                push_bounded(&mut s.history, sample);
                s.last = now;
                total_rates.add(&s.rates);
                for (t, v) in total_sample.iter_mut().zip(sample) {
                    *t = t.saturating_add(v);
                }
                queues.insert(key, s);
            }
        }
        let (objects, published, node) = self.sample_objects(broker, first, elapsed, now_ms);
        for (i, v) in [
            node_series::CONFIRM,
            node_series::RETURN_UNROUTABLE,
            node_series::DROP_UNROUTABLE,
        ]
        .into_iter()
        .zip(node)
        {
            node_sample[i] = v;
        }
        // The broker publishes what clients published (RabbitMQ's channel `publish`),
        // not what queues took in: the exchanges' `publish_in`.
        total_rates.publish = published.1;
        total_sample[series::PUBLISH] = u32::try_from(published.0).unwrap_or(u32::MAX);
        let mut inner = self.lock();
        inner.sampled_ms = now_ms;
        push_bounded(&mut inner.timestamps, now_ms);
        inner.queues = queues;
        inner.objects = objects;
        inner.total_rates = total_rates;
        push_bounded(&mut inner.total_history, total_sample);
        push_bounded(&mut inner.node_history, node_sample);
    }

    /// Samples every exchange's, channel's and connection's counters; objects gone since
    /// the last sample are forgotten. Also returns the messages published to exchanges
    /// since the last sample and their rate.
    fn sample_objects(
        &self,
        broker: &Broker,
        first: bool,
        elapsed: u64,
        now_ms: u64,
    ) -> (HashMap<CounterKey, ObjectSeries>, (u64, f64), [u32; 3]) {
        let mut previous = std::mem::take(&mut self.lock().objects);
        let mut objects = HashMap::with_capacity(previous.len());
        let mut published = (0u64, 0.0f64);
        let mut node = [0u32; 3];
        let mut put = |key: CounterKey, now: [u64; OBJECT_COUNTERS_MAX]| {
            let prev = previous.remove(&key);
            let known = !first && prev.is_some();
            let mut s = prev.unwrap_or_default();
            if known && matches!(key, CounterKey::Exchange(..)) {
                published.0 += now[0].saturating_sub(s.last[0]);
            }
            if known && key == CounterKey::Node {
                use node_counters as n;
                for (slot, i) in
                    node.iter_mut()
                        .zip([n::CONFIRM, n::RETURN_UNROUTABLE, n::DROP_UNROUTABLE])
                {
                    *slot = u32::try_from(now[i].saturating_sub(s.last[i])).unwrap_or(u32::MAX);
                }
            }
            sample_object(&mut s, now, known, elapsed, now_ms);
            if matches!(key, CounterKey::Exchange(..)) {
                published.1 += s.rates[0];
            }
            objects.insert(key, s);
        };
        for vh in broker.vhosts() {
            for x in vh.all_exchanges() {
                let (i, o) = x.counters.read();
                let mut now = [0u64; OBJECT_COUNTERS_MAX];
                now[0] = i;
                now[1] = o;
                put(
                    CounterKey::Exchange(Arc::clone(&vh.name), Arc::clone(&x.name)),
                    now,
                );
            }
        }
        for (ch, _) in broker.channel_registry().all() {
            put(
                CounterKey::Channel(ch.connection_id, ch.number),
                channel_counts(&ch.counters, &ch.info().sent),
            );
        }
        for c in broker.connections() {
            let mut now = [0u64; OBJECT_COUNTERS_MAX];
            now[..4].copy_from_slice(&c.traffic.read());
            put(CounterKey::Connection(c.id), now);
        }
        put(CounterKey::Node, node_counts(broker));
        (objects, published, node)
    }

    /// The rates and idleness of an exchange, channel or connection (zero rates and
    /// not idle before its second sample, or with sampling off).
    pub fn object(&self, key: &CounterKey) -> ObjectRates {
        self.lock()
            .objects
            .get(key)
            .map(|s| ObjectRates {
                rates: s.rates,
                idle_since_ms: s.idle.then_some(s.active_ms),
            })
            .unwrap_or_default()
    }

    /// When a queue was last seen active, if the newest sample saw it idle (RabbitMQ's
    /// `idle_since`).
    pub fn queue_idle_since(&self, vhost: &str, queue: &str) -> Option<u64> {
        self.lock()
            .queues
            .get(&(Arc::from(vhost), Arc::from(queue)))
            .and_then(|s| s.idle.then_some(s.active_ms))
    }

    /// The rates of one queue (zero before its second sample).
    pub fn queue(&self, vhost: &str, queue: &str) -> MessageRates {
        self.lock()
            .queues
            .get(&(Arc::from(vhost), Arc::from(queue)))
            .map(|s| s.rates)
            .unwrap_or_default()
    }

    /// The sum of the rates of a vhost's queues, but `publish`: the rate of messages
    /// published to its exchanges (what clients published, routed or not).
    pub fn vhost(&self, vhost: &str) -> MessageRates {
        let inner = self.lock();
        let mut sum = MessageRates::default();
        for ((v, _), s) in &inner.queues {
            if &**v == vhost {
                sum.add(&s.rates);
            }
        }
        sum.publish = inner
            .objects
            .iter()
            .filter(|(k, _)| matches!(k, CounterKey::Exchange(v, _) if &**v == vhost))
            .map(|(_, s)| s.rates[0])
            .sum();
        sum
    }

    /// The sum of every queue's rates, but `publish`: the rate of messages published to
    /// any exchange.
    pub fn total(&self) -> MessageRates {
        self.lock().total_rates
    }

    /// One queue's history (empty before its first sample).
    pub fn queue_history(&self, vhost: &str, queue: &str) -> History {
        let inner = self.lock();
        let Some(s) = inner.queues.get(&(Arc::from(vhost), Arc::from(queue))) else {
            return History::default();
        };
        let skip = inner.timestamps.len().saturating_sub(s.history.len());
        History {
            timestamps: inner.timestamps.iter().skip(skip).copied().collect(),
            samples: s.history.iter().copied().collect(),
        }
    }

    /// The history of the sums over every queue (its `publish` series: the messages
    /// published to any exchange).
    pub fn total_history(&self) -> History {
        let inner = self.lock();
        let skip = inner
            .timestamps
            .len()
            .saturating_sub(inner.total_history.len());
        History {
            timestamps: inner.timestamps.iter().skip(skip).copied().collect(),
            samples: inner.total_history.iter().copied().collect(),
        }
    }

    /// The broker's own history ([`node_series`]: confirms, unroutable messages, and
    /// deliveries and gets by kind), for the overview's charts.
    pub fn node_history(&self) -> History<NODE_HISTORY_SERIES> {
        let inner = self.lock();
        let skip = inner
            .timestamps
            .len()
            .saturating_sub(inner.node_history.len());
        History {
            timestamps: inner.timestamps.iter().skip(skip).copied().collect(),
            samples: inner.node_history.iter().copied().collect(),
        }
    }

    /// Queues with a history, and the bytes their histories hold (for the memory figure
    /// in docs/http-api.md and its test).
    pub fn history_footprint(&self) -> (usize, usize) {
        let inner = self.lock();
        let bytes = inner
            .queues
            .values()
            .map(|s| {
                s.history.capacity() * std::mem::size_of::<[u32; HISTORY_SERIES]>()
                    + std::mem::size_of::<QueueSeries>()
            })
            .sum();
        (inner.queues.len(), bytes)
    }
}

/// The node's counters in the [`node_counters`] order.
pub fn node_counts(broker: &Broker) -> [u64; OBJECT_COUNTERS_MAX] {
    use node_counters as n;
    let (opened, closed) = broker.connection_totals();
    let (ch_opened, ch_closed) = broker.channel_registry().churn();
    let events = broker.counters().snapshot();
    let mut v = [0u64; OBJECT_COUNTERS_MAX];
    v[n::CONNECTION_CREATED] = opened;
    v[n::CONNECTION_CLOSED] = closed;
    v[n::CHANNEL_CREATED] = ch_opened;
    v[n::CHANNEL_CLOSED] = ch_closed;
    v[n::QUEUE_DECLARED] = events.queue_churn[0];
    v[n::QUEUE_CREATED] = events.queue_churn[1];
    v[n::QUEUE_DELETED] = events.queue_churn[2];
    v[n::CONFIRM] = events.confirmed;
    v[n::RETURN_UNROUTABLE] = events.returned;
    v[n::DROP_UNROUTABLE] = events.unroutable_dropped;
    v
}

/// A channel's counters in the [`channel_counters`] order, from its own `counters` and
/// the deliveries it `sent` (read under its lock, [`crate::broker::channel::Channel::info`]).
pub fn channel_counts(
    k: &crate::broker::channel::ChannelCounters,
    sent: &crate::broker::channel::SentCounts,
) -> [u64; OBJECT_COUNTERS_MAX] {
    use channel_counters as c;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let mut v = [0u64; OBJECT_COUNTERS_MAX];
    v[c::PUBLISH] = load(&k.publish);
    v[c::CONFIRM] = load(&k.confirm);
    v[c::RETURN_UNROUTABLE] = load(&k.return_unroutable);
    v[c::DROP_UNROUTABLE] = load(&k.drop_unroutable);
    v[c::DELIVER] = sent.deliver;
    v[c::DELIVER_NO_ACK] = sent.deliver_no_ack;
    v[c::GET] = sent.get;
    v[c::GET_NO_ACK] = sent.get_no_ack;
    v[c::GET_EMPTY] = load(&k.get_empty);
    v[c::REDELIVER] = sent.redeliver;
    v[c::ACK] = load(&k.ack);
    v[c::DELIVER_GET] = sent.deliver + sent.deliver_no_ack + sent.get + sent.get_no_ack;
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{BrokerConfig, QueueSpec};

    fn publish(q: &Arc<crate::broker::queue::Queue>, n: usize) {
        for _ in 0..n {
            let msg = crate::broker::Message::new(
                "",
                "q",
                crate::types::BasicProperties::default(),
                Vec::<u8>::new(),
            );
            q.enqueue(Arc::new(msg));
        }
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        let broker = Broker::new(BrokerConfig::default());
        let vh = broker.vhost("/").unwrap();
        let spec = QueueSpec {
            name: "q".into(),
            ..QueueSpec::default()
        };
        vh.declare_queue(&spec, 1).unwrap();
        let rates = Rates::default();
        rates.sample(&broker, 1_000_000);
        assert_eq!(rates.queue("/", "q"), MessageRates::default());
        let q = vh.queue("q").unwrap();
        publish(&q, 50);
        // The vhost's and broker's publish rates are the exchanges' (what clients
        // published), the queue's what it took in.
        let x = vh.exchange("").unwrap();
        for _ in 0..50 {
            x.counters.published(1);
        }
        // Too early: nothing changes.
        rates.sample(&broker, 1_000_000 + RATE_SAMPLE_INTERVAL_MS - 1);
        assert_eq!(rates.queue("/", "q").publish, 0.0);
        rates.sample(&broker, 1_000_000 + 10_000);
        assert_eq!(rates.queue("/", "q").publish, 5.0);
        assert_eq!(rates.queue("/", "q").ready, 5.0);
        assert_eq!(rates.vhost("/").publish, 5.0);
        assert_eq!(rates.total().publish, 5.0);
        assert_eq!(rates.vhost("other").publish, 0.0);
        // Two gets: one with an ack, one without, and one on an empty queue later.
        assert!(q.get(|_, _| Some(1), true).is_some());
        assert!(q.get(|_, _| Some(2), false).is_some());
        rates.sample(&broker, 1_000_000 + 20_000);
        let r = rates.queue("/", "q");
        assert_eq!(
            (r.get, r.get_no_ack, r.deliver_get, r.deliver),
            (0.1, 0.1, 0.2, 0.0)
        );
        // The broker's own history keeps them by kind, with confirms and unroutables.
        vh.counters().confirmed(3, true);
        vh.counters().unroutable(false);
        q.get(|_, _| Some(3), false);
        while q.get(|_, _| Some(4), false).is_some() {}
        rates.sample(&broker, 1_000_000 + 30_000);
        let h = rates.node_history();
        assert_eq!(h.timestamps.len(), h.samples.len());
        assert_eq!(h.timestamps.len(), 4);
        let [.., before, last] = h.samples[..] else {
            panic!("{h:?}")
        };
        assert_eq!(
            (before[node_series::GET], before[node_series::GET_NO_ACK]),
            (1, 1)
        );
        assert_eq!(before[node_series::DELIVER], 0);
        assert_eq!(last[node_series::CONFIRM], 3);
        assert_eq!(last[node_series::DROP_UNROUTABLE], 1);
        assert_eq!(last[node_series::GET_NO_ACK], 48);
        assert_eq!(last[node_series::GET_EMPTY], 1);
    }

    #[test]
    fn exchanges_and_the_node_get_rates_and_objects_their_idle_time() {
        let broker = Broker::new(BrokerConfig::default());
        let vh = broker.vhost("/").unwrap();
        let spec = QueueSpec {
            name: "q".into(),
            ..QueueSpec::default()
        };
        vh.declare_queue(&spec, 1).unwrap();
        let x = vh.exchange("amq.fanout").unwrap();
        let key = CounterKey::Exchange(Arc::from("/"), Arc::from("amq.fanout"));
        let rates = Rates::default();
        let t0 = 1_000_000;
        rates.sample(&broker, t0);
        assert_eq!(rates.object(&key), ObjectRates::default());
        for _ in 0..50 {
            x.counters.published(2);
        }
        publish(&vh.queue("q").unwrap(), 1);
        rates.sample(&broker, t0 + 10_000);
        let r = rates.object(&key);
        assert_eq!((r.rates[0], r.rates[1]), (5.0, 10.0));
        assert_eq!(r.idle_since_ms, None, "it moved in the last interval");
        assert_eq!(rates.queue_idle_since("/", "q"), None);
        let node = rates.object(&CounterKey::Node);
        assert_eq!(node.rates[node_counters::QUEUE_CREATED], 0.0);
        // Nothing happens: idle since the sample that last saw it move.
        rates.sample(&broker, t0 + 20_000);
        let r = rates.object(&key);
        assert_eq!((r.rates[0], r.rates[1]), (0.0, 0.0));
        assert_eq!(r.idle_since_ms, Some(t0 + 10_000));
        assert_eq!(rates.queue_idle_since("/", "q"), Some(t0 + 10_000));
        // A queue created meanwhile counts in the node's churn rate.
        vh.declare_queue(
            &QueueSpec {
                name: "q2".into(),
                ..QueueSpec::default()
            },
            1,
        )
        .unwrap();
        rates.sample(&broker, t0 + 30_000);
        let node = rates.object(&CounterKey::Node);
        assert_eq!(node.rates[node_counters::QUEUE_CREATED], 0.1);
        // Turned off, everything is forgotten.
        rates.set_enabled(false);
        assert_eq!(rates.object(&key), ObjectRates::default());
        assert_eq!(rates.queue_idle_since("/", "q"), None);
    }

    #[test]
    fn history_is_bounded_aligned_and_dropped_with_its_queue() {
        let broker = Broker::new(BrokerConfig::default());
        let vh = broker.vhost("/").unwrap();
        let rates = Rates::default();
        rates.sample(&broker, 1_000);
        let spec = QueueSpec {
            name: "q".into(),
            ..QueueSpec::default()
        };
        vh.declare_queue(&spec, 1).unwrap();
        let q = vh.queue("q").unwrap();
        for i in 1..=(RATE_HISTORY_SAMPLES as u64 + 10) {
            publish(&q, 2);
            rates.sample(&broker, 1_000 + i * RATE_SAMPLE_INTERVAL_MS);
        }
        let h = rates.queue_history("/", "q");
        assert_eq!(h.samples.len(), RATE_HISTORY_SAMPLES);
        assert_eq!(h.timestamps.len(), RATE_HISTORY_SAMPLES);
        assert_eq!(
            *h.timestamps.last().unwrap(),
            1_000 + (RATE_HISTORY_SAMPLES as u64 + 10) * RATE_SAMPLE_INTERVAL_MS
        );
        let last = h.samples.last().unwrap();
        assert_eq!(last[series::PUBLISH], 2);
        assert_eq!(last[series::READY] as usize, q.stats().ready);
        assert_eq!(rates.total_history().samples.len(), RATE_HISTORY_SAMPLES);
        let (queues, bytes) = rates.history_footprint();
        assert_eq!(queues, 1);
        assert!(bytes < 4 * 1024, "{bytes} bytes for one queue");
        vh.delete_queue("q", false, false, 1).unwrap();
        rates.sample(&broker, 10_000_000);
        assert_eq!(rates.queue_history("/", "q"), History::default());
        rates.set_enabled(false);
        rates.sample(&broker, 20_000_000);
        assert_eq!(rates.total_history(), History::default());
    }
}
