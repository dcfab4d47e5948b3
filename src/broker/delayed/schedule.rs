//! The broker's timer for delayed delivery: a heap of due times, each naming what is due
//! then (a delayed-message exchange, or a quorum queue whose returned messages wait for
//! their delayed retry), and one thread, `relaymq-delay`, that sleeps until the earliest
//! and runs it. The 50 ms housekeeping tick is too coarse for delays; this thread wakes
//! at the due millisecond.
//!
//! Each holder hands the timer only its earliest due time, again whenever an earlier one
//! arrives and after each run ([`DelayedMessages::reschedule`]): the heap holds about one
//! entry per holder with waiting messages, whatever their number. An entry whose holder
//! is gone, or that fires early for it, is harmless: the run finds nothing due.
//!
//! A second thread, `relaymq-delay-io`, does the delayed-message exchanges' store work
//! that must not hold up the timer: staging messages ahead of their due time
//! ([`DelayedMessages::stage`]) and settling the records of delivered ones. Without it
//! (a test calling [`DelaySchedule::run_due`]) that work runs on the caller's thread.

use super::DelayedMessages;
use crate::broker::node::Broker;
use crate::broker::queue::expiry::now_ms;
use crate::broker::queue::Queue;
use crate::storage::RecordRef;
use crossbeam_channel::Sender;
use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What is due at an entry's time.
#[derive(Clone, Debug)]
pub enum DueTarget {
    /// A delayed-message exchange's held messages.
    Exchange(Weak<DelayedMessages>),
    /// A quorum queue's messages waiting for their delayed retry.
    Queue(Weak<Queue>),
}

struct Entry {
    due_ms: u64,
    seq: u64,
    target: DueTarget,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        (self.due_ms, self.seq) == (other.due_ms, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Entry) -> CmpOrdering {
        (self.due_ms, self.seq).cmp(&(other.due_ms, other.seq))
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    stopped: bool,
}

/// Store work of a delayed-message exchange, for the `relaymq-delay-io` thread.
enum IoJob {
    /// Stage the messages due soon after the time given ([`DelayedMessages::stage`]; the
    /// clock when the job runs, if later).
    Stage(Arc<DelayedMessages>, u64),
    /// Settle the records of delivered messages, each once its flusher epoch (if any) is
    /// durable ([`DelayedMessages::settle`]).
    Settle(Arc<DelayedMessages>, Vec<(RecordRef, Option<u64>)>),
}

impl IoJob {
    fn run(self) {
        match self {
            IoJob::Stage(d, at) => d.stage(at.max(now_ms())),
            IoJob::Settle(d, records) => {
                for (record, after) in records {
                    d.settle(record, after);
                }
            }
        }
    }
}

/// The due times of a broker's delayed messages and retries (one per broker, shared by
/// its vhosts); [`DelayTimer`] runs it.
#[derive(Default)]
pub struct DelaySchedule {
    state: Mutex<State>,
    wake: Condvar,
    /// The `relaymq-delay-io` thread's jobs, while it runs.
    io: Mutex<Option<Sender<IoJob>>>,
}

impl std::fmt::Debug for DelaySchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelaySchedule")
            .field("entries", &self.lock().heap.len())
            .finish()
    }
}

impl DelaySchedule {
    /// An empty schedule.
    pub fn new() -> DelaySchedule {
        DelaySchedule::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for `target` to run at `due_ms` (ms since the Unix epoch); wakes the timer
    /// when that is earlier than what it waits for.
    pub fn add(&self, due_ms: u64, target: DueTarget) {
        let mut st = self.lock();
        let earliest = st.heap.peek().is_none_or(|Reverse(e)| due_ms < e.due_ms);
        st.seq += 1;
        let seq = st.seq;
        st.heap.push(Reverse(Entry {
            due_ms,
            seq,
            target,
        }));
        drop(st);
        if earliest {
            self.wake.notify_all();
        }
    }

    /// The earliest entry's time.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.lock().heap.peek().map(|Reverse(e)| e.due_ms)
    }

    /// Takes the entries due at `now_ms`.
    pub fn take_due(&self, now_ms: u64) -> Vec<DueTarget> {
        let mut st = self.lock();
        let mut out = Vec::new();
        while st.heap.peek().is_some_and(|Reverse(e)| e.due_ms <= now_ms) {
            if let Some(Reverse(e)) = st.heap.pop() {
                out.push(e.target);
            }
        }
        out
    }

    /// Blocks until an entry is due (or the schedule is stopped: `None`), then takes the
    /// due entries.
    fn wait_due(&self) -> Option<Vec<DueTarget>> {
        let mut st = self.lock();
        loop {
            if st.stopped {
                return None;
            }
            // To the microsecond: a wait counted from the millisecond begun would end up
            // to 1 ms after the due one.
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            match st
                .heap
                .peek()
                .map(|Reverse(e)| Duration::from_millis(e.due_ms))
            {
                Some(due) if due <= now => break,
                Some(due) => {
                    let wait = due - now;
                    st = self
                        .wake
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => st = self.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
        drop(st);
        Some(self.take_due(now_ms()))
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_all();
    }

    /// Hands `job` to the `relaymq-delay-io` thread, or runs it here when that thread
    /// does not run.
    fn run_io(&self, job: IoJob) {
        let job = match &*self.io.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(e) => e.into_inner(),
            },
            None => job,
        };
        job.run();
    }

    /// Stages the messages of `delayed` due soon after `now_ms` (on the I/O thread).
    pub(super) fn stage(&self, delayed: &Arc<DelayedMessages>, now_ms: u64) {
        self.run_io(IoJob::Stage(Arc::clone(delayed), now_ms));
    }

    /// Settles the records of messages of `delayed` just routed (on the I/O thread).
    pub(super) fn settle(
        &self,
        delayed: &Arc<DelayedMessages>,
        records: Vec<(RecordRef, Option<u64>)>,
    ) {
        if !records.is_empty() {
            self.run_io(IoJob::Settle(Arc::clone(delayed), records));
        }
    }

    /// Runs every target due at `now_ms` on `broker` (what the timer thread does at each
    /// wake; tests call it directly).
    pub fn run_due(&self, broker: &Broker, now_ms: u64) {
        for target in self.take_due(now_ms) {
            run_target(broker, target, now_ms);
        }
    }
}

fn run_target(broker: &Broker, target: DueTarget, now_ms: u64) {
    match target {
        DueTarget::Exchange(d) => {
            if let Some(d) = d.upgrade() {
                super::delivery::deliver_due(broker, &d, now_ms);
            }
        }
        DueTarget::Queue(q) => {
            if let Some(q) = q.upgrade() {
                q.release_delayed(now_ms);
            }
        }
    }
}

/// The `relaymq-delay` thread running a [`DelaySchedule`], and the `relaymq-delay-io`
/// thread doing its store work; stop when dropped or [`DelayTimer::stop`]ped.
pub struct DelayTimer {
    schedule: Arc<DelaySchedule>,
    thread: Option<JoinHandle<()>>,
    io_thread: Option<JoinHandle<()>>,
}

impl DelayTimer {
    /// Starts the threads on `broker`'s schedule.
    ///
    /// # Errors
    /// A thread cannot be spawned.
    pub fn start(broker: Arc<Broker>) -> io::Result<DelayTimer> {
        let schedule = Arc::clone(broker.delay_schedule());
        let (tx, rx) = crossbeam_channel::unbounded::<IoJob>();
        let io_thread = std::thread::Builder::new()
            .name("relaymq-delay-io".into())
            .spawn(move || {
                // Ends once the sender is dropped and every job sent before ran (the
                // settlements of a stop are not lost).
                for job in rx {
                    job.run();
                }
            })?;
        *schedule.io.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let s = Arc::clone(&schedule);
        let thread = std::thread::Builder::new()
            .name("relaymq-delay".into())
            .spawn(move || {
                while let Some(due) = s.wait_due() {
                    let now = now_ms();
                    for target in due {
                        run_target(&broker, target, now);
                    }
                }
            })?;
        Ok(DelayTimer {
            schedule,
            thread: Some(thread),
            io_thread: Some(io_thread),
        })
    }

    /// Stops the threads and waits for their runs to finish (the I/O thread's jobs
    /// queued meanwhile run first).
    pub fn stop(&mut self) {
        self.schedule.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.schedule
            .io
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = self.io_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DelayTimer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_by_due_time() {
        let s = DelaySchedule::new();
        for due in [30, 10, 20] {
            s.add(due, DueTarget::Queue(Weak::new()));
        }
        assert_eq!(s.next_due_ms(), Some(10));
        assert_eq!(s.take_due(9).len(), 0);
        assert_eq!(s.take_due(20).len(), 2);
        assert_eq!(s.next_due_ms(), Some(30));
    }

    #[test]
    fn a_stopped_schedule_ends_the_wait() {
        let s = Arc::new(DelaySchedule::new());
        let waiter = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || s.wait_due().is_none())
        };
        std::thread::sleep(Duration::from_millis(20));
        s.stop();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn an_earlier_entry_wakes_the_waiter() {
        let s = Arc::new(DelaySchedule::new());
        s.add(now_ms() + 3_600_000, DueTarget::Queue(Weak::new()));
        let waiter = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || s.wait_due().map(|v| v.len()))
        };
        std::thread::sleep(Duration::from_millis(20));
        s.add(now_ms(), DueTarget::Queue(Weak::new()));
        assert_eq!(waiter.join().unwrap(), Some(1));
    }
}
