//! Consuming: `basic.qos`, `basic.consume` and `basic.cancel`, deliveries parsed straight
//! from the read buffer, acks.
//!
//! A delivery is three kinds of frame (AMQP 0-9-1 §4.2.6): the `basic.deliver` method,
//! a content header (class, body size, properties) and as many body frames as the body
//! needs (none for an empty body). [`Connection::poll_deliveries`] hands them to the
//! caller as [`DeliveryEvent`]s, `Start`, `Body`…, `End`, borrowing the read buffer: the
//! client never copies or joins a body, so a caller that needs only its size (a
//! benchmark) pays nothing for it, and one that forwards it copies it once.

use super::connection::{check_short_str, Connection};
use super::error::AmqpClientError;
use super::incoming::Dispatched;
use crate::amqp::{parse_content_header, parse_content_header_prefix, AmqpMethod, BASIC_CLASS_ID};
use crate::client::ConsumeOptions;
use crate::types::BasicProperties;
use std::ops::Range;
use std::time::{Duration, Instant};

/// A delivery's `basic.deliver` arguments and body size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryHead {
    /// The consumer it was delivered to.
    pub consumer_tag: String,
    /// The channel's delivery tag, for [`Connection::ack`].
    pub delivery_tag: u64,
    /// The server delivered it before (AMQP 0-9-1 `redelivered`).
    pub redelivered: bool,
    /// The exchange it was published to; empty for the default exchange.
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// The body size, bytes, from the content header.
    pub body_bytes: u64,
}

/// A content header payload as received (class id, weight, body size, property flags
/// and list; AMQP 0-9-1 §4.2.6.1), decoded only on request.
#[derive(Clone, Copy, Debug)]
pub struct RawContentHeader<'a>(&'a [u8]);

impl RawContentHeader<'_> {
    /// The payload's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.0
    }

    /// Decodes the message properties.
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] for properties that do not decode (unknown flag
    /// bits, a truncated list, a string that is not UTF-8, a bad headers table).
    pub fn properties(&self) -> Result<BasicProperties, AmqpClientError> {
        parse_content_header(self.0)
            .map(|h| h.properties)
            .map_err(|e| AmqpClientError::Protocol(format!("bad content header: {e}")))
    }
}

/// One step of a delivery, handed to the caller of [`Connection::poll_deliveries`], in
/// this order per delivery: `Start`, one `Body` per body frame (none for an empty body),
/// `End`. The slices borrow the read buffer: valid for the call only.
#[derive(Clone, Copy, Debug)]
pub enum DeliveryEvent<'a> {
    /// The `basic.deliver` and its content header arrived.
    Start {
        /// The delivery.
        head: &'a DeliveryHead,
        /// Its content header, properties undecoded.
        header: RawContentHeader<'a>,
    },
    /// The next piece of the body, in order; the pieces add up to
    /// [`DeliveryHead::body_bytes`].
    Body {
        /// The delivery.
        head: &'a DeliveryHead,
        /// Offset of `chunk` in the body, bytes.
        offset: u64,
        /// The piece, at most `frame_max - 8` bytes.
        chunk: &'a [u8],
    },
    /// The body is whole: the delivery can be acked.
    End {
        /// The delivery.
        head: &'a DeliveryHead,
    },
}

/// Where the channel in use is in the frames of a delivery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Between deliveries.
    #[default]
    Idle,
    /// After `basic.deliver`, waiting for its content header.
    Header,
    /// Receiving the body.
    Body,
}

/// The delivery being received on the channel in use.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    /// Which frame comes next.
    phase: Phase,
    /// The delivery (the last one, between deliveries: its strings are replaced, not
    /// reallocated, by the next `basic.deliver`'s).
    head: DeliveryHead,
    /// Body bytes received so far.
    received: u64,
}

impl Connection {
    /// Sets the prefetch of the channel in use (`basic.qos`, AMQP 0-9-1 §1.8.3.1):
    /// at most `prefetch_count` unacked deliveries (0 = no limit); `global` applies it
    /// to the whole channel rather than to each consumer, as RabbitMQ reads it.
    ///
    /// # Errors
    /// As [`Connection::call`].
    pub fn basic_qos(&mut self, prefetch_count: u16, global: bool) -> Result<(), AmqpClientError> {
        let qos = AmqpMethod::BasicQos {
            prefetch_size: 0,
            prefetch_count,
            global,
        };
        self.call(&qos, |m| matches!(m, AmqpMethod::BasicQosOk {}))
            .map(|_| ())
    }

    /// Starts a consumer of `queue` on the channel in use (`basic.consume`, AMQP 0-9-1
    /// §1.8.3.3) and returns its consumer tag (the server's when
    /// [`ConsumeOptions::consumer_tag`] is empty). Deliveries are read with
    /// [`Connection::poll_deliveries`].
    ///
    /// # Errors
    /// [`AmqpClientError::Usage`] for a queue name or tag longer than 255 bytes; else as
    /// [`Connection::call`] (404 for a missing queue, 403 for an exclusive one taken).
    pub fn basic_consume(
        &mut self,
        queue: &str,
        options: ConsumeOptions,
    ) -> Result<String, AmqpClientError> {
        check_short_str("queue name", queue)?;
        check_short_str("consumer tag", &options.consumer_tag)?;
        let consume = AmqpMethod::BasicConsume {
            queue: queue.into(),
            consumer_tag: options.consumer_tag,
            no_local: false,
            no_ack: options.no_ack,
            exclusive: options.exclusive,
            no_wait: false,
            arguments: options.arguments,
        };
        match self.call(&consume, |m| matches!(m, AmqpMethod::BasicConsumeOk { .. }))? {
            AmqpMethod::BasicConsumeOk { consumer_tag } => Ok(consumer_tag),
            m => Err(super::connection::unexpected(
                "basic.consume-ok",
                self.channel,
                &m,
            )),
        }
    }

    /// Cancels consumer `consumer_tag` (`basic.cancel`, AMQP 0-9-1 §1.8.3.4) and waits
    /// for `cancel-ok`; deliveries still arriving on the way are dropped (with manual
    /// acks the server requeues them when the channel closes).
    ///
    /// # Errors
    /// As [`Connection::call`].
    pub fn basic_cancel(&mut self, consumer_tag: &str) -> Result<(), AmqpClientError> {
        check_short_str("consumer tag", consumer_tag)?;
        let cancel = AmqpMethod::BasicCancel {
            consumer_tag: consumer_tag.into(),
            no_wait: false,
        };
        self.call(&cancel, |m| matches!(m, AmqpMethod::BasicCancelOk { .. }))
            .map(|_| ())
    }

    /// Acks `delivery_tag` on the channel in use, and every earlier one with `multiple`
    /// (`basic.ack`, AMQP 0-9-1 §1.8.3.13). Appended to the write buffer: sent by the
    /// next [`Connection::poll_deliveries`], [`Connection::flush`] or request.
    pub fn ack(&mut self, delivery_tag: u64, multiple: bool) {
        let channel = self.channel;
        self.send(
            channel,
            &AmqpMethod::BasicAck {
                delivery_tag,
                multiple,
            },
        );
    }

    /// Rejects `delivery_tag` on the channel in use, and every earlier unsettled one with
    /// `multiple` (`basic.nack`, RabbitMQ's extension of AMQP 0-9-1); `requeue` puts them
    /// back in their queue, else they are dead-lettered or dropped. Appended to the write
    /// buffer, as [`Connection::ack`].
    pub fn nack(&mut self, delivery_tag: u64, multiple: bool, requeue: bool) {
        let channel = self.channel;
        self.send(
            channel,
            &AmqpMethod::BasicNack {
                delivery_tag,
                multiple,
                requeue,
            },
        );
    }

    /// Writes what is buffered (acks), then waits at most `timeout` for deliveries and
    /// hands each one's frames to `on_event` ([`DeliveryEvent`]); returns the number of
    /// deliveries completed (0 when the time ran out).
    ///
    /// Every whole frame of each `read()` is handled before it returns, so one call may
    /// complete many deliveries; a delivery cut by the end of a read is continued by the
    /// next call. A `read()` waits at most `timeout`, set on the socket once for a
    /// caller that always passes the same value.
    ///
    /// # Errors
    /// [`AmqpClientError::ConsumerCancelled`] when the server cancelled the consumer;
    /// the server's closes; [`AmqpClientError::Protocol`] for a malformed frame or
    /// delivery frames out of order (AMQP 0-9-1 §4.2.6); a read or write failure.
    pub fn poll_deliveries<F: FnMut(DeliveryEvent<'_>)>(
        &mut self,
        timeout: Duration,
        mut on_event: F,
    ) -> Result<usize, AmqpClientError> {
        self.flush()?;
        let deadline = Instant::now() + timeout;
        let mut completed = 0;
        loop {
            while let Some((h, range)) = self.buffered_frame()? {
                if let Dispatched::Delivered = self.dispatch(h, range, &mut on_event)? {
                    completed += 1;
                }
            }
            if completed > 0 {
                return Ok(completed);
            }
            if deadline.saturating_duration_since(Instant::now()).is_zero() {
                return Ok(0);
            }
            self.set_read_timeout(timeout)?;
            if !self.fill()? {
                return Ok(0);
            }
        }
    }

    /// A `basic.deliver` on the channel in use, with its arguments: a delivery starts.
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] in the middle of another delivery's content.
    #[inline]
    pub(super) fn on_deliver(
        &mut self,
        consumer_tag: String,
        delivery_tag: u64,
        redelivered: bool,
        exchange: String,
        routing_key: String,
    ) -> Result<(), AmqpClientError> {
        if self.delivery.phase != Phase::Idle {
            return Err(AmqpClientError::Protocol(
                "basic.deliver in the middle of another delivery's content".into(),
            ));
        }
        let head = &mut self.delivery.head;
        head.consumer_tag = consumer_tag;
        head.delivery_tag = delivery_tag;
        head.redelivered = redelivered;
        head.exchange = exchange;
        head.routing_key = routing_key;
        head.body_bytes = 0;
        self.delivery.phase = Phase::Header;
        self.delivery.received = 0;
        Ok(())
    }

    /// A content header frame on the channel in use, payload `range`: only its fixed
    /// part is read (the properties on request, [`RawContentHeader::properties`]).
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] outside a delivery, for a class other than `basic`
    /// or a header shorter than its fixed part.
    #[inline]
    pub(super) fn on_content_header<F: FnMut(DeliveryEvent<'_>)>(
        &mut self,
        range: Range<usize>,
        on_event: &mut F,
    ) -> Result<Dispatched, AmqpClientError> {
        if self.delivery.phase != Phase::Header {
            return Err(misplaced("content header"));
        }
        let payload = &self.rbuf[range];
        let (class_id, body_bytes) = parse_content_header_prefix(payload).map_err(|e| {
            AmqpClientError::Protocol(format!("bad content header from the server: {e}"))
        })?;
        if class_id != BASIC_CLASS_ID {
            return Err(AmqpClientError::Protocol(format!(
                "content header of class {class_id} after basic.deliver"
            )));
        }
        let a = &mut self.delivery;
        a.head.body_bytes = body_bytes;
        a.phase = Phase::Body;
        on_event(DeliveryEvent::Start {
            head: &a.head,
            header: RawContentHeader(payload),
        });
        Ok(a.end_if_whole(on_event))
    }

    /// A body frame on the channel in use, payload `range`.
    ///
    /// # Errors
    /// [`AmqpClientError::Protocol`] outside a delivery, or past the body size the
    /// content header announced.
    #[inline]
    pub(super) fn on_body<F: FnMut(DeliveryEvent<'_>)>(
        &mut self,
        range: Range<usize>,
        on_event: &mut F,
    ) -> Result<Dispatched, AmqpClientError> {
        let a = &mut self.delivery;
        if a.phase != Phase::Body {
            return Err(misplaced("body"));
        }
        let chunk = &self.rbuf[range];
        let offset = a.received;
        a.received = a.received.saturating_add(chunk.len() as u64);
        if a.received > a.head.body_bytes {
            return Err(AmqpClientError::Protocol(format!(
                "the server sent {} body bytes for a body of {}",
                a.received, a.head.body_bytes
            )));
        }
        on_event(DeliveryEvent::Body {
            head: &a.head,
            offset,
            chunk,
        });
        Ok(a.end_if_whole(on_event))
    }
}

impl Assembly {
    /// Hands out `End` once the body is whole, and waits for the next delivery.
    #[inline]
    fn end_if_whole<F: FnMut(DeliveryEvent<'_>)>(&mut self, on_event: &mut F) -> Dispatched {
        if self.received < self.head.body_bytes {
            return Dispatched::Nothing;
        }
        self.phase = Phase::Idle;
        on_event(DeliveryEvent::End { head: &self.head });
        Dispatched::Delivered
    }

    /// Forgets a delivery in progress (the channel it came on is gone).
    pub(super) fn reset(&mut self) {
        self.phase = Phase::Idle;
        self.received = 0;
    }
}

/// The error for a content frame outside a delivery.
fn misplaced(what: &str) -> AmqpClientError {
    AmqpClientError::Protocol(format!("the server sent a {what} frame outside a delivery"))
}
