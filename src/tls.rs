//! What the server's and the client's TLS share: reading PEM files (certificate chains,
//! private keys, CA bundles) with errors that name the file, and the crypto provider.
//!
//! TLS is rustls with the *ring* provider, TLS 1.2 and 1.3 (rustls's safe defaults). The
//! server side is `server::tls` (driven by the mio loop), the client side `client::tls`
//! (blocking). Deployment: `docs/security.md §4`.

use crate::limits::TLS_PEM_FILE_BYTES_MAX;
use rustls::crypto::CryptoProvider;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A TLS file that cannot be used, or a TLS setting rustls refuses; every variant names
/// the file it is about.
#[derive(Debug)]
pub enum TlsFileError {
    /// The file cannot be opened or read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is larger than [`TLS_PEM_FILE_BYTES_MAX`].
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not PEM, or holds no item of the kind asked for.
    Pem {
        /// The file.
        path: PathBuf,
        /// What was expected and what went wrong.
        detail: String,
    },
    /// rustls refused the contents: a CA that does not parse, a key that does not match
    /// its certificate, an unsupported key type.
    Rejected {
        /// The file (or files, `cert and key`) the contents came from.
        path: PathBuf,
        /// rustls's reason.
        detail: String,
    },
}

impl fmt::Display for TlsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFileError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            TlsFileError::TooLarge { path } => write!(
                f,
                "{} is larger than {TLS_PEM_FILE_BYTES_MAX} bytes: not a PEM certificate or key file",
                path.display()
            ),
            TlsFileError::Pem { path, detail } | TlsFileError::Rejected { path, detail } => {
                write!(f, "{}: {detail}", path.display())
            }
        }
    }
}

impl std::error::Error for TlsFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsFileError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The crypto provider every TLS configuration of RelayMQ is built with: rustls's *ring*
/// provider (chosen explicitly, so no process-wide default is needed or assumed).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a whole file of at most [`TLS_PEM_FILE_BYTES_MAX`] bytes.
fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsFileError> {
    let read_err = |source| TlsFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(TLS_PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > TLS_PEM_FILE_BYTES_MAX {
        return Err(TlsFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Reads every `CERTIFICATE` of a PEM file, in file order (a server's or client's chain:
/// its own certificate first, then intermediates).
///
/// # Errors
/// [`TlsFileError::Read`]/[`TlsFileError::TooLarge`] for the file,
/// [`TlsFileError::Pem`] when it is not PEM or holds no certificate.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let bytes = read_bounded(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsFileError::Pem {
            path: path.to_path_buf(),
            detail: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsFileError::Pem {
            path: path.to_path_buf(),
            detail: "no CERTIFICATE block found (expected '-----BEGIN CERTIFICATE-----')".into(),
        });
    }
    Ok(certs)
}

/// Reads the first private key of a PEM file (`PRIVATE KEY` as PKCS#8, `RSA PRIVATE KEY`
/// or `EC PRIVATE KEY`).
///
/// # Errors
/// [`TlsFileError::Read`]/[`TlsFileError::TooLarge`] for the file,
/// [`TlsFileError::Pem`] when it is not PEM or holds no private key.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    let bytes = read_bounded(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsFileError::Pem {
        path: path.to_path_buf(),
        detail: match e {
            rustls_pki_types::pem::Error::NoItemsFound => {
                "no private key found (expected '-----BEGIN PRIVATE KEY-----', \
                 'BEGIN RSA PRIVATE KEY' or 'BEGIN EC PRIVATE KEY')"
                    .into()
            }
            e => format!("not a PEM private key file: {e}"),
        },
    })
}

/// Reads a CA bundle (one or more `CERTIFICATE`s) into a trust store.
///
/// # Errors
/// As [`load_certs`], and [`TlsFileError::Rejected`] when a certificate does not parse as
/// a trust anchor.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsFileError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsFileError::Rejected {
            path: path.to_path_buf(),
            detail: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// Whether an I/O error carries a TLS failure (rustls reports its errors as
/// `io::ErrorKind::InvalidData` wrapping a [`rustls::Error`]), and which.
pub fn tls_failure(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn reads_generated_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = write(dir.path(), "cert.pem", cert.pem().as_bytes());
        let key_path = write(dir.path(), "key.pem", key.serialize_pem().as_bytes());
        assert_eq!(load_certs(&cert_path).unwrap().len(), 1);
        load_key(&key_path).unwrap();
        assert_eq!(load_roots(&cert_path).unwrap().len(), 1);
    }

    #[test]
    fn every_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let garbage = write(dir.path(), "garbage.pem", b"hello, not a certificate\n");
        let key = rcgen::KeyPair::generate().unwrap();
        let key_only = write(dir.path(), "key-only.pem", key.serialize_pem().as_bytes());
        let huge = write(
            dir.path(),
            "huge.pem",
            &vec![b'a'; TLS_PEM_FILE_BYTES_MAX as usize + 1],
        );
        let cases = [
            (load_certs(&missing).unwrap_err(), "missing.pem"),
            (load_certs(&garbage).unwrap_err(), "garbage.pem"),
            (load_certs(&key_only).unwrap_err(), "key-only.pem"),
            (load_key(&garbage).unwrap_err(), "garbage.pem"),
            (load_roots(&huge).unwrap_err(), "huge.pem"),
        ];
        for (err, file) in cases {
            let text = err.to_string();
            assert!(text.contains(file), "{text}");
        }
        let text = load_certs(&key_only).unwrap_err().to_string();
        assert!(text.contains("no CERTIFICATE"), "{text}");
        let text = load_key(&garbage).unwrap_err().to_string();
        assert!(text.contains("no private key"), "{text}");
    }
}
