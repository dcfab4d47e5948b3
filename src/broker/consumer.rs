//! A consumer: a subscription of one channel to one queue (AMQP `basic.consume`).

use crate::broker::channel::Channel;
use crate::error::BrokerError;
use crate::types::{FieldTable, FieldValue};
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
    /// `x-priority` (default 0): messages go to the highest priority that can take them
    /// ([`crate::broker::queue`]'s consumer set).
    pub priority: i64,
    /// Unacked deliveries of this consumer; changed only under its channel's state lock.
    pub(crate) unacked: AtomicU32,
    /// Set when the server cancelled it: its queue was deleted, or a delivery to it was not
    /// acked within the consumer timeout (changed then under its channel's state lock).
    pub(crate) cancelled: AtomicBool,
    /// Set while it waits behind its queue's single active consumer (changed under the
    /// queue's lock; read by listings).
    pub(crate) waiting: AtomicBool,
    /// Set when it consumes from a queue with a single active consumer.
    pub(crate) single_active: AtomicBool,
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
            priority: consumer_priority(&arguments).ok().flatten().unwrap_or(0),
            arguments,
            unacked: AtomicU32::new(0),
            cancelled: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            single_active: AtomicBool::new(false),
        }
    }

    /// Deliveries sent to this consumer and not yet acked.
    pub fn unacked(&self) -> u32 {
        self.unacked.load(Ordering::Relaxed)
    }

    /// Whether it waits behind its queue's single active consumer (RabbitMQ's consumer
    /// `active: false`, `activity_status: "waiting"`).
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether it consumes from a queue with `x-single-active-consumer`.
    pub fn on_single_active_queue(&self) -> bool {
        self.single_active.load(Ordering::Relaxed)
    }

    /// Whether the server cancelled this consumer.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// The consumer argument `x-priority`: an integer of any AMQP integer type (RabbitMQ
/// `rabbit_amqqueue:check_int_arg`); absent is `None` (priority 0).
///
/// # Errors
/// 406 PRECONDITION_FAILED `invalid arg 'x-priority': "expected integer, got longstr"` (the
/// caller adds the queue, as RabbitMQ's text has it).
pub fn consumer_priority(arguments: &FieldTable) -> Result<Option<i64>, BrokerError> {
    let Some(v) = arguments.get("x-priority") else {
        return Ok(None);
    };
    match v.as_i64() {
        Some(n) if !matches!(v, FieldValue::Bool(_)) => Ok(Some(n)),
        _ => Err(BrokerError::precondition(format!(
            "invalid arg 'x-priority': \"expected integer, got {}\"",
            v.rabbitmq_type_name()
        ))),
    }
}
