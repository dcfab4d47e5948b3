//! The forwarding loop shared by shovels and federation links: take what the source
//! delivered (waiting briefly), publish each message to the destination, then settle
//! the source by the ack mode. `on-confirm` acks a message once the destination
//! confirmed it (a nack requeues it at the source), `on-publish` once written, `no-ack`
//! consumed it unacknowledged. Source deliveries and destination confirms are both in
//! publish order, so the settled front of the in-flight list is acked with one
//! `multiple` ack (RabbitMQ's `rabbit_shovel_behaviour` and
//! `rabbit_federation_link_util:forward/9`).

use super::endpoint::{Dest, Shovelled, Source};
use crate::amqp_client::Confirm;
use crate::broker::shovel_definition::AckMode;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Longest a round waits for source deliveries when nothing is in flight (and the
/// longest between two looks at the stop flag).
pub const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Longest a round waits for confirms when the source has nothing more to give.
pub const CONFIRM_WAIT: Duration = Duration::from_millis(50);

/// How a run ended.
pub enum Ended {
    /// Asked to stop (its parameter was cleared or changed, or the broker stops).
    Stopped,
    /// `src-delete-after` reached.
    Done,
    /// A failure, with the reason to report.
    Failed(String),
}

/// What a round did, for the status.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// Messages published since the last report.
    pub forwarded: u64,
    /// Messages forwarded and not yet settled at the source.
    pub pending: u64,
    /// Messages left to move (`src-delete-after`); `None`: unlimited.
    pub remaining: Option<u64>,
    /// Ready messages in the source queue, when the source can tell.
    pub backlog: Option<u64>,
    /// The destination blocks publishers.
    pub blocked: bool,
}

/// The caller's part of the loop.
pub trait Forwarding {
    /// The exchange and routing key to publish `m` with (its properties may be changed
    /// in place), or `None` to drop it: it is settled at the source unpublished (a
    /// federation link's loop prevention).
    ///
    /// # Errors
    /// A reason that ends the run.
    fn prepare(&mut self, m: &mut Shovelled) -> Result<Option<(String, String)>, String>;
    /// Runs once a round (at most [`IDLE_WAIT`] apart): a federation link syncs its
    /// bindings here.
    ///
    /// # Errors
    /// A reason that ends the run.
    fn tick(&mut self) -> Result<(), String>;
    /// Whether to stop now.
    fn stopping(&self) -> bool;
    /// Reports progress (after a round that moved something, else every [`IDLE_WAIT`]).
    fn report(&mut self, p: Progress);
}

/// A message forwarded and not yet settled at the source.
struct InFlight {
    /// The destination's publish sequence number (0 outside `on-confirm`).
    seq: u64,
    /// The source's delivery tag.
    tag: u64,
    /// Settled by the destination: `Some(true)` acked, `Some(false)` nacked.
    settled: Option<bool>,
}

/// Moves messages from `src` to `dest` until stopped, failed or `remaining` (when
/// given) reaches 0.
pub fn run(
    src: &mut dyn Source,
    dest: &mut dyn Dest,
    ack_mode: AckMode,
    mut remaining: Option<u64>,
    f: &mut dyn Forwarding,
) -> Ended {
    let mut to_publish = remaining;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut batch: Vec<Shovelled> = Vec::new();
    let mut confirms: Vec<Confirm> = Vec::new();
    let mut seq = 0u64;
    let mut reported = Instant::now();
    let mut forwarded = 0u64;
    loop {
        if f.stopping() {
            return Ended::Stopped;
        }
        if let Err(why) = f.tick() {
            return Ended::Failed(why);
        }
        let blocked = dest.is_blocked();
        batch.clear();
        if !blocked {
            let wait = if in_flight.is_empty() {
                IDLE_WAIT
            } else {
                Duration::ZERO
            };
            if let Err(why) = src.poll(wait, &mut batch) {
                return Ended::Failed(format!("source: {why}"));
            }
        }
        let mut published_now = 0u64;
        for mut m in batch.drain(..) {
            if to_publish == Some(0) {
                // Moved what it was asked to: the rest is requeued when the source
                // closes (RabbitMQ drops them "on the floor").
                continue;
            }
            let route = match f.prepare(&mut m) {
                Ok(r) => r,
                Err(why) => return Ended::Failed(why),
            };
            let Some((exchange, key)) = route else {
                if ack_mode != AckMode::NoAck {
                    in_flight.push_back(InFlight {
                        seq: 0,
                        tag: m.tag,
                        settled: Some(true),
                    });
                }
                continue;
            };
            if let Err(why) = dest.publish(&exchange, &key, &m.properties, &m.body) {
                return Ended::Failed(format!("destination: {why}"));
            }
            published_now += 1;
            if let Some(n) = &mut to_publish {
                *n -= 1;
            }
            match ack_mode {
                AckMode::OnConfirm => {
                    seq += 1;
                    in_flight.push_back(InFlight {
                        seq,
                        tag: m.tag,
                        settled: None,
                    });
                }
                AckMode::OnPublish => in_flight.push_back(InFlight {
                    seq: 0,
                    tag: m.tag,
                    settled: Some(true),
                }),
                AckMode::NoAck => {
                    if let Some(n) = &mut remaining {
                        *n -= 1;
                    }
                }
            }
        }
        forwarded += published_now;
        if let Err(why) = dest.flush() {
            return Ended::Failed(format!("destination: {why}"));
        }
        let waiting = in_flight.iter().any(|f| f.settled.is_none());
        if ack_mode == AckMode::OnConfirm && (waiting || blocked) {
            let wait = if published_now == 0 || blocked {
                CONFIRM_WAIT
            } else {
                Duration::ZERO
            };
            confirms.clear();
            if let Err(why) = dest.poll_confirms(wait, &mut confirms) {
                return Ended::Failed(format!("destination: {why}"));
            }
            for c in &confirms {
                for x in in_flight.iter_mut() {
                    if x.seq > c.seq {
                        break;
                    }
                    if x.settled.is_none() && x.seq != 0 && (c.multiple || x.seq == c.seq) {
                        x.settled = Some(c.ack);
                    }
                }
            }
        } else if blocked {
            if let Err(why) = dest.poll_confirms(CONFIRM_WAIT, &mut confirms) {
                return Ended::Failed(format!("destination: {why}"));
            }
        }
        let settled = match settle_front(&mut in_flight, src) {
            Ok(n) => n,
            Err(why) => return Ended::Failed(format!("source: {why}")),
        };
        if let Some(n) = &mut remaining {
            *n = n.saturating_sub(settled);
        }
        if let Err(why) = src.flush() {
            return Ended::Failed(format!("source: {why}"));
        }
        let now = Instant::now();
        if forwarded > 0 || settled > 0 || now.duration_since(reported) >= IDLE_WAIT {
            f.report(Progress {
                forwarded,
                pending: in_flight.len() as u64,
                remaining,
                backlog: src.backlog(),
                blocked,
            });
            forwarded = 0;
            reported = now;
        }
        if remaining == Some(0) {
            return Ended::Done;
        }
    }
}

/// Settles the settled front of `in_flight` at the source: a run of acked messages with
/// one `multiple` ack, each nacked one with a requeueing nack. Returns how many were
/// settled.
///
/// # Errors
/// The source's failure.
fn settle_front(in_flight: &mut VecDeque<InFlight>, src: &mut dyn Source) -> Result<u64, String> {
    let mut n = 0u64;
    let mut ack_through: Option<u64> = None;
    while let Some(f) = in_flight.front() {
        match f.settled {
            None => break,
            Some(true) => ack_through = Some(f.tag),
            Some(false) => {
                if let Some(t) = ack_through.take() {
                    src.ack(t, true)?;
                }
                src.nack(f.tag)?;
            }
        }
        in_flight.pop_front();
        n += 1;
    }
    if let Some(t) = ack_through {
        src.ack(t, true)?;
    }
    Ok(n)
}
