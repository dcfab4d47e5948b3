//! The metrics listener (`--metrics-listen`, issue 8 part 4): a minimal HTTP/1.1 server
//! on one thread, `relaymq-metrics`, answering `GET /metrics` with the Prometheus page
//! ([`super::metrics_page`]).
//!
//! One request per connection (`Connection: close`), served one at a time: a request head
//! of at most [`REQUEST_HEAD_BYTES_MAX`] bytes is read within [`METRICS_READ_TIMEOUT_MS`]
//! (in all) and parsed with `httparse`; the answer is written within [`METRICS_WRITE_TIMEOUT_MS`]
//! per write. `GET`/`HEAD /metrics` → 200; another path → 404; another method → 405;
//! a malformed head → 400; an oversized one → 431. Nothing a client sends can make it
//! allocate more than the fixed buffer, and a slow client holds the thread at most for
//! those timeouts. Stopping: the accept loop waits on `mio` with a
//! [`METRICS_STOP_CHECK_MS`] timeout and checks its stop channel between waits.

use super::metrics_page;
use crate::broker::stoppable_thread::StoppableThread;
use crate::broker::Broker;
use crate::metrics::text::CONTENT_TYPE;
use crossbeam_channel::{Receiver, TryRecvError};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request head (request line and headers) read, in bytes; a longer one is
/// answered 431 (Prometheus sends ~300 bytes).
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;

/// Most request headers parsed; more are answered 431.
pub const REQUEST_HEADERS_MAX: usize = 64;

/// Time allowed for the whole request head to arrive, in ms.
pub const METRICS_READ_TIMEOUT_MS: u64 = 5_000;

/// Time allowed for each write of the answer, in ms.
pub const METRICS_WRITE_TIMEOUT_MS: u64 = 10_000;

/// Longest wait of the accept loop before it checks for a stop, in ms (the delay of a
/// shutdown, not of a scrape: connections wake it at once).
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

/// The running metrics listener.
pub struct MetricsServer {
    addr: SocketAddr,
    thread: StoppableThread,
}

impl MetricsServer {
    /// Binds `addr` and starts the `relaymq-metrics` thread serving `broker`'s metrics.
    ///
    /// # Errors
    /// `cannot listen on ADDR (metrics): …` when the address cannot be bound; the
    /// thread or its poller cannot be started.
    pub fn start(addr: SocketAddr, broker: Arc<Broker>) -> io::Result<MetricsServer> {
        let mut listener = mio::net::TcpListener::bind(addr).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen on {addr} (metrics): {e}"))
        })?;
        let bound = listener.local_addr()?;
        let poll = mio::Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
        let thread = StoppableThread::spawn("relaymq-metrics", move |stop| {
            run(poll, listener, &broker, &stop)
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

    /// Stops the thread (after the request it is serving, if any) and joins it.
    pub fn stop(&mut self) {
        self.thread.stop();
    }
}

fn run(mut poll: mio::Poll, listener: mio::net::TcpListener, broker: &Broker, stop: &Receiver<()>) {
    let mut events = mio::Events::with_capacity(4);
    let timeout = Duration::from_millis(METRICS_STOP_CHECK_MS);
    loop {
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() != io::ErrorKind::Interrupted {
                log::error!("metrics listener stopped: poll failed: {e}");
                return;
            }
        }
        if !matches!(stop.try_recv(), Err(TryRecvError::Empty)) {
            return;
        }
        // Accept after every wake-up, timeouts included: with edge-triggered readiness a
        // connection left by a failed accept would otherwise wait for the next one.
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let stream = TcpStream::from(stream);
                    if let Err(e) = serve(stream, broker) {
                        log::debug!("metrics request from {peer}: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::warn!("metrics listener: accept failed: {e}");
                    break;
                }
            }
        }
    }
}

/// An answer: status line text and body (empty for errors but a short reason).
struct Answer {
    status: &'static str,
    body: String,
    content_type: &'static str,
    allow: bool,
    head_only: bool,
}

impl Answer {
    fn error(status: &'static str) -> Answer {
        Answer {
            status,
            body: format!("{status}\n"),
            content_type: "text/plain; charset=utf-8",
            allow: status.starts_with("405"),
            head_only: false,
        }
    }
}

/// Reads one request head and answers it.
fn serve(mut stream: TcpStream, broker: &Broker) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_millis(METRICS_WRITE_TIMEOUT_MS)))?;
    let mut buf = [0u8; REQUEST_HEAD_BYTES_MAX];
    let mut len = 0;
    let deadline = Instant::now() + Duration::from_millis(METRICS_READ_TIMEOUT_MS);
    let answer = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        let Some(free) = buf.get_mut(len..).filter(|b| !b.is_empty()) else {
            break Answer::error("431 Request Header Fields Too Large");
        };
        let n = stream.read(free)?;
        if n == 0 {
            // Closed before a whole head: nothing to answer.
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; REQUEST_HEADERS_MAX];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(buf.get(..len).unwrap_or_default()) {
            Ok(httparse::Status::Complete(_)) => {
                break answer(
                    request.method.unwrap_or(""),
                    request.path.unwrap_or(""),
                    broker,
                )
            }
            Ok(httparse::Status::Partial) => continue,
            Err(httparse::Error::TooManyHeaders) => {
                break Answer::error("431 Request Header Fields Too Large")
            }
            Err(_) => break Answer::error("400 Bad Request"),
        }
    };
    write_answer(&mut stream, &answer)?;
    drain(&mut stream);
    Ok(())
}

/// The answer to `method path`.
fn answer(method: &str, path: &str, broker: &Broker) -> Answer {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if path != METRICS_PATH {
        return Answer::error("404 Not Found");
    }
    match method {
        "GET" | "HEAD" => Answer {
            status: "200 OK",
            body: metrics_page::render(broker),
            content_type: CONTENT_TYPE,
            allow: false,
            head_only: method == "HEAD",
        },
        _ => Answer::error("405 Method Not Allowed"),
    }
}

fn write_answer(stream: &mut TcpStream, a: &Answer) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        a.status,
        a.content_type,
        a.body.len()
    );
    if a.allow {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if !a.head_only {
        stream.write_all(a.body.as_bytes())?;
    }
    stream.flush()
}

/// Ends the answer and reads (a bounded amount of) what the client still sends, so the
/// close is a FIN, not a reset that could destroy the answer in flight.
fn drain(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(REQUEST_DRAIN_TIMEOUT_MS)));
    let mut scratch = [0u8; 4096];
    let mut left = REQUEST_DRAIN_BYTES_MAX;
    while left > 0 {
        match stream.read(&mut scratch) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}
