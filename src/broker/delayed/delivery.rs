//! Routing a delayed-message exchange's due messages (on the `relaymq-delay` thread): each
//! was read back from the exchange's store ahead of time (staged, on the
//! `relaymq-delay-io` thread), gets its `x-delay` header negated, is routed by the
//! exchange's bindings as its `x-delayed-type` routes, and enters its queues as a publish
//! would. Its record is settled (on the I/O thread) once its copies are durable in those
//! queues, so a crash in between delivers it again (at-least-once), never loses it.
//!
//! A message nothing matches at its due time is dropped (counted as unroutable, as the
//! plugin's are); a queue that refuses it (full with `reject-publish`, out of service)
//! does not get it. There is no publisher left to return or nack it to.

use super::{delay_of, delivered_properties, DelayedMessages, DUE_BATCH_MAX};
use crate::broker::dead_letter::jobs;
use crate::broker::message::Message;
use crate::broker::node::Broker;
use std::sync::Arc;

/// Routes the staged messages of `delayed` due at `now_ms`, a batch of [`DUE_BATCH_MAX`]
/// at a time, asks for the messages due soon to be staged, then hands the next time to
/// look at the exchange to the timer. Nothing is routed when the exchange is no longer
/// the one in its vhost (deleted, or deleted and declared again).
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
    // First: without an I/O thread (tests) this stages at once what is due now.
    if delayed.begin_staging(now_ms) {
        delayed.schedule.stage(delayed, now_ms);
    }
    loop {
        let due = delayed.take_due(now_ms, DUE_BATCH_MAX);
        let n = due.len();
        let mut settle = Vec::with_capacity(n);
        for (d, stored) in due {
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
            settle.push((d.record, sync));
        }
        delayed.schedule.settle(delayed, settle);
        if n < DUE_BATCH_MAX {
            break;
        }
    }
    delayed.reschedule();
}
