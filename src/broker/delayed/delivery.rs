//! Routing a delayed-message exchange's due messages (on the `relaymq-delay` thread): each
//! is read back from the exchange's store, gets its `x-delay` header negated, is routed by
//! the exchange's bindings as its `x-delayed-type` routes, and enters its queues as a
//! publish would. Its record is settled once its copies are durable in those queues, so
//! a crash in between delivers it again (at-least-once), never loses it.
//!
//! A message nothing matches at its due time is dropped (counted as unroutable, as the
//! plugin's are); a queue that refuses it (full with `reject-publish`, out of service)
//! does not get it. There is no publisher left to return or nack it to.

use super::{delay_of, delivered_properties, DelayedMessages, DUE_BATCH_MAX};
use crate::broker::dead_letter::jobs;
use crate::broker::message::Message;
use crate::broker::node::Broker;
use std::sync::Arc;

/// Routes the messages of `delayed` due at `now_ms`, a batch of [`DUE_BATCH_MAX`] at a
/// time, then hands the next due time to the timer. Nothing is routed when the exchange
/// is no longer the one in its vhost (deleted, or deleted and declared again).
pub fn deliver_due(broker: &Broker, delayed: &Arc<DelayedMessages>, now_ms: u64) {
    let Some(vhost) = broker.vhost(&delayed.vhost) else {
        return;
    };
    let Some(exchange) = vhost.exchange(&delayed.exchange) else {
        return;
    };
    if !exchange.delayed().is_some_and(|d| Arc::ptr_eq(d, delayed)) {
        return;
    }
    loop {
        let due = delayed.take_due(now_ms, DUE_BATCH_MAX);
        let n = due.len();
        for d in due {
            let stored = match delayed.load(d) {
                Ok(m) => m,
                Err(e) => {
                    log::error!(
                        "exchange '{}' in vhost '{}': a delayed message cannot be read and is \
                         dropped: {e}",
                        delayed.exchange,
                        delayed.vhost
                    );
                    delayed.settle(d.record, None);
                    continue;
                }
            };
            let delay = delay_of(stored.properties()).unwrap_or(0);
            let msg = Arc::new(Message::with_names(
                Arc::clone(stored.names()),
                Some(Box::new(delivered_properties(stored.properties(), delay))),
                stored.body,
            ));
            let enqueued = jobs::enqueue_all(&vhost.route(&exchange, &msg), &msg);
            if let Some(text) = &enqueued.refused {
                log::debug!(
                    "delayed message from exchange '{}' not taken: {text}",
                    delayed.exchange
                );
            }
            let (routed, sync, dead) = (enqueued.routed, enqueued.sync, enqueued.dead);
            jobs::run(&vhost, dead);
            exchange.counters.routed_later(routed);
            if routed == 0 {
                vhost.count_unroutable(false);
            }
            delayed.settle(d.record, sync);
        }
        if n < DUE_BATCH_MAX {
            break;
        }
    }
    delayed.reschedule();
}
