//! Running dead-letterings: republishing the messages queues gave up on to their
//! dead-letter exchanges (RabbitMQ's `x-dead-letter-exchange`), with RabbitMQ's cycle rule
//! and a bound on cascades.
//!
//! Callers collect [`DeadLetterJob`]s while holding queue locks and run them with [`run`]
//! after releasing them: dead-lettering enqueues into other queues, and two queue locks
//! are never held at once (ARCHITECTURE.md §4).

use crate::broker::channel::Unacked;
use crate::broker::dead_letter::DeadLetter;
use crate::broker::message::Message;
use crate::broker::queue::{Enqueued, Queue, QueuedMessage};
use crate::broker::vhost::VirtualHost;
use crate::types::FieldValue;
use std::collections::VecDeque;
use std::sync::Arc;

/// Republishes messages their queues gave up on to the queues' dead-letter exchanges
/// (RabbitMQ semantics). A missing exchange drops the message (logged). A target that
/// drops messages in turn (length limit) dead-letters them too; a message that would
/// come back to a queue it already died in for an automatic reason, with no rejection
/// in its history, is dropped there instead (RabbitMQ's cycle rule), and the whole
/// cascade is bounded by [`DEAD_LETTER_STEPS_MAX`].
pub fn run(vhost: &VirtualHost, jobs_in: Vec<DeadLetterJob>) {
    let mut work: VecDeque<DeadLetterJob> = jobs_in.into();
    let mut steps = 0;
    while let Some(job) = work.pop_front() {
        steps += 1;
        if steps > DEAD_LETTER_STEPS_MAX {
            log::warn!("dead-lettering cascade stopped after {DEAD_LETTER_STEPS_MAX} steps");
            return;
        }
        let Some(exchange) = vhost.exchange(&job.to.exchange) else {
            log::warn!(
                "queue '{}': dead-letter exchange '{}' does not exist; message dropped",
                job.queue,
                job.to.exchange
            );
            continue;
        };
        let (dead, _key) = job.to.message(&job.msg, &job.queue, job.reason);
        let history = dead_queues(&dead);
        let automatic = job.reason != "rejected" && !history.rejected;
        let dead = Arc::new(dead);
        for target in vhost.route(&exchange, &dead) {
            if automatic && history.queues.iter().any(|q| **q == *target.name) {
                log::debug!(
                    "dead-letter cycle: message from '{}' not delivered to '{}' again",
                    job.queue,
                    target.name
                );
                continue;
            }
            match target.enqueue(Arc::clone(&dead)) {
                Enqueued::Accepted { dropped, .. } => work.extend(jobs(&target, dropped, "maxlen")),
                Enqueued::RefusedToDeadLetter(_) => {
                    work.extend(jobs(&target, vec![Arc::clone(&dead)], "maxlen"))
                }
                Enqueued::Refused(text) => {
                    log::warn!(
                        "queue '{}': dead-lettered message refused: {text}",
                        job.queue
                    )
                }
                Enqueued::Gone => {}
            }
        }
    }
}

/// Groups taken deliveries by the queue they came from, keeping their order.
pub fn group_by_queue(taken: Vec<Unacked>) -> Vec<(Arc<Queue>, Vec<QueuedMessage>)> {
    let mut groups: Vec<(Arc<Queue>, Vec<QueuedMessage>)> = Vec::new();
    for u in taken {
        match groups.iter_mut().find(|(q, _)| Arc::ptr_eq(q, &u.queue)) {
            Some((_, v)) => v.push(u.entry),
            None => groups.push((u.queue, vec![u.entry])),
        }
    }
    groups
}

/// Requeues taken deliveries; returns the dead-letter jobs of those past their queue's
/// `x-delivery-limit` (reason `delivery_limit`).
pub fn requeue(taken: Vec<Unacked>) -> Vec<DeadLetterJob> {
    let mut dead = Vec::new();
    for (q, entries) in group_by_queue(taken) {
        let over = q.requeue(entries);
        dead.extend(jobs(&q, over, "delivery_limit"));
    }
    dead
}

/// Dead-letterings one step may cause at most, so a misconfigured cascade of queues cannot
/// run away (RabbitMQ's cycle rule stops the usual loops first).
const DEAD_LETTER_STEPS_MAX: usize = 1000;

/// A message to dead-letter: from which queue, why, and where to.
pub struct DeadLetterJob {
    /// The queue it leaves.
    pub queue: Arc<str>,
    /// That queue's dead-letter settings.
    pub to: DeadLetter,
    /// The message as it was in the queue.
    pub msg: Arc<Message>,
    /// The `x-death` reason: `rejected`, `expired`, `maxlen` or `delivery_limit`.
    pub reason: &'static str,
}

/// Jobs for `msgs` leaving `queue` for `reason`; none when the queue has no dead-letter
/// exchange.
pub fn jobs(queue: &Queue, msgs: Vec<Arc<Message>>, reason: &'static str) -> Vec<DeadLetterJob> {
    let Some(to) = &queue.dead_letter else {
        return Vec::new();
    };
    msgs.into_iter()
        .map(|msg| DeadLetterJob {
            queue: Arc::clone(&queue.name),
            to: to.clone(),
            msg,
            reason,
        })
        .collect()
}

/// What a dead letter's `x-death` says: the queues it died in, and whether any death was
/// a rejection.
struct DeathHistory {
    queues: Vec<Arc<str>>,
    rejected: bool,
}

fn dead_queues(msg: &Message) -> DeathHistory {
    let mut h = DeathHistory {
        queues: Vec::new(),
        rejected: false,
    };
    if let Some(FieldValue::Array(items)) = msg.headers().and_then(|t| t.get("x-death")) {
        for item in items {
            if let FieldValue::Table(t) = item {
                if let Some(q) = t.get("queue").and_then(FieldValue::as_str) {
                    h.queues.push(Arc::from(q));
                }
                if t.get("reason").and_then(FieldValue::as_str) == Some("rejected") {
                    h.rejected = true;
                }
            }
        }
    }
    h
}
