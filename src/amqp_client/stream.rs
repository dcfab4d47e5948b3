//! The connection's byte stream: plain TCP, or TLS over it (`amqps://`).
//!
//! One thread owns a [`Connection`](super::Connection) and with it the stream, so TLS is
//! rustls's own blocking [`rustls::StreamOwned`]: no shared state, no second socket.
//! Timeouts and (non-)blocking mode are set on the TCP socket underneath and hold for
//! both.

use super::error::AmqpClientError;
use crate::client::TlsOptions;
use rustls::{ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::TcpStream;

/// Plain TCP or TLS.
pub(super) enum Stream {
    /// Plain TCP (`amqp://`).
    Plain(TcpStream),
    /// TLS (`amqps://`); boxed: the rustls state is large.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// The TCP socket underneath.
    pub(super) fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(t) => t.flush(),
        }
    }
}

/// Runs the TLS handshake over `socket` (within the socket's timeouts) for `addr`
/// (`HOST:PORT`), checking the server's certificate against `options`.
///
/// # Errors
/// [`AmqpClientError::Tls`] naming what failed: a CA or certificate file, the server's
/// certificate (untrusted, another name), a port that does not speak TLS.
pub(super) fn tls_handshake(
    mut socket: TcpStream,
    addr: &str,
    options: &TlsOptions,
) -> Result<Stream, AmqpClientError> {
    let tls = |e: crate::client::ClientError| AmqpClientError::Tls(e.to_string());
    let config = crate::client::tls::client_config(options).map_err(tls)?;
    let name = crate::client::tls::server_name(addr, options).map_err(tls)?;
    let mut conn = ClientConnection::new(config, name)
        .map_err(|e| AmqpClientError::Tls(format!("cannot start TLS: {e}")))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut socket).map_err(|e| {
            let why = match crate::tls::tls_failure(&e) {
                Some(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)) => {
                    "the answer is not TLS: does that port speak TLS?".to_string()
                }
                Some(t) => t.to_string(),
                None if e.kind() == io::ErrorKind::UnexpectedEof => {
                    "the server closed the connection (does that port speak TLS?)".into()
                }
                None => e.to_string(),
            };
            AmqpClientError::Tls(format!("TLS handshake with {addr} failed: {why}"))
        })?;
    }
    Ok(Stream::Tls(Box::new(StreamOwned::new(conn, socket))))
}
