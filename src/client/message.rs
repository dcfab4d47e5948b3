//! Messages the client receives outside of a consumer: a `basic.get` result and a
//! returned (unroutable mandatory) message.

use crate::types::BasicProperties;

/// A message fetched with [`super::Channel::basic_get`] (AMQP 0-9-1 `basic.get-ok`).
#[derive(Clone, Debug, PartialEq)]
pub struct GetMessage {
    /// Channel-scoped delivery tag to ack, nack or reject it with (unless fetched with
    /// `no_ack`).
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// Exchange it was published to (empty: the default exchange).
    pub exchange: String,
    /// Routing key it was published with.
    pub routing_key: String,
    /// Messages still ready in the queue after this one.
    pub message_count: u32,
    /// Message properties.
    pub properties: BasicProperties,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// A mandatory message no queue took, sent back by the server (AMQP 0-9-1
/// `basic.return`, reply code 312 NO_ROUTE).
#[derive(Clone, Debug, PartialEq)]
pub struct ReturnedMessage {
    /// Why it came back (312 NO_ROUTE).
    pub reply_code: u16,
    /// The server's reason.
    pub reply_text: String,
    /// Exchange it was published to.
    pub exchange: String,
    /// Routing key it was published with.
    pub routing_key: String,
    /// Message properties.
    pub properties: BasicProperties,
    /// Body bytes.
    pub body: Vec<u8>,
}
