//! Socket I/O: the stream (plain TCP or TLS), the writer (one frame sequence at a time),
//! the frame reader, and the two threads a connection runs: the reader, which routes
//! everything the server sends, and the heartbeat sender.

use super::error::ClientError;
use super::shared::{lock, Shared};
use super::tls::TlsStream;
use crate::error::ReplyCode;
use crate::native::frame::{self, Payload};
use crate::native::{FrameAssembler, FrameType, Method, FRAME_HEADER_BYTES};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// First bytes of a TLS alert record (content type 21, protocol version 3.x): what a TLS
/// port answers a plaintext client with before it closes (RFC 8446 §5.1, §6).
const TLS_ALERT_RECORD_START: [u8; 2] = [0x15, 0x03];

/// Capacity a read or write buffer keeps once it is empty; a larger one (after a big
/// message) is given back.
const BUFFER_KEEP_BYTES: usize = 256 * 1024;

/// A connection's byte stream: plain TCP, or TLS over it. Each of the reader and the
/// writer holds one (socket clones sharing the TLS state).
pub(crate) enum ClientStream {
    /// Plain TCP: reads and writes go straight to the socket.
    Plain(TcpStream),
    /// TLS ([`TlsStream`]).
    Tls(TlsStream),
}

impl From<TcpStream> for ClientStream {
    fn from(s: TcpStream) -> ClientStream {
        ClientStream::Plain(s)
    }
}

impl ClientStream {
    /// The TCP socket underneath (for options and timeouts, which all clones share).
    pub(crate) fn socket(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(t) => t.socket(),
        }
    }

    /// Writes all of `bytes`; `cipher` is the reused buffer TLS encrypts into.
    fn write_all(&mut self, bytes: &[u8], cipher: &mut Vec<u8>) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.write_all(bytes),
            ClientStream::Tls(t) => t.write_all(bytes, cipher),
        }
    }

    /// Shuts the connection down both ways (TLS sends `close_notify` first when the
    /// socket takes it at once): a blocked reader or writer returns.
    pub(crate) fn shutdown(&self) {
        match self {
            ClientStream::Plain(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
            ClientStream::Tls(t) => t.shutdown(),
        }
    }
}

impl Read for ClientStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.read(buf),
            ClientStream::Tls(t) => t.read(buf),
        }
    }
}

/// The socket's write half and the buffer frames are encoded into.
pub(crate) struct Writer {
    /// Write half (a `try_clone` of the reader's stream).
    stream: ClientStream,
    /// Negotiated frame size, bytes, header included: payloads above it are split.
    frame_max: u32,
    /// Encoding buffer, reused between writes.
    buf: Vec<u8>,
    /// When the last bytes were written: heartbeats are only sent on an idle socket.
    last_write: Instant,
    /// TLS only: the buffer records are encrypted into before they are written, reused.
    cipher: Vec<u8>,
}

impl Writer {
    /// A writer over `stream` splitting payloads at `frame_max` bytes.
    pub(crate) fn new(stream: impl Into<ClientStream>, frame_max: u32) -> Writer {
        Writer {
            stream: stream.into(),
            frame_max,
            buf: Vec::new(),
            last_write: Instant::now(),
            cipher: Vec::new(),
        }
    }

    /// Changes the frame size payloads are split at (after negotiation).
    pub(crate) fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// Writes raw bytes (the protocol header).
    pub(crate) fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes, &mut self.cipher)?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Writes one method with its request id.
    pub(crate) fn send(
        &mut self,
        channel: u16,
        request_id: u32,
        method: &Method,
    ) -> io::Result<()> {
        self.send_with(channel, |out| method.encode(request_id, out))
    }

    /// Writes one method payload produced by `encode` (method id, request id, fields),
    /// split into frames as needed.
    pub(crate) fn send_with(
        &mut self,
        channel: u16,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        self.buf.clear();
        frame::write_method(&mut self.buf, channel, self.frame_max, encode);
        let written = self.stream.write_all(&self.buf, &mut self.cipher);
        self.last_write = Instant::now();
        if self.buf.capacity() > BUFFER_KEEP_BYTES {
            self.buf = Vec::new();
        }
        written
    }

    /// Writes a heartbeat frame.
    fn heartbeat(&mut self) -> io::Result<()> {
        let mut hb = Vec::with_capacity(FRAME_HEADER_BYTES);
        frame::write_heartbeat(&mut hb);
        self.write_raw(&hb)
    }

    /// Time since the last write.
    fn idle(&self) -> Duration {
        self.last_write.elapsed()
    }

    /// Shuts the socket down both ways: a blocked reader or writer returns at once.
    pub(crate) fn shutdown(&self) {
        self.stream.shutdown();
    }
}

/// What one read of the stream yields.
#[allow(
    clippy::large_enum_variant,
    reason = "returned and matched at once, never stored"
)]
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A whole method: channel, request id, method.
    Method(u16, u32, Method),
    /// A heartbeat frame.
    Heartbeat,
}

/// Cuts frames out of the byte stream and joins split payloads.
pub(crate) struct FrameReader {
    /// Read buffer: bytes read and not yet consumed are `buf[start..end]`; the rest is
    /// room for the next read (kept zeroed once, not cleared per read).
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Joins payloads split with the MORE flag.
    assembler: FrameAssembler,
    /// Largest frame accepted, bytes (the negotiated size).
    frame_max: u32,
}

impl FrameReader {
    /// A reader accepting frames up to `frame_max` bytes.
    pub(crate) fn new(frame_max: u32) -> FrameReader {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            end: 0,
            assembler: FrameAssembler::new(crate::limits::PAYLOAD_BYTES_MAX),
            frame_max,
        }
    }

    /// Changes the accepted frame size (after negotiation).
    pub(crate) fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// Whether the buffered bytes start like a protocol header (the server's answer to a
    /// version it does not speak).
    pub(crate) fn protocol_header_seen(&self) -> Option<&[u8]> {
        let b = &self.buf[self.start..self.end];
        (b.len() >= 8 && b.starts_with(b"RMQP")).then(|| &b[..8])
    }

    /// Reads until one method or heartbeat is complete.
    ///
    /// # Errors
    /// [`ClientError::Io`] on a read error or end of stream (kind `UnexpectedEof`; a read
    /// timeout comes back as kind `WouldBlock` or `TimedOut`), [`ClientError::Protocol`]
    /// for bytes that do not decode.
    pub(crate) fn next(&mut self, stream: &mut impl Read) -> Result<Incoming, ClientError> {
        loop {
            if let Some(incoming) = self.parse()? {
                return Ok(incoming);
            }
            if self.protocol_header_seen().is_some() {
                return Err(ClientError::Protocol(
                    "the server answered with a protocol header: it does not speak this version"
                        .into(),
                ));
            }
            self.fill(stream)?;
        }
    }

    fn parse(&mut self) -> Result<Option<Incoming>, ClientError> {
        loop {
            let avail = &self.buf[self.start..self.end];
            if avail.starts_with(b"RMQP") {
                return Ok(None);
            }
            if avail.starts_with(b"AMQP") {
                return Err(ClientError::Protocol(
                    "the server answered with the AMQP 0-9-1 protocol header: that port speaks \
                     AMQP 0-9-1, not RelayMQ's native protocol (default port 5673)"
                        .into(),
                ));
            }
            let Some((header, n)) = frame::check(avail, self.frame_max)? else {
                return Ok(None);
            };
            let payload = &avail[FRAME_HEADER_BYTES..n];
            self.start += n;
            if header.frame_type == FrameType::Heartbeat {
                return Ok(Some(Incoming::Heartbeat));
            }
            let decoded = match self.assembler.push(&header, payload)? {
                None => continue,
                Some(Payload::Whole(channel, p)) => (channel, Method::decode(p)?),
                Some(Payload::Joined(channel, p)) => (channel, Method::decode(&p)?),
                Some(Payload::Oversized { channel, size, .. }) => {
                    return Err(ClientError::Protocol(format!(
                        "payload of {size} bytes on channel {channel} exceeds {} bytes",
                        crate::limits::PAYLOAD_BYTES_MAX
                    )));
                }
            };
            let (channel, (request_id, method)) = decoded;
            return Ok(Some(Incoming::Method(channel, request_id, method)));
        }
    }

    fn fill(&mut self, stream: &mut impl Read) -> Result<(), ClientError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > BUFFER_KEEP_BYTES {
                self.buf = Vec::new();
            }
        } else if self.start > 0 && self.buf.len() - self.end < READ_CHUNK_BYTES {
            // Only the tail of a partial frame moves, once per buffer's worth of reads.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < READ_CHUNK_BYTES {
            self.buf.resize(self.end + READ_CHUNK_BYTES, 0);
        }
        let read = loop {
            match stream.read(&mut self.buf[self.end..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let n = read.map_err(ClientError::from)?;
        if n == 0 {
            let text = if self.buf[self.start..self.end].starts_with(&TLS_ALERT_RECORD_START) {
                "the server answered with a TLS alert and closed the connection: that port \
                 speaks TLS (connect with TLS options; relaymq-cli --tls)"
            } else {
                "the server closed the connection"
            };
            return Err(ClientError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                text,
            )));
        }
        self.end += n;
        Ok(())
    }
}

/// Whether an I/O error is a read timeout.
pub(crate) fn is_read_timeout(e: &ClientError) -> bool {
    matches!(e, ClientError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}

/// The reader thread: routes every frame until the stream ends, then fails whatever still
/// waits. `stream` has a read timeout of two heartbeat intervals (none without
/// heartbeats), so a silent server is detected (AMQP 0-9-1 §4.2.7).
pub(crate) fn run_reader(shared: Arc<Shared>, mut stream: ClientStream, mut frames: FrameReader) {
    let why = loop {
        match frames.next(&mut stream) {
            Ok(Incoming::Heartbeat) => {}
            Ok(Incoming::Method(channel, request_id, method)) => {
                if matches!(method, Method::Close { .. } | Method::ChannelClose { .. }) {
                    // Answer before the waiting request wakes up: whatever its thread sends
                    // next (a new channel.open on the same number, say) follows the close-ok.
                    let mut w = lock(&shared.writer);
                    let _ = w.send(channel, request_id, &Method::CloseOk);
                    shared.route(channel, request_id, method);
                } else {
                    shared.route(channel, request_id, method);
                }
            }
            Err(e) if is_read_timeout(&e) => {
                break ClientError::ConnectionClosed {
                    code: 0,
                    text: "missed heartbeats from the server".into(),
                };
            }
            Err(e) => {
                if let ClientError::Protocol(text) = &e {
                    let close = Method::Close {
                        reply_code: ReplyCode::SyntaxError.as_u16(),
                        reply_text: text.clone(),
                        method_id: 0,
                    };
                    let _ = lock(&shared.writer).send(0, 0, &close);
                }
                break e;
            }
        }
    };
    log::debug!("client reader stops: {why}");
    shared.fail_connection(why);
    stream.shutdown();
}

/// The heartbeat thread: writes a heartbeat whenever nothing was written for half the
/// negotiated interval (the server closes a peer silent for two intervals), until `stop`
/// is signalled or dropped or the connection dies.
pub(crate) fn run_heartbeats(shared: Arc<Shared>, interval: Duration, stop: Receiver<()>) {
    let period = (interval / 2).max(Duration::from_millis(100));
    loop {
        let wait = period.saturating_sub(lock(&shared.writer).idle());
        match stop.recv_timeout(wait.max(Duration::from_millis(10))) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if lock(&shared.state).closed.is_some() {
            return;
        }
        let mut w = lock(&shared.writer);
        if w.idle() >= period {
            if let Err(e) = w.heartbeat() {
                drop(w);
                shared.fail_connection(ClientError::Io(e));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_joins_split_payloads_and_sees_heartbeats() {
        let method = Method::QueuePurgeOk { message_count: 7 };
        let mut bytes = Vec::new();
        frame::write_heartbeat(&mut bytes);
        frame::write_method(&mut bytes, 3, 13, |out| method.encode(42, out));
        let mut src = io::Cursor::new(bytes);
        let mut r = FrameReader::new(4096);
        assert!(matches!(r.next(&mut src).unwrap(), Incoming::Heartbeat));
        match r.next(&mut src).unwrap() {
            Incoming::Method(3, 42, m) => assert_eq!(m, method),
            other => panic!("{other:?}"),
        }
        let err = r.next(&mut src).unwrap_err();
        assert!(matches!(err, ClientError::Io(ref e) if e.kind() == io::ErrorKind::UnexpectedEof));
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let mut src = io::Cursor::new(vec![0, 0, 0, 1, 9, 0, 0, 0, 0]);
        let err = FrameReader::new(4096).next(&mut src).unwrap_err();
        assert!(matches!(err, ClientError::Protocol(_)), "{err:?}");
        let mut src = io::Cursor::new(b"RMQP\x00\x02\x00\x00".to_vec());
        let err = FrameReader::new(4096).next(&mut src).unwrap_err();
        assert!(err.to_string().contains("protocol header"), "{err}");
    }
}
