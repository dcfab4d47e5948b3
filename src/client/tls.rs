//! TLS for the blocking client: the rustls client configuration built from
//! [`TlsOptions`], the handshake at connect time, and [`TlsStream`], one half of a TLS
//! connection shared by the reader thread and the writer.
//!
//! A `rustls::ClientConnection` is one state machine for both directions, while the client
//! reads on its reader thread and writes from whichever thread holds the writer. Each
//! half therefore owns a clone of the socket and shares the state machine behind a mutex
//! that is never held across a blocking socket call: the reader reads ciphertext without
//! it, then takes it to decrypt; the writer takes it to encrypt into its own buffer, then
//! writes without it. Records reach the wire in the order they were encrypted because
//! every write goes through the writer (one at a time, `Shared::writer`); records rustls
//! makes while reading (a key-update answer) leave with the next write.

use super::error::ClientError;
use super::options::TlsOptions;
use crate::tls::{crypto_provider, load_certs, load_key, load_roots, tls_failure};
use rustls::pki_types::ServerName;
use rustls::ClientConnection;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

/// Ciphertext bytes asked of the socket per read. At most this much is fed to rustls
/// while its plaintext is empty, so its received-plaintext buffer (16 KiB) cannot
/// overflow: rustls takes a few KiB per `read_tls` and the plaintext is handed out
/// before the next.
const CIPHER_READ_BYTES: usize = 64 * 1024;

/// Capacity the writer's ciphertext buffer keeps between writes, in bytes; a larger one
/// (after a big message) is given back.
const CIPHER_KEEP_BYTES: usize = 256 * 1024;

/// Builds the rustls client configuration: trust the CAs of `options.ca_file`, present
/// the client certificate when both its files are given; TLS 1.2 and 1.3.
///
/// # Errors
/// [`ClientError::Tls`] naming the file that cannot be read or used, or when only one of
/// the client certificate and key is given.
pub(crate) fn client_config(
    options: &TlsOptions,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let tls_err = |e: crate::tls::TlsFileError| ClientError::Tls(e.to_string());
    let roots = load_roots(&options.ca_file).map_err(tls_err)?;
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(format!("no usable TLS version: {e}")))?
        .with_root_certificates(roots);
    let config = match (&options.cert_file, &options.key_file) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = load_certs(cert).map_err(tls_err)?;
            let key_der = load_key(key).map_err(tls_err)?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                ClientError::Tls(format!(
                    "{} and {}: the certificate and key cannot be used together: {e}",
                    cert.display(),
                    key.display()
                ))
            })?
        }
        _ => {
            return Err(ClientError::Tls(
                "a client certificate needs both its certificate and its key file".into(),
            ))
        }
    };
    Ok(Arc::new(config))
}

/// The name the server's certificate must carry: `options.server_name`, else the host of
/// `addr` (`HOST:PORT`, `[V6]:PORT`); an IP address is checked against the certificate's
/// IP addresses, a name against its DNS names (RFC 6125).
///
/// # Errors
/// [`ClientError::Tls`] when the name is not a valid DNS name or IP address.
pub(crate) fn server_name(
    addr: &str,
    options: &TlsOptions,
) -> Result<ServerName<'static>, ClientError> {
    let host = match &options.server_name {
        Some(name) => name.as_str(),
        None => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            host.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host)
        }
    };
    ServerName::try_from(host.to_string()).map_err(|e| {
        ClientError::Tls(format!(
            "'{host}' cannot be checked against a certificate: {e}"
        ))
    })
}

/// Runs the TLS handshake on `socket` (blocking, within the socket's timeouts) and
/// returns the connection's two halves (reader's, writer's).
///
/// # Errors
/// [`ClientError::Tls`] when the handshake fails (untrusted certificate, wrong name, the
/// server refused our certificate or lack of one), [`ClientError::Timeout`] when the
/// server does not answer in time, [`ClientError::Io`] for socket errors.
pub(crate) fn handshake(
    mut socket: TcpStream,
    addr: &str,
    options: &TlsOptions,
) -> Result<(TlsStream, TlsStream), ClientError> {
    let config = client_config(options)?;
    let name = server_name(addr, options)?;
    let mut conn = ClientConnection::new(config, name)
        .map_err(|e| ClientError::Tls(format!("cannot start TLS: {e}")))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut socket)
            .map_err(|e| handshake_error(addr, e))?;
    }
    // What the handshake's last flight left to send (a client certificate's Finished).
    while conn.wants_write() {
        conn.write_tls(&mut socket)
            .map_err(|e| handshake_error(addr, e))?;
    }
    let shared = Arc::new(Mutex::new(conn));
    let reader = TlsStream::new(socket.try_clone()?, Arc::clone(&shared));
    Ok((reader, TlsStream::new(socket, shared)))
}

/// The error for a failed handshake step.
fn handshake_error(addr: &str, e: io::Error) -> ClientError {
    if let Some(t) = tls_failure(&e) {
        let hint = match t {
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
                " (the server's answer is not TLS: does that port speak TLS?)"
            }
            _ => "",
        };
        return ClientError::Tls(format!("handshake with {addr} failed: {t}{hint}"));
    }
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => ClientError::Tls(format!(
            "handshake with {addr} failed: the server closed the connection (does that port speak TLS?)"
        )),
        _ => ClientError::Io(e),
    }
}

/// One half of a TLS connection: its own socket clone plus the shared rustls state.
pub(crate) struct TlsStream {
    /// This half's clone of the socket (timeouts are per socket, shared by the clones).
    socket: TcpStream,
    /// The connection's TLS state, shared by both halves; never held across a blocking
    /// socket call.
    session: Arc<Mutex<ClientConnection>>,
    /// Ciphertext read and not yet given to rustls: `cipher[start..end]`.
    cipher: Vec<u8>,
    start: usize,
    end: usize,
}

impl TlsStream {
    fn new(socket: TcpStream, session: Arc<Mutex<ClientConnection>>) -> TlsStream {
        TlsStream {
            socket,
            session,
            cipher: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// The underlying socket (for timeouts).
    pub(crate) fn socket(&self) -> &TcpStream {
        &self.socket
    }

    fn session(&self) -> MutexGuard<'_, ClientConnection> {
        // A panic elsewhere cannot leave the TLS state half-updated in a way that matters
        // more than the connection failing on its next record.
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encrypts `bytes` and writes them, in chunks of at most rustls's send buffer, into
    /// `out` (reused ciphertext buffer) and then to the socket without holding the TLS
    /// state.
    ///
    /// # Errors
    /// The socket's write error, or the connection's TLS failure.
    pub(crate) fn write_all(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        loop {
            out.clear();
            {
                let mut s = self.session();
                let n = s.writer().write(bytes)?;
                bytes = &bytes[n..];
                while s.wants_write() {
                    s.write_tls(out)?;
                }
            }
            if out.is_empty() && !bytes.is_empty() {
                return Err(io::Error::other("TLS layer accepted no bytes"));
            }
            self.socket.write_all(out)?;
            if bytes.is_empty() {
                break;
            }
        }
        if out.capacity() > CIPHER_KEEP_BYTES {
            *out = Vec::new();
        }
        Ok(())
    }

    /// Sends `close_notify` if the socket takes it at once, then shuts the socket down
    /// both ways: a blocked reader or writer returns.
    pub(crate) fn shutdown(&self) {
        let mut out = Vec::new();
        {
            let mut s = self.session();
            s.send_close_notify();
            while s.wants_write() {
                if s.write_tls(&mut out).is_err() {
                    break;
                }
            }
        }
        // Never block on a peer that does not read: this is the end anyway.
        if self.socket.set_nonblocking(true).is_ok() {
            let _ = (&self.socket).write(&out);
        }
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

impl Read for TlsStream {
    /// Plaintext of the connection: what rustls holds, else the next ciphertext read from
    /// the socket (outside the lock), decrypted. `Ok(0)` at the end of the stream.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
                match s.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    let mut pending = &self.cipher[self.start..self.end];
                    let taken = s.read_tls(&mut pending)?;
                    if taken == 0 {
                        // close_notify was received: nothing more will come.
                        return Ok(0);
                    }
                    self.start += taken;
                    s.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    continue;
                }
            }
            if self.cipher.len() < CIPHER_READ_BYTES {
                self.cipher.resize(CIPHER_READ_BYTES, 0);
            }
            let n = self.socket.read(&mut self.cipher)?;
            if n == 0 {
                return Ok(0);
            }
            self.start = 0;
            self.end = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_name_is_the_host_of_the_address_unless_given() {
        let opts = TlsOptions::new("ca.pem");
        let name =
            |addr: &str, o: &TlsOptions| server_name(addr, o).map(|n| n.to_str().into_owned());
        assert_eq!(
            name("broker.example.com:5674", &opts).unwrap(),
            "broker.example.com"
        );
        assert_eq!(name("127.0.0.1:5674", &opts).unwrap(), "127.0.0.1");
        assert_eq!(name("[::1]:5674", &opts).unwrap(), "::1");
        let named = TlsOptions {
            server_name: Some("mq.internal".into()),
            ..opts.clone()
        };
        assert_eq!(name("10.0.0.7:5674", &named).unwrap(), "mq.internal");
        let err = name("bad_name!:5674", &opts).unwrap_err();
        assert!(matches!(err, ClientError::Tls(_)), "{err:?}");
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["ca".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert.pem()).unwrap();
        let half = TlsOptions {
            cert_file: Some("client.pem".into()),
            ..TlsOptions::new(&ca)
        };
        let err = client_config(&half).unwrap_err();
        assert!(err.to_string().contains("both"), "{err}");
        let missing = TlsOptions::new(dir.path().join("missing-ca.pem"));
        let err = client_config(&missing).unwrap_err();
        assert!(err.to_string().contains("missing-ca.pem"), "{err}");
        client_config(&TlsOptions::new(&ca)).unwrap();
    }
}
