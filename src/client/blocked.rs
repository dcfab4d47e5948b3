//! [`BlockedStatus`]: whether the server blocks a connection's publishes because a
//! resource alarm is set (RabbitMQ's `connection.blocked` / `connection.unblocked`,
//! native methods 0x0006 / 0x0007; docs/security.md §6).
//!
//! While blocked, the server does not read the connection: a publish (or any request)
//! written meanwhile waits in the socket buffers, and a write blocks once they are full.
//! Nothing is lost: it is processed when the alarm clears.

use super::shared::{lock, Shared};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A handle on a connection's blocked state; cheap to clone, usable from any thread
/// (e.g. to print a note while another thread publishes).
#[derive(Clone)]
pub struct BlockedStatus {
    shared: Arc<Shared>,
}

impl BlockedStatus {
    pub(crate) fn new(shared: Arc<Shared>) -> BlockedStatus {
        BlockedStatus { shared }
    }

    /// The server's reason (`low on memory`, `low on disk`, `low on memory and disk`)
    /// while it blocks the connection's publishes, else `None`.
    pub fn reason(&self) -> Option<String> {
        lock(&self.shared.state).blocked.clone()
    }

    /// Whether the server blocks the connection's publishes.
    pub fn is_blocked(&self) -> bool {
        lock(&self.shared.state).blocked.is_some()
    }

    /// Waits until the blocked state differs from `seen` (a reason, or `None` for not
    /// blocked) or the connection closes, at most `timeout`; returns the state then.
    pub fn wait_change(&self, seen: Option<&str>, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.shared.state);
        loop {
            let now = Instant::now();
            if st.blocked.as_deref() != seen || st.closed.is_some() || now >= deadline {
                return st.blocked.clone();
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Waits until the server unblocks the connection (or it closes), at most `timeout`;
    /// returns whether it is unblocked.
    pub fn wait_unblocked(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(reason) = self.reason() else {
                return true;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.wait_change(Some(&reason), left).is_none() {
                return true;
            }
        }
    }
}

impl std::fmt::Debug for BlockedStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedStatus")
            .field("reason", &self.reason())
            .finish()
    }
}
