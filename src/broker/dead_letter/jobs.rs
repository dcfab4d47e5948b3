//! Running dead-letterings: republishing the messages queues gave up on to their
//! dead-letter exchanges (RabbitMQ's `x-dead-letter-exchange`), with RabbitMQ's cycle rule
//! and a bound on cascades.
//!
//! Callers collect [`DeadLetterJob`]s while holding queue locks and run them with [`run`]
//! after releasing them: dead-lettering enqueues into other queues, and two queue locks
//! are never held at once (docs/architecture.md §8).

use crate::broker::channel::Unacked;
use crate::broker::message::Message;
use crate::broker::queue::{Enqueued, Leaving, Queue, QueuedMessage};
use crate::broker::vhost::VirtualHost;
use crate::storage::RecordRef;
use crate::types::FieldValue;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// What enqueueing one message into the queues it was routed to gave ([`enqueue_all`]).
#[derive(Default)]
pub struct Enqueuing {
    /// Queues that took it.
    pub routed: u64,
    /// The flusher epoch a confirm must wait for (the latest of the queues').
    pub sync: Option<u64>,
    /// Why a queue refused it (full with `reject-publish`, out of service), the last one.
    pub refused: Option<String>,
    /// Dead-letterings it caused (messages a length limit dropped, TTL-0 expiries, the
    /// message itself refused by a `reject-publish-dlx` queue): run them with [`run`]
    /// once no queue lock is held.
    pub dead: Vec<DeadLetterJob>,
}

/// Enqueues `msg` into each of `queues` (a publish, a delayed message at its due time).
pub fn enqueue_all(queues: &[Arc<Queue>], msg: &Arc<Message>) -> Enqueuing {
    let mut out = Enqueuing::default();
    for q in queues {
        match q.enqueue(Arc::clone(msg)) {
            Enqueued::Accepted {
                sync,
                dropped,
                expired,
            } => {
                out.routed += 1;
                out.sync = out.sync.max(sync);
                if !dropped.is_empty() {
                    out.dead.extend(jobs(q, dropped, "maxlen"));
                }
                if !expired.is_empty() {
                    out.dead.extend(jobs(q, expired, "expired"));
                }
            }
            Enqueued::Gone => {}
            Enqueued::Refused(text) => out.refused = Some(text),
            Enqueued::RefusedToDeadLetter(text) => {
                out.refused = Some(text);
                let unstored = vec![Leaving::unstored(Arc::clone(msg))];
                out.dead.extend(jobs(q, unstored, "maxlen"));
            }
        }
    }
    out
}

/// Republishes messages their queues gave up on to the queues' dead-letter exchanges
/// (RabbitMQ semantics), then settles each one's record in the queue it left, so it is in
/// its targets before it leaves its source (at-least-once). A missing exchange drops the
/// message (logged once per queue and call). A target that drops messages in turn (length
/// limit) dead-letters them too; a message that would come back to a queue it already died
/// in for an automatic reason, with no rejection in its history, is dropped there instead
/// (RabbitMQ's cycle rule), and a chain of such knock-on dead-letterings is cut after
/// [`DEAD_LETTER_DEPTH_MAX`] links. However many messages are given, each is handled.
pub fn run(vhost: &VirtualHost, jobs_in: Vec<DeadLetterJob>) {
    if jobs_in.is_empty() {
        // The publish path calls this for every message.
        return;
    }
    let mut work: VecDeque<DeadLetterJob> = jobs_in.into();
    let mut no_exchange: HashMap<(Arc<str>, String), usize> = HashMap::new();
    let mut cut = 0usize;
    while let Some(job) = work.pop_front() {
        let mut durable_at = None;
        if job.depth > DEAD_LETTER_DEPTH_MAX {
            cut += 1;
        } else {
            durable_at = route(vhost, &job, &mut work, &mut no_exchange);
        }
        job.settle(durable_at);
    }
    for ((queue, exchange), n) in no_exchange {
        log::warn!(
            "queue '{queue}' in vhost '{}': dead-letter exchange '{exchange}' does not \
             exist; {n} message(s) dropped",
            vhost.name
        );
    }
    if cut > 0 {
        log::warn!(
            "vhost '{}': {cut} dead letter(s) dropped: a chain of dead-letterings through \
             full queues went past {DEAD_LETTER_DEPTH_MAX} links",
            vhost.name
        );
    }
}

/// Enqueues one dead letter in the queues its dead-letter exchange routes it to; adds the
/// jobs that causes (targets over their length limit) to `work`, one link deeper. Returns
/// the flusher epoch that makes the stored copies durable (`--fsync always`), which the
/// source's settlement waits for.
fn route(
    vhost: &VirtualHost,
    job: &DeadLetterJob,
    work: &mut VecDeque<DeadLetterJob>,
    no_exchange: &mut HashMap<(Arc<str>, String), usize>,
) -> Option<u64> {
    let to = job.source.dead_letter()?;
    let Some(exchange) = vhost.exchange(&to.exchange) else {
        *no_exchange
            .entry((Arc::clone(&job.source.name), to.exchange.clone()))
            .or_default() += 1;
        return None;
    };
    let mut durable_at: Option<u64> = None;
    // Counted once it is republished, whether or not a queue takes it (RabbitMQ's
    // `messages_dead_lettered_<reason>_total`).
    vhost.counters().dead_lettered(job.reason);
    let (dead, _key) = to.message(&job.msg, &job.source.name, job.reason);
    let history = dead_queues(&dead);
    let automatic = job.reason != "rejected" && !history.rejected;
    let dead = Arc::new(dead);
    for target in vhost.route(&exchange, &dead) {
        if automatic && history.queues.iter().any(|q| **q == *target.name) {
            log::debug!(
                "dead-letter cycle: message from '{}' not delivered to '{}' again",
                job.source.name,
                target.name
            );
            continue;
        }
        let knock_on = |mut jobs: Vec<DeadLetterJob>| {
            for j in &mut jobs {
                j.depth = job.depth + 1;
            }
            jobs
        };
        match target.enqueue(Arc::clone(&dead)) {
            Enqueued::Accepted {
                sync,
                dropped,
                expired,
            } => {
                durable_at = durable_at.max(sync);
                work.extend(knock_on(jobs(&target, dropped, "maxlen")));
                work.extend(knock_on(jobs(&target, expired, "expired")));
            }
            Enqueued::RefusedToDeadLetter(_) => work.extend(knock_on(jobs(
                &target,
                vec![Leaving::unstored(Arc::clone(&dead))],
                "maxlen",
            ))),
            Enqueued::Refused(text) => {
                log::warn!(
                    "queue '{}': dead-lettered message refused: {text}",
                    job.source.name
                )
            }
            Enqueued::Gone => {}
        }
    }
    durable_at
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
/// `x-delivery-limit` (reason `delivery_limit`). `failed`: as [`Queue::requeue`] takes it
/// (a reject or a closed channel, not a nack or recover).
pub fn requeue(taken: Vec<Unacked>, failed: bool) -> Vec<DeadLetterJob> {
    let mut dead = Vec::new();
    for (q, entries) in group_by_queue(taken) {
        let over = q.requeue(entries, failed);
        dead.extend(jobs(&q, over, "delivery_limit"));
    }
    dead
}

/// Links a chain of knock-on dead-letterings may have (a dead letter pushing a message out
/// of a full queue, which is dead-lettered in turn, ...), so a misconfigured cascade of
/// queues cannot run away; RabbitMQ's cycle rule stops the usual loops first.
pub const DEAD_LETTER_DEPTH_MAX: u32 = 100;

/// A message to dead-letter: from which queue, why, and its record there.
pub struct DeadLetterJob {
    /// The queue it leaves (it has a dead-letter exchange).
    pub source: Arc<Queue>,
    /// The message as it was in the queue.
    pub msg: Arc<Message>,
    /// Its record in the source's store, settled once it is dead-lettered.
    pub record: Option<RecordRef>,
    /// The `x-death` reason: `rejected`, `expired`, `maxlen` or `delivery_limit`.
    pub reason: &'static str,
    /// Knock-on links before this one (0: the queue gave it up itself).
    pub depth: u32,
}

impl DeadLetterJob {
    /// The message has left its source for good: settle its record there once its dead
    /// letters are durable (flusher epoch `durable_at`).
    fn settle(&self, durable_at: Option<u64>) {
        self.source
            .settle_records_after(self.record.into_iter().collect(), durable_at);
    }
}

/// Jobs for messages leaving `queue` for `reason`; none when the queue has no dead-letter
/// exchange (the messages are then dropped; their records are settled).
pub fn jobs(queue: &Arc<Queue>, leaving: Vec<Leaving>, reason: &'static str) -> Vec<DeadLetterJob> {
    if queue.dead_letter().is_none() {
        for l in &leaving {
            queue.settle_records(l.record.as_slice());
        }
        return Vec::new();
    }
    leaving
        .into_iter()
        .map(|l| DeadLetterJob {
            source: Arc::clone(queue),
            msg: l.msg,
            record: l.record,
            reason,
            depth: 0,
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
