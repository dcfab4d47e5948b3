//! The HTTP/1.1 server of the management API (`--http-listen`, and `--https-listen` for
//! HTTPS): one `mio` thread,
//! `relaymq-http`, holds every connection between requests and reads request heads as
//! they arrive; a fixed pool of [`HTTP_HANDLER_THREADS`] handler threads
//! (`relaymq-http-N`) each serve one whole request at a time — body, [`Service`] call,
//! answer — on the socket in blocking mode with deadlines, then hand the connection back
//! for the next request (keep-alive, RFC 9112 §9.3). Neither is the AMQP I/O thread or a
//! worker, so a slow HTTP client never delays a message.
//!
//! HTTPS connections share the threads and the connection slots: the I/O thread runs
//! their TLS handshake without blocking and decrypts their heads; a handler reads and
//! writes through rustls ([`HttpStream`]).
//!
//! Bounds: at most `connections_max` connections (the HTTP part of the file-descriptor
//! budget); with every slot taken, a new connection closes the oldest idle keep-alive one
//! (or one whose first head is [`HTTP_EVICT_GRACE_MS`] late), and otherwise waits in the
//! listen backlog until a request ends. A head is at
//! most [`HTTP_HEAD_BYTES_MAX`] bytes and must arrive within [`HTTP_HEAD_TIMEOUT_MS`] of
//! its first byte (slow-loris heads are cut off); an idle keep-alive connection is closed
//! after [`HTTP_IDLE_TIMEOUT_MS`]. A body is read only when the handler asks for it, up to
//! the handler's limit ([`super::request::Body`]); an answer must make progress every
//! [`HTTP_WRITE_STALL_MS`]. Heads are authenticated by the handler before any body is
//! read, so an anonymous client can hold a slot but never a handler thread for long.

use super::request::{Body, ConnIo, HeadError, Request, HTTP_HEAD_BYTES_MAX};
use super::response::Response;
use super::stream::HttpStream;
use crate::limits::TLS_SEND_BUFFER_BYTES;
use crate::stoppable_thread::StoppableThread;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Threads serving requests, in threads. Requests are short (a list, a declare); the
/// slow ones are password checks (argon2, tens of ms, on the `relaymq-auth` thread) and
/// definitions imports.
pub const HTTP_HANDLER_THREADS: usize = 4;

/// Time a request head may take to arrive, from its first byte, in ms (a slow-loris
/// head is cut off after it).
pub const HTTP_HEAD_TIMEOUT_MS: u64 = 10_000;

/// Time an idle keep-alive connection is kept, in ms (cowboy's `idle_timeout`, 60 s).
pub const HTTP_IDLE_TIMEOUT_MS: u64 = 60_000;

/// Longest time one write of an answer may block, in ms: a client that stops reading
/// for longer is cut off.
pub const HTTP_WRITE_STALL_MS: u64 = 30_000;

/// Bytes of an unread request body read and dropped after the answer so the
/// connection can be kept; a longer rest closes the connection instead.
pub const HTTP_DRAIN_BYTES_MAX: u64 = 64 * 1024;

/// Longest time spent draining the unread rest of a body after the answer, in ms: a
/// rest that does not arrive by then closes the connection.
pub const HTTP_DRAIN_WAIT_MS: u64 = 200;

/// Time a new connection may take to send its first request head before a newer
/// connection may take its slot when every slot is held, in ms.
pub const HTTP_EVICT_GRACE_MS: u64 = 1_000;

/// Longest wait on the `Poll` before deadlines and the stop channel are checked, in ms.
const POLL_TIMEOUT_MS: u64 = 100;

/// Listener `i` (plain, then TLS) is token `i`.
const LISTENER_TOKENS: usize = 2;
const WAKER: mio::Token = mio::Token(LISTENER_TOKENS);
/// Slot `i` is token `SLOT_TOKEN_BASE + i`.
const SLOT_TOKEN_BASE: usize = LISTENER_TOKENS + 1;

/// Answers requests; called on a handler thread.
pub trait Service: Send + Sync + 'static {
    /// Answers `request`, reading its `body` if it needs it (what it leaves unread is
    /// drained, or the connection closed, after the answer).
    fn handle(&self, request: &Request, body: &mut Body<'_>) -> Response;
}

/// Counts of the server's connections, for `status` and metrics.
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Connections open now.
    pub open: AtomicUsize,
    /// Connections closed to make room for a new one, or refused with every slot busy.
    pub evicted: AtomicUsize,
    /// Requests answered.
    pub requests: AtomicUsize,
}

/// Where an [`HttpServer`] listens: plain HTTP, HTTPS with a rustls configuration, or
/// both (at least one).
#[derive(Clone, Default)]
pub struct HttpListen {
    /// Address of the plain HTTP listener (`None`: none; port 0 picks a free port).
    pub plain: Option<SocketAddr>,
    /// Address and TLS configuration of the HTTPS listener (`None`: none).
    pub tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
}

/// A running HTTP server.
pub struct HttpServer {
    addr: Option<SocketAddr>,
    tls_addr: Option<SocketAddr>,
    io: StoppableThread,
    handlers: Vec<JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
    stats: Arc<HttpStats>,
}

/// A connection handed to a handler: its socket (blocking) and the bytes read so far.
struct Job {
    slot: usize,
    stream: HttpStream,
    buf: Vec<u8>,
    peer: SocketAddr,
}

/// A connection handed back after a request: `stream` is `None` when it was closed.
struct Returned {
    slot: usize,
    stream: Option<HttpStream>,
    leftover: Vec<u8>,
}

impl HttpServer {
    /// Binds the addresses of `listen` and starts serving `service` to at most
    /// `connections_max` connections (plain and HTTPS together); `name` is the
    /// listener's name in errors and logs ("management API").
    ///
    /// # Errors
    /// `cannot listen on ADDR (NAME): …` when an address cannot be bound; a thread or
    /// the poller cannot be started.
    pub fn start(
        listen: HttpListen,
        name: &'static str,
        connections_max: usize,
        service: Arc<dyn Service>,
    ) -> io::Result<HttpServer> {
        let poll = mio::Poll::new()?;
        let mut listeners = Vec::with_capacity(LISTENER_TOKENS);
        let (mut addr, mut tls_addr) = (None, None);
        let plain = listen.plain.map(|a| (a, None));
        let tls = listen.tls.map(|(a, config)| {
            // The same certificate and client checks as the other TLS listeners, with
            // ALPN naming HTTP/1.1 (RFC 7301): clients offering h2 fall back to it.
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            (a, Some(Arc::new(config)))
        });
        for (a, config) in plain.into_iter().chain(tls) {
            let what = if config.is_some() { "HTTPS" } else { "HTTP" };
            let mut listener = mio::net::TcpListener::bind(a).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot listen on {a} ({name}, {what}): {e}"),
                )
            })?;
            let bound = listener.local_addr()?;
            poll.registry().register(
                &mut listener,
                mio::Token(listeners.len()),
                mio::Interest::READABLE,
            )?;
            log::info!("listening on {bound} ({name}, {what})");
            if config.is_some() {
                tls_addr = Some(bound);
            } else {
                addr = Some(bound);
            }
            listeners.push((listener, config));
        }
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER)?);
        let slots = connections_max.max(1);
        let (job_tx, job_rx) = crossbeam_channel::bounded::<Job>(slots);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<Returned>(slots);
        let stopping = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(HttpStats::default());
        let mut handlers = Vec::with_capacity(HTTP_HANDLER_THREADS);
        for i in 0..HTTP_HANDLER_THREADS {
            let (jobs, done, waker) = (job_rx.clone(), done_tx.clone(), Arc::clone(&waker));
            let (service, stopping, stats) = (
                Arc::clone(&service),
                Arc::clone(&stopping),
                Arc::clone(&stats),
            );
            handlers.push(
                std::thread::Builder::new()
                    .name(format!("relaymq-http-{i}"))
                    .spawn(move || {
                        for job in jobs {
                            let back = serve(job, &*service, &stopping, &stats);
                            if done.send(back).is_err() {
                                return;
                            }
                            let _ = waker.wake();
                        }
                    })?,
            );
        }
        let io_stats = Arc::clone(&stats);
        let io = StoppableThread::spawn("relaymq-http", move |stop| {
            IoLoop {
                poll,
                listeners,
                slots: (0..slots).map(|_| None).collect(),
                jobs: job_tx,
                returned: done_rx,
                stats: io_stats,
                name,
            }
            .run(&stop);
        })?;
        Ok(HttpServer {
            addr,
            tls_addr,
            io,
            handlers,
            stopping,
            stats,
        })
    }

    /// The plain HTTP listener's bound address (`None`: no plain listener).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The HTTPS listener's bound address (`None`: no HTTPS listener).
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// The server's connection counts.
    pub fn stats(&self) -> &Arc<HttpStats> {
        &self.stats
    }

    /// Stops accepting, closes every connection and joins the threads: a request being
    /// served ends at its next socket wait (within [`super::request::HTTP_STOP_CHECK_MS`])
    /// or when its handler returns.
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.io.stop();
        for h in self.handlers.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a connection held by the I/O thread is.
enum SlotState {
    /// Between requests, or before the first: closed at `deadline` if nothing arrives.
    Idle,
    /// Part of a head received: closed at `deadline` unless the rest arrives.
    Reading,
    /// With a handler thread.
    Busy,
}

struct Slot {
    stream: Option<mio::net::TcpStream>,
    /// The TLS state of an HTTPS connection (with `stream`, except while `Busy`).
    tls: Option<Box<rustls::ServerConnection>>,
    /// Whether the socket is registered for writability too (TLS records to send).
    writable: bool,
    peer: SocketAddr,
    buf: Vec<u8>,
    state: SlotState,
    deadline: Instant,
    /// When it last became idle, or was accepted (the oldest idle one is closed first).
    since: Instant,
    /// It was answered at least once (an idle keep-alive connection, not a new one).
    served: bool,
}

struct IoLoop {
    poll: mio::Poll,
    /// The listeners, each with its TLS configuration when it is HTTPS.
    listeners: Vec<(mio::net::TcpListener, Option<Arc<rustls::ServerConfig>>)>,
    slots: Vec<Option<Slot>>,
    jobs: Sender<Job>,
    returned: Receiver<Returned>,
    stats: Arc<HttpStats>,
    name: &'static str,
}

fn stopped(stop: &Receiver<()>) -> bool {
    !matches!(stop.try_recv(), Err(TryRecvError::Empty))
}

/// Whether `buf` holds a whole head (up to the empty line).
fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n")
}

/// Whether the start of a head already shows it cannot be served: bytes that are not
/// HTTP (a TLS hello, garbage), or a request line past its limit. Such a head is handed
/// to a handler at once, to be answered 400 or 414, rather than waited for.
fn head_doomed(buf: &[u8]) -> bool {
    let line_end = buf.iter().position(|b| *b == b'\n').unwrap_or(buf.len());
    if line_end > super::request::HTTP_REQUEST_LINE_BYTES_MAX {
        return true;
    }
    let mut headers = [httparse::EMPTY_HEADER; super::request::HTTP_HEADERS_MAX];
    httparse::Request::new(&mut headers).parse(buf).is_err()
}

impl IoLoop {
    fn run(mut self, stop: &Receiver<()>) {
        let mut events = mio::Events::with_capacity(256);
        loop {
            if let Err(e) = self
                .poll
                .poll(&mut events, Some(Duration::from_millis(POLL_TIMEOUT_MS)))
            {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("{} listener stopped: poll failed: {e}", self.name);
                    return;
                }
            }
            if stopped(stop) {
                return;
            }
            for event in events.iter() {
                if let Some(slot) = event.token().0.checked_sub(SLOT_TOKEN_BASE) {
                    self.read(slot);
                }
            }
            self.take_returned();
            for l in 0..self.listeners.len() {
                self.accept_all(l);
            }
            self.expire(Instant::now());
        }
    }

    fn open_count(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut s) = self.slots.get_mut(slot).and_then(Option::take) {
            if let Some(stream) = s.stream.as_mut() {
                let _ = self.poll.registry().deregister(stream);
            }
        }
        self.stats.open.store(self.open_count(), Ordering::Relaxed);
    }

    fn accept_all(&mut self, l: usize) {
        loop {
            // With every slot being served, new connections wait in the listen backlog
            // (they are accepted once a request ends) rather than being closed.
            if self.slots.iter().all(Option::is_some) && self.oldest_waiting().is_none() {
                return;
            }
            let (listener, tls_config) = &self.listeners[l];
            let tls = match tls_config {
                None => None,
                Some(config) => match rustls::ServerConnection::new(Arc::clone(config)) {
                    Ok(mut conn) => {
                        conn.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES));
                        Some(Box::new(conn))
                    }
                    Err(e) => {
                        log::warn!("{}: cannot start a TLS session: {e}", self.name);
                        return;
                    }
                },
            };
            let (mut stream, peer) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("{}: accept failed: {e}", self.name);
                    return;
                }
            };
            let slot = match self.slots.iter().position(Option::is_none) {
                Some(i) => i,
                None => match self.oldest_waiting() {
                    Some(i) => {
                        log::debug!(
                            "{}: every connection slot taken; closing the oldest idle one to make room",
                            self.name
                        );
                        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                        self.close(i);
                        i
                    }
                    None => {
                        log::warn!(
                            "{}: every connection slot is being served; closing the connection from {peer}",
                            self.name
                        );
                        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                },
            };
            let token = mio::Token(SLOT_TOKEN_BASE + slot);
            if let Err(e) =
                self.poll
                    .registry()
                    .register(&mut stream, token, mio::Interest::READABLE)
            {
                log::warn!("{}: cannot register a connection: {e}", self.name);
                continue;
            }
            let now = Instant::now();
            self.slots[slot] = Some(Slot {
                stream: Some(stream),
                tls,
                writable: false,
                peer,
                buf: Vec::new(),
                state: SlotState::Idle,
                deadline: now + Duration::from_millis(HTTP_HEAD_TIMEOUT_MS),
                since: now,
                served: false,
            });
            self.stats.open.store(self.open_count(), Ordering::Relaxed);
            self.read(slot);
        }
    }

    /// The slot of the connection waiting longest for a request that may be closed to
    /// make room: an idle keep-alive connection, or one whose request head has been
    /// awaited for [`HTTP_EVICT_GRACE_MS`]. A connection accepted moments ago, whose head
    /// is still on its way, is kept: in a burst, new connections wait in the backlog
    /// rather than push out the ones before them.
    fn oldest_waiting(&self) -> Option<usize> {
        let now = Instant::now();
        let grace = Duration::from_millis(HTTP_EVICT_GRACE_MS);
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .filter(|(_, s)| !matches!(s.state, SlotState::Busy))
            .filter(|(_, s)| {
                (s.served && matches!(s.state, SlotState::Idle))
                    || now.duration_since(s.since) >= grace
            })
            .min_by_key(|(_, s)| s.since)
            .map(|(i, _)| i)
    }

    /// Reads what the connection in `slot` sent (for HTTPS: runs the handshake, sends
    /// the records rustls has for the client and decrypts); hands it to a handler once
    /// its head is whole (or too long, for the handler to answer 431).
    fn read(&mut self, slot: usize) {
        let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if matches!(s.state, SlotState::Busy) {
            return;
        }
        let Some(stream) = s.stream.as_mut() else {
            return;
        };
        let mut chunk = [0u8; 4096];
        let mut closed = false;
        let mut received = false;
        while !head_complete(&s.buf) && s.buf.len() < HTTP_HEAD_BYTES_MAX && !closed {
            let room = (HTTP_HEAD_BYTES_MAX - s.buf.len()).min(chunk.len());
            let step = match s.tls.as_deref_mut() {
                None => stream.read(&mut chunk[..room]).map(|n| (n, n)),
                Some(conn) => tls_step(conn, stream, &mut chunk[..room]),
            };
            match step {
                Ok((0, _)) => closed = true,
                Ok((wire, plain)) => {
                    received |= wire > 0;
                    s.buf.extend_from_slice(&chunk[..plain]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.kind() == io::ErrorKind::InvalidData {
                        // As the AMQP and native TLS listeners log theirs.
                        log::warn!(
                            "{}: TLS with {} failed: {e}; closing the connection",
                            self.name,
                            s.peer
                        );
                    }
                    closed = true;
                }
            }
        }
        if received && matches!(s.state, SlotState::Idle) {
            s.state = SlotState::Reading;
            s.deadline = Instant::now() + Duration::from_millis(HTTP_HEAD_TIMEOUT_MS);
        }
        let ready = head_complete(&s.buf)
            || s.buf.len() >= HTTP_HEAD_BYTES_MAX
            || (!s.buf.is_empty() && head_doomed(&s.buf));
        if closed && !ready {
            self.close(slot);
            return;
        }
        if ready {
            self.hand_off(slot);
            return;
        }
        // Handshake records the socket could not take yet: wait until it can.
        let writable = s.tls.as_ref().is_some_and(|c| c.wants_write());
        if writable != s.writable {
            s.writable = writable;
            let interest = if writable {
                mio::Interest::READABLE | mio::Interest::WRITABLE
            } else {
                mio::Interest::READABLE
            };
            let token = mio::Token(SLOT_TOKEN_BASE + slot);
            if self
                .poll
                .registry()
                .reregister(stream, token, interest)
                .is_err()
            {
                self.close(slot);
            }
        }
    }

    fn hand_off(&mut self, slot: usize) {
        let Some(s) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let Some(mut stream) = s.stream.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut stream);
        s.state = SlotState::Busy;
        s.writable = false;
        let job = Job {
            slot,
            stream: HttpStream::new(TcpStream::from(stream), s.tls.take()),
            buf: std::mem::take(&mut s.buf),
            peer: s.peer,
        };
        // The channel holds one job per slot: it is never full.
        if self.jobs.try_send(job).is_err() {
            self.close(slot);
        }
    }

    fn take_returned(&mut self) {
        while let Ok(back) = self.returned.try_recv() {
            let Some(stream) = back.stream else {
                self.close(back.slot);
                continue;
            };
            let (stream, tls) = stream.into_parts();
            let mut stream = mio::net::TcpStream::from_std(stream);
            let token = mio::Token(SLOT_TOKEN_BASE + back.slot);
            let registered =
                self.poll
                    .registry()
                    .register(&mut stream, token, mio::Interest::READABLE);
            let Some(s) = self.slots.get_mut(back.slot).and_then(Option::as_mut) else {
                continue;
            };
            if registered.is_err() {
                self.close(back.slot);
                continue;
            }
            let now = Instant::now();
            s.stream = Some(stream);
            s.tls = tls;
            s.since = now;
            s.served = true;
            if back.leftover.is_empty() {
                s.state = SlotState::Idle;
                s.deadline = now + Duration::from_millis(HTTP_IDLE_TIMEOUT_MS);
            } else {
                s.state = SlotState::Reading;
                s.deadline = now + Duration::from_millis(HTTP_HEAD_TIMEOUT_MS);
            }
            s.buf = back.leftover;
            self.read(back.slot);
        }
    }

    fn expire(&mut self, now: Instant) {
        let late: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .filter(|(_, s)| !matches!(s.state, SlotState::Busy) && now >= s.deadline)
            .map(|(i, _)| i)
            .collect();
        for i in late {
            if let Some(Some(s)) = self.slots.get(i) {
                let what = if matches!(s.state, SlotState::Reading) {
                    "request head not received in time"
                } else {
                    "idle"
                };
                log::debug!(
                    "{}: closing the connection from {}: {what}",
                    self.name,
                    s.peer
                );
            }
            self.close(i);
        }
    }
}

/// One non-blocking step of an HTTPS connection on the I/O thread: sends what rustls has
/// for the client (handshake records, alerts), hands out plaintext it already decrypted,
/// else reads and decrypts ciphertext. Returns `(bytes from the wire or plaintext
/// handed out, plaintext bytes in out)`; `(0, 0)` once the client closed.
///
/// # Errors
/// `WouldBlock` when nothing can be done until the socket is ready; the socket's errors;
/// a TLS failure as `InvalidData` (the alert rustls queued is sent first, best effort).
fn tls_step(
    conn: &mut rustls::ServerConnection,
    socket: &mut mio::net::TcpStream,
    out: &mut [u8],
) -> io::Result<(usize, usize)> {
    while conn.wants_write() {
        conn.write_tls(socket)?;
    }
    match conn.reader().read(out) {
        Ok(n) => return Ok((n, n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    let n = conn.read_tls(socket)?;
    if n == 0 {
        return Ok((0, 0));
    }
    if let Err(e) = conn.process_new_packets() {
        let _ = conn.write_tls(socket);
        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
    }
    Ok((n, 0))
}

/// An answer for a head the server refuses itself.
fn refusal(status: u16, reason: &str) -> Response {
    let body = serde_json::json!({"error": "bad_request", "reason": reason});
    Response::bytes(status, "application/json", body.to_string().into_bytes()).closing()
}

/// Serves the one request whose head `job.buf` starts with; returns the connection.
fn serve(
    job: Job,
    service: &dyn Service,
    stopping: &Arc<AtomicBool>,
    stats: &HttpStats,
) -> Returned {
    let slot = job.slot;
    let closed = Returned {
        slot,
        stream: None,
        leftover: Vec::new(),
    };
    if job.stream.set_nonblocking(false).is_err()
        || job
            .stream
            .set_write_timeout(Some(Duration::from_millis(HTTP_WRITE_STALL_MS)))
            .is_err()
    {
        return closed;
    }
    let mut io = ConnIo {
        stream: job.stream,
        buf: job.buf,
        pos: 0,
        stopping: Arc::clone(stopping),
    };
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let (request, head_len) = match Request::parse(&io.buf, job.peer) {
        Ok(r) => r,
        Err(e) => {
            let answer = match e {
                HeadError::Malformed => refusal(400, "malformed request"),
                HeadError::TooLarge => refusal(431, "request head too large"),
                HeadError::UriTooLong => refusal(414, "request line too long"),
                HeadError::UnsupportedEncoding => {
                    refusal(501, "only the chunked transfer-encoding is supported")
                }
            };
            let _ = answer.write_to(&mut io.stream, false, false, 1);
            linger_close(&mut io.stream);
            return closed;
        }
    };
    io.pos = head_len;
    let mut keep_alive = request.keep_alive()
        && !request.length_and_encoding_conflict()
        && !stopping.load(Ordering::Relaxed);
    let response = {
        let mut body = Body::new(&mut io, &request);
        let response = service.handle(&request, &mut body);
        keep_alive &= !response.closes();
        if keep_alive && !body.is_finished() {
            // Drain a short rest that is arriving promptly so the connection can be
            // kept; otherwise close it (a client dripping a body it was refused must not
            // hold this thread: at most HTTP_DRAIN_WAIT_MS).
            body.set_deadline(Instant::now() + Duration::from_millis(HTTP_DRAIN_WAIT_MS));
            keep_alive = !body.continue_pending()
                && body.unread().is_some_and(|n| n <= HTTP_DRAIN_BYTES_MAX)
                && io::copy(&mut body, &mut io::sink()).is_ok()
                && body.is_finished();
        }
        response
    };
    let accepts_gzip = request
        .header("accept-encoding")
        .is_some_and(|v| v.split(',').any(|t| t.trim().starts_with("gzip")));
    let response = if accepts_gzip {
        response.gzipped()
    } else {
        response
    };
    let head_only = request.method == "HEAD";
    if response
        .write_to(&mut io.stream, head_only, keep_alive, request.minor_version)
        .is_err()
        || !keep_alive
    {
        linger_close(&mut io.stream);
        return closed;
    }
    if io.stream.set_nonblocking(true).is_err() {
        return closed;
    }
    let leftover = io.buf.split_off(io.pos);
    Returned {
        slot,
        stream: Some(io.stream),
        leftover,
    }
}

/// Bytes read and dropped after an answer on a connection being closed, so that closing
/// with unread bytes does not reset it before the client has read the answer.
const LINGER_BYTES_MAX: usize = 256 * 1024;

/// Time spent reading and dropping them, in ms.
const LINGER_MS: u64 = 200;

/// Half-closes `stream` and drops what the client still sends for a moment.
fn linger_close(stream: &mut HttpStream) {
    stream.shutdown_write();
    let deadline = Instant::now() + Duration::from_millis(LINGER_MS);
    let mut sink = [0u8; 16 * 1024];
    let mut left = LINGER_BYTES_MAX;
    while left > 0 {
        let now = Instant::now();
        if now >= deadline || stream.set_read_timeout(Some(deadline - now)).is_err() {
            return;
        }
        match stream.read_raw(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}
