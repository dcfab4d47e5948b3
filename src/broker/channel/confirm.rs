//! Publisher confirms of one channel: acks and nacks sent in publish order, each only once
//! the messages it covers are as safe as promised (fsynced, under `--fsync always`).
//!
//! Every confirm is a `basic.ack`/`basic.nack` with `multiple` set, covering all publishes
//! up to its sequence number since the previous confirm (RabbitMQ's confirm semantics). A
//! confirm waiting for an fsync holds back every later one on the channel, so the client
//! never sees a later sequence number confirmed before an earlier one.

use crate::broker::sink::ClientSink;
use crate::metrics::VhostCounters;
use crate::storage::flusher::SyncWaiter;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A confirm not yet sent.
#[derive(Debug, Clone, Copy)]
struct Pending {
    seq: u64,
    /// Epoch that must be durable first (0: none).
    epoch: u64,
    ack: bool,
}

/// The confirm queue of one channel in confirm mode.
pub struct ConfirmTracker {
    channel: u16,
    sink: Arc<dyn ClientSink>,
    pending: Mutex<VecDeque<Pending>>,
    /// Sequence number of the last confirm sent (changed only under `pending`'s lock), so
    /// each confirm counts the messages it covers.
    last_sent: AtomicU64,
    /// Where the confirmed and nacked messages are counted (metrics).
    counters: Arc<VhostCounters>,
    /// The channel, whose `confirm` counter counts the acked ones (management API).
    shared: Arc<super::Channel>,
}

impl std::fmt::Debug for ConfirmTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmTracker")
            .field("channel", &self.channel)
            .field("waiting", &self.lock().len())
            .finish()
    }
}

impl ConfirmTracker {
    /// A tracker sending confirms for `channel` through `sink`, counting them in
    /// `counters` (the channel's vhost's) and in `shared` (the channel's own).
    pub fn new(
        channel: u16,
        sink: Arc<dyn ClientSink>,
        counters: Arc<VhostCounters>,
        shared: Arc<super::Channel>,
    ) -> ConfirmTracker {
        ConfirmTracker {
            channel,
            sink,
            pending: Mutex::new(VecDeque::new()),
            last_sent: AtomicU64::new(0),
            counters,
            shared,
        }
    }

    /// Counts the messages one confirm covers (those since the previous one), then sends
    /// it (caller holds `pending`'s lock). Counted first, so a client that has its confirm
    /// finds it counted.
    fn send(&self, seq: u64, ack: bool) {
        let previous = self.last_sent.swap(seq, Ordering::Relaxed);
        let covered = seq.saturating_sub(previous);
        self.counters.confirmed(covered, ack);
        if ack {
            super::ChannelCounters::add(&self.shared.counters.confirm, covered);
        }
        self.sink.confirm(self.channel, seq, true, ack);
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Confirms every publish up to `seq` (`ack` false: nacks them) once `epoch` is
    /// durable, at once when there is nothing to wait for. Returns true when the confirm
    /// waits: the caller must then register the tracker with the flusher for `epoch`.
    pub fn confirm(&self, seq: u64, epoch: Option<u64>, ack: bool) -> bool {
        let mut pending = self.lock();
        if pending.is_empty() && epoch.is_none() {
            // Sent under the lock, so it cannot overtake a confirm the flusher is sending.
            self.send(seq, ack);
            return false;
        }
        pending.push_back(Pending {
            seq,
            epoch: epoch.unwrap_or(0),
            ack,
        });
        epoch.is_some()
    }

    /// Sends the confirms whose epochs are durable; `fail_epoch` turns the acks of that
    /// epoch into nacks. Returns whether confirms are still waiting.
    fn release(&self, synced: u64, fail_epoch: Option<u64>) -> bool {
        let mut pending = self.lock();
        while let Some(p) = pending.front().copied() {
            let failed = fail_epoch.is_some_and(|e| p.epoch != 0 && p.epoch <= e);
            if p.epoch > synced && !failed {
                break;
            }
            pending.pop_front();
            self.send(p.seq, p.ack && !failed);
        }
        !pending.is_empty()
    }
}

impl SyncWaiter for ConfirmTracker {
    fn synced(&self, synced: u64) -> bool {
        self.release(synced, None)
    }

    fn failed(&self, epoch: u64) -> bool {
        self.release(epoch.saturating_sub(1), Some(epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::channel::Channel;
    use crate::broker::sink::CancelReason;
    use crate::broker::Message;
    use crate::error::ReplyCode;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u64, bool)>>);

    impl ClientSink for Recorder {
        fn deliver(&self, _: u16, _: &str, _: u64, _: bool, _: &Message) {}
        fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
        fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {}
        fn confirm(&self, _: u16, seq: u64, multiple: bool, ack: bool) {
            assert!(multiple);
            self.0.lock().unwrap().push((seq, ack));
        }
        fn is_saturated(&self) -> bool {
            false
        }
        fn force_close(&self, _: ReplyCode, _: &str) {}
    }

    fn tracker() -> (Arc<Recorder>, ConfirmTracker) {
        let rec = Arc::new(Recorder::default());
        let channel = Arc::new(super::super::Channel::new(1, 1, rec.clone()));
        let t = ConfirmTracker::new(1, rec.clone(), Arc::default(), channel);
        (rec, t)
    }

    #[test]
    fn nothing_to_wait_for_confirms_at_once() {
        let (rec, t) = tracker();
        assert!(!t.confirm(3, None, true));
        assert_eq!(*rec.0.lock().unwrap(), vec![(3, true)]);
    }

    #[test]
    fn a_waiting_confirm_holds_back_later_ones_until_its_epoch_is_synced() {
        let (rec, t) = tracker();
        assert!(t.confirm(5, Some(2), true));
        assert!(
            !t.confirm(9, None, true),
            "no epoch of its own, but queued behind seq 5"
        );
        assert!(rec.0.lock().unwrap().is_empty());
        assert!(t.synced(1), "epoch 2 not durable yet");
        assert!(rec.0.lock().unwrap().is_empty());
        assert!(!t.synced(2));
        assert_eq!(*rec.0.lock().unwrap(), vec![(5, true), (9, true)]);
    }

    #[test]
    fn a_failed_epoch_nacks_what_it_covered_and_only_that() {
        let (rec, t) = tracker();
        t.confirm(1, Some(1), true);
        t.confirm(2, Some(2), true);
        t.confirm(3, Some(3), true);
        assert!(t.synced(1));
        assert!(t.failed(2));
        assert!(!t.synced(3));
        assert_eq!(
            *rec.0.lock().unwrap(),
            vec![(1, true), (2, false), (3, true)]
        );
    }
}
