//! A consumer: a subscription of one channel to one queue (AMQP `basic.consume`).

use crate::broker::channel::Channel;
use crate::types::FieldTable;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// One consumer. Shared by its queue (which pushes to it) and its channel's session.
#[derive(Debug)]
pub struct Consumer {
    /// Consumer tag, unique on its channel.
    pub tag: Arc<str>,
    /// Name of the queue it consumes from.
    pub queue: Arc<str>,
    /// The channel deliveries go to.
    pub channel: Arc<Channel>,
    /// Deliveries count as acked when sent (no unacked entry, no prefetch).
    pub no_ack: bool,
    /// The only consumer its queue may have.
    pub exclusive: bool,
    /// Unacked deliveries allowed to this consumer (0 = unlimited): the channel's
    /// `basic.qos global=false` value when the consumer was created (RabbitMQ semantics).
    pub prefetch: u16,
    /// Consumer arguments as given.
    pub arguments: FieldTable,
    /// Unacked deliveries of this consumer; changed only under its channel's state lock.
    pub(crate) unacked: AtomicU32,
    /// Set when the server cancelled it: its queue was deleted, or a delivery to it was not
    /// acked within the consumer timeout (changed then under its channel's state lock).
    pub(crate) cancelled: AtomicBool,
}

impl Consumer {
    /// Whether a delivery could go to it now as far as it is concerned: not cancelled,
    /// and under its prefetch (no-ack and unlimited consumers always), its channel not
    /// saturated. (The channel-wide prefetch is not looked at.)
    pub fn has_capacity(&self) -> bool {
        !self.is_cancelled()
            && !self.channel.sink.is_saturated()
            && (self.no_ack
                || self.prefetch == 0
                || self.unacked.load(std::sync::atomic::Ordering::Relaxed)
                    < u32::from(self.prefetch))
    }

    /// A new consumer with no deliveries yet.
    pub fn new(
        tag: Arc<str>,
        queue: Arc<str>,
        channel: Arc<Channel>,
        no_ack: bool,
        exclusive: bool,
        prefetch: u16,
        arguments: FieldTable,
    ) -> Consumer {
        Consumer {
            tag,
            queue,
            channel,
            no_ack,
            exclusive,
            prefetch,
            arguments,
            unacked: AtomicU32::new(0),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Deliveries sent to this consumer and not yet acked.
    pub fn unacked(&self) -> u32 {
        self.unacked.load(Ordering::Relaxed)
    }

    /// Whether the server cancelled this consumer.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}
