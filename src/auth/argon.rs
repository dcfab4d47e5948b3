//! argon2id over one preallocated memory area, shared by every hash and check.
//!
//! An argon2id check with the default parameters needs 19 MiB of working memory. Allocating
//! it per check left the allocator holding hundreds of MiB after a few dozen logins
//! (freed blocks are kept per thread), enough to trip the memory alarm. Here the area is
//! allocated once, the first time it is needed, and reused under a lock: at most one
//! argon2 computation runs at a time, in bounded memory. Stored hashes with parameters
//! above our own are refused at import and never computed, so an imported hash cannot
//! make one check take seconds or gigabytes.

use argon2::{Algorithm, Argon2, Block, Params, Version};
use base64::Engine;
use password_hash::{PasswordHash, SaltString};
use std::sync::{Mutex, OnceLock};

/// Memory cost of our hashes and the largest accepted in a stored hash, in KiB (the
/// `argon2` crate's default, OWASP's minimum: 19 MiB).
pub const ARGON2_M_COST_KIB_MAX: u32 = Params::DEFAULT_M_COST;

/// Largest number of passes accepted in a stored hash (ours use 2).
pub const ARGON2_T_COST_MAX: u32 = 10;

/// Largest parallelism accepted in a stored hash (ours use 1; lanes run one after another
/// here).
pub const ARGON2_P_COST_MAX: u32 = 4;

/// Bytes of hash output in our hashes.
const HASH_BYTES: usize = 32;

/// Longest hash output accepted in a stored hash, in bytes.
const HASH_BYTES_MAX: usize = 64;

/// The working memory, allocated on first use.
fn memory() -> &'static Mutex<Vec<Block>> {
    static MEMORY: OnceLock<Mutex<Vec<Block>>> = OnceLock::new();
    MEMORY.get_or_init(|| Mutex::new(vec![Block::new(); ARGON2_M_COST_KIB_MAX as usize]))
}

fn compute(params: Params, password: &[u8], salt: &[u8], out: &mut [u8]) -> Result<(), String> {
    let blocks = params.block_count();
    let ctx = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
    let mut memory = memory().lock().unwrap_or_else(|e| e.into_inner());
    let area = memory
        .get_mut(..blocks)
        .ok_or_else(|| format!("argon2 needs {blocks} KiB, more than {ARGON2_M_COST_KIB_MAX}"))?;
    ctx.hash_password_into_with_memory(password, salt, out, area)
        .map_err(|e| e.to_string())
}

/// Hashes `password` with a fresh random salt; returns the PHC string
/// (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`).
///
/// # Errors
/// The reason when hashing fails (no randomness).
pub fn hash(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut password_hash::rand_core::OsRng);
    let mut salt_bytes = [0u8; 64];
    let salt_raw = salt
        .decode_b64(&mut salt_bytes)
        .map_err(|e| e.to_string())?;
    let params = Params::default();
    let mut out = [0u8; HASH_BYTES];
    compute(params.clone(), password.as_bytes(), salt_raw, &mut out)?;
    let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(out);
    Ok(format!(
        "$argon2id$v=19$m={},t={},p={}${}${encoded}",
        params.m_cost(),
        params.t_cost(),
        params.p_cost(),
        salt.as_str()
    ))
}

/// The parameters of a stored argon2id PHC string, checked against our bounds.
///
/// # Errors
/// Why the string is refused: not a PHC string, not argon2id version 19, no salt or hash,
/// or a cost above [`ARGON2_M_COST_KIB_MAX`], [`ARGON2_T_COST_MAX`], [`ARGON2_P_COST_MAX`].
pub fn check(phc: &str) -> Result<(), String> {
    parse(phc).map(|_| ())
}

fn parse(phc: &str) -> Result<(PasswordHash<'_>, Params), String> {
    let parsed = PasswordHash::new(phc).map_err(|e| e.to_string())?;
    if parsed.algorithm.as_str() != "argon2id" {
        return Err(format!("algorithm {} is not argon2id", parsed.algorithm));
    }
    if parsed.version.is_some_and(|v| v != 0x13) {
        return Err("only argon2 version 19 is supported".into());
    }
    if parsed.salt.is_none() || parsed.hash.is_none() {
        return Err("no salt or no hash".into());
    }
    let params = Params::try_from(&parsed).map_err(|e| e.to_string())?;
    if params.m_cost() > ARGON2_M_COST_KIB_MAX
        || params.t_cost() > ARGON2_T_COST_MAX
        || params.p_cost() > ARGON2_P_COST_MAX
    {
        return Err(format!(
            "costs m={},t={},p={} are above the accepted m={ARGON2_M_COST_KIB_MAX},\
             t={ARGON2_T_COST_MAX},p={ARGON2_P_COST_MAX}",
            params.m_cost(),
            params.t_cost(),
            params.p_cost()
        ));
    }
    if parsed.hash.is_some_and(|h| h.len() > HASH_BYTES_MAX) {
        return Err(format!("hash longer than {HASH_BYTES_MAX} bytes"));
    }
    Ok((parsed, params))
}

/// Whether `password` matches the stored PHC string (constant-time compare). A string
/// [`check`] refuses never matches and is never computed.
pub fn verify(phc: &str, password: &str) -> bool {
    let Ok((parsed, params)) = parse(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt_raw) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let expected = expected.as_bytes();
    let mut out = vec![0u8; expected.len()];
    if compute(params, password.as_bytes(), salt_raw, &mut out).is_err() {
        return false;
    }
    out.iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use password_hash::PasswordVerifier;

    #[test]
    fn our_hashes_are_standard_phc_strings_the_argon2_crate_verifies() {
        let phc = hash("pässword").unwrap();
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        let parsed = PasswordHash::new(&phc).unwrap();
        assert!(Argon2::default()
            .verify_password("pässword".as_bytes(), &parsed)
            .is_ok());
        assert!(verify(&phc, "pässword"));
        assert!(!verify(&phc, "password"));
    }

    #[test]
    fn hashes_made_by_the_argon2_crate_verify_here() {
        use password_hash::PasswordHasher;
        let salt = SaltString::generate(&mut password_hash::rand_core::OsRng);
        let phc = Argon2::default()
            .hash_password(b"x", &salt)
            .unwrap()
            .to_string();
        assert!(verify(&phc, "x"));
        // Other accepted parameters (fewer KiB, more passes).
        let params = Params::new(8192, 3, 1, None).unwrap();
        let phc = Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password(b"y", &salt)
            .unwrap()
            .to_string();
        assert!(check(&phc).is_ok());
        assert!(verify(&phc, "y"));
    }

    #[test]
    fn costly_or_foreign_hashes_are_refused_and_never_computed() {
        let slow = "$argon2id$v=19$m=19456,t=100000,p=1$c29tZXNhbHQ$cmFuZG9taGFzaGJ5dGVz";
        assert!(check(slow).unwrap_err().contains("above the accepted"));
        let started = std::time::Instant::now();
        assert!(!verify(slow, "x"));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let big = "$argon2id$v=19$m=4194304,t=1,p=1$c29tZXNhbHQ$cmFuZG9taGFzaGJ5dGVz";
        assert!(check(big).is_err());
        let argon2i = "$argon2i$v=19$m=4096,t=1,p=1$c29tZXNhbHQ$cmFuZG9taGFzaGJ5dGVz";
        assert!(check(argon2i).unwrap_err().contains("not argon2id"));
        assert!(check("$argon2id$nonsense").is_err());
    }
}
