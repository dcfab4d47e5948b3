//! The I/O thread: one mio `Poll` owning the listeners and every socket
//! (docs/architecture.md §2). It accepts (TLS included), reads until `WouldBlock` and hands what it read to
//! the connection's protocol input (`server/input.rs`: each adapter parses its own
//! protocol), writes outbound buffers, runs the heartbeat, handshake and linger timers,
//! and carries out the graceful shutdown.

use crate::broker::node::ConnTraffic;
use crate::broker::Broker;
use crate::limits::{
    BUFFER_IDLE_BYTES, HANDSHAKES_PENDING_MAX, MAILBOX_BYTES_MAX, OUTBOUND_LOW_WATER_BYTES,
    READ_BYTES_PER_EVENT,
};
use crate::server::config::ServerConfig;
use crate::server::conn::{Conn, Protocol};
use crate::server::event::ConnEvent;
use crate::server::handler::ConnHandler;
use crate::server::input::{Input, Refused};
use crate::server::notifier::Notifier;
use crate::server::outbound::Outbound;
use crate::server::publish_gate::PublishGate;
use crate::server::tls::{TlsInput, TlsLayer};
use crossbeam_channel::Sender;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Token of the shared waker.
pub const WAKER: Token = Token(usize::MAX);
const LISTENER: Token = Token(usize::MAX - 1);
const AMQP_LISTENER: Token = Token(usize::MAX - 2);
const TLS_LISTENER: Token = Token(usize::MAX - 3);
const AMQP_TLS_LISTENER: Token = Token(usize::MAX - 4);

/// Whether a poll token is one of the listeners' (or the waker's), not a connection's.
fn is_listener_or_waker(token: Token) -> bool {
    [
        WAKER,
        LISTENER,
        AMQP_LISTENER,
        TLS_LISTENER,
        AMQP_TLS_LISTENER,
    ]
    .contains(&token)
}

/// The listeners: which protocol each speaks, and whether over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    Native,
    Amqp,
    NativeTls,
    AmqpTls,
}

impl Listener {
    const ALL: [Listener; 4] = [
        Listener::Native,
        Listener::Amqp,
        Listener::NativeTls,
        Listener::AmqpTls,
    ];

    fn protocol(self) -> Protocol {
        match self {
            Listener::Native | Listener::NativeTls => Protocol::Native,
            Listener::Amqp | Listener::AmqpTls => Protocol::Amqp,
        }
    }

    fn is_tls(self) -> bool {
        matches!(self, Listener::NativeTls | Listener::AmqpTls)
    }
}

/// The TLS listeners and the configuration their connections share.
pub struct TlsListeners {
    /// rustls configuration of every TLS connection (certificate, key, client verifier).
    pub config: Arc<rustls::ServerConfig>,
    /// The native protocol's TLS listener, when on.
    pub native: Option<TcpListener>,
    /// The AMQP 0-9-1 TLS listener (amqps), when on.
    pub amqp: Option<TcpListener>,
}

impl TlsListeners {
    /// The native TLS listener's bound address, when on.
    ///
    /// # Errors
    /// The socket's error.
    pub fn native_addr(&self) -> io::Result<Option<SocketAddr>> {
        self.native.as_ref().map(|l| l.local_addr()).transpose()
    }

    /// The AMQP TLS listener's bound address, when on.
    ///
    /// # Errors
    /// The socket's error.
    pub fn amqp_addr(&self) -> io::Result<Option<SocketAddr>> {
        self.amqp.as_ref().map(|l| l.local_addr()).transpose()
    }
}

/// How long a closing connection keeps draining input after its write side is shut, so
/// the peer reads our `close` before the socket goes (closing with unread input would
/// send a TCP reset), in milliseconds.
const CLOSE_LINGER_MS: u64 = 2_000;

/// How long a connection being closed by the server may take to accept its last bytes
/// before the socket is dropped anyway, in milliseconds (a peer that never reads).
const CLOSE_DEADLINE_MS: u64 = 5_000;

/// Interval of the timer scan (heartbeats, handshake timeouts, lingering closes), in ms.
const TICK_MS: u64 = 250;

/// Size of the shared read buffer, in bytes.
const SCRATCH_BYTES: usize = 256 * 1024;

struct IoConn {
    conn: Arc<Conn>,
    socket: TcpStream,
    /// Bytes read but not yet parsed (at most one partial frame plus one read).
    pending: Vec<u8>,
    /// Parses the connection's protocol (header, frames, decoding).
    input: Input,
    /// Input is no longer parsed (protocol error or closing); reads are discarded.
    input_closed: bool,
    /// Reading stopped because the mailbox is over budget.
    paused: bool,
    writing: Vec<u8>,
    write_pos: usize,
    last_read: Instant,
    last_write: Instant,
    accepted_at: Instant,
    /// Write side shut; drop the socket at EOF or at this instant.
    linger_until: Option<Instant>,
    /// When the server first saw this connection asked to close.
    closing_since: Option<Instant>,
    /// The peer shut its write side after input we refused; nothing more is read.
    peer_done: bool,
    /// Holds a publish read during a resource alarm: parsing and reading stop until the
    /// alarms clear (`server/publish_gate.rs`).
    gate: PublishGate,
    /// The TLS state of a connection accepted on a TLS listener; `None` for plain TCP,
    /// whose bytes never go near it.
    tls: Option<Box<TlsLayer>>,
}

/// The I/O thread's state.
pub struct EventLoop {
    poll: Poll,
    listener: Option<TcpListener>,
    amqp_listener: Option<TcpListener>,
    tls_listener: Option<TcpListener>,
    amqp_tls_listener: Option<TcpListener>,
    /// Configuration of the connections the TLS listeners accept.
    tls_config: Option<Arc<rustls::ServerConfig>>,
    conns: HashMap<u64, IoConn>,
    notifier: Arc<Notifier>,
    broker: Arc<Broker>,
    config: Arc<ServerConfig>,
    pool: Option<Sender<Arc<Conn>>>,
    shutdown: Arc<AtomicBool>,
    scratch: Vec<u8>,
    backlog: VecDeque<u64>,
    /// Connections whose workers appended while their socket was being written: written
    /// again next loop turn (which then polls without waiting).
    deferred: Vec<u64>,
    accept_retry: bool,
    /// Sockets closed at accept since the last tick because the server held
    /// `max_connections + HANDSHAKES_PENDING_MAX` (logged once per tick, not per socket).
    refused_at_accept: u64,
    /// The resource alarm bits this thread last acted on.
    alarm_bits: u8,
}

enum ReadEnd {
    Open,
    Closed(String),
}

impl EventLoop {
    /// A loop over `listener` (and the AMQP and TLS listeners that are on), feeding `pool`.
    ///
    /// # Errors
    /// A listener cannot be registered with `poll`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the listeners and shared state the loop owns, given once at start"
    )]
    pub fn new(
        poll: Poll,
        mut listener: TcpListener,
        mut amqp_listener: Option<TcpListener>,
        tls: Option<TlsListeners>,
        notifier: Arc<Notifier>,
        broker: Arc<Broker>,
        config: Arc<ServerConfig>,
        pool: Sender<Arc<Conn>>,
        shutdown: Arc<AtomicBool>,
    ) -> io::Result<EventLoop> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        if let Some(l) = &mut amqp_listener {
            poll.registry()
                .register(l, AMQP_LISTENER, Interest::READABLE)?;
        }
        let (tls_config, mut tls_listener, mut amqp_tls_listener) = match tls {
            Some(t) => (Some(t.config), t.native, t.amqp),
            None => (None, None, None),
        };
        if let Some(l) = &mut tls_listener {
            poll.registry()
                .register(l, TLS_LISTENER, Interest::READABLE)?;
        }
        if let Some(l) = &mut amqp_tls_listener {
            poll.registry()
                .register(l, AMQP_TLS_LISTENER, Interest::READABLE)?;
        }
        Ok(EventLoop {
            poll,
            listener: Some(listener),
            amqp_listener,
            tls_listener,
            amqp_tls_listener,
            tls_config,
            conns: HashMap::new(),
            notifier,
            broker,
            config,
            pool: Some(pool),
            shutdown,
            scratch: vec![0; SCRATCH_BYTES],
            backlog: VecDeque::new(),
            deferred: Vec::new(),
            accept_retry: false,
            refused_at_accept: 0,
            alarm_bits: 0,
        })
    }

    /// Serves until the shutdown flag is set, then shuts down gracefully.
    ///
    /// # Errors
    /// An I/O error of the poll itself (not of a client socket).
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut marked = Vec::new();
        let mut last_tick = Instant::now();
        while !self.shutdown.load(Ordering::Acquire) {
            let timeout = if self.backlog.is_empty() && self.deferred.is_empty() {
                Duration::from_millis(TICK_MS)
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    LISTENER => self.accept(Listener::Native),
                    AMQP_LISTENER => self.accept(Listener::Amqp),
                    TLS_LISTENER => self.accept(Listener::NativeTls),
                    AMQP_TLS_LISTENER => self.accept(Listener::AmqpTls),
                    Token(t) => {
                        let id = t as u64;
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.read(id);
                        }
                        if ev.is_writable() {
                            self.flush(id);
                        }
                    }
                }
            }
            self.check_alarms();
            self.serve_marked(&mut marked);
            for _ in 0..self.backlog.len() {
                if let Some(id) = self.backlog.pop_front() {
                    self.read(id);
                }
            }
            if last_tick.elapsed() >= Duration::from_millis(TICK_MS) {
                last_tick = Instant::now();
                self.tick();
            }
        }
        self.shut_down(&mut events, &mut marked)
    }

    /// Acts on a change of the resource alarm bits (the monitor wakes this thread): an
    /// alarm set tells the connections that publish; all cleared releases the held
    /// publishes, parses what was buffered behind them and resumes reading.
    fn check_alarms(&mut self) {
        let alarms = self.broker.alarms();
        let bits = alarms.bits();
        // An alarm that set and cleared between two turns may still have held a publish.
        if bits == self.alarm_bits && (bits != 0 || alarms.blocked_count() == 0) {
            return;
        }
        let was = std::mem::replace(&mut self.alarm_bits, bits);
        if bits != 0 {
            if was == 0 {
                for io in self.conns.values_mut() {
                    io.gate.alarm_set(&io.conn);
                }
            }
            return;
        }
        let mut resume = Vec::new();
        for (id, io) in self.conns.iter_mut() {
            if let Some((event, cost)) = io.gate.release(&io.conn) {
                io.conn.push(event, cost);
                if !io.input_closed {
                    absorb(io, &[]);
                }
                resume.push(*id);
            }
        }
        for id in resume {
            self.read(id);
        }
    }

    fn serve_marked(&mut self, marked: &mut Vec<u64>) {
        self.notifier.take(marked);
        marked.append(&mut self.deferred);
        marked.sort_unstable();
        marked.dedup();
        for id in marked.drain(..) {
            let Some(io) = self.conns.get_mut(&id) else {
                continue;
            };
            if io.conn.outbound.is_overflowed() {
                log::warn!(
                    "closing connection {id} ({}): the client does not read; outbound buffer over its limit",
                    io.conn.peer
                );
                self.close(id, false);
                continue;
            }
            let resume = io.paused && !io.conn.read_paused.load(Ordering::SeqCst);
            self.flush(id);
            if resume {
                if let Some(io) = self.conns.get_mut(&id) {
                    io.paused = false;
                }
                self.read(id);
            }
        }
    }

    fn accept(&mut self, kind: Listener) {
        let protocol = kind.protocol();
        loop {
            let listener = match kind {
                Listener::Native => &self.listener,
                Listener::Amqp => &self.amqp_listener,
                Listener::NativeTls => &self.tls_listener,
                Listener::AmqpTls => &self.amqp_tls_listener,
            };
            let Some(listener) = listener else {
                return;
            };
            match listener.accept() {
                Ok((mut socket, peer)) => {
                    let limits = self.broker.limits().load();
                    // Connections past `max_connections` are refused with 530 at
                    // connection.open; sockets past this many more, or past the
                    // file-descriptor budget's sockets, are dropped at once (the accept
                    // loop drains the backlog, so nothing spins).
                    let sockets_max = self.broker.limits().sockets_max();
                    if self.conns.len() >= sockets_max {
                        log::debug!(
                            "closing connection from {peer} at accept: {sockets_max} sockets open"
                        );
                        self.refused_at_accept += 1;
                        drop(socket);
                        continue;
                    }
                    let _ = socket.set_nodelay(true);
                    let tls = match (kind.is_tls(), &self.tls_config) {
                        (false, _) => None,
                        (true, Some(config)) => match TlsLayer::new(config) {
                            Ok(t) => Some(Box::new(t)),
                            Err(e) => {
                                log::error!("cannot start TLS for {peer}: {e}");
                                continue;
                            }
                        },
                        (true, None) => continue,
                    };
                    let id = self.broker.next_connection_id();
                    let token = Token(id as usize);
                    if let Err(e) = self.poll.registry().register(
                        &mut socket,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        log::error!("cannot register connection from {peer}: {e}");
                        continue;
                    }
                    let Some(pool) = self.pool.clone() else {
                        return;
                    };
                    let outbound = Arc::new(Outbound::new(
                        id,
                        Arc::clone(&self.notifier),
                        limits.outbound_hard_cap_bytes(),
                    ));
                    let frame_max = crate::limits::FRAME_BYTES_HANDSHAKE;
                    let broker = Arc::clone(&self.broker);
                    let local = socket.local_addr().unwrap_or(peer);
                    let conn = Arc::new_cyclic(|weak| {
                        let handler = ConnHandler::new(
                            protocol,
                            broker,
                            weak.clone(),
                            id,
                            (peer, local),
                            Arc::clone(&outbound),
                        );
                        Conn::new(id, peer, protocol, outbound, frame_max, pool, handler)
                    });
                    log::debug!(
                        "connection {id} accepted from {peer} ({protocol:?}{})",
                        if tls.is_some() { " over TLS" } else { "" }
                    );
                    let now = Instant::now();
                    self.conns.insert(
                        id,
                        IoConn {
                            conn,
                            socket,
                            pending: Vec::new(),
                            input: Input::new(protocol, &limits),
                            input_closed: false,
                            paused: false,
                            writing: Vec::new(),
                            write_pos: 0,
                            last_read: now,
                            last_write: now,
                            accepted_at: now,
                            linger_until: None,
                            closing_since: None,
                            peer_done: false,
                            gate: PublishGate::new(Arc::clone(self.broker.alarms()), protocol),
                            tls,
                        },
                    );
                    self.broker.set_sockets_open(self.conns.len());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors and the like: retry on the next tick rather
                    // than spin (an edge-triggered listener will not fire again by itself).
                    log::error!("accept failed: {e}");
                    self.accept_retry = true;
                    return;
                }
            }
        }
    }

    fn read(&mut self, id: u64) {
        let Some(io) = self.conns.get_mut(&id) else {
            return;
        };
        let end = read_socket(io, &mut self.scratch, &mut self.backlog, id);
        let tls = io.tls.is_some();
        match end {
            ReadEnd::Closed(reason) => {
                log::debug!("connection {id}: {reason}");
                self.close(id, true);
            }
            // What was read may have made TLS records to send (the handshake's flights,
            // a key update) or finished the handshake that plaintext waited for.
            ReadEnd::Open if tls => self.flush(id),
            ReadEnd::Open => {}
        }
    }

    fn flush(&mut self, id: u64) {
        let Some(io) = self.conns.get_mut(&id) else {
            return;
        };
        match flush_socket(io) {
            Ok(false) => {}
            Ok(true) => self.deferred.push(id),
            Err(e) => {
                log::debug!("connection {id}: write failed: {e}");
                self.close(id, true);
            }
        }
    }

    /// Drops a connection's socket and tells its worker to clean up. `peer_gone`: the
    /// socket ended from the peer's side (end of stream, a failed read or write); it
    /// counts as the peer's close only when the server had not begun closing first (a
    /// refused header, a TLS failure, a `close` being flushed or lingering).
    fn close(&mut self, id: u64, peer_gone: bool) {
        if let Some(mut io) = self.conns.remove(&id) {
            self.broker.set_sockets_open(self.conns.len());
            let _ = self.poll.registry().deregister(&mut io.socket);
            let server_first =
                io.input_closed || io.linger_until.is_some() || io.conn.outbound.is_closing();
            io.conn.push_conn(ConnEvent::Closed {
                by_peer: peer_gone && !server_first,
            });
        }
    }

    fn tick(&mut self) {
        if self.accept_retry {
            self.accept_retry = false;
            for kind in Listener::ALL {
                self.accept(kind);
            }
        }
        if self.refused_at_accept > 0 {
            let limits = self.broker.limits();
            if limits.sockets_max() >= limits.sockets_budget() {
                log::warn!(
                    "closed {} connections at accept: all {} client sockets the open-files limit leaves are in use ({} for connections, the rest for handshakes; docs/operations.md, \"Open files\")",
                    self.refused_at_accept,
                    limits.sockets_budget(),
                    limits.connections_max()
                );
            } else {
                log::warn!(
                    "closed {} connections at accept: {} sockets open (--max-connections {} plus {HANDSHAKES_PENDING_MAX} in their handshake)",
                    self.refused_at_accept,
                    self.conns.len(),
                    limits.connections_max()
                );
            }
            self.refused_at_accept = 0;
        }
        let now = Instant::now();
        let handshake_ms = self.broker.limits().handshake_timeout_ms();
        let handshake_timeout = Duration::from_millis(handshake_ms);
        let mut to_close = Vec::new();
        for (id, io) in self.conns.iter_mut() {
            if let Some(t) = io.linger_until {
                if now >= t {
                    to_close.push((*id, None));
                }
                continue;
            }
            let conn = &io.conn;
            if conn.outbound.is_overflowed() {
                to_close.push((
                    *id,
                    Some("the client does not read; outbound buffer over its limit".to_string()),
                ));
                continue;
            }
            if conn.outbound.is_closing() || io.peer_done {
                let since = *io.closing_since.get_or_insert(now);
                if now.duration_since(since) > Duration::from_millis(CLOSE_DEADLINE_MS) {
                    to_close.push((
                        *id,
                        Some(format!("close not flushed within {CLOSE_DEADLINE_MS} ms")),
                    ));
                }
                continue;
            }
            if !conn.opened.load(Ordering::Acquire) {
                // Counted from accept, not from the last byte: a client trickling its
                // handshake a byte at a time (slowloris) is closed on time all the same.
                if now.duration_since(io.accepted_at) > handshake_timeout {
                    to_close.push((
                        *id,
                        Some(format!("handshake not completed within {handshake_ms} ms")),
                    ));
                }
                continue;
            }
            if io.paused {
                // Not reading by our own choice: the peer's silence proves nothing.
                io.last_read = now;
                continue;
            }
            if io.gate.is_blocked() {
                // Not reading by our own choice (a resource alarm): RabbitMQ suspends the
                // heartbeat-miss check of a blocked connection; ours still go out.
                io.last_read = now;
                io.gate.retry_notice(conn);
            }
            let hb = conn.heartbeat_s.load(Ordering::Acquire) as u64;
            if hb == 0 {
                continue;
            }
            if now.duration_since(io.last_read) > Duration::from_secs(2 * hb) {
                to_close.push((
                    *id,
                    Some(format!("missed heartbeats from client, timeout: {hb}s")),
                ));
                continue;
            }
            if now.duration_since(io.last_write) >= Duration::from_secs(hb)
                && conn.outbound.queued() == 0
            {
                let protocol = conn.protocol;
                conn.outbound.write_with(|b| protocol.write_heartbeat(b));
            }
        }
        for (id, reason) in to_close {
            if let Some(reason) = reason {
                match self.conns.get(&id) {
                    Some(io) => log::warn!("closing connection {id} ({}): {reason}", io.conn.peer),
                    None => log::warn!("closing connection {id}: {reason}"),
                }
            }
            self.close(id, false);
        }
    }

    fn all_idle(&self) -> bool {
        self.conns
            .values()
            .all(|io| !io.conn.is_scheduled() && io.conn.mailbox_is_empty())
    }

    fn all_flushed(&self) -> bool {
        self.conns
            .values()
            .all(|io| io.conn.outbound.queued() == 0 || io.linger_until.is_some())
    }

    /// Graceful shutdown: stop accepting → finish queued requests → close every connection
    /// with 320 CONNECTION_FORCED → flush (with a deadline) → stop the workers.
    fn shut_down(mut self, events: &mut Events, marked: &mut Vec<u64>) -> io::Result<()> {
        log::info!("shutting down: no longer accepting connections");
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        for mut l in [
            self.amqp_listener.take(),
            self.tls_listener.take(),
            self.amqp_tls_listener.take(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = self.poll.registry().deregister(&mut l);
        }
        for io in self.conns.values_mut() {
            io.input_closed = true;
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.shutdown_flush_ms);
        self.pump_until(events, marked, deadline, |s| s.all_idle());
        for io in self.conns.values() {
            io.conn.push_conn(ConnEvent::Shutdown);
        }
        self.pump_until(events, marked, deadline, |s| {
            s.all_idle() && s.all_flushed()
        });
        if !self.all_flushed() {
            log::warn!(
                "shutdown: some outbound buffers were not flushed within {} ms",
                self.config.shutdown_flush_ms
            );
        }
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            self.close(id, false);
        }
        self.pool = None;
        // Not the last word: the workers, the stores' stats and final sync follow
        // (`ServerHandle::join` logs `shutdown complete`).
        log::info!("shutdown: every connection closed; stopping the workers");
        Ok(())
    }

    fn pump_until(
        &mut self,
        events: &mut Events,
        marked: &mut Vec<u64>,
        deadline: Instant,
        done: impl Fn(&EventLoop) -> bool,
    ) {
        while !done(self) && Instant::now() < deadline {
            let wait = if self.deferred.is_empty() {
                Duration::from_millis(10)
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("poll failed during shutdown: {e}");
                    return;
                }
            }
            let ready: Vec<(u64, bool, bool)> = events
                .iter()
                .filter(|e| !is_listener_or_waker(e.token()))
                .map(|e| {
                    (
                        e.token().0 as u64,
                        e.is_readable() || e.is_read_closed(),
                        e.is_writable(),
                    )
                })
                .collect();
            for (id, readable, writable) in ready {
                // Input is discarded now, but it must be read: closing a socket with
                // unread input resets it, and the client would miss our close.
                if readable {
                    self.read(id);
                }
                if writable {
                    self.flush(id);
                }
            }
            self.serve_marked(marked);
        }
    }
}

fn read_socket(
    io: &mut IoConn,
    scratch: &mut [u8],
    backlog: &mut VecDeque<u64>,
    id: u64,
) -> ReadEnd {
    if io.paused || io.peer_done || (io.gate.is_blocked() && !io.input_closed) {
        return ReadEnd::Open;
    }
    if io.tls.is_some() && !io.input_closed {
        return read_tls_socket(io, scratch, backlog, id);
    }
    // Plain TCP, or a TLS connection whose input is discarded (refused or closing): its
    // bytes need not be decrypted to be thrown away.
    let mut total = 0;
    loop {
        if pause_for_mailbox(io) {
            return ReadEnd::Open;
        }
        match io.socket.read(scratch) {
            Ok(0) => return peer_eof(io),
            Ok(n) => {
                io.conn.traffic.received(n);
                io.last_read = Instant::now();
                total += n;
                if !io.input_closed {
                    absorb(io, &scratch[..n]);
                    if io.gate.is_blocked() {
                        // A publish was held (resource alarm): stop reading.
                        return ReadEnd::Open;
                    }
                }
                if total >= READ_BYTES_PER_EVENT {
                    backlog.push_back(id);
                    return ReadEnd::Open;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadEnd::Open,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return ReadEnd::Closed(format!("read failed: {e}")),
        }
    }
}

/// Stops reading while the connection's mailbox is over its budget (§7); true when paused.
fn pause_for_mailbox(io: &mut IoConn) -> bool {
    if !io.input_closed && io.conn.mailbox_bytes() > MAILBOX_BYTES_MAX {
        io.conn.read_paused.store(true, Ordering::SeqCst);
        // The worker may have drained the mailbox between the check and the flag.
        if io.conn.mailbox_bytes() > MAILBOX_BYTES_MAX / 2 {
            io.paused = true;
            return true;
        }
        io.conn.read_paused.store(false, Ordering::SeqCst);
    }
    false
}

/// The peer will send nothing more (end of stream, or TLS `close_notify`).
fn peer_eof(io: &mut IoConn) -> ReadEnd {
    if io.input_closed && io.linger_until.is_none() && !io.peer_done {
        // The peer stopped writing after input we refused (a protocol error, a bad
        // header): keep the socket until our close is written — the flush shuts it down,
        // or the close deadline drops it.
        io.peer_done = true;
        return ReadEnd::Open;
    }
    ReadEnd::Closed(if io.linger_until.is_some() || io.peer_done {
        "closed".into()
    } else {
        "client closed the connection".into()
    })
}

/// [`read_socket`] for a TLS connection: ciphertext is read into the first half of
/// `scratch`, decrypted by the connection's [`TlsLayer`] into the second half, and the
/// plaintext parsed as a plain connection's bytes. A TLS failure (a failed handshake,
/// garbage instead of a ClientHello, a plaintext client) is logged and closes only this
/// connection: the alert rustls made is sent on a best-effort basis, the write side shut,
/// and input discarded until the peer hangs up or [`CLOSE_LINGER_MS`] passes.
fn read_tls_socket(
    io: &mut IoConn,
    scratch: &mut [u8],
    backlog: &mut VecDeque<u64>,
    id: u64,
) -> ReadEnd {
    let (cipher, plain) = scratch.split_at_mut(scratch.len() / 2);
    let mut total = 0;
    loop {
        if pause_for_mailbox(io) {
            return ReadEnd::Open;
        }
        let n = match io.socket.read(cipher) {
            Ok(0) => return peer_eof(io),
            Ok(n) => {
                io.conn.traffic.received(n);
                n
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadEnd::Open,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return ReadEnd::Closed(format!("read failed: {e}")),
        };
        io.last_read = Instant::now();
        total += n;
        let Some(mut tls) = io.tls.take() else {
            return ReadEnd::Closed("TLS state missing".into());
        };
        let fed = tls.absorb(&cipher[..n], plain, |p| {
            if !io.input_closed {
                absorb(io, p);
            }
        });
        if let Some(session) = tls.established() {
            log::debug!(
                "connection {id} ({}): TLS established: {session}",
                io.conn.peer
            );
        }
        let failed = match fed {
            Ok(TlsInput::Open) => None,
            Ok(TlsInput::PeerClosed) => Some(peer_eof(io)),
            Err(e) => {
                let what = if tls.is_handshaking() {
                    "TLS handshake failed"
                } else {
                    "TLS error"
                };
                let hint = match crate::tls::tls_failure(&e) {
                    Some(rustls::Error::InvalidMessage(
                        rustls::InvalidMessage::InvalidContentType,
                    )) => " (not TLS: a plaintext client on a TLS port?)",
                    _ => "",
                };
                log::warn!(
                    "connection {id} ({}): {what}: {e}{hint}; closing it",
                    io.conn.peer
                );
                // Tell the peer why (rustls queued the alert) if the socket takes it now,
                // then linger like any close: a client still sending reads our alert
                // rather than a reset.
                let _ = tls.write_records(&mut Counted(&mut io.socket, &io.conn.traffic));
                let _ = io.socket.shutdown(Shutdown::Write);
                io.input_closed = true;
                io.linger_until = Some(Instant::now() + Duration::from_millis(CLOSE_LINGER_MS));
                None
            }
        };
        io.tls = Some(tls);
        if let Some(end) = failed {
            return end;
        }
        if io.input_closed {
            // Input refused (a protocol error, a TLS failure): the rest is read and
            // discarded unparsed.
            return read_socket(io, scratch, backlog, id);
        }
        if total >= READ_BYTES_PER_EVENT {
            backlog.push_back(id);
            return ReadEnd::Open;
        }
    }
}

/// Parses what was read, keeping an incomplete tail in `pending`.
fn absorb(io: &mut IoConn, data: &[u8]) {
    if io.pending.is_empty() {
        let used = parse(io, data);
        if !io.input_closed {
            io.pending.extend_from_slice(&data[used..]);
        }
    } else {
        io.pending.extend_from_slice(data);
        let buf = std::mem::take(&mut io.pending);
        let used = parse(io, &buf);
        io.pending = buf;
        io.pending.drain(..used);
    }
    if io.input_closed || (io.pending.is_empty() && io.pending.capacity() > BUFFER_IDLE_BYTES) {
        io.pending = Vec::new();
    }
}

/// Hands `data` to the connection's protocol input; returns the bytes it consumed. Input
/// it refuses (a bad header, a protocol error) closes the input: all of it counts as
/// consumed, and later reads are discarded unparsed.
fn parse(io: &mut IoConn, data: &[u8]) -> usize {
    match io.input.parse(&io.conn, &mut io.gate, data) {
        Ok(used) => used,
        Err(Refused) => {
            io.input_closed = true;
            data.len()
        }
    }
}

/// Writes what is queued until done or `WouldBlock`; shuts the write side once a closing
/// connection is flushed. Returns true when more was appended meanwhile: the outbound
/// buffer is taken at most once per call, so what workers append while a write runs is
/// gathered for the next loop turn (the caller defers the connection) instead of going
/// out in many small writes.
fn flush_socket(io: &mut IoConn) -> io::Result<bool> {
    if io.tls.is_some() {
        return flush_tls_socket(io);
    }
    let mut taken = false;
    loop {
        if io.write_pos >= io.writing.len() {
            match refill(io, &mut taken) {
                Refill::More => continue,
                Refill::Deferred => return Ok(true),
                Refill::Done => break,
            }
        }
        match io.socket.write(&io.writing[io.write_pos..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket accepted no bytes",
                ))
            }
            Ok(n) => {
                io.conn.traffic.sent(n);
                io.write_pos += n;
                io.last_write = Instant::now();
                if io.conn.outbound.wrote(n, OUTBOUND_LOW_WATER_BYTES) {
                    io.conn.push_conn(ConnEvent::Drained);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    finish_flush(io);
    Ok(false)
}

/// What [`refill`] found once the write buffer was written out.
enum Refill {
    /// The outbound buffer had more: write it.
    More,
    /// Appended while this pass held the buffer: defer the connection to the next turn.
    Deferred,
    /// Nothing more to write.
    Done,
}

/// The write buffer is written out: resets it (releasing a large one) and takes the
/// outbound buffer once per pass (`taken`), the handshake of `Outbound::take` /
/// `finish_write` shared by the plain and the TLS flush.
fn refill(io: &mut IoConn, taken: &mut bool) -> Refill {
    io.writing.clear();
    io.write_pos = 0;
    if io.writing.capacity() > BUFFER_IDLE_BYTES {
        io.writing = Vec::new();
    }
    if !*taken {
        io.conn.outbound.take(&mut io.writing);
        *taken = true;
        if !io.writing.is_empty() {
            return Refill::More;
        }
    }
    if io.conn.outbound.finish_write() {
        return Refill::Deferred;
    }
    Refill::Done
}

/// [`flush_socket`] for a TLS connection: the records rustls holds go out first, then
/// plaintext taken from the outbound buffer is encrypted as far as the TLS send buffer
/// allows ([`crate::limits::TLS_SEND_BUFFER_BYTES`]) and written, until done or
/// `WouldBlock`. Plaintext counts as written (for the water marks) once rustls took it.
fn flush_tls_socket(io: &mut IoConn) -> io::Result<bool> {
    let Some(mut tls) = io.tls.take() else {
        return Err(io::Error::other("TLS state missing"));
    };
    let result = flush_tls_with(io, &mut tls);
    io.tls = Some(tls);
    match result {
        Ok(None) => {
            finish_flush(io);
            Ok(false)
        }
        Ok(Some(more)) => Ok(more),
        Err(e) => Err(e),
    }
}

/// The loop of [`flush_tls_socket`]: `Ok(None)` when everything taken is written,
/// `Ok(Some(more))` when it stopped early (`more`: appended meanwhile, defer).
fn flush_tls_with(io: &mut IoConn, tls: &mut TlsLayer) -> io::Result<Option<bool>> {
    let mut taken = false;
    loop {
        if tls.wants_write() {
            if !tls.write_records(&mut Counted(&mut io.socket, &io.conn.traffic))? {
                return Ok(Some(false));
            }
            io.last_write = Instant::now();
        }
        if io.write_pos >= io.writing.len() {
            match refill(io, &mut taken) {
                Refill::More => continue,
                Refill::Deferred => return Ok(Some(true)),
                Refill::Done => {}
            }
            if io.conn.outbound.is_closing() && io.linger_until.is_none() {
                // Our last bytes: say so in TLS before the TCP write side is shut.
                tls.send_close_notify();
                let _ = tls.write_records(&mut Counted(&mut io.socket, &io.conn.traffic));
            }
            return Ok(None);
        }
        let n = tls.write_plain(&io.writing[io.write_pos..])?;
        if n == 0 {
            // The handshake is not done and its plaintext buffer is full: the read that
            // completes the handshake flushes again.
            return Ok(Some(false));
        }
        io.write_pos += n;
        if io.conn.outbound.wrote(n, OUTBOUND_LOW_WATER_BYTES) {
            io.conn.push_conn(ConnEvent::Drained);
        }
    }
}

/// After everything taken was written: gives back a large write buffer and, once a
/// closing connection is flushed, shuts the write side and starts the linger.
fn finish_flush(io: &mut IoConn) {
    if io.writing.capacity() > BUFFER_IDLE_BYTES {
        io.writing = Vec::new();
    }
    if io.conn.outbound.is_closing() && io.linger_until.is_none() {
        let _ = io.socket.shutdown(Shutdown::Write);
        io.input_closed = true;
        io.paused = false;
        // A peer that already hung up has nothing left to send: drop at the next tick.
        let linger = if io.peer_done { 0 } else { CLOSE_LINGER_MS };
        io.linger_until = Some(Instant::now() + Duration::from_millis(linger));
    }
}

/// A socket whose writes are counted in a connection's [`ConnTraffic`] (for TLS records,
/// written by rustls).
struct Counted<'a, W: Write>(&'a mut W, &'a ConnTraffic);

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        if n > 0 {
            self.1.sent(n);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
