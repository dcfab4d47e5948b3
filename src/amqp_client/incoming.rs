//! What the server sends: the read buffer, whole frames checked in place
//! ([`crate::amqp::check`]) and what each frame does.
//!
//! Every read path goes through [`Connection::dispatch`], so the connection's state stays
//! the same whoever reads: the server's closes are answered (`close-ok`) and become
//! errors, confirms settle the confirm window, delivery frames go through the delivery
//! assembly (to the caller's handler while polling, dropped otherwise), and the remaining
//! methods (replies) are handed to the caller.

use super::connection::Connection;
use super::consume::DeliveryEvent;
use super::error::AmqpClientError;
use crate::amqp::{check, AmqpMethod, FrameType, RawFrameHeader, FRAME_HEADER_BYTES};
use std::io::{ErrorKind, Read, Write};
use std::ops::Range;
use std::time::{Duration, Instant};

/// Longest one blocking `read()` waits before a deadline is looked at again.
const READ_SLICE: Duration = Duration::from_millis(100);

/// What one frame from the server came to.
pub(super) enum Dispatched {
    /// Nothing for the caller: a heartbeat, a confirm, a delivery frame that did not
    /// complete a delivery, a method on another channel's behalf.
    Nothing,
    /// A delivery was completed (its `End` event was handed out).
    Delivered,
    /// A method for the caller (a reply), with its channel. Boxed: replies are rare, and
    /// every frame of every delivery returns this (with the 104-byte method inline, the
    /// consumer spent ~10% more CPU per message).
    Method(u16, Box<AmqpMethod>),
}

impl Connection {
    /// The next whole frame in the read buffer, without reading: its header and the
    /// payload's range in `rbuf`, valid until the next read.
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] for a malformed frame (AMQP 0-9-1 §4.2.3) or a
    /// server that answered with a protocol header (it does not speak AMQP 0-9-1,
    /// §4.2.2).
    #[inline]
    pub(super) fn buffered_frame(
        &mut self,
    ) -> Result<Option<(RawFrameHeader, Range<usize>)>, AmqpClientError> {
        let buf = &self.rbuf[self.rstart..self.rend];
        match check(buf, self.frame_max) {
            Ok(Some((h, total))) => {
                let at = self.rstart + FRAME_HEADER_BYTES;
                self.rstart += total;
                Ok(Some((h, at..at + h.size as usize)))
            }
            Ok(None) => Ok(None),
            // `A` is no frame type: a protocol header (whole or in part) is refused here.
            Err(_) if b"AMQP".starts_with(&buf[..buf.len().min(4)]) => {
                Err(AmqpClientError::Protocol(format!(
                    "the server answered with protocol header {:?}: it does not speak AMQP 0-9-1",
                    String::from_utf8_lossy(&buf[..buf.len().min(8)])
                )))
            }
            Err(e) => Err(AmqpClientError::Protocol(format!(
                "malformed frame from the server ({e}); is this an AMQP 0-9-1 port?"
            ))),
        }
    }

    /// Reads once (waiting at most the socket's read timeout); `false` when nothing came.
    ///
    /// # Errors
    /// [`AmqpClientError::Io`] when the server closed the socket (kind `UnexpectedEof`)
    /// or the read failed.
    pub(super) fn fill(&mut self) -> Result<bool, AmqpClientError> {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rbuf.len() - self.rend < self.frame_max as usize {
            // What is left is part of one frame (< frame_max bytes): move it to the front.
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        loop {
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    self.closed = true;
                    return Err(AmqpClientError::io(
                        "reading from the server",
                        std::io::Error::new(
                            ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        ),
                    ));
                }
                Ok(n) => {
                    self.rend += n;
                    self.last_read = Instant::now();
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    return Ok(false)
                }
                Err(e) => {
                    self.closed = true;
                    return Err(AmqpClientError::io("reading from the server", e));
                }
            }
        }
    }

    /// Sets the socket's read timeout, when it changes (at least 1 ms: 0 would mean
    /// "block forever").
    ///
    /// # Errors
    /// [`AmqpClientError::Io`] from the socket option.
    pub(super) fn set_read_timeout(&mut self, t: Duration) -> Result<(), AmqpClientError> {
        let t = t.max(Duration::from_millis(1));
        if self.read_timeout != Some(t) {
            self.stream
                .socket()
                .set_read_timeout(Some(t))
                .map_err(|e| AmqpClientError::io("setting the read timeout", e))?;
            self.read_timeout = Some(t);
        }
        Ok(())
    }

    /// The next frame, waiting until `deadline`.
    ///
    /// # Errors
    /// [`AmqpClientError::Timeout`] at the deadline, else as `buffered_frame` and `fill`.
    pub(super) fn next_frame(
        &mut self,
        deadline: Instant,
    ) -> Result<(RawFrameHeader, Range<usize>), AmqpClientError> {
        loop {
            if let Some(f) = self.buffered_frame()? {
                return Ok(f);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(AmqpClientError::Timeout(format!(
                    "no reply from the server within {} s",
                    self.reply_timeout.as_secs()
                )));
            }
            self.set_read_timeout(left.min(READ_SLICE))?;
            self.fill()?;
        }
    }

    /// Decodes the method frame whose payload is `range`, and answers the server's
    /// closes: `connection.close` and `channel.close` get their `close-ok` (AMQP 0-9-1
    /// §1.4.2.5, §1.5.2.5) and become errors.
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] for a method that does not decode;
    /// [`AmqpClientError::ConnectionClosed`] / [`AmqpClientError::ChannelClosed`] for
    /// the server's closes.
    pub(super) fn method_at(
        &mut self,
        channel: u16,
        range: Range<usize>,
    ) -> Result<AmqpMethod, AmqpClientError> {
        let m = AmqpMethod::decode(&self.rbuf[range]).map_err(|e| {
            AmqpClientError::Protocol(format!("undecodable method from the server: {e}"))
        })?;
        match m {
            AmqpMethod::ConnectionClose {
                reply_code,
                reply_text,
                ..
            } => {
                if !self.closed {
                    self.closed = true;
                    // Whatever was waiting to be sent is moot now.
                    self.wbuf.clear();
                    self.send(0, &AmqpMethod::ConnectionCloseOk {});
                    // Best effort: the server may have gone already, and the close
                    // is what the caller needs to hear about.
                    let _ = self.stream.write_all(&self.wbuf);
                    self.wbuf.clear();
                }
                Err(AmqpClientError::ConnectionClosed {
                    code: reply_code,
                    text: reply_text,
                })
            }
            AmqpMethod::ChannelClose {
                reply_code,
                reply_text,
                ..
            } => {
                self.send(channel, &AmqpMethod::ChannelCloseOk {});
                self.flush()?;
                Err(AmqpClientError::ChannelClosed {
                    code: reply_code,
                    text: reply_text,
                })
            }
            m => Ok(m),
        }
    }

    /// Handles one frame: closes answered, confirms settled, delivery frames assembled
    /// (events to `on_delivery`), anything else returned to the caller.
    ///
    /// # Errors
    /// As `method_at`; [`AmqpClientError::ConsumerCancelled`] for the server's
    /// `basic.cancel`; [`AmqpClientError::Protocol`] for a confirm without confirm mode
    /// or of a publish never sent, and for delivery frames out of order.
    #[inline]
    pub(super) fn dispatch<F: FnMut(DeliveryEvent<'_>)>(
        &mut self,
        h: RawFrameHeader,
        range: Range<usize>,
        on_delivery: &mut F,
    ) -> Result<Dispatched, AmqpClientError> {
        match h.frame_type {
            FrameType::Heartbeat => Ok(Dispatched::Nothing),
            FrameType::Header | FrameType::Body if h.channel != self.channel => {
                Ok(Dispatched::Nothing)
            }
            FrameType::Header => self.on_content_header(range, on_delivery),
            FrameType::Body => self.on_body(range, on_delivery),
            FrameType::Method => {
                let m = self.method_at(h.channel, range)?;
                if h.channel == 0 {
                    match m {
                        AmqpMethod::ConnectionBlocked { .. } => {
                            self.blocked = true;
                            return Ok(Dispatched::Nothing);
                        }
                        AmqpMethod::ConnectionUnblocked {} => {
                            self.blocked = false;
                            return Ok(Dispatched::Nothing);
                        }
                        m => return Ok(Dispatched::Method(0, Box::new(m))),
                    }
                }
                if h.channel != self.channel {
                    return Ok(Dispatched::Method(h.channel, Box::new(m)));
                }
                match m {
                    AmqpMethod::BasicDeliver {
                        consumer_tag,
                        delivery_tag,
                        redelivered,
                        exchange,
                        routing_key,
                    } => {
                        // Fields, not the method: a 104-byte move per delivery less.
                        self.on_deliver(
                            consumer_tag,
                            delivery_tag,
                            redelivered,
                            exchange,
                            routing_key,
                        )?;
                        Ok(Dispatched::Nothing)
                    }
                    AmqpMethod::BasicAck {
                        delivery_tag,
                        multiple,
                    } => {
                        self.on_confirm(delivery_tag, multiple, true)?;
                        Ok(Dispatched::Nothing)
                    }
                    AmqpMethod::BasicNack {
                        delivery_tag,
                        multiple,
                        ..
                    } => {
                        self.on_confirm(delivery_tag, multiple, false)?;
                        Ok(Dispatched::Nothing)
                    }
                    AmqpMethod::BasicCancel { consumer_tag, .. } => {
                        Err(AmqpClientError::ConsumerCancelled { consumer_tag })
                    }
                    m => Ok(Dispatched::Method(h.channel, Box::new(m))),
                }
            }
        }
    }

    /// The next method for the caller (everything else handled by `dispatch`, deliveries
    /// dropped), waiting until `deadline`, with its channel.
    ///
    /// # Errors
    /// As `dispatch` and `next_frame`.
    pub(super) fn recv_method(
        &mut self,
        deadline: Instant,
    ) -> Result<(u16, AmqpMethod), AmqpClientError> {
        loop {
            let (h, range) = self.next_frame(deadline)?;
            if let Dispatched::Method(ch, m) = self.dispatch(h, range, &mut |_| {})? {
                return Ok((ch, *m));
            }
        }
    }

    /// Handles every whole frame in the read buffer (deliveries dropped, other methods
    /// ignored), without reading.
    ///
    /// # Errors
    /// As `dispatch`.
    pub(super) fn handle_buffered(&mut self) -> Result<(), AmqpClientError> {
        while let Some((h, range)) = self.buffered_frame()? {
            self.dispatch(h, range, &mut |_| {})?;
        }
        Ok(())
    }

    /// Reads and handles what the server sent, without blocking: confirms are counted
    /// and a close the server sent is reported. For a publisher without confirms, to
    /// notice a channel closed after a refused publish. Deliveries are dropped.
    ///
    /// # Errors
    /// The server's close ([`AmqpClientError::ChannelClosed`],
    /// [`AmqpClientError::ConnectionClosed`]), a read failure, a malformed frame.
    pub fn check_incoming(&mut self) -> Result<(), AmqpClientError> {
        let set = |s: &super::stream::Stream, on: bool| {
            s.socket()
                .set_nonblocking(on)
                .map_err(|e| AmqpClientError::io("setting the socket (non-)blocking", e))
        };
        set(&self.stream, true)?;
        let r = self.fill();
        set(&self.stream, false)?;
        r?;
        self.handle_buffered()
    }
}
