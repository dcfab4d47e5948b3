//! The HTTP/1.1 server of the management API (`--http-listen`): one `mio` thread,
//! `relaymq-http`, holds every connection between requests and reads request heads as
//! they arrive; a fixed pool of [`HTTP_HANDLER_THREADS`] handler threads
//! (`relaymq-http-N`) each serve one whole request at a time — body, [`Service`] call,
//! answer — on the socket in blocking mode with deadlines, then hand the connection back
//! for the next request (keep-alive, RFC 9112 §9.3). Neither is the AMQP I/O thread or a
//! worker, so a slow HTTP client never delays a message.
//!
//! Bounds: at most `connections_max` connections (the HTTP part of the file-descriptor
//! budget); with every slot taken, a new connection closes the oldest one that is idle or
//! still sending its head, and is itself closed when all are being served. A head is at
//! most [`HTTP_HEAD_BYTES_MAX`] bytes and must arrive within [`HTTP_HEAD_TIMEOUT_MS`] of
//! its first byte (slow-loris heads are cut off); an idle keep-alive connection is closed
//! after [`HTTP_IDLE_TIMEOUT_MS`]. A body is read only when the handler asks for it, up to
//! the handler's limit ([`super::request::Body`]); an answer must make progress every
//! [`HTTP_WRITE_STALL_MS`]. Heads are authenticated by the handler before any body is
//! read, so an anonymous client can hold a slot but never a handler thread for long.

use super::request::{Body, ConnIo, HeadError, Request, HTTP_HEAD_BYTES_MAX};
use super::response::Response;
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

/// Longest wait on the `Poll` before deadlines and the stop channel are checked, in ms.
const POLL_TIMEOUT_MS: u64 = 100;

const LISTENER: mio::Token = mio::Token(0);
const WAKER: mio::Token = mio::Token(1);
/// Slot `i` is token `SLOT_TOKEN_BASE + i`.
const SLOT_TOKEN_BASE: usize = 2;

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

/// A running HTTP server.
pub struct HttpServer {
    addr: SocketAddr,
    io: StoppableThread,
    handlers: Vec<JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
    stats: Arc<HttpStats>,
}

/// A connection handed to a handler: its socket (blocking) and the bytes read so far.
struct Job {
    slot: usize,
    stream: TcpStream,
    buf: Vec<u8>,
    peer: SocketAddr,
}

/// A connection handed back after a request: `stream` is `None` when it was closed.
struct Returned {
    slot: usize,
    stream: Option<TcpStream>,
    leftover: Vec<u8>,
}

impl HttpServer {
    /// Binds `addr` and starts serving `service` to at most `connections_max`
    /// connections; `name` is the listener's name in errors and logs ("management API").
    ///
    /// # Errors
    /// `cannot listen on ADDR (NAME): …` when the address cannot be bound; a thread or
    /// the poller cannot be started.
    pub fn start(
        addr: SocketAddr,
        name: &'static str,
        connections_max: usize,
        service: Arc<dyn Service>,
    ) -> io::Result<HttpServer> {
        let mut listener = mio::net::TcpListener::bind(addr).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen on {addr} ({name}): {e}"))
        })?;
        let bound = listener.local_addr()?;
        let poll = mio::Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
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
                listener,
                slots: (0..slots).map(|_| None).collect(),
                jobs: job_tx,
                returned: done_rx,
                stats: io_stats,
                name,
            }
            .run(&stop);
        })?;
        log::info!("listening on {bound} ({name}, HTTP)");
        Ok(HttpServer {
            addr: bound,
            io,
            handlers,
            stopping,
            stats,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
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
    peer: SocketAddr,
    buf: Vec<u8>,
    state: SlotState,
    deadline: Instant,
    /// When it last became idle (the oldest idle one is closed first).
    since: Instant,
}

struct IoLoop {
    poll: mio::Poll,
    listener: mio::net::TcpListener,
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
            self.accept_all();
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

    fn accept_all(&mut self) {
        loop {
            // With every slot being served, new connections wait in the listen backlog
            // (they are accepted once a request ends) rather than being closed.
            if self.slots.iter().all(Option::is_some) && self.oldest_waiting().is_none() {
                return;
            }
            let (mut stream, peer) = match self.listener.accept() {
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
                peer,
                buf: Vec::new(),
                state: SlotState::Idle,
                deadline: now + Duration::from_millis(HTTP_HEAD_TIMEOUT_MS),
                since: now,
            });
            self.stats.open.store(self.open_count(), Ordering::Relaxed);
            self.read(slot);
        }
    }

    /// The slot of the connection waiting longest for a request (idle or in its head).
    fn oldest_waiting(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .filter(|(_, s)| !matches!(s.state, SlotState::Busy))
            .min_by_key(|(_, s)| s.since)
            .map(|(i, _)| i)
    }

    /// Reads what the connection in `slot` sent; hands it to a handler once its head is
    /// whole (or too long, for the handler to answer 431).
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
        while !head_complete(&s.buf) && s.buf.len() < HTTP_HEAD_BYTES_MAX {
            let room = (HTTP_HEAD_BYTES_MAX - s.buf.len()).min(chunk.len());
            match stream.read(&mut chunk[..room]) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    if matches!(s.state, SlotState::Idle) {
                        s.state = SlotState::Reading;
                        s.deadline = Instant::now() + Duration::from_millis(HTTP_HEAD_TIMEOUT_MS);
                    }
                    s.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        let ready = head_complete(&s.buf) || s.buf.len() >= HTTP_HEAD_BYTES_MAX;
        if closed && !ready {
            self.close(slot);
            return;
        }
        if ready {
            self.hand_off(slot);
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
        let job = Job {
            slot,
            stream: TcpStream::from(stream),
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
            s.since = now;
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
fn linger_close(stream: &mut TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + Duration::from_millis(LINGER_MS);
    let mut sink = [0u8; 16 * 1024];
    let mut left = LINGER_BYTES_MAX;
    while left > 0 {
        let now = Instant::now();
        if now >= deadline || stream.set_read_timeout(Some(deadline - now)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}
