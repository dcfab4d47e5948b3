//! A small blocking AMQP 0-9-1 client of the bench's own, on the codec in
//! `relaymq::amqp`, and the sessions of an `amqp://` run built on it.
//!
//! One connection per thread, one channel in use at a time, no reader thread: the
//! thread that owns the socket writes and reads it. The handshake is the
//! specification's (AMQP 0-9-1 §2.2.4): protocol header, `connection.start` →
//! `start-ok` (SASL PLAIN), `tune` → `tune-ok` (the server's `frame_max` and
//! `channel_max`, heartbeats off), `open`. What makes it fast enough to measure a broker:
//!
//! - publishes are appended to one buffer, a whole batch written at once; each route's
//!   method and content header frames and the body frames are encoded once, a publish
//!   copies them and stamps the body;
//! - reads fill a large buffer and many frames are parsed from each `read()`; a delivery
//!   is not copied (only its size and the 8-byte send time are kept);
//! - acks are appended and sent with the next read.
//!
//! The server's `connection.close` and `channel.close` are answered with `close-ok` and
//! become errors carrying the reply code and text; a malformed frame is an error, never a
//! panic.

use super::args::Options;
use super::session::{
    fill_body, AdminSession, Batch, ConsumerSession, DeliveryInfo, ProducerSession, Route,
    BODY_STAMP_BYTES,
};
use relaymq::amqp::{
    check, write_content, write_method, AmqpMethod, FrameType, RawFrameHeader, BASIC_CLASS_ID,
    FRAME_HEADER_BYTES, PROTOCOL_HEADER,
};
use relaymq::types::{FieldTable, FieldValue};
use std::collections::VecDeque;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::time::{Duration, Instant};

/// Read buffer of a consumer beyond one frame, bytes: many deliveries per `read()`.
pub const READ_BUFFER_CONSUMER_BYTES: usize = 1 << 20;

/// Read buffer of a setup session or producer beyond one frame, bytes (replies and
/// confirms are small).
pub const READ_BUFFER_CONTROL_BYTES: usize = 64 << 10;

/// Write buffer size past which a publish batch is written before it is complete, bytes
/// (bounds the buffer for large bodies; a batch of small messages is one write).
pub const WRITE_BUFFER_FLUSH_BYTES: usize = 1 << 20;

/// Largest frame accepted before `connection.tune`, bytes (AMQP's frame-min-size is
/// 4096; `connection.start` with RabbitMQ's server properties is well under this).
const FRAME_MAX_BEFORE_TUNE: u32 = 131_072;

/// Smallest `frame_max` this client works with, bytes (AMQP 0-9-1 frame-min-size): a
/// first body frame then always holds the 16-byte stamp.
const FRAME_MIN_BYTES: u32 = 4096;

/// Frame size used when the server offers 0 ("no limit"), bytes.
const FRAME_MAX_UNLIMITED: u32 = 1 << 20;

/// Highest channel number used when the server offers 0 ("no limit").
const CHANNEL_MAX_UNLIMITED: u16 = 2047;

/// Time allowed for the handshake and for each synchronous reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Time a write may block (the server not reading, e.g. a RabbitMQ resource alarm)
/// before the run fails.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest one blocking `read()` waits before the deadline is looked at again.
const READ_SLICE: Duration = Duration::from_millis(100);

/// How often a producer without confirms looks for what the server sent (a
/// `channel.close` after a refused publish), without blocking.
const PRODUCER_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Time allowed, after a write failed, to read the server's `connection.close` reason.
const CLOSE_REASON_TIMEOUT: Duration = Duration::from_secs(1);

/// Reply code of a normal close (AMQP 0-9-1 `reply-success`).
const REPLY_SUCCESS: u16 = 200;

/// Reply code of a missing queue or exchange (AMQP 0-9-1 `not-found`).
const NOT_FOUND: u16 = 404;

/// Offset of `body-size` in a content header payload (after class id and weight).
const CONTENT_BODY_SIZE_AT: usize = 4;

/// Bytes of a content header payload up to the end of `body-size`.
const CONTENT_HEADER_FIXED_BYTES: usize = 12;

/// Why an AMQP operation failed.
#[derive(Debug)]
pub enum AmqpError {
    /// The socket failed or the server closed it.
    Io(String),
    /// The server sent a frame this client cannot read or did not expect.
    Protocol(String),
    /// The server closed the connection (`connection.close`).
    ConnectionClosed {
        /// The reply code, e.g. 403.
        code: u16,
        /// The reply text, e.g. `ACCESS_REFUSED - …`.
        text: String,
    },
    /// The server closed the channel (`channel.close`).
    ChannelClosed {
        /// The reply code, e.g. 404.
        code: u16,
        /// The reply text.
        text: String,
    },
    /// No reply in time.
    Timeout(String),
}

impl AmqpError {
    /// The server's reply code, for a close the server sent.
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            AmqpError::ConnectionClosed { code, .. } | AmqpError::ChannelClosed { code, .. } => {
                Some(*code)
            }
            _ => None,
        }
    }
}

impl fmt::Display for AmqpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmqpError::Io(m) | AmqpError::Protocol(m) | AmqpError::Timeout(m) => f.write_str(m),
            AmqpError::ConnectionClosed { code, text } => {
                write!(f, "the server closed the connection: {code} {text}")
            }
            AmqpError::ChannelClosed { code, text } => {
                write!(f, "the server closed the channel: {code} {text}")
            }
        }
    }
}

impl std::error::Error for AmqpError {}

fn io_error(what: &str, e: std::io::Error) -> AmqpError {
    AmqpError::Io(format!("{what}: {e}"))
}

/// A blocking AMQP 0-9-1 connection.
pub struct AmqpConnection {
    stream: TcpStream,
    /// Received bytes; `rbuf[rstart..rend]` is not parsed yet.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Read buffer size beyond one frame, bytes.
    read_buffer_bytes: usize,
    /// Bytes to send (frames appended by the operations, written by `flush`).
    wbuf: Vec<u8>,
    /// The negotiated frame size, bytes (header and end octet included).
    frame_max: u32,
    /// The negotiated highest channel number.
    channel_max: u16,
    /// The channel in use (1 once open; a higher one after the server closed it).
    channel: u16,
    /// The read timeout set on the socket, so it is set only when it changes.
    read_timeout: Option<Duration>,
    /// `connection.close` went one way or the other: nothing more is sent.
    closed: bool,
}

impl AmqpConnection {
    /// Connects to `HOST:PORT` and runs the handshake as `user` on `vhost`, naming the
    /// connection `client_name` (RabbitMQ's `connection_name`).
    ///
    /// # Errors
    /// [`AmqpError::Io`] when the connection fails or the server hangs up (RabbitMQ does
    /// that to a refused login of a client without `authentication_failure_close`),
    /// [`AmqpError::ConnectionClosed`] for a refused login (403) or vhost (530),
    /// [`AmqpError::Protocol`] when the server does not speak AMQP 0-9-1,
    /// [`AmqpError::Timeout`] after [`REPLY_TIMEOUT`].
    pub fn connect(
        opts: &Options,
        client_name: &str,
        read_buffer_bytes: usize,
    ) -> Result<AmqpConnection, AmqpError> {
        let t = &opts.target;
        let addrs: Vec<_> = t
            .addr
            .to_socket_addrs()
            .map_err(|e| io_error(&format!("cannot resolve {}", t.addr), e))?
            .collect();
        let stream = TcpStream::connect(&addrs[..])
            .map_err(|e| io_error(&format!("cannot connect to {}", t.addr), e))?;
        let setup = |e| io_error("setting up the socket", e);
        stream.set_nodelay(true).map_err(setup)?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(setup)?;
        let mut c = AmqpConnection {
            stream,
            rbuf: vec![0; read_buffer_bytes + FRAME_MAX_BEFORE_TUNE as usize],
            rstart: 0,
            rend: 0,
            read_buffer_bytes,
            wbuf: Vec::new(),
            frame_max: FRAME_MAX_BEFORE_TUNE,
            channel_max: 0,
            channel: 0,
            read_timeout: None,
            closed: false,
        };
        c.handshake(opts, client_name)?;
        Ok(c)
    }

    fn handshake(&mut self, opts: &Options, client_name: &str) -> Result<(), AmqpError> {
        let t = &opts.target;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        self.wbuf.extend_from_slice(&PROTOCOL_HEADER);
        self.flush()?;
        match self.recv_method(deadline)? {
            (0, AmqpMethod::ConnectionStart { mechanisms, .. }) => {
                if !mechanisms.split(|b| *b == b' ').any(|m| m == b"PLAIN") {
                    return Err(AmqpError::Protocol(format!(
                        "the server does not offer SASL PLAIN (it offers '{}')",
                        String::from_utf8_lossy(&mechanisms)
                    )));
                }
            }
            (ch, m) => return Err(unexpected("connection.start", ch, &m)),
        }
        let mut response = Vec::with_capacity(2 + t.user.len() + t.password.len());
        response.push(0);
        response.extend_from_slice(t.user.as_bytes());
        response.push(0);
        response.extend_from_slice(t.password.as_bytes());
        self.send(
            0,
            &AmqpMethod::ConnectionStartOk {
                client_properties: client_properties(client_name),
                mechanism: "PLAIN".into(),
                response,
                locale: "en_US".into(),
            },
        );
        self.flush()?;
        let (channel_max, frame_max) = match self.recv_method(deadline) {
            Ok((
                0,
                AmqpMethod::ConnectionTune {
                    channel_max,
                    frame_max,
                    ..
                },
            )) => (channel_max, frame_max),
            Ok((ch, m)) => return Err(unexpected("connection.tune", ch, &m)),
            Err(AmqpError::Io(e)) => {
                return Err(AmqpError::Io(format!(
                    "{e} after connection.start-ok (login refused? check user and password)"
                )))
            }
            Err(e) => return Err(e),
        };
        let frame_max = if frame_max == 0 {
            FRAME_MAX_UNLIMITED
        } else {
            frame_max
        };
        if frame_max < FRAME_MIN_BYTES {
            return Err(AmqpError::Protocol(format!(
                "the server's frame_max of {frame_max} bytes is below AMQP's minimum of \
                 {FRAME_MIN_BYTES}"
            )));
        }
        self.channel_max = if channel_max == 0 {
            CHANNEL_MAX_UNLIMITED
        } else {
            channel_max
        };
        self.send(
            0,
            &AmqpMethod::ConnectionTuneOk {
                channel_max: self.channel_max,
                frame_max,
                heartbeat: 0,
            },
        );
        self.frame_max = frame_max;
        let want = self.read_buffer_bytes + frame_max as usize;
        if self.rbuf.len() < want {
            self.rbuf.resize(want, 0);
        }
        self.send(
            0,
            &AmqpMethod::ConnectionOpen {
                virtual_host: t.vhost.clone(),
            },
        );
        self.flush()?;
        match self.recv_method(deadline)? {
            (0, AmqpMethod::ConnectionOpenOk {}) => {}
            (ch, m) => return Err(unexpected("connection.open-ok", ch, &m)),
        }
        self.open_channel()
    }

    /// Opens the next channel number and makes it the one in use.
    ///
    /// # Errors
    /// No channel number left, or the server's refusal.
    pub fn open_channel(&mut self) -> Result<(), AmqpError> {
        if self.channel >= self.channel_max {
            return Err(AmqpError::Protocol(format!(
                "no channel left (channel_max {})",
                self.channel_max
            )));
        }
        self.channel += 1;
        self.call(&AmqpMethod::ChannelOpen {}, |m| {
            matches!(m, AmqpMethod::ChannelOpenOk {})
        })
        .map(|_| ())
    }

    /// Appends a method frame to the write buffer.
    fn send(&mut self, channel: u16, m: &AmqpMethod) {
        write_method(&mut self.wbuf, channel, m);
    }

    /// Writes the write buffer.
    ///
    /// # Errors
    /// The write failed: the server's `connection.close` when it sent one just before
    /// ([`AmqpError::ConnectionClosed`]), else [`AmqpError::Io`].
    pub fn flush(&mut self) -> Result<(), AmqpError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.wbuf);
        self.wbuf.clear();
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                Err(AmqpError::Timeout(format!(
                    "a write blocked for {} s (is the server blocking publishers?)",
                    WRITE_TIMEOUT.as_secs()
                )))
            }
            Err(e) => {
                self.closed = true;
                Err(self.close_reason().unwrap_or_else(|| io_error("write", e)))
            }
        }
    }

    /// After a failed write: the `connection.close` the server sent, if it is readable.
    fn close_reason(&mut self) -> Option<AmqpError> {
        let deadline = Instant::now() + CLOSE_REASON_TIMEOUT;
        loop {
            match self.recv_method(deadline) {
                Ok(_) => continue,
                Err(e @ AmqpError::ConnectionClosed { .. }) => return Some(e),
                Err(_) => return None,
            }
        }
    }

    /// Sets the socket's read timeout, when it changes.
    fn set_read_timeout(&mut self, t: Duration) -> Result<(), AmqpError> {
        let t = t.max(Duration::from_millis(1));
        if self.read_timeout != Some(t) {
            self.stream
                .set_read_timeout(Some(t))
                .map_err(|e| io_error("setting the read timeout", e))?;
            self.read_timeout = Some(t);
        }
        Ok(())
    }

    /// The next whole frame in the read buffer, without reading: its header and the
    /// payload's range in `rbuf`, valid until the next read.
    ///
    /// # Errors
    /// [`AmqpError::Protocol`] for a malformed frame or a server that answered with a
    /// protocol header (it does not speak AMQP 0-9-1).
    fn buffered_frame(&mut self) -> Result<Option<(RawFrameHeader, Range<usize>)>, AmqpError> {
        let buf = &self.rbuf[self.rstart..self.rend];
        if buf.starts_with(b"AMQP") {
            return Err(AmqpError::Protocol(format!(
                "the server answered with protocol header {:?}: it does not speak AMQP 0-9-1",
                String::from_utf8_lossy(&buf[..buf.len().min(PROTOCOL_HEADER.len())])
            )));
        }
        match check(buf, self.frame_max) {
            Ok(Some((h, total))) => {
                let at = self.rstart + FRAME_HEADER_BYTES;
                self.rstart += total;
                Ok(Some((h, at..at + h.size as usize)))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(AmqpError::Protocol(format!(
                "malformed frame from the server ({e}); is this an AMQP 0-9-1 port?"
            ))),
        }
    }

    /// Reads once (waiting at most the socket's read timeout); `false` when nothing came.
    ///
    /// # Errors
    /// [`AmqpError::Io`] when the server closed the socket or the read failed.
    fn fill(&mut self) -> Result<bool, AmqpError> {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rbuf.len() - self.rend < self.frame_max as usize {
            // What is left is part of one frame (< frame_max bytes): move it to the front.
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        loop {
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    self.closed = true;
                    return Err(AmqpError::Io("the server closed the connection".into()));
                }
                Ok(n) => {
                    self.rend += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    return Ok(false)
                }
                Err(e) => {
                    self.closed = true;
                    return Err(io_error("read", e));
                }
            }
        }
    }

    /// The next frame, waiting until `deadline`.
    ///
    /// # Errors
    /// [`AmqpError::Timeout`] at the deadline, else as `buffered_frame` and `fill`.
    fn next_frame(
        &mut self,
        deadline: Instant,
    ) -> Result<(RawFrameHeader, Range<usize>), AmqpError> {
        loop {
            if let Some(f) = self.buffered_frame()? {
                return Ok(f);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(AmqpError::Timeout(format!(
                    "no reply from the server within {} s",
                    REPLY_TIMEOUT.as_secs()
                )));
            }
            self.set_read_timeout(left.min(READ_SLICE))?;
            self.fill()?;
        }
    }

    /// Decodes the method frame whose payload is `range`, and answers the server's
    /// closes: `connection.close` and `channel.close` get their `close-ok` and become
    /// errors; `connection.blocked`/`unblocked` are passed on like any method.
    fn method_at(&mut self, channel: u16, range: Range<usize>) -> Result<AmqpMethod, AmqpError> {
        let m = AmqpMethod::decode(&self.rbuf[range])
            .map_err(|e| AmqpError::Protocol(format!("undecodable method from the server: {e}")))?;
        match m {
            AmqpMethod::ConnectionClose {
                reply_code,
                reply_text,
                ..
            } => {
                if !self.closed {
                    self.closed = true;
                    // Whatever was waiting to be sent is moot now.
                    self.wbuf.clear();
                    self.send(0, &AmqpMethod::ConnectionCloseOk {});
                    let _ = self.stream.write_all(&self.wbuf);
                    self.wbuf.clear();
                }
                Err(AmqpError::ConnectionClosed {
                    code: reply_code,
                    text: reply_text,
                })
            }
            AmqpMethod::ChannelClose {
                reply_code,
                reply_text,
                ..
            } => {
                self.send(channel, &AmqpMethod::ChannelCloseOk {});
                self.flush()?;
                Err(AmqpError::ChannelClosed {
                    code: reply_code,
                    text: reply_text,
                })
            }
            m => Ok(m),
        }
    }

    /// The next method (content frames and heartbeats skipped), waiting until
    /// `deadline`, with its channel.
    ///
    /// # Errors
    /// The server's close, a malformed frame, a read failure, the deadline.
    fn recv_method(&mut self, deadline: Instant) -> Result<(u16, AmqpMethod), AmqpError> {
        loop {
            let (h, range) = self.next_frame(deadline)?;
            if h.frame_type == FrameType::Method {
                return Ok((h.channel, self.method_at(h.channel, range)?));
            }
        }
    }

    /// Sends `m` on the channel in use and waits for the reply `is_reply` accepts;
    /// other methods on the way (deliveries, confirms) are skipped.
    ///
    /// # Errors
    /// As `recv_method`: a refusal is [`AmqpError::ChannelClosed`] or
    /// [`AmqpError::ConnectionClosed`] with the server's code and text.
    fn call(
        &mut self,
        m: &AmqpMethod,
        is_reply: impl Fn(&AmqpMethod) -> bool,
    ) -> Result<AmqpMethod, AmqpError> {
        let channel = self.channel;
        self.send(channel, m);
        self.flush()?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let (ch, reply) = self.recv_method(deadline)?;
            if ch == channel && is_reply(&reply) {
                return Ok(reply);
            }
        }
    }

    /// Closes the channel in use (`channel.close` 200, waits for `close-ok`).
    ///
    /// # Errors
    /// As `call`: e.g. the server's close of the channel for an earlier error.
    pub fn close_channel(&mut self) -> Result<(), AmqpError> {
        self.call(
            &AmqpMethod::ChannelClose {
                reply_code: REPLY_SUCCESS,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
            |m| matches!(m, AmqpMethod::ChannelCloseOk {}),
        )
        .map(|_| ())
    }

    /// Closes the connection (`connection.close` 200, waits for `close-ok`).
    ///
    /// # Errors
    /// As `call`.
    pub fn close(mut self) -> Result<(), AmqpError> {
        if self.closed {
            return Ok(());
        }
        self.send(
            0,
            &AmqpMethod::ConnectionClose {
                reply_code: REPLY_SUCCESS,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        );
        self.flush()?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let (0, AmqpMethod::ConnectionCloseOk {}) = self.recv_method(deadline)? {
                self.closed = true;
                return Ok(());
            }
        }
    }
}

/// The error for a reply that is not the one expected.
fn unexpected(wanted: &str, channel: u16, got: &AmqpMethod) -> AmqpError {
    AmqpError::Protocol(format!(
        "expected {wanted}, the server sent {} on channel {channel}",
        got.name()
    ))
}

/// The client properties: product, version, connection name and the capabilities this
/// client handles (RabbitMQ then sends `basic.nack`, `basic.cancel`, and a
/// `connection.close` 403 for a refused login instead of hanging up).
fn client_properties(client_name: &str) -> FieldTable {
    let mut caps = FieldTable::new();
    for c in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "authentication_failure_close",
    ] {
        caps.insert(c.into(), FieldValue::Bool(true));
    }
    let mut t = FieldTable::new();
    t.insert("product".into(), FieldValue::string("relaymq-bench"));
    t.insert(
        "version".into(),
        FieldValue::string(env!("CARGO_PKG_VERSION")),
    );
    t.insert("connection_name".into(), FieldValue::string(client_name));
    t.insert("capabilities".into(), FieldValue::Table(caps));
    t
}

/// Maps an error to the run's text.
fn text(e: AmqpError) -> String {
    e.to_string()
}

// ---- the sessions ---------------------------------------------------------------------

/// The setup session: one connection, a fresh channel after the server closed one.
pub struct Admin {
    conn: AmqpConnection,
}

impl Admin {
    /// Connects.
    ///
    /// # Errors
    /// The connection or handshake failed.
    pub fn connect(opts: &Options) -> Result<Box<dyn AdminSession>, String> {
        let conn = AmqpConnection::connect(opts, "relaymq-bench setup", READ_BUFFER_CONTROL_BYTES)
            .map_err(text)?;
        Ok(Box::new(Admin { conn }))
    }

    /// Calls `m` and waits for `is_reply`, reopening the channel after the server closed
    /// it; a 404 counts as success with `missing_ok`.
    fn call(
        &mut self,
        m: AmqpMethod,
        is_reply: impl Fn(&AmqpMethod) -> bool,
        missing_ok: bool,
    ) -> Result<(), String> {
        match self.conn.call(&m, is_reply) {
            Ok(_) => Ok(()),
            Err(e @ AmqpError::ChannelClosed { .. }) => {
                self.conn.open_channel().map_err(text)?;
                if missing_ok && e.reply_code() == Some(NOT_FOUND) {
                    Ok(())
                } else {
                    Err(text(e))
                }
            }
            Err(e) => Err(text(e)),
        }
    }
}

impl AdminSession for Admin {
    fn queue_declare(&mut self, name: &str, durable: bool) -> Result<(), String> {
        let m = AmqpMethod::QueueDeclare {
            queue: name.into(),
            passive: false,
            durable,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        };
        self.call(m, |r| matches!(r, AmqpMethod::QueueDeclareOk { .. }), false)
    }

    fn message_count(&mut self, name: &str) -> Result<u64, String> {
        let m = AmqpMethod::QueueDeclare {
            queue: name.into(),
            passive: true,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: FieldTable::new(),
        };
        match self
            .conn
            .call(&m, |r| matches!(r, AmqpMethod::QueueDeclareOk { .. }))
        {
            Ok(AmqpMethod::QueueDeclareOk { message_count, .. }) => Ok(u64::from(message_count)),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(e @ AmqpError::ChannelClosed { .. }) => {
                self.conn.open_channel().map_err(text)?;
                Err(text(e))
            }
            Err(e) => Err(text(e)),
        }
    }

    fn queue_delete(&mut self, name: &str) -> Result<(), String> {
        let m = AmqpMethod::QueueDelete {
            queue: name.into(),
            if_unused: false,
            if_empty: false,
            no_wait: false,
        };
        self.call(m, |r| matches!(r, AmqpMethod::QueueDeleteOk { .. }), true)
    }

    fn exchange_declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<(), String> {
        let m = AmqpMethod::ExchangeDeclare {
            exchange: name.into(),
            kind: kind.into(),
            passive: false,
            durable,
            auto_delete: false,
            internal: false,
            no_wait: false,
            arguments: FieldTable::new(),
        };
        self.call(m, |r| matches!(r, AmqpMethod::ExchangeDeclareOk {}), false)
    }

    fn exchange_delete(&mut self, name: &str) -> Result<(), String> {
        let m = AmqpMethod::ExchangeDelete {
            exchange: name.into(),
            if_unused: false,
            no_wait: false,
        };
        self.call(m, |r| matches!(r, AmqpMethod::ExchangeDeleteOk {}), true)
    }

    fn queue_bind(
        &mut self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String> {
        let m = AmqpMethod::QueueBind {
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: key.into(),
            no_wait: false,
            arguments: args,
        };
        self.call(m, |r| matches!(r, AmqpMethod::QueueBindOk {}), false)
    }

    fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String> {
        let m = AmqpMethod::ExchangeBind {
            destination: destination.into(),
            source: source.into(),
            routing_key: key.into(),
            no_wait: false,
            arguments: args,
        };
        self.call(m, |r| matches!(r, AmqpMethod::ExchangeBindOk {}), false)
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let mut conn = self.conn;
        conn.close_channel().map_err(text)?;
        conn.close().map_err(text)
    }
}

/// The publisher confirms of a channel in confirm mode: which publish sequence numbers
/// (from 1, AMQP's confirm extension) are still unconfirmed. Bounded by `--confirm`.
struct ConfirmWindow {
    /// The sequence number of `pending[0]`.
    base: u64,
    /// Per sequence number from `base`: not yet confirmed. The front is always pending.
    pending: VecDeque<bool>,
    /// Count of `true` in `pending`.
    unconfirmed: usize,
    /// Publishes the server nacked.
    nacked: u64,
}

impl ConfirmWindow {
    fn new() -> ConfirmWindow {
        ConfirmWindow {
            base: 1,
            pending: VecDeque::new(),
            unconfirmed: 0,
            nacked: 0,
        }
    }

    /// `n` more publishes were sent.
    fn published(&mut self, n: usize) {
        self.pending.extend(std::iter::repeat_n(true, n));
        self.unconfirmed += n;
    }

    /// A `basic.ack` (`acked`) or `basic.nack` of `tag` (and all before with `multiple`).
    ///
    /// # Errors
    /// A tag never published: the server and client disagree.
    fn settle(&mut self, tag: u64, multiple: bool, acked: bool) -> Result<(), AmqpError> {
        let end = self.base + self.pending.len() as u64;
        if tag >= end || tag == 0 {
            return Err(AmqpError::Protocol(format!(
                "the server confirmed publish {tag}, but only {} were published",
                end - 1
            )));
        }
        let (from, to) = if multiple {
            (self.base, tag)
        } else {
            (tag.max(self.base), tag)
        };
        for seq in from..=to {
            // A single confirm below `base` is for a publish already confirmed: nothing.
            let Some(p) = self.pending.get_mut((seq - self.base) as usize) else {
                continue;
            };
            if *p {
                *p = false;
                self.unconfirmed -= 1;
                if !acked {
                    self.nacked += 1;
                }
            }
        }
        while self.pending.front() == Some(&false) {
            self.pending.pop_front();
            self.base += 1;
        }
        Ok(())
    }
}

/// A producer: each route's method and content header frames encoded once; the body
/// frames, zero but for the stamp, encoded once.
pub struct Producer {
    conn: AmqpConnection,
    /// Per route: the `basic.publish` method frame and the content header frame.
    heads: Vec<Vec<u8>>,
    /// The body frames of a zero body of `--size` bytes.
    body_frames: Vec<u8>,
    /// Confirms, with `--confirm`.
    confirms: Option<ConfirmWindow>,
    /// When the producer last looked for what the server sent.
    last_check: Instant,
}

impl Producer {
    /// Connects, selects confirms with `--confirm` and encodes the frames of each route.
    ///
    /// # Errors
    /// The connection, handshake or `confirm.select` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        routes: Vec<Route>,
    ) -> Result<Box<dyn ProducerSession>, String> {
        let mut conn = AmqpConnection::connect(
            opts,
            &format!("relaymq-bench {role}"),
            READ_BUFFER_CONTROL_BYTES,
        )
        .map_err(text)?;
        let confirms = if opts.confirm.is_some() {
            conn.call(&AmqpMethod::ConfirmSelect { nowait: false }, |m| {
                matches!(m, AmqpMethod::ConfirmSelectOk {})
            })
            .map_err(text)?;
            Some(ConfirmWindow::new())
        } else {
            None
        };
        let (channel, frame_max) = (conn.channel, conn.frame_max);
        let body = vec![0u8; opts.size];
        let mut body_frames = Vec::new();
        write_content(
            &mut body_frames,
            channel,
            BASIC_CLASS_ID,
            &Default::default(),
            &body,
            frame_max,
        );
        // Drop the content header frame written in front of the body frames.
        let header_bytes = frame_bytes(&body_frames)?;
        body_frames.drain(..header_bytes);
        let heads = routes
            .iter()
            .map(|r| {
                let mut head = Vec::new();
                write_method(
                    &mut head,
                    channel,
                    &AmqpMethod::BasicPublish {
                        exchange: r.exchange.clone(),
                        routing_key: r.routing_key.clone(),
                        mandatory: false,
                        immediate: false,
                    },
                );
                let method_bytes = head.len();
                write_content(
                    &mut head,
                    channel,
                    BASIC_CLASS_ID,
                    &r.properties,
                    &[],
                    frame_max,
                );
                // The header of an empty body says 0 bytes: say `--size`.
                let at = method_bytes + FRAME_HEADER_BYTES + CONTENT_BODY_SIZE_AT;
                head[at..at + 8].copy_from_slice(&(opts.size as u64).to_be_bytes());
                head
            })
            .collect();
        Ok(Box::new(Producer {
            conn,
            heads,
            body_frames,
            confirms,
            last_check: Instant::now(),
        }))
    }

    /// Reads and handles what the server sent (confirms, closes) without blocking.
    fn check_incoming(&mut self) -> Result<(), AmqpError> {
        let set = |s: &TcpStream, on: bool| {
            s.set_nonblocking(on)
                .map_err(|e| io_error("setting the socket (non-)blocking", e))
        };
        set(&self.conn.stream, true)?;
        let r = self.conn.fill();
        set(&self.conn.stream, false)?;
        r?;
        self.handle_buffered()
    }

    /// Handles every whole frame in the read buffer.
    fn handle_buffered(&mut self) -> Result<(), AmqpError> {
        while let Some((h, range)) = self.conn.buffered_frame()? {
            if h.frame_type == FrameType::Method {
                let m = self.conn.method_at(h.channel, range)?;
                self.on_method(h.channel, m)?;
            }
        }
        Ok(())
    }

    /// Handles a method for the producer: confirms; the server's `basic.return` and
    /// `connection.blocked` need nothing.
    fn on_method(&mut self, channel: u16, m: AmqpMethod) -> Result<(), AmqpError> {
        if channel != self.conn.channel {
            return Ok(());
        }
        let (tag, multiple, acked) = match m {
            AmqpMethod::BasicAck {
                delivery_tag,
                multiple,
            } => (delivery_tag, multiple, true),
            AmqpMethod::BasicNack {
                delivery_tag,
                multiple,
                ..
            } => (delivery_tag, multiple, false),
            _ => return Ok(()),
        };
        match &mut self.confirms {
            Some(w) => w.settle(tag, multiple, acked),
            None => Err(AmqpError::Protocol(format!(
                "the server sent {} without confirm mode",
                if acked { "basic.ack" } else { "basic.nack" }
            ))),
        }
    }
}

/// The length of the frame at the start of `frames` (header, payload, end octet).
fn frame_bytes(frames: &[u8]) -> Result<usize, String> {
    let size = frames
        .get(3..FRAME_HEADER_BYTES)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or("encoding the content header")?;
    Ok(FRAME_HEADER_BYTES + size as usize + 1)
}

impl ProducerSession for Producer {
    fn publish(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        // The stamp lies in the first body frame: frame_max >= 4096 > 16 + 8.
        let stamp_at = FRAME_HEADER_BYTES;
        for (k, &r) in batch.routes.iter().enumerate() {
            let out = &mut self.conn.wbuf;
            out.extend_from_slice(&self.heads[r]);
            let body_at = out.len() + stamp_at;
            out.extend_from_slice(&self.body_frames);
            fill_body(
                &mut out[body_at..body_at + BODY_STAMP_BYTES],
                batch.sent_ns,
                batch.first_seq + k as u64,
            );
            if out.len() >= WRITE_BUFFER_FLUSH_BYTES {
                self.conn.flush().map_err(text)?;
            }
        }
        self.conn.flush().map_err(text)?;
        if let Some(w) = &mut self.confirms {
            w.published(batch.routes.len());
        } else if self.last_check.elapsed() >= PRODUCER_CHECK_INTERVAL {
            self.last_check = Instant::now();
            self.check_incoming().map_err(text)?;
        }
        Ok(())
    }

    fn wait_confirms_at_most(&mut self, limit: usize, timeout: Duration) -> Result<usize, String> {
        let deadline = Instant::now() + timeout;
        self.handle_buffered().map_err(text)?;
        loop {
            let Some(w) = &self.confirms else {
                return Err("waiting for confirms without --confirm".into());
            };
            if w.nacked > 0 {
                return Err(format!("the server nacked {} publishes", w.nacked));
            }
            if w.unconfirmed <= limit {
                return Ok(w.unconfirmed);
            }
            let (h, range) = self.conn.next_frame(deadline).map_err(|e| match e {
                AmqpError::Timeout(_) => format!(
                    "{} publishes still unconfirmed after {} s",
                    w.unconfirmed,
                    timeout.as_secs()
                ),
                e => text(e),
            })?;
            if h.frame_type == FrameType::Method {
                let m = self.conn.method_at(h.channel, range).map_err(text)?;
                self.on_method(h.channel, m).map_err(text)?;
            }
        }
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let mut conn = self.conn;
        conn.close_channel().map_err(text)?;
        conn.close().map_err(text)
    }
}

/// Where a consumer is in the frames of a delivery (AMQP 0-9-1 §4.2.6: method, content
/// header, body frames).
enum Assembly {
    /// Between deliveries.
    Idle,
    /// After `basic.deliver`, waiting for its content header.
    Header {
        delivery_tag: u64,
        redelivered: bool,
    },
    /// Receiving the body.
    Body {
        delivery_tag: u64,
        redelivered: bool,
        /// Declared body size, bytes.
        body_bytes: u64,
        /// Body bytes received so far.
        received: u64,
        /// The first bytes of the body (the send time).
        stamp: [u8; 8],
    },
}

/// A consumer: deliveries parsed straight from the read buffer.
pub struct Consumer {
    conn: AmqpConnection,
    /// The consumer tag the server gave.
    tag: String,
    assembly: Assembly,
}

impl Consumer {
    /// Connects, sets the prefetch and starts consuming `queue`.
    ///
    /// # Errors
    /// The connection, handshake, `basic.qos` or `basic.consume` failed.
    pub fn connect(
        opts: &Options,
        role: &str,
        queue: &str,
    ) -> Result<Box<dyn ConsumerSession>, String> {
        let mut conn = AmqpConnection::connect(
            opts,
            &format!("relaymq-bench {role}"),
            READ_BUFFER_CONSUMER_BYTES,
        )
        .map_err(text)?;
        if opts.prefetch > 0 && !opts.no_ack {
            let qos = AmqpMethod::BasicQos {
                prefetch_size: 0,
                prefetch_count: opts.prefetch,
                global: false,
            };
            conn.call(&qos, |m| matches!(m, AmqpMethod::BasicQosOk {}))
                .map_err(text)?;
        }
        let consume = AmqpMethod::BasicConsume {
            queue: queue.into(),
            consumer_tag: String::new(),
            no_local: false,
            no_ack: opts.no_ack,
            exclusive: false,
            no_wait: false,
            arguments: FieldTable::new(),
        };
        let tag = match conn
            .call(&consume, |m| matches!(m, AmqpMethod::BasicConsumeOk { .. }))
            .map_err(text)?
        {
            AmqpMethod::BasicConsumeOk { consumer_tag } => consumer_tag,
            _ => String::new(),
        };
        Ok(Box::new(Consumer {
            conn,
            tag,
            assembly: Assembly::Idle,
        }))
    }

    /// Handles one frame; a delivery completed by it is appended to `out`.
    fn on_frame(
        &mut self,
        h: RawFrameHeader,
        range: Range<usize>,
        out: &mut Vec<DeliveryInfo>,
    ) -> Result<(), AmqpError> {
        let misplaced = |what: &str| {
            AmqpError::Protocol(format!("the server sent a {what} frame outside a delivery"))
        };
        match h.frame_type {
            FrameType::Heartbeat => Ok(()),
            FrameType::Method => {
                let m = self.conn.method_at(h.channel, range)?;
                if h.channel != self.conn.channel {
                    return Ok(());
                }
                match m {
                    AmqpMethod::BasicDeliver {
                        delivery_tag,
                        redelivered,
                        ..
                    } => {
                        if !matches!(self.assembly, Assembly::Idle) {
                            return Err(AmqpError::Protocol(
                                "basic.deliver in the middle of another delivery's content".into(),
                            ));
                        }
                        self.assembly = Assembly::Header {
                            delivery_tag,
                            redelivered,
                        };
                        Ok(())
                    }
                    AmqpMethod::BasicCancel { .. } => Err(AmqpError::Protocol(
                        "the server cancelled the consumer".into(),
                    )),
                    _ => Ok(()),
                }
            }
            FrameType::Header => {
                let Assembly::Header {
                    delivery_tag,
                    redelivered,
                } = self.assembly
                else {
                    return Err(misplaced("content header"));
                };
                // Only the fixed part is read: the properties are not needed.
                let p = &self.conn.rbuf[range];
                if p.len() < CONTENT_HEADER_FIXED_BYTES
                    || u16::from_be_bytes([p[0], p[1]]) != BASIC_CLASS_ID
                {
                    return Err(AmqpError::Protocol(format!(
                        "bad content header of {} bytes from the server",
                        p.len()
                    )));
                }
                let mut size = [0u8; 8];
                size.copy_from_slice(&p[CONTENT_BODY_SIZE_AT..CONTENT_HEADER_FIXED_BYTES]);
                let body_bytes = u64::from_be_bytes(size);
                self.assembly = Assembly::Body {
                    delivery_tag,
                    redelivered,
                    body_bytes,
                    received: 0,
                    stamp: [0; 8],
                };
                self.complete_if_whole(out);
                Ok(())
            }
            FrameType::Body => {
                let Assembly::Body {
                    body_bytes,
                    received,
                    stamp,
                    ..
                } = &mut self.assembly
                else {
                    return Err(misplaced("body"));
                };
                let chunk = &self.conn.rbuf[range];
                if *received < stamp.len() as u64 {
                    let from = *received as usize;
                    let n = chunk.len().min(stamp.len() - from);
                    stamp[from..from + n].copy_from_slice(&chunk[..n]);
                }
                *received += chunk.len() as u64;
                if *received > *body_bytes {
                    return Err(AmqpError::Protocol(format!(
                        "the server sent {received} body bytes for a body of {body_bytes}"
                    )));
                }
                self.complete_if_whole(out);
                Ok(())
            }
        }
    }

    /// Appends the delivery being assembled to `out` once its body is whole.
    fn complete_if_whole(&mut self, out: &mut Vec<DeliveryInfo>) {
        if let Assembly::Body {
            delivery_tag,
            redelivered,
            body_bytes,
            received,
            stamp,
        } = self.assembly
        {
            if received == body_bytes {
                out.push(DeliveryInfo {
                    delivery_tag,
                    redelivered,
                    body_bytes,
                    sent_ns: if body_bytes >= stamp.len() as u64 {
                        u64::from_be_bytes(stamp)
                    } else {
                        0
                    },
                });
                self.assembly = Assembly::Idle;
            }
        }
    }
}

impl ConsumerSession for Consumer {
    fn poll(&mut self, timeout: Duration, out: &mut Vec<DeliveryInfo>) -> Result<(), String> {
        self.conn.flush().map_err(text)?;
        let deadline = Instant::now() + timeout;
        loop {
            while let Some((h, range)) = self.conn.buffered_frame().map_err(text)? {
                self.on_frame(h, range, out).map_err(text)?;
            }
            if !out.is_empty() {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            // The same timeout every time: the socket option is set once.
            self.conn.set_read_timeout(timeout).map_err(text)?;
            if !self.conn.fill().map_err(text)? {
                return Ok(());
            }
        }
    }

    fn ack(&mut self, delivery_tag: u64, multiple: bool) -> Result<(), String> {
        let channel = self.conn.channel;
        self.conn.send(
            channel,
            &AmqpMethod::BasicAck {
                delivery_tag,
                multiple,
            },
        );
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        let Consumer { mut conn, tag, .. } = *self;
        let cancel = AmqpMethod::BasicCancel {
            consumer_tag: tag,
            no_wait: false,
        };
        conn.call(&cancel, |m| matches!(m, AmqpMethod::BasicCancelOk { .. }))
            .map_err(text)?;
        conn.close_channel().map_err(text)?;
        conn.close().map_err(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirm_window_single_multiple_and_out_of_order() {
        let mut w = ConfirmWindow::new();
        w.published(5);
        w.settle(2, false, true).unwrap();
        assert_eq!((w.unconfirmed, w.base), (4, 1));
        w.settle(1, false, true).unwrap();
        assert_eq!((w.unconfirmed, w.base), (3, 3));
        w.settle(4, true, true).unwrap();
        assert_eq!((w.unconfirmed, w.base), (1, 5));
        w.settle(5, false, false).unwrap();
        assert_eq!((w.unconfirmed, w.nacked, w.base), (0, 1, 6));
        assert!(w.settle(6, false, true).is_err());
        assert!(w.settle(0, true, true).is_err());
        // A repeated confirm of something already confirmed changes nothing.
        w.published(1);
        w.settle(3, true, true).unwrap();
        assert_eq!(w.unconfirmed, 1);
    }
}
