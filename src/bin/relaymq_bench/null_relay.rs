//! `--null-relay`: a relay inside the bench's own process that only parses and forwards
//! native-protocol frames, so a run's figures can be read as a fraction of what this
//! machine's loopback, the client library and the codec allow.
//!
//! The relay listens on `127.0.0.1` (an ephemeral port) and runs one blocking thread per
//! connection. It decodes every frame fully with the reference codec
//! ([`relaymq::native`]): the same `Method::decode` the server uses, so its figures are a
//! baseline for "parse and forward", not a memcpy. It keeps no queue, no storage and no
//! routing table; its only state is a map from queue name to the consumers subscribed to
//! it, and the kind of each declared exchange.
//!
//! | request | answer |
//! |---|---|
//! | `connection.open` | `open-ok`: `frame_max` and `channel_max` negotiated as the server does, heartbeats off |
//! | `channel.open`, `qos`, `confirm.select`, `exchange.*`, `queue.bind`/`unbind`, `basic.cancel`, `basic.recover`, `vhost.*` | `ok` |
//! | `queue.declare` / `delete` / `purge` | `declare-ok` (0 messages) / `delete-ok` 0 / `purge-ok` 0 |
//! | `basic.consume` | `consume-ok`, then the consumer joins its queue's entry in the map |
//! | `basic.get` | `get-empty` |
//! | `basic.publish` | each message becomes a delivery (one `basic.deliver` batch per consumer per publish batch); with confirms, one `basic.ack` (multiple) per batch, at once |
//! | `basic.ack` / `nack` / `reject` | parsed, nothing else (nothing is held) |
//! | `channel.close` / `connection.close` | `close-ok`; the channel's or connection's consumers leave the map |
//!
//! Routing, per message (the choice documented in `docs/benchmarks.md`):
//!
//! 1. a routing key that names a consumed queue: one consumer of that queue (the default
//!    exchange, and `direct`/`topic` as the bench binds them: key = queue name; topic
//!    wildcards are not evaluated);
//! 2. otherwise, an exchange declared `fanout`: one consumer of every consumed queue;
//! 3. otherwise, an exchange declared `headers`: the first header whose value is a string
//!    naming a consumed queue;
//! 4. otherwise the message is dropped (no `basic.return`, even when mandatory).
//!
//! Among the consumers of one queue, deliveries go round robin. Prefetch, acks and
//! redeliveries do not exist here: every delivery is sent at once, and a slow consumer
//! slows its producers down through TCP.

use super::args::Options;
use super::BenchError;
use relaymq::limits::{
    BATCH_ITEMS_MAX, CHANNEL_MAX, FRAME_BYTES_DEFAULT, FRAME_BYTES_HANDSHAKE, FRAME_BYTES_MIN,
    PAYLOAD_BYTES_MAX,
};
use relaymq::native::frame::{self, FrameType, Payload};
use relaymq::native::method::encode_delivery;
use relaymq::native::{FrameAssembler, Method, PublishMessage, PROTOCOL_HEADER};
use relaymq::types::codec::{put_u16, put_u32};
use relaymq::types::FieldTable;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Bytes of a connection's read buffer: room for the rest of a frame (at most
/// `FRAME_BYTES_DEFAULT`, the largest frame the relay accepts) plus as much again.
const READ_BUFFER_BYTES: usize = 2 * FRAME_BYTES_DEFAULT as usize;

/// The version string `open-ok` carries, so a client can tell it is not a server.
const RELAY_VERSION: &str = "relaymq-bench-null-relay";

/// Method id of `basic.deliver` (`docs/protocol.md` §7).
const DELIVER_METHOD_ID: u16 = 0x0056;

/// Reply code of a frame the relay cannot parse (501 FRAME_ERROR).
const FRAME_ERROR: u16 = 501;

/// Reply code of a payload the relay cannot decode (502 SYNTAX_ERROR).
const SYNTAX_ERROR: u16 = 502;

/// Reply code of a method a client may not send (503 COMMAND_INVALID).
const COMMAND_INVALID: u16 = 503;

/// Reply code of a refused `frame_max` (530 NOT_ALLOWED).
const NOT_ALLOWED: u16 = 530;

/// A running null relay. Its threads live as long as the process: the bench exits when
/// the run is over.
pub struct NullRelay {
    addr: SocketAddr,
}

impl NullRelay {
    /// Starts the relay on `127.0.0.1` with an ephemeral port.
    ///
    /// # Errors
    /// The I/O error of binding the listener or starting its thread.
    pub fn start() -> io::Result<NullRelay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let relay = Arc::new(Relay::default());
        std::thread::Builder::new()
            .name("null-relay-accept".into())
            .spawn(move || accept_loop(listener, relay))?;
        Ok(NullRelay { addr })
    }

    /// `HOST:PORT` clients connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }
}

/// With `--null-relay`, starts a relay and points the run at it.
///
/// Returns `None` without `--null-relay`.
///
/// # Errors
/// [`BenchError::Run`] when the relay cannot start.
pub fn attach(opts: &mut Options) -> Result<Option<NullRelay>, BenchError> {
    if !opts.null_relay {
        return Ok(None);
    }
    if opts.target.protocol != super::uri::Protocol::Native {
        return Err(BenchError::Usage(
            "--null-relay speaks the native protocol only: drop the amqp:// --uri".into(),
        ));
    }
    let relay = NullRelay::start()
        .map_err(|e| BenchError::Run(format!("cannot start the null relay: {e}")))?;
    opts.target.addr = relay.addr();
    Ok(Some(relay))
}

/// Adds `"null_relay": true` to the summary of a run against a null relay.
pub fn mark_json(relay: Option<&NullRelay>, v: &mut serde_json::Value) {
    if relay.is_some() {
        v["null_relay"] = serde_json::Value::Bool(true);
    }
}

/// Says, above the summary of a run against a null relay, that no broker was measured.
pub fn mark_text(relay: Option<&NullRelay>, summary: String) -> String {
    match relay {
        Some(r) => format!(
            "null relay on {} (parse and forward only, in this process; no server RSS)\n{summary}",
            r.addr()
        ),
        None => summary,
    }
}

/// State shared by every connection of the relay.
#[derive(Default)]
struct Relay {
    /// Queue name → its consumers (only queues with at least one consumer).
    queues: RwLock<HashMap<String, Arc<QueueConsumers>>>,
    /// Exchange name → kind, from `exchange.declare`.
    exchange_kinds: RwLock<HashMap<String, String>>,
    /// Source of connection and consumer ids, and of generated names.
    next_id: AtomicU64,
}

/// The consumers of one queue.
struct QueueConsumers {
    consumers: Vec<ConsumerRef>,
    /// Round-robin position.
    next: AtomicUsize,
}

/// One subscribed consumer.
#[derive(Clone)]
struct ConsumerRef {
    /// Unique among the relay's consumers.
    id: u64,
    /// Id of the connection it belongs to.
    conn_id: u64,
    channel: u16,
    tag: String,
    out: Arc<Out>,
    /// Set when the consumer leaves, before its `ok` is sent: no delivery follows it.
    cancelled: Arc<AtomicBool>,
}

/// The writing side of a connection, shared by its reader and by the producers that
/// forward deliveries to it.
struct Out {
    state: Mutex<OutState>,
}

struct OutState {
    stream: TcpStream,
    /// Encoding buffer, written out and cleared by every send.
    buf: Vec<u8>,
    frame_max: u32,
    /// Next delivery tag per channel (index = channel number).
    next_delivery_tag: Vec<u64>,
    /// A write failed: the peer is gone, nothing more is sent.
    dead: bool,
}

impl Out {
    fn lock(&self) -> std::sync::MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends one method on `channel`.
    fn send(&self, channel: u16, request_id: u32, m: &Method) {
        let mut s = self.lock();
        let frame_max = s.frame_max;
        frame::write_method(&mut s.buf, channel, frame_max, |out| {
            m.encode(request_id, out)
        });
        s.flush();
    }
}

impl OutState {
    fn flush(&mut self) {
        if !self.dead && self.stream.write_all(&self.buf).is_err() {
            self.dead = true;
        }
        self.buf.clear();
    }

    /// Reserves `n` delivery tags on `channel`; returns the first.
    fn take_tags(&mut self, channel: u16, n: u64) -> u64 {
        let i = usize::from(channel);
        if self.next_delivery_tag.len() <= i {
            self.next_delivery_tag.resize(i + 1, 1);
        }
        let first = self.next_delivery_tag[i];
        self.next_delivery_tag[i] += n;
        first
    }
}

fn accept_loop(listener: TcpListener, relay: Arc<Relay>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let relay = Arc::clone(&relay);
        let spawned = std::thread::Builder::new()
            .name("null-relay-conn".into())
            .spawn(move || {
                let conn_id = relay.next_id.fetch_add(1, Ordering::Relaxed) + 1;
                if let Err(e) = serve(&relay, conn_id, stream) {
                    log::debug!("null relay: connection {conn_id}: {e}");
                }
                relay.forget_consumers(conn_id, None);
            });
        if let Err(e) = spawned {
            log::warn!("null relay: cannot start a connection thread: {e}");
        }
    }
}

/// Why a connection ends.
type Closing = String;

/// One connection: the header, then frames until `connection.close` or EOF.
fn serve(relay: &Relay, conn_id: u64, mut stream: TcpStream) -> Result<(), Closing> {
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).map_err(|e| e.to_string())?;
    if header != PROTOCOL_HEADER {
        let _ = stream.write_all(&PROTOCOL_HEADER);
        return Err("bad protocol header".into());
    }
    let out = Arc::new(Out {
        state: Mutex::new(OutState {
            stream: stream.try_clone().map_err(|e| e.to_string())?,
            buf: Vec::new(),
            frame_max: FRAME_BYTES_HANDSHAKE,
            next_delivery_tag: Vec::new(),
            dead: false,
        }),
    });
    let mut conn = Conn {
        relay,
        conn_id,
        out,
        frame_max: FRAME_BYTES_HANDSHAKE,
        opened: false,
        confirm_seq: HashMap::new(),
        closing: false,
    };
    let mut asm = FrameAssembler::new(PAYLOAD_BYTES_MAX);
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    debug_assert!(READ_BUFFER_BYTES > FRAME_BYTES_DEFAULT as usize);
    let mut filled = 0;
    loop {
        // Whole frames are consumed below, so what is left is less than one frame, which
        // is at most FRAME_BYTES_DEFAULT (the relay's offer), half the buffer.
        let n = stream.read(&mut buf[filled..]).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the client closed the socket".into());
        }
        filled += n;
        let mut at = 0;
        loop {
            let (h, len) = match frame::check(&buf[at..filled], conn.frame_max) {
                Ok(Some(found)) => found,
                Ok(None) => break,
                Err(e) => return conn.fail(FRAME_ERROR, &e.to_string()),
            };
            let payload = &buf[at + frame::FRAME_HEADER_BYTES..at + len];
            at += len;
            if h.frame_type == FrameType::Heartbeat {
                continue;
            }
            match asm.push(&h, payload) {
                Ok(Some(Payload::Whole(ch, p))) => conn.handle(ch, p)?,
                Ok(Some(Payload::Joined(ch, p))) => conn.handle(ch, &p)?,
                Ok(Some(Payload::Oversized { .. })) => {
                    return conn.fail(FRAME_ERROR, "payload too large")
                }
                Ok(None) => {}
                Err(e) => return conn.fail(FRAME_ERROR, &e.to_string()),
            }
            if conn.closing {
                return Ok(());
            }
        }
        buf.copy_within(at..filled, 0);
        filled -= at;
    }
}

/// A connection as its reader thread sees it.
struct Conn<'a> {
    relay: &'a Relay,
    conn_id: u64,
    out: Arc<Out>,
    /// Frame size in force for what the client sends, bytes.
    frame_max: u32,
    /// `connection.open` was answered.
    opened: bool,
    /// Channels in confirm mode → publishes seen on them.
    confirm_seq: HashMap<u16, u64>,
    /// `connection.close` was answered: stop reading.
    closing: bool,
}

impl Conn<'_> {
    /// Sends `connection.close` with `code` and ends the connection.
    fn fail(&mut self, code: u16, why: &str) -> Result<(), Closing> {
        let close = Method::Close {
            reply_code: code,
            reply_text: why.chars().take(200).collect(),
            method_id: 0,
        };
        self.out.send(0, 0, &close);
        Err(why.to_string())
    }

    /// Decodes one payload and answers it.
    fn handle(&mut self, channel: u16, payload: &[u8]) -> Result<(), Closing> {
        let (rid, m) = match Method::decode(payload) {
            Ok(decoded) => decoded,
            Err(e) => return self.fail(SYNTAX_ERROR, &e.to_string()),
        };
        if !self.opened {
            return self.open(rid, m);
        }
        let reply = match m {
            Method::Publish { messages } => {
                self.publish(channel, &messages);
                None
            }
            Method::Ack { .. } | Method::Nack { .. } | Method::Reject { .. } => None,
            Method::ChannelOpen
            | Method::BasicQos { .. }
            | Method::QueueBind { .. }
            | Method::QueueUnbind { .. }
            | Method::ExchangeBind { .. }
            | Method::ExchangeUnbind { .. }
            | Method::Recover { .. }
            | Method::VhostDeclare { .. }
            | Method::VhostDelete { .. } => Some(Method::Ok),
            Method::ConfirmSelect => {
                self.confirm_seq.entry(channel).or_insert(0);
                Some(Method::Ok)
            }
            Method::ExchangeDeclare { exchange, kind, .. } => {
                write(&self.relay.exchange_kinds).insert(exchange, kind);
                Some(Method::Ok)
            }
            Method::ExchangeDelete { exchange, .. } => {
                write(&self.relay.exchange_kinds).remove(&exchange);
                Some(Method::Ok)
            }
            Method::QueueDeclare { queue, .. } => Some(self.queue_declare(queue)),
            Method::QueueDelete { queue, .. } => {
                write(&self.relay.queues).remove(&queue);
                Some(Method::QueueDeleteOk { message_count: 0 })
            }
            Method::QueuePurge { .. } => Some(Method::QueuePurgeOk { message_count: 0 }),
            Method::BasicConsume {
                queue,
                consumer_tag,
                ..
            } => {
                self.consume(channel, rid, queue, consumer_tag);
                None
            }
            Method::BasicCancel { consumer_tag } => {
                self.relay
                    .forget_consumers(self.conn_id, Some((channel, Some(&consumer_tag))));
                Some(Method::Ok)
            }
            Method::BasicGet { .. } => Some(Method::GetEmpty),
            Method::List { .. } => Some(Method::ListOk { rows: Vec::new() }),
            Method::Status => Some(Method::StatusOk {
                info: FieldTable::new(),
            }),
            Method::ChannelClose { .. } => {
                self.relay
                    .forget_consumers(self.conn_id, Some((channel, None)));
                self.confirm_seq.remove(&channel);
                Some(Method::CloseOk)
            }
            Method::Close { .. } => {
                self.out.send(0, rid, &Method::CloseOk);
                self.closing = true;
                None
            }
            Method::CloseOk => {
                self.closing = true;
                None
            }
            other => {
                return self.fail(
                    COMMAND_INVALID,
                    &format!("{} may not be sent by a client", other.name()),
                )
            }
        };
        if let Some(r) = reply {
            self.out.send(channel, rid, &r);
        }
        Ok(())
    }

    /// Answers `connection.open`, negotiating as the server does (`docs/protocol.md` §4)
    /// except heartbeats, which the relay switches off.
    fn open(&mut self, rid: u32, m: Method) -> Result<(), Closing> {
        let Method::Open {
            frame_max,
            channel_max,
            ..
        } = m
        else {
            return self.fail(COMMAND_INVALID, "expected connection.open");
        };
        if frame_max != 0 && frame_max < FRAME_BYTES_MIN {
            return self.fail(NOT_ALLOWED, "frame_max below the minimum");
        }
        let frame_max = if frame_max == 0 {
            FRAME_BYTES_DEFAULT
        } else {
            frame_max.min(FRAME_BYTES_DEFAULT)
        };
        let channel_max = if channel_max == 0 {
            CHANNEL_MAX
        } else {
            channel_max.min(CHANNEL_MAX)
        };
        self.out.send(
            0,
            rid,
            &Method::OpenOk {
                frame_max,
                heartbeat_s: 0,
                channel_max,
                server_version: RELAY_VERSION.into(),
                connection_id: self.conn_id,
            },
        );
        self.out.lock().frame_max = frame_max;
        self.frame_max = frame_max;
        self.opened = true;
        Ok(())
    }

    fn queue_declare(&self, queue: String) -> Method {
        let queue = if queue.is_empty() {
            let n = self.relay.next_id.fetch_add(1, Ordering::Relaxed) + 1;
            format!("null-relay.gen-{n}")
        } else {
            queue
        };
        let consumer_count = read(&self.relay.queues)
            .get(&queue)
            .map_or(0, |q| q.consumers.len() as u32);
        Method::QueueDeclareOk {
            queue,
            message_count: 0,
            consumer_count,
        }
    }

    /// Answers `basic.consume`, then adds the consumer to its queue (so no delivery can
    /// precede the `consume-ok`).
    fn consume(&self, channel: u16, rid: u32, queue: String, tag: String) {
        let id = self.relay.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let tag = if tag.is_empty() {
            format!("null-relay.ctag-{id}")
        } else {
            tag
        };
        self.out.send(
            channel,
            rid,
            &Method::BasicConsumeOk {
                consumer_tag: tag.clone(),
            },
        );
        let consumer = ConsumerRef {
            id,
            conn_id: self.conn_id,
            channel,
            tag,
            out: Arc::clone(&self.out),
            cancelled: Arc::new(AtomicBool::new(false)),
        };
        let mut queues = write(&self.relay.queues);
        let mut consumers = queues
            .get(&queue)
            .map_or_else(Vec::new, |q| q.consumers.clone());
        consumers.push(consumer);
        queues.insert(
            queue,
            Arc::new(QueueConsumers {
                consumers,
                next: AtomicUsize::new(0),
            }),
        );
    }

    /// Turns a publish batch into deliveries, one `basic.deliver` batch per consumer,
    /// then confirms the whole batch when the channel is in confirm mode.
    fn publish(&mut self, channel: u16, messages: &[PublishMessage]) {
        let mut targets: Vec<(ConsumerRef, Vec<usize>)> = Vec::new();
        let mut index_of: HashMap<u64, usize> = HashMap::new();
        {
            let queues = read(&self.relay.queues);
            let kinds = read(&self.relay.exchange_kinds);
            let mut add = |q: &QueueConsumers, m: usize| {
                let n = q.next.fetch_add(1, Ordering::Relaxed) % q.consumers.len();
                let c = &q.consumers[n];
                let i = *index_of.entry(c.id).or_insert_with(|| {
                    targets.push((c.clone(), Vec::new()));
                    targets.len() - 1
                });
                targets[i].1.push(m);
            };
            for (m, msg) in messages.iter().enumerate() {
                if let Some(q) = queues.get(&msg.routing_key) {
                    add(q, m);
                    continue;
                }
                match kinds.get(&msg.exchange).map(String::as_str) {
                    Some("fanout") => queues.values().for_each(|q| add(q, m)),
                    Some("headers") => {
                        let named = msg.properties.headers.as_ref().and_then(|h| {
                            h.values()
                                .find_map(|v| v.as_str().and_then(|s| queues.get(s)))
                        });
                        if let Some(q) = named {
                            add(q, m);
                        }
                    }
                    _ => {}
                }
            }
        }
        for (c, items) in &targets {
            deliver(c, messages, items);
        }
        if let Some(seq) = self.confirm_seq.get_mut(&channel) {
            *seq += messages.len() as u64;
            if !messages.is_empty() {
                let ack = Method::Ack {
                    delivery_tag: *seq,
                    multiple: true,
                };
                self.out.send(channel, 0, &ack);
            }
        }
    }
}

/// Sends `messages[items]` to consumer `c` as `basic.deliver` batches of at most
/// [`BATCH_ITEMS_MAX`] deliveries.
fn deliver(c: &ConsumerRef, messages: &[PublishMessage], items: &[usize]) {
    let mut s = c.out.lock();
    if s.dead || c.cancelled.load(Ordering::SeqCst) {
        return;
    }
    let frame_max = s.frame_max;
    for chunk in items.chunks(BATCH_ITEMS_MAX) {
        let first_tag = s.take_tags(c.channel, chunk.len() as u64);
        frame::write_method(&mut s.buf, c.channel, frame_max, |out| {
            put_u16(out, DELIVER_METHOD_ID);
            put_u32(out, 0);
            put_u32(out, chunk.len() as u32);
            for (k, &m) in chunk.iter().enumerate() {
                let msg = &messages[m];
                encode_delivery(
                    out,
                    &c.tag,
                    first_tag + k as u64,
                    false,
                    &msg.exchange,
                    &msg.routing_key,
                    &msg.properties,
                    &msg.body,
                );
            }
        });
    }
    s.flush();
}

impl Relay {
    /// Removes the consumers of connection `conn_id`: all of them, those of one channel
    /// (`Some((channel, None))`) or one tag (`Some((channel, Some(tag)))`).
    fn forget_consumers(&self, conn_id: u64, only: Option<(u16, Option<&str>)>) {
        let mut queues = write(&self.queues);
        let gone = |c: &ConsumerRef| {
            c.conn_id == conn_id
                && only.is_none_or(|(ch, tag)| {
                    c.channel == ch && tag.is_none_or(|t| t == c.tag.as_str())
                })
        };
        let touched: Vec<String> = queues
            .iter()
            .filter(|(_, q)| q.consumers.iter().any(gone))
            .map(|(name, _)| name.clone())
            .collect();
        for name in touched {
            let mut left = Vec::new();
            for c in &queues[&name].consumers {
                if gone(c) {
                    c.cancelled.store(true, Ordering::SeqCst);
                } else {
                    left.push(c.clone());
                }
            }
            if left.is_empty() {
                queues.remove(&name);
            } else {
                queues.insert(
                    name,
                    Arc::new(QueueConsumers {
                        consumers: left,
                        next: AtomicUsize::new(0),
                    }),
                );
            }
        }
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use relaymq::client::{Connection, ConsumeOptions, ConsumerEvent, QueueDeclareOptions};
    use relaymq::types::BasicProperties;
    use std::time::Duration;

    #[test]
    fn forwards_a_published_message_and_confirms_it() {
        let relay = NullRelay::start().unwrap();
        let conn = Connection::connect(&relay.addr()).unwrap();
        let ch = conn.open_channel().unwrap();
        ch.queue_declare("q", QueueDeclareOptions::default())
            .unwrap();
        let consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
        ch.confirm_select().unwrap();
        ch.basic_publish("", "q", false, &BasicProperties::default(), b"hi")
            .unwrap();
        assert!(ch.wait_for_confirms(Duration::from_secs(5)).unwrap());
        match consumer.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConsumerEvent::Delivery(d) => {
                assert_eq!(d.body, b"hi");
                assert_eq!(d.delivery_tag, 1);
            }
            ConsumerEvent::Cancelled => panic!("cancelled"),
        }
        assert!(ch.basic_get("q", true).unwrap().is_none());
        drop(consumer);
        ch.close().unwrap();
        conn.close().unwrap();
    }
}
