//! The metrics listener (`--metrics-listen`): a minimal HTTP/1.1 server
//! on one thread, `relaymq-metrics`, answering `GET /metrics` with the Prometheus page
//! ([`super::metrics`]).
//!
//! One request per connection (`Connection: close`). The thread waits on its own `mio`
//! `Poll` and serves up to [`METRICS_CONNECTIONS_MAX`] connections at once, all
//! non-blocking (`server/http/conn.rs`): a request head of at most
//! [`REQUEST_HEAD_BYTES_MAX`] bytes is read as it arrives, within
//! [`METRICS_READ_TIMEOUT_MS`] of the accept, and parsed with `httparse`; the whole answer
//! is written within [`METRICS_WRITE_TIMEOUT_MS`]. `GET`/`HEAD /metrics` → 200; another
//! path → 404; another method → 405; a malformed head → 400; an oversized one → 431.
//! A silent or slow client holds one connection slot, never the thread: another client's
//! scrape waits only for pages being built (~35 ms for 10,000 queues). With every slot
//! taken, a new connection closes the oldest one still waiting for its head (so idle
//! sockets cannot lock Prometheus out); when all are writing answers the new one is
//! closed at once. Deadlines are checked at every wake-up, at least every
//! [`METRICS_STOP_CHECK_MS`]; so is the stop channel, and stopping closes every open
//! connection (idle sockets held a SIGTERM back past systemd's `TimeoutStopSec`).

use super::conn::{MetricsConn, Progress};
use crate::broker::Broker;
use crate::stoppable_thread::StoppableThread;
use crossbeam_channel::{Receiver, TryRecvError};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request head (request line and headers) read, in bytes; a longer one is
/// answered 431 (Prometheus sends ~300 bytes).
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;

/// Most request headers parsed; more are answered 431.
pub const REQUEST_HEADERS_MAX: usize = 64;

/// Time allowed for the whole request head to arrive, from the accept, in ms.
pub const METRICS_READ_TIMEOUT_MS: u64 = 5_000;

/// Time allowed for the whole answer to be written, in ms (Prometheus' default
/// `scrape_timeout` is 10 s: a slower scrape is lost anyway).
pub const METRICS_WRITE_TIMEOUT_MS: u64 = 10_000;

/// Connections served at once, in connections (each holds a
/// [`REQUEST_HEAD_BYTES_MAX`] buffer, then its answer). With all taken, a new one closes
/// the oldest still waiting for its head, or is closed itself when none is.
pub const METRICS_CONNECTIONS_MAX: usize = 64;

/// Metrics pages held at once by connections still writing them, in pages (a page is
/// about 760 bytes per queue: 7.6 MB with 10,000 queues). A `GET` beyond it is answered
/// 503 with `Retry-After: 1`, so clients that ask and never read cannot pin
/// [`METRICS_CONNECTIONS_MAX`] pages; Prometheus scrapes one at a time.
pub const METRICS_PAGES_IN_FLIGHT_MAX: usize = 4;

/// Longest wait on the `Poll` before the thread checks its deadlines and its stop
/// channel, in ms (the delay of a shutdown and the resolution of the deadlines, not of a
/// scrape: connections wake it at once).
pub const METRICS_STOP_CHECK_MS: u64 = 100;

/// Bytes a client may still send after its request head (say, a body) that are read and
/// dropped before the socket is closed, so closing does not reset the connection before
/// the client has read the answer.
pub const REQUEST_DRAIN_BYTES_MAX: usize = 64 * 1024;

/// Time spent draining those bytes, in ms.
pub const REQUEST_DRAIN_TIMEOUT_MS: u64 = 200;

/// The path the page is served at (Prometheus' default `metrics_path`).
pub const METRICS_PATH: &str = "/metrics";

const LISTENER: mio::Token = mio::Token(0);

/// Readiness events taken from the `Poll` per wait.
const EVENTS_PER_POLL: usize = METRICS_CONNECTIONS_MAX + 1;

/// The running metrics listener.
pub struct MetricsServer {
    addr: SocketAddr,
    thread: StoppableThread,
}

impl MetricsServer {
    /// Binds `addr` and starts the `relaymq-metrics` thread serving `broker`'s metrics
    /// to at most `connections_max` connections at once (the HTTP part of the
    /// file-descriptor budget, at most [`METRICS_CONNECTIONS_MAX`]).
    ///
    /// # Errors
    /// `cannot listen on ADDR (metrics): …` when the address cannot be bound; the
    /// thread or its poller cannot be started.
    pub fn start(
        addr: SocketAddr,
        broker: Arc<Broker>,
        connections_max: usize,
    ) -> io::Result<MetricsServer> {
        let mut listener = mio::net::TcpListener::bind(addr).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen on {addr} (metrics): {e}"))
        })?;
        let bound = listener.local_addr()?;
        let poll = mio::Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
        let thread = StoppableThread::spawn("relaymq-metrics", move |stop| {
            Listener::new(poll, listener, connections_max).run(&broker, &stop)
        })?;
        Ok(MetricsServer {
            addr: bound,
            thread,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread (within [`METRICS_STOP_CHECK_MS`] plus at most one page being
    /// built), closing every open connection, and joins it.
    pub fn stop(&mut self) {
        self.thread.stop();
    }
}

/// The thread's state: the `Poll`, the listening socket, the connection slots (slot `i`
/// is token `i + 1`).
struct Listener {
    poll: mio::Poll,
    listener: mio::net::TcpListener,
    slots: Vec<Option<MetricsConn>>,
}

impl Listener {
    fn new(poll: mio::Poll, listener: mio::net::TcpListener, connections_max: usize) -> Listener {
        let slots = connections_max.clamp(1, METRICS_CONNECTIONS_MAX);
        Listener {
            poll,
            listener,
            slots: (0..slots).map(|_| None).collect(),
        }
    }

    /// Serves until `stop` is signalled (or disconnected) or the `Poll` fails; returning
    /// drops, and so closes, every connection.
    fn run(mut self, broker: &Broker, stop: &Receiver<()>) {
        let mut events = mio::Events::with_capacity(EVENTS_PER_POLL);
        let timeout = Duration::from_millis(METRICS_STOP_CHECK_MS);
        loop {
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("metrics listener stopped: poll failed: {e}");
                    return;
                }
            }
            for event in events.iter() {
                // Checked per event: building a page takes a while (~35 ms for 10,000
                // queues), and a stop must not wait for a queue of them.
                if stopped(stop) {
                    return;
                }
                if let Some(slot) = event.token().0.checked_sub(1) {
                    self.advance(slot, broker);
                }
            }
            if stopped(stop) {
                return;
            }
            // Accept after every wake-up, timeouts included: with edge-triggered readiness
            // a connection left by a failed accept would otherwise wait for the next one.
            self.accept_all(broker, stop);
            self.expire(Instant::now());
        }
    }

    /// Drives the connection in `slot` (if any) and closes it when finished or failed.
    fn advance(&mut self, slot: usize, broker: &Broker) {
        let pages_in_flight = self
            .slots
            .iter()
            .flatten()
            .filter(|c| c.holds_page())
            .count();
        let Some(conn) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        match conn.advance(broker, pages_in_flight) {
            Ok(Progress::Waiting) => {}
            Ok(Progress::Done) => self.close(slot),
            Err(e) => {
                log::debug!("metrics request from {}: {e}", conn.peer());
                self.close(slot);
            }
        }
    }

    /// Accepts every pending connection, each into a free slot (see
    /// [`METRICS_CONNECTIONS_MAX`] for a full table), and reads what it already sent.
    fn accept_all(&mut self, broker: &Broker, stop: &Receiver<()>) {
        loop {
            if stopped(stop) {
                return;
            }
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("metrics listener: accept failed: {e}");
                    return;
                }
            };
            let Some(slot) = self.free_slot() else {
                log::debug!(
                    "metrics listener: {} connections answering; closed {peer}",
                    self.slots.len()
                );
                continue; // dropping the stream closes it
            };
            let mut conn = MetricsConn::new(stream, peer, Instant::now());
            let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
            if let Err(e) =
                self.poll
                    .registry()
                    .register(conn.stream_mut(), mio::Token(slot + 1), interest)
            {
                log::warn!("metrics listener: cannot register {peer}: {e}");
                continue;
            }
            if let Some(s) = self.slots.get_mut(slot) {
                *s = Some(conn);
            }
            self.advance(slot, broker);
        }
    }

    /// A free slot; with none, the slot of the oldest connection still waiting for its
    /// head, closed to make room; `None` when every connection is past its head.
    fn free_slot(&mut self) -> Option<usize> {
        if let Some(free) = self.slots.iter().position(Option::is_none) {
            return Some(free);
        }
        let (oldest, peer) = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
            .filter(|(_, c)| c.is_reading())
            .min_by_key(|(_, c)| c.accepted())
            .map(|(i, c)| (i, c.peer()))?;
        log::debug!(
            "metrics listener: {} connections open; closed the oldest idle one, from {peer}",
            self.slots.len()
        );
        self.close(oldest);
        Some(oldest)
    }

    /// Closes every connection whose phase deadline has passed at `now`.
    fn expire(&mut self, now: Instant) {
        for slot in 0..self.slots.len() {
            let late = self
                .slots
                .get(slot)
                .and_then(Option::as_ref)
                .and_then(|c| c.expired(now).map(|why| (why, c.peer())));
            if let Some((why, peer)) = late {
                log::debug!("metrics request from {peer}: {why}");
                self.close(slot);
            }
        }
    }

    /// Deregisters and closes the connection in `slot`.
    fn close(&mut self, slot: usize) {
        if let Some(mut conn) = self.slots.get_mut(slot).and_then(Option::take) {
            let _ = self.poll.registry().deregister(conn.stream_mut());
        }
    }
}

/// The stop channel was signalled or disconnected.
fn stopped(stop: &Receiver<()>) -> bool {
    !matches!(stop.try_recv(), Err(TryRecvError::Empty))
}
