//! [`Connection`]: connecting, the opening handshake, channels, the administrative
//! requests of channel 0, and closing.

use super::blocked::BlockedStatus;
use super::channel::Channel;
use super::error::ClientError;
use super::io::{
    is_read_timeout, run_heartbeats, run_reader, ClientStream, FrameReader, Incoming, Writer,
};
use super::options::ConnectOptions;
use super::shared::{lock, Hook, Shared};
use super::validate;
use crate::error::ReplyCode;
use crate::limits::{FRAME_BYTES_HANDSHAKE, FRAME_BYTES_MIN};
use crate::native::{ListKind, Method, PROTOCOL_HEADER};
use crate::types::FieldTable;
use crate::types::MemoryWatermark;
use crossbeam_channel::Sender;
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Request id of `connection.open` (nothing else is in flight during the handshake).
const OPEN_REQUEST_ID: u32 = 1;

/// A connection to a RelayMQ server over the native protocol.
///
/// A reader thread routes replies and deliveries; a heartbeat thread keeps an idle
/// connection alive. Requests block until their reply arrives or the request timeout
/// passes. Dropping the connection closes it (best effort); [`Connection::close`] reports
/// how the close went.
pub struct Connection {
    /// State shared with channels, consumers and the threads.
    shared: Arc<Shared>,
    /// Dropping it stops the heartbeat thread.
    heartbeat_stop: Option<Sender<()>>,
    /// Threads to join on close.
    threads: Vec<JoinHandle<()>>,
    /// Values the server chose at open.
    negotiated: Negotiated,
    /// Set once closed, so `Drop` does not close again.
    closed: bool,
}

/// What `connection.open-ok` said.
#[derive(Clone, Debug)]
struct Negotiated {
    frame_max: u32,
    heartbeat_s: u16,
    channel_max: u16,
    server_version: String,
    connection_id: u64,
}

impl Connection {
    /// Connects to `addr` (`HOST:PORT`) as guest/guest on vhost `/`, with the defaults of
    /// [`ConnectOptions`].
    ///
    /// # Errors
    /// As [`Connection::connect_with`].
    pub fn connect(addr: &str) -> Result<Connection, ClientError> {
        Connection::connect_with(ConnectOptions::new(addr))
    }

    /// Connects, sends the protocol header and `connection.open`, and waits for
    /// `open-ok` (the native protocol's handshake, `docs/protocol.md`).
    ///
    /// # Errors
    /// [`ClientError::Io`] when no address accepts the connection,
    /// [`ClientError::Auth`] when the server refuses the credentials (403) or the vhost
    /// (402), [`ClientError::Timeout`] when the handshake takes longer than
    /// `options.timeout`, [`ClientError::Protocol`] for an unexpected answer,
    /// [`ClientError::Usage`] for a user, vhost or client name over 255 bytes.
    pub fn connect_with(options: ConnectOptions) -> Result<Connection, ClientError> {
        validate::short_str("user", &options.user)?;
        validate::short_str("vhost", &options.vhost)?;
        validate::short_str("client name", &options.client_name)?;
        let socket = connect_tcp(&options.addr, options.timeout)?;
        socket.set_nodelay(true)?;
        socket.set_read_timeout(Some(options.timeout))?;
        socket.set_write_timeout(Some(options.timeout))?;
        let (mut reader_stream, writer_stream) = match &options.tls {
            None => {
                let writer_half = socket.try_clone()?;
                (
                    ClientStream::Plain(socket),
                    ClientStream::Plain(writer_half),
                )
            }
            Some(tls) => {
                let (r, w) = super::tls::handshake(socket, &options.addr, tls)?;
                (ClientStream::Tls(r), ClientStream::Tls(w))
            }
        };
        let mut writer = Writer::new(writer_stream, FRAME_BYTES_HANDSHAKE);
        let mut frames = FrameReader::new(FRAME_BYTES_HANDSHAKE);
        let negotiated = handshake(&mut writer, &mut reader_stream, &mut frames, &options)?;

        writer.set_frame_max(negotiated.frame_max);
        frames.set_frame_max(negotiated.frame_max);
        reader_stream.socket().set_write_timeout(None)?;
        let heartbeat = Duration::from_secs(negotiated.heartbeat_s as u64);
        reader_stream
            .socket()
            .set_read_timeout(if heartbeat.is_zero() {
                None
            } else {
                Some(heartbeat * 2 + Duration::from_secs(1))
            })?;
        let shared = Arc::new(Shared::new(writer, options.timeout, negotiated.channel_max));
        let mut threads = Vec::new();
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("relaymq-client-reader".into())
                .spawn(move || run_reader(s, reader_stream, frames))?,
        );
        let mut heartbeat_stop = None;
        if !heartbeat.is_zero() {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let s = Arc::clone(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name("relaymq-client-heartbeat".into())
                    .spawn(move || run_heartbeats(s, heartbeat, rx))?,
            );
            heartbeat_stop = Some(tx);
        }
        Ok(Connection {
            shared,
            heartbeat_stop,
            threads,
            negotiated,
            closed: false,
        })
    }

    /// The negotiated frame size, bytes, header included.
    pub fn frame_max(&self) -> u32 {
        self.negotiated.frame_max
    }

    /// The negotiated heartbeat interval, seconds (0: none).
    pub fn heartbeat_s(&self) -> u16 {
        self.negotiated.heartbeat_s
    }

    /// The highest channel number the server allows.
    pub fn channel_max(&self) -> u16 {
        self.negotiated.channel_max
    }

    /// The server's version string.
    pub fn server_version(&self) -> &str {
        &self.negotiated.server_version
    }

    /// The server's id for this connection (as shown by `list connections`).
    pub fn connection_id(&self) -> u64 {
        self.negotiated.connection_id
    }

    /// Whether the connection is still usable (neither side has closed it).
    pub fn is_open(&self) -> bool {
        lock(&self.shared.state).closed.is_none()
    }

    /// Opens a channel (`channel.open`) on a free number, counting up from the last one
    /// used (so a number just closed is not reused at once).
    ///
    /// # Errors
    /// The connection's close error, [`ClientError::Usage`] when `channel_max` channels
    /// are open, [`ClientError::Timeout`], or the server's refusal.
    pub fn open_channel(&self) -> Result<Channel, ClientError> {
        Channel::open(Arc::clone(&self.shared))
    }

    /// Creates a virtual host (idempotent). Sent on channel 0.
    ///
    /// # Errors
    /// The server's refusal (e.g. 403 ACCESS_REFUSED), [`ClientError::Timeout`], the
    /// connection's close error, [`ClientError::Usage`] for a name over 255 bytes.
    pub fn declare_vhost(&self, name: &str) -> Result<(), ClientError> {
        validate::short_str("vhost", name)?;
        let reply = self.call(Method::VhostDeclare { name: name.into() })?;
        expect_ok(reply, "vhost.declare")
    }

    /// Deletes a virtual host and everything in it. Sent on channel 0.
    ///
    /// # Errors
    /// The server's refusal (e.g. 404 NOT_FOUND), [`ClientError::Timeout`], the
    /// connection's close error, [`ClientError::Usage`] for a name over 255 bytes.
    pub fn delete_vhost(&self, name: &str) -> Result<(), ClientError> {
        validate::short_str("vhost", name)?;
        let reply = self.call(Method::VhostDelete { name: name.into() })?;
        expect_ok(reply, "vhost.delete")
    }

    /// Lists objects of the connection's vhost (or all vhosts / connections): one table
    /// per row, fields named as in RabbitMQ's management API (`name`, `durable`,
    /// `messages_ready`, ...).
    ///
    /// # Errors
    /// The server's refusal, [`ClientError::Timeout`], the connection's close error.
    pub fn list(&self, kind: ListKind) -> Result<Vec<FieldTable>, ClientError> {
        match self.call(Method::List { kind })? {
            Method::ListOk { rows } => Ok(rows),
            other => Err(unexpected(&other, "list")),
        }
    }

    /// The server's status fields (version, uptime, counts).
    ///
    /// # Errors
    /// The server's refusal, [`ClientError::Timeout`], the connection's close error.
    pub fn status(&self) -> Result<FieldTable, ClientError> {
        match self.call(Method::Status)? {
            Method::StatusOk { info } => Ok(info),
            other => Err(unexpected(&other, "status")),
        }
    }

    /// Sets the server's memory high-water mark (like `rabbitmqctl
    /// set_vm_memory_high_watermark`): a fraction of the memory available or an absolute
    /// size. The server checks memory at once; publishers are blocked while resident
    /// memory is above it. Sent on channel 0; an administrator's request.
    ///
    /// # Errors
    /// [`ClientError::Usage`] for a fraction outside `0.0..=1.0` (not sent), the server's
    /// refusal (406 for a value out of range, 403 for a user who may not), the
    /// connection's close error, [`ClientError::Timeout`].
    pub fn set_memory_high_watermark(&self, watermark: MemoryWatermark) -> Result<(), ClientError> {
        watermark
            .validate()
            .map_err(|e| ClientError::Usage(e.message))?;
        let reply = self.call(Method::MemoryHighWatermarkSet { watermark })?;
        expect_ok(reply, "memory-high-watermark.set")
    }

    /// Sets the server's free-disk low-water mark, in bytes (like `rabbitmqctl
    /// set_disk_free_limit`): publishers are blocked while the data directory's
    /// filesystem has less free space. The server checks at once. Sent on channel 0; an
    /// administrator's request.
    ///
    /// # Errors
    /// The server's refusal (403 for a user who may not), the connection's close error,
    /// [`ClientError::Timeout`].
    pub fn set_disk_free_limit(&self, bytes: u64) -> Result<(), ClientError> {
        let reply = self.call(Method::DiskFreeLimitSet { bytes })?;
        expect_ok(reply, "disk-free-limit.set")
    }

    /// Whether the server blocks this connection's publishes (a resource alarm is set and
    /// the connection publishes; RabbitMQ's `connection.blocked`).
    pub fn is_blocked(&self) -> bool {
        self.blocked_status().is_blocked()
    }

    /// A handle on the blocked state, for another thread to watch or wait on.
    pub fn blocked_status(&self) -> BlockedStatus {
        BlockedStatus::new(Arc::clone(&self.shared))
    }

    pub(super) fn call(&self, method: Method) -> Result<Method, ClientError> {
        self.shared.call(0, method, Hook::None)
    }

    /// Closes the connection: `connection.close` (200), waits for `close-ok`, stops the
    /// threads. Channels and consumers still held fail from then on.
    ///
    /// # Errors
    /// The connection's close error when the server had already closed it (e.g. after a
    /// hard error), [`ClientError::Timeout`] or [`ClientError::Io`] when the close
    /// handshake does not complete; the socket is closed in every case.
    pub fn close(mut self) -> Result<(), ClientError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), ClientError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let close = Method::Close {
            reply_code: ReplyCode::Success.as_u16(),
            reply_text: String::new(),
            method_id: 0,
        };
        let result = match self.call(close) {
            Ok(Method::CloseOk) => Ok(()),
            Ok(other) => Err(unexpected(&other, "connection.close")),
            Err(e) => Err(e),
        };
        self.shared.fail_connection(ClientError::ConnectionClosed {
            code: ReplyCode::Success.as_u16(),
            text: "connection closed by the client".into(),
        });
        self.heartbeat_stop = None;
        lock(&self.shared.writer).shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        result
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("connection_id", &self.negotiated.connection_id)
            .field("open", &self.is_open())
            .finish()
    }
}

/// `Ok(())` when the reply is `ok`.
pub(crate) fn expect_ok(reply: Method, request: &str) -> Result<(), ClientError> {
    match reply {
        Method::Ok => Ok(()),
        other => Err(unexpected(&other, request)),
    }
}

/// The error for a reply that does not answer the request.
pub(crate) fn unexpected(reply: &Method, request: &str) -> ClientError {
    ClientError::Protocol(format!("unexpected {} in reply to {request}", reply.name()))
}

/// Connects to the first address of `addr` that accepts within `timeout`.
fn connect_tcp(addr: &str, timeout: Duration) -> Result<TcpStream, ClientError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve {addr}: {e}")))?
        .collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{addr} has no address"));
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = io::Error::new(e.kind(), format!("cannot connect to {addr}: {e}")),
        }
    }
    Err(ClientError::Io(last))
}

/// Sends the protocol header and `connection.open`, reads until `open-ok` or `close`.
fn handshake(
    writer: &mut Writer,
    stream: &mut ClientStream,
    frames: &mut FrameReader,
    options: &ConnectOptions,
) -> Result<Negotiated, ClientError> {
    writer.write_raw(&PROTOCOL_HEADER)?;
    let open = Method::Open {
        user: options.user.clone(),
        password: options.password.clone(),
        vhost: options.vhost.clone(),
        frame_max: options.frame_max,
        heartbeat_s: options.heartbeat_s,
        channel_max: 0,
        client_name: options.client_name.clone(),
    };
    writer.send(0, OPEN_REQUEST_ID, &open)?;
    loop {
        let incoming = match frames.next(stream) {
            Ok(i) => i,
            Err(e) if is_read_timeout(&e) => return Err(ClientError::Timeout),
            Err(e) => return Err(e),
        };
        match incoming {
            Incoming::Heartbeat => {}
            Incoming::Method(
                0,
                _,
                Method::OpenOk {
                    frame_max,
                    heartbeat_s,
                    channel_max,
                    server_version,
                    connection_id,
                },
            ) => {
                if frame_max < FRAME_BYTES_MIN {
                    return Err(ClientError::Protocol(format!(
                        "server negotiated a frame size of {frame_max} bytes, below {FRAME_BYTES_MIN}"
                    )));
                }
                return Ok(Negotiated {
                    frame_max,
                    heartbeat_s,
                    channel_max,
                    server_version,
                    connection_id,
                });
            }
            Incoming::Method(
                0,
                request_id,
                Method::Close {
                    reply_code,
                    reply_text,
                    ..
                },
            ) => {
                let _ = writer.send(0, request_id, &Method::CloseOk);
                writer.shutdown();
                let (code, text) = (reply_code, reply_text);
                return Err(match ReplyCode::from_u16(code) {
                    Some(ReplyCode::AccessRefused | ReplyCode::InvalidPath) => {
                        ClientError::Auth { code, text }
                    }
                    _ => ClientError::ConnectionClosed { code, text },
                });
            }
            Incoming::Method(channel, _, other) => {
                return Err(ClientError::Protocol(format!(
                    "unexpected {} on channel {channel} during the handshake",
                    other.name()
                )));
            }
        }
    }
}
