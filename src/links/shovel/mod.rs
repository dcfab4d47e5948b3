//! Dynamic shovels (RabbitMQ's `rabbitmq_shovel`): a `shovel` runtime parameter per
//! shovel, each run by a thread of its own that consumes from a source (a queue, or an
//! exchange through a server-named queue) and republishes to a destination (an exchange
//! or a queue), on this broker or another AMQP 0-9-1 broker (RabbitMQ, LavinMQ,
//! RelayMQ).
//!
//! - [`definition`]: the parameter's value, validated as RabbitMQ validates it.
//! - [`endpoint`]: the two ends and their remote (AMQP 0-9-1 client) form; [`local`]:
//!   the in-process form (URIs without a host).
//! - `worker`: the thread: connect, set up, move, restart after failures.
//! - [`Shovels`] (here): the running shovels and their status (`/api/shovels`,
//!   `relaymq-cli shovel list`, metrics).
//!
//! A shovel's thread is started when its parameter is set (or imported, or recovered
//! at start) and stopped when it is cleared, its vhost deleted or the broker stops.
//! Stopping sets a flag the thread reads at least every 100 ms between its blocking
//! steps; a connect or setup step in progress finishes first (bounded by its timeouts).

pub mod endpoint;
pub mod forward;
pub mod local;
mod worker;

pub use crate::broker::shovel_definition as definition;
pub use crate::broker::shovel_definition::{
    AckMode, DeleteAfter, ShovelDef, SourceSpec, SHOVEL_COMPONENT,
};

use crate::broker::node::Broker;
use crate::client::TlsOptions;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::SystemTime;

/// Shovels one broker runs at most (each is a thread and up to two sockets).
pub const SHOVELS_MAX: usize = 256;

/// Where a shovel is (RabbitMQ's shovel states).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShovelState {
    /// Connecting and setting up its topology.
    Starting,
    /// Moving messages.
    Running,
    /// Failed, with the reason; it starts again after its `reconnect-delay`.
    Terminated(String),
}

/// A shovel's status, as `/api/shovels` shows it.
#[derive(Clone, Debug)]
pub struct ShovelStatus {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its state.
    pub state: ShovelState,
    /// When the state last changed.
    pub timestamp: SystemTime,
    /// The source URI in use, credentials left out.
    pub src_uri: String,
    /// The destination URI in use, credentials left out.
    pub dest_uri: String,
    /// `src_queue` / `src_exchange` / `src_exchange_key`, `dest_…`.
    pub endpoints: Vec<(&'static str, String)>,
    /// The destination blocks publishers (`connection.blocked`, a local alarm).
    pub blocked: bool,
    /// Messages published to the destination since the shovel was set.
    pub forwarded: u64,
    /// Messages forwarded and not yet settled at the source (awaiting confirms).
    pub pending: u64,
    /// Messages left to move for `src-delete-after`; `None`: unlimited.
    pub remaining: Option<u64>,
    /// Ready messages in the source queue, for a local source.
    pub backlog: Option<u64>,
}

impl ShovelStatus {
    /// Moves to `state`, stamping the time.
    pub fn set_state(&mut self, state: ShovelState) {
        self.state = state;
        self.timestamp = SystemTime::now();
    }

    /// RabbitMQ's state name: `starting`, `running` (`blocked` while the destination
    /// blocks publishers), `terminated`.
    pub fn state_name(&self) -> &'static str {
        match &self.state {
            ShovelState::Starting => "starting",
            ShovelState::Running if self.blocked => "blocked",
            ShovelState::Running => "running",
            ShovelState::Terminated(_) => "terminated",
        }
    }

    /// The status as RabbitMQ's `/api/shovels` element
    /// (`rabbit_shovel_mgmt_util:format/2`) on node `node`.
    pub fn to_json(&self, node: &str) -> Value {
        let mut m = Map::new();
        m.insert("node".into(), json!(node));
        m.insert("timestamp".into(), json!(format_timestamp(self.timestamp)));
        m.insert("name".into(), json!(self.name));
        m.insert("vhost".into(), json!(self.vhost));
        m.insert("type".into(), json!("dynamic"));
        m.insert("state".into(), json!(self.state_name()));
        match &self.state {
            ShovelState::Starting => {}
            ShovelState::Terminated(reason) => {
                m.insert("reason".into(), json!(reason));
            }
            ShovelState::Running => {
                m.insert(
                    "blocked_status".into(),
                    json!(if self.blocked { "blocked" } else { "running" }),
                );
                m.insert("src_uri".into(), json!(self.src_uri));
                m.insert("src_protocol".into(), json!("amqp091"));
                m.insert("dest_protocol".into(), json!("amqp091"));
                m.insert("dest_uri".into(), json!(self.dest_uri));
                for (k, v) in &self.endpoints {
                    m.insert((*k).into(), json!(v));
                }
                m.insert("forwarded".into(), json!(self.forwarded));
                m.insert("pending".into(), json!(self.pending));
                m.insert(
                    "remaining".into(),
                    self.remaining.map_or(json!("unlimited"), |n| json!(n)),
                );
                m.insert("remaining_unacked".into(), json!(self.pending));
                if let Some(b) = self.backlog {
                    m.insert("src_queue_messages".into(), json!(b));
                }
            }
        }
        Value::Object(m)
    }
}

/// A time as RabbitMQ's shovel status writes it: `2026-12-02 14:05:09` (UTC here;
/// RabbitMQ writes the node's local time).
pub(crate) fn format_timestamp(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// A running shovel's handle.
struct Running {
    status: Arc<Mutex<ShovelStatus>>,
    stop: Arc<AtomicBool>,
    /// The definition it runs.
    value: Value,
}

impl Running {
    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A place in the sockets budget held by a shovel's remote connection; given back when
/// dropped.
pub struct SocketGuard {
    count: Arc<AtomicUsize>,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The broker's shovels.
#[derive(Default)]
pub struct Shovels {
    running: Mutex<BTreeMap<(String, String), Running>>,
    /// Set by [`Broker::start_shovels`]: until then parameters are only stored.
    broker: OnceLock<Weak<Broker>>,
    /// The node's name (the `shovelled-by` of forward headers, `node` of the status).
    node: OnceLock<String>,
    /// The server's TLS CA and certificate, for `amqps://` URIs that name none.
    tls: OnceLock<Option<TlsOptions>>,
    /// Remote connections open now.
    sockets: Arc<AtomicUsize>,
    /// The most remote connections allowed at once (0: no budget, as in tests).
    sockets_max: AtomicUsize,
}

impl std::fmt::Debug for Shovels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shovels")
            .field("running", &self.lock().len())
            .finish()
    }
}

/// A random number (picks one of an end's URIs), from the random UUID generator the
/// broker already uses.
pub(crate) fn random() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

impl Shovels {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The TLS defaults for `amqps://` URIs.
    pub fn tls_defaults(&self) -> Option<TlsOptions> {
        self.tls.get().cloned().flatten()
    }

    /// Remote connections shovels hold open now (counted in the sockets budget).
    pub fn sockets_open(&self) -> usize {
        self.sockets.load(Ordering::Relaxed)
    }

    /// Takes a place for a remote connection; `None` when the budget is used up.
    pub(crate) fn take_socket(&self) -> Option<SocketGuard> {
        let max = self.sockets_max.load(Ordering::Relaxed);
        let n = self.sockets.fetch_add(1, Ordering::Relaxed);
        let guard = SocketGuard {
            count: Arc::clone(&self.sockets),
        };
        (max == 0 || n < max).then_some(guard)
    }

    /// Starts shovel `name` of `vhost` with definition `value`, or restarts it when it
    /// runs another definition (an unchanged one, set again or imported again, keeps
    /// running), once the shovels are started; an invalid definition is logged and not
    /// run (it was validated when set: this is a recovered or imported one).
    pub(crate) fn adjust(&self, vhost: &str, name: &str, value: &Value) {
        self.start(vhost, name, value, false);
    }

    /// Restarts shovel `name` of `vhost` with definition `value` (RabbitMQ's
    /// `restart_shovel`): it reconnects at once.
    pub(crate) fn restart(&self, vhost: &str, name: &str, value: &Value) {
        self.start(vhost, name, value, true);
    }

    fn start(&self, vhost: &str, name: &str, value: &Value, force: bool) {
        let Some(broker) = self.broker.get().cloned() else {
            return;
        };
        let key = (vhost.to_string(), name.to_string());
        let mut running = self.lock();
        if !force && running.get(&key).is_some_and(|r| r.value == *value) {
            return;
        }
        if let Some(old) = running.remove(&key) {
            old.stop();
        }
        let def = match ShovelDef::parse(name, value) {
            Ok(d) => d,
            Err(why) => {
                log::error!("shovel '{name}' in vhost '{vhost}' not started: {why}");
                return;
            }
        };
        let Some(broker_arc) = broker.upgrade() else {
            return;
        };
        let mut endpoints = def.source_fields();
        endpoints.extend(def.dest_fields());
        let status = Arc::new(Mutex::new(ShovelStatus {
            vhost: vhost.to_string(),
            name: name.to_string(),
            state: ShovelState::Starting,
            timestamp: SystemTime::now(),
            src_uri: String::new(),
            dest_uri: String::new(),
            endpoints,
            blocked: false,
            forwarded: 0,
            pending: 0,
            remaining: None,
            backlog: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let w = worker::Worker {
            broker,
            vhost: vhost.to_string(),
            name: name.to_string(),
            def,
            status: Arc::clone(&status),
            stop: Arc::clone(&stop),
            cluster: self.cluster_name(&broker_arc),
        };
        let spawned = std::thread::Builder::new()
            .name("relaymq-shovel".into())
            .spawn(move || w.run());
        match spawned {
            Ok(_) => {
                running.insert(
                    key,
                    Running {
                        status,
                        stop,
                        value: value.clone(),
                    },
                );
            }
            Err(e) => log::error!("shovel '{name}' in vhost '{vhost}' not started: {e}"),
        }
    }

    /// Stops shovel `name` of `vhost` (its parameter was cleared).
    pub(crate) fn stop(&self, vhost: &str, name: &str) {
        if let Some(r) = self.lock().remove(&(vhost.to_string(), name.to_string())) {
            r.stop();
        }
    }

    /// Stops every shovel of `vhost` (it was deleted).
    pub(crate) fn stop_vhost(&self, vhost: &str) {
        self.lock().retain(|(v, _), r| {
            if v == vhost {
                r.stop();
            }
            v != vhost
        });
    }

    /// Stops every shovel (the broker stops).
    pub fn stop_all(&self) {
        let mut running = self.lock();
        for r in running.values() {
            r.stop();
        }
        running.clear();
    }

    /// Whether shovel `name` of `vhost` may be set: it runs already, or fewer than
    /// [`SHOVELS_MAX`] do.
    pub fn has_room_for(&self, vhost: &str, name: &str) -> bool {
        let running = self.lock();
        running.len() < SHOVELS_MAX || running.contains_key(&(vhost.to_string(), name.to_string()))
    }

    /// How many shovels run.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no shovel runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every shovel's status, by vhost and name.
    pub fn statuses(&self) -> Vec<ShovelStatus> {
        self.lock()
            .values()
            .map(|r| r.status.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }

    /// The node name statuses report.
    pub fn node(&self) -> String {
        self.node.get().cloned().unwrap_or_default()
    }

    /// The cluster's name as other brokers see it: the `cluster_name` global parameter,
    /// else the node's name (`rabbit_nodes:cluster_name/0`).
    pub fn cluster_name(&self, broker: &Broker) -> String {
        broker.cluster_name().unwrap_or_else(|| self.node())
    }
}

impl Shovels {
    /// Starts the shovels of `broker`: from now on a `shovel` parameter runs, and every
    /// stored one starts now. `node` names this node in statuses; `tls` is the server's
    /// TLS CA and certificate (for `amqps://` URIs naming none); `sockets_max` bounds
    /// the remote connections of shovels and federation links (0: no bound).
    pub fn init(
        &self,
        broker: &Arc<Broker>,
        node: &str,
        tls: Option<TlsOptions>,
        sockets_max: usize,
    ) {
        let _ = self.node.set(node.to_string());
        let _ = self.tls.set(tls);
        self.sockets_max.store(sockets_max, Ordering::Relaxed);
        if self.broker.set(Arc::downgrade(broker)).is_err() {
            return;
        }
        for p in broker.parameters() {
            if p.component == SHOVEL_COMPONENT {
                self.adjust(&p.vhost, &p.name, &p.value);
            }
        }
    }

    /// One row per shovel, sorted by (vhost, name): the fields of its `/api/shovels`
    /// element ([`ShovelStatus::to_json`]; the native protocol's `shovels` list, so it
    /// and the HTTP API cannot differ).
    pub fn rows(&self) -> Vec<crate::types::FieldTable> {
        let node = self.node();
        let mut all = self.statuses();
        all.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        all.iter()
            .map(|s| crate::links::row(&s.to_json(&node)))
            .collect()
    }
}
