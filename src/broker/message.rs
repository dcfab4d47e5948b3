//! A message as the core holds it: routing information, properties and body, shared by
//! every queue it was routed to.

use crate::broker::message_body::MessageBody;
use crate::types::{BasicProperties, FieldTable};
use std::sync::Arc;

/// Properties of a message that has none; returned by [`Message::properties`].
static NO_PROPERTIES: BasicProperties = BasicProperties {
    content_type: None,
    content_encoding: None,
    headers: None,
    delivery_mode: None,
    priority: None,
    correlation_id: None,
    reply_to: None,
    expiration: None,
    message_id: None,
    timestamp: None,
    kind: None,
    user_id: None,
    app_id: None,
    cluster_id: None,
};

/// The exchange and routing key a message was published with. One allocation shared by
/// every message published with the same pair (the session's route cache holds it), so a
/// message carries one pointer for both names.
#[derive(Debug, PartialEq, Eq)]
pub struct RouteNames {
    exchange: Arc<str>,
    routing_key: Arc<str>,
}

impl RouteNames {
    /// The pair, sharing already interned names.
    pub fn new(exchange: Arc<str>, routing_key: Arc<str>) -> RouteNames {
        RouteNames {
            exchange,
            routing_key,
        }
    }

    /// Exchange name ("" = default exchange).
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// Routing key.
    pub fn routing_key(&self) -> &str {
        &self.routing_key
    }
}

/// A published message. Held as `Arc<Message>`: a fanout to N queues shares one body.
///
/// 40 bytes (56 with the `Arc` counts: one 64-byte malloc chunk), a body of up to
/// [`INLINE_BODY_BYTES_MAX`](crate::broker::message_body::INLINE_BODY_BYTES_MAX) bytes
/// included (a test checks it). Absent properties cost one
/// null pointer; both names are one shared pointer ([`RouteNames`]).
#[derive(Debug, PartialEq)]
pub struct Message {
    names: Arc<RouteNames>,
    properties: Option<Box<BasicProperties>>,
    /// Body bytes (reads as `&[u8]`).
    pub body: MessageBody,
}

impl Message {
    /// A message, copying the names; properties are boxed only when at least one is set.
    pub fn new(
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: impl Into<MessageBody>,
    ) -> Message {
        let names = RouteNames::new(exchange.into(), routing_key.into());
        Message::with_names(Arc::new(names), properties.into_boxed(), body)
    }

    /// As [`Message::new`], sharing already interned names (the publish path's cached
    /// route), so no name is copied.
    pub fn with_names(
        names: Arc<RouteNames>,
        properties: Option<Box<BasicProperties>>,
        body: impl Into<MessageBody>,
    ) -> Message {
        let properties = properties.filter(|p| !p.is_empty());
        Message {
            names,
            properties,
            body: body.into(),
        }
    }

    /// Exchange the message was published to ("" = default exchange).
    pub fn exchange(&self) -> &str {
        self.names.exchange()
    }

    /// Routing key it was published with.
    pub fn routing_key(&self) -> &str {
        self.names.routing_key()
    }

    /// Both names, to share with a copy of the message.
    pub fn names(&self) -> &Arc<RouteNames> {
        &self.names
    }

    /// The message's properties (all `None` when it has none).
    pub fn properties(&self) -> &BasicProperties {
        self.properties.as_deref().unwrap_or(&NO_PROPERTIES)
    }

    /// The headers table, if the message has one.
    pub fn headers(&self) -> Option<&FieldTable> {
        self.properties.as_ref().and_then(|p| p.headers.as_ref())
    }

    /// Body size in bytes.
    pub fn body_size(&self) -> usize {
        self.body.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_with_a_small_body_is_one_64_byte_chunk() {
        assert_eq!(std::mem::size_of::<Message>(), 40);
        let m = Message::new("", "q", BasicProperties::default(), [7u8; 16].to_vec());
        assert!(m.body.is_inline());
        assert_eq!(m.exchange(), "");
        assert_eq!(m.routing_key(), "q");
    }

    #[test]
    fn empty_properties_are_not_allocated() {
        let m = Message::new("", "q", BasicProperties::default(), b"x".to_vec());
        assert!(m.properties.is_none());
        assert!(m.properties().is_empty());
        let p = BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        let m = Message::new("", "q", p.clone(), vec![]);
        assert_eq!(m.properties(), &p);
    }
}
