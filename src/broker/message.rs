//! A message as the core holds it: routing information, properties and body, shared by
//! every queue it was routed to.

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

/// A published message. Held as `Arc<Message>`: a fanout to N queues shares one body.
///
/// Absent properties cost one null pointer; the body is the buffer the protocol decoded
/// (no copy).
#[derive(Debug, PartialEq)]
pub struct Message {
    /// Exchange the message was published to ("" = default exchange).
    pub exchange: Arc<str>,
    /// Routing key it was published with.
    pub routing_key: Arc<str>,
    properties: Option<Box<BasicProperties>>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Message {
    /// A message; properties are boxed only when at least one is set.
    pub fn new(
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: Vec<u8>,
    ) -> Message {
        let properties = if properties.is_empty() {
            None
        } else {
            Some(Box::new(properties))
        };
        Message {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            properties,
            body,
        }
    }

    /// As [`Message::new`], sharing already interned exchange and routing key names (the
    /// publish path's cached route), so no name is copied, with properties already boxed
    /// (`None` or empty: none).
    pub fn with_names(
        exchange: Arc<str>,
        routing_key: Arc<str>,
        properties: Option<Box<BasicProperties>>,
        body: Vec<u8>,
    ) -> Message {
        let properties = properties.filter(|p| !p.is_empty());
        Message {
            exchange,
            routing_key,
            properties,
            body,
        }
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
