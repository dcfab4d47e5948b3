//! A connection: connect, the handshake, the write buffer, requests that wait for their
//! reply, close.
//!
//! The handshake is the specification's (AMQP 0-9-1 §2.2.4): protocol header,
//! `connection.start` → `start-ok` (SASL PLAIN), `tune` → `tune-ok` (the server's
//! `frame_max` and `channel_max`, heartbeats off), `open` → `open-ok`, then channel 1 is
//! opened.

use super::confirm::ConfirmWindow;
use super::consume::Assembly;
use super::error::AmqpClientError;
use super::stream::{tls_handshake, Stream};
use crate::amqp::{write_heartbeat, write_method, AmqpMethod, PROTOCOL_HEADER};
use crate::client::TlsOptions;
use crate::error::ReplyCode;
use crate::limits::SHORT_STRING_BYTES_MAX;
use crate::types::{FieldTable, FieldValue};
use std::io::{ErrorKind, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Read buffer beyond one frame, bytes, unless [`ConnectOptions::read_buffer_bytes`]
/// says otherwise: enough for replies and confirms; a consumer wants more (many
/// deliveries per `read()`).
pub const READ_BUFFER_BYTES_DEFAULT: usize = 64 << 10;

/// Write buffer size past which [`Connection::publish`](super::Connection::publish)
/// writes the buffer before the caller's [`Connection::flush`], bytes: bounds the buffer
/// for large bodies, while a batch of small messages stays one write.
pub const WRITE_BUFFER_FLUSH_BYTES: usize = 1 << 20;

/// Time allowed for the handshake and for each reply, unless
/// [`ConnectOptions::reply_timeout`] says otherwise.
pub const REPLY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Time a write may block (the server not reading, e.g. a RabbitMQ resource alarm)
/// before it fails, unless [`ConnectOptions::write_timeout`] says otherwise.
pub const WRITE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// Largest frame accepted before `connection.tune`, bytes (AMQP's frame-min-size is
/// 4096; `connection.start` with RabbitMQ's server properties is well under this).
const FRAME_MAX_BEFORE_TUNE: u32 = 131_072;

/// Smallest `frame_max` this client works with, bytes (AMQP 0-9-1 §4.2.3
/// frame-min-size).
const FRAME_MIN_BYTES: u32 = 4096;

/// Frame size used when the server offers 0 ("no limit"), bytes.
const FRAME_MAX_UNLIMITED: u32 = 1 << 20;

/// Highest channel number used when the server offers 0 ("no limit"; RabbitMQ's
/// default `channel_max` is 2047).
const CHANNEL_MAX_UNLIMITED: u16 = 2047;

/// Time allowed to set up the TCP connection (and TLS), unless
/// [`ConnectOptions::connect_timeout`] says otherwise (RabbitMQ's Erlang client waits
/// 60 s; a shovel wants to hear of a dead address sooner).
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Time allowed, after a write failed, to read the server's `connection.close` reason.
const CLOSE_REASON_TIMEOUT: Duration = Duration::from_secs(1);

/// How to connect: address, credentials, virtual host, buffers and timeouts.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// `HOST:PORT` of the server's AMQP 0-9-1 listener (5672 by convention).
    pub addr: String,
    /// User name (SASL PLAIN).
    pub user: String,
    /// Password (SASL PLAIN).
    pub password: String,
    /// Virtual host to open (RabbitMQ's default is `/`).
    pub vhost: String,
    /// The connection's name, sent as the `connection_name` client property (shown by
    /// RabbitMQ's management UI and `rabbitmqctl list_connections`).
    pub connection_name: String,
    /// Read buffer beyond one frame, bytes: more lets one `read()` carry more
    /// deliveries.
    pub read_buffer_bytes: usize,
    /// Time allowed for the handshake and for each reply.
    pub reply_timeout: Duration,
    /// Time a write may block before it fails with [`AmqpClientError::Timeout`].
    pub write_timeout: Duration,
    /// Time allowed for the TCP connection and the TLS handshake.
    pub connect_timeout: Duration,
    /// Heartbeat interval asked for in `tune-ok`, seconds; 0 = none (the server's offer
    /// is then declined). Otherwise the smaller of this and the server's offer (a server
    /// offering 0 gets this), as RabbitMQ's clients negotiate (AMQP 0-9-1 §4.2.7). The
    /// owner calls [`Connection::heartbeat_tick`] at least every half interval.
    pub heartbeat: u16,
    /// TLS (`amqps://`): the CA the server's certificate must chain to, this client's
    /// certificate; `None`: plain TCP.
    pub tls: Option<TlsOptions>,
}

impl ConnectOptions {
    /// Default options for `addr`: guest/guest, vhost `/`, name `relaymq`,
    /// [`READ_BUFFER_BYTES_DEFAULT`], [`REPLY_TIMEOUT_DEFAULT`],
    /// [`WRITE_TIMEOUT_DEFAULT`].
    pub fn new(addr: impl Into<String>) -> ConnectOptions {
        ConnectOptions {
            addr: addr.into(),
            user: "guest".into(),
            password: "guest".into(),
            vhost: "/".into(),
            connection_name: "relaymq".into(),
            read_buffer_bytes: READ_BUFFER_BYTES_DEFAULT,
            reply_timeout: REPLY_TIMEOUT_DEFAULT,
            write_timeout: WRITE_TIMEOUT_DEFAULT,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            heartbeat: 0,
            tls: None,
        }
    }
}

/// A blocking AMQP 0-9-1 connection with one channel in use.
///
/// Requests ([`Connection::call`] and the typed methods built on it) write at once and
/// wait for their reply; publishes and acks are appended to a write buffer that
/// [`Connection::flush`] (or the next request or read) writes.
pub struct Connection {
    /// The socket (plain or TLS); blocking, with the write timeout set and the read
    /// timeout set per wait.
    pub(super) stream: Stream,
    /// Received bytes; `rbuf[rstart..rend]` is not parsed yet. Its length is the read
    /// buffer size plus one frame, so a partial frame moved to the front always leaves
    /// room for a whole read.
    pub(super) rbuf: Vec<u8>,
    /// Start of the unparsed bytes in `rbuf`.
    pub(super) rstart: usize,
    /// End of the received bytes in `rbuf`.
    pub(super) rend: usize,
    /// Bytes to send (frames appended by the operations, written by `flush`).
    pub(super) wbuf: Vec<u8>,
    /// The negotiated frame size, bytes (header and end octet included).
    pub(super) frame_max: u32,
    /// The negotiated highest channel number.
    channel_max: u16,
    /// The channel in use (1 once open; a higher one after the server closed one).
    pub(super) channel: u16,
    /// The read timeout set on the socket, so it is set only when it changes.
    pub(super) read_timeout: Option<Duration>,
    /// `connection.close` went one way or the other: nothing more is sent.
    pub(super) closed: bool,
    /// Time allowed for each reply.
    pub(super) reply_timeout: Duration,
    /// Time a write may block (for the error text).
    write_timeout: Duration,
    /// The channel in use is in confirm mode: its unconfirmed publishes.
    pub(super) confirms: Option<ConfirmWindow>,
    /// The delivery being received on the channel in use.
    pub(super) delivery: Assembly,
    /// The negotiated heartbeat interval; `None`: no heartbeats.
    heartbeat: Option<Duration>,
    /// When bytes last came from the server.
    pub(super) last_read: Instant,
    /// When bytes were last written to the server.
    last_write: Instant,
    /// The server sent `connection.blocked` and no `unblocked` since (RabbitMQ's
    /// "Connection Blocked Notifications": a resource alarm).
    pub(super) blocked: bool,
    /// The server's `connection.start` properties (product, version, `cluster_name`).
    server_properties: FieldTable,
}

impl Connection {
    /// Connects to [`ConnectOptions::addr`], runs the handshake as
    /// [`ConnectOptions::user`] on [`ConnectOptions::vhost`] and opens channel 1, the
    /// channel in use.
    ///
    /// # Errors
    /// [`AmqpClientError::Io`] when the connection fails or the server hangs up (RabbitMQ
    /// does that to a refused login of a client without `authentication_failure_close`),
    /// [`AmqpClientError::ConnectionClosed`] for a refused login (403) or vhost (530),
    /// [`AmqpClientError::Protocol`] when the server does not speak AMQP 0-9-1, offers
    /// no SASL PLAIN or a `frame_max` below 4096, [`AmqpClientError::Timeout`] after
    /// [`ConnectOptions::reply_timeout`]; [`AmqpClientError::Usage`] for a vhost name
    /// longer than 255 bytes.
    pub fn connect(opts: &ConnectOptions) -> Result<Connection, AmqpClientError> {
        check_short_str("vhost", &opts.vhost)?;
        let addrs: Vec<_> = opts
            .addr
            .to_socket_addrs()
            .map_err(|e| AmqpClientError::io(format!("cannot resolve {}", opts.addr), e))?
            .collect();
        let mut last = None;
        let mut socket = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, opts.connect_timeout) {
                Ok(s) => {
                    socket = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let socket = socket.ok_or_else(|| {
            AmqpClientError::io(
                format!("cannot connect to {}", opts.addr),
                last.unwrap_or_else(|| {
                    std::io::Error::new(ErrorKind::NotFound, "the name has no address")
                }),
            )
        })?;
        let setup = |e| AmqpClientError::io("setting up the socket", e);
        socket.set_nodelay(true).map_err(setup)?;
        socket
            .set_write_timeout(Some(opts.write_timeout))
            .map_err(setup)?;
        let stream = match &opts.tls {
            None => Stream::Plain(socket),
            Some(tls) => {
                socket
                    .set_read_timeout(Some(opts.connect_timeout))
                    .map_err(setup)?;
                tls_handshake(socket, &opts.addr, tls)?
            }
        };
        let now = Instant::now();
        let mut c = Connection {
            stream,
            rbuf: vec![0; opts.read_buffer_bytes + FRAME_MAX_BEFORE_TUNE as usize],
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            frame_max: FRAME_MAX_BEFORE_TUNE,
            channel_max: 0,
            channel: 0,
            read_timeout: None,
            closed: false,
            reply_timeout: opts.reply_timeout,
            write_timeout: opts.write_timeout,
            confirms: None,
            delivery: Assembly::default(),
            heartbeat: None,
            last_read: now,
            last_write: now,
            blocked: false,
            server_properties: FieldTable::new(),
        };
        c.handshake(opts)?;
        Ok(c)
    }

    fn handshake(&mut self, opts: &ConnectOptions) -> Result<(), AmqpClientError> {
        let deadline = Instant::now() + self.reply_timeout;
        self.wbuf.extend_from_slice(&PROTOCOL_HEADER);
        self.flush()?;
        match self.recv_method(deadline)? {
            (
                0,
                AmqpMethod::ConnectionStart {
                    mechanisms,
                    server_properties,
                    ..
                },
            ) => {
                self.server_properties = server_properties;
                if !mechanisms.split(|b| *b == b' ').any(|m| m == b"PLAIN") {
                    return Err(AmqpClientError::Protocol(format!(
                        "the server does not offer SASL PLAIN (it offers '{}')",
                        String::from_utf8_lossy(&mechanisms)
                    )));
                }
            }
            (ch, m) => return Err(unexpected("connection.start", ch, &m)),
        }
        self.start_ok(opts)?;
        let (channel_max, frame_max, heartbeat) = match self.recv_method(deadline) {
            Ok((
                0,
                AmqpMethod::ConnectionTune {
                    channel_max,
                    frame_max,
                    heartbeat,
                },
            )) => (channel_max, frame_max, heartbeat),
            Ok((ch, m)) => return Err(unexpected("connection.tune", ch, &m)),
            Err(AmqpClientError::Io { context, source }) => {
                return Err(AmqpClientError::Io {
                    context: format!(
                        "{context} after connection.start-ok (login refused? check user \
                         and password)"
                    ),
                    source,
                })
            }
            Err(e) => return Err(e),
        };
        let heartbeat = match (opts.heartbeat, heartbeat) {
            (0, _) => 0,
            (ours, 0) => ours,
            (ours, theirs) => ours.min(theirs),
        };
        self.tune_ok(channel_max, frame_max, heartbeat, opts.read_buffer_bytes)?;
        self.send(
            0,
            &AmqpMethod::ConnectionOpen {
                virtual_host: opts.vhost.clone(),
            },
        );
        self.flush()?;
        match self.recv_method(deadline)? {
            (0, AmqpMethod::ConnectionOpenOk {}) => {}
            (ch, m) => return Err(unexpected("connection.open-ok", ch, &m)),
        }
        self.open_channel().map(|_| ())
    }

    /// Sends `connection.start-ok`: SASL PLAIN (RFC 4616: `\0user\0password`).
    fn start_ok(&mut self, opts: &ConnectOptions) -> Result<(), AmqpClientError> {
        let mut response = Vec::with_capacity(2 + opts.user.len() + opts.password.len());
        response.push(0);
        response.extend_from_slice(opts.user.as_bytes());
        response.push(0);
        response.extend_from_slice(opts.password.as_bytes());
        self.send(
            0,
            &AmqpMethod::ConnectionStartOk {
                client_properties: client_properties(&opts.connection_name),
                mechanism: "PLAIN".into(),
                response,
                locale: "en_US".into(),
            },
        );
        self.flush()
    }

    /// Takes the server's `tune` values (0 = no limit: this client's own bound), sends
    /// `tune-ok` with the negotiated `heartbeat` (seconds, 0 = none) and sizes the read
    /// buffer for the frame size.
    fn tune_ok(
        &mut self,
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
        read_buffer_bytes: usize,
    ) -> Result<(), AmqpClientError> {
        let frame_max = if frame_max == 0 {
            FRAME_MAX_UNLIMITED
        } else {
            frame_max
        };
        if frame_max < FRAME_MIN_BYTES {
            return Err(AmqpClientError::Protocol(format!(
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
                heartbeat,
            },
        );
        self.heartbeat = (heartbeat > 0).then(|| Duration::from_secs(u64::from(heartbeat)));
        self.frame_max = frame_max;
        let want = read_buffer_bytes + frame_max as usize;
        if self.rbuf.len() < want {
            self.rbuf.resize(want, 0);
        }
        Ok(())
    }

    /// The negotiated frame size, bytes (header and end octet included): body frames
    /// carry at most `frame_max - 8` bytes of body.
    pub fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// The negotiated heartbeat interval; `None` when heartbeats are off.
    pub fn heartbeat(&self) -> Option<Duration> {
        self.heartbeat
    }

    /// Keeps the heartbeat (AMQP 0-9-1 §4.2.7): sends a heartbeat frame when nothing was
    /// written for half the interval, and fails when nothing came from the server for
    /// two intervals. Call it at least every half interval; nothing without heartbeats.
    /// It does not read: a consuming connection is read by
    /// [`Connection::poll_deliveries`]; one that only publishes or makes requests uses
    /// [`Connection::keep_alive`].
    ///
    /// # Errors
    /// [`AmqpClientError::Io`] (kind `TimedOut`, "missed heartbeats from the server")
    /// when the server went quiet; a failed write.
    pub fn heartbeat_tick(&mut self) -> Result<(), AmqpClientError> {
        let Some(hb) = self.heartbeat else {
            return Ok(());
        };
        if self.last_read.elapsed() > hb * 2 {
            self.closed = true;
            return Err(AmqpClientError::io(
                "missed heartbeats from the server",
                std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("nothing received for {} s", (hb * 2).as_secs()),
                ),
            ));
        }
        if self.last_write.elapsed() >= hb / 2 {
            write_heartbeat(&mut self.wbuf);
            self.flush()?;
        }
        Ok(())
    }

    /// The server's properties from `connection.start` (`product`, `version`,
    /// `cluster_name` for RabbitMQ and RelayMQ, `capabilities`).
    pub fn server_properties(&self) -> &FieldTable {
        &self.server_properties
    }

    /// [`Connection::heartbeat_tick`] for a connection that does not consume (a
    /// publisher, a connection for requests): when nothing was read for half the
    /// heartbeat interval it first reads what the server sent, without blocking, so the
    /// server's heartbeats (and `connection.blocked`, confirms, a close) are seen while
    /// the connection is idle. Deliveries read so are dropped: not for a consumer.
    ///
    /// # Errors
    /// As [`Connection::heartbeat_tick`] and [`Connection::check_incoming`].
    pub fn keep_alive(&mut self) -> Result<(), AmqpClientError> {
        if let Some(hb) = self.heartbeat {
            if self.last_read.elapsed() >= hb / 2 {
                self.check_incoming()?;
            }
        }
        self.heartbeat_tick()
    }

    /// Whether the server has blocked this connection's publishes (`connection.blocked`
    /// received, no `connection.unblocked` since; RabbitMQ's "Connection Blocked
    /// Notifications"). Updated whenever the connection reads.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// The negotiated highest channel number.
    pub fn channel_max(&self) -> u16 {
        self.channel_max
    }

    /// The channel in use: what requests, publishes and acks go on.
    pub fn channel(&self) -> u16 {
        self.channel
    }

    /// Appends a method frame to the write buffer.
    pub(super) fn send(&mut self, channel: u16, m: &AmqpMethod) {
        write_method(&mut self.wbuf, channel, m);
    }

    /// Writes the write buffer (publishes and acks appended since the last write).
    ///
    /// # Errors
    /// The write failed: the server's `connection.close` when it sent one just before
    /// ([`AmqpClientError::ConnectionClosed`]), [`AmqpClientError::Timeout`] when the
    /// write blocked past [`ConnectOptions::write_timeout`], else
    /// [`AmqpClientError::Io`]. The buffer is emptied either way.
    pub fn flush(&mut self) -> Result<(), AmqpClientError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.wbuf);
        self.wbuf.clear();
        match r {
            Ok(()) => {
                self.last_write = Instant::now();
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                Err(AmqpClientError::Timeout(format!(
                    "a write blocked for {} s (is the server blocking publishers?)",
                    self.write_timeout.as_secs()
                )))
            }
            Err(e) => {
                self.closed = true;
                Err(self
                    .close_reason()
                    .unwrap_or_else(|| AmqpClientError::io("write", e)))
            }
        }
    }

    /// After a failed write: the `connection.close` the server sent, if it is readable.
    fn close_reason(&mut self) -> Option<AmqpClientError> {
        let deadline = Instant::now() + CLOSE_REASON_TIMEOUT;
        loop {
            match self.recv_method(deadline) {
                Ok(_) => continue,
                Err(e @ AmqpClientError::ConnectionClosed { .. }) => return Some(e),
                Err(_) => return None,
            }
        }
    }

    /// Sends `m` on the channel in use and waits for the reply `is_reply` accepts, for
    /// at most [`ConnectOptions::reply_timeout`]; returns the reply. Methods on the way
    /// are skipped (deliveries dropped, confirms counted).
    ///
    /// The typed requests ([`Connection::queue_declare`] …) are built on this; use it
    /// for the methods they leave out (e.g. `queue.purge` → `queue.purge-ok`). `m` must
    /// fit in one frame ([`Connection::frame_max`]).
    ///
    /// # Errors
    /// A refusal is [`AmqpClientError::ChannelClosed`] or
    /// [`AmqpClientError::ConnectionClosed`] with the server's code and text; else a
    /// write or read failure, a malformed frame ([`AmqpClientError::Protocol`]), the
    /// timeout.
    pub fn call(
        &mut self,
        m: &AmqpMethod,
        is_reply: impl Fn(&AmqpMethod) -> bool,
    ) -> Result<AmqpMethod, AmqpClientError> {
        let channel = self.channel;
        self.send(channel, m);
        self.flush()?;
        let deadline = Instant::now() + self.reply_timeout;
        loop {
            let (ch, reply) = self.recv_method(deadline)?;
            if ch == channel && is_reply(&reply) {
                return Ok(reply);
            }
        }
    }

    /// Closes the connection: `connection.close` 200, then waits for `close-ok`. A
    /// connection the server already closed closes without a word.
    ///
    /// # Errors
    /// As [`Connection::call`].
    pub fn close(mut self) -> Result<(), AmqpClientError> {
        if self.closed {
            return Ok(());
        }
        self.send(
            0,
            &AmqpMethod::ConnectionClose {
                reply_code: ReplyCode::Success.as_u16(),
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            },
        );
        self.flush()?;
        let deadline = Instant::now() + self.reply_timeout;
        loop {
            if let (0, AmqpMethod::ConnectionCloseOk {}) = self.recv_method(deadline)? {
                self.closed = true;
                return Ok(());
            }
        }
    }
}

/// The error for a reply that is not the one expected.
pub(super) fn unexpected(wanted: &str, channel: u16, got: &AmqpMethod) -> AmqpClientError {
    AmqpClientError::Protocol(format!(
        "expected {wanted}, the server sent {} on channel {channel}",
        got.name()
    ))
}

/// Checks that `value` fits in an AMQP short string (AMQP 0-9-1 §4.2.5.3): the codec
/// would cut it at 255 bytes and the server act on another name.
///
/// # Errors
/// [`AmqpClientError::Usage`] naming `what`.
pub(super) fn check_short_str(what: &str, value: &str) -> Result<(), AmqpClientError> {
    if value.len() > SHORT_STRING_BYTES_MAX {
        return Err(AmqpClientError::Usage(format!(
            "{what} is {} bytes long; the limit is {SHORT_STRING_BYTES_MAX} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// The client properties: product, version, connection name and the capabilities this
/// client handles (RabbitMQ then sends `basic.nack`, `basic.cancel`, and a
/// `connection.close` 403 for a refused login instead of hanging up; RabbitMQ's
/// "Connection Blocked Notifications" and "Consumer Cancellation Notification" pages).
fn client_properties(connection_name: &str) -> FieldTable {
    let mut caps = FieldTable::new();
    for c in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "authentication_failure_close",
        "connection.blocked",
    ] {
        caps.insert(c.into(), FieldValue::Bool(true));
    }
    let mut t = FieldTable::new();
    t.insert("product".into(), FieldValue::string("relaymq"));
    t.insert(
        "version".into(),
        FieldValue::string(env!("CARGO_PKG_VERSION")),
    );
    t.insert(
        "connection_name".into(),
        FieldValue::string(connection_name),
    );
    t.insert("capabilities".into(), FieldValue::Table(caps));
    t
}
