//! One HTTP/1.1 request of the HTTP server ([`super::server`]): its head, parsed with
//! `httparse` (RFC 9112 §2–5), and its body, read from the socket as the handler asks for
//! it ([`Body`]): `Content-Length` or `chunked` (RFC 9112 §6–7), answering
//! `Expect: 100-continue` first (curl sends it for bodies over 1 KiB), always within
//! deadlines and never more than the handler allows.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Largest request head (request line and headers), in bytes; a longer one is answered
/// 431. Browsers send ~1 KiB; cowboy's limits are 10,000 bytes for a header value.
pub const HTTP_HEAD_BYTES_MAX: usize = 16 * 1024;

/// Longest request line (method, target, version), in bytes; a longer one is answered
/// 414 URI Too Long (cowboy's `max_request_line_length` default, 8,000).
pub const HTTP_REQUEST_LINE_BYTES_MAX: usize = 8_000;

/// Most headers parsed in a request head; more are answered 431.
pub const HTTP_HEADERS_MAX: usize = 64;

/// Time a request body may take to arrive, from the end of its head, in ms. A client
/// that sends its body slower is answered 408 (when nothing was read yet) or cut off.
pub const HTTP_BODY_TIMEOUT_MS: u64 = 60_000;

/// Longest single wait on a socket read before the stop flag is checked again, in ms.
pub const HTTP_STOP_CHECK_MS: u64 = 100;

/// Longest chunk-size line of a `chunked` body (size, extensions, CRLF), in bytes.
const CHUNK_LINE_BYTES_MAX: usize = 1024;

/// A malformed request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP/1.x, or a bad request line or header: 400.
    Malformed,
    /// Longer than [`HTTP_HEAD_BYTES_MAX`] or more than [`HTTP_HEADERS_MAX`] headers: 431.
    TooLarge,
    /// A `Transfer-Encoding` other than `chunked`: 501 (RFC 9112 §6.1).
    UnsupportedEncoding,
    /// A request line longer than [`HTTP_REQUEST_LINE_BYTES_MAX`]: 414.
    UriTooLong,
}

/// How the body of a request is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method, as sent (`GET`, `PUT`, ...).
    pub method: String,
    /// The path of the target, still percent-encoded, without the query.
    pub path: String,
    /// The query's pairs, decoded (`+` is a space), in order.
    pub query: Vec<(String, String)>,
    /// The headers, names in lower case, values as sent (invalid UTF-8 replaced).
    pub headers: Vec<(String, String)>,
    /// The client's address.
    pub peer: SocketAddr,
    /// HTTP/1.`minor`.
    pub minor_version: u8,
    /// How the body is delimited.
    pub body: BodyKind,
}

impl Request {
    /// Parses a whole head (`bytes` holds at least the head); returns it and its length.
    ///
    /// # Errors
    /// [`HeadError`] for a malformed, oversized or unsupported head.
    pub fn parse(bytes: &[u8], peer: SocketAddr) -> Result<(Request, usize), HeadError> {
        let line_end = bytes
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(bytes.len());
        if line_end > HTTP_REQUEST_LINE_BYTES_MAX {
            return Err(HeadError::UriTooLong);
        }
        let mut headers = [httparse::EMPTY_HEADER; HTTP_HEADERS_MAX];
        let mut parsed = httparse::Request::new(&mut headers);
        let len = match parsed.parse(bytes) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                return Err(if bytes.len() >= HTTP_HEAD_BYTES_MAX {
                    HeadError::TooLarge
                } else {
                    HeadError::Malformed
                })
            }
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Malformed),
        };
        if len > HTTP_HEAD_BYTES_MAX {
            return Err(HeadError::TooLarge);
        }
        let (Some(method), Some(target), Some(minor_version)) =
            (parsed.method, parsed.path, parsed.version)
        else {
            return Err(HeadError::Malformed);
        };
        let headers: Vec<(String, String)> = parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).trim().to_string(),
                )
            })
            .collect();
        // The absolute form (`GET http://host/api/x`, RFC 9112 §3.2.2) names the same
        // resource as its path.
        let target = match target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("https://"))
        {
            Some(rest) => rest.find(['/', '?']).map_or("/", |i| &rest[i..]),
            None => target,
        };
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, parse_query(q)),
            None => (target, Vec::new()),
        };
        let mut request = Request {
            method: method.to_string(),
            path: path.to_string(),
            query,
            headers,
            peer,
            minor_version,
            body: BodyKind::None,
        };
        request.body = request.body_kind()?;
        Ok((request, len))
    }

    /// Whether the head names both a `Content-Length` and a `Transfer-Encoding`: the body
    /// is read as chunked, and the connection is closed after the answer (RFC 9112 §6.3:
    /// a sign of request smuggling).
    pub fn length_and_encoding_conflict(&self) -> bool {
        self.header("transfer-encoding").is_some() && self.header("content-length").is_some()
    }

    /// The first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first query parameter called `name`.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path's segments, percent-decoded (`%2F` is a `/` inside a segment, as vhost
    /// `/` is written), without empty ones from a leading or trailing `/`.
    ///
    /// # Errors
    /// A segment that is not UTF-8 once decoded, or with a `%` not followed by two hex
    /// digits (cowboy refuses such a path with 400 too).
    pub fn segments(&self) -> Result<Vec<String>, HeadError> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                let b = s.as_bytes();
                let bad_escape = b.iter().enumerate().any(|(i, c)| {
                    *c == b'%'
                        && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                });
                if bad_escape {
                    return Err(HeadError::Malformed);
                }
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .map(|c| c.into_owned())
                    .map_err(|_| HeadError::Malformed)
            })
            .collect()
    }

    /// Whether the connection stays open after the answer: HTTP/1.1 unless
    /// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive` (RFC 9112 §9.3).
    pub fn keep_alive(&self) -> bool {
        let tokens = |word: &str| {
            self.headers
                .iter()
                .filter(|(n, _)| n == "connection")
                .any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(word)))
        };
        if self.minor_version == 0 {
            tokens("keep-alive")
        } else {
            !tokens("close")
        }
    }

    fn body_kind(&self) -> Result<BodyKind, HeadError> {
        if let Some(te) = self.header("transfer-encoding") {
            return if te.eq_ignore_ascii_case("chunked") {
                Ok(BodyKind::Chunked)
            } else {
                Err(HeadError::UnsupportedEncoding)
            };
        }
        let mut lengths = self
            .headers
            .iter()
            .filter(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse::<u64>());
        match (lengths.next(), lengths.next()) {
            (None, _) => Ok(BodyKind::None),
            (Some(Ok(0)), None) => Ok(BodyKind::None),
            (Some(Ok(n)), None) => Ok(BodyKind::Length(n)),
            _ => Err(HeadError::Malformed),
        }
    }
}

/// Splits a query string into decoded pairs (`application/x-www-form-urlencoded`).
fn parse_query(q: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let spaced = s.replace('+', " ");
        percent_encoding::percent_decode_str(&spaced)
            .decode_utf8_lossy()
            .into_owned()
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// The socket of a request being served, with what was read past the current point.
pub(super) struct ConnIo {
    pub(super) stream: super::stream::HttpStream,
    /// Bytes read and not yet consumed: `buf[pos..]`.
    pub(super) buf: Vec<u8>,
    pub(super) pos: usize,
    pub(super) stopping: std::sync::Arc<AtomicBool>,
}

impl ConnIo {
    /// Reads more bytes into `buf` (blocking, at most until `deadline`); 0 at the end of
    /// the stream.
    fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if self.stopping.load(Ordering::Relaxed) {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "server stopping",
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "body not received in time",
                ));
            }
            let wait = (deadline - now).min(Duration::from_millis(HTTP_STOP_CHECK_MS));
            self.stream.set_read_timeout(Some(wait))?;
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes up to `max` buffered bytes, reading when none are buffered.
    fn take(&mut self, max: usize, deadline: Instant, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.buf.len() && self.fill(deadline)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the body",
            ));
        }
        let n = max.min(out.len()).min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }

    /// One line ending in CRLF (without it), of at most [`CHUNK_LINE_BYTES_MAX`] bytes.
    fn line(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf[self.pos..].windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[self.pos..self.pos + i].to_vec();
                self.pos += i + 2;
                return Ok(line);
            }
            if self.buf.len() - self.pos > CHUNK_LINE_BYTES_MAX {
                return Err(invalid("chunk size line too long"));
            }
            if self.fill(deadline)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the body",
                ));
            }
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum BodyError {
    /// Longer than the handler's limit (bytes): 413.
    TooLarge(usize),
    /// Not received in time, cut short or malformed: 400 (the connection is closed).
    Io(io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk: bytes left.
    Data(u64),
    /// The last chunk and trailers were read.
    Done,
}

/// The body of the request being served: a reader that stops at its end. Unread bytes
/// are drained (or the connection closed) by the server after the answer.
pub struct Body<'a> {
    io: &'a mut ConnIo,
    kind: BodyKind,
    /// Bytes left of a `Content-Length` body.
    left: u64,
    chunk: ChunkState,
    deadline: Instant,
    /// `Expect: 100-continue` not answered yet.
    expects_continue: bool,
}

impl<'a> Body<'a> {
    pub(super) fn new(io: &'a mut ConnIo, request: &Request) -> Body<'a> {
        let expects_continue = request.minor_version >= 1
            && request.body != BodyKind::None
            && request
                .header("expect")
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        Body {
            io,
            kind: request.body,
            left: match request.body {
                BodyKind::Length(n) => n,
                _ => 0,
            },
            chunk: ChunkState::Size,
            deadline: Instant::now() + Duration::from_millis(HTTP_BODY_TIMEOUT_MS),
            expects_continue,
        }
    }

    /// The declared length (`Content-Length`), when there is one.
    pub fn declared_length(&self) -> Option<u64> {
        match self.kind {
            BodyKind::None => Some(0),
            BodyKind::Length(n) => Some(n),
            BodyKind::Chunked => None,
        }
    }

    /// Whether the whole body has been read.
    pub fn is_finished(&self) -> bool {
        match self.kind {
            BodyKind::None => true,
            BodyKind::Length(_) => self.left == 0,
            BodyKind::Chunked => self.chunk == ChunkState::Done,
        }
    }

    /// Moves the deadline of the rest of the body to `at`.
    pub(super) fn set_deadline(&mut self, at: Instant) {
        self.deadline = at;
    }

    /// Whether the client waits for `100 Continue` before it sends the body (nothing
    /// was read yet).
    pub(super) fn continue_pending(&self) -> bool {
        self.expects_continue
    }

    /// Bytes of a `Content-Length` body not read yet (`None` for an unfinished chunked
    /// one).
    pub(super) fn unread(&self) -> Option<u64> {
        match self.kind {
            BodyKind::Chunked if self.chunk != ChunkState::Done => None,
            _ => Some(self.left),
        }
    }

    /// Reads the whole body, of at most `max` bytes.
    ///
    /// # Errors
    /// [`BodyError::TooLarge`] past `max` (nothing more is read);
    /// [`BodyError::Io`] when it is cut short, late or malformed.
    pub fn read_to_vec(&mut self, max: usize) -> Result<Vec<u8>, BodyError> {
        if let Some(n) = self.declared_length() {
            if n > max as u64 {
                return Err(BodyError::TooLarge(max));
            }
        }
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = self.read(&mut chunk).map_err(BodyError::Io)?;
            if n == 0 {
                return Ok(out);
            }
            if out.len() + n > max {
                return Err(BodyError::TooLarge(max));
            }
            out.extend_from_slice(&chunk[..n]);
        }
    }

    fn send_continue(&mut self) -> io::Result<()> {
        if self.expects_continue {
            self.expects_continue = false;
            self.io.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        Ok(())
    }

    fn read_chunked(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.chunk {
                ChunkState::Done => return Ok(0),
                ChunkState::Data(0) => {
                    if !self.io.line(self.deadline)?.is_empty() {
                        return Err(invalid("chunk not followed by CRLF"));
                    }
                    self.chunk = ChunkState::Size;
                }
                ChunkState::Data(left) => {
                    let want = usize::try_from(left).unwrap_or(usize::MAX);
                    let n = self.io.take(want, self.deadline, out)?;
                    self.chunk = ChunkState::Data(left - n as u64);
                    return Ok(n);
                }
                ChunkState::Size => {
                    let line = self.io.line(self.deadline)?;
                    let text = std::str::from_utf8(&line).map_err(|_| invalid("bad chunk size"))?;
                    let size = text.split(';').next().unwrap_or("").trim();
                    let size =
                        u64::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
                    if size == 0 {
                        // Trailers, up to the empty line.
                        while !self.io.line(self.deadline)?.is_empty() {}
                        self.chunk = ChunkState::Done;
                        return Ok(0);
                    }
                    self.chunk = ChunkState::Data(size);
                }
            }
        }
    }
}

impl Read for Body<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() || self.is_finished() {
            return Ok(0);
        }
        self.send_continue()?;
        match self.kind {
            BodyKind::None => Ok(0),
            BodyKind::Length(_) => {
                let want = usize::try_from(self.left).unwrap_or(usize::MAX);
                let n = self.io.take(want, self.deadline, out)?;
                self.left -= n as u64;
                Ok(n)
            }
            BodyKind::Chunked => self.read_chunked(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn peer() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 1))
    }

    #[test]
    fn a_head_is_parsed_with_its_query_segments_and_body_kind() {
        let head = b"PUT /api/queues/%2F/a%20b?page=2&name=x+y&flag HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\n\r\nrest";
        let (r, len) = Request::parse(head, peer()).expect("parses");
        assert_eq!(len, head.len() - 4);
        assert_eq!(r.method, "PUT");
        assert_eq!(r.segments().expect("utf-8"), ["api", "queues", "/", "a b"]);
        let head = b"GET http://broker:15672/api/queues/%2F/a?page=2 HTTP/1.1\r\n\r\n";
        let (abs, _) = Request::parse(head, peer()).expect("absolute form");
        assert_eq!(abs.segments().unwrap(), ["api", "queues", "/", "a"]);
        assert_eq!(abs.query("page"), Some("2"));
        for bad in [
            "/api/queues/%ZZ",
            "/api/queues/a%2",
            "/api/queues/%",
            "/api/%FF",
        ] {
            let head = format!("GET {bad} HTTP/1.1\r\n\r\n");
            let (r, _) = Request::parse(head.as_bytes(), peer()).expect("parses");
            assert!(r.segments().is_err(), "{bad}");
        }
        assert_eq!(r.query("page"), Some("2"));
        assert_eq!(r.query("name"), Some("x y"));
        assert_eq!(r.query("flag"), Some(""));
        assert_eq!(r.header("host"), Some("h"));
        assert_eq!(r.body, BodyKind::Length(12));
        assert!(r.keep_alive());
        assert!(!r.length_and_encoding_conflict());
        let (both, _) = Request::parse(
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            peer(),
        )
        .expect("parses");
        assert_eq!(both.body, BodyKind::Chunked);
        assert!(both.length_and_encoding_conflict());
    }

    #[test]
    fn bad_heads_are_refused_by_kind() {
        let parse = |h: &[u8]| Request::parse(h, peer()).map(|_| ()).unwrap_err();
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            HeadError::Malformed
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            HeadError::Malformed
        );
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            HeadError::UnsupportedEncoding
        );
        assert_eq!(parse(b"\x00\x01garbage\r\n\r\n"), HeadError::Malformed);
        let many: String = (0..HTTP_HEADERS_MAX + 1)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        assert_eq!(
            parse(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            HeadError::TooLarge
        );
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection_header() {
        let ka = |h: &[u8]| Request::parse(h, peer()).expect("parses").0.keep_alive();
        assert!(ka(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(ka(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    }

    /// A body read through a real socket pair: `Content-Length` and chunked, with what
    /// follows it left for the next request.
    #[test]
    fn bodies_are_read_to_their_end_and_no_further() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut client = TcpStream::connect(addr).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        client
            .write_all(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT")
            .expect("write");
        let mut io = ConnIo {
            stream: super::super::stream::HttpStream::Plain(server),
            buf: Vec::new(),
            pos: 0,
            stopping: std::sync::Arc::new(AtomicBool::new(false)),
        };
        let (chunked, _) = Request::parse(
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            peer(),
        )
        .expect("parses");
        let mut body = Body::new(&mut io, &chunked);
        assert_eq!(body.read_to_vec(100).expect("body"), b"hello world");
        assert!(body.is_finished());
        let (sized, _) = Request::parse(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n", peer())
            .expect("parses");
        let mut body = Body::new(&mut io, &sized);
        assert_eq!(body.read_to_vec(100).expect("body"), b"NE");
        assert_eq!(&io.buf[io.pos..], b"XT");
        let (big, _) = Request::parse(
            b"POST / HTTP/1.1\r\nContent-Length: 5000000000\r\n\r\n",
            peer(),
        )
        .expect("parses");
        let mut body = Body::new(&mut io, &big);
        assert!(matches!(
            body.read_to_vec(1024),
            Err(BodyError::TooLarge(1024))
        ));
    }
}
