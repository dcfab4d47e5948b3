//! The broker: all virtual hosts, the connection registry, configuration and
//! authentication (logins, users and permissions: `access.rs`).

use crate::alarm::{AlarmConfig, ResourceAlarms};
use crate::auth::{LoginThrottle, UserRegistry};
use crate::broker::channel::timeout::ChannelRegistry;
use crate::broker::delayed::schedule::DelaySchedule;
use crate::broker::exchange::Exchange;
use crate::broker::exchange::{Destination, ExchangeKind};
use crate::broker::policy::{Policy, PolicyDef};
use crate::broker::queue::storage::QueueStorage;
use crate::broker::queue::Queue;
use crate::broker::sink::ClientSink;
use crate::broker::vhost::VirtualHost;
use crate::error::{BrokerError, ReplyCode};
use crate::limits::{
    FdBudget, Limits, LiveLimits, CONSUMER_TIMEOUT_MS_DEFAULT, QUEUE_MEMORY_BYTES_DEFAULT,
};
use crate::metrics::EventCounters;
use crate::storage::durability::Durability;
use crate::storage::meta::Definitions;
use crate::storage::queue_store::Recovered;
use crate::storage::QueueStore;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

pub use crate::types::DEFAULT_VHOST;

/// Broker settings fixed at start-up.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The limits the broker starts with (`--max-…` flags; [`Broker::limits`] holds the
    /// values in force).
    pub limits: Limits,
    /// Name of the user created at the first start (an administrator with full access to
    /// `/`); after that, users live in `meta.db`.
    pub default_user: String,
    /// Password of the user created at the first start.
    pub default_pass: String,
    /// Users that may only log in from a loopback address (RabbitMQ's `loopback_users`,
    /// default `guest`).
    pub loopback_users: Vec<String>,
    /// Loopback peer addresses treated as remote by the loopback-only rule (empty by
    /// default; tests use a second loopback address to stand for a remote client).
    pub nonlocal_peers: Vec<std::net::IpAddr>,
    /// Body bytes of ready messages one queue keeps in memory; beyond them, persistent
    /// messages of durable queues are paged out to their store (`--queue-memory-bytes`).
    pub queue_memory_bytes: usize,
    /// Time a delivery may stay unacked before its consumer is cancelled and it is
    /// requeued, in ms, for queues without `x-consumer-timeout` (`--consumer-timeout-ms`;
    /// 0 = never; docs/lifecycle.md, "Consumer timeout").
    pub consumer_timeout_ms: u64,
    /// Resource alarm watermarks (`--memory-high-watermark`, `--disk-free-limit`).
    pub alarms: AlarmConfig,
    /// How the process's file descriptors are shared (set by the server at start from
    /// `RLIMIT_NOFILE`; `None`: no budget, as in tests of the core). Its `sockets` part
    /// caps [`LiveLimits::connections_max`].
    pub fd_budget: Option<FdBudget>,
}

impl Default for BrokerConfig {
    fn default() -> BrokerConfig {
        BrokerConfig {
            limits: Limits::default(),
            default_user: "guest".into(),
            default_pass: "guest".into(),
            loopback_users: vec!["guest".into()],
            nonlocal_peers: Vec::new(),
            queue_memory_bytes: QUEUE_MEMORY_BYTES_DEFAULT,
            consumer_timeout_ms: CONSUMER_TIMEOUT_MS_DEFAULT,
            alarms: AlarmConfig::default(),
            fd_budget: None,
        }
    }
}

/// `protocol` of an AMQP 0-9-1 connection, as RabbitMQ writes it.
pub const PROTOCOL_AMQP: &str = "AMQP 0-9-1";

/// `protocol` of a connection over RelayMQ's native protocol (docs/protocol.md).
pub const PROTOCOL_NATIVE: &str = "RelayMQ native";

/// Bytes and socket reads/writes of one connection, counted by the I/O thread (one
/// relaxed add per read or write call, not per message): RabbitMQ's connection
/// `recv_oct`, `recv_cnt`, `send_oct` and `send_cnt`. TLS connections count the bytes on
/// the wire (records), as RabbitMQ does.
#[derive(Debug, Default)]
pub struct ConnTraffic {
    /// Bytes received.
    pub recv_oct: AtomicU64,
    /// Reads that received bytes.
    pub recv_cnt: AtomicU64,
    /// Bytes sent.
    pub send_oct: AtomicU64,
    /// Writes that sent bytes.
    pub send_cnt: AtomicU64,
}

impl ConnTraffic {
    /// `n` bytes were read in one call.
    pub fn received(&self, n: usize) {
        self.recv_oct.fetch_add(n as u64, Ordering::Relaxed);
        self.recv_cnt.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` bytes were written in one call.
    pub fn sent(&self, n: usize) {
        self.send_oct.fetch_add(n as u64, Ordering::Relaxed);
        self.send_cnt.fetch_add(1, Ordering::Relaxed);
    }

    /// `[recv_oct, recv_cnt, send_oct, send_cnt]` now.
    pub fn read(&self) -> [u64; 4] {
        [
            self.recv_oct.load(Ordering::Relaxed),
            self.recv_cnt.load(Ordering::Relaxed),
            self.send_oct.load(Ordering::Relaxed),
            self.send_cnt.load(Ordering::Relaxed),
        ]
    }
}

/// What the registry knows of one connection.
#[derive(Clone)]
pub struct ConnectionInfo {
    /// Server-assigned id.
    pub id: u64,
    /// The protocol it speaks: [`PROTOCOL_AMQP`] or [`PROTOCOL_NATIVE`] (RabbitMQ's
    /// `protocol` field of `list_connections`).
    pub protocol: &'static str,
    /// Client address.
    pub peer: SocketAddr,
    /// Server address the client connected to.
    pub local: SocketAddr,
    /// Negotiated frame size, bytes.
    pub frame_max: u32,
    /// Negotiated heartbeat interval, seconds.
    pub heartbeat_s: u16,
    /// Authenticated user.
    pub user: String,
    /// Vhost in use.
    pub vhost: String,
    /// Name the client gave.
    pub client_name: String,
    /// Wall-clock connect time.
    pub connected_at: SystemTime,
    /// Open channels (updated by the session).
    pub channels: Arc<AtomicUsize>,
    /// Negotiated highest channel number.
    pub channel_max: u16,
    /// The client's `connection.start-ok` properties (AMQP 0-9-1; empty for the native
    /// protocol, whose clients only give a name).
    pub client_properties: Arc<crate::types::FieldTable>,
    /// Bytes in and out (counted by the I/O thread).
    pub traffic: Arc<ConnTraffic>,
    /// The connection's outbound side (used to force-close it).
    pub sink: Arc<dyn ClientSink>,
}

/// What recovery restored from the queues' stores, for the start-up report (one
/// summary line rather than one per queue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveredMessages {
    /// Persistent messages restored, over every durable queue.
    pub messages: u64,
    /// Durable queues that held at least one of them.
    pub queues: u64,
    /// Durable queues whose `queue_stat` hint was missing, unreadable or stale (normal
    /// after a crash) and was recounted from the segments; each is a debug line, the count
    /// goes in the summary.
    pub stats_rebuilt: u64,
    /// Other housekeeping notes logged at debug (e.g. a fully settled sealed segment
    /// deleted), counted for the summary.
    pub other_notes: u64,
}

/// What a deleted vhost took with it, for the log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VhostDeleted {
    /// Queues deleted with it.
    pub queues: usize,
    /// Their messages (ready and unacknowledged) at the deletion.
    pub messages: usize,
    /// Its open connections, closed with 320 CONNECTION_FORCED.
    pub connections: usize,
}

/// The whole broker state. Shared as `Arc<Broker>` by every worker.
pub struct Broker {
    /// Settings.
    pub config: BrokerConfig,
    /// The data directory's storage; `None` for an in-memory broker (tests).
    durability: Option<Arc<Durability>>,
    vhosts: RwLock<HashMap<String, Arc<VirtualHost>>>,
    connections: Mutex<HashMap<u64, ConnectionInfo>>,
    /// Registered connections per user name, for `connections_per_user_max`; taken only
    /// while `connections` is held (a leaf lock).
    user_connections: Mutex<HashMap<String, usize>>,
    /// The limits in force, shared with every vhost.
    limits: Arc<LiveLimits>,
    /// Serializes changes of user limits (read, merge, store, apply); a leaf lock taken
    /// before the store's.
    user_limits_changes: Mutex<()>,
    /// Open channels, for the consumer timeout.
    channels: ChannelRegistry,
    next_connection_id: AtomicU64,
    started: Instant,
    /// Users and permissions.
    pub(crate) users: UserRegistry,
    /// Failed logins per source address and user.
    pub(crate) login_throttle: LoginThrottle,
    /// The password-checking thread, once started.
    pub(crate) login_checker:
        std::sync::OnceLock<crate::broker::access::login_checker::LoginChecker>,
    /// Resource alarm state (read by the I/O thread on every publish).
    alarms: Arc<ResourceAlarms>,
    /// Broker-wide message-event counters (every vhost's events also count here).
    counters: Arc<EventCounters>,
    /// Connections registered since start (metrics).
    connections_opened: AtomicU64,
    /// Registered connections closed since start (metrics).
    connections_closed: AtomicU64,
    /// Message rates of the queues, sampled by the housekeeper.
    rates: crate::broker::rates::Rates,
    /// What [`Broker::open`] restored (zero for an in-memory broker).
    recovered: RecoveredMessages,
    /// Client sockets open now, handshaking ones included (kept by the I/O thread).
    sockets_open: AtomicUsize,
    /// Global runtime parameters (`cluster_name`, ...) by name
    /// (`crate::broker::parameters`); a leaf lock, held across their store.
    pub(crate) global_parameters: Mutex<std::collections::BTreeMap<String, serde_json::Value>>,
    /// Due times of delayed messages and delayed retries, shared with every vhost (the
    /// `relaymq-delay` thread runs it: [`crate::broker::delayed::schedule::DelayTimer`]).
    delay_schedule: Arc<DelaySchedule>,
    /// What runs shovels and federation links, once the server registered it
    /// (`crate::broker::links`).
    pub(crate) links: std::sync::OnceLock<Arc<dyn crate::broker::links::LinkRuntime>>,
}

impl Broker {
    /// An in-memory broker with the default vhost `/` (nothing is stored).
    pub fn new(config: BrokerConfig) -> Broker {
        let limits = Arc::new(LiveLimits::new(config.limits));
        if let Some(b) = config.fd_budget {
            limits.set_sockets_budget(b.sockets);
        }
        let counters = Arc::new(EventCounters::default());
        let delay_schedule = Arc::new(DelaySchedule::new());
        let mut vhosts = HashMap::new();
        vhosts.insert(
            DEFAULT_VHOST.to_string(),
            Arc::new(
                VirtualHost::new(DEFAULT_VHOST, None)
                    .with_queue_memory_bytes(config.queue_memory_bytes)
                    .with_consumer_timeout_ms(config.consumer_timeout_ms)
                    .with_limits(Arc::clone(&limits))
                    .with_counters(Arc::clone(&counters))
                    .with_delay_schedule(Arc::clone(&delay_schedule)),
            ),
        );
        Broker {
            durability: None,
            vhosts: RwLock::new(vhosts),
            connections: Mutex::new(HashMap::new()),
            user_connections: Mutex::new(HashMap::new()),
            limits,
            user_limits_changes: Mutex::new(()),
            channels: ChannelRegistry::default(),
            next_connection_id: AtomicU64::new(1),
            started: Instant::now(),
            users: UserRegistry::default(),
            login_throttle: LoginThrottle::default(),
            login_checker: std::sync::OnceLock::new(),
            alarms: Arc::new(ResourceAlarms::new(config.alarms)),
            counters,
            connections_opened: AtomicU64::new(0),
            connections_closed: AtomicU64::new(0),
            rates: crate::broker::rates::Rates::default(),
            recovered: RecoveredMessages::default(),
            sockets_open: AtomicUsize::new(0),
            global_parameters: Mutex::default(),
            delay_schedule,
            links: std::sync::OnceLock::new(),
            config,
        }
    }

    /// The schedule of delayed messages and delayed retries (run by the `relaymq-delay`
    /// thread).
    pub fn delay_schedule(&self) -> &Arc<DelaySchedule> {
        &self.delay_schedule
    }

    /// The persistent messages recovery restored and how many queues held them.
    pub fn recovered_messages(&self) -> RecoveredMessages {
        self.recovered
    }

    /// Message rates of the queues (`list queues`, `list vhosts`).
    pub fn rates(&self) -> &crate::broker::rates::Rates {
        &self.rates
    }

    /// The group-commit flusher, when the broker has durable storage.
    pub fn flusher(&self) -> Option<&crate::storage::flusher::Flusher> {
        self.durability.as_ref().map(|d| d.flusher().as_ref())
    }

    /// A broker over opened storage, rebuilt from its stored definitions (recovery steps
    /// 2–3 in docs/architecture.md): vhosts, then durable exchanges, then durable queues,
    /// then bindings whose ends both exist.
    pub fn open(
        config: BrokerConfig,
        durability: Arc<Durability>,
        definitions: Definitions,
    ) -> Broker {
        let limits = Arc::new(LiveLimits::new(config.limits));
        if let Some(b) = config.fd_budget {
            limits.set_sockets_budget(b.sockets);
        }
        let counters = Arc::new(EventCounters::default());
        let delay_schedule = Arc::new(DelaySchedule::new());
        let mut recovered = RecoveredMessages::default();
        let mut vhosts = HashMap::new();
        for name in &definitions.vhosts {
            vhosts.insert(
                name.clone(),
                Arc::new(
                    VirtualHost::new(name, Some(Arc::clone(&durability)))
                        .with_queue_memory_bytes(config.queue_memory_bytes)
                        .with_consumer_timeout_ms(config.consumer_timeout_ms)
                        .with_limits(Arc::clone(&limits))
                        .with_counters(Arc::clone(&counters))
                        .with_delay_schedule(Arc::clone(&delay_schedule)),
                ),
            );
        }
        for row in &definitions.vhost_limits {
            if let Some(vh) = vhosts.get(&row.owner) {
                let mut limits = vh.own_limits();
                limits.insert(row.name.clone(), row.value);
                vh.put_own_limits(limits);
            }
        }
        for row in &definitions.vhost_metadata {
            if let Some(vh) = vhosts.get(&row.vhost) {
                vh.put_metadata(crate::broker::limits::VhostMetadata::from_row(row));
            }
        }
        // Policies before queues: a recovered queue gets its effective settings (a TTL
        // from a policy included) before its messages are restored.
        for row in &definitions.policies {
            let Some(vh) = vhosts.get(&row.vhost) else {
                continue;
            };
            match PolicyDef::from_row(row)
                .map_err(|e| e.to_string())
                .and_then(|d| Policy::compile(d).map_err(|e| e.text))
            {
                Ok(p) => vh.restore_policy(p),
                Err(why) => log::error!(
                    "policy '{}' in vhost '{}' not recovered: {why}",
                    row.name,
                    row.vhost
                ),
            }
        }
        // Operator policies and runtime parameters, before queues (as policies).
        let global_parameters = crate::broker::parameters::restore(&vhosts, &definitions);
        for e in definitions.exchanges {
            let Some(vh) = vhosts.get(&e.vhost) else {
                continue;
            };
            match ExchangeKind::parse(&e.kind) {
                Ok(kind) => vh.insert_exchange(vh.with_delayed_store_or_memory(
                    Exchange::new(
                        Arc::from(e.name.as_str()),
                        kind,
                        true,
                        e.auto_delete,
                        e.internal,
                        e.arguments,
                    ),
                    false,
                )),
                Err(err) => log::error!(
                    "exchange '{}' in vhost '{}' not recovered: {}",
                    e.name,
                    e.vhost,
                    err.text
                ),
            }
        }
        for q in definitions.queues {
            let Some(vh) = vhosts.get(&q.vhost) else {
                continue;
            };
            let mut queue = Queue::new(
                Arc::from(q.name.as_str()),
                true,
                false,
                q.auto_delete,
                None,
                q.arguments,
            );
            queue.memory_bytes_max = config.queue_memory_bytes;
            queue.resolve_consumer_timeout(config.consumer_timeout_ms);
            queue.restore_paused(q.paused);
            let opened = open_store(
                &durability,
                &q.vhost,
                &q.name,
                &q.id,
                config.queue_memory_bytes,
                &mut recovered,
            );
            queue.storage_id = Some(q.id);
            let messages = match opened {
                Some((storage, messages)) => {
                    queue.storage = Some(storage);
                    messages
                }
                None => Vec::new(),
            };
            if !messages.is_empty() {
                recovered.messages += messages.len() as u64;
                recovered.queues += 1;
            }
            vh.apply_policies(&queue);
            queue.restore(messages);
            vh.insert_queue(queue);
        }
        for b in definitions.bindings {
            let Some(vh) = vhosts.get(&b.vhost) else {
                continue;
            };
            let destination = if b.destination_is_exchange {
                Destination::Exchange(Arc::from(b.destination.as_str()))
            } else {
                Destination::Queue(Arc::from(b.destination.as_str()))
            };
            if !vh.restore_binding(&b.source, destination, b.routing_key, b.arguments) {
                log::warn!(
                    "binding {} -> {} ('{}') in vhost '{}' not recovered: an end is missing",
                    b.source,
                    b.destination,
                    b.vhost,
                    b.vhost
                );
            }
        }
        Broker {
            durability: Some(durability),
            vhosts: RwLock::new(vhosts),
            connections: Mutex::new(HashMap::new()),
            user_connections: Mutex::new(HashMap::new()),
            limits,
            user_limits_changes: Mutex::new(()),
            channels: ChannelRegistry::default(),
            next_connection_id: AtomicU64::new(1),
            started: Instant::now(),
            users: UserRegistry::default(),
            login_throttle: LoginThrottle::default(),
            login_checker: std::sync::OnceLock::new(),
            alarms: Arc::new(ResourceAlarms::new(config.alarms)),
            counters,
            connections_opened: AtomicU64::new(0),
            connections_closed: AtomicU64::new(0),
            rates: crate::broker::rates::Rates::default(),
            recovered,
            sockets_open: AtomicUsize::new(0),
            global_parameters: Mutex::new(global_parameters),
            delay_schedule,
            links: std::sync::OnceLock::new(),
            config,
        }
    }

    /// Writes every store's `queue_stat` and syncs what is pending (clean shutdown, after
    /// the last request ran).
    pub fn close_storage(&self) {
        let Some(d) = &self.durability else { return };
        for vh in self.vhosts() {
            for q in vh.all_queues() {
                if let Some(storage) = &q.storage {
                    storage.write_stat(&q.name);
                }
            }
            for e in vh.all_exchanges() {
                if let Some(delayed) = e.delayed() {
                    delayed.write_stat();
                }
            }
        }
        d.flusher().shutdown();
    }

    /// Users and permissions.
    pub fn users(&self) -> &UserRegistry {
        &self.users
    }

    /// The storage, when the broker has one.
    pub fn durability(&self) -> Option<&Arc<Durability>> {
        self.durability.as_ref()
    }

    /// The resource alarms (memory and disk watermarks, alarm bits).
    pub fn alarms(&self) -> &Arc<ResourceAlarms> {
        &self.alarms
    }

    /// Time since the broker started.
    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// A fresh connection id (ids are never reused while the process runs).
    pub fn next_connection_id(&self) -> u64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The vhost with `name`.
    pub fn vhost(&self, name: &str) -> Option<Arc<VirtualHost>> {
        self.vhosts
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The vhost with `name` for a connection being opened.
    ///
    /// # Errors
    /// 402 INVALID_PATH when it does not exist (RabbitMQ answers a missing vhost so).
    pub fn vhost_for_open(&self, name: &str) -> Result<Arc<VirtualHost>, BrokerError> {
        self.vhost(name).ok_or_else(|| {
            BrokerError::new(ReplyCode::InvalidPath, format!("vhost '{name}' not found"))
        })
    }

    /// Creates a vhost; declaring an existing one succeeds.
    ///
    /// # Errors
    /// 406 for an empty name.
    pub fn declare_vhost(&self, name: &str) -> Result<(), BrokerError> {
        if name.is_empty() {
            return Err(BrokerError::precondition("vhost name must not be empty"));
        }
        let mut map = self.vhosts_for_change();
        if map.contains_key(name) {
            return Ok(());
        }
        if let Some(d) = &self.durability {
            d.meta("vhost", |m| m.put_vhost(name))?;
        }
        map.insert(name.to_string(), Arc::new(self.new_vhost(name)));
        Ok(())
    }

    /// A vhost named `name` with this broker's settings, limits, counters and storage, not
    /// yet in the vhost map (the caller stores it and inserts it).
    pub(crate) fn new_vhost(&self, name: &str) -> VirtualHost {
        VirtualHost::new(name, self.durability.clone())
            .with_queue_memory_bytes(self.config.queue_memory_bytes)
            .with_consumer_timeout_ms(self.config.consumer_timeout_ms)
            .with_limits(Arc::clone(&self.limits))
            .with_counters(Arc::clone(&self.counters))
            .with_delay_schedule(Arc::clone(&self.delay_schedule))
    }

    /// The vhost map, locked for a change (vhost creation and deletion, a definitions
    /// import's commit). Lock order: any vhost's changes lock before this one; nothing
    /// that holds it takes a changes lock.
    pub(crate) fn vhosts_for_change(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<VirtualHost>>> {
        self.vhosts.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Deletes a vhost and everything in it; its connections are closed with 320
    /// CONNECTION_FORCED, as RabbitMQ does. Returns what went with it (for the caller's
    /// log line, which names who deleted it).
    ///
    /// # Errors
    /// 404 when it does not exist; 406 for the default vhost `/`.
    pub fn delete_vhost(&self, name: &str) -> Result<VhostDeleted, BrokerError> {
        if name == DEFAULT_VHOST {
            // Admin requests travel over a connection to some vhost: without `/`, a broker
            // whose other vhosts are gone could not be reached at all.
            return Err(BrokerError::precondition(
                "the default vhost '/' cannot be deleted",
            ));
        }
        let vh = {
            let mut map = self.vhosts_for_change();
            if !map.contains_key(name) {
                return Err(BrokerError::not_found(format!("no vhost '{name}'")));
            }
            if let Some(d) = &self.durability {
                d.meta("vhost deletion", |m| m.delete_vhost(name))?;
            }
            map.remove(name)
                .ok_or_else(|| BrokerError::not_found(format!("no vhost '{name}'")))?
        };
        let queues = vh.all_queues();
        let messages = queues
            .iter()
            .map(|q| {
                let st = q.stats();
                st.ready + st.unacked
            })
            .sum();
        let sinks: Vec<Arc<dyn ClientSink>> = self
            .lock_connections()
            .values()
            .filter(|c| c.vhost == name)
            .map(|c| Arc::clone(&c.sink))
            .collect();
        let gone = VhostDeleted {
            queues: queues.len(),
            messages,
            connections: sinks.len(),
        };
        drop(queues);
        for s in sinks {
            s.force_close(
                ReplyCode::ConnectionForced,
                &format!("vhost '{name}' is deleted"),
            );
        }
        self.users.remove_vhost(name);
        if let Some(l) = self.links.get() {
            l.vhost_deleted(name);
        }
        vh.remove_all();
        Ok(gone)
    }

    /// All vhosts, sorted by name.
    pub fn vhosts(&self) -> Vec<Arc<VirtualHost>> {
        let mut v: Vec<_> = self
            .vhosts
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn lock_connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ConnectionInfo>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limits in force (read by every limit check; replaceable at run time).
    pub fn limits(&self) -> &LiveLimits {
        &self.limits
    }

    /// Adds an opened connection to the registry, counting it against the connection
    /// limits (both listeners call this at `connection.open`, before `open-ok`). The
    /// count is exact: check and insert happen under the registry lock.
    ///
    /// # Errors
    /// 530 NOT_ALLOWED when `connections_max` connections are open, the vhost's
    /// `max-connections` limit is reached ("access to vhost 'V' refused for user 'U':
    /// connection limit (N) is reached"), or `connections_per_user_max` or the user's
    /// `max-connections` limit, whichever is lower (RabbitMQ's wording for its user limit:
    /// "connection refused for user 'U': user connection limit (N) is reached"); checked
    /// in RabbitMQ's order (`rabbit_reader`). The connection is not registered then.
    pub fn register_connection(&self, info: ConnectionInfo) -> Result<(), BrokerError> {
        use crate::broker::limits::{in_force, MAX_CONNECTIONS};
        // Read before the registry lock: the vhost map is not taken under it.
        let vhost_max = self
            .vhost(&info.vhost)
            .and_then(|vh| vh.limit_in_force(MAX_CONNECTIONS));
        let user_max = in_force(&self.users.limits(&info.user), MAX_CONNECTIONS);
        let mut conns = self.lock_connections();
        let total_max = self.limits.connections_max();
        if conns.len() >= total_max {
            return Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!(
                    "connection refused for user '{}': node connection limit ({total_max}) is reached",
                    info.user
                ),
            ));
        }
        if let Some(max) = vhost_max {
            let open = conns.values().filter(|c| c.vhost == info.vhost).count() as u64;
            if open >= max {
                return Err(BrokerError::new(
                    ReplyCode::NotAllowed,
                    format!(
                        "access to vhost '{}' refused for user '{}': connection limit ({max}) is reached",
                        info.vhost, info.user
                    ),
                ));
            }
        }
        let mut users = self.lock_user_connections();
        let per_user_max = match user_max {
            Some(own) => self
                .limits
                .connections_per_user_max()
                .min(usize::try_from(own).unwrap_or(usize::MAX)),
            None => self.limits.connections_per_user_max(),
        };
        let count = users.entry(info.user.clone()).or_insert(0);
        if *count >= per_user_max {
            if *count == 0 {
                users.remove(&info.user);
            }
            return Err(BrokerError::new(
                ReplyCode::NotAllowed,
                format!(
                    "connection refused for user '{}': user connection limit ({per_user_max}) is reached",
                    info.user
                ),
            ));
        }
        *count += 1;
        conns.insert(info.id, info);
        self.connections_opened.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The lock that serializes changes of user limits.
    pub(crate) fn user_limits_changes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.user_limits_changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Removes a closed connection from the registry (and from its user's count).
    pub fn unregister_connection(&self, id: u64) {
        let mut conns = self.lock_connections();
        let Some(info) = conns.remove(&id) else {
            return;
        };
        self.connections_closed.fetch_add(1, Ordering::Relaxed);
        let mut users = self.lock_user_connections();
        if let Some(count) = users.get_mut(&info.user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                users.remove(&info.user);
            }
        }
    }

    fn lock_user_connections(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.user_connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The open channels of every connection (sessions register theirs; the housekeeper
    /// reads them for the consumer timeout).
    pub fn channel_registry(&self) -> &ChannelRegistry {
        &self.channels
    }

    /// Broker-wide message-event counters (confirms, returns, dead-letterings), for the
    /// metrics endpoint.
    pub fn counters(&self) -> &Arc<EventCounters> {
        &self.counters
    }

    /// Connections registered and closed since start: `(opened, closed)` (RabbitMQ's
    /// `connections_opened_total` / `connections_closed_total`).
    pub fn connection_totals(&self) -> (u64, u64) {
        (
            self.connections_opened.load(Ordering::Relaxed),
            self.connections_closed.load(Ordering::Relaxed),
        )
    }

    /// Notes how many client sockets are open (the I/O thread, after each accept and
    /// close), for `status` and the metrics endpoint.
    pub fn set_sockets_open(&self, n: usize) {
        self.sockets_open.store(n, Ordering::Relaxed);
    }

    /// Client sockets open now, handshaking ones included, and the shovels' outbound
    /// connections.
    pub fn sockets_open(&self) -> usize {
        self.sockets_open.load(Ordering::Relaxed) + self.links.get().map_or(0, |l| l.sockets_open())
    }

    /// The message store's file budget (`None` for an in-memory broker, or a store
    /// without one).
    pub fn file_budget(&self) -> Option<crate::storage::FileBudgetStats> {
        self.durability
            .as_ref()
            .and_then(|d| d.backend().file_budget())
            .map(|b| b.stats())
    }

    /// Every registered connection, by id.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let mut v: Vec<_> = self.lock_connections().values().cloned().collect();
        v.sort_by_key(|c| c.id);
        v
    }
}

/// Opens a stored queue's message store at recovery (step 3 in docs/architecture.md):
/// logs what was repaired (warnings per queue; housekeeping notes such as a recounted
/// `queue_stat` at debug, counted in `counts` for the summary line); on
/// failure the queue is reported and left without a store (it refuses persistent
/// publishes) while the others serve. Bodies beyond `memory_bytes` stay on disk
/// (docs/storage.md, "Memory budget").
fn open_store(
    durability: &Arc<Durability>,
    vhost: &str,
    name: &str,
    id: &str,
    memory_bytes: usize,
    counts: &mut RecoveredMessages,
) -> Option<(QueueStorage, Vec<Recovered>)> {
    let dir = durability.queue_dir(id);
    match QueueStore::open_with_budget(
        Arc::clone(durability.backend()),
        dir.clone(),
        durability.store_config(),
        memory_bytes as u64,
    ) {
        Ok((store, messages, report)) => {
            for w in &report.warnings {
                log::warn!("queue '{name}' in vhost '{vhost}': {w}");
            }
            // Notes are normal housekeeping (after a crash every queue that held
            // messages has a stale `queue_stat`): debug, counted for the summary, so
            // thousands of queues do not make thousands of info lines.
            for n in &report.notes {
                log::debug!("queue '{name}' in vhost '{vhost}': {n}");
            }
            let stat_notes = u64::from(report.stat_rebuilt);
            counts.stats_rebuilt += stat_notes;
            counts.other_notes += (report.notes.len() as u64).saturating_sub(stat_notes);
            // Debug: thousands of queues would make thousands of lines; the summary
            // (`recovery done …`) is the info line.
            if !messages.is_empty() {
                log::debug!(
                    "queue '{name}' in vhost '{vhost}': recovered {} persistent messages",
                    messages.len()
                );
            }
            Some((
                QueueStorage::new(
                    store,
                    Arc::clone(durability.flusher()),
                    Some(durability.compactor().clone()),
                ),
                messages,
            ))
        }
        Err(e) => {
            log::error!(
                "queue '{name}' in vhost '{vhost}' ({}) cannot be recovered and is out of service: {e}",
                dir.display()
            );
            None
        }
    }
}
