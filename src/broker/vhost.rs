//! A virtual host: an isolated namespace of exchanges, queues and bindings (AMQP 0-9-1
//! §3.1.1), with the declare/delete/bind/route operations on them.
//!
//! Lock order (docs/architecture.md §8): exchange map → queue map → one exchange's bindings →
//! one queue's state. Maps are read-mostly `RwLock`s and are never held while a queue lock
//! is taken for dispatch.

use crate::broker::consumer::Consumer;
use crate::broker::dead_letter::DeadLetter;
use crate::broker::delayed::schedule::DelaySchedule;
use crate::broker::delayed::DelayedMessages;
use crate::broker::direct_reply::ReplyTargets;
use crate::broker::exchange::{Binding, Destination, ExchangeKind, HashSource};
use crate::broker::exchange::{Exchange, STANDARD_EXCHANGES};
use crate::broker::message::Message;
use crate::broker::names;
use crate::broker::policy::Policy;
use crate::broker::queue::args::LifecycleArgs;
use crate::broker::queue::length_limit::LengthLimit;
use crate::broker::queue::queue_type::{DeclaredProperties, QueueType};
use crate::broker::queue::storage::QueueStorage;
use crate::broker::queue::Queue;
use crate::broker::sink::CancelReason;
use crate::broker::topology;
use crate::error::{BrokerError, ReplyCode};
use crate::limits::LiveLimits;
use crate::metrics::{EventCounters, QueueChurn, VhostCounters};
use crate::storage::durability::Durability;
use crate::storage::meta::{BindingDef, ExchangeDef, MetaStore, QueueDef};
use crate::storage::StorageError;
use crate::types::{FieldTable, FieldValue};
use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// What `exchange.declare` asks for.
#[derive(Debug, Clone, Default)]
pub struct ExchangeSpec {
    /// Exchange name.
    pub name: String,
    /// Type name: direct, fanout, topic, headers or x-consistent-hash.
    pub kind: String,
    /// Only check existence.
    pub passive: bool,
    /// Durable.
    pub durable: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Internal.
    pub internal: bool,
    /// Arguments.
    pub arguments: FieldTable,
}

/// What `queue.declare` asks for.
#[derive(Debug, Clone, Default)]
pub struct QueueSpec {
    /// Queue name; empty asks for a generated `amq.gen-…` name.
    pub name: String,
    /// Only check existence.
    pub passive: bool,
    /// Durable.
    pub durable: bool,
    /// Exclusive to the declaring connection.
    pub exclusive: bool,
    /// Auto-delete.
    pub auto_delete: bool,
    /// Arguments.
    pub arguments: FieldTable,
}

/// The answer to `queue.declare`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDeclared {
    /// The queue's name (generated when the request's was empty).
    pub name: String,
    /// Ready messages.
    pub message_count: u32,
    /// Consumers.
    pub consumer_count: u32,
}

/// One virtual host.
#[derive(Debug)]
pub struct VirtualHost {
    /// Vhost name.
    pub name: Arc<str>,
    exchanges: RwLock<HashMap<Arc<str>, Arc<Exchange>>>,
    queues: RwLock<HashMap<Arc<str>, Arc<Queue>>>,
    deleted: AtomicBool,
    /// Serializes definition changes (declare, delete, bind, unbind) so each is committed to
    /// `meta.db` and applied in memory as one step, without holding the maps that publishes
    /// read while the commit's fsync runs. Taken before any map lock.
    changes: Mutex<()>,
    /// The vhost's policies, in no particular order; the winner for a
    /// name is chosen by [`crate::broker::policy::for_queue`]. Changed only under
    /// `changes`; a leaf lock.
    pub(crate) policies: Mutex<Vec<Arc<Policy>>>,
    /// The vhost's operator policies (`crate::broker::policy::operator`), as `policies`:
    /// changed only under `changes`; a leaf lock.
    pub(crate) operator_policies: Mutex<Vec<Arc<Policy>>>,
    /// Runtime parameters stored for components RelayMQ keeps but does not act on
    /// (`crate::broker::parameters`), by (component, name). Changed only under `changes`;
    /// a leaf lock.
    pub(crate) parameters: Mutex<crate::broker::parameters::ParameterMap>,
    /// Where durable definitions are committed; `None` for an in-memory broker.
    durability: Option<Arc<Durability>>,
    /// Message events (confirms, returns, unroutable drops, dead-letterings), counted here
    /// and broker-wide, for the metrics endpoint.
    counters: Arc<VhostCounters>,
    /// Memory budget of each queue declared here (`Queue::memory_bytes_max`).
    queue_memory_bytes: usize,
    /// Consumer timeout of the queues declared here without `x-consumer-timeout`, in ms
    /// (`Queue::consumer_timeout_ms`; 0 = never).
    consumer_timeout_ms: u64,
    /// The broker's limits in force (queues and exchanges per vhost, name length).
    limits: Arc<LiveLimits>,
    /// RabbitMQ's vhost limits set on this vhost (`max-connections`, `max-queues`;
    /// `crate::broker::limits`). Changed under `changes`; a leaf lock.
    pub(crate) own_limits: RwLock<crate::broker::limits::LimitMap>,
    /// Description, tags and default queue type (the management API's vhost metadata).
    /// Changed under `changes`; a leaf lock.
    pub(crate) metadata: RwLock<crate::broker::limits::VhostMetadata>,
    /// Live direct reply-to names and their consumers (`crate::broker::direct_reply`).
    direct_replies: Arc<ReplyTargets>,
    /// The broker's timer for delayed delivery (its delayed-message exchanges register
    /// their due times there).
    delay_schedule: Arc<DelaySchedule>,
}

/// Exchanges every vhost has that do not count against `exchanges_per_vhost_max`: the
/// default exchange and the standard `amq.*` ones (they cannot be deleted).
const BUILTIN_EXCHANGES: usize = 1 + STANDARD_EXCHANGES.len();

/// 406 PRECONDITION_FAILED when a client-chosen `name` (of an exchange, queue or consumer
/// tag: `what`) is longer than `max` bytes (`--max-name-bytes`; the AMQP `shortstr`
/// ceiling is 255).
///
/// # Errors
/// The 406, naming the length and the limit.
pub fn check_name_bytes(what: &str, name: &str, max: usize) -> Result<(), BrokerError> {
    if name.len() > max {
        return Err(BrokerError::precondition(format!(
            "{what} '{name}' is {} bytes long, over the limit of {max} bytes",
            name.len()
        )));
    }
    Ok(())
}

fn inequivalent(
    arg: &str,
    what: &str,
    name: &str,
    vhost: &str,
    got: impl Display,
    current: impl Display,
) -> BrokerError {
    BrokerError::precondition(format!(
        "inequivalent arg '{arg}' for {what} '{name}' in vhost '{vhost}': received '{got}' but current is '{current}'"
    ))
}

/// Checks a redeclare against what exists, in RabbitMQ's order (type, flags, arguments),
/// naming the first difference. Arguments compared are `compared` (a queue's: those with
/// a meaning, as RabbitMQ), or all of them (`None`).
///
/// # Errors
/// 406 PRECONDITION_FAILED `inequivalent arg 'X' for …` (RabbitMQ's text).
fn check_equivalent(
    what: &str,
    name: &str,
    vhost: &str,
    kind: Option<(&str, &str)>,
    got: &[(&str, bool)],
    current: &[(&str, bool)],
    arguments: (&FieldTable, &FieldTable, Option<&[&str]>),
) -> Result<(), BrokerError> {
    if let Some((g, c)) = kind.filter(|(g, c)| g != c) {
        return Err(inequivalent("type", what, name, vhost, g, c));
    }
    for ((arg, g), (_, c)) in got.iter().zip(current) {
        if g != c {
            return Err(inequivalent(arg, what, name, vhost, g, c));
        }
    }
    let (got, current, compared) = arguments;
    let keys: Vec<&str> = match compared {
        Some(keys) => keys.to_vec(),
        None => {
            let mut all: Vec<&str> = got.keys().chain(current.keys()).map(|k| &**k).collect();
            all.sort_unstable();
            all.dedup();
            all
        }
    };
    for key in keys {
        let (g, c) = (got.get(key), current.get(key));
        if !same_argument(g, c) {
            return Err(BrokerError::precondition(format!(
                "inequivalent arg '{key}' for {what} '{name}' in vhost '{vhost}': received {} \
                 but current is {}",
                describe_argument(g),
                describe_argument(c)
            )));
        }
    }
    Ok(())
}

/// Whether two values of an argument are the same; integers of different AMQP widths with
/// the same value are (RabbitMQ compares integer arguments by value).
fn same_argument(a: Option<&FieldValue>, b: Option<&FieldValue>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
        (a, b) => a == b,
    }
}

/// An argument value as RabbitMQ shows it in an inequivalence error: `none`, or
/// `the value '…' of type '…'` with RabbitMQ's type names.
fn describe_argument(v: Option<&FieldValue>) -> String {
    let Some(v) = v else {
        return "none".to_string();
    };
    let kind = v.rabbitmq_type_name();
    let text = match v.to_json() {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    };
    format!("the value '{text}' of type '{kind}'")
}

/// The queue arguments a redeclare must match: those RelayMQ gives a meaning. Others are
/// kept as first declared and not compared, as RabbitMQ does.
const EQUIVALENT_QUEUE_ARGUMENTS: [&str; 18] = [
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-delivery-limit",
    "x-consumer-timeout",
    "x-max-priority",
    "x-queue-type",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-quorum-initial-group-size",
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
];

/// Checks the values of queue arguments: the lifecycle ones, length limits, dead-lettering,
/// `x-queue-type` (`stream` and unknown types are 406) and `x-single-active-consumer` (a
/// boolean). Which arguments a queue of each type takes, and the properties it needs, are
/// [`QueueType::check_declaration`]'s; other arguments are kept as given.
///
/// # Errors
/// 406 PRECONDITION_FAILED `invalid arg 'x-…': …` (the declaration adds the queue's name).
pub(crate) fn check_queue_arguments(arguments: &FieldTable) -> Result<QueueType, BrokerError> {
    let queue_type = QueueType::parse(arguments)?;
    if let Some(v) = arguments.get("x-single-active-consumer") {
        if !matches!(v, FieldValue::Bool(_)) {
            return Err(BrokerError::precondition(format!(
                "invalid arg 'x-single-active-consumer': {{unacceptable_type,{}}}",
                v.rabbitmq_type_name()
            )));
        }
    }
    LengthLimit::from_arguments(arguments)?;
    DeadLetter::from_arguments(arguments)?;
    LifecycleArgs::for_type(arguments, queue_type)?;
    Ok(queue_type)
}

/// An argument's 406 `invalid arg 'x-…': …` as RabbitMQ words it, naming the queue and
/// vhost: `invalid arg 'x-…' for queue 'q' in vhost '/': …` (other texts unchanged).
pub(crate) fn naming_the_queue(mut e: BrokerError, queue: &str, vhost: &str) -> BrokerError {
    if let Some(rest) = e.text.strip_prefix("invalid arg '") {
        if let Some(end) = rest.find('\'') {
            let (arg, tail) = rest.split_at(end);
            e.text = format!(
                "invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}'{}",
                &tail[1..]
            );
        }
    }
    e
}

/// Whether declaring `spec` would find `existing` equivalent, with the text
/// `exchange.declare` would give (definitions import checks before applying anything).
///
/// # Errors
/// 406 PRECONDITION_FAILED `inequivalent arg 'X' for exchange …` (RabbitMQ's text); 503
/// for an unknown type.
pub(crate) fn exchange_equivalence(
    existing: &Exchange,
    spec: &ExchangeSpec,
    vhost: &str,
) -> Result<(), BrokerError> {
    let kind = ExchangeKind::parse(&spec.kind)?;
    check_equivalent(
        "exchange",
        &spec.name,
        vhost,
        Some((kind.as_str(), existing.kind.as_str())),
        &[
            ("durable", spec.durable),
            ("auto_delete", spec.auto_delete),
            ("internal", spec.internal),
        ],
        &[
            ("durable", existing.durable),
            ("auto_delete", existing.auto_delete),
            ("internal", existing.internal),
        ],
        (&spec.arguments, &existing.arguments, None),
    )
}

/// As [`exchange_equivalence`] for a queue (`queue.declare`'s rule: durable, auto_delete,
/// exclusive and the arguments with a meaning).
///
/// # Errors
/// 406 `inequivalent arg …`; 405 RESOURCE_LOCKED for an exclusive queue.
pub(crate) fn queue_equivalence(
    existing: &Queue,
    spec: &QueueSpec,
    vhost: &str,
) -> Result<(), BrokerError> {
    if existing.exclusive != spec.exclusive {
        return Err(BrokerError::resource_locked(format!(
            "cannot obtain exclusive access to locked queue '{}' in vhost '{vhost}'",
            spec.name
        )));
    }
    check_equivalent(
        "queue",
        &spec.name,
        vhost,
        None,
        &[("durable", spec.durable), ("auto_delete", spec.auto_delete)],
        &[
            ("durable", existing.durable),
            ("auto_delete", existing.auto_delete),
        ],
        (
            &spec.arguments,
            &existing.arguments,
            Some(&EQUIVALENT_QUEUE_ARGUMENTS),
        ),
    )
}

/// RabbitMQ's vhost limit `max-queues` reached (`--max-queues-per-vhost`), in its wording:
/// 406 PRECONDITION_FAILED naming the queue `name` that would pass it and the limit `max`.
pub(crate) fn queue_limit_reached(name: &str, vhost: &str, max: usize) -> BrokerError {
    BrokerError::precondition(format!(
        "cannot declare queue '{name}': queue limit in vhost '{vhost}' ({max}) is reached"
    ))
}

/// As [`queue_limit_reached`] for exchanges (`--max-exchanges-per-vhost`).
pub(crate) fn exchange_limit_reached(name: &str, vhost: &str, max: usize) -> BrokerError {
    BrokerError::precondition(format!(
        "cannot declare exchange '{name}': exchange limit in vhost '{vhost}' ({max}) is reached"
    ))
}

/// The checks of `exchange.declare` in `vhost` that do not depend on what exists: the name
/// (not the default exchange, at most `name_bytes_max` bytes: `--max-name-bytes`), the
/// type, an `alternate-exchange` argument that is a string (RabbitMQ's checks), and for
/// an `x-consistent-hash` exchange its `hash-header` / `hash-property` (RabbitMQ's plugin,
/// [`HashSource::from_arguments`]), for an `x-delayed-message` exchange its
/// `x-delayed-type` ([`ExchangeKind::delayed_type`], then that type's checks). Returns the
/// type.
///
/// # Errors
/// 403 for the default exchange; 406 for a name too long, a bad `alternate-exchange` or
/// bad consistent-hash arguments; 503 COMMAND_INVALID for an unknown type.
pub(crate) fn check_exchange_spec(
    spec: &ExchangeSpec,
    vhost: &str,
    name_bytes_max: usize,
) -> Result<ExchangeKind, BrokerError> {
    let name = spec.name.as_str();
    if name.is_empty() {
        return Err(default_exchange_refused());
    }
    check_name_bytes("exchange name", name, name_bytes_max)?;
    let kind = ExchangeKind::parse(&spec.kind)?;
    if let Some(ae) = spec.arguments.get("alternate-exchange") {
        if ae.as_str().is_none() {
            return Err(BrokerError::precondition(format!(
                "invalid arg 'alternate-exchange' for exchange '{name}' in vhost '{vhost}': \
                 {} is not a string",
                ae.to_json()
            )));
        }
    }
    let routes_as = if kind == ExchangeKind::DelayedMessage {
        ExchangeKind::delayed_type(&spec.arguments)?
    } else {
        kind
    };
    if routes_as == ExchangeKind::ConsistentHash {
        HashSource::from_arguments(&spec.arguments, name, vhost)?;
    }
    Ok(kind)
}

/// 403 ACCESS_REFUSED for an operation on the default exchange (binding to or from it,
/// declaring it), RabbitMQ's text.
pub(crate) fn default_exchange_refused() -> BrokerError {
    BrokerError::access_refused("operation not permitted on the default exchange")
}

impl VirtualHost {
    /// A vhost holding the default exchange and the standard `amq.*` exchanges; durable
    /// definitions are committed to `durability` when given.
    pub fn new(name: &str, durability: Option<Arc<Durability>>) -> VirtualHost {
        let mut exchanges = HashMap::new();
        let default = Exchange::new(
            Arc::from(""),
            ExchangeKind::Direct,
            true,
            false,
            false,
            FieldTable::new(),
        );
        exchanges.insert(Arc::clone(&default.name), Arc::new(default));
        for (n, kind) in STANDARD_EXCHANGES {
            let e = Exchange::new(Arc::from(n), kind, true, false, false, FieldTable::new());
            exchanges.insert(Arc::clone(&e.name), Arc::new(e));
        }
        VirtualHost {
            name: Arc::from(name),
            exchanges: RwLock::new(exchanges),
            queues: RwLock::new(HashMap::new()),
            deleted: AtomicBool::new(false),
            changes: Mutex::new(()),
            policies: Mutex::new(Vec::new()),
            operator_policies: Mutex::new(Vec::new()),
            parameters: Mutex::default(),
            durability,
            counters: Arc::new(VhostCounters::default()),
            queue_memory_bytes: crate::limits::QUEUE_MEMORY_BYTES_DEFAULT,
            consumer_timeout_ms: crate::limits::CONSUMER_TIMEOUT_MS_DEFAULT,
            limits: Arc::new(LiveLimits::default()),
            own_limits: RwLock::default(),
            metadata: RwLock::default(),
            direct_replies: Arc::default(),
            delay_schedule: Arc::default(),
        }
    }

    /// The vhost's live direct reply-to names (`amq.rabbitmq.reply-to.…`).
    pub fn direct_replies(&self) -> &Arc<ReplyTargets> {
        &self.direct_replies
    }

    /// Counts this vhost's message events also in the broker-wide `global` counters
    /// (default: counters of its own).
    pub fn with_counters(mut self, global: Arc<EventCounters>) -> VirtualHost {
        self.counters = Arc::new(VhostCounters::new(global));
        self
    }

    /// This vhost's message-event counters (confirms, returns, dead-letterings).
    pub fn counters(&self) -> &Arc<VhostCounters> {
        &self.counters
    }

    /// Shares the broker's limits in force (default: [`crate::limits::Limits::default`]).
    pub fn with_limits(mut self, limits: Arc<LiveLimits>) -> VirtualHost {
        self.limits = limits;
        self
    }

    /// Sets the memory budget of the queues declared from now on (`--queue-memory-bytes`).
    pub fn with_queue_memory_bytes(mut self, bytes: usize) -> VirtualHost {
        self.queue_memory_bytes = bytes;
        self
    }

    /// Sets the consumer timeout, in ms, of the queues declared from now on without
    /// `x-consumer-timeout` (`--consumer-timeout-ms`; 0 = never).
    pub fn with_consumer_timeout_ms(mut self, ms: u64) -> VirtualHost {
        self.consumer_timeout_ms = ms;
        self
    }

    /// Shares the broker's delay timer (default: a schedule of its own, which nothing runs
    /// unless a test calls [`DelaySchedule::run_due`]).
    pub fn with_delay_schedule(mut self, schedule: Arc<DelaySchedule>) -> VirtualHost {
        self.delay_schedule = schedule;
        self
    }

    /// The delay timer's schedule this vhost's delayed messages and retries use.
    pub fn delay_schedule(&self) -> &Arc<DelaySchedule> {
        &self.delay_schedule
    }

    /// Gives a new `x-delayed-message` exchange `e` the store of its delayed messages
    /// ([`DelayedMessages::open`]; `fresh`: a new declaration, not a recovery); other
    /// exchanges come back as they are. Without a data directory the messages are held in
    /// memory.
    ///
    /// # Errors
    /// 541 INTERNAL_ERROR when the store cannot be opened.
    pub(crate) fn with_delayed_store(
        &self,
        e: Exchange,
        fresh: bool,
    ) -> Result<Exchange, BrokerError> {
        if e.kind != ExchangeKind::DelayedMessage || e.delayed().is_some() {
            return Ok(e);
        }
        let schedule = Arc::clone(&self.delay_schedule);
        let delayed = match &self.durability {
            Some(d) => DelayedMessages::open(d, &self.name, &e.name, e.durable, fresh, schedule)?,
            None => DelayedMessages::in_memory(&self.name, &e.name, schedule),
        };
        Ok(e.with_delayed(delayed))
    }

    /// As [`VirtualHost::with_delayed_store`] for an import or a recovery, where no client
    /// waits for an error: a store that cannot be opened is logged and the exchange holds
    /// its delayed messages in memory.
    pub(crate) fn with_delayed_store_or_memory(&self, e: Exchange, fresh: bool) -> Exchange {
        if e.kind != ExchangeKind::DelayedMessage || e.delayed().is_some() {
            return e;
        }
        let schedule = Arc::clone(&self.delay_schedule);
        let delayed = match &self.durability {
            Some(d) => DelayedMessages::open(d, &self.name, &e.name, e.durable, fresh, schedule)
                .unwrap_or_else(|err| {
                    log::error!("{}; its delayed messages are held in memory", err.text);
                    DelayedMessages::in_memory(
                        &self.name,
                        &e.name,
                        Arc::clone(&self.delay_schedule),
                    )
                }),
            None => DelayedMessages::in_memory(&self.name, &e.name, schedule),
        };
        e.with_delayed(delayed)
    }

    fn exchanges(&self) -> RwLockReadGuard<'_, HashMap<Arc<str>, Arc<Exchange>>> {
        self.exchanges.read().unwrap_or_else(|e| e.into_inner())
    }

    fn exchanges_mut(&self) -> RwLockWriteGuard<'_, HashMap<Arc<str>, Arc<Exchange>>> {
        let guard = self.exchanges.write().unwrap_or_else(|e| e.into_inner());
        topology::bump();
        guard
    }

    fn queues(&self) -> RwLockReadGuard<'_, HashMap<Arc<str>, Arc<Queue>>> {
        self.queues.read().unwrap_or_else(|e| e.into_inner())
    }

    fn queues_mut(&self) -> RwLockWriteGuard<'_, HashMap<Arc<str>, Arc<Queue>>> {
        let guard = self.queues.write().unwrap_or_else(|e| e.into_inner());
        topology::bump();
        guard
    }

    pub(crate) fn changes(&self) -> MutexGuard<'_, ()> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Commits a definition change to `meta.db` (nothing for an in-memory broker).
    pub(crate) fn persist<R>(
        &self,
        what: &str,
        f: impl FnOnce(&MetaStore) -> Result<R, StorageError>,
    ) -> Result<Option<R>, BrokerError> {
        match &self.durability {
            Some(d) => d.meta(what, f).map(Some),
            None => Ok(None),
        }
    }

    /// Whether bindings to `destination` are stored (a durable, non-exclusive queue or a
    /// durable exchange).
    fn is_stored_destination(&self, destination: &Destination) -> bool {
        match destination {
            Destination::Queue(q) => self.queue(q).is_some_and(|q| q.storage_id.is_some()),
            Destination::Exchange(x) => self.exchange(x).is_some_and(|e| e.durable),
        }
    }

    fn binding_def(
        &self,
        source: &str,
        destination: &Destination,
        key: &str,
        arguments: &FieldTable,
    ) -> BindingDef {
        let (name, is_exchange) = match destination {
            Destination::Queue(q) => (q.to_string(), false),
            Destination::Exchange(x) => (x.to_string(), true),
        };
        BindingDef {
            vhost: self.name.to_string(),
            source: source.to_string(),
            destination: name,
            destination_is_exchange: is_exchange,
            routing_key: key.to_string(),
            arguments: arguments.clone(),
        }
    }

    /// Whether the vhost was deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Relaxed)
    }

    /// Counts of unroutable messages: (dropped, returned).
    pub fn unroutable(&self) -> (u64, u64) {
        let s = self.counters.snapshot();
        (s.unroutable_dropped, s.returned)
    }

    fn no_exchange(&self, name: &str) -> BrokerError {
        BrokerError::not_found(format!("no exchange '{name}' in vhost '{}'", self.name))
    }

    fn no_queue(&self, name: &str) -> BrokerError {
        BrokerError::not_found(format!("no queue '{name}' in vhost '{}'", self.name))
    }

    /// The exchange with `name`.
    pub fn exchange(&self, name: &str) -> Option<Arc<Exchange>> {
        self.exchanges().get(name).cloned()
    }

    /// The queue with `name`.
    pub fn queue(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues().get(name).cloned()
    }

    /// The queue with `name`, checked usable by `connection_id`.
    ///
    /// # Errors
    /// 404 NOT_FOUND when absent; 405 RESOURCE_LOCKED when exclusive to another connection.
    pub fn queue_for(&self, name: &str, connection_id: u64) -> Result<Arc<Queue>, BrokerError> {
        let q = self.queue(name).ok_or_else(|| self.no_queue(name))?;
        q.check_access(connection_id, &self.name)?;
        Ok(q)
    }

    /// Queues in the vhost (what `--max-queues-per-vhost` counts).
    pub fn queue_count(&self) -> usize {
        self.queues().len()
    }

    /// Exchanges declared in the vhost: the default and `amq.*` ones do not count (what
    /// `--max-exchanges-per-vhost` counts).
    pub fn declared_exchange_count(&self) -> usize {
        self.exchanges().len().saturating_sub(BUILTIN_EXCHANGES)
    }

    /// Queues this vhost may hold: `--max-queues-per-vhost`, or its `max-queues` vhost
    /// limit when that is lower.
    pub fn queues_max(&self) -> usize {
        let own = self.limit_in_force(crate::broker::limits::MAX_QUEUES);
        let global = self.limits.queues_per_vhost_max();
        own.map_or(global, |n| {
            global.min(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }

    /// Whether one more queue, `name`, fits under `--max-queues-per-vhost` and the vhost's
    /// `max-queues` limit.
    ///
    /// # Errors
    /// As [`queue_limit_reached`].
    fn check_queue_limit(&self, name: &str) -> Result<(), BrokerError> {
        let max = self.queues_max();
        if self.queue_count() >= max {
            return Err(queue_limit_reached(name, &self.name, max));
        }
        Ok(())
    }

    /// Whether one more exchange, `name`, fits under `--max-exchanges-per-vhost`.
    ///
    /// # Errors
    /// As [`exchange_limit_reached`].
    fn check_exchange_limit(&self, name: &str) -> Result<(), BrokerError> {
        let max = self.limits.exchanges_per_vhost_max();
        if self.declared_exchange_count() >= max {
            return Err(exchange_limit_reached(name, &self.name, max));
        }
        Ok(())
    }

    /// All exchanges.
    pub fn all_exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges().values().cloned().collect()
    }

    /// All queues.
    pub fn all_queues(&self) -> Vec<Arc<Queue>> {
        self.queues().values().cloned().collect()
    }

    /// Declares an exchange (AMQP `exchange.declare`): creates it, or checks an existing
    /// one is equivalent.
    ///
    /// # Errors
    /// 403 for the default exchange (passive too, as RabbitMQ) or a new `amq.` name; 404
    /// passive and absent; 503
    /// COMMAND_INVALID for an unknown type; 406 when an existing exchange differs.
    pub fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<(), BrokerError> {
        let name = spec.name.as_str();
        // Passive or not: RabbitMQ's `check_not_default_exchange` comes first.
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        if spec.passive {
            return match self.exchange(name) {
                Some(_) => Ok(()),
                None => Err(self.no_exchange(name)),
            };
        }
        let kind = check_exchange_spec(spec, &self.name, self.limits.name_bytes_max())?;
        crate::types::field_table::check_nesting(&spec.arguments, "exchange arguments")
            .map_err(BrokerError::precondition)?;
        let _changes = self.changes();
        let existing = self.exchange(name);
        // RabbitMQ checks the reserved prefix only when creating: an equivalent redeclare
        // of `amq.topic` succeeds.
        if names::is_reserved(name) && existing.is_none() {
            return Err(BrokerError::access_refused(format!(
                "exchange name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        if let Some(e) = existing {
            let flags = |durable: bool, auto_delete: bool, internal: bool| {
                [
                    ("durable", durable),
                    ("auto_delete", auto_delete),
                    ("internal", internal),
                ]
            };
            let got = flags(spec.durable, spec.auto_delete, spec.internal);
            let current = flags(e.durable, e.auto_delete, e.internal);
            return check_equivalent(
                "exchange",
                name,
                &self.name,
                Some((kind.as_str(), e.kind.as_str())),
                &got,
                &current,
                (&spec.arguments, &e.arguments, None),
            );
        }
        self.check_exchange_limit(name)?;
        // The delayed messages' store first (files before `meta.db`, as a queue's): a
        // crash before the commit leaves an orphan directory the next start removes.
        let exchange = self.with_delayed_store(
            Exchange::new(
                Arc::from(name),
                kind,
                spec.durable,
                spec.auto_delete,
                spec.internal,
                spec.arguments.clone(),
            ),
            true,
        )?;
        if spec.durable {
            let stored = self.persist("exchange", |m| {
                m.put_exchange(&ExchangeDef {
                    vhost: self.name.to_string(),
                    name: name.to_string(),
                    kind: kind.as_str().to_string(),
                    auto_delete: spec.auto_delete,
                    internal: spec.internal,
                    arguments: spec.arguments.clone(),
                })
            });
            if let Err(e) = stored {
                if let Some(d) = exchange.delayed() {
                    d.destroy();
                }
                return Err(e);
            }
        }
        self.insert_exchange(exchange);
        Ok(())
    }

    /// Adds an exchange to the map (declare, import and recovery).
    pub(crate) fn insert_exchange(&self, e: Exchange) {
        self.exchanges_mut()
            .insert(Arc::clone(&e.name), Arc::new(e));
    }

    /// Deletes an exchange (AMQP `exchange.delete`) and every binding from or to it.
    /// Deleting an absent exchange succeeds, as in RabbitMQ.
    ///
    /// # Errors
    /// 403 for the default exchange and `amq.` exchanges; 406 with `if_unused` when it is
    /// the source of bindings.
    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> Result<(), BrokerError> {
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        if names::is_reserved(name) {
            return Err(BrokerError::access_refused(format!(
                "deletion of system exchange '{name}' in vhost '{}' not allowed",
                self.name
            )));
        }
        let _changes = self.changes();
        let Some(e) = self.exchange(name) else {
            return Ok(());
        };
        if if_unused && !e.router().is_empty() {
            return Err(BrokerError::precondition(format!(
                "exchange '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        self.remove_exchange(&e)
    }

    /// Removes an exchange (the changes lock is held): commits the deletion of a durable
    /// one, then drops it and every binding to it.
    fn remove_exchange(&self, e: &Arc<Exchange>) -> Result<(), BrokerError> {
        if e.durable {
            self.persist("exchange deletion", |m| {
                m.delete_exchange(&self.name, &e.name)
            })?;
        }
        {
            let mut map = self.exchanges_mut();
            match map.get(&*e.name) {
                Some(cur) if Arc::ptr_eq(cur, e) => {
                    map.remove(&*e.name);
                }
                _ => return Ok(()),
            }
        }
        if let Some(d) = e.delayed() {
            d.destroy();
        }
        self.remove_destination(&Destination::Exchange(Arc::clone(&e.name)));
        Ok(())
    }

    /// Removes every binding to `dest`; auto-delete exchanges left without bindings are
    /// deleted in turn (RabbitMQ semantics).
    fn remove_destination(&self, dest: &Destination) {
        let mut emptied = Vec::new();
        for e in self.all_exchanges() {
            let mut router = e.router_mut();
            if router.remove_destination(dest) > 0 && e.auto_delete && router.is_empty() {
                emptied.push(Arc::clone(&e));
            }
        }
        for e in emptied {
            // A cascade has no client to answer; the failure is logged by `persist`.
            let _ = self.remove_exchange(&e);
        }
    }

    /// Binds `destination` to exchange `source` (AMQP `queue.bind`, RabbitMQ
    /// `exchange.bind`). Binding twice is a no-op.
    ///
    /// # Errors
    /// 403 when either end is the default exchange; 404 when either end is absent; 405
    /// for another connection's exclusive queue; 406 for invalid headers arguments.
    pub fn bind(
        &self,
        source: &str,
        destination: &Destination,
        key: &str,
        arguments: &FieldTable,
        connection_id: u64,
    ) -> Result<(), BrokerError> {
        let _changes = self.changes();
        let src = self.check_binding_ends(source, destination, connection_id)?;
        crate::types::field_table::check_nesting(arguments, "binding arguments")
            .map_err(BrokerError::precondition)?;
        src.router().validate(key, arguments)?;
        if src.durable && self.is_stored_destination(destination) {
            let def = self.binding_def(source, destination, key, arguments);
            self.persist("binding", |m| m.put_binding(&def))?;
        }
        src.router_mut().add(Binding {
            destination: destination.clone(),
            binding_key: key.to_string(),
            arguments: arguments.clone(),
        });
        Ok(())
    }

    /// Removes a binding (AMQP `queue.unbind`, RabbitMQ `exchange.unbind`). Removing a
    /// binding that does not exist succeeds, as in RabbitMQ, and so does naming a source
    /// or destination that does not exist. An auto-delete source left without bindings is
    /// deleted.
    ///
    /// # Errors
    /// 403 when either end is the default exchange; 405 when the binding exists and its
    /// queue is exclusive to another connection; a `meta.db` failure.
    pub fn unbind(
        &self,
        source: &str,
        destination: &Destination,
        key: &str,
        arguments: &FieldTable,
        connection_id: u64,
    ) -> Result<(), BrokerError> {
        let _changes = self.changes();
        if source.is_empty() || matches!(destination, Destination::Exchange(x) if x.is_empty()) {
            return Err(default_exchange_refused());
        }
        // Unbinding is idempotent, as in RabbitMQ (`rabbit_db_binding:delete`): a missing
        // source or destination, or a binding that does not exist, is success, and only a
        // binding that exists is checked against the queue's exclusivity.
        let Some(src) = self.exchange(source) else {
            return Ok(());
        };
        let queue = match destination {
            Destination::Queue(q) => match self.queue(q) {
                Some(q) => Some(q),
                None => return Ok(()),
            },
            Destination::Exchange(x) => match self.exchange(x) {
                Some(_) => None,
                None => return Ok(()),
            },
        };
        let binding = Binding {
            destination: destination.clone(),
            binding_key: key.to_string(),
            arguments: arguments.clone(),
        };
        if !src.router().contains(&binding) {
            return Ok(());
        }
        if let Some(q) = queue {
            q.check_access(connection_id, &self.name)?;
        }
        if src.durable && self.is_stored_destination(destination) {
            let def = self.binding_def(source, destination, key, arguments);
            self.persist("binding deletion", |m| m.delete_binding(&def))?;
        }
        let emptied = {
            let mut router = src.router_mut();
            let removed = router.remove(&binding);
            removed && src.auto_delete && router.is_empty()
        };
        if emptied {
            self.remove_exchange(&src)?;
        }
        Ok(())
    }

    fn check_binding_ends(
        &self,
        source: &str,
        destination: &Destination,
        connection_id: u64,
    ) -> Result<Arc<Exchange>, BrokerError> {
        if source.is_empty() {
            return Err(default_exchange_refused());
        }
        match destination {
            Destination::Queue(q) => {
                self.queue_for(q, connection_id)?;
            }
            Destination::Exchange(x) => {
                if x.is_empty() {
                    return Err(default_exchange_refused());
                }
                if self.exchange(x).is_none() {
                    return Err(self.no_exchange(x));
                }
            }
        }
        self.exchange(source)
            .ok_or_else(|| self.no_exchange(source))
    }

    /// Declares a queue (AMQP `queue.declare`) for connection `connection_id`.
    ///
    /// # Errors
    /// 404 passive and absent; 403 for a new `amq.` name; 405 when exclusive to another
    /// connection; 406 when an existing queue differs.
    pub fn declare_queue(
        &self,
        spec: &QueueSpec,
        connection_id: u64,
    ) -> Result<QueueDeclared, BrokerError> {
        self.declare_queue_as(spec, None, connection_id)
    }

    /// [`VirtualHost::declare_queue`] with the server-generated name chosen by the caller
    /// (used when `spec.name` is empty, so permissions can be checked on it first).
    ///
    /// # Errors
    /// As [`VirtualHost::declare_queue`].
    pub fn declare_queue_as(
        &self,
        spec: &QueueSpec,
        generated: Option<String>,
        connection_id: u64,
    ) -> Result<QueueDeclared, BrokerError> {
        // A declaration, passive or not, is a use: it renews an `x-expires` lease
        // (RabbitMQ).
        self.counters.queue_churn(QueueChurn::Declared);
        let declared = |q: &Queue| QueueDeclared {
            name: {
                q.touch();
                q.name.to_string()
            },
            message_count: q.message_count() as u32,
            consumer_count: q.consumer_count() as u32,
        };
        if spec.passive {
            let q = self.queue_for(&spec.name, connection_id)?;
            return Ok(declared(&q));
        }
        crate::types::field_table::check_nesting(&spec.arguments, "queue arguments")
            .map_err(BrokerError::precondition)?;
        let with_default = self.with_default_queue_type(spec);
        let spec = with_default.as_ref().unwrap_or(spec);
        let queue_type = check_queue_arguments(&spec.arguments)
            .map_err(|e| naming_the_queue(e, &spec.name, &self.name))?;
        let properties = DeclaredProperties {
            durable: spec.durable,
            exclusive: spec.exclusive,
            auto_delete: spec.auto_delete,
            generated: spec.name.is_empty(),
        };
        queue_type.check_declaration(&spec.name, &self.name, properties, &spec.arguments)?;
        check_name_bytes("queue name", &spec.name, self.limits.name_bytes_max())?;
        let name = if spec.name.is_empty() {
            generated.unwrap_or_else(|| names::generate("amq.gen-"))
        } else if names::is_reserved(&spec.name) {
            return Err(BrokerError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                spec.name
            )));
        } else {
            spec.name.clone()
        };
        let _changes = self.changes();
        if let Some(q) = self.queue(&name) {
            q.check_access(connection_id, &self.name)?;
            if q.exclusive != spec.exclusive {
                // RabbitMQ answers an exclusivity mismatch as a locked resource.
                return Err(BrokerError::resource_locked(format!(
                    "cannot obtain exclusive access to locked queue '{name}' in vhost '{}'. It \
                     could be originally declared on another connection or the exclusive \
                     property value does not match that of the original declaration.",
                    self.name
                )));
            }
            check_equivalent(
                "queue",
                &name,
                &self.name,
                None,
                &[("durable", spec.durable), ("auto_delete", spec.auto_delete)],
                &[("durable", q.durable), ("auto_delete", q.auto_delete)],
                (
                    &spec.arguments,
                    &q.arguments,
                    Some(&EQUIVALENT_QUEUE_ARGUMENTS),
                ),
            )?;
            return Ok(declared(&q));
        }
        // Only new queues count.
        self.check_queue_limit(&name)?;
        let owner = spec.exclusive.then_some(connection_id);
        // Exclusive queues die with their connection, so they are never stored (RabbitMQ
        // deletes them at recovery anyway).
        let stored = match (&self.durability, spec.durable && !spec.exclusive) {
            (Some(d), true) => {
                // Files first (`QueueStorage::create`), then the commit.
                let (id, storage) = QueueStorage::create(d, &name)?;
                let committed = self.persist("queue", |m| {
                    m.put_queue(&QueueDef {
                        vhost: self.name.to_string(),
                        name: name.clone(),
                        id: id.clone(),
                        auto_delete: spec.auto_delete,
                        arguments: spec.arguments.clone(),
                        paused: false,
                    })
                });
                if let Err(e) = committed {
                    storage.discard(d, &id);
                    return Err(e);
                }
                Some((id, storage))
            }
            _ => None,
        };
        let q = self.new_queue(&name, spec, owner, stored);
        // Under the changes lock, so a policy set meanwhile is either seen here or
        // re-evaluates this queue after it is in the map.
        self.apply_policies(&q);
        self.insert_queue(q);
        self.counters.queue_churn(QueueChurn::Created);
        Ok(QueueDeclared {
            name,
            message_count: 0,
            consumer_count: 0,
        })
    }

    /// `spec` with `x-queue-type` set to the vhost's `default_queue_type` when it names
    /// none and the default is not `classic`, if the declaration suits that type (durable,
    /// not exclusive, not auto-delete); `None` when `spec` stays as it is (RabbitMQ 4.x
    /// `rabbit_amqqueue:augment_declare_args`: an unsuitable declaration gets the fallback
    /// type, classic). Classic declarations are left without the argument, as RabbitMQ 3.x
    /// leaves them.
    fn with_default_queue_type(&self, spec: &QueueSpec) -> Option<QueueSpec> {
        let named = spec
            .arguments
            .get("x-queue-type")
            .is_some_and(|v| !matches!(v.as_str(), Some("" | "undefined")));
        if named {
            return None;
        }
        let default = self.metadata().default_queue_type;
        let suits = spec.durable && !spec.exclusive && !spec.auto_delete;
        let kind = if default == "quorum" && suits {
            "quorum"
        } else if spec.arguments.contains_key("x-queue-type") {
            // `""` or `"undefined"`: the fallback.
            "classic"
        } else {
            return None;
        };
        let mut with = spec.clone();
        with.arguments
            .insert("x-queue-type".into(), FieldValue::string(kind));
        Some(with)
    }

    /// Adds a binding without committing it (a stored binding at recovery; an imported one,
    /// committed with the rest of the import); false when an end is missing.
    pub(crate) fn restore_binding(
        &self,
        source: &str,
        destination: Destination,
        key: String,
        arguments: FieldTable,
    ) -> bool {
        let ends = match &destination {
            Destination::Queue(q) => self.queue(q).is_some(),
            Destination::Exchange(x) => self.exchange(x).is_some(),
        };
        match (self.exchange(source), ends) {
            (Some(src), true) => {
                src.router_mut().add(Binding {
                    destination,
                    binding_key: key,
                    arguments,
                });
                true
            }
            _ => false,
        }
    }

    /// A queue of this vhost as `spec` declares it (named `name`), not yet in the map:
    /// the vhost's memory budget and consumer timeout, `stored` its store and the store's
    /// id when it is a stored queue. Callers give it its policy ([`VirtualHost::apply_policies`])
    /// and insert it ([`VirtualHost::insert_queue`]) under the changes lock.
    pub(crate) fn new_queue(
        &self,
        name: &str,
        spec: &QueueSpec,
        owner: Option<u64>,
        stored: Option<(String, QueueStorage)>,
    ) -> Queue {
        let mut q = Queue::new(
            Arc::from(name),
            spec.durable,
            spec.exclusive,
            spec.auto_delete,
            owner,
            spec.arguments.clone(),
        );
        q.memory_bytes_max = self.queue_memory_bytes;
        q.resolve_consumer_timeout(self.consumer_timeout_ms);
        if let Some((id, storage)) = stored {
            q.storage_id = Some(id);
            q.storage = Some(storage);
        }
        q
    }

    /// Adds a queue to the map (declare, import and recovery).
    pub(crate) fn insert_queue(&self, mut q: Queue) {
        q.delay_schedule = Some(Arc::clone(&self.delay_schedule));
        self.queues_mut().insert(Arc::clone(&q.name), Arc::new(q));
    }

    /// Deletes a queue (AMQP `queue.delete`); returns the count of ready messages it held.
    /// Its consumers are cancelled with a notification; deleting an absent queue returns 0,
    /// as in RabbitMQ.
    ///
    /// # Errors
    /// 405 for another connection's exclusive queue; 406 with `if_unused` when it has
    /// consumers, with `if_empty` when it has ready messages; 540 NOT_IMPLEMENTED for
    /// either flag on a quorum queue (RabbitMQ 4.x `rabbit_quorum_queue:delete/4`).
    pub fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection_id: u64,
    ) -> Result<u32, BrokerError> {
        let _changes = self.changes();
        let Some(q) = self.queue(name) else {
            return Ok(0);
        };
        q.check_access(connection_id, &self.name)?;
        if q.queue_type == QueueType::Quorum && (if_unused || if_empty) {
            return Err(QueueType::conditional_delete_refused(
                name, &self.name, if_unused,
            ));
        }
        if if_unused && q.consumer_count() > 0 {
            return Err(BrokerError::precondition(format!(
                "queue '{name}' in vhost '{}' in use",
                self.name
            )));
        }
        if if_empty && q.message_count() > 0 {
            return Err(BrokerError::precondition(format!(
                "queue '{name}' in vhost '{}' is not empty",
                self.name
            )));
        }
        self.remove_queue_locked(&q, true).map(|n| n as u32)
    }

    /// Removes a queue (auto-delete, owner gone): see [`VirtualHost::delete_queue`]. A
    /// failure to commit the deletion is logged and the queue stays.
    pub fn remove_queue(&self, q: &Arc<Queue>) -> usize {
        let _changes = self.changes();
        self.remove_queue_locked(q, true).unwrap_or(0)
    }

    /// Deletes `q` if it is still this vhost's queue of that name and still unused for
    /// its `x-expires` at `now_ms` (checked again under the changes lock, so a redeclare
    /// that raced with the housekeeper wins). Returns whether it was deleted.
    pub fn expire_queue(&self, q: &Arc<Queue>, now_ms: u64) -> bool {
        let _changes = self.changes();
        let current = self.queue(&q.name).is_some_and(|cur| Arc::ptr_eq(&cur, q));
        if !current || !q.is_expired(now_ms) {
            return false;
        }
        match self.remove_queue_locked(q, true) {
            Ok(_) => true,
            Err(e) => {
                log::warn!("queue '{}' expired but stays: {}", q.name, e.text);
                false
            }
        }
    }

    /// Removes a queue (the changes lock is held): commits the deletion of a stored one
    /// (when `commit`), drops it from the map and every exchange's bindings, cancels its
    /// consumers, then removes its files. Returns the ready messages dropped with it.
    fn remove_queue_locked(&self, q: &Arc<Queue>, commit: bool) -> Result<usize, BrokerError> {
        if let (Some(_), true) = (&q.storage_id, commit) {
            self.persist("queue deletion", |m| m.delete_queue(&self.name, &q.name))?;
        }
        {
            let mut map = self.queues_mut();
            match map.get(&*q.name) {
                Some(cur) if Arc::ptr_eq(cur, q) => {
                    map.remove(&*q.name);
                }
                _ => return Ok(0),
            }
        }
        self.remove_destination(&Destination::Queue(Arc::clone(&q.name)));
        self.counters.queue_churn(QueueChurn::Deleted);
        let (count, consumers) = q.mark_deleted();
        notify_cancelled(&consumers, CancelReason::QueueDeleted);
        if let (Some(id), Some(d)) = (&q.storage_id, &self.durability) {
            d.remove_queue_dir(id);
        }
        Ok(count)
    }

    /// Deletes the exclusive queues owned by a closing connection.
    pub fn remove_exclusive_queues(&self, connection_id: u64) {
        let owned: Vec<Arc<Queue>> = self
            .queues()
            .values()
            .filter(|q| q.owner == Some(connection_id))
            .cloned()
            .collect();
        let _changes = self.changes();
        for q in owned {
            let _ = self.remove_queue_locked(&q, true);
        }
    }

    /// Deletes everything (the vhost is being deleted and its definitions were already
    /// removed from `meta.db`): consumers are cancelled, queue files removed.
    pub fn remove_all(&self) {
        let _changes = self.changes();
        self.deleted.store(true, Ordering::Relaxed);
        for q in self.all_queues() {
            let _ = self.remove_queue_locked(&q, false);
        }
        for e in self.exchanges_mut().drain() {
            if let Some(d) = e.1.delayed() {
                d.destroy();
            }
        }
    }

    /// The queues a message published to `exchange` reaches, following exchange-to-exchange
    /// bindings (each exchange visited once, so binding cycles terminate) and enqueueing
    /// each queue once however many bindings lead to it. Every routing key of the message
    /// is routed: its own and those of its `CC`/`BCC` headers (RabbitMQ's sender-selected
    /// distribution, [`crate::broker::exchange::header_routes`]).
    pub fn route(&self, exchange: &Exchange, msg: &Message) -> Vec<Arc<Queue>> {
        self.route_keyed(exchange, msg).0
    }

    /// As [`VirtualHost::route`], also telling whether the result depends on the exchange
    /// and routing key alone (no headers exchange on the way, nor a consistent-hash one
    /// hashing a header or property, no `CC`/`BCC` header), so it may be cached
    /// (`topology::RouteCache`).
    pub fn route_keyed(&self, exchange: &Exchange, msg: &Message) -> (Vec<Arc<Queue>>, bool) {
        let mut names: Vec<Arc<str>> = Vec::new();
        let keyed_message = msg.header_routes().is_none();
        if exchange.is_default() {
            let map = self.queues();
            let mut queues: Vec<Arc<Queue>> = msg
                .routing_keys()
                .filter_map(|k| map.get(k).cloned())
                .collect();
            if !keyed_message {
                queues.sort_unstable_by(|a, b| a.name.cmp(&b.name));
                queues.dedup_by(|a, b| Arc::ptr_eq(a, b));
            }
            return (queues, keyed_message);
        }
        let mut dests = Vec::new();
        let on_key_alone = route_all_keys(exchange, msg, &mut dests);
        let mut keyed = keyed_message && on_key_alone;
        // An exchange whose bindings match nothing hands the message to its alternate
        // exchange (RabbitMQ's `alternate-exchange` argument).
        if dests.is_empty() {
            if let Some(ae) = exchange.alternate_exchange() {
                dests.push(Destination::Exchange(Arc::from(ae)));
            }
        }
        let mut visited: Option<HashSet<Arc<str>>> = None;
        while let Some(d) = dests.pop() {
            match d {
                Destination::Queue(q) => names.push(q),
                Destination::Exchange(x) => {
                    let seen = visited.get_or_insert_with(|| {
                        let mut s = HashSet::new();
                        s.insert(Arc::clone(&exchange.name));
                        s
                    });
                    if !seen.insert(Arc::clone(&x)) {
                        continue;
                    }
                    if let Some(next) = self.exchange(&x) {
                        let before = dests.len();
                        keyed &= route_all_keys(&next, msg, &mut dests);
                        if dests.len() == before {
                            if let Some(ae) = next.alternate_exchange() {
                                dests.push(Destination::Exchange(Arc::from(ae)));
                            }
                        }
                    }
                }
            }
        }
        if names.len() > 1 {
            names.sort_unstable();
            names.dedup();
        }
        let map = self.queues();
        let queues = names.iter().filter_map(|n| map.get(n).cloned()).collect();
        (queues, keyed)
    }

    /// Rows describing every binding (source, destination, key, arguments).
    pub fn all_bindings(&self) -> Vec<(Arc<str>, Binding)> {
        let mut out = Vec::new();
        for e in self.all_exchanges() {
            for b in e.router().bindings() {
                out.push((Arc::clone(&e.name), b));
            }
        }
        out
    }

    /// Records an unroutable message.
    pub fn count_unroutable(&self, returned: bool) {
        self.counters.unroutable(returned);
    }

    /// The exchange to publish to, checked publishable.
    ///
    /// # Errors
    /// 404 when absent; 403 when internal.
    pub fn exchange_for_publish(&self, name: &str) -> Result<Arc<Exchange>, BrokerError> {
        let e = self.exchange(name).ok_or_else(|| self.no_exchange(name))?;
        if e.internal {
            return Err(BrokerError::new(
                ReplyCode::AccessRefused,
                format!(
                    "cannot publish to internal exchange '{name}' in vhost '{}'",
                    self.name
                ),
            ));
        }
        Ok(e)
    }
}

/// Appends what `exchange`'s bindings match for every routing key of `msg` (once for a
/// fanout, headers or consistent-hash exchange: `Router::routes_once`); returns whether
/// that depends on the routing key alone (`Router::routes_on_key_alone`).
fn route_all_keys(exchange: &Exchange, msg: &Message, out: &mut Vec<Destination>) -> bool {
    let router = exchange.router();
    if router.routes_once() {
        router.route(msg.routing_key(), msg.properties(), out);
    } else {
        for key in msg.routing_keys() {
            router.route(key, msg.properties(), out);
        }
    }
    router.routes_on_key_alone()
}

/// Tells each consumer's client that the server cancelled it, for `reason`.
pub fn notify_cancelled(consumers: &[Arc<Consumer>], reason: CancelReason) {
    for c in consumers {
        // A closing channel's consumers are gone with it; its number may even be reused.
        if !c.channel.is_closed() {
            c.channel.sink.cancel(&c.channel, &c.tag, reason);
        }
    }
}
