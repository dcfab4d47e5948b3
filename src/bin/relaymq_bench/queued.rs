//! Publish-only runs (`--consumers 0`): wait until the queues hold everything published
//! before the last RSS sample, so the reported `server_rss_bytes` is the server's memory
//! with the queues full, not a sample taken while it was still taking in the producers'
//! last batches.

use super::args::Options;
use super::run::QUEUE_PREFIX;
use super::session::AdminSession;
use std::time::{Duration, Instant};

/// Time allowed for the server to take in what the producers sent.
pub const QUEUED_TIMEOUT: Duration = Duration::from_secs(60);

/// Pause between two looks at the queues' message counts.
const QUEUED_POLL: Duration = Duration::from_millis(20);

/// Waits until the bench's queues hold `published` messages between them (each queue all
/// of them with a fanout exchange).
///
/// # Errors
/// A client error, or the counts still short after [`QUEUED_TIMEOUT`].
pub fn wait_until_queued(
    admin: &mut dyn AdminSession,
    opts: &Options,
    published: u64,
) -> Result<(), String> {
    let copies = if opts.exchange_type.as_deref() == Some("fanout") {
        opts.queues as u64
    } else {
        1
    };
    let want = published * copies;
    let deadline = Instant::now() + QUEUED_TIMEOUT;
    loop {
        let mut held = 0u64;
        for i in 0..opts.queues {
            held += admin
                .message_count(&format!("{QUEUE_PREFIX}{i}"))
                .map_err(|e| format!("counting the queued messages: {e}"))?;
        }
        if held >= want {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the queues hold {held} of the {want} messages published, {} s after the end \
                 of publishing",
                QUEUED_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(QUEUED_POLL);
    }
}
