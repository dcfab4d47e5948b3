//! TLS on the server: the settings (`--tls-cert`, `--tls-key`, `--tls-client-ca`, the TLS
//! listeners), the rustls configuration built from them, and [`TlsLayer`], one
//! connection's TLS state as the I/O thread drives it.
//!
//! No thread and no async: the mio loop reads ciphertext from the socket as it does
//! plaintext, hands it to the connection's `rustls::ServerConnection`
//! (`read_tls` → `process_new_packets` → `reader`), and parses the plaintext that comes
//! out exactly like a plain connection's bytes. Outbound plaintext goes through `writer`
//! and the records rustls produces are written with `write_tls` until `WouldBlock`. A
//! plain connection has no [`TlsLayer`] and never enters this module.
//!
//! Bounds: rustls holds at most [`TLS_SEND_BUFFER_BYTES`] of unsent records, about 16 KiB
//! of received plaintext (drained at once) and one partial record (at most 64 KiB during
//! the handshake, rustls's limit); the connection's outbound buffer keeps its usual caps.

use crate::limits::TLS_SEND_BUFFER_BYTES;
use crate::tls::{crypto_provider, load_certs, load_key, load_roots, TlsFileError};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConnection;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Default address of the native protocol's TLS listener when TLS is on: loopback, port
/// 5674 (the plain native port 5673 plus one; RelayMQ's own choice, as the native protocol
/// has no registered port).
pub const TLS_LISTEN_DEFAULT: &str = "127.0.0.1:5674";

/// Default address of the AMQP 0-9-1 TLS listener when TLS is on: loopback, port 5671,
/// IANA's `amqps` and RabbitMQ's `listeners.ssl.default`.
pub const AMQP_TLS_LISTEN_DEFAULT: &str = "127.0.0.1:5671";

/// Whether clients must present a certificate (only with a client CA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client without a certificate is refused in the handshake (RabbitMQ's
    /// `verify_peer` with `fail_if_no_peer_cert = true`).
    Required,
    /// A client may present none; one it presents must verify (`verify_peer` with
    /// `fail_if_no_peer_cert = false`).
    Optional,
}

/// TLS settings: the server's certificate and key, optional client certificate checking,
/// and where the TLS listeners are.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// PEM file with the server's certificate chain, its own certificate first
    /// (`--tls-cert`).
    pub cert_file: PathBuf,
    /// PEM file with the server's private key (`--tls-key`).
    pub key_file: PathBuf,
    /// PEM file of the CA(s) client certificates must chain to (`--tls-client-ca`);
    /// `None`: clients are not asked for a certificate.
    pub client_ca_file: Option<PathBuf>,
    /// Whether a client certificate is required or optional (`--tls-client-auth`); only
    /// used with `client_ca_file`.
    pub client_auth: ClientAuth,
    /// Address of the native protocol's TLS listener (`--tls-listen`; `None` = off; port
    /// 0 picks a free port).
    pub listen: Option<SocketAddr>,
    /// Address of the AMQP 0-9-1 TLS listener (`--amqp-tls-listen`; `None` = off).
    pub amqp_listen: Option<SocketAddr>,
    /// Address of the management HTTP API's HTTPS listener (`--https-listen`; `None` =
    /// off, the default: RabbitMQ's `management.ssl.port` is also opt-in; its usual port
    /// is 15671).
    pub https_listen: Option<SocketAddr>,
}

impl TlsConfig {
    /// Settings for `cert_file` and `key_file` with both TLS listeners at their defaults
    /// ([`TLS_LISTEN_DEFAULT`], [`AMQP_TLS_LISTEN_DEFAULT`]) and no client certificates.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> TlsConfig {
        TlsConfig {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
            client_auth: ClientAuth::Required,
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 5674))),
            amqp_listen: Some(SocketAddr::from(([127, 0, 0, 1], 5671))),
            https_listen: None,
        }
    }
}

/// Builds the rustls server configuration: TLS 1.2 and 1.3, the certificate chain and
/// key, and the client certificate verifier when a client CA is set.
///
/// # Errors
/// [`TlsFileError`] naming the file that cannot be read or used, or both certificate and
/// key files when the key does not match the certificate.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsFileError> {
    let certs = load_certs(&tls.cert_file)?;
    let key = load_key(&tls.key_file)?;
    let provider = crypto_provider();
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsFileError::Rejected {
            path: tls.cert_file.clone(),
            detail: format!("no usable TLS version: {e}"),
        })?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(load_roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = match tls.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier.build().map_err(|e| TlsFileError::Rejected {
                path: ca.clone(),
                detail: format!("cannot verify client certificates with it: {e}"),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsFileError::Rejected {
            path: PathBuf::from(format!(
                "{} and {}",
                tls.cert_file.display(),
                tls.key_file.display()
            )),
            detail: format!("the certificate and key cannot be used together: {e}"),
        })?;
    Ok(Arc::new(config))
}

/// What feeding ciphertext to a [`TlsLayer`] ended with.
#[derive(Debug, PartialEq, Eq)]
pub enum TlsInput {
    /// Everything was taken; the connection stays open.
    Open,
    /// The peer sent `close_notify`: it will send nothing more.
    PeerClosed,
}

/// One connection's TLS state on the I/O thread.
pub struct TlsLayer {
    /// rustls's state machine for this connection.
    conn: ServerConnection,
    /// The handshake was seen complete (logged once).
    established: bool,
}

impl TlsLayer {
    /// A server-side TLS connection waiting for the client's hello, its send buffers
    /// capped at [`TLS_SEND_BUFFER_BYTES`].
    ///
    /// # Errors
    /// rustls's error creating the connection (in practice none with a valid config).
    pub fn new(config: &Arc<rustls::ServerConfig>) -> Result<TlsLayer, rustls::Error> {
        let mut conn = ServerConnection::new(Arc::clone(config))?;
        conn.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES));
        Ok(TlsLayer {
            conn,
            established: false,
        })
    }

    /// Whether the handshake is still under way.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Feeds `cipher` (bytes read from the socket) to rustls and hands every plaintext
    /// byte it yields to `on_plain`, in chunks of at most `plain.len()` bytes (`plain` is
    /// scratch space). rustls takes ciphertext a few KiB at a time and its plaintext is
    /// drained after each step, so its receive buffer never fills.
    ///
    /// # Errors
    /// The TLS failure (a bad handshake, a record that does not decrypt, an alert from
    /// the peer) as `io::ErrorKind::InvalidData` wrapping the [`rustls::Error`]; the alert
    /// rustls queued for the peer can still be written with [`TlsLayer::write_records`].
    pub fn absorb(
        &mut self,
        mut cipher: &[u8],
        plain: &mut [u8],
        mut on_plain: impl FnMut(&[u8]),
    ) -> io::Result<TlsInput> {
        while !cipher.is_empty() {
            if self.conn.read_tls(&mut cipher)? == 0 {
                // close_notify already received: rustls reads nothing more.
                return Ok(TlsInput::PeerClosed);
            }
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            loop {
                match self.conn.reader().read(plain) {
                    Ok(0) => return Ok(TlsInput::PeerClosed),
                    Ok(n) => on_plain(&plain[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(TlsInput::Open)
    }

    /// A one-line description of the session once the handshake is complete (logged once:
    /// protocol version, cipher suite, whether a client certificate was verified), else
    /// `None`.
    pub fn established(&mut self) -> Option<String> {
        if self.established || self.conn.is_handshaking() {
            return None;
        }
        self.established = true;
        Some(format!(
            "{:?}, {:?}, {}",
            self.conn.protocol_version(),
            self.conn.negotiated_cipher_suite().map(|s| s.suite()),
            if self.conn.peer_certificates().is_some() {
                "client certificate verified"
            } else {
                "no client certificate"
            }
        ))
    }

    /// Encrypts as much of `data` as the TLS send buffer takes (before the handshake ends
    /// it is kept as plaintext, within the same bound); returns the bytes taken, 0 when the
    /// buffer is full.
    ///
    /// # Errors
    /// The connection's earlier TLS failure.
    pub fn write_plain(&mut self, data: &[u8]) -> io::Result<usize> {
        self.conn.writer().write(data)
    }

    /// Whether records wait to be written to the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Writes waiting records to `socket` until none is left (`Ok(true)`) or the socket
    /// would block (`Ok(false)`).
    ///
    /// # Errors
    /// The socket's write error; `WriteZero` when it accepts no bytes.
    pub fn write_records(&mut self, socket: &mut impl Write) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(socket) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "socket accepted no bytes",
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Queues a `close_notify` alert (written by the next [`TlsLayer::write_records`]):
    /// the server will send nothing more (RFC 8446 §6.1).
    pub fn send_close_notify(&mut self) {
        self.conn.send_close_notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_addresses_match_their_constants() {
        let t = TlsConfig::new("c", "k");
        assert_eq!(
            t.listen.map(|a| a.to_string()).as_deref(),
            Some(TLS_LISTEN_DEFAULT)
        );
        assert_eq!(
            t.amqp_listen.map(|a| a.to_string()).as_deref(),
            Some(AMQP_TLS_LISTEN_DEFAULT)
        );
    }

    #[test]
    fn mismatched_key_names_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_file = dir.path().join("server.pem");
        let key_file = dir.path().join("other-key.pem");
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, other.serialize_pem()).unwrap();
        let err =
            server_config(&TlsConfig::new(&cert_file, &key_file)).expect_err("mismatch refused");
        let text = err.to_string();
        assert!(
            text.contains("server.pem") && text.contains("other-key.pem"),
            "{text}"
        );
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        server_config(&TlsConfig::new(&cert_file, &key_file)).unwrap();
    }
}
