//! The consumer timeout: a delivery not acked within its queue's `x-consumer-timeout` (or
//! the server's `--consumer-timeout-ms`) is requeued with `redelivered = true` and its
//! consumer is cancelled, with the reason in the log (docs/lifecycle.md, "Consumer
//! timeout").
//!
//! The cancel reaches the client through [`ClientSink::cancel`] with
//! [`CancelReason::ConsumerTimeout`]: a client that can be told (native, or AMQP with
//! `consumer_cancel_notify`) gets `basic.cancel` and keeps its channel, as RabbitMQ 4.3
//! does for quorum queues; the AMQP adapter closes the channel of another client with
//! RabbitMQ's 406, as RabbitMQ 4.0–4.2 do for every client.
//!
//! [`ClientSink::cancel`]: crate::broker::ClientSink::cancel
//!
//! The housekeeper ([`crate::broker::housekeeping`]) calls [`run_once`] every round. It
//! finds the open channels in the broker's [`ChannelRegistry`] and reads one atomic per
//! channel (its earliest deadline), so a round costs little when nothing is due. Lock
//! order (docs/architecture.md §8): queue dispatch takes a queue lock, then a channel lock; so
//! the deliveries are first taken out of the channel under its lock alone, and requeued
//! after it is released.

use crate::broker::channel::{Channel, TimedOut, Unacked};
use crate::broker::consumer::Consumer;
use crate::broker::dead_letter::jobs::{self, requeue};
use crate::broker::node::Broker;
use crate::broker::queue::ConsumerRemoved;
use crate::broker::sink::CancelReason;
use crate::broker::vhost::{notify_cancelled, VirtualHost};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// An open channel and the vhost of its connection.
struct Registered {
    channel: Arc<Channel>,
    vhost: Arc<VirtualHost>,
}

/// Every open channel of the broker, by (connection id, channel number), so the
/// housekeeper can find deliveries past their deadline. A session registers a channel when
/// it opens it and unregisters it when it closes it.
#[derive(Default)]
pub struct ChannelRegistry {
    channels: Mutex<HashMap<(u64, u16), Registered>>,
    /// Channels registered and unregistered so far (RabbitMQ's `channel_created` and
    /// `channel_closed` churn counters).
    churn: [std::sync::atomic::AtomicU64; 2],
}

impl std::fmt::Debug for ChannelRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelRegistry")
            .field("channels", &self.lock().len())
            .finish()
    }
}

impl ChannelRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<(u64, u16), Registered>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an opened channel whose connection uses `vhost`.
    pub fn register(&self, channel: &Arc<Channel>, vhost: &Arc<VirtualHost>) {
        let key = (channel.connection_id, channel.number);
        let entry = Registered {
            channel: Arc::clone(channel),
            vhost: Arc::clone(vhost),
        };
        self.lock().insert(key, entry);
        self.churn[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// `(channels opened, channels closed)` so far.
    pub fn churn(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.churn[0].load(Relaxed), self.churn[1].load(Relaxed))
    }

    /// Removes a closed channel (only this one: not a later channel with its number).
    pub fn unregister(&self, channel: &Arc<Channel>) {
        let key = (channel.connection_id, channel.number);
        let mut map = self.lock();
        if map
            .get(&key)
            .is_some_and(|r| Arc::ptr_eq(&r.channel, channel))
        {
            map.remove(&key);
            self.churn[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Every open channel with its connection's vhost, sorted by (connection id, channel
    /// number); the registry's lock is released before the caller looks at any of them.
    pub fn all(&self) -> Vec<(Arc<Channel>, Arc<VirtualHost>)> {
        let mut all: Vec<_> = self
            .lock()
            .values()
            .map(|r| (Arc::clone(&r.channel), Arc::clone(&r.vhost)))
            .collect();
        all.sort_by_key(|(c, _)| (c.connection_id, c.number));
        all
    }

    /// The open channels of connections using `vhost`, in no particular order; the
    /// registry's lock is released before the caller looks at any of them.
    pub fn in_vhost(&self, vhost: &Arc<VirtualHost>) -> Vec<Arc<Channel>> {
        self.lock()
            .values()
            .filter(|r| Arc::ptr_eq(&r.vhost, vhost))
            .map(|r| Arc::clone(&r.channel))
            .collect()
    }

    /// Open channels.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no channel is open.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The channels that may have a delivery past its deadline at `now_ms`, with their
    /// vhosts (one atomic load per channel; the lock is released before any work).
    fn due(&self, now_ms: u64) -> Vec<(Arc<Channel>, Arc<VirtualHost>)> {
        self.lock()
            .values()
            .filter(|r| r.channel.may_have_timed_out(now_ms))
            .map(|r| (Arc::clone(&r.channel), Arc::clone(&r.vhost)))
            .collect()
    }
}

/// Ends, at `now_ms` (ms since the Unix epoch), every delivery past its consumer timeout
/// on every open channel: cancels its consumer, requeues the consumer's unacked deliveries
/// (`x-delivery-limit` still applies: one past it is dead-lettered) and deletes an
/// auto-delete queue that lost its last consumer so.
pub fn run_once(broker: &Broker, now_ms: u64) {
    for (channel, vhost) in broker.channel_registry().due(now_ms) {
        let timed_out = channel.take_timed_out(now_ms);
        if !timed_out.deliveries.is_empty() {
            end_timed_out(&channel, &vhost, timed_out);
        }
    }
}

/// Cancels the consumers of `timed_out` and requeues its deliveries (no channel lock held).
fn end_timed_out(channel: &Channel, vhost: &Arc<VirtualHost>, timed_out: TimedOut) {
    let TimedOut {
        consumers,
        deliveries,
    } = timed_out;
    let mut emptied = Vec::new();
    for c in &consumers {
        let mine: Vec<&Unacked> = deliveries
            .iter()
            .filter(|u| u.consumer.as_ref().is_some_and(|x| Arc::ptr_eq(x, c)))
            .collect();
        let Some(first) = mine.first() else {
            continue;
        };
        let queue = &first.queue;
        match queue.detach_consumer(c) {
            ConsumerRemoved::NotFound => {
                // Cancelled by its client (or its queue was deleted) before: nothing to
                // tell, but its deliveries still time out.
                log::warn!(
                    "{} unacked deliveries of the cancelled consumer '{}' on channel {} \
                     (connection {}) from queue '{}' in vhost '{}' requeued: not acked within \
                     the consumer timeout of {} ms",
                    mine.len(),
                    c.tag,
                    channel.number,
                    channel.connection_id,
                    queue.name,
                    vhost.name,
                    queue.consumer_timeout_ms
                );
                continue;
            }
            ConsumerRemoved::Removed => {}
            ConsumerRemoved::LastOfAutoDelete => emptied.push(Arc::clone(queue)),
        }
        let reason = CancelReason::ConsumerTimeout {
            timeout_ms: queue.consumer_timeout_ms,
        };
        notify_cancelled(std::slice::from_ref(c), reason);
        log_cancelled(channel, vhost, c, &mine);
    }
    for u in deliveries.iter().filter(|u| u.consumer.is_none()) {
        log::warn!(
            "basic.get delivery tag {} on channel {} (connection {}) from queue '{}' in vhost \
             '{}' requeued: not acked within the consumer timeout of {} ms",
            u.tag,
            channel.number,
            channel.connection_id,
            u.queue.name,
            vhost.name,
            u.queue.consumer_timeout_ms
        );
    }
    // Not a failed delivery (RabbitMQ 4.3 does not count a consumer timeout).
    let dead = requeue(deliveries, false);
    jobs::run(vhost, dead);
    for q in emptied {
        vhost.remove_queue(&q);
    }
}

fn log_cancelled(channel: &Channel, vhost: &VirtualHost, c: &Consumer, mine: &[&Unacked]) {
    let Some(first) = mine.first() else {
        return;
    };
    log::warn!(
        "consumer '{}' on channel {} (connection {}) cancelled: delivery tag {} from queue \
         '{}' in vhost '{}' was not acked within the consumer timeout of {} ms; its {} \
         unacked deliveries were requeued, or dead-lettered past their delivery limit",
        c.tag,
        channel.number,
        channel.connection_id,
        first.tag,
        first.queue.name,
        vhost.name,
        first.queue.consumer_timeout_ms,
        mine.len()
    );
}
