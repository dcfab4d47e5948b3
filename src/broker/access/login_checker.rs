//! The thread that checks passwords: argon2 costs tens of milliseconds, so a login that
//! needs it is handed here instead of running on a worker. Workers stay free for the
//! connections already open however many logins arrive, and the connection being opened
//! hears the answer through its mailbox (docs/security.md §3.4).
//!
//! The queue is bounded ([`LOGIN_CHECKS_QUEUED_MAX`]): when it is full a login is refused
//! at once (403, "the server is busy checking other logins"), so a flood of logins from
//! many addresses costs one core at most and never an unbounded queue.

use crate::broker::Broker;
use crate::error::BrokerError;
use crossbeam_channel::{Sender, TrySendError};
use std::io;
use std::net::SocketAddr;
use std::sync::Weak;

/// Logins waiting for a password check at most; more are refused at once.
pub const LOGIN_CHECKS_QUEUED_MAX: usize = 64;

/// Called with the outcome of a login check (on the checker thread).
pub type LoginDone = Box<dyn FnOnce(Result<(), BrokerError>) + Send>;

/// A login to check.
pub struct LoginJob {
    /// User name.
    pub user: String,
    /// Password as given.
    pub password: String,
    /// Client address.
    pub peer: SocketAddr,
    /// Receives the outcome.
    pub done: LoginDone,
}

/// The handle of the checker thread; dropping it (with the broker) ends the thread.
pub struct LoginChecker {
    tx: Sender<LoginJob>,
}

impl LoginChecker {
    /// Starts the `relaymq-auth` thread checking logins against `broker`.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(broker: Weak<Broker>) -> io::Result<LoginChecker> {
        let (tx, rx) = crossbeam_channel::bounded::<LoginJob>(LOGIN_CHECKS_QUEUED_MAX);
        std::thread::Builder::new()
            .name("relaymq-auth".into())
            .spawn(move || {
                for job in rx {
                    let result = match broker.upgrade() {
                        Some(b) => b.login(&job.user, &job.password, &job.peer),
                        None => return,
                    };
                    (job.done)(result);
                }
            })?;
        Ok(LoginChecker { tx })
    }

    /// Queues `job`; when the queue is full (or the thread is gone) the login is refused
    /// at once through `job.done`.
    pub fn submit(&self, job: LoginJob) {
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                log::warn!(
                    "login of user '{}' from {} refused: {LOGIN_CHECKS_QUEUED_MAX} logins are \
                     already waiting for a password check",
                    job.user.escape_debug(),
                    job.peer
                );
                (job.done)(Err(BrokerError::access_refused(
                    "login refused: the server is busy checking other logins; retry later",
                )));
            }
        }
    }
}
