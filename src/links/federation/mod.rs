//! Exchange federation (RabbitMQ's `rabbitmq_exchange_federation`): an exchange matched
//! by a policy with `federation-upstream-set` (a set's name, or `all`) or
//! `federation-upstream` (one upstream's name) gets a link per upstream; each link
//! ([`link`]) copies what the upstream exchange routes for the downstream exchange's
//! binding keys into the downstream exchange.
//!
//! Upstreams are `federation-upstream` runtime parameters ([`upstream`]), sets are
//! `federation-upstream-set` ones. A manager thread (`relaymq-federation`) looks at the
//! policies, exchanges and parameters every [`SCAN_INTERVAL`] and starts, restarts (an
//! upstream changed) or stops links; their status is `/api/federation-links`.
//!
//! Federated queues are not supported.

pub mod link;
pub use crate::broker::federation_upstream as upstream;

use crate::broker::node::Broker;
use crate::broker::policy;
use crate::stoppable_thread::StoppableThread;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use upstream::Upstream;

/// How often the manager compares the links that should run with those that do.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(500);

/// Links one broker runs at most (each is a thread and two sockets).
pub const LINKS_MAX: usize = 256;

pub use crate::broker::federation_upstream::{UPSTREAM_COMPONENT, UPSTREAM_SET_COMPONENT};

/// Where a link is (RabbitMQ's link states).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Connecting and declaring.
    Starting,
    /// Moving messages.
    Running,
    /// Failed, with the reason; it starts again after the upstream's `reconnect-delay`.
    Error(String),
}

/// A link's status, as `/api/federation-links` shows it.
#[derive(Clone, Debug)]
pub struct LinkStatus {
    /// The downstream vhost.
    pub vhost: String,
    /// The downstream exchange.
    pub exchange: String,
    /// The upstream's name.
    pub upstream: String,
    /// The upstream exchange.
    pub upstream_exchange: String,
    /// The URI in use, credentials left out.
    pub uri: String,
    /// Its state.
    pub state: LinkState,
    /// When the state last changed.
    pub timestamp: SystemTime,
    /// Messages republished downstream.
    pub forwarded: u64,
    /// Messages republished and not yet confirmed downstream.
    pub pending: u64,
}

impl LinkStatus {
    /// Moves to `state`, stamping the time.
    pub fn set_state(&mut self, state: LinkState) {
        self.state = state;
        self.timestamp = SystemTime::now();
    }

    /// The link's id: 8 hex digits of a hash of vhost, exchange and upstream (as
    /// RabbitMQ's `unique_id/1`, another hash; std's `DefaultHasher::new()` is the same
    /// in every run).
    pub fn id(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.vhost, &self.exchange, &self.upstream).hash(&mut h);
        format!("{:08x}", h.finish() as u32)
    }

    /// The status as RabbitMQ's `/api/federation-links` element
    /// (`rabbit_federation_status:format/1`) on node `node`.
    pub fn to_json(&self, node: &str) -> Value {
        let mut m = Map::new();
        m.insert("node".into(), json!(node));
        m.insert("exchange".into(), json!(self.exchange));
        m.insert("upstream_exchange".into(), json!(self.upstream_exchange));
        m.insert("type".into(), json!("exchange"));
        m.insert("vhost".into(), json!(self.vhost));
        m.insert("upstream".into(), json!(self.upstream));
        m.insert("id".into(), json!(self.id()));
        match &self.state {
            LinkState::Starting => {
                m.insert("status".into(), json!("starting"));
            }
            LinkState::Running => {
                m.insert("status".into(), json!("running"));
                m.insert(
                    "local_connection".into(),
                    json!(format!("<{node}.federation.{}>", self.id())),
                );
            }
            LinkState::Error(why) => {
                m.insert("status".into(), json!("error"));
                m.insert("error".into(), json!(why));
            }
        }
        m.insert("uri".into(), json!(self.uri));
        m.insert(
            "timestamp".into(),
            json!(crate::links::shovel::format_timestamp(self.timestamp)),
        );
        m.insert("messages_forwarded".into(), json!(self.forwarded));
        m.insert("messages_pending".into(), json!(self.pending));
        Value::Object(m)
    }
}

/// A running link's handle.
struct Running {
    upstream: Upstream,
    status: Arc<Mutex<LinkStatus>>,
    stop: Arc<AtomicBool>,
    /// Set with `stop` when the link goes for good: it deletes its upstream queue.
    cleanup: Arc<AtomicBool>,
}

/// The broker's federation links.
#[derive(Default)]
pub struct Federation {
    links: Mutex<BTreeMap<(String, String, String), Running>>,
    manager: Mutex<Option<StoppableThread>>,
}

impl std::fmt::Debug for Federation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Federation").finish_non_exhaustive()
    }
}

impl Federation {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String, String), Running>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every link's status, by vhost, exchange and upstream.
    pub fn statuses(&self) -> Vec<LinkStatus> {
        self.lock()
            .values()
            .map(|r| r.status.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }

    /// One row per link, sorted by vhost, exchange and upstream: the fields of its
    /// `/api/federation-links` element on node `node` ([`LinkStatus::to_json`]; the
    /// native protocol's `federation-links` list).
    pub fn rows(&self, node: &str) -> Vec<crate::types::FieldTable> {
        let mut all = self.statuses();
        all.sort_by(|a, b| {
            (&a.vhost, &a.exchange, &a.upstream).cmp(&(&b.vhost, &b.exchange, &b.upstream))
        });
        all.iter()
            .map(|l| crate::links::row(&l.to_json(node)))
            .collect()
    }

    /// Stops the manager and every link (the broker stops).
    pub fn stop(&self) {
        if let Some(mut m) = self
            .manager
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            m.stop();
        }
        let mut links = self.lock();
        for r in links.values() {
            r.stop.store(true, Ordering::Relaxed);
        }
        links.clear();
    }

    /// Starts, restarts and stops links so that those running are those `desired`.
    fn reconcile(
        &self,
        broker: &Weak<Broker>,
        desired: BTreeMap<(String, String, String), Upstream>,
    ) {
        let mut links = self.lock();
        links.retain(|k, r| {
            let keep = desired.get(k).is_some_and(|u| *u == r.upstream);
            if !keep {
                // Gone (policy, exchange or upstream removed): its upstream queue goes
                // too (`resource-cleanup-mode: default`); changed: it restarts and keeps it.
                let gone = !desired.contains_key(k);
                r.cleanup.store(gone, Ordering::Relaxed);
                r.stop.store(true, Ordering::Relaxed);
            }
            keep
        });
        for (k, u) in desired {
            if links.contains_key(&k) || links.len() >= LINKS_MAX {
                continue;
            }
            let (vhost, exchange, name) = k.clone();
            let status = Arc::new(Mutex::new(LinkStatus {
                vhost: vhost.clone(),
                exchange: exchange.clone(),
                upstream: name,
                upstream_exchange: u.exchange.clone().unwrap_or_else(|| exchange.clone()),
                uri: String::new(),
                state: LinkState::Starting,
                timestamp: SystemTime::now(),
                forwarded: 0,
                pending: 0,
            }));
            let stop = Arc::new(AtomicBool::new(false));
            let cleanup = Arc::new(AtomicBool::new(false));
            let l = link::Link {
                cleanup: Arc::clone(&cleanup),
                broker: Weak::clone(broker),
                vhost,
                exchange,
                upstream: u.clone(),
                status: Arc::clone(&status),
                stop: Arc::clone(&stop),
            };
            match std::thread::Builder::new()
                .name("relaymq-federation-link".into())
                .spawn(move || l.run())
            {
                Ok(_) => {
                    links.insert(
                        k,
                        Running {
                            upstream: u,
                            status,
                            stop,
                            cleanup,
                        },
                    );
                }
                Err(e) => log::error!("federation link not started: {e}"),
            }
        }
    }
}

/// The links that should run: per vhost, each exchange whose policy names an upstream
/// set or an upstream, once per upstream found.
fn desired(broker: &Broker) -> BTreeMap<(String, String, String), Upstream> {
    let mut out = BTreeMap::new();
    for vh in broker.vhosts() {
        let policies = vh.policies();
        if !policies.iter().any(|p| {
            p.def.definition.contains_key("federation-upstream-set")
                || p.def.definition.contains_key("federation-upstream")
        }) {
            continue;
        }
        let params = vh.runtime_parameters();
        let upstream_value = |name: &str| {
            params
                .iter()
                .find(|p| p.component == UPSTREAM_COMPONENT && p.name == name)
                .map(|p| p.value.clone())
        };
        for x in vh.all_exchanges() {
            if x.name.is_empty() {
                continue;
            }
            let Some(p) = policy::for_exchange(&policies, &x.name) else {
                continue;
            };
            let d = &p.def.definition;
            // (upstream name, set entry overrides)
            let mut chosen: Vec<(String, Option<Map<String, Value>>)> = Vec::new();
            if let Some(set) = d.get("federation-upstream-set").and_then(Value::as_str) {
                if set == "all" {
                    chosen.extend(
                        params
                            .iter()
                            .filter(|p| p.component == UPSTREAM_COMPONENT)
                            .map(|p| (p.name.clone(), None)),
                    );
                } else if let Some(list) = params
                    .iter()
                    .find(|p| p.component == UPSTREAM_SET_COMPONENT && p.name == set)
                    .and_then(|p| p.value.as_array().cloned())
                {
                    for e in list {
                        if let Some(o) = e.as_object() {
                            if let Some(n) = o.get("upstream").and_then(Value::as_str) {
                                chosen.push((n.to_string(), Some(o.clone())));
                            }
                        }
                    }
                }
            } else if let Some(n) = d.get("federation-upstream").and_then(Value::as_str) {
                chosen.push((n.to_string(), None));
            }
            for (name, overrides) in chosen {
                let Some(value) = upstream_value(&name) else {
                    continue;
                };
                match Upstream::parse(&name, &value, overrides.as_ref()) {
                    Ok(u) => {
                        out.insert((vh.name.to_string(), x.name.to_string(), name), u);
                    }
                    Err(why) => log::warn!("federation upstream '{name}' not used: {why}"),
                }
            }
        }
    }
    out
}

impl Federation {
    /// Starts the manager thread for `broker`'s federated exchanges.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(
        &self,
        broker: &Arc<Broker>,
        me: Weak<crate::links::Links>,
    ) -> std::io::Result<()> {
        let weak = Arc::downgrade(broker);
        let t = StoppableThread::spawn("relaymq-federation", move |stop| loop {
            match (weak.upgrade(), me.upgrade()) {
                (Some(b), Some(links)) => {
                    let want = desired(&b);
                    links.federation.reconcile(&weak, want);
                }
                _ => return,
            }
            if stop.recv_timeout(SCAN_INTERVAL) != Err(crossbeam_channel::RecvTimeoutError::Timeout)
            {
                return;
            }
        })?;
        *self.manager.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(())
    }
}
