//! The broker's timed work, done every [`HOUSEKEEPING_INTERVAL_MS`] by one thread: expiring
//! messages whose TTL passed (and dead-lettering them, reason `expired`), deleting
//! queues unused for their `x-expires`, and ending deliveries past their consumer timeout
//! ([`crate::broker::channel::timeout`]) (docs/lifecycle.md), and sampling the queues'
//! totals for message rates ([`crate::broker::rates`], every 5 s).
//!
//! Each round reads one atomic per queue and one per open channel to find the ones with
//! work, so an idle broker with many queues and channels costs little. The thread holds no
//! lock between queues; dead-lettering runs after the source queue's lock is released
//! (docs/architecture.md §8).

use crate::broker::channel::timeout;
use crate::broker::dead_letter::jobs::{self, jobs};
use crate::broker::node::Broker;
use crate::broker::queue::expiry::now_ms;
use crate::broker::queue::Queue;
use crate::broker::vhost::VirtualHost;
use crate::stoppable_thread::StoppableThread;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// Time between two housekeeping rounds, in ms: how late past its deadline a message that
/// is not at the head may expire, an unused queue be deleted, or an unacked delivery time
/// out.
pub const HOUSEKEEPING_INTERVAL_MS: u64 = 50;

/// One housekeeping round at `now_ms` (ms since the Unix epoch).
pub fn run_once(broker: &Broker, now_ms: u64) {
    for vhost in broker.vhosts() {
        for q in vhost.all_queues() {
            if q.has_expired(now_ms) {
                expire_messages(&vhost, &q, now_ms);
            }
            if q.is_expired(now_ms) && vhost.expire_queue(&q, now_ms) {
                log::info!(
                    "queue '{}' in vhost '{}' deleted: unused for its x-expires of {} ms",
                    q.name,
                    vhost.name,
                    q.settings().lifecycle.expires_ms.unwrap_or(0)
                );
            }
        }
    }
    timeout::run_once(broker, now_ms);
    broker.rates().sample(broker, now_ms);
}

/// Takes the messages of `q` whose TTL passed and dead-letters them when the queue has a
/// dead-letter exchange (their records are settled after, at-least-once).
fn expire_messages(vhost: &VirtualHost, q: &Arc<Queue>, now_ms: u64) {
    let expired = q.expire(now_ms);
    if !expired.is_empty() {
        jobs::run(vhost, jobs(q, expired, "expired"));
    }
}

/// The housekeeping thread; stops when dropped or [`Housekeeper::stop`]ped.
pub struct Housekeeper {
    thread: StoppableThread,
}

impl Housekeeper {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(broker: Arc<Broker>) -> io::Result<Housekeeper> {
        let thread = StoppableThread::spawn("relaymq-housekeeper", move |rx| run(&broker, &rx))?;
        Ok(Housekeeper { thread })
    }

    /// Stops the thread and waits for its round to finish.
    pub fn stop(&mut self) {
        self.thread.stop();
    }
}

fn run(broker: &Broker, stop: &Receiver<()>) {
    let interval = Duration::from_millis(HOUSEKEEPING_INTERVAL_MS);
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        // A panic in one round (a bug) must not end timed work for good.
        let round = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_once(broker, now_ms());
        }));
        if round.is_err() {
            log::error!("a housekeeping round panicked; the next one runs as usual");
        }
    }
}
