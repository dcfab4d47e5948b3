//! Failed logins, counted per source address and user name: after a few, further attempts
//! as that user from that address are refused without checking the password until a
//! delay that doubles with each failure has passed. Guessing one user's password from one
//! address then takes minutes per handful of guesses, and costs the broker no hashing work
//! while refused. Keying on the user too means a successful login as another user (an
//! account the guesser owns) does not reset the count of the one being guessed.
//!
//! The table is bounded ([`THROTTLE_ADDRESSES_MAX`] entries); when full, the entry that
//! failed longest ago is forgotten. A successful login clears its (address, user) entry.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins from one address allowed before delays start.
pub const FAILED_LOGINS_FREE: u32 = 3;

/// Delay after the first failure beyond [`FAILED_LOGINS_FREE`], in ms; each further
/// failure doubles it.
pub const LOGIN_DELAY_MS_BASE: u64 = 500;

/// Longest delay between attempts from one address, in ms (30 s).
pub const LOGIN_DELAY_MS_MAX: u64 = 30_000;

/// Time after its last failure an address is forgotten, in ms (10 minutes).
pub const FAILED_LOGIN_MEMORY_MS: u64 = 10 * 60 * 1000;

/// (source address, user) pairs remembered at once.
pub const THROTTLE_ADDRESSES_MAX: usize = 65_536;

type Key = (IpAddr, String);

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    /// Refusals logged since the last failure counted (the log says it once).
    refusals_logged: bool,
}

/// What the throttle says about a login attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Check the credentials.
    Check,
    /// Refuse without checking; the address may try again after this long.
    Wait {
        /// Time left, in ms.
        retry_after_ms: u64,
        /// Whether this refusal is the first of its delay (worth a log line).
        first: bool,
    },
}

/// Failed logins per source address.
#[derive(Debug, Default)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<Key, Failures>>,
}

impl LoginThrottle {
    /// Whether an attempt as `user` from `addr` at `now` may be checked.
    pub fn verdict(&self, addr: IpAddr, user: &str, now: Instant) -> Verdict {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let Some(f) = map.get_mut(&(addr, user.to_string())) else {
            return Verdict::Check;
        };
        let delay = delay_after(f.count);
        let since = now.saturating_duration_since(f.last);
        if since >= delay {
            return Verdict::Check;
        }
        let first = !f.refusals_logged;
        f.refusals_logged = true;
        Verdict::Wait {
            retry_after_ms: (delay - since).as_millis() as u64,
            first,
        }
    }

    /// Records a failed login as `user` from `addr`; returns the failures counted so far.
    pub fn failed(&self, addr: IpAddr, user: &str, now: Instant) -> u32 {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let memory = Duration::from_millis(FAILED_LOGIN_MEMORY_MS);
        let key = (addr, user.to_string());
        if map.len() >= THROTTLE_ADDRESSES_MAX && !map.contains_key(&key) {
            map.retain(|_, f| now.saturating_duration_since(f.last) < memory);
            if map.len() >= THROTTLE_ADDRESSES_MAX {
                if let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
        }
        let f = map.entry(key).or_insert(Failures {
            count: 0,
            last: now,
            refusals_logged: false,
        });
        if now.saturating_duration_since(f.last) >= memory {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        f.refusals_logged = false;
        f.count
    }

    /// Forgets the failures as `user` from `addr` (a successful login).
    pub fn succeeded(&self, addr: IpAddr, user: &str) {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&(addr, user.to_string()));
    }

    /// Addresses remembered (for tests and status).
    pub fn tracked(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

/// The wait after `count` failures.
fn delay_after(count: u32) -> Duration {
    if count < FAILED_LOGINS_FREE {
        return Duration::ZERO;
    }
    let doublings = (count - FAILED_LOGINS_FREE).min(16);
    Duration::from_millis((LOGIN_DELAY_MS_BASE << doublings).min(LOGIN_DELAY_MS_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_start_after_the_free_failures_and_double_up_to_the_cap() {
        assert_eq!(delay_after(FAILED_LOGINS_FREE - 1), Duration::ZERO);
        assert_eq!(
            delay_after(FAILED_LOGINS_FREE),
            Duration::from_millis(LOGIN_DELAY_MS_BASE)
        );
        assert_eq!(
            delay_after(FAILED_LOGINS_FREE + 1),
            Duration::from_millis(2 * LOGIN_DELAY_MS_BASE)
        );
        assert_eq!(delay_after(1000), Duration::from_millis(LOGIN_DELAY_MS_MAX));
    }

    #[test]
    fn an_address_is_refused_until_its_delay_passes_and_others_are_not() {
        let t = LoginThrottle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..FAILED_LOGINS_FREE {
            assert_eq!(t.verdict(a, "adm", t0), Verdict::Check);
            t.failed(a, "adm", t0);
        }
        match t.verdict(a, "adm", t0 + Duration::from_millis(100)) {
            Verdict::Wait {
                retry_after_ms,
                first,
            } => {
                assert_eq!(retry_after_ms, LOGIN_DELAY_MS_BASE - 100);
                assert!(first);
            }
            v => panic!("expected a wait, got {v:?}"),
        }
        assert!(matches!(
            t.verdict(a, "adm", t0 + Duration::from_millis(200)),
            Verdict::Wait { first: false, .. }
        ));
        assert_eq!(t.verdict(b, "adm", t0), Verdict::Check);
        // Another user's success from the same address does not clear the count.
        t.succeeded(a, "app");
        assert!(matches!(
            t.verdict(a, "adm", t0 + Duration::from_millis(200)),
            Verdict::Wait { .. }
        ));
        assert_eq!(t.verdict(a, "app", t0), Verdict::Check);
        assert_eq!(
            t.verdict(a, "adm", t0 + Duration::from_millis(LOGIN_DELAY_MS_BASE)),
            Verdict::Check
        );
        t.succeeded(a, "adm");
        assert_eq!(t.verdict(a, "adm", t0), Verdict::Check);
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        for i in 0..(THROTTLE_ADDRESSES_MAX as u32 + 10) {
            t.failed(IpAddr::from(i.to_be_bytes()), "u", now);
        }
        assert_eq!(t.tracked(), THROTTLE_ADDRESSES_MAX);
    }
}
