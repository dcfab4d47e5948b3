//! Publisher confirms (RabbitMQ's extension, "Consumer Acknowledgements and Publisher
//! Confirms"): `confirm.select`, then the server acks or nacks every publish of the
//! channel by its sequence number (from 1), one at a time or with `multiple`.
//!
//! The connection keeps a window of the publish sequence numbers not confirmed yet:
//! [`Connection::publish`] adds to it, the server's `basic.ack`/`basic.nack` settle it
//! whenever the connection reads, and [`Connection::wait_confirms_at_most`] reads until
//! enough are settled. The window holds one byte per unconfirmed publish; the caller
//! bounds it by waiting before publishing more.

use super::connection::Connection;
use super::error::AmqpClientError;
use crate::amqp::AmqpMethod;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One `basic.ack` or `basic.nack` the server sent for publishes of the channel in use,
/// as [`Connection::take_confirms`] hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirm {
    /// The publish sequence number (from 1).
    pub seq: u64,
    /// It covers every earlier publish too.
    pub multiple: bool,
    /// `basic.ack` (true) or `basic.nack` (false: the server could not take it).
    pub ack: bool,
}

/// The publisher confirms of a channel in confirm mode: which publish sequence numbers
/// (from 1) are still unconfirmed.
#[derive(Debug)]
pub(super) struct ConfirmWindow {
    /// The sequence number of `pending[0]`.
    base: u64,
    /// Per sequence number from `base`: not yet confirmed. The front is always pending.
    pending: VecDeque<bool>,
    /// Count of `true` in `pending`.
    unconfirmed: usize,
    /// Publishes the server nacked.
    nacked: u64,
    /// The confirms as received, kept for [`Connection::take_confirms`] once
    /// [`Connection::record_confirms`] asked for them; `None`: only counted. At most one
    /// entry per unconfirmed publish.
    recorded: Option<Vec<Confirm>>,
}

impl ConfirmWindow {
    pub(super) fn new() -> ConfirmWindow {
        ConfirmWindow {
            base: 1,
            pending: VecDeque::new(),
            unconfirmed: 0,
            nacked: 0,
            recorded: None,
        }
    }

    /// One more publish was sent.
    #[inline]
    pub(super) fn published(&mut self) {
        self.pending.push_back(true);
        self.unconfirmed += 1;
    }

    /// A `basic.ack` (`acked`) or `basic.nack` of `tag` (and all before with `multiple`).
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] for a tag never published: the server and client
    /// disagree.
    pub(super) fn settle(
        &mut self,
        tag: u64,
        multiple: bool,
        acked: bool,
    ) -> Result<(), AmqpClientError> {
        let end = self.base + self.pending.len() as u64;
        if tag >= end || tag == 0 {
            return Err(AmqpClientError::Protocol(format!(
                "the server confirmed publish {tag}, but only {} were published",
                end - 1
            )));
        }
        if let Some(r) = &mut self.recorded {
            r.push(Confirm {
                seq: tag,
                multiple,
                ack: acked,
            });
        }
        let (from, to) = if multiple {
            (self.base, tag)
        } else {
            (tag.max(self.base), tag)
        };
        for seq in from..=to {
            // A single confirm below `base` is for a publish already confirmed: nothing.
            let Some(p) = self.pending.get_mut((seq - self.base) as usize) else {
                continue;
            };
            if *p {
                *p = false;
                self.unconfirmed -= 1;
                if !acked {
                    self.nacked += 1;
                }
            }
        }
        while self.pending.front() == Some(&false) {
            self.pending.pop_front();
            self.base += 1;
        }
        Ok(())
    }
}

impl Connection {
    /// Puts the channel in use in confirm mode (`confirm.select`): from now on every
    /// publish is counted until the server acks or nacks it.
    ///
    /// # Errors
    /// As [`Connection::call`].
    pub fn confirm_select(&mut self) -> Result<(), AmqpClientError> {
        self.call(&AmqpMethod::ConfirmSelect { nowait: false }, |m| {
            matches!(m, AmqpMethod::ConfirmSelectOk {})
        })?;
        if self.confirms.is_none() {
            self.confirms = Some(ConfirmWindow::new());
        }
        Ok(())
    }

    /// Keeps every confirm of the channel in use (from now on) for
    /// [`Connection::take_confirms`], for a caller that must know which publish each
    /// covers (a shovel acks its source by them). Call it after
    /// [`Connection::confirm_select`]; the caller takes them regularly (at most one
    /// is kept per publish).
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] outside confirm mode.
    pub fn record_confirms(&mut self) -> Result<(), AmqpClientError> {
        match &mut self.confirms {
            Some(w) => {
                w.recorded.get_or_insert_with(Vec::new);
                Ok(())
            }
            None => Err(AmqpClientError::Usage(
                "recording confirms outside confirm mode".into(),
            )),
        }
    }

    /// Moves the confirms received since the last call to `out`, in the order the
    /// server sent them (nothing unless [`Connection::record_confirms`] was called).
    pub fn take_confirms(&mut self, out: &mut Vec<Confirm>) {
        if let Some(r) = self.confirms.as_mut().and_then(|w| w.recorded.as_mut()) {
            out.append(r);
        }
    }

    /// Writes what is buffered, then reads until a confirm arrives or `timeout` passes
    /// (whichever is first; at once when none is outstanding or one was received
    /// already); returns whether any confirm is waiting in
    /// [`Connection::take_confirms`]. Deliveries arriving meanwhile are dropped.
    ///
    /// # Errors
    /// As [`Connection::wait_confirms_at_most`], but running out of time is no error.
    pub fn poll_confirms(&mut self, timeout: Duration) -> Result<bool, AmqpClientError> {
        let deadline = Instant::now() + timeout;
        self.flush()?;
        self.handle_buffered()?;
        loop {
            let Some(w) = &self.confirms else {
                return Err(AmqpClientError::Usage(
                    "waiting for confirms outside confirm mode".into(),
                ));
            };
            let got = w.recorded.as_ref().is_some_and(|r| !r.is_empty());
            if got || w.unconfirmed == 0 || Instant::now() >= deadline {
                return Ok(got);
            }
            match self.next_frame(deadline) {
                Ok((h, range)) => {
                    self.dispatch(h, range, &mut |_| {})?;
                }
                Err(AmqpClientError::Timeout(_)) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Publishes of the channel in use not confirmed yet (0 outside confirm mode).
    pub fn unconfirmed(&self) -> usize {
        self.confirms.as_ref().map_or(0, |w| w.unconfirmed)
    }

    /// Publishes of the channel in use the server nacked so far (0 outside confirm
    /// mode).
    pub fn nacked(&self) -> u64 {
        self.confirms.as_ref().map_or(0, |w| w.nacked)
    }

    /// Writes what is buffered, then reads until at most `limit` publishes are
    /// unconfirmed (`limit` 0: all confirmed), for at most `timeout`; returns how many
    /// are unconfirmed. A nack settles a publish like an ack: see
    /// [`Connection::nacked`]. Deliveries arriving meanwhile are dropped.
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] outside confirm mode; [`AmqpClientError::Timeout`]
    /// naming the publishes still unconfirmed; the server's closes, a read failure, a
    /// malformed frame or a confirm of a publish never sent.
    pub fn wait_confirms_at_most(
        &mut self,
        limit: usize,
        timeout: Duration,
    ) -> Result<usize, AmqpClientError> {
        let deadline = Instant::now() + timeout;
        self.flush()?;
        self.handle_buffered()?;
        loop {
            let Some(w) = &self.confirms else {
                return Err(AmqpClientError::Usage(
                    "waiting for confirms outside confirm mode".into(),
                ));
            };
            if w.unconfirmed <= limit {
                return Ok(w.unconfirmed);
            }
            let unconfirmed = w.unconfirmed;
            let (h, range) = self.next_frame(deadline).map_err(|e| match e {
                AmqpClientError::Timeout(_) => AmqpClientError::Timeout(format!(
                    "{unconfirmed} publishes still unconfirmed after {} s",
                    timeout.as_secs()
                )),
                e => e,
            })?;
            self.dispatch(h, range, &mut |_| {})?;
        }
    }

    /// A `basic.ack`/`basic.nack` from the server on the channel in use.
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] outside confirm mode or for a publish never sent.
    pub(super) fn on_confirm(
        &mut self,
        tag: u64,
        multiple: bool,
        acked: bool,
    ) -> Result<(), AmqpClientError> {
        match &mut self.confirms {
            Some(w) => w.settle(tag, multiple, acked),
            None => Err(AmqpClientError::Protocol(format!(
                "the server sent {} without confirm mode",
                if acked { "basic.ack" } else { "basic.nack" }
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirm_window_single_multiple_and_out_of_order() {
        let mut w = ConfirmWindow::new();
        for _ in 0..5 {
            w.published();
        }
        w.settle(2, false, true).unwrap();
        assert_eq!((w.unconfirmed, w.base), (4, 1));
        w.settle(1, false, true).unwrap();
        assert_eq!((w.unconfirmed, w.base), (3, 3));
        w.settle(4, true, true).unwrap();
        assert_eq!((w.unconfirmed, w.base), (1, 5));
        w.settle(5, false, false).unwrap();
        assert_eq!((w.unconfirmed, w.nacked, w.base), (0, 1, 6));
        assert!(w.settle(6, false, true).is_err());
        assert!(w.settle(0, true, true).is_err());
        // A repeated confirm of something already confirmed changes nothing.
        w.published();
        w.settle(3, true, true).unwrap();
        assert_eq!(w.unconfirmed, 1);
        // A confirm far beyond what was published is refused without a long loop.
        assert!(w.settle(u64::MAX, true, true).is_err());
        assert_eq!(w.unconfirmed, 1);
    }
}
