//! The worker pool: a fixed number of threads taking scheduled connections from a bounded
//! crossbeam channel and executing their events in arrival order.

use crate::limits::{MAILBOX_BYTES_MAX, WORKER_SLICE_REQUESTS};
use crate::server::conn::Conn;
use crate::server::event::Event;
use crate::server::notifier::Notifier;
use crossbeam_channel::Receiver;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Starts `n` workers reading `queue`; they stop when every sender is dropped.
pub fn start(
    n: usize,
    queue: Receiver<Arc<Conn>>,
    notifier: Arc<Notifier>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    (0..n.max(1))
        .map(|i| {
            let queue = queue.clone();
            let notifier = Arc::clone(&notifier);
            std::thread::Builder::new()
                .name(format!("relaymq-worker-{i}"))
                .spawn(move || run(queue, notifier))
        })
        .collect()
}

fn run(queue: Receiver<Arc<Conn>>, notifier: Arc<Notifier>) {
    let mut batch = Vec::with_capacity(WORKER_SLICE_REQUESTS);
    while let Ok(conn) = queue.recv() {
        serve(&conn, &notifier, &mut batch);
    }
}

/// Runs one slice of a connection's events; reschedules it when more remain, so one busy
/// connection cannot starve the others.
fn serve(conn: &Arc<Conn>, notifier: &Notifier, batch: &mut Vec<Event>) {
    loop {
        conn.take_events(WORKER_SLICE_REQUESTS, batch);
        {
            let mut handler = conn.handler.lock().unwrap_or_else(|e| e.into_inner());
            // A bug must cost one connection, not a worker thread: catch the panic, close
            // that connection with 541 and keep serving the others.
            let ran = panic::catch_unwind(AssertUnwindSafe(|| {
                for event in batch.drain(..) {
                    handler.handle(event);
                }
            }));
            if ran.is_err() {
                batch.clear();
                log::error!(
                    "connection {}: internal error while handling a request; closing it",
                    conn.id
                );
                let closed = panic::catch_unwind(AssertUnwindSafe(|| handler.abort()));
                if closed.is_err() {
                    log::error!(
                        "connection {}: cleanup after an internal error failed too",
                        conn.id
                    );
                    conn.outbound.close_after_flush();
                }
            }
        }
        if conn.read_paused.load(Ordering::Acquire) && conn.mailbox_bytes() < MAILBOX_BYTES_MAX / 2
        {
            conn.read_paused.store(false, Ordering::Release);
            notifier.mark(conn.id);
        }
        if conn.mailbox_is_empty() {
            if conn.unschedule() {
                continue;
            }
            return;
        }
        // More is waiting: go to the back of the queue (the flag stays set).
        conn.requeue_scheduled();
        return;
    }
}
