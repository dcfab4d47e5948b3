//! The socket of one HTTP connection: plain TCP (`--http-listen`) or TLS
//! (`--https-listen`), as the handler threads use it, in blocking mode with timeouts.
//!
//! A TLS connection is a `rustls::ServerConnection` over the TCP socket. The server's I/O
//! thread drives its handshake and reads its request heads without blocking
//! ([`super::server`]); a handler thread reads the body and writes the answer through
//! [`HttpStream`] exactly as on a plain socket, rustls encrypting and decrypting in
//! between (`rustls::StreamOwned`). Bounds: rustls holds at most
//! [`crate::limits::TLS_SEND_BUFFER_BYTES`] of unsent records and about 16 KiB of
//! received plaintext per connection.

use rustls::{ServerConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// A connection's byte stream: plaintext in and out, whatever the transport.
pub(crate) enum HttpStream {
    /// HTTP over plain TCP.
    Plain(TcpStream),
    /// HTTP over TLS (HTTPS).
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl HttpStream {
    /// A stream over `tcp`, through `tls` when the connection is HTTPS.
    pub(crate) fn new(tcp: TcpStream, tls: Option<Box<ServerConnection>>) -> HttpStream {
        match tls {
            None => HttpStream::Plain(tcp),
            Some(conn) => HttpStream::Tls(Box::new(StreamOwned::new(*conn, tcp))),
        }
    }

    /// The TCP socket under the stream.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            HttpStream::Plain(s) => s,
            HttpStream::Tls(s) => &s.sock,
        }
    }

    /// The TCP socket and, for HTTPS, its TLS state (to hand the connection back to the
    /// I/O thread between requests).
    pub(crate) fn into_parts(self) -> (TcpStream, Option<Box<ServerConnection>>) {
        match self {
            HttpStream::Plain(s) => (s, None),
            HttpStream::Tls(s) => {
                let StreamOwned { conn, sock } = *s;
                (sock, Some(Box::new(conn)))
            }
        }
    }

    /// Sets the socket's blocking mode.
    ///
    /// # Errors
    /// The socket's.
    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(on)
    }

    /// Sets how long one read may block (`None`: forever).
    ///
    /// # Errors
    /// The socket's (a zero duration).
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(t)
    }

    /// Sets how long one write may block (`None`: forever).
    ///
    /// # Errors
    /// The socket's (a zero duration).
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp().set_write_timeout(t)
    }

    /// Ends the sending side: for HTTPS a TLS `close_notify` first (RFC 8446 §6.1), then
    /// the TCP half-close. Errors are ignored: the connection is being closed.
    pub(crate) fn shutdown_write(&mut self) {
        if let HttpStream::Tls(s) = self {
            s.conn.send_close_notify();
            while s.conn.wants_write() {
                if !matches!(s.conn.write_tls(&mut s.sock), Ok(n) if n > 0) {
                    break;
                }
            }
        }
        let _ = self.tcp().shutdown(Shutdown::Write);
    }

    /// Reads raw bytes from the socket, under any TLS (to drop what a client still sends
    /// while its connection is closed).
    ///
    /// # Errors
    /// The socket's.
    pub(crate) fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            HttpStream::Plain(s) => s.read(buf),
            HttpStream::Tls(s) => s.sock.read(buf),
        }
    }
}

impl Read for HttpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            HttpStream::Plain(s) => s.read(buf),
            HttpStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for HttpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            HttpStream::Plain(s) => s.write(buf),
            HttpStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            HttpStream::Plain(s) => s.flush(),
            HttpStream::Tls(s) => s.flush(),
        }
    }
}
