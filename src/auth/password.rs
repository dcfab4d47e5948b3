//! Password hashes as stored in `meta.db`: each with the name of its algorithm, so hashes
//! imported from RabbitMQ keep working and are replaced by ours at the next login.
//!
//! Our own algorithm is argon2id (RFC 9106) with the `argon2` crate's defaults (19 MiB,
//! two passes, one lane: OWASP's recommended minimum), stored as a PHC string. RabbitMQ's
//! `rabbit_password_hashing_sha256` (its default) and `rabbit_password_hashing_sha512` are
//! `base64(salt ++ H(salt ++ password))` with a 4-byte salt (RabbitMQ docs, "Credentials
//! and Passwords", "Computing a Password Hash").

use crate::auth::argon;
use crate::error::{BrokerError, ReplyCode};
use base64::Engine;
use sha2::{Digest, Sha256, Sha512};

/// Algorithm name of our own hashes (argon2id in a PHC string).
pub const ARGON2ID: &str = "argon2id";

/// RabbitMQ's default algorithm name: salted SHA-256.
pub const RABBIT_SHA256: &str = "rabbit_password_hashing_sha256";

/// RabbitMQ's salted SHA-512 algorithm name.
pub const RABBIT_SHA512: &str = "rabbit_password_hashing_sha512";

/// Bytes of salt in front of a RabbitMQ hash.
const RABBIT_SALT_BYTES: usize = 4;

/// Longest password accepted, in bytes: longer ones would only cost hashing time.
pub const PASSWORD_BYTES_MAX: usize = 1024;

/// A stored credential: the algorithm's name and the hash text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHash {
    /// [`ARGON2ID`], [`RABBIT_SHA256`] or [`RABBIT_SHA512`].
    pub algorithm: String,
    /// A PHC string for argon2id; base64 of salt and digest for RabbitMQ's.
    pub hash: String,
}

impl StoredHash {
    /// Hashes `password` with argon2id and a fresh random salt (tens of ms of CPU).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED for an empty password or one longer than
    /// [`PASSWORD_BYTES_MAX`]; 541 INTERNAL_ERROR when hashing fails (no randomness).
    pub fn new(password: &str) -> Result<StoredHash, BrokerError> {
        if password.is_empty() {
            return Err(BrokerError::precondition(
                "password must not be empty (RabbitMQ refuses blank passwords too)",
            ));
        }
        if password.len() > PASSWORD_BYTES_MAX {
            return Err(BrokerError::precondition(format!(
                "password is longer than {PASSWORD_BYTES_MAX} bytes"
            )));
        }
        let phc = argon::hash(password).map_err(|e| {
            BrokerError::new(ReplyCode::InternalError, format!("hashing failed: {e}"))
        })?;
        Ok(StoredHash {
            algorithm: ARGON2ID.to_string(),
            hash: phc,
        })
    }

    /// A hash imported as it is (from RabbitMQ's definitions or `user add --password-hash`),
    /// checked for shape. An empty hash is a user without a password, as RabbitMQ exports
    /// one after `rabbitmqctl clear_password` (`"password_hash": ""`): no password logs it
    /// in, which suits users who authenticate otherwise (x509, LDAP in RabbitMQ).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED for an unknown algorithm or a hash that is not of its shape.
    pub fn import(algorithm: &str, hash: &str) -> Result<StoredHash, BrokerError> {
        let known = [ARGON2ID, RABBIT_SHA256, RABBIT_SHA512].contains(&algorithm);
        if hash.is_empty() && known {
            return Ok(StoredHash {
                algorithm: algorithm.to_string(),
                hash: String::new(),
            });
        }
        let ok = match algorithm {
            ARGON2ID => {
                if let Err(e) = argon::check(hash) {
                    return Err(BrokerError::precondition(format!(
                        "argon2id hash refused: {e}"
                    )));
                }
                true
            }
            RABBIT_SHA256 => rabbit_parts(hash).is_some_and(|(_, d)| d.len() == 32),
            RABBIT_SHA512 => rabbit_parts(hash).is_some_and(|(_, d)| d.len() == 64),
            other => {
                return Err(BrokerError::precondition(format!(
                    "unknown hashing algorithm '{other}' (supported: {ARGON2ID}, \
                     {RABBIT_SHA256}, {RABBIT_SHA512})"
                )))
            }
        };
        if !ok {
            return Err(BrokerError::precondition(format!(
                "password hash is not a valid {algorithm} hash"
            )));
        }
        Ok(StoredHash {
            algorithm: algorithm.to_string(),
            hash: hash.to_string(),
        })
    }

    /// Whether `password` matches. Unknown algorithms, malformed hashes, a user without a
    /// password (empty hash) and empty passwords never match (RabbitMQ's internal backend
    /// refuses blank passwords).
    pub fn verify(&self, password: &str) -> bool {
        if self.hash.is_empty() || password.is_empty() || password.len() > PASSWORD_BYTES_MAX {
            return false;
        }
        match self.algorithm.as_str() {
            ARGON2ID => argon::verify(&self.hash, password),
            RABBIT_SHA256 => rabbit_verify::<Sha256>(&self.hash, password),
            RABBIT_SHA512 => rabbit_verify::<Sha512>(&self.hash, password),
            _ => false,
        }
    }

    /// Whether the hash is not ours and should be replaced at the next successful login.
    pub fn needs_rehash(&self) -> bool {
        self.algorithm != ARGON2ID
    }
}

/// Salt and digest of a RabbitMQ hash.
fn rabbit_parts(hash: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(hash.trim())
        .ok()?;
    if bytes.len() <= RABBIT_SALT_BYTES {
        return None;
    }
    let (salt, digest) = bytes.split_at(RABBIT_SALT_BYTES);
    Some((salt.to_vec(), digest.to_vec()))
}

fn rabbit_verify<D: Digest>(hash: &str, password: &str) -> bool {
    let Some((salt, digest)) = rabbit_parts(hash) else {
        return false;
    };
    let mut h = D::new();
    h.update(&salt);
    h.update(password.as_bytes());
    let computed = h.finalize();
    // Constant time: every byte is compared whatever the first difference.
    computed.len() == digest.len()
        && computed
            .iter()
            .zip(&digest)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A RabbitMQ-style hash of `password` with `salt` (tests and fixtures: what
/// `rabbitmqctl hash_password` prints for that salt).
pub fn rabbit_sha256(salt: [u8; RABBIT_SALT_BYTES], password: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(password.as_bytes());
    let mut bytes = salt.to_vec();
    bytes.extend_from_slice(&h.finalize());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argon2_hashes_verify_only_their_password_and_differ_by_salt() {
        let a = StoredHash::new("s3cret").unwrap();
        let b = StoredHash::new("s3cret").unwrap();
        assert_eq!(a.algorithm, ARGON2ID);
        assert!(a.hash.starts_with("$argon2id$"));
        assert_ne!(a.hash, b.hash);
        assert!(a.verify("s3cret"));
        assert!(!a.verify("s3cret "));
        assert!(!a.verify(""));
        assert!(!a.needs_rehash());
    }

    #[test]
    fn rabbitmq_sha256_hashes_made_here_verify() {
        // The construction of `rabbitmqctl hash_password`: salt 908D C60A, SHA-256.
        let hash = rabbit_sha256([0x90, 0x8d, 0xc6, 0x0a], "test12");
        let stored = StoredHash::import(RABBIT_SHA256, &hash).unwrap();
        assert!(stored.verify("test12"));
        assert!(!stored.verify("test13"));
        assert!(stored.needs_rehash());
    }

    #[test]
    fn hashes_exported_by_rabbitmq_3_10_verify() {
        // From `rabbitmqctl export_definitions` of RabbitMQ 3.10.8 (Debian), users made
        // with `rabbitmqctl add_user`: guest/guest and alice/"wonder land".
        let guest = StoredHash::import(
            RABBIT_SHA256,
            "U0OMnttIqolnWAiafgLpzWy/x1eO1VgNt39jp11lHoSLexQN",
        )
        .unwrap();
        assert!(guest.verify("guest"));
        assert!(!guest.verify("Guest"));
        let alice = StoredHash::import(
            RABBIT_SHA256,
            "6/mfWmzU7Bg9WuHv8HUkBzR6Fi0z5sNDXx3lakyjNkl6nVSt",
        )
        .unwrap();
        assert!(alice.verify("wonder land"));
        assert!(!alice.verify("wonderland"));
    }

    #[test]
    fn sha512_hashes_verify() {
        let mut h = Sha512::new();
        h.update([1, 2, 3, 4]);
        h.update(b"pw");
        let mut bytes = vec![1, 2, 3, 4];
        bytes.extend_from_slice(&h.finalize());
        let hash = base64::engine::general_purpose::STANDARD.encode(bytes);
        let stored = StoredHash::import(RABBIT_SHA512, &hash).unwrap();
        assert!(stored.verify("pw"));
        assert!(!stored.verify("pX"));
    }

    #[test]
    fn malformed_imports_are_refused_with_the_reason() {
        let e = StoredHash::import("rabbit_password_hashing_md5", "x").unwrap_err();
        assert!(e.text.contains("unknown hashing algorithm"), "{}", e.text);
        let e = StoredHash::import(RABBIT_SHA256, "not base64!").unwrap_err();
        assert!(e.text.contains("not a valid"), "{}", e.text);
        let short = base64::engine::general_purpose::STANDARD.encode([1u8; 20]);
        assert!(StoredHash::import(RABBIT_SHA256, &short).is_err());
        assert!(StoredHash::import(ARGON2ID, "$argon2id$nonsense").is_err());
        let e = StoredHash::import(
            ARGON2ID,
            "$argon2id$v=19$m=19456,t=100000,p=1$c29tZXNhbHQ$cmFuZG9taGFzaGJ5dGVz",
        )
        .unwrap_err();
        assert!(e.text.contains("above the accepted"), "{}", e.text);
    }

    #[test]
    fn an_empty_hash_is_a_user_without_a_password() {
        for algorithm in [RABBIT_SHA256, RABBIT_SHA512, ARGON2ID] {
            let stored = StoredHash::import(algorithm, "").unwrap();
            assert_eq!(stored.hash, "");
            assert!(!stored.verify("anything"));
            assert!(!stored.verify(""));
        }
        assert!(StoredHash::import("rabbit_password_hashing_md5", "").is_err());
    }

    #[test]
    fn empty_passwords_are_refused_and_never_match() {
        assert!(StoredHash::new("").is_err());
        let stored = StoredHash::import(RABBIT_SHA256, &rabbit_sha256([1, 2, 3, 4], "")).unwrap();
        assert!(!stored.verify(""));
    }

    #[test]
    fn overlong_passwords_are_refused_not_hashed() {
        let long = "x".repeat(PASSWORD_BYTES_MAX + 1);
        assert!(StoredHash::new(&long).is_err());
        let stored = StoredHash::import(RABBIT_SHA256, &rabbit_sha256([0; 4], &long)).unwrap();
        assert!(!stored.verify(&long));
    }
}
