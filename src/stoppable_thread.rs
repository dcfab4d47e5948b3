//! A named background thread that runs until stopped: its loop waits on a stop channel
//! (`recv_timeout` between rounds), so a stop ends the wait at once. The housekeeper and
//! the alarm monitor are such threads.

use crossbeam_channel::{Receiver, Sender};
use std::io;
use std::thread::JoinHandle;

/// A running thread; stops when dropped or [`StoppableThread::stop`]ped.
pub struct StoppableThread {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl StoppableThread {
    /// Starts the thread `name` running `body`, which must return once its receiver is
    /// disconnected (a `recv_timeout` that answers anything but `Timeout`).
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn spawn(
        name: &str,
        body: impl FnOnce(Receiver<()>) + Send + 'static,
    ) -> io::Result<StoppableThread> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(rx))?;
        Ok(StoppableThread {
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for its round to finish.
    pub fn stop(&mut self) {
        // Dropping the sender disconnects the channel: the thread's wait ends at once.
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for StoppableThread {
    fn drop(&mut self) {
        self.stop();
    }
}
