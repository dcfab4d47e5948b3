//! The core's only way to talk to a client: what a protocol adapter must implement so the
//! core can push deliveries, cancels, returns and confirms to a connection.

use crate::broker::channel::Channel;
use crate::broker::message::Message;
use crate::error::ReplyCode;
use std::sync::Arc;

/// Why the server cancelled a consumer (RabbitMQ's consumer cancel notification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Its queue was deleted (or expired, or its vhost was deleted).
    QueueDeleted,
    /// A delivery to it was not acknowledged within its queue's consumer timeout.
    ConsumerTimeout {
        /// The timeout that passed, in ms.
        timeout_ms: u64,
    },
}

/// A connection's outbound side, as the core sees it. Implemented by each protocol adapter
/// (the native protocol in `server`, AMQP 0-9-1 later), which encodes the push into the
/// connection's outbound buffer.
///
/// Calls may come from any worker thread, with a queue lock and the channel's ack-state
/// lock held (lock order: queue → channel → outbound, docs/architecture.md §8): an
/// implementation must not block and must not call back into the core.
pub trait ClientSink: Send + Sync {
    /// Pushes one delivery (AMQP `basic.deliver`) on `channel`.
    fn deliver(
        &self,
        channel: u16,
        consumer_tag: &str,
        delivery_tag: u64,
        redelivered: bool,
        message: &Message,
    );

    /// Pushes one direct reply (a `basic.deliver` of a message published to the channel's
    /// `amq.rabbitmq.reply-to.…` name, never redelivered, no ack awaited) unless the
    /// connection's outbound backlog has no room for it; returns whether it was written.
    /// A reply has no queue to wait in: one that finds no room is dropped by the caller.
    ///
    /// The default writes it unless [`ClientSink::is_saturated`]; the network adapters
    /// write it while the backlog stays within their direct-reply share of the outbound
    /// hard cap (`limits::DIRECT_REPLY_BACKLOG_DIVISOR`), checked and written as one step.
    fn deliver_reply(
        &self,
        channel: u16,
        consumer_tag: &str,
        delivery_tag: u64,
        message: &Message,
    ) -> bool {
        if self.is_saturated() {
            return false;
        }
        self.deliver(channel, consumer_tag, delivery_tag, false, message);
        true
    }

    /// Tells the client the server cancelled a consumer of `channel` (RabbitMQ's consumer
    /// cancel notification), for `reason`. `channel` identifies the channel itself, not
    /// only its number: an adapter that tells the client later (AMQP 0-9-1, after the
    /// method being run) must not tell a channel opened meanwhile with the same number.
    fn cancel(&self, channel: &Arc<Channel>, consumer_tag: &str, reason: CancelReason);

    /// Returns an unroutable mandatory message (AMQP `basic.return`).
    fn basic_return(
        &self,
        channel: u16,
        reply_code: ReplyCode,
        reply_text: &str,
        message: &Message,
    );

    /// A publisher confirm: `ack` true for `basic.ack`, false for `basic.nack`, covering
    /// publish sequence number `seq` (and every earlier one when `multiple`).
    fn confirm(&self, channel: u16, seq: u64, multiple: bool, ack: bool);

    /// Whether the outbound buffer is over its delivery high-water mark. When it returns
    /// true the implementation must later report the drain (below the low-water mark) so
    /// the connection's consumers are dispatched again.
    fn is_saturated(&self) -> bool;

    /// Closes the connection from the server side (e.g. its vhost was deleted).
    fn force_close(&self, code: ReplyCode, text: &str);
}
