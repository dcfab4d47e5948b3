//! The producer and consumer sessions of a `relaymq://` run, on a lean native-protocol
//! connection of the bench's own (docs/protocol.md), so the instrument costs the broker's
//! cores as little as possible: no reader thread, no per-message allocation.
//!
//! - A producer encodes each route's publish prefix (exchange, routing key, mandatory,
//!   properties, body length) once; a batch is one `basic.publish` payload written with one
//!   `write()`. Confirms (`basic.ack`/`basic.nack` pushes, `multiple`) are read from the
//!   same socket while waiting for the window.
//! - A consumer reads into one large buffer and walks every `basic.deliver` batch in place,
//!   taking only the delivery tag, the redelivered flag and the body's stamp.
//!
//! The setup session stays on `relaymq::client` ([`native`](super::native)): it is not on
//! the measured path. Heartbeats: the server's interval is accepted and a heartbeat frame
//! is written whenever nothing was written for half of it.

use super::args::Options;
use super::session::{sent_ns_of, Batch, ConsumerSession, DeliveryInfo, ProducerSession, Route};
use relaymq::native::frame::{self, Payload};
use relaymq::native::{FrameAssembler, FrameType, Method, FRAME_HEADER_BYTES, PROTOCOL_HEADER};
use relaymq::types::codec::{put_short_str, put_u16, put_u32, Reader};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bytes asked of the socket per read (many delivery frames per `read()`).
const READ_CHUNK_BYTES: usize = 1024 * 1024;

/// Largest joined payload accepted (a batch split over several frames), bytes.
const PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Time allowed for the server's reply to a request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Time allowed for a write to make progress.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// `frame_max` proposed to the server (its own value or less applies), bytes.
const FRAME_MAX_WISH: u32 = 1024 * 1024;

/// Frames allowed before `connection.open-ok` (the protocol's handshake limit), bytes.
const FRAME_BYTES_HANDSHAKE: u32 = 64 * 1024;

/// Method id of `basic.publish` (docs/protocol.md §7).
const PUBLISH_ID: u16 = 0x0054;

/// Method id of `basic.deliver`.
const DELIVER_ID: u16 = 0x0056;

/// Method id of `basic.ack`.
const ACK_ID: u16 = 0x005a;

/// Method id of `basic.nack`.
const NACK_ID: u16 = 0x005b;

/// The channel every session uses.
const CHANNEL: u16 = 1;

fn io_text(e: io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => "the server closed the connection".into(),
        _ => e.to_string(),
    }
}

/// A whole method payload read from the socket: its channel and bytes.
enum Frame {
    /// A method payload on a channel (joined when it came split).
    Method(u16, Vec<u8>),
    /// The payload is at `rbuf[start..end]` (not copied).
    InPlace(u16, usize, usize),
}

/// One native-protocol connection with one open channel.
struct Wire {
    stream: TcpStream,
    /// Read buffer: unread bytes are `rbuf[start..end]`.
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    assembler: FrameAssembler,
    /// Encoded frames not yet written.
    wbuf: Vec<u8>,
    frame_max: u32,
    next_request: u32,
    /// Half the negotiated heartbeat interval (`None`: heartbeats off).
    heartbeat_every: Option<Duration>,
    last_write: Instant,
    /// The read timeout set on the socket now.
    read_timeout: Option<Duration>,
}

impl Wire {
    /// Connects, sends the protocol header and `connection.open`, waits for `open-ok`,
    /// opens channel 1.
    fn connect(opts: &Options, role: &str) -> Result<Wire, String> {
        let t = &opts.target;
        let stream = TcpStream::connect(&t.addr)
            .map_err(|e| format!("cannot connect to {}: {e}", t.addr))?;
        stream.set_nodelay(true).map_err(io_text)?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(io_text)?;
        let mut w = Wire {
            stream,
            rbuf: Vec::new(),
            start: 0,
            end: 0,
            assembler: FrameAssembler::new(PAYLOAD_BYTES_MAX),
            wbuf: Vec::new(),
            frame_max: FRAME_BYTES_HANDSHAKE,
            next_request: 1,
            heartbeat_every: None,
            last_write: Instant::now(),
            read_timeout: None,
        };
        w.wbuf.extend_from_slice(&PROTOCOL_HEADER);
        let open = Method::Open {
            user: t.user.clone(),
            password: t.password.clone(),
            vhost: t.vhost.clone(),
            frame_max: FRAME_MAX_WISH,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: format!("relaymq-bench {role}"),
        };
        match w.call(0, &open)? {
            Method::OpenOk {
                frame_max,
                heartbeat_s,
                ..
            } => {
                w.frame_max = frame_max;
                w.heartbeat_every =
                    (heartbeat_s > 0).then(|| Duration::from_secs(u64::from(heartbeat_s)) / 2);
            }
            other => return Err(format!("unexpected reply to connection.open: {other:?}")),
        }
        w.call_ok(CHANNEL, &Method::ChannelOpen, "channel.open")?;
        Ok(w)
    }

    /// Appends `m` with a fresh request id; returns the id.
    fn send(&mut self, channel: u16, m: &Method) -> u32 {
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        frame::write_method(&mut self.wbuf, channel, self.frame_max, |b| m.encode(id, b));
        id
    }

    /// Writes everything appended.
    fn flush(&mut self) -> Result<(), String> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&self.wbuf).map_err(io_text)?;
        self.wbuf.clear();
        self.last_write = Instant::now();
        Ok(())
    }

    /// Writes a heartbeat when nothing was written for half the interval.
    fn keep_alive(&mut self) -> Result<(), String> {
        if let Some(every) = self.heartbeat_every {
            if self.last_write.elapsed() >= every {
                frame::write_heartbeat(&mut self.wbuf);
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Sends `m` and waits for the reply with its request id on `channel`; frames of other
    /// requests (deliveries, confirms) are skipped. A `close` from the server is an error.
    fn call(&mut self, channel: u16, m: &Method) -> Result<Method, String> {
        let id = self.send(channel, m);
        self.flush()?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("no reply from the server within 30 s".into());
            }
            let Some(frame) = self.next_frame(Some(left))? else {
                continue;
            };
            let (ch, payload) = match &frame {
                Frame::Method(ch, p) => (*ch, &p[..]),
                Frame::InPlace(ch, a, b) => (*ch, &self.rbuf[*a..*b]),
            };
            if payload.len() >= 6 && u16::from_be_bytes([payload[0], payload[1]]) == DELIVER_ID {
                continue;
            }
            let (rid, reply) = Method::decode(payload).map_err(|e| e.to_string())?;
            if let Some(e) = close_error(&reply) {
                return Err(e);
            }
            if ch == channel && rid == id {
                return Ok(reply);
            }
        }
    }

    /// As `call`, expecting the plain `ok` (or `close-ok`) reply.
    fn call_ok(&mut self, channel: u16, m: &Method, what: &str) -> Result<(), String> {
        match self.call(channel, m)? {
            Method::Ok | Method::CloseOk | Method::BasicConsumeOk { .. } => Ok(()),
            other => Err(format!("unexpected reply to {what}: {other:?}")),
        }
    }

    /// The next whole method payload, reading (waiting at most `timeout`, `None` = not at
    /// all) when none is buffered; `None` when the time ran out. Heartbeats are skipped.
    fn next_frame(&mut self, timeout: Option<Duration>) -> Result<Option<Frame>, String> {
        loop {
            while let Some((header, n)) =
                frame::check(&self.rbuf[self.start..self.end], self.frame_max)
                    .map_err(|e| format!("bad frame from the server: {e}"))?
            {
                let at = self.start;
                self.start += n;
                if header.frame_type == FrameType::Heartbeat {
                    continue;
                }
                let payload = &self.rbuf[at + FRAME_HEADER_BYTES..at + n];
                match self
                    .assembler
                    .push(&header, payload)
                    .map_err(|e| format!("bad frame from the server: {e}"))?
                {
                    None => {}
                    Some(Payload::Whole(ch, _)) => {
                        return Ok(Some(Frame::InPlace(ch, at + FRAME_HEADER_BYTES, at + n)))
                    }
                    Some(Payload::Joined(ch, p)) => return Ok(Some(Frame::Method(ch, p))),
                    Some(Payload::Oversized { size, .. }) => {
                        return Err(format!("a payload of {size} bytes from the server"))
                    }
                }
            }
            let Some(timeout) = timeout else {
                return Ok(None);
            };
            if !self.fill(timeout)? {
                return Ok(None);
            }
        }
    }

    /// One read into the buffer, waiting at most `timeout`; false when it timed out.
    fn fill(&mut self, timeout: Duration) -> Result<bool, String> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.rbuf.len() - self.end < READ_CHUNK_BYTES {
            self.rbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.rbuf.len() - self.end < READ_CHUNK_BYTES {
            self.rbuf.resize(self.end + READ_CHUNK_BYTES, 0);
        }
        let timeout = timeout.max(Duration::from_millis(1));
        if self.read_timeout != Some(timeout) {
            self.stream
                .set_read_timeout(Some(timeout))
                .map_err(io_text)?;
            self.read_timeout = Some(timeout);
        }
        match self.stream.read(&mut self.rbuf[self.end..]) {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(n) => {
                self.end += n;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(io_text(e)),
        }
    }

    /// Reads whatever the socket has now without waiting; false when it had nothing.
    fn fill_now(&mut self) -> Result<bool, String> {
        self.stream.set_nonblocking(true).map_err(io_text)?;
        let r = self.fill(Duration::from_millis(1));
        self.stream.set_nonblocking(false).map_err(io_text)?;
        r
    }

    /// Closes the channel and the connection, each waiting for `close-ok`.
    fn close(mut self) -> Result<(), String> {
        let bye = |code| Method::ChannelClose {
            reply_code: code,
            reply_text: "bye".into(),
            method_id: 0,
        };
        self.call_ok(CHANNEL, &bye(200), "channel.close")?;
        let close = Method::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            method_id: 0,
        };
        self.call_ok(0, &close, "connection.close")
    }
}

/// The error a server-sent close (or cancel) stands for, if `m` is one.
fn close_error(m: &Method) -> Option<String> {
    match m {
        Method::Close {
            reply_code,
            reply_text,
            ..
        } => Some(format!(
            "the server closed the connection: {reply_code} {reply_text}"
        )),
        Method::ChannelClose {
            reply_code,
            reply_text,
            ..
        } => Some(format!(
            "the server closed the channel: {reply_code} {reply_text}"
        )),
        _ => None,
    }
}

/// A producer on its own lean connection.
pub struct Producer {
    wire: Wire,
    /// Per route: its publish prefix up to the body bytes (exchange, routing key,
    /// mandatory, properties, body length).
    prefixes: Vec<Vec<u8>>,
    /// Body size, bytes (at least the 16-byte stamp).
    size: usize,
    confirming: bool,
    /// Publishes sent / confirmed (acked or nacked) so far.
    published: u64,
    confirmed: u64,
    nacked: bool,
}

impl Producer {
    /// Connects, opens a channel, selects confirms with `--confirm`.
    ///
    /// # Errors
    /// The connection, handshake, `channel.open` or `confirm.select` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        routes: Vec<Route>,
    ) -> Result<Box<dyn ProducerSession>, String> {
        let mut wire = Wire::connect(opts, role)?;
        if opts.confirm.is_some() {
            wire.call_ok(CHANNEL, &Method::ConfirmSelect, "confirm.select")?;
        }
        let size = u32::try_from(opts.size).map_err(|_| "--size is too large".to_string())?;
        let prefixes = routes
            .iter()
            .map(|r| {
                let mut p = Vec::new();
                put_short_str(&mut p, &r.exchange);
                put_short_str(&mut p, &r.routing_key);
                p.push(0);
                r.properties.encode(&mut p);
                put_u32(&mut p, size);
                p
            })
            .collect();
        Ok(Box::new(Producer {
            wire,
            prefixes,
            size: opts.size,
            confirming: opts.confirm.is_some(),
            published: 0,
            confirmed: 0,
            nacked: false,
        }))
    }

    /// Handles every whole frame buffered: confirms, and the server closing.
    fn take_input(&mut self) -> Result<(), String> {
        while let Some(f) = self.wire.next_frame(None)? {
            let payload = match &f {
                Frame::Method(_, p) => &p[..],
                Frame::InPlace(_, a, b) => &self.wire.rbuf[*a..*b],
            };
            let mut r = Reader::new(payload);
            let id = r.u16("method id").map_err(|e| e.to_string())?;
            if id == ACK_ID || id == NACK_ID {
                r.u32("request id").map_err(|e| e.to_string())?;
                let tag = r.u64("delivery tag").map_err(|e| e.to_string())?;
                let multiple = r.bool("multiple").map_err(|e| e.to_string())?;
                self.nacked |= id == NACK_ID;
                // Confirms come in order: `multiple` covers up to `tag`, else one more.
                self.confirmed = if multiple {
                    self.confirmed.max(tag)
                } else {
                    self.confirmed + 1
                };
                continue;
            }
            let (_, m) = Method::decode(payload).map_err(|e| e.to_string())?;
            if let Some(e) = close_error(&m) {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl ProducerSession for Producer {
    fn publish(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        let n = u32::try_from(batch.routes.len()).map_err(|_| "batch too large".to_string())?;
        let zeros = self.size - super::session::BODY_STAMP_BYTES;
        let prefixes = &self.prefixes;
        frame::write_method(&mut self.wire.wbuf, CHANNEL, self.wire.frame_max, |b| {
            put_u16(b, PUBLISH_ID);
            put_u32(b, 0);
            put_u32(b, n);
            for (k, &route) in batch.routes.iter().enumerate() {
                b.extend_from_slice(&prefixes[route]);
                b.extend_from_slice(&batch.sent_ns.to_be_bytes());
                b.extend_from_slice(&(batch.first_seq + k as u64).to_be_bytes());
                b.resize(b.len() + zeros, 0);
            }
        });
        self.wire.flush()?;
        self.published += u64::from(n);
        // A refused publish closes the channel: notice it without waiting.
        if self.wire.fill_now()? {
            self.take_input()?;
        }
        Ok(())
    }

    fn wait_confirms_at_most(&mut self, limit: usize, timeout: Duration) -> Result<usize, String> {
        if !self.confirming {
            return Ok(0);
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.take_input()?;
            if self.nacked {
                return Err("the server nacked a publish".into());
            }
            let unconfirmed = (self.published - self.confirmed.min(self.published)) as usize;
            if unconfirmed <= limit {
                return Ok(unconfirmed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{unconfirmed} publishes still unconfirmed after {} s",
                    timeout.as_secs()
                ));
            }
            self.wire.keep_alive()?;
            self.wire.fill(left.min(Duration::from_millis(100)))?;
        }
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        self.wire.close()
    }
}

/// A consumer on its own lean connection.
pub struct Consumer {
    wire: Wire,
    tag: String,
}

impl Consumer {
    /// Connects, opens a channel, sets the prefetch and starts consuming `queue`.
    ///
    /// # Errors
    /// The connection, handshake, `channel.open`, `basic.qos` or `basic.consume` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        queue: &str,
    ) -> Result<Box<dyn ConsumerSession>, String> {
        let mut wire = Wire::connect(opts, role)?;
        if opts.prefetch > 0 && !opts.no_ack {
            let qos = Method::BasicQos {
                prefetch_count: opts.prefetch,
                global: false,
            };
            wire.call_ok(CHANNEL, &qos, "basic.qos")?;
        }
        let consume = Method::BasicConsume {
            queue: queue.into(),
            consumer_tag: String::new(),
            no_ack: opts.no_ack,
            exclusive: false,
            arguments: Default::default(),
        };
        let tag = match wire.call(CHANNEL, &consume)? {
            Method::BasicConsumeOk { consumer_tag } => consumer_tag,
            other => return Err(format!("unexpected reply to basic.consume: {other:?}")),
        };
        Ok(Box::new(Consumer { wire, tag }))
    }
}

/// Appends the deliveries of one `basic.deliver` batch payload to `out`.
fn walk_deliveries(payload: &[u8], out: &mut Vec<DeliveryInfo>) -> Result<(), String> {
    let bad = |e: relaymq::error::DecodeError| format!("bad basic.deliver from the server: {e}");
    let mut r = Reader::new(payload);
    r.u16("method id").map_err(bad)?;
    r.u32("request id").map_err(bad)?;
    let n = r.u32("delivery count").map_err(bad)?;
    for _ in 0..n {
        r.short_str("consumer tag").map_err(bad)?;
        let delivery_tag = r.u64("delivery tag").map_err(bad)?;
        let redelivered = r.bool("redelivered").map_err(bad)?;
        r.short_str("exchange").map_err(bad)?;
        r.short_str("routing key").map_err(bad)?;
        let at = payload.len() - r.remaining();
        if payload.get(at..at + 2) == Some(&[0, 0]) {
            r.u16("property flags").map_err(bad)?;
        } else {
            // Properties are rare on this path (the headers exchange's runs): decode them
            // only to step over them.
            let mut props = Reader::new(&payload[at..]);
            relaymq::types::BasicProperties::decode(&mut props).map_err(bad)?;
            r = Reader::new(&payload[payload.len() - props.remaining()..]);
        }
        let body = r.long_bytes("body").map_err(bad)?;
        out.push(DeliveryInfo {
            delivery_tag,
            redelivered,
            body_bytes: body.len() as u64,
            sent_ns: sent_ns_of(body),
        });
    }
    if !r.is_empty() {
        return Err("bad basic.deliver from the server: bytes left over".into());
    }
    Ok(())
}

impl ConsumerSession for Consumer {
    fn poll(&mut self, timeout: Duration, out: &mut Vec<DeliveryInfo>) -> Result<(), String> {
        // The acks given since the last poll, in one write.
        self.wire.flush()?;
        self.wire.keep_alive()?;
        let mut wait = Some(timeout);
        while let Some(f) = self.wire.next_frame(wait)? {
            let payload = match &f {
                Frame::Method(_, p) => &p[..],
                Frame::InPlace(_, a, b) => &self.wire.rbuf[*a..*b],
            };
            if payload.len() >= 2 && u16::from_be_bytes([payload[0], payload[1]]) == DELIVER_ID {
                walk_deliveries(payload, out)?;
            } else {
                let (_, m) = Method::decode(payload).map_err(|e| e.to_string())?;
                if let Some(e) = close_error(&m) {
                    return Err(e);
                }
                if matches!(m, Method::BasicCancel { .. }) {
                    return Err("the server cancelled the consumer".into());
                }
            }
            // Whatever else is already buffered, then back to the caller.
            wait = None;
        }
        Ok(())
    }

    fn ack(&mut self, delivery_tag: u64, multiple: bool) -> Result<(), String> {
        // Appended only: written with the next poll, so the acks of one read go together.
        self.wire.send(
            CHANNEL,
            &Method::Ack {
                delivery_tag,
                multiple,
            },
        );
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<(), String> {
        let cancel = Method::BasicCancel {
            consumer_tag: std::mem::take(&mut self.tag),
        };
        self.wire.call_ok(CHANNEL, &cancel, "basic.cancel")?;
        self.wire.close()
    }
}
