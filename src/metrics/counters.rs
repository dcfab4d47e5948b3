//! Message-event counters: publisher confirms (ack and nack), returns, unroutable drops
//! and dead-letterings, kept per vhost and broker-wide. Each event is two relaxed atomic
//! adds (its vhost's counter and the broker's), so the publish and ack paths pay nothing
//! measurable. Counters only grow (Prometheus counters); a deleted vhost's go with it, the
//! broker-wide ones stay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Reasons a message is dead-lettered, as the `x-death` `reason` and RabbitMQ's
/// `rabbitmq_global_messages_dead_lettered_<reason>_total` name them.
pub const DEAD_LETTER_REASONS: [&str; 4] = ["expired", "rejected", "maxlen", "delivery_limit"];

/// One set of event counts (a vhost's, or the broker's).
#[derive(Debug, Default)]
pub struct EventCounters {
    confirmed: AtomicU64,
    nacked: AtomicU64,
    returned: AtomicU64,
    unroutable_dropped: AtomicU64,
    dead_lettered: [AtomicU64; DEAD_LETTER_REASONS.len()],
    queue_churn: [AtomicU64; 3],
}

/// What happened to a queue, for RabbitMQ's `churn_rates` (`queue_declared`,
/// `queue_created`, `queue_deleted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueChurn {
    /// A `queue.declare`, passive or not (RabbitMQ counts each declaration).
    Declared = 0,
    /// A queue was created.
    Created = 1,
    /// A queue was deleted (by a client, expiry, auto-delete, its connection or vhost).
    Deleted = 2,
}

/// Event counts read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventSnapshot {
    /// Messages confirmed to publishers with `basic.ack`.
    pub confirmed: u64,
    /// Messages confirmed to publishers with `basic.nack` (not stored).
    pub nacked: u64,
    /// Mandatory messages no queue took, returned with `basic.return` 312 NO_ROUTE.
    pub returned: u64,
    /// Messages no queue took and that were not mandatory (dropped).
    pub unroutable_dropped: u64,
    /// Messages dead-lettered, by reason (the order of [`DEAD_LETTER_REASONS`]).
    pub dead_lettered: [u64; DEAD_LETTER_REASONS.len()],
    /// Queues declared, created and deleted (the order of [`QueueChurn`]).
    pub queue_churn: [u64; 3],
}

impl EventCounters {
    /// The counts now.
    pub fn snapshot(&self) -> EventSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EventSnapshot {
            confirmed: load(&self.confirmed),
            nacked: load(&self.nacked),
            returned: load(&self.returned),
            unroutable_dropped: load(&self.unroutable_dropped),
            dead_lettered: [
                load(&self.dead_lettered[0]),
                load(&self.dead_lettered[1]),
                load(&self.dead_lettered[2]),
                load(&self.dead_lettered[3]),
            ],
            queue_churn: [
                load(&self.queue_churn[0]),
                load(&self.queue_churn[1]),
                load(&self.queue_churn[2]),
            ],
        }
    }
}

/// A vhost's counters and the broker-wide ones each of its events also counts in.
#[derive(Debug, Default)]
pub struct VhostCounters {
    vhost: EventCounters,
    global: Arc<EventCounters>,
}

impl VhostCounters {
    /// Counters of one vhost that also add to `global` (the broker's).
    pub fn new(global: Arc<EventCounters>) -> VhostCounters {
        VhostCounters {
            vhost: EventCounters::default(),
            global,
        }
    }

    fn add(&self, pick: impl Fn(&EventCounters) -> &AtomicU64, n: u64) {
        pick(&self.vhost).fetch_add(n, Ordering::Relaxed);
        pick(&self.global).fetch_add(n, Ordering::Relaxed);
    }

    /// `messages` publishes were confirmed (`ack`: with `basic.ack`, else `basic.nack`).
    pub fn confirmed(&self, messages: u64, ack: bool) {
        if messages == 0 {
            return;
        }
        if ack {
            self.add(|c| &c.confirmed, messages);
        } else {
            self.add(|c| &c.nacked, messages);
        }
    }

    /// An unroutable message: `returned` (mandatory, `basic.return`) or dropped.
    pub fn unroutable(&self, returned: bool) {
        if returned {
            self.add(|c| &c.returned, 1);
        } else {
            self.add(|c| &c.unroutable_dropped, 1);
        }
    }

    /// A message was dead-lettered for `reason` (one of [`DEAD_LETTER_REASONS`]; any
    /// other text is not counted).
    pub fn dead_lettered(&self, reason: &str) {
        if let Some(i) = DEAD_LETTER_REASONS.iter().position(|r| *r == reason) {
            self.add(|c| &c.dead_lettered[i], 1);
        }
    }

    /// Counts a queue declaration, creation or deletion.
    pub fn queue_churn(&self, what: QueueChurn) {
        self.add(|c| &c.queue_churn[what as usize], 1);
    }

    /// This vhost's counts.
    pub fn snapshot(&self) -> EventSnapshot {
        self.vhost.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_count_in_the_vhost_and_the_broker() {
        let global = Arc::new(EventCounters::default());
        let a = VhostCounters::new(Arc::clone(&global));
        let b = VhostCounters::new(Arc::clone(&global));
        a.confirmed(3, true);
        b.confirmed(2, false);
        a.unroutable(true);
        b.unroutable(false);
        a.dead_lettered("maxlen");
        a.dead_lettered("nonsense");
        let sa = a.snapshot();
        assert_eq!((sa.confirmed, sa.nacked, sa.returned), (3, 0, 1));
        assert_eq!(sa.dead_lettered, [0, 0, 1, 0]);
        let g = global.snapshot();
        assert_eq!(
            (g.confirmed, g.nacked, g.returned, g.unroutable_dropped),
            (3, 2, 1, 1)
        );
    }
}
