//! One shovel's thread: connect both ends, set up their topology, move messages, and on
//! any failure report `terminated` with the reason, wait `reconnect-delay` and start
//! over (RabbitMQ's `rabbit_shovel_worker` under its restarting supervisor).
//!
//! Moving, per round: take what the source delivered (waiting briefly), publish each
//! message to the destination, then settle the source by the ack mode: `on-confirm`
//! acks a message once the destination confirmed it (a nack requeues it at the source),
//! `on-publish` acks it once written, `no-ack` consumed it unacknowledged. Source
//! deliveries and destination confirms are both in publish order, so the settled front
//! of the in-flight list is acked with one `multiple` ack.

use super::endpoint::remote::{self, RemoteDest, RemoteSource};
use super::endpoint::{reason, Dest, Shovelled, Source};
use super::forward::{self, Ended, Forwarding, Progress};
use super::local::LocalEnd;
use super::{ShovelState, ShovelStatus, SHOVEL_COMPONENT};
use crate::amqp_client::uri::{redact, AmqpUri};
use crate::amqp_client::Connection;
use crate::broker::node::Broker;
use crate::broker::shovel_definition::{AckMode, DeleteAfter, ShovelDef, SourceSpec};
use crate::types::{FieldTable, FieldValue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest the thread sleeps between looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Heartbeat asked for on remote connections whose URI names none, seconds (RabbitMQ's
/// Erlang client's default).
pub const HEARTBEAT_S_DEFAULT: u16 = 10;

/// Time allowed for each reply of a remote end during setup.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

/// What a shovel's thread needs.
pub(super) struct Worker {
    pub(super) broker: Weak<Broker>,
    pub(super) vhost: String,
    pub(super) name: String,
    pub(super) def: ShovelDef,
    pub(super) status: Arc<Mutex<ShovelStatus>>,
    pub(super) stop: Arc<AtomicBool>,
    /// The cluster's name (`shovelled-by` of the forward headers).
    pub(super) cluster: String,
}

impl Worker {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn set(&self, f: impl FnOnce(&mut ShovelStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn label(&self) -> String {
        format!("'{}' in virtual host '{}'", self.name, self.vhost)
    }

    /// The thread's body: runs the shovel until stopped, restarting after failures.
    pub(super) fn run(self) {
        loop {
            self.set(|s| s.set_state(ShovelState::Starting));
            match self.run_once() {
                Ended::Stopped => return,
                Ended::Done => {
                    log::info!(
                        "shovel {} is stopping: it moved what src-delete-after asked for",
                        self.label()
                    );
                    if let Some(b) = self.broker.upgrade() {
                        if let Err(e) = b.clear_parameter(&self.vhost, SHOVEL_COMPONENT, &self.name)
                        {
                            log::warn!("shovel {}: clearing its parameter: {e}", self.label());
                        }
                    }
                    return;
                }
                Ended::Failed(why) => {
                    log::warn!("shovel {} terminated: {why}", self.label());
                    self.set(|s| s.set_state(ShovelState::Terminated(why)));
                }
            }
            if self.def.reconnect_delay.is_zero() {
                // RabbitMQ's `reconnect-delay: 0`: no reconnecting; it stays terminated
                // until set again or restarted.
                return;
            }
            let until = Instant::now() + self.def.reconnect_delay;
            while Instant::now() < until {
                if self.stopping() {
                    return;
                }
                std::thread::sleep((until - Instant::now()).min(STOP_POLL));
            }
            if self.stopping() {
                return;
            }
        }
    }

    /// Connects a remote end to one of `uris` (picked at random, as RabbitMQ), or
    /// opens a local one; returns it and the URI shown (redacted).
    fn connect(&self, uris: &[String], role: &str) -> Result<(End, String), String> {
        let pick = uris[(crate::links::shovel::random() as usize) % uris.len()].clone();
        let shown = redact(&pick);
        let uri = AmqpUri::parse(&pick).map_err(|e| format!("\"{shown}\" not a valid URI: {e}"))?;
        let broker = self
            .broker
            .upgrade()
            .ok_or_else(|| "the broker is stopping".to_string())?;
        if uri.is_local() {
            let end = LocalEnd::open(&broker, &uri.vhost)?;
            return Ok((End::Local(Box::new(end)), shown));
        }
        let shovels = &crate::links::Links::of(&broker)
            .ok_or_else(|| "the broker is stopping".to_string())?
            .shovels;
        let tls = shovels.tls_defaults();
        let mut opts = uri.connect_options(&format!("Shovel {}", self.name), tls.as_ref())?;
        if uri.heartbeat.is_none() {
            opts.heartbeat = HEARTBEAT_S_DEFAULT;
        }
        opts.reply_timeout = REPLY_TIMEOUT;
        let socket = shovels.take_socket().ok_or_else(|| {
            format!(
                "no file descriptor left for the {role} connection (the sockets budget is used up)"
            )
        })?;
        let conn = Connection::connect(&opts).map_err(|e| reason(&e))?;
        Ok((End::Remote(Box::new(conn), Some(socket)), shown))
    }

    /// One run: connect, set up, move until stopped or failed.
    fn run_once(&self) -> Ended {
        let (src, src_uri) = match self.connect(&self.def.src_uris, "source") {
            Ok(x) => x,
            Err(why) => return Ended::Failed(format!("failed to connect to source: {why}")),
        };
        if self.stopping() {
            return Ended::Stopped;
        }
        let (dest, dest_uri) = match self.connect(&self.def.dest_uris, "destination") {
            Ok(x) => x,
            Err(why) => return Ended::Failed(format!("failed to connect to destination: {why}")),
        };
        if self.stopping() {
            return Ended::Stopped;
        }
        let (mut dest, _dest_socket) = match self.init_dest(dest) {
            Ok(d) => d,
            Err(why) => return Ended::Failed(format!("failed to set up topology: {why}")),
        };
        let (mut src, remaining, _src_socket) = match self.init_source(src) {
            Ok(s) => s,
            Err(why) => return Ended::Failed(format!("failed to set up topology: {why}")),
        };
        if remaining == Some(0) {
            return Ended::Done;
        }
        self.set(|s| {
            s.src_uri = src_uri.clone();
            s.dest_uri = dest_uri.clone();
            s.remaining = remaining;
            s.set_state(ShovelState::Running);
        });
        log::info!("shovel {} running: {src_uri} -> {dest_uri}", self.label());
        let mut f = ShovelForwarding {
            w: self,
            forward_header: self
                .def
                .add_forward_headers
                .then(|| self.forward_header(&src_uri, &dest_uri)),
        };
        forward::run(
            src.as_mut(),
            dest.as_mut(),
            self.def.ack_mode,
            remaining,
            &mut f,
        )
    }

    fn init_dest(&self, end: End) -> Result<(Box<dyn Dest>, Option<super::SocketGuard>), String> {
        let confirms = self.def.ack_mode == AckMode::OnConfirm;
        match end {
            End::Local(mut l) => {
                if let Some(q) = &self.def.dest_queue {
                    l.ensure_queue(q, &self.def.dest_queue_args, self.def.dest_predeclared)
                        .map_err(|e| format!("destination queue '{q}': {e}"))?;
                }
                Ok((Box::new(l.publisher(confirms)?), None))
            }
            End::Remote(mut c, socket) => {
                if let Some(q) = &self.def.dest_queue {
                    remote::ensure_queue(
                        &mut c,
                        q,
                        &self.def.dest_queue_args,
                        self.def.dest_predeclared,
                    )
                    .map_err(|e| format!("destination queue '{q}': {}", reason(&e)))?;
                }
                if confirms {
                    c.confirm_select().map_err(|e| reason(&e))?;
                    c.record_confirms().map_err(|e| reason(&e))?;
                }
                Ok((Box::new(RemoteDest { conn: *c }), socket))
            }
        }
    }

    /// Sets up the source and starts consuming; returns it and the messages left to move
    /// (`src-delete-after`; `None`: unlimited).
    #[allow(
        clippy::type_complexity,
        reason = "a private tuple of what setup yields"
    )]
    fn init_source(
        &self,
        end: End,
    ) -> Result<(Box<dyn Source>, Option<u64>, Option<super::SocketGuard>), String> {
        let d = &self.def;
        let no_ack = d.ack_mode == AckMode::NoAck;
        let (queue_len, queue): (u32, String);
        match end {
            End::Local(mut l) => {
                match &d.source {
                    SourceSpec::Queue {
                        name,
                        args,
                        predeclared,
                    } => {
                        queue_len = l
                            .ensure_queue(name, args, *predeclared)
                            .map_err(|e| format!("source queue '{name}': {e}"))?;
                        queue = name.clone();
                    }
                    SourceSpec::Exchange { name, key } => {
                        queue = l
                            .bind_exchange(name, key)
                            .map_err(|e| format!("source exchange '{name}': {e}"))?;
                        queue_len = 0;
                    }
                }
                let remaining = remaining(d.src_delete_after, queue_len);
                if remaining == Some(0) {
                    return Ok((
                        Box::new(l.consume(&queue, 1, true, "", &FieldTable::new())?),
                        remaining,
                        None,
                    ));
                }
                let s = l.consume(
                    &queue,
                    d.src_prefetch_count,
                    no_ack,
                    &d.src_consumer_name,
                    &d.src_consumer_args,
                )?;
                Ok((Box::new(s), remaining, None))
            }
            End::Remote(mut c, socket) => {
                match &d.source {
                    SourceSpec::Queue {
                        name,
                        args,
                        predeclared,
                    } => {
                        queue_len = remote::ensure_queue(&mut c, name, args, *predeclared)
                            .map_err(|e| format!("source queue '{name}': {}", reason(&e)))?;
                        queue = name.clone();
                    }
                    SourceSpec::Exchange { name, key } => {
                        let opts = crate::client::QueueDeclareOptions {
                            exclusive: true,
                            ..Default::default()
                        };
                        let q = c.queue_declare("", opts).map_err(|e| reason(&e))?;
                        c.queue_bind(&q.queue, name, key, FieldTable::new())
                            .map_err(|e| format!("source exchange '{name}': {}", reason(&e)))?;
                        queue = q.queue;
                        queue_len = 0;
                    }
                }
                let remaining = remaining(d.src_delete_after, queue_len);
                let s = RemoteSource::consume(
                    *c,
                    &queue,
                    d.src_prefetch_count,
                    no_ack,
                    &d.src_consumer_name,
                    &d.src_consumer_args,
                )
                .map_err(|e| format!("consuming from '{queue}': {}", reason(&e)))?;
                Ok((Box::new(s), remaining, socket))
            }
        }
    }

    /// The `x-shovelled` entry this shovel adds (`rabbit_shovel_util:update_headers/5`):
    /// who shovelled it, from where to where.
    fn forward_header(&self, src_uri: &str, dest_uri: &str) -> FieldTable {
        let mut t = FieldTable::new();
        let mut put = |k: &str, v: &str| {
            t.insert(k.into(), FieldValue::string(v));
        };
        put("shovelled-by", &self.cluster);
        put("shovel-type", "dynamic");
        put("shovel-name", &self.name);
        put("shovel-vhost", &self.vhost);
        put("src-uri", src_uri);
        put("dest-uri", dest_uri);
        for (k, v) in self.def.source_fields() {
            put(&k.replace('_', "-"), &v);
        }
        for (k, v) in self.def.dest_fields() {
            put(&k.replace('_', "-"), &v);
        }
        t
    }
}

/// Messages left to move for `src-delete-after` with `queue_len` ready at start.
fn remaining(after: DeleteAfter, queue_len: u32) -> Option<u64> {
    match after {
        DeleteAfter::Never => None,
        DeleteAfter::QueueLength => Some(u64::from(queue_len)),
        DeleteAfter::Count(n) => Some(n),
    }
}

/// Prepends `entry` to the message's `x-shovelled` header array
/// (`rabbit_basic:prepend_table_header/3`).
fn prepend_forward_header(props: &mut crate::types::BasicProperties, entry: FieldTable) {
    let headers = props.headers.get_or_insert_with(FieldTable::new);
    let mut list = match headers.remove("x-shovelled") {
        Some(FieldValue::Array(a)) => a,
        _ => Vec::new(),
    };
    list.insert(0, FieldValue::Table(entry));
    headers.insert("x-shovelled".into(), FieldValue::Array(list));
}

/// The shovel's part of the forwarding loop: routing, properties, headers, status.
struct ShovelForwarding<'a> {
    w: &'a Worker,
    /// The `x-shovelled` entry, with `add-forward-headers`.
    forward_header: Option<FieldTable>,
}

impl Forwarding for ShovelForwarding<'_> {
    fn prepare(&mut self, m: &mut Shovelled) -> Result<Option<(String, String)>, String> {
        let d = &self.w.def;
        let (exchange, key) = d.route(&m.exchange, &m.routing_key);
        let route = (exchange.to_string(), key.to_string());
        d.set_publish_properties(&mut m.properties);
        if let Some(h) = &self.forward_header {
            prepend_forward_header(&mut m.properties, h.clone());
        }
        if d.add_timestamp_header {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |t| t.as_secs());
            m.properties
                .headers
                .get_or_insert_with(FieldTable::new)
                .insert("x-shovelled-timestamp".into(), FieldValue::I64(now as i64));
        }
        Ok(Some(route))
    }

    fn tick(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn stopping(&self) -> bool {
        self.w.stopping()
    }

    fn report(&mut self, p: Progress) {
        self.w.set(|s| {
            s.forwarded += p.forwarded;
            s.pending = p.pending;
            s.remaining = p.remaining;
            s.backlog = p.backlog;
            s.blocked = p.blocked;
        });
    }
}

/// A connected end, before its role is set up.
enum End {
    /// An in-process session.
    Local(Box<LocalEnd>),
    /// A remote connection, holding its place in the sockets budget.
    Remote(Box<Connection>, Option<super::SocketGuard>),
}
