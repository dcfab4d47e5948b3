//! A message as the core holds it: routing information, properties and body, shared by
//! every queue it was routed to.

pub mod body;

use crate::broker::exchange::header_routes::HeaderRoutes;
use crate::broker::message::body::MessageBody;
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

/// The exchange and routing key a message was published with, and the extra routing keys
/// of its `CC`/`BCC` headers if it had any ([`HeaderRoutes`]). Without those, one
/// allocation shared by every message published with the same pair (the session's route
/// cache holds it), so a message carries one pointer for both names.
#[derive(Debug, PartialEq, Eq)]
pub struct RouteNames {
    exchange: Arc<str>,
    routing_key: Arc<str>,
    /// Extra routing keys (RabbitMQ's sender-selected distribution); `None` for most
    /// messages.
    header_routes: Option<Box<HeaderRoutes>>,
}

impl RouteNames {
    /// The pair, sharing already interned names.
    pub fn new(exchange: Arc<str>, routing_key: Arc<str>) -> RouteNames {
        RouteNames {
            exchange,
            routing_key,
            header_routes: None,
        }
    }

    /// The pair with the extra routing keys of the message's `CC` and `BCC` headers.
    pub fn with_header_routes(
        exchange: Arc<str>,
        routing_key: Arc<str>,
        header_routes: Option<HeaderRoutes>,
    ) -> RouteNames {
        RouteNames {
            exchange,
            routing_key,
            header_routes: header_routes.map(Box::new),
        }
    }

    /// The extra routing keys of the `CC` and `BCC` headers, if the message had any.
    pub fn header_routes(&self) -> Option<&HeaderRoutes> {
        self.header_routes.as_deref()
    }

    /// Every routing key: the one published with, then the `CC` keys, then the `BCC` keys
    /// (RabbitMQ routes with all of them).
    pub fn routing_keys(&self) -> impl Iterator<Item = &str> {
        let extra = self.header_routes.as_deref().map_or(&[][..], |h| h.keys());
        std::iter::once(&*self.routing_key).chain(extra.iter().map(String::as_str))
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
/// [`INLINE_BODY_BYTES_MAX`](crate::broker::message::body::INLINE_BODY_BYTES_MAX) bytes
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

    /// Routing key it was published with (the one deliveries and returns show).
    pub fn routing_key(&self) -> &str {
        self.names.routing_key()
    }

    /// Every key it is routed with: its routing key, then those of its `CC` and `BCC`
    /// headers ([`HeaderRoutes`]).
    pub fn routing_keys(&self) -> impl Iterator<Item = &str> {
        self.names.routing_keys()
    }

    /// The extra routing keys of its `CC` and `BCC` headers, if it had any.
    pub fn header_routes(&self) -> Option<&HeaderRoutes> {
        self.names.header_routes()
    }

    /// A message read back from a queue's store: its `BCC` keys, stored in a `BCC` header
    /// ([`HeaderRoutes::stored_properties`]), and its `CC` keys become its header routes
    /// again and `BCC` leaves its headers. A stored header that is not an array (only a
    /// store written by hand can hold one) is ignored.
    pub fn from_stored(
        exchange: &str,
        routing_key: &str,
        mut properties: BasicProperties,
        body: impl Into<MessageBody>,
    ) -> Message {
        let routes = HeaderRoutes::take(&mut properties).ok().flatten();
        let names = RouteNames::with_header_routes(exchange.into(), routing_key.into(), routes);
        Message::with_names(Arc::new(names), properties.into_boxed(), body)
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
