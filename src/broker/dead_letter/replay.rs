//! Dead-letter replay: moving messages out of a queue (usually a dead-letter queue) to the
//! queue each came from, to an exchange, or to a named queue. RabbitMQ has no such
//! operation (its users shovel by hand); docs/lifecycle.md, "Replaying dead letters".
//!
//! Each message goes on its own: taken from the source keeping its stored record,
//! enqueued in its target(s), waited for until the targets' stores have fsynced it (as a
//! publisher confirm waits), and only then settled in the source. A kill -9 at any moment
//! thus loses nothing; it may leave the one message in flight in both places.
//!
//! `x-death` stays as it is: the history is the message's, and a later death adds to it
//! (the (queue, reason) entry's count grows). A replay is a publish, not a dead-lettering,
//! so RabbitMQ's dead-letter cycle rule does not apply to it, and no header is added.

use crate::broker::dead_letter::jobs::{self, jobs};
use crate::broker::exchange::Exchange;
use crate::broker::message::{Message, RouteNames};
use crate::broker::queue::inspect::Located;
use crate::broker::queue::{Enqueued, Queue};
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::storage::flusher::SyncWaiter;
use crate::types::FieldValue;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Most messages one replay moves, in messages (a larger `count` is refused).
pub const REPLAY_COUNT_MAX: usize = 100_000;

/// Most refusals one replay reports one by one; past it they are only counted in the log.
pub const REPLAY_ERRORS_MAX: usize = 100;

/// Longest wait for a target's fsync of one replayed message, in ms (as long as an HTTP
/// publish waits for its confirm); past it the message stays in the source too.
pub const REPLAY_SYNC_TIMEOUT_MS: u64 = 30_000;

/// Where replayed messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayTarget {
    /// The queue each message died in last: the `queue` of its first (most recent)
    /// `x-death` entry, through the default exchange.
    Origin,
    /// An exchange, with one routing key for all.
    Exchange {
        /// Exchange name ("" is the default exchange).
        exchange: String,
        /// Routing key.
        routing_key: String,
    },
    /// A named queue, through the default exchange.
    Queue(String),
}

impl ReplayTarget {
    /// The exchange a replay to this target publishes to (its `write` permission is
    /// checked): the default exchange but for an exchange target.
    pub fn exchange(&self) -> &str {
        match self {
            ReplayTarget::Exchange { exchange, .. } => exchange,
            _ => "",
        }
    }
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Messages now in their target(s) and gone from the source.
    pub moved: usize,
    /// Messages left in the source because they have no `x-death` (origin target).
    pub skipped: usize,
    /// Messages left in the source because a target refused them: (position when the
    /// replay began, why); at most [`REPLAY_ERRORS_MAX`].
    pub errors: Vec<(usize, String)>,
    /// Refusals in all, listed or not.
    pub errors_total: usize,
}

impl ReplayOutcome {
    fn refused(&mut self, position: usize, why: String) {
        self.errors_total += 1;
        if self.errors.len() < REPLAY_ERRORS_MAX {
            self.errors.push((position, why));
        }
    }
}

/// The queue a dead letter died in last: the `queue` of its first `x-death` entry.
pub fn origin_queue(msg: &Message) -> Option<&str> {
    let Some(FieldValue::Array(deaths)) = msg.headers()?.get("x-death") else {
        return None;
    };
    match deaths.first()? {
        FieldValue::Table(t) => t.get("queue").and_then(FieldValue::as_str),
        _ => None,
    }
}

/// Moves the ready messages of `source` at `positions` (all of them up to `count` when
/// `None`), in delivery order, to `target` (see the module doc). Messages published
/// meanwhile are not included. `connection_id` is the caller's: a target queue exclusive
/// to another connection refuses.
pub fn replay(
    broker: &Broker,
    vhost: &VirtualHost,
    source: &Arc<Queue>,
    target: &ReplayTarget,
    positions: Option<&[usize]>,
    count: usize,
    connection_id: u64,
) -> ReplayOutcome {
    let mut out = ReplayOutcome::default();
    let (ready, located) = source.locate(positions, count);
    if let Some(wanted) = positions {
        for &p in wanted.iter().filter(|&&p| p >= ready) {
            out.refused(p, format!("no ready message at position {p}"));
        }
    }
    for at in located {
        move_one(broker, vhost, source, target, &at, connection_id, &mut out);
    }
    if out.errors_total > 0 {
        log::warn!(
            "replay from queue '{}' in vhost '{}': {} message(s) left in the source",
            source.name,
            vhost.name,
            out.errors_total
        );
    }
    out
}

/// Moves one message; on any refusal it goes back to the source.
fn move_one(
    broker: &Broker,
    vhost: &VirtualHost,
    source: &Arc<Queue>,
    target: &ReplayTarget,
    at: &Located,
    connection_id: u64,
    out: &mut ReplayOutcome,
) {
    let Some(taken) = source.take_ready(at) else {
        out.refused(at.position, "the message left the queue meanwhile".into());
        return;
    };
    let Some(msg) = source.message_of(&taken) else {
        // Unreadable: it stays, for a restart to try again (the log says why).
        source.put_back(taken);
        out.refused(
            at.position,
            "the message cannot be read from the store".into(),
        );
        return;
    };
    let routed = match target {
        ReplayTarget::Origin => match origin_queue(&msg) {
            Some(q) => to_queue(vhost, &msg, q, connection_id),
            None => {
                source.put_back(taken);
                out.skipped += 1;
                return;
            }
        },
        ReplayTarget::Queue(q) => to_queue(vhost, &msg, q, connection_id),
        ReplayTarget::Exchange {
            exchange,
            routing_key,
        } => to_exchange(vhost, &msg, exchange, routing_key),
    };
    match routed.and_then(|(m, queues)| enqueue_all(broker, vhost, &m, &queues)) {
        Ok(()) => {
            source.settle_records(taken.record().as_slice());
            out.moved += 1;
        }
        Err(why) => {
            source.put_back(taken);
            out.refused(at.position, why);
        }
    }
}

/// The message as published to the default exchange with `queue` as its routing key, and
/// that queue.
fn to_queue(
    vhost: &VirtualHost,
    msg: &Message,
    queue: &str,
    connection_id: u64,
) -> Result<(Arc<Message>, Vec<Arc<Queue>>), String> {
    let q = vhost
        .queue_for(queue, connection_id)
        .map_err(|e| e.text.clone())?;
    Ok((republished(msg, "", queue), vec![q]))
}

/// The message as published to `exchange` with `routing_key`, and the queues it routes to.
fn to_exchange(
    vhost: &VirtualHost,
    msg: &Message,
    exchange: &str,
    routing_key: &str,
) -> Result<(Arc<Message>, Vec<Arc<Queue>>), String> {
    let x: Arc<Exchange> = vhost
        .exchange_for_publish(exchange)
        .map_err(|e| e.text.clone())?;
    let m = republished(msg, &x.name, routing_key);
    let queues = vhost.route(&x, &m);
    if queues.is_empty() {
        return Err(format!(
            "no queue is bound to exchange '{exchange}' with routing key '{routing_key}'"
        ));
    }
    Ok((m, queues))
}

/// The same properties (`x-death` included) and body under new names.
fn republished(msg: &Message, exchange: &str, routing_key: &str) -> Arc<Message> {
    let names = RouteNames::new(exchange.into(), routing_key.into());
    Arc::new(Message::with_names(
        Arc::new(names),
        Some(Box::new(msg.properties().clone())),
        msg.body.clone(),
    ))
}

/// Enqueues `msg` in every queue and waits until the stored ones are fsynced.
///
/// # Errors
/// The first refusal (a full queue, a store out of service, a deleted queue, a failed or
/// late fsync); the queues that took it keep it.
fn enqueue_all(
    broker: &Broker,
    vhost: &VirtualHost,
    msg: &Arc<Message>,
    queues: &[Arc<Queue>],
) -> Result<(), String> {
    let mut epoch: Option<u64> = None;
    let mut refused = None;
    let mut dead = Vec::new();
    for q in queues {
        match q.enqueue(Arc::clone(msg)) {
            Enqueued::Accepted {
                sync,
                dropped,
                expired,
            } => {
                epoch = epoch.max(sync);
                dead.extend(jobs(q, dropped, "maxlen"));
                dead.extend(jobs(q, expired, "expired"));
            }
            Enqueued::Gone => refused = Some(format!("queue '{}' was deleted", q.name)),
            Enqueued::Refused(text) | Enqueued::RefusedToDeadLetter(text) => {
                refused = Some(text);
            }
        }
    }
    jobs::run(vhost, dead);
    if let (Some(epoch), Some(flusher)) = (epoch, broker.flusher()) {
        let waiter = Arc::new(BlockingWaiter::for_epoch(epoch));
        flusher.wait(epoch, Arc::clone(&waiter) as Arc<dyn SyncWaiter>);
        match waiter.wait(Duration::from_millis(REPLAY_SYNC_TIMEOUT_MS)) {
            Some(true) => {}
            Some(false) => return Err("the target's store failed to sync the message".into()),
            None => return Err("the target's store did not sync the message in time".into()),
        }
    }
    match refused {
        Some(text) => Err(text),
        None => Ok(()),
    }
}

/// Waits on the calling thread for one flusher epoch.
struct BlockingWaiter {
    epoch: u64,
    outcome: Mutex<Option<bool>>,
    done: Condvar,
}

impl BlockingWaiter {
    fn for_epoch(epoch: u64) -> BlockingWaiter {
        BlockingWaiter {
            epoch,
            outcome: Mutex::new(None),
            done: Condvar::new(),
        }
    }

    /// True once synced, false if the sync failed, `None` after `timeout`.
    fn wait(&self, timeout: Duration) -> Option<bool> {
        let guard = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .done
            .wait_timeout_while(guard, timeout, |o| o.is_none())
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }

    fn set(&self, ok: bool) {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(ok);
        self.done.notify_all();
    }
}

impl SyncWaiter for BlockingWaiter {
    fn synced(&self, synced: u64) -> bool {
        if synced < self.epoch {
            return true;
        }
        self.set(true);
        false
    }

    fn failed(&self, epoch: u64) -> bool {
        // Every epoch below a failed one is synced.
        if epoch > self.epoch {
            self.set(true);
            return false;
        }
        if epoch < self.epoch {
            return true;
        }
        self.set(false);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BasicProperties, FieldTable};

    #[test]
    fn the_origin_is_the_most_recent_death() {
        let death = |q: &str| {
            let mut t = FieldTable::new();
            t.insert("queue".into(), FieldValue::string(q));
            FieldValue::Table(t)
        };
        let mut headers = FieldTable::new();
        headers.insert(
            "x-death".into(),
            FieldValue::Array(vec![death("q2"), death("q1")]),
        );
        let p = BasicProperties {
            headers: Some(headers),
            ..BasicProperties::default()
        };
        let m = Message::new("", "dlq", p, b"x".to_vec());
        assert_eq!(origin_queue(&m), Some("q2"));
        let plain = Message::new("", "dlq", BasicProperties::default(), b"x".to_vec());
        assert_eq!(origin_queue(&plain), None);
    }
}
