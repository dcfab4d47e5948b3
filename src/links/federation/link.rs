//! One federation link: consumes what the upstream exchange routes to a queue of its
//! own on the upstream broker, bound with the downstream exchange's binding keys, and
//! republishes it to the downstream exchange here (RabbitMQ's
//! `rabbit_federation_exchange_link`). On any failure the link reports `error` with the
//! reason and starts over after the upstream's `reconnect-delay`.
//!
//! Two connections to the upstream: one consumes; the other declares the queue and keeps
//! its bindings in step with the downstream exchange's (the client's consuming
//! connection must not run requests while deliveries arrive). Loop prevention is
//! RabbitMQ's `should_forward`: a message that already crossed `max-hops` links, or
//! whose `x-received-from` shows it passed this broker's vhost, is acked and dropped.

use super::{LinkState, LinkStatus};
use crate::amqp::AmqpMethod;
use crate::amqp_client::uri::{redact, AmqpUri};
use crate::amqp_client::Connection;
use crate::broker::federation_upstream::Upstream;
use crate::broker::node::Broker;
use crate::broker::topology;
use crate::client::{ExchangeDeclareOptions, QueueDeclareOptions};
use crate::links::shovel::definition::AckMode;
use crate::links::shovel::endpoint::remote::RemoteSource;
use crate::links::shovel::endpoint::{reason, Shovelled};
use crate::links::shovel::forward::{self, Ended, Forwarding, Progress};
use crate::links::shovel::local::LocalEnd;
use crate::links::shovel::SocketGuard;
use crate::types::{FieldTable, FieldValue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Heartbeat asked for on upstream connections, seconds (RabbitMQ's client default).
const HEARTBEAT_S: u16 = 10;

/// Time allowed for each reply of the upstream during setup and binding changes.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest between two looks at the downstream exchange's bindings.
const BINDINGS_POLL: Duration = Duration::from_millis(200);

/// Shortest wait between a link's failure and its next attempt (a `reconnect-delay` of
/// 0 would retry in a tight loop).
const RECONNECT_DELAY_MIN: Duration = Duration::from_secs(1);

/// The routing header of federated messages (`?ROUTING_HEADER`).
pub const RECEIVED_FROM: &str = "x-received-from";

/// What a link's thread needs.
pub(super) struct Link {
    pub(super) broker: Weak<Broker>,
    pub(super) vhost: String,
    pub(super) exchange: String,
    pub(super) upstream: Upstream,
    pub(super) status: Arc<Mutex<LinkStatus>>,
    pub(super) stop: Arc<AtomicBool>,
    /// Set with `stop` when the link goes for good: delete the upstream queue.
    pub(super) cleanup: Arc<AtomicBool>,
}

impl Link {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn set(&self, f: impl FnOnce(&mut LinkStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The thread's body.
    pub(super) fn run(self) {
        loop {
            self.set(|s| s.set_state(LinkState::Starting));
            match self.run_once() {
                Ended::Stopped | Ended::Done => return,
                Ended::Failed(why) => {
                    log::warn!(
                        "federation link of exchange '{}' in vhost '{}' from upstream '{}': {why}",
                        self.exchange,
                        self.vhost,
                        self.upstream.name
                    );
                    self.set(|s| s.set_state(LinkState::Error(why)));
                }
            }
            let until = Instant::now() + self.upstream.reconnect_delay.max(RECONNECT_DELAY_MIN);
            while Instant::now() < until {
                if self.stopping() {
                    return;
                }
                std::thread::sleep((until - Instant::now()).min(forward::IDLE_WAIT));
            }
            if self.stopping() {
                return;
            }
        }
    }

    fn connect(
        &self,
        broker: &Broker,
        uri: &AmqpUri,
        what: &str,
    ) -> Result<(Connection, SocketGuard), String> {
        let shovels = &crate::links::Links::of(broker)
            .ok_or_else(|| "the broker is stopping".to_string())?
            .shovels;
        let tls = shovels.tls_defaults();
        let name = format!("Federation link (upstream: {}, {what})", self.upstream.name);
        let mut opts = uri.connect_options(&name, tls.as_ref())?;
        if uri.heartbeat.is_none() {
            opts.heartbeat = HEARTBEAT_S;
        }
        opts.reply_timeout = REPLY_TIMEOUT;
        let guard = shovels.take_socket().ok_or(
            "no file descriptor left for the upstream connection (the sockets budget is used up)",
        )?;
        let c = Connection::connect(&opts)
            .map_err(|e| format!("{}: {}", redact_uri(uri), reason(&e)))?;
        Ok((c, guard))
    }

    fn run_once(&self) -> Ended {
        let Some(broker) = self.broker.upgrade() else {
            return Ended::Stopped;
        };
        let u = &self.upstream;
        let pick = &u.uris[(crate::links::shovel::random() as usize) % u.uris.len()];
        let shown = redact(pick);
        let uri = match AmqpUri::parse(pick) {
            Ok(x) => x,
            Err(e) => return Ended::Failed(format!("\"{shown}\" not a valid URI: {e}")),
        };
        let (mut control, _g1) = match self.connect(&broker, &uri, "control") {
            Ok(c) => c,
            Err(why) => return Ended::Failed(format!("failed to connect to upstream: {why}")),
        };
        let upstream_exchange = u.exchange.clone().unwrap_or_else(|| self.exchange.clone());
        let local_name = match crate::links::Links::of(&broker) {
            Some(l) => l.shovels.cluster_name(&broker),
            None => return Ended::Stopped,
        };
        let queue = queue_name(
            &upstream_exchange,
            &uri.vhost,
            &local_name,
            &self.vhost,
            &self.exchange,
        );
        if let Err(why) = self.declare(&mut control, &upstream_exchange, &queue) {
            return Ended::Failed(why);
        }
        let upstream_name = control
            .server_properties()
            .get("cluster_name")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| uri.addr());
        let mut bindings = Bindings {
            bound: Vec::new(),
            version: u64::MAX,
            checked: Instant::now() - BINDINGS_POLL,
        };
        if let Err(why) = bindings.sync(&broker, self, &mut control, &queue, &upstream_exchange) {
            return Ended::Failed(why);
        }
        let (source_conn, _g2) = match self.connect(&broker, &uri, "consumer") {
            Ok(c) => c,
            Err(why) => return Ended::Failed(format!("failed to connect to upstream: {why}")),
        };
        let no_ack = u.ack_mode == AckMode::NoAck;
        let mut src = match RemoteSource::consume(
            source_conn,
            &queue,
            u.prefetch_count,
            no_ack,
            "",
            &FieldTable::new(),
        ) {
            Ok(s) => s,
            Err(e) => return Ended::Failed(format!("consuming from '{queue}': {}", reason(&e))),
        };
        let dest = LocalEnd::open(&broker, &self.vhost)
            .and_then(|l| l.publisher(u.ack_mode == AckMode::OnConfirm));
        let mut dest = match dest {
            Ok(d) => d,
            Err(why) => return Ended::Failed(format!("downstream: {why}")),
        };
        self.set(|s| {
            s.uri = shown.clone();
            s.upstream_exchange = upstream_exchange.clone();
            s.set_state(LinkState::Running);
        });
        log::info!(
            "federation link of exchange '{}' in vhost '{}' running from {shown} exchange '{upstream_exchange}'",
            self.exchange,
            self.vhost
        );
        let mut f = LinkForwarding {
            link: self,
            broker: &broker,
            control,
            bindings,
            queue,
            upstream_exchange,
            entry: entry(&shown, &upstream_name, &uri.vhost),
            local_name,
        };
        let ended = forward::run(&mut src, &mut dest, u.ack_mode, None, &mut f);
        if matches!(ended, Ended::Stopped)
            && self.cleanup.load(Ordering::Relaxed)
            && u.resource_cleanup
        {
            // RabbitMQ's `resource-cleanup-mode: default`: a link removed for good takes
            // its upstream queue with it (else it would fill with no consumer).
            drop(src);
            match f.control.queue_delete(&f.queue, false, false) {
                Ok(n) => log::info!(
                    "federation link of exchange '{}' in vhost '{}' removed: upstream queue \
                     '{}' deleted ({n} messages)",
                    self.exchange,
                    self.vhost,
                    f.queue
                ),
                Err(e) => log::warn!(
                    "federation link removed: upstream queue '{}' not deleted: {}",
                    f.queue,
                    reason(&e)
                ),
            }
        }
        ended
    }

    /// Checks the upstream exchange exists and declares the link's queue on it.
    fn declare(&self, c: &mut Connection, exchange: &str, queue: &str) -> Result<(), String> {
        let passive = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        c.exchange_declare(exchange, "direct", passive)
            .map_err(|e| format!("upstream exchange '{exchange}': {}", reason(&e)))?;
        let mut args = FieldTable::new();
        if let Some(ms) = self.upstream.expires {
            args.insert("x-expires".into(), FieldValue::I64(ms as i64));
        }
        if let Some(ms) = self.upstream.message_ttl {
            args.insert("x-message-ttl".into(), FieldValue::I64(ms as i64));
        }
        args.insert(
            "x-internal-purpose".into(),
            FieldValue::string("federation"),
        );
        let opts = QueueDeclareOptions {
            durable: true,
            arguments: args,
            ..QueueDeclareOptions::default()
        };
        c.queue_declare(queue, opts)
            .map(|_| ())
            .map_err(|e| format!("upstream queue '{queue}': {}", reason(&e)))
    }
}

/// A URI for messages: credentials left out.
fn redact_uri(uri: &AmqpUri) -> String {
    format!(
        "{}://{}",
        if uri.tls { "amqps" } else { "amqp" },
        uri.addr()
    )
}

/// The upstream queue's name (`upstream_queue_name/3`): `federation: X -> NODE`, with
/// `:VHOST:X` when the downstream vhost differs, `:X` when only the exchange does.
fn queue_name(ux: &str, uvhost: &str, node: &str, dvhost: &str, dx: &str) -> String {
    let down = if dvhost != uvhost {
        format!(":{dvhost}:{dx}")
    } else if dx != ux {
        format!(":{dx}")
    } else {
        String::new()
    };
    format!("federation: {ux} -> {node}{down}")
}

/// The `x-received-from` entry this link adds (`update_routing_headers/5`), without
/// `redelivered`, which is per message.
fn entry(uri: &str, cluster: &str, vhost: &str) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("uri".into(), FieldValue::string(uri));
    t.insert("cluster-name".into(), FieldValue::string(cluster));
    t.insert("vhost".into(), FieldValue::string(vhost));
    t
}

/// Whether a message with `headers` may cross this link
/// (`rabbit_federation_util:should_forward/4`): fewer than `max_hops` entries in its
/// `x-received-from`, none of them this broker's vhost.
pub fn should_forward(
    headers: Option<&FieldTable>,
    max_hops: u32,
    name: &str,
    vhost: &str,
) -> bool {
    let Some(FieldValue::Array(hops)) = headers.and_then(|h| h.get(RECEIVED_FROM)) else {
        return true;
    };
    let seen = hops.iter().any(|h| match h {
        FieldValue::Table(t) => {
            t.get("cluster-name").and_then(FieldValue::as_str) == Some(name)
                && t.get("vhost").and_then(FieldValue::as_str) == Some(vhost)
        }
        _ => false,
    });
    (hops.len() as u64) < u64::from(max_hops) && !seen
}

/// The bindings the link's queue has upstream, kept equal to the downstream exchange's
/// binding keys and arguments.
struct Bindings {
    bound: Vec<(String, FieldTable)>,
    /// The topology version they were last checked at.
    version: u64,
    checked: Instant,
}

impl Bindings {
    /// Binds what the downstream exchange has and the queue not, unbinds the rest.
    ///
    /// # Errors
    /// The upstream's refusal; the downstream exchange is gone.
    fn sync(
        &mut self,
        broker: &Broker,
        link: &Link,
        c: &mut Connection,
        queue: &str,
        ux: &str,
    ) -> Result<(), String> {
        let now = Instant::now();
        if now.duration_since(self.checked) < BINDINGS_POLL {
            return Ok(());
        }
        self.checked = now;
        let version = topology::version();
        if version == self.version {
            return Ok(());
        }
        let x = broker
            .vhost(&link.vhost)
            .and_then(|v| v.exchange(&link.exchange))
            .ok_or_else(|| format!("the downstream exchange '{}' is gone", link.exchange))?;
        let mut want: Vec<(String, FieldTable)> = Vec::new();
        for b in x.router().bindings() {
            let k = (b.binding_key, b.arguments);
            if !want.contains(&k) {
                want.push(k);
            }
        }
        for (key, args) in want.iter().filter(|k| !self.bound.contains(k)) {
            c.queue_bind(queue, ux, key, args.clone())
                .map_err(|e| format!("binding upstream '{key}': {}", reason(&e)))?;
        }
        for (key, args) in self.bound.iter().filter(|k| !want.contains(k)) {
            let unbind = AmqpMethod::QueueUnbind {
                queue: queue.into(),
                exchange: ux.into(),
                routing_key: key.clone(),
                arguments: args.clone(),
            };
            c.call(&unbind, |m| matches!(m, AmqpMethod::QueueUnbindOk {}))
                .map_err(|e| format!("unbinding upstream '{key}': {}", reason(&e)))?;
        }
        self.bound = want;
        self.version = version;
        Ok(())
    }
}

/// The link's part of the forwarding loop.
struct LinkForwarding<'a> {
    link: &'a Link,
    broker: &'a Broker,
    control: Connection,
    bindings: Bindings,
    queue: String,
    upstream_exchange: String,
    /// This link's `x-received-from` entry (without `redelivered`).
    entry: FieldTable,
    /// This broker's cluster name.
    local_name: String,
}

impl Forwarding for LinkForwarding<'_> {
    fn prepare(&mut self, m: &mut Shovelled) -> Result<Option<(String, String)>, String> {
        let u = &self.link.upstream;
        if !should_forward(
            m.properties.headers.as_ref(),
            u.max_hops,
            &self.local_name,
            &self.link.vhost,
        ) {
            return Ok(None);
        }
        let mut e = self.entry.clone();
        e.insert(
            "exchange".into(),
            FieldValue::string(&self.upstream_exchange),
        );
        e.insert("redelivered".into(), FieldValue::Bool(m.redelivered));
        let headers = m.properties.headers.get_or_insert_with(FieldTable::new);
        let mut hops = match headers.remove(RECEIVED_FROM) {
            Some(FieldValue::Array(a)) => a,
            _ => Vec::new(),
        };
        hops.insert(0, FieldValue::Table(e));
        headers.insert(RECEIVED_FROM.into(), FieldValue::Array(hops));
        if !u.trust_user_id {
            m.properties.user_id = None;
        }
        Ok(Some((
            self.link.exchange.clone(),
            std::mem::take(&mut m.routing_key),
        )))
    }

    fn tick(&mut self) -> Result<(), String> {
        // The control connection is idle between binding changes: the tick reads its
        // heartbeats.
        self.control.keep_alive().map_err(|e| reason(&e))?;
        self.bindings.sync(
            self.broker,
            self.link,
            &mut self.control,
            &self.queue,
            &self.upstream_exchange,
        )
    }

    fn stopping(&self) -> bool {
        self.link.stopping()
    }

    fn report(&mut self, p: Progress) {
        self.link.set(|s| {
            s.forwarded += p.forwarded;
            s.pending = p.pending;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_as_rabbitmq() {
        assert_eq!(queue_name("x", "/", "n", "/", "x"), "federation: x -> n");
        assert_eq!(queue_name("x", "/", "n", "/", "y"), "federation: x -> n:y");
        assert_eq!(
            queue_name("x", "/", "n", "v", "y"),
            "federation: x -> n:v:y"
        );
    }

    #[test]
    fn hops_and_cycles_stop_forwarding() {
        assert!(should_forward(None, 1, "a", "/"));
        let mut h = FieldTable::new();
        h.insert(
            RECEIVED_FROM.into(),
            FieldValue::Array(vec![FieldValue::Table(entry("u", "b", "/"))]),
        );
        assert!(!should_forward(Some(&h), 1, "a", "/"));
        assert!(should_forward(Some(&h), 2, "a", "/"));
        assert!(
            !should_forward(Some(&h), 2, "b", "/"),
            "this broker's vhost was passed"
        );
        assert!(should_forward(Some(&h), 2, "b", "other"));
    }
}
