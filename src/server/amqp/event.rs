//! The events an AMQP 0-9-1 connection's handler takes: its protocol header, what its
//! input decoded (a method with its content), the core's server cancels, and the
//! [`ConnEvent`]s every connection takes.

use crate::amqp::AmqpMethod;
use crate::broker::channel::Channel;
use crate::broker::CancelReason;
use crate::server::event::ConnEvent;
use crate::types::BasicProperties;
use std::sync::Arc;

/// What the I/O thread (or the core) asks an AMQP 0-9-1 connection's worker to do.
#[derive(Debug)]
pub enum AmqpEvent {
    /// The client sent a valid protocol header: start the handshake.
    Header,
    /// A decoded method, with its content for `basic.publish`.
    Method {
        /// Channel it arrived on.
        channel: u16,
        /// The method.
        method: AmqpMethod,
        /// Its content (properties and body), for a method that carries one.
        content: Option<Content>,
    },
    /// A content too large to accept; its frames are being discarded. The channel is
    /// closed with 406 (RabbitMQ: `PRECONDITION_FAILED - message size … is larger than
    /// configured max size …`).
    Oversized {
        /// Channel it arrived on.
        channel: u16,
        /// Declared body size in bytes.
        size: u64,
    },
    /// The core cancelled a consumer (its queue was deleted, or it timed out): the
    /// handler tells the client as its capabilities allow, after the method it was
    /// running when this was posted.
    ServerCancel {
        /// The consumer's channel (it may have closed, and its number been reused, since).
        channel: Arc<Channel>,
        /// The consumer's tag.
        consumer_tag: String,
        /// Why it was cancelled.
        reason: CancelReason,
    },
    /// An event every connection takes.
    Conn(ConnEvent),
}

/// The content of an AMQP 0-9-1 method (`basic.publish`): properties and body.
#[derive(Debug)]
pub struct Content {
    /// Message properties from the content header, boxed (`None` when none is set).
    pub properties: Option<Box<BasicProperties>>,
    /// Body bytes (every body frame joined).
    pub body: Vec<u8>,
}
