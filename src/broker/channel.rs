//! A channel's acknowledgement state: delivery tags, unacked deliveries and prefetch.
//!
//! Shared between the connection's session (acks, nacks, close) and every queue that
//! delivers to one of the channel's consumers. Delivery tags are assigned and the delivery
//! is written to the outbound buffer under the same lock, so a client always sees tags in
//! increasing order (AMQP 0-9-1 §1.8.3.13: tags are channel-scoped and increase).

use crate::broker::consumer::Consumer;
use crate::broker::queue::{Queue, QueuedMessage};
use crate::broker::sink::ClientSink;
use crate::error::BrokerError;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
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
        }
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

    /// The per-consumer prefetch new consumers get.
    pub fn consumer_prefetch(&self) -> u16 {
        self.lock().consumer_prefetch
    }

    /// Offers `entry` from `queue` to `consumer`: if the channel is open and the consumer has
    /// room, assigns the next delivery tag, records it as unacked (manual ack) and pushes
    /// it to the sink, all under the channel lock.
    pub fn offer(
        &self,
        consumer: &Arc<Consumer>,
        queue: &Arc<Queue>,
        entry: &QueuedMessage,
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
            st.unacked.push_back(Unacked {
                tag,
                queue: Arc::clone(queue),
                entry: entry.clone(),
                consumer: Some(Arc::clone(consumer)),
            });
        }
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
        if !no_ack {
            st.unacked.push_back(Unacked {
                tag,
                queue: Arc::clone(queue),
                entry: entry.clone(),
                consumer: None,
            });
        }
        Some(tag)
    }

    /// Removes and returns the deliveries an ack, nack or reject refers to: the one with
    /// `tag`, or with `multiple` every one up to and including it (tag 0: all).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED "unknown delivery tag N" when nothing matches (AMQP 0-9-1
    /// §1.8.3.13; RabbitMQ's text).
    pub fn take(&self, tag: u64, multiple: bool) -> Result<Vec<Unacked>, BrokerError> {
        let mut st = self.lock();
        let taken: Vec<Unacked> = if multiple && tag == 0 {
            st.unacked.drain(..).collect()
        } else {
            // The tag itself must be outstanding, with or without `multiple` (RabbitMQ's
            // collect_acks): acking "up to 5" after 5 was settled is a client bug, not a
            // licence to settle 1–4.
            let Ok(i) = st.unacked.binary_search_by_key(&tag, |u| u.tag) else {
                return Err(BrokerError::precondition(format!(
                    "unknown delivery tag {tag}"
                )));
            };
            if multiple {
                st.unacked.drain(..=i).collect()
            } else {
                st.unacked.remove(i).into_iter().collect()
            }
        };
        Self::release(&mut st, &taken);
        Ok(taken)
    }

    /// Closes the channel for deliveries and returns every unacked delivery, for requeueing.
    pub fn close(&self) -> Vec<Unacked> {
        let mut st = self.lock();
        st.closed = true;
        let taken: Vec<Unacked> = st.unacked.drain(..).collect();
        Self::release(&mut st, &taken);
        taken
    }

    /// Returns every unacked delivery (AMQP `basic.recover requeue=true`), leaving the
    /// channel open.
    pub fn take_all(&self) -> Vec<Unacked> {
        let mut st = self.lock();
        let taken: Vec<Unacked> = st.unacked.drain(..).collect();
        Self::release(&mut st, &taken);
        taken
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
