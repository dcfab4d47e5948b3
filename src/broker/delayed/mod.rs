//! Delayed delivery: what an `x-delayed-message` exchange holds until its due time
//! ([`DelayedMessages`]), the `x-delay` header's rules ([`delay_of`]), the broker's timer
//! ([`schedule`]) and the delivery of due messages ([`delivery`]).
//!
//! A delayed exchange (RabbitMQ's archived plugin `rabbitmq_delayed_message_exchange`,
//! whose rules these are unless docs/lifecycle.md, "Delayed delivery", says otherwise)
//! keeps each delayed message as a record of a message store of its own, a queue
//! directory under `queues/`, written like a queue's persistent messages (and fsynced
//! before a persistent one is confirmed). The record's timestamp is the due time. In
//! memory there is only a due-time index of 24 bytes per message ([`Due`]): a million
//! waiting messages cost tens of MB, not their bodies. A durable exchange's store has a
//! fixed id derived from its vhost and name ([`crate::storage::delayed_store_id`]), so a
//! restart (or a kill -9) finds its messages again with their due times; a transient
//! exchange's store gets a random id and is removed at the next start.
//!
//! The timer never touches the store at a due time: a message is read back ("staged")
//! [`STAGE_AHEAD_MS`] before it is due, by the `relaymq-delay-io` thread, which also
//! settles the records of delivered messages ([`schedule`]). The store's lock is held
//! across several fsyncs at times (a compaction copies a segment and syncs it, the
//! directory and `queue_stat`; a segment emptied by a settlement is deleted and
//! `queue_stat` rewritten): reading and settling on the timer's thread made every message
//! due meanwhile that much late (up to 140 ms at 10,000 due/s on a busy disk). Staging is
//! bounded per exchange ([`STAGED_MESSAGES_MAX`], [`STAGED_BYTES_MAX`]), so a burst of due
//! messages is never all in memory, and the messages waiting beyond the horizon cost only
//! their index entry.

pub mod delivery;
pub mod schedule;

use crate::broker::message::Message;
use crate::broker::queue::storage::QueueStorage;
use crate::error::{BrokerError, ReplyCode};
use crate::storage::durability::Durability;
use crate::storage::{delayed_store_id, new_queue_id, QueueStore, RecordRef};
use crate::types::field_table::FieldValue;
use crate::types::BasicProperties;
use schedule::{DelaySchedule, DueTarget};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The header that asks a delayed-message exchange to hold a message, in ms (the plugin's).
pub const DELAY_HEADER: &str = "x-delay";

/// The longest delay the plugin honours, in ms (2^32 − 1, Erlang's timer maximum): it
/// delivers a message with a longer delay at once.
pub const PLUGIN_DELAY_MS_MAX: u64 = u32::MAX as u64;

/// The longest delay RelayMQ honours, in ms: ten years of 365 days (315,360,000,000 ms, the
/// bound of `x-message-ttl`, [`crate::limits::EXPIRY_MS_MAX`]). A longer delay is out of
/// range and the message is routed at once, as the plugin does past its own maximum. A
/// quorum queue's delayed retry waits at most this long too.
pub const DELAY_MS_MAX: u64 = crate::limits::EXPIRY_MS_MAX;

/// Due messages one exchange routes (or stages) at a time, between two looks at its
/// state.
pub const DUE_BATCH_MAX: usize = 256;

/// How long before its due time a waiting message is read back from the store into
/// memory, ms: longer than the store's lock is held by a compaction or a segment's
/// deletion (fsyncs, tens to hundreds of ms on a busy disk), so that routing it at its
/// due time waits for no disk.
pub const STAGE_AHEAD_MS: u64 = 1_000;

/// Staging starts when the earliest message not yet staged is due within this, ms (then
/// everything due within [`STAGE_AHEAD_MS`] is staged: a run every half horizon, not one
/// per due millisecond).
pub const STAGE_TRIGGER_MS: u64 = STAGE_AHEAD_MS / 2;

/// Most messages one exchange keeps staged (16,384 per s of horizon: beyond that rate
/// the horizon shrinks).
pub const STAGED_MESSAGES_MAX: usize = 16_384;

/// Most body bytes one exchange keeps staged (one message is staged whatever its size).
pub const STAGED_BYTES_MAX: usize = 16 << 20;

/// The delay a message asks for with its `x-delay` header, in ms, when the exchange must
/// hold it: the plugin's rules (`rabbit_delayed_message_utils:get_delay`): an integer
/// (signed 16/32/64-bit, unsigned 8/16/32-bit), a string holding an integer, or a float
/// (truncated). `None` (route at once) when absent, of another type, ≤ 0, or above
/// [`DELAY_MS_MAX`].
pub fn delay_of(properties: &BasicProperties) -> Option<u64> {
    let v = properties.headers.as_ref()?.get(DELAY_HEADER)?;
    let ms: i64 = match v {
        FieldValue::U8(n) => i64::from(*n),
        FieldValue::I16(n) => i64::from(*n),
        FieldValue::U16(n) => i64::from(*n),
        FieldValue::I32(n) => i64::from(*n),
        FieldValue::U32(n) => i64::from(*n),
        FieldValue::I64(n) => *n,
        FieldValue::F32(f) => f.trunc() as i64,
        FieldValue::F64(f) => f.trunc() as i64,
        FieldValue::LongString(b) | FieldValue::Bytes(b) => {
            std::str::from_utf8(b).ok()?.trim().parse().ok()?
        }
        _ => return None,
    };
    u64::try_from(ms)
        .ok()
        .filter(|&d| d > 0 && d <= DELAY_MS_MAX)
}

/// The time a delay counts from, in ms since the Unix epoch, rounded up: the timer fires
/// once the rounded-down clock ([`crate::broker::queue::expiry::now_ms`]) reaches the due
/// time, so a due time counted from a rounded-down reading would pass up to 1 ms before
/// the delay has, and a consumer could get the message early.
pub fn hold_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().div_ceil(1_000_000) as u64)
        .unwrap_or(0)
}

/// The properties a delayed message is routed with at its due time: its `x-delay` header
/// negated, as the plugin does (`swap_delay_header`), so a consumer can tell a message
/// that was delayed, and republishing it does not delay it again.
pub fn delivered_properties(properties: &BasicProperties, delay_ms: u64) -> BasicProperties {
    let mut p = properties.clone();
    let negated = -(delay_ms as i64);
    let value = i32::try_from(negated).map_or(FieldValue::I64(negated), FieldValue::I32);
    p.headers
        .get_or_insert_with(Default::default)
        .insert(DELAY_HEADER.to_string(), value);
    p
}

/// One waiting message in the due-time index: when it is due and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    /// Due time, ms since the Unix epoch.
    pub due_ms: u64,
    /// Its record in the exchange's store (in memory: a key of the memory map).
    pub record: RecordRef,
}

const _: () = assert!(std::mem::size_of::<Due>() == 24);

/// Where the waiting messages are.
enum Holding {
    /// Records of a message store (a broker with a data directory).
    Stored {
        storage: QueueStorage,
        /// The store's directory id (`queues/<id>`).
        id: String,
        durability: Arc<Durability>,
    },
    /// In memory (a broker without a data directory: tests).
    Memory,
}

/// A waiting message read back ahead of its due time.
struct Staged {
    due: Due,
    msg: Message,
}

impl PartialEq for Staged {
    fn eq(&self, other: &Staged) -> bool {
        self.due == other.due
    }
}
impl Eq for Staged {}
impl PartialOrd for Staged {
    fn partial_cmp(&self, other: &Staged) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Staged {
    fn cmp(&self, other: &Staged) -> std::cmp::Ordering {
        self.due.cmp(&other.due)
    }
}

struct State {
    /// Every waiting message not staged, by due time, earliest first.
    index: BinaryHeap<Reverse<Due>>,
    /// Messages read back ahead of their due time, earliest first.
    staged: BinaryHeap<Reverse<Staged>>,
    /// Body bytes of `staged`.
    staged_bytes: usize,
    /// Entries a staging run took from `index` and is still reading.
    staging_in_flight: usize,
    /// A staging run is asked for or under way: the timer asks for no other.
    staging: bool,
    /// Messages of an in-memory holding, by their [`Due::record`] id.
    memory: HashMap<u64, Arc<Message>>,
    /// Next in-memory id.
    next_memory_id: u64,
    /// The due time handed to the timer and not fired yet (`u64::MAX`: none).
    scheduled_ms: u64,
}

impl State {
    /// Whether staging more messages would pass [`STAGED_MESSAGES_MAX`] or
    /// [`STAGED_BYTES_MAX`].
    fn budget_spent(&self) -> bool {
        self.staged.len() + self.staging_in_flight >= STAGED_MESSAGES_MAX
            || self.staged_bytes >= STAGED_BYTES_MAX
    }
}

/// The messages one delayed-message exchange holds until their due time.
pub struct DelayedMessages {
    /// The exchange's vhost and name (what the timer looks up at the due time).
    pub vhost: Arc<str>,
    /// The exchange's name.
    pub exchange: Arc<str>,
    /// How the store is named in its log lines and errors ("delayed messages of exchange
    /// 'x'"), made once rather than at every hold and settlement.
    what: String,
    holding: Holding,
    state: Mutex<State>,
    schedule: Arc<DelaySchedule>,
    me: Weak<DelayedMessages>,
    /// Set when the exchange is deleted: its messages are gone.
    destroyed: AtomicBool,
}

impl std::fmt::Debug for DelayedMessages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayedMessages")
            .field("exchange", &self.exchange)
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl DelayedMessages {
    fn build(
        vhost: &str,
        exchange: &str,
        holding: Holding,
        index: Vec<Reverse<Due>>,
        schedule: Arc<DelaySchedule>,
    ) -> Arc<DelayedMessages> {
        let d = Arc::new_cyclic(|me| DelayedMessages {
            vhost: Arc::from(vhost),
            exchange: Arc::from(exchange),
            what: format!("delayed messages of exchange '{exchange}'"),
            holding,
            state: Mutex::new(State {
                index: BinaryHeap::from(index),
                staged: BinaryHeap::new(),
                staged_bytes: 0,
                staging_in_flight: 0,
                staging: false,
                memory: HashMap::new(),
                next_memory_id: 0,
                scheduled_ms: u64::MAX,
            }),
            schedule,
            me: me.clone(),
            destroyed: AtomicBool::new(false),
        });
        d.reschedule();
        d
    }

    /// Messages held in memory (a broker without a data directory).
    pub fn in_memory(
        vhost: &str,
        exchange: &str,
        schedule: Arc<DelaySchedule>,
    ) -> Arc<DelayedMessages> {
        DelayedMessages::build(vhost, exchange, Holding::Memory, Vec::new(), schedule)
    }

    /// Opens the store of exchange `exchange` of `vhost`: a durable exchange's at its fixed
    /// id, its records (left by the last run) waiting again with their due times, unless
    /// `fresh` (a new declaration: anything left there is removed first); a transient
    /// exchange's new, at a random id.
    ///
    /// # Errors
    /// 541 INTERNAL_ERROR naming the exchange and the I/O error (a full disk, no file
    /// descriptor).
    pub fn open(
        durability: &Arc<Durability>,
        vhost: &str,
        exchange: &str,
        durable: bool,
        fresh: bool,
        schedule: Arc<DelaySchedule>,
    ) -> Result<Arc<DelayedMessages>, BrokerError> {
        let id = if durable {
            delayed_store_id(vhost, exchange)
        } else {
            new_queue_id()
        };
        if fresh {
            durability.remove_queue_dir(&id);
        }
        let opened = QueueStore::open_with_budget(
            Arc::clone(durability.backend()),
            durability.queue_dir(&id),
            durability.store_config(),
            0,
        );
        let (store, recovered, report) = opened.map_err(|e| {
            BrokerError::new(
                ReplyCode::InternalError,
                format!("cannot open the store of exchange '{exchange}' in vhost '{vhost}': {e}"),
            )
        })?;
        for w in &report.warnings {
            log::warn!("delayed messages of exchange '{exchange}' in vhost '{vhost}': {w}");
        }
        let index: Vec<Reverse<Due>> = recovered
            .iter()
            .map(|r| {
                let due_ms = match r {
                    crate::storage::Recovered::Loaded(m) => m.timestamp_ms,
                    crate::storage::Recovered::Paged(p) => p.timestamp_ms,
                };
                Reverse(Due {
                    due_ms,
                    record: r.record(),
                })
            })
            .collect();
        if !index.is_empty() {
            log::info!(
                "exchange '{exchange}' in vhost '{vhost}': {} delayed messages recovered",
                index.len()
            );
        }
        let storage = QueueStorage::new(
            store,
            Arc::clone(durability.flusher()),
            Some(durability.compactor().clone()),
        );
        Ok(DelayedMessages::build(
            vhost,
            exchange,
            Holding::Stored {
                storage,
                id,
                durability: Arc::clone(durability),
            },
            index,
            schedule,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds `msg` until `now_ms + delay_ms` (ms since the Unix epoch). Returns the flusher
    /// epoch a publisher confirm of a persistent message must wait for (`--fsync always`).
    ///
    /// # Errors
    /// A text for the publisher when the store cannot take the message (out of service
    /// after a storage failure, a full disk); nothing is held then.
    pub fn hold(&self, msg: &Message, delay_ms: u64, now_ms: u64) -> Result<Option<u64>, String> {
        let due_ms = now_ms.saturating_add(delay_ms);
        let (record, sync) = match &self.holding {
            Holding::Stored { storage, .. } => {
                let (record, written) = storage.append(&self.what, msg, due_ms)?;
                let epoch = storage.submit(written);
                let persistent = msg.properties().is_persistent();
                (record, epoch.filter(|_| persistent))
            }
            Holding::Memory => {
                let mut st = self.lock();
                let id = st.next_memory_id;
                st.next_memory_id += 1;
                st.memory.insert(id, Arc::new(message_copy(msg)));
                (RecordRef { segment: 0, id }, None)
            }
        };
        // The timer looks at the exchange when this message is to be staged.
        let fire_ms = due_ms.saturating_sub(STAGE_TRIGGER_MS);
        let earlier = {
            let mut st = self.lock();
            st.index.push(Reverse(Due { due_ms, record }));
            let earlier = fire_ms < st.scheduled_ms;
            if earlier {
                st.scheduled_ms = fire_ms;
            }
            earlier
        };
        if earlier {
            self.schedule.add(fire_ms, self.target());
        }
        Ok(sync)
    }

    fn target(&self) -> DueTarget {
        DueTarget::Exchange(self.me.clone())
    }

    /// Takes up to `max` staged messages due at `now_ms`, earliest first.
    pub fn take_due(&self, now_ms: u64, max: usize) -> Vec<(Due, Message)> {
        let mut st = self.lock();
        let mut out = Vec::new();
        while out.len() < max && st.staged.peek().is_some_and(|s| s.0.due.due_ms <= now_ms) {
            if let Some(Reverse(s)) = st.staged.pop() {
                st.staged_bytes = st.staged_bytes.saturating_sub(s.msg.body_size());
                out.push((s.due, s.msg));
            }
        }
        out
    }

    /// Whether messages not yet staged are due within [`STAGE_TRIGGER_MS`] of `now_ms`
    /// (when the staging budget is spent: due already) and no staging run is under way;
    /// if so, marks one as under way (the caller runs [`DelayedMessages::stage`], which
    /// clears the mark).
    pub fn begin_staging(&self, now_ms: u64) -> bool {
        let mut st = self.lock();
        let Some(next) = st.index.peek().map(|Reverse(d)| d.due_ms) else {
            return false;
        };
        let fire = if st.budget_spent() {
            next
        } else {
            next.saturating_sub(STAGE_TRIGGER_MS)
        };
        if st.staging || fire > now_ms || self.is_destroyed() {
            return false;
        }
        st.staging = true;
        true
    }

    /// A staging run (after [`DelayedMessages::begin_staging`]): reads back the messages
    /// due within [`STAGE_AHEAD_MS`] of `now_ms`, earliest first, as far as
    /// [`STAGED_MESSAGES_MAX`] and [`STAGED_BYTES_MAX`] allow (a message due already is
    /// staged whatever the budget), without holding the exchange's lock while reading;
    /// then hands the next time to look at the exchange to the timer. A message that
    /// cannot be read is dropped (logged) and its record settled.
    pub fn stage(&self, now_ms: u64) {
        let horizon = now_ms.saturating_add(STAGE_AHEAD_MS);
        loop {
            let (chunk, mut bytes, mut count) = {
                let mut st = self.lock();
                let mut chunk = Vec::new();
                while chunk.len() < DUE_BATCH_MAX {
                    let Some(next) = st.index.peek().map(|Reverse(d)| d.due_ms) else {
                        break;
                    };
                    let room =
                        st.staged.len() + st.staging_in_flight + chunk.len() < STAGED_MESSAGES_MAX;
                    if next > horizon || (!room && next > now_ms) {
                        break;
                    }
                    if let Some(Reverse(d)) = st.index.pop() {
                        chunk.push(d);
                    }
                }
                st.staging_in_flight += chunk.len();
                (chunk, st.staged_bytes, st.staged.len())
            };
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            let mut loaded = Vec::with_capacity(n);
            let mut rest = Vec::new();
            for d in chunk {
                let spent = bytes >= STAGED_BYTES_MAX && count > 0 && d.due_ms > now_ms;
                if spent || self.is_destroyed() {
                    rest.push(d);
                    continue;
                }
                let m = self.load(d);
                if let Ok(msg) = &m {
                    bytes += msg.body_size();
                    count += 1;
                }
                loaded.push((d, m));
            }
            let mut st = self.lock();
            st.staging_in_flight -= n;
            let mut unreadable = Vec::new();
            for (due, m) in loaded {
                match m {
                    Ok(msg) => {
                        st.staged_bytes += msg.body_size();
                        st.staged.push(Reverse(Staged { due, msg }));
                    }
                    Err(e) => unreadable.push((due, e)),
                }
            }
            let stop = !rest.is_empty();
            if !self.is_destroyed() {
                st.index.extend(rest.into_iter().map(Reverse));
            }
            drop(st);
            for (due, e) in unreadable {
                log::error!(
                    "exchange '{}' in vhost '{}': a delayed message cannot be read and is \
                     dropped: {e}",
                    self.exchange,
                    self.vhost
                );
                self.settle(due.record, None);
            }
            if stop {
                break;
            }
        }
        self.lock().staging = false;
        self.reschedule();
    }

    /// The message of an index entry (read back from the store, checksum verified).
    ///
    /// # Errors
    /// A text saying why it cannot be read (a damaged record, an I/O error).
    fn load(&self, due: Due) -> Result<Message, String> {
        match &self.holding {
            Holding::Stored { storage, .. } => storage.read(due.record),
            Holding::Memory => self
                .lock()
                .memory
                .remove(&due.record.id)
                .map(|m| message_copy(&m))
                .ok_or_else(|| format!("delayed message {} is gone", due.record.id)),
        }
    }

    /// Settles a delivered (or unreadable) message's record: at once, or once flusher
    /// epoch `after` is durable (the writes of its copies in their queues), so a crash in
    /// between delivers it again rather than losing it.
    pub fn settle(&self, record: RecordRef, after: Option<u64>) {
        let Some(epoch) = after else {
            return self.settle_now(record);
        };
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        if let Holding::Stored { storage, .. } = &self.holding {
            let waiter = SettleAfter {
                delayed: self.me.clone(),
                record,
                epoch,
            };
            storage.when_durable(epoch, Arc::new(waiter));
        }
    }

    /// Hands the timer the next time it must look at this exchange: the earliest staged
    /// message's due time, or [`STAGE_TRIGGER_MS`] before the earliest message not
    /// staged (unless a staging run is under way: it calls this when done). Called after
    /// each run for the exchange and when the index was built.
    pub fn reschedule(&self) {
        let next = {
            let mut st = self.lock();
            let staged = st.staged.peek().map(|Reverse(s)| s.due.due_ms);
            let spent = st.budget_spent();
            let unstaged = match st.staging {
                true => None,
                false => st.index.peek().map(|Reverse(d)| match spent {
                    // Staged when due (the budget holds earlier ones).
                    true => d.due_ms,
                    false => d.due_ms.saturating_sub(STAGE_TRIGGER_MS),
                }),
            };
            let next = match (staged, unstaged) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            st.scheduled_ms = next.unwrap_or(u64::MAX);
            next
        };
        if let Some(n) = next {
            self.schedule.add(n, self.target());
        }
    }

    /// Messages waiting (staged or not).
    pub fn waiting(&self) -> usize {
        let st = self.lock();
        st.index.len() + st.staged.len() + st.staging_in_flight
    }

    /// The earliest due time, ms since the Unix epoch, when a message waits (one a
    /// staging run is reading is not counted: it is due no earlier than a staged one).
    pub fn next_due_ms(&self) -> Option<u64> {
        let st = self.lock();
        let staged = st.staged.peek().map(|Reverse(s)| s.due.due_ms);
        let index = st.index.peek().map(|Reverse(d)| d.due_ms);
        match (staged, index) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The exchange was deleted: its waiting messages are discarded and its store's
    /// directory removed.
    pub fn destroy(&self) {
        self.destroyed.store(true, Ordering::Release);
        {
            let mut st = self.lock();
            st.index = BinaryHeap::new();
            st.staged = BinaryHeap::new();
            st.staged_bytes = 0;
            st.memory = HashMap::new();
        }
        if let Holding::Stored { id, durability, .. } = &self.holding {
            durability.remove_queue_dir(id);
        }
    }

    /// Whether [`DelayedMessages::destroy`] ran.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    fn settle_now(&self, record: RecordRef) {
        if self.destroyed.load(Ordering::Acquire) {
            return;
        }
        if let Holding::Stored { storage, .. } = &self.holding {
            storage.settle_soon(&self.what, record);
        }
    }

    /// Writes the store's `queue_stat` (clean shutdown).
    pub fn write_stat(&self) {
        if let Holding::Stored { storage, .. } = &self.holding {
            storage.write_stat(&self.what);
        }
    }
}

/// A copy of `msg` sharing its names (an in-memory holding keeps its own).
fn message_copy(msg: &Message) -> Message {
    Message::with_names(
        Arc::clone(msg.names()),
        Some(Box::new(msg.properties().clone())),
        msg.body.to_vec(),
    )
}

/// A delivered message's record, settled once its copies are durable in their queues;
/// called on the flusher thread.
struct SettleAfter {
    delayed: Weak<DelayedMessages>,
    record: RecordRef,
    epoch: u64,
}

impl crate::storage::flusher::SyncWaiter for SettleAfter {
    fn synced(&self, synced: u64) -> bool {
        if synced < self.epoch {
            return true;
        }
        if let Some(d) = self.delayed.upgrade() {
            d.settle_now(self.record);
        }
        false
    }

    fn failed(&self, epoch: u64) -> bool {
        if epoch < self.epoch {
            return true;
        }
        // Kept: the message is delivered again after a restart (a duplicate, never a loss).
        log::warn!("a delivered delayed message is kept: the write to its queues failed");
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::field_table::FieldTable;

    fn with_delay(v: FieldValue) -> BasicProperties {
        let mut h = FieldTable::new();
        h.insert(DELAY_HEADER.to_string(), v);
        BasicProperties {
            headers: Some(h),
            ..BasicProperties::default()
        }
    }

    #[test]
    fn the_delay_header_follows_the_plugins_rules() {
        assert_eq!(delay_of(&BasicProperties::default()), None);
        assert_eq!(delay_of(&with_delay(FieldValue::I32(5000))), Some(5000));
        assert_eq!(delay_of(&with_delay(FieldValue::I64(1))), Some(1));
        assert_eq!(delay_of(&with_delay(FieldValue::U8(7))), Some(7));
        assert_eq!(delay_of(&with_delay(FieldValue::U32(9))), Some(9));
        assert_eq!(delay_of(&with_delay(FieldValue::F64(1500.9))), Some(1500));
        assert_eq!(delay_of(&with_delay(FieldValue::string("250"))), Some(250));
        // Zero, negative, a signed byte (not among the plugin's types), nonsense: at once.
        assert_eq!(delay_of(&with_delay(FieldValue::I32(0))), None);
        assert_eq!(delay_of(&with_delay(FieldValue::I32(-5))), None);
        assert_eq!(delay_of(&with_delay(FieldValue::I8(5))), None);
        assert_eq!(delay_of(&with_delay(FieldValue::string("soon"))), None);
        assert_eq!(delay_of(&with_delay(FieldValue::Bool(true))), None);
        // Past the plugin's 2^32 - 1 ms, up to ten years: held.
        let year = 365 * 24 * 3600 * 1000_i64;
        assert_eq!(
            delay_of(&with_delay(FieldValue::I64(5 * year))),
            Some(5 * year as u64)
        );
        assert_eq!(
            delay_of(&with_delay(FieldValue::I64(DELAY_MS_MAX as i64))),
            Some(DELAY_MS_MAX)
        );
        assert_eq!(
            delay_of(&with_delay(FieldValue::I64(DELAY_MS_MAX as i64 + 1))),
            None
        );
    }

    #[test]
    fn a_delivered_message_carries_the_negated_delay() {
        let p = delivered_properties(&with_delay(FieldValue::I32(5000)), 5000);
        assert_eq!(
            p.headers.unwrap().get(DELAY_HEADER),
            Some(&FieldValue::I32(-5000))
        );
        let long = DELAY_MS_MAX;
        let p = delivered_properties(&with_delay(FieldValue::I64(long as i64)), long);
        assert_eq!(
            p.headers.unwrap().get(DELAY_HEADER),
            Some(&FieldValue::I64(-(long as i64)))
        );
    }

    #[test]
    fn messages_are_staged_ahead_of_their_due_time_and_routed_earliest_first() {
        let schedule = Arc::new(DelaySchedule::new());
        let d = DelayedMessages::in_memory("/", "x", Arc::clone(&schedule));
        let msg = Message::new("x", "k", BasicProperties::default(), b"m".to_vec());
        for delay in [300, 100, 200, 100] {
            d.hold(&msg, delay, 1000).unwrap();
        }
        assert_eq!(d.waiting(), 4);
        assert_eq!(d.next_due_ms(), Some(1100));
        // The timer looks at the exchange when the earliest is to be staged.
        assert_eq!(schedule.next_due_ms(), Some(1100 - STAGE_TRIGGER_MS));
        // Nothing staged yet: nothing to route, not even when due.
        assert!(d.take_due(1200, 10).is_empty());
        assert!(!d.begin_staging(1099 - STAGE_TRIGGER_MS));
        assert!(d.begin_staging(1100 - STAGE_TRIGGER_MS));
        assert!(!d.begin_staging(1100), "one staging run at a time");
        d.stage(1000);
        assert_eq!(d.waiting(), 4);
        assert_eq!(d.next_due_ms(), Some(1100));
        assert!(d.take_due(1099, 10).is_empty());
        let due = d.take_due(1200, 2);
        assert_eq!(
            due.iter().map(|(x, _)| x.due_ms).collect::<Vec<_>>(),
            [1100, 1100]
        );
        assert_eq!(due[0].1.body.as_ref(), b"m");
        assert_eq!(d.take_due(1200, 10).len(), 1);
        assert_eq!(d.waiting(), 1);
        d.destroy();
        assert_eq!(d.waiting(), 0);
    }

    #[test]
    fn staging_keeps_to_its_budget_until_messages_are_due() {
        let schedule = Arc::new(DelaySchedule::new());
        let d = DelayedMessages::in_memory("/", "x", Arc::clone(&schedule));
        let msg = Message::new("x", "k", BasicProperties::default(), b"m".to_vec());
        let n = STAGED_MESSAGES_MAX + 10;
        for _ in 0..n {
            d.hold(&msg, 100, 1000).unwrap();
        }
        assert!(d.begin_staging(1000));
        d.stage(1000);
        assert_eq!(d.waiting(), n);
        // The budget is spent: the rest waits until due, not half a horizon before.
        assert!(!d.begin_staging(1099));
        assert!(d.begin_staging(1100));
        assert_eq!(d.take_due(1100, n).len(), STAGED_MESSAGES_MAX);
        d.stage(1100);
        assert_eq!(d.take_due(1100, n).len(), 10);
        assert_eq!(d.waiting(), 0);
    }
}
