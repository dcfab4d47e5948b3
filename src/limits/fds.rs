//! The process's file descriptors and how they are shared: the open-files limit
//! (`RLIMIT_NOFILE`, raised at start from its soft to its hard value), a reserve for the
//! process itself, the HTTP listeners' connections (the metrics endpoint), the message
//! store's files and the client connections' sockets. Each part is enforced where it is
//! used: the store by its [`crate::storage::FileBudget`], sockets at accept and by
//! `--max-connections` (clamped to fit), HTTP connections by the metrics listener's slot
//! table. docs/operations.md, "Open files", explains the split.

use std::fmt;

/// Smallest store budget, in files: a segment and an ack log for each of a few stores in
/// flight at once, plus the transient opens of a declare (directory, two files,
/// `queue_stat.tmp`).
pub const STORE_FILES_MIN: usize = 16;

/// Highest open-files limit RelayMQ raises itself to, and the most it splits, in file
/// descriptors (1,048,576; the kernel's default `fs.nr_open`). A soft limit of
/// "unlimited" counts as this.
pub const FD_LIMIT_MAX: u64 = 1 << 20;

/// Lowest open-files limit RelayMQ starts with, in file descriptors: below it the split
/// leaves too few sockets and store files to be useful, and the start fails naming it.
pub const FD_LIMIT_MIN: u64 = 128;

/// Descriptors kept for the process itself, in file descriptors: standard streams,
/// `meta.db` with its `-wal` and `-shm`, `LOCK`, the listeners, the `epoll` and wake-up
/// descriptors of the I/O and metrics threads, signal handling, and short-lived files
/// (`/proc` readings, the ready file, a configuration reload). About 25 are used.
pub const FD_RESERVED_PROCESS: usize = 48;

/// Part of what is left after the reserve that the HTTP listeners' connections get, as
/// a divisor (1/8), between [`FD_HTTP_MIN`] and [`FD_HTTP_MAX`].
pub const FD_HTTP_DIVISOR: usize = 8;

/// Fewest HTTP connections served at once, in connections.
pub const FD_HTTP_MIN: usize = 4;

/// Most HTTP connections served at once, in connections (the metrics listener's slot
/// table, `server::http::listener::METRICS_CONNECTIONS_MAX`).
pub const FD_HTTP_MAX: usize = 64;

/// The client-socket part is divided by this for outbound connections (shovels): they
/// may hold at most a quarter of it, counted with the inbound sockets in `sockets_used`.
pub const FD_OUTBOUND_DIVISOR: usize = 4;

/// Part of what is left after the reserve and HTTP that the message store's files get,
/// in percent; client sockets get the rest. The store multiplexes any number of queues
/// over its part, while each connection holds its socket for its whole life.
pub const FD_STORE_PERCENT: usize = 25;

/// How the process's file descriptors are shared, in file descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    /// The open-files limit in force (the soft `RLIMIT_NOFILE`, after raising).
    pub limit: u64,
    /// The soft limit before RelayMQ raised it.
    pub limit_at_start: u64,
    /// The hard limit (the most the soft one can be raised to without privileges).
    pub hard_limit: u64,
    /// Kept for the process itself ([`FD_RESERVED_PROCESS`]).
    pub reserved: usize,
    /// Connections the HTTP listeners serve at once.
    pub http: usize,
    /// Files the message store holds open at once.
    pub store: usize,
    /// Client sockets (native and AMQP, plain and TLS, in their handshake or open).
    pub sockets: usize,
}

/// The open-files limit is below [`FD_LIMIT_MIN`] even after raising it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdLimitError {
    /// The limit in force.
    pub limit: u64,
    /// The hard limit.
    pub hard_limit: u64,
}

impl fmt::Display for FdLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the open-files limit is {} (hard limit {}); RelayMQ needs at least {FD_LIMIT_MIN} \
             file descriptors: raise it (ulimit -n, or LimitNOFILE= in the systemd unit)",
            self.limit, self.hard_limit
        )
    }
}

impl std::error::Error for FdLimitError {}

/// Turns a limit that may be "unlimited" (`None`) into a number, capped at
/// [`FD_LIMIT_MAX`].
fn finite(limit: Option<u64>) -> u64 {
    limit.unwrap_or(FD_LIMIT_MAX).min(FD_LIMIT_MAX)
}

impl FdBudget {
    /// Splits an open-files limit of `limit` descriptors (at most [`FD_LIMIT_MAX`] are
    /// used): [`FD_RESERVED_PROCESS`] for the process, then 1/[`FD_HTTP_DIVISOR`] of the
    /// rest for HTTP connections (between [`FD_HTTP_MIN`] and [`FD_HTTP_MAX`]), then
    /// [`FD_STORE_PERCENT`]% of what remains for the store (at least
    /// [`STORE_FILES_MIN`]) and the rest for client sockets.
    ///
    /// # Errors
    /// [`FdLimitError`] when `limit` is below [`FD_LIMIT_MIN`].
    pub fn split(
        limit: u64,
        limit_at_start: u64,
        hard_limit: u64,
    ) -> Result<FdBudget, FdLimitError> {
        if limit < FD_LIMIT_MIN {
            return Err(FdLimitError { limit, hard_limit });
        }
        let total = usize::try_from(limit.min(FD_LIMIT_MAX)).unwrap_or(usize::MAX);
        let rest = total.saturating_sub(FD_RESERVED_PROCESS);
        let http = (rest / FD_HTTP_DIVISOR).clamp(FD_HTTP_MIN, FD_HTTP_MAX);
        let shared = rest.saturating_sub(http);
        let store = (shared * FD_STORE_PERCENT / 100)
            .max(STORE_FILES_MIN)
            .min(shared);
        Ok(FdBudget {
            limit,
            limit_at_start,
            hard_limit,
            reserved: FD_RESERVED_PROCESS,
            http,
            store,
            sockets: shared - store,
        })
    }

    /// Raises the process's soft open-files limit to its hard limit (at most
    /// [`FD_LIMIT_MAX`]) and splits the result ([`FdBudget::split`]).
    ///
    /// # Errors
    /// [`FdLimitError`] when the limit is below [`FD_LIMIT_MIN`] even after raising it.
    pub fn raise_and_split() -> Result<FdBudget, FdLimitError> {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let before = getrlimit(Resource::Nofile);
        let at_start = finite(before.current);
        let hard = finite(before.maximum);
        if at_start < hard {
            let wanted = Rlimit {
                current: Some(hard),
                maximum: before.maximum,
            };
            if let Err(e) = setrlimit(Resource::Nofile, wanted) {
                log::warn!("cannot raise the open-files limit from {at_start} to {hard}: {e}");
            }
        }
        let limit = finite(getrlimit(Resource::Nofile).current);
        FdBudget::split(limit, at_start, hard)
    }
}

/// File descriptors the process has open now (entries of `/proc/self/fd`, less the one
/// listing them; RabbitMQ's `fd_used`), or `None` where that cannot be read.
pub fn open_fds() -> Option<usize> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.count().saturating_sub(1))
}

impl fmt::Display for FdBudget {
    /// `limit 1024 (raised from 256, hard limit 1024): 48 for the process, 64 for HTTP,
    /// 228 for queue files, 684 for client connections`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limit {} (", self.limit)?;
        if self.limit != self.limit_at_start {
            write!(f, "raised from {}, ", self.limit_at_start)?;
        }
        write!(
            f,
            "hard limit {}): {} for the process, {} for HTTP connections, {} for queue \
             files, {} for client connections",
            self.hard_limit, self.reserved, self.http, self.store, self.sockets
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_adds_up_and_follows_the_rule() {
        for limit in [FD_LIMIT_MIN, 256, 1024, 4096, 65_536, 262_144, FD_LIMIT_MAX] {
            let b = FdBudget::split(limit, limit, limit).unwrap();
            assert_eq!(
                (b.reserved + b.http + b.store + b.sockets) as u64,
                limit,
                "{b:?}"
            );
            assert!(b.store >= STORE_FILES_MIN, "{b:?}");
            assert!((FD_HTTP_MIN..=FD_HTTP_MAX).contains(&b.http), "{b:?}");
            assert!(b.sockets > 0, "{b:?}");
        }
        let b = FdBudget::split(1024, 1024, 4096).unwrap();
        assert_eq!((b.http, b.store, b.sockets), (64, 228, 684));
        let b = FdBudget::split(256, 256, 256).unwrap();
        assert_eq!((b.http, b.store, b.sockets), (26, 45, 137));
        // Above the cap only the cap is split.
        let b = FdBudget::split(u64::MAX, u64::MAX, u64::MAX).unwrap();
        assert_eq!(
            (b.reserved + b.http + b.store + b.sockets) as u64,
            FD_LIMIT_MAX
        );
    }

    #[test]
    fn a_limit_below_the_minimum_is_an_error_naming_it() {
        let e = FdBudget::split(100, 100, 100).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("is 100") && text.contains("ulimit -n"),
            "{text}"
        );
    }

    #[test]
    fn the_description_names_every_part() {
        let b = FdBudget::split(1024, 256, 4096).unwrap();
        assert_eq!(
            b.to_string(),
            "limit 1024 (raised from 256, hard limit 4096): 48 for the process, 64 for HTTP \
             connections, 228 for queue files, 684 for client connections"
        );
        let b = FdBudget::split(1024, 1024, 1024).unwrap();
        assert!(b.to_string().starts_with("limit 1024 (hard limit 1024): "));
    }

    #[test]
    fn open_fds_are_counted_on_linux() {
        if cfg!(target_os = "linux") {
            // Other tests open and close files meanwhile: only a floor is certain.
            assert!(open_fds().expect("/proc/self/fd") >= 3, "stdio at least");
        }
    }

    #[test]
    fn unlimited_counts_as_the_cap() {
        assert_eq!(finite(None), FD_LIMIT_MAX);
        assert_eq!(finite(Some(10)), 10);
        assert_eq!(finite(Some(u64::MAX)), FD_LIMIT_MAX);
    }
}
