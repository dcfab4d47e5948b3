//! One connection of the metrics listener ([`super::listener`]): a
//! non-blocking state machine driven by the listener's `mio` readiness events. It reads
//! the request head as it arrives (at most [`REQUEST_HEAD_BYTES_MAX`] bytes, parsed with
//! `httparse`), answers it, writes the answer as the socket takes it, then half-closes and
//! drains what the client still sends. Each step has a deadline the listener checks on
//! its timer, so a silent or slow client costs one slot and never delays another's scrape
//! (idle sockets once held every scrape back 5 s each).

use super::listener::{
    METRICS_PAGES_IN_FLIGHT_MAX, METRICS_PATH, METRICS_READ_TIMEOUT_MS, METRICS_WRITE_TIMEOUT_MS,
    REQUEST_DRAIN_BYTES_MAX, REQUEST_DRAIN_TIMEOUT_MS, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX,
};
use super::metrics;
use crate::broker::Broker;
use crate::metrics::text::CONTENT_TYPE;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

/// Size of the scratch buffer the drain reads into, in bytes.
const DRAIN_CHUNK_BYTES: usize = 4 * 1024;

/// What the listener does with a connection after [`MetricsConn::advance`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Progress {
    /// Waiting for the socket (more of the head, room to write, the client's close).
    Waiting,
    /// Finished (answered and drained, or closed by the client): close it.
    Done,
}

/// Where a connection is in its one request.
enum Phase {
    /// Reading the request head: `head[..len]` received so far.
    Reading { head: Box<[u8]>, len: usize },
    /// Writing `out[written..]` (status line, headers and body); `page` when the body is
    /// a metrics page (counted against [`METRICS_PAGES_IN_FLIGHT_MAX`]).
    Writing {
        out: Vec<u8>,
        written: usize,
        page: bool,
    },
    /// Answer written and write side shut: reading and dropping up to `left` more bytes.
    Draining { left: usize },
}

/// One accepted connection of the metrics listener.
pub(super) struct MetricsConn {
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    phase: Phase,
    /// End of the current phase: the head must arrive by it (from the accept), the whole
    /// answer be written by it, the drain end by it.
    deadline: Instant,
}

impl MetricsConn {
    /// A connection accepted at `now`, waiting for its request head.
    pub(super) fn new(stream: mio::net::TcpStream, peer: SocketAddr, now: Instant) -> Self {
        MetricsConn {
            stream,
            peer,
            accepted: now,
            phase: Phase::Reading {
                head: vec![0u8; REQUEST_HEAD_BYTES_MAX].into_boxed_slice(),
                len: 0,
            },
            deadline: now + Duration::from_millis(METRICS_READ_TIMEOUT_MS),
        }
    }

    /// The socket, to register with or deregister from the listener's `Poll`.
    pub(super) fn stream_mut(&mut self) -> &mut mio::net::TcpStream {
        &mut self.stream
    }

    /// The client's address (for the debug log).
    pub(super) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// When the connection was accepted.
    pub(super) fn accepted(&self) -> Instant {
        self.accepted
    }

    /// True while it holds a metrics page it has not finished writing.
    pub(super) fn holds_page(&self) -> bool {
        matches!(self.phase, Phase::Writing { page: true, .. })
    }

    /// True while no whole request head has arrived (a connection the listener may close
    /// to make room for a new one).
    pub(super) fn is_reading(&self) -> bool {
        matches!(self.phase, Phase::Reading { .. })
    }

    /// The deadline of the current phase has passed at `now`; what was late, for the log.
    pub(super) fn expired(&self, now: Instant) -> Option<&'static str> {
        if now < self.deadline {
            return None;
        }
        Some(match self.phase {
            Phase::Reading { .. } => "request head not received in time",
            Phase::Writing { .. } => "answer not taken by the client in time",
            Phase::Draining { .. } => "drain ended",
        })
    }

    /// Goes as far as the socket allows without blocking: reads the head, builds the
    /// answer (the page is rendered here, synchronously), writes it, drains.
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`/`Interrupted`; the listener closes the
    /// connection.
    /// `pages_in_flight` is how many connections hold a page now: at
    /// [`METRICS_PAGES_IN_FLIGHT_MAX`] a `GET` is answered 503 instead.
    pub(super) fn advance(
        &mut self,
        broker: &Broker,
        pages_in_flight: usize,
    ) -> io::Result<Progress> {
        loop {
            match &mut self.phase {
                Phase::Reading { head, len } => {
                    let answer = match read_head(&mut self.stream, head, len)? {
                        HeadRead::Waiting => return Ok(Progress::Waiting),
                        HeadRead::Closed => return Ok(Progress::Done),
                        HeadRead::Complete(request) => match request {
                            Request::Parsed { method, path } => {
                                answer(&method, &path, broker, pages_in_flight)
                            }
                            Request::Error(status) => Answer::error(status),
                        },
                    };
                    let page = answer.status.starts_with("200") && !answer.head_only;
                    self.phase = Phase::Writing {
                        out: answer.into_bytes(),
                        written: 0,
                        page,
                    };
                    self.deadline =
                        Instant::now() + Duration::from_millis(METRICS_WRITE_TIMEOUT_MS);
                }
                Phase::Writing { out, written, .. } => {
                    while let Some(rest) = out.get(*written..).filter(|r| !r.is_empty()) {
                        match self.stream.write(rest) {
                            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                            Ok(n) => *written += n,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                return Ok(Progress::Waiting)
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    // A FIN after the answer; what the client still sends is read and
                    // dropped, so the close does not reset the answer in flight.
                    let _ = self.stream.shutdown(Shutdown::Write);
                    self.phase = Phase::Draining {
                        left: REQUEST_DRAIN_BYTES_MAX,
                    };
                    self.deadline =
                        Instant::now() + Duration::from_millis(REQUEST_DRAIN_TIMEOUT_MS);
                }
                Phase::Draining { left } => {
                    let mut scratch = [0u8; DRAIN_CHUNK_BYTES];
                    loop {
                        match self.stream.read(&mut scratch) {
                            Ok(0) => return Ok(Progress::Done),
                            Ok(n) => {
                                *left = left.saturating_sub(n);
                                if *left == 0 {
                                    return Ok(Progress::Done);
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                return Ok(Progress::Waiting)
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return Ok(Progress::Done),
                        }
                    }
                }
            }
        }
    }
}

/// A request head, parsed (method and path copied out of the buffer) or refused.
enum Request {
    Parsed { method: String, path: String },
    Error(&'static str),
}

/// What [`read_head`] got to.
enum HeadRead {
    /// The socket has nothing more for now.
    Waiting,
    /// The client closed before a whole head: nothing to answer.
    Closed,
    /// A whole head (or one that cannot become valid).
    Complete(Request),
}

/// Reads into `head[*len..]` until a whole head is parsed, the socket would block, the
/// client closes, or the buffer is full (431).
fn read_head(
    stream: &mut mio::net::TcpStream,
    head: &mut [u8],
    len: &mut usize,
) -> io::Result<HeadRead> {
    loop {
        let Some(free) = head.get_mut(*len..).filter(|b| !b.is_empty()) else {
            return Ok(HeadRead::Complete(Request::Error(
                "431 Request Header Fields Too Large",
            )));
        };
        match stream.read(free) {
            Ok(0) => return Ok(HeadRead::Closed),
            Ok(n) => *len += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(HeadRead::Waiting),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let mut headers = [httparse::EMPTY_HEADER; REQUEST_HEADERS_MAX];
        let mut request = httparse::Request::new(&mut headers);
        let parsed = match request.parse(head.get(..*len).unwrap_or_default()) {
            Ok(httparse::Status::Complete(_)) => Request::Parsed {
                method: request.method.unwrap_or("").to_string(),
                path: request.path.unwrap_or("").to_string(),
            },
            Ok(httparse::Status::Partial) => continue,
            Err(httparse::Error::TooManyHeaders) => {
                Request::Error("431 Request Header Fields Too Large")
            }
            Err(_) => Request::Error("400 Bad Request"),
        };
        return Ok(HeadRead::Complete(parsed));
    }
}

/// An answer: status line text and body (for errors, the status and a newline).
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

    /// The bytes on the wire: status line, headers, blank line, body (none for `HEAD`).
    fn into_bytes(self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            head.push_str("Allow: GET, HEAD\r\n");
        }
        if self.status.starts_with("503") {
            head.push_str("Retry-After: 1\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The answer to `method path` (a query string is ignored); 503 for a `GET` while
/// `pages_in_flight` pages are still being written ([`METRICS_PAGES_IN_FLIGHT_MAX`]).
fn answer(method: &str, path: &str, broker: &Broker, pages_in_flight: usize) -> Answer {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if path != METRICS_PATH {
        return Answer::error("404 Not Found");
    }
    if method == "GET" && pages_in_flight >= METRICS_PAGES_IN_FLIGHT_MAX {
        return Answer::error("503 Service Unavailable");
    }
    match method {
        "GET" | "HEAD" => Answer {
            status: "200 OK",
            body: metrics::render(broker),
            content_type: CONTENT_TYPE,
            allow: false,
            head_only: method == "HEAD",
        },
        _ => Answer::error("405 Method Not Allowed"),
    }
}
