//! Routing: which destinations a message published to an exchange reaches.
//!
//! An exchange's bindings live in a [`Router`] indexed for the exchange's type
//! (AMQP 0-9-1 §3.1.3): [`DirectRouter`] (exact key, hash lookup), [`FanoutRouter`]
//! (every binding), [`TopicRouter`] (a trie of words with `*` and `#` wildcards),
//! [`HeadersRouter`] (matching the message's headers table) and [`ConsistentHashRouter`]
//! (RabbitMQ's `x-consistent-hash`: one destination picked on a weighted hash ring). Routers
//! know nothing of
//! queues or exchanges beyond their names: the broker core resolves [`Destination`]s,
//! follows exchange-to-exchange bindings and removes duplicates.

use super::bindings::IndexedBindings;
use crate::error::{BrokerError, ReplyCode};
use crate::types::field_table::FieldTable;
use crate::types::BasicProperties;
use std::sync::Arc;

pub use super::consistent_hash::{
    binding_weight, ConsistentHashRouter, HashProperty, HashSource, BINDING_WEIGHT_MAX,
    HASH_HEADER_ARGUMENT, HASH_PROPERTIES, HASH_PROPERTY_ARGUMENT,
};
pub use super::direct::DirectRouter;
pub use super::fanout::FanoutRouter;
pub use super::headers::HeadersRouter;
pub use super::topic::TopicRouter;

/// Where a binding leads: a queue or (exchange-to-exchange binding) another exchange.
///
/// Exchange-to-exchange bindings are a RabbitMQ extension to AMQP 0-9-1 (RabbitMQ docs:
/// exchange-to-exchange bindings); the core routes onwards from the destination exchange.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// A queue, by name.
    Queue(Arc<str>),
    /// An exchange, by name.
    Exchange(Arc<str>),
}

/// A binding from an exchange to a destination.
///
/// Identity is the whole triple: two bindings differing only in arguments are distinct
/// (RabbitMQ docs: bindings; `queue.bind` is idempotent only for an identical triple,
/// AMQP 0-9-1 §3.1.3). Routers compare arguments structurally, with floats compared by
/// bit pattern so that a binding with a NaN argument can still be removed.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// The queue or exchange the binding leads to.
    pub destination: Destination,
    /// The binding key (routing key pattern for topic exchanges, ignored by fanout and
    /// headers exchanges).
    pub binding_key: String,
    /// The binding's arguments (the match table for headers exchanges).
    pub arguments: FieldTable,
}

/// Exchange types.
///
/// The four standard types of AMQP 0-9-1 §3.1.3 (the specification requires direct and
/// fanout, recommends topic and headers; RabbitMQ provides all four), and RabbitMQ's
/// plugin type `x-consistent-hash` (`rabbitmq_consistent_hash_exchange`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    /// `direct`: the binding key equals the routing key (AMQP 0-9-1 §3.1.3.1).
    Direct,
    /// `fanout`: every bound destination, the key ignored (AMQP 0-9-1 §3.1.3.2).
    Fanout,
    /// `topic`: the binding key is a pattern of words with `*` and `#` wildcards
    /// (AMQP 0-9-1 §3.1.3.3).
    Topic,
    /// `headers`: the binding arguments are matched against the message headers
    /// (AMQP 0-9-1 §3.1.3.4).
    Headers,
    /// `x-consistent-hash`: one destination, picked by hashing the routing key (or a
    /// header, or a property) on a ring where each binding's key is its weight (RabbitMQ's
    /// plugin `rabbitmq_consistent_hash_exchange`).
    ConsistentHash,
    /// `x-delayed-message`: routes as the type its `x-delayed-type` argument names, a
    /// message with a positive `x-delay` header once that many ms have passed (RabbitMQ's
    /// archived plugin `rabbitmq_delayed_message_exchange`; `crate::broker::delayed`).
    DelayedMessage,
}

impl ExchangeKind {
    /// The kind named by an `exchange.declare` type field.
    ///
    /// Names are exact and case-sensitive, as in RabbitMQ.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED (a channel error) with RabbitMQ 4.x's text `unknown exchange
    /// type 'foo'` for any
    /// name other than `direct`, `fanout`, `topic`, `headers`, `x-consistent-hash` and
    /// `x-delayed-message` (RabbitMQ: `rabbit_exchange:check_type`).
    pub fn parse(s: &str) -> Result<ExchangeKind, BrokerError> {
        match s {
            "direct" => Ok(ExchangeKind::Direct),
            "fanout" => Ok(ExchangeKind::Fanout),
            "topic" => Ok(ExchangeKind::Topic),
            "headers" => Ok(ExchangeKind::Headers),
            "x-consistent-hash" => Ok(ExchangeKind::ConsistentHash),
            "x-delayed-message" => Ok(ExchangeKind::DelayedMessage),
            other => Err(BrokerError::new(
                ReplyCode::PreconditionFailed,
                format!("unknown exchange type '{other}'"),
            )),
        }
    }

    /// The type's name as declared and listed (`direct`, `fanout`, `topic`, `headers`,
    /// `x-consistent-hash`).
    ///
    /// The inverse of [`ExchangeKind::parse`] (AMQP 0-9-1 §3.1.3).
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::ConsistentHash => "x-consistent-hash",
            ExchangeKind::DelayedMessage => "x-delayed-message",
        }
    }

    /// The type a delayed-message exchange declared with `arguments` routes as: its
    /// `x-delayed-type` argument.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED with the plugin's texts (`rabbit_exchange_type_delayed_message:
    /// validate`) when the argument is absent or not a string, or names
    /// `x-delayed-message`; 503 COMMAND_INVALID for an unknown type, as
    /// [`ExchangeKind::parse`].
    pub fn delayed_type(arguments: &FieldTable) -> Result<ExchangeKind, BrokerError> {
        match arguments
            .get(DELAYED_TYPE_ARGUMENT)
            .and_then(|v| v.as_str())
        {
            Some("x-delayed-message") => Err(BrokerError::precondition(
                "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'",
            )),
            Some(t) => ExchangeKind::parse(t),
            None => Err(BrokerError::precondition(
                "Invalid argument, 'x-delayed-type' must be an existing exchange type",
            )),
        }
    }
}

/// The argument of an `x-delayed-message` exchange naming the type it routes as
/// (RabbitMQ's delayed-message plugin).
pub const DELAYED_TYPE_ARGUMENT: &str = "x-delayed-type";

/// The bindings of one exchange, indexed for its type.
///
/// Dispatches to the router of the exchange's kind (AMQP 0-9-1 §3.1.3). Every variant
/// offers the same operations; see the methods below.
#[derive(Clone, Debug)]
pub enum Router {
    /// A direct exchange's bindings.
    Direct(DirectRouter),
    /// A fanout exchange's bindings.
    Fanout(FanoutRouter),
    /// A topic exchange's bindings.
    Topic(TopicRouter),
    /// A headers exchange's bindings.
    Headers(HeadersRouter),
    /// A consistent-hash exchange's bindings and ring.
    ConsistentHash(ConsistentHashRouter),
}

macro_rules! dispatch {
    ($self:expr, $r:ident => $e:expr) => {
        match $self {
            Router::Direct($r) => $e,
            Router::Fanout($r) => $e,
            Router::Topic($r) => $e,
            Router::Headers($r) => $e,
            Router::ConsistentHash($r) => $e,
        }
    };
}

impl Router {
    /// An empty router for an exchange of `kind` declared without arguments.
    ///
    /// A newly declared exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new(kind: ExchangeKind) -> Router {
        Router::with_arguments(kind, &FieldTable::new())
    }

    /// An empty router for an exchange of `kind` declared with `arguments`: a
    /// consistent-hash exchange hashes what its `hash-header` / `hash-property` names
    /// ([`HashSource::from_arguments`]); a delayed-message exchange gets the router of its
    /// `x-delayed-type` ([`ExchangeKind::delayed_type`]); other types ignore them here.
    ///
    /// Arguments were checked when the exchange was declared; ones that do not pass (only
    /// a store edited by hand can hold them) fall back to hashing the routing key.
    pub fn with_arguments(kind: ExchangeKind, arguments: &FieldTable) -> Router {
        match kind {
            ExchangeKind::DelayedMessage => {
                // Checked at declaration; a store edited by hand falls back to direct.
                let inner = ExchangeKind::delayed_type(arguments)
                    .ok()
                    .filter(|k| *k != ExchangeKind::DelayedMessage)
                    .unwrap_or(ExchangeKind::Direct);
                Router::with_arguments(inner, arguments)
            }
            ExchangeKind::Direct => Router::Direct(DirectRouter::new()),
            ExchangeKind::Fanout => Router::Fanout(FanoutRouter::new()),
            ExchangeKind::Topic => Router::Topic(TopicRouter::new()),
            ExchangeKind::Headers => Router::Headers(HeadersRouter::new()),
            ExchangeKind::ConsistentHash => {
                let source = HashSource::from_arguments(arguments, "", "").unwrap_or_default();
                Router::ConsistentHash(ConsistentHashRouter::new(source))
            }
        }
    }

    /// The exchange type this router implements.
    ///
    /// Fixed at creation (AMQP 0-9-1 §3.1.3: an exchange's type cannot change).
    pub fn kind(&self) -> ExchangeKind {
        match self {
            Router::Direct(_) => ExchangeKind::Direct,
            Router::Fanout(_) => ExchangeKind::Fanout,
            Router::Topic(_) => ExchangeKind::Topic,
            Router::Headers(_) => ExchangeKind::Headers,
            Router::ConsistentHash(_) => ExchangeKind::ConsistentHash,
        }
    }

    /// Validates a binding for this exchange type before it is added.
    ///
    /// Direct, fanout and topic exchanges accept any key (name lengths and UTF-8 are
    /// checked elsewhere). Headers exchanges check `x-match` (RabbitMQ:
    /// `rabbit_exchange_type_headers:validate_binding`); consistent-hash exchanges check
    /// the key is a weight (RabbitMQ's plugin, `validate_binding/2`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED, in RabbitMQ's wording, when a headers binding's
    /// `x-match` is present but is not the string `all`, `any`, `all-with-x` or
    /// `any-with-x`, or when a consistent-hash binding's key is not an integer from 1 to
    /// [`BINDING_WEIGHT_MAX`] ([`binding_weight`]).
    pub fn validate(&self, binding_key: &str, arguments: &FieldTable) -> Result<(), BrokerError> {
        match self {
            Router::Headers(_) => HeadersRouter::validate(arguments),
            Router::ConsistentHash(_) => ConsistentHashRouter::validate(binding_key),
            Router::Direct(_) | Router::Fanout(_) | Router::Topic(_) => Ok(()),
        }
    }

    /// Adds a binding; returns false (and changes nothing) when an identical binding
    /// exists.
    ///
    /// Binding twice is not an error (AMQP 0-9-1 §3.1.3, `queue.bind` is idempotent;
    /// RabbitMQ docs: bindings). Call [`Router::validate`] first.
    pub fn add(&mut self, binding: Binding) -> bool {
        dispatch!(self, r => r.add(binding))
    }

    /// Removes an identical binding; returns whether one was removed.
    ///
    /// Identity is the whole triple (RabbitMQ: `queue.unbind` must repeat the arguments).
    pub fn remove(&mut self, binding: &Binding) -> bool {
        dispatch!(self, r => r.remove(binding))
    }

    /// Removes every binding to `destination` (when a queue or exchange is deleted);
    /// returns how many.
    ///
    /// Deleting a queue deletes its bindings (AMQP 0-9-1 §3.1.3; RabbitMQ does the same
    /// for exchange-to-exchange bindings when the destination exchange goes).
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        dispatch!(self, r => r.remove_destination(destination))
    }

    /// Appends every destination the message reaches.
    ///
    /// May append duplicates (the caller dedupes: AMQP 0-9-1 §3.1.3 delivers one copy
    /// per queue). `properties` are the message's; headers exchanges read its headers,
    /// consistent-hash exchanges the header or property they hash, if any. Headers and
    /// fanout exchanges ignore `routing_key`, and so does a consistent-hash exchange that
    /// hashes a header or property.
    pub fn route(
        &self,
        routing_key: &str,
        properties: &BasicProperties,
        out: &mut Vec<Destination>,
    ) {
        match self {
            Router::Direct(r) => r.route(routing_key, out),
            Router::Fanout(r) => r.route(out),
            Router::Topic(r) => r.route(routing_key, out),
            Router::Headers(r) => r.route(properties.headers.as_ref(), out),
            Router::ConsistentHash(r) => r.route(routing_key, properties, out),
        }
    }

    /// Whether what [`Router::route`] appends depends on the routing key and the bindings
    /// alone, so a route may be cached per exchange and routing key
    /// (`topology::RouteCache`): not for a headers exchange, nor for a consistent-hash
    /// exchange hashing a header or property.
    pub fn routes_on_key_alone(&self) -> bool {
        match self {
            Router::Headers(_) => false,
            Router::ConsistentHash(r) => *r.source() == HashSource::RoutingKey,
            Router::Direct(_) | Router::Fanout(_) | Router::Topic(_) => true,
        }
    }

    /// Whether the exchange routes each message once, with the routing key it was
    /// published with, rather than once per routing key (its own and its `CC`/`BCC`
    /// keys): fanout and headers exchanges ignore keys, and RabbitMQ's consistent-hash
    /// plugin hashes only the first routing key.
    pub fn routes_once(&self) -> bool {
        match self {
            Router::Fanout(_) | Router::Headers(_) | Router::ConsistentHash(_) => true,
            Router::Direct(_) | Router::Topic(_) => false,
        }
    }

    /// All bindings (any order), for listing and deletion.
    ///
    /// RabbitMQ lists bindings with their arguments (RabbitMQ docs: bindings).
    pub fn bindings(&self) -> Vec<Binding> {
        dispatch!(self, r => r.bindings())
    }

    /// Number of bindings.
    ///
    /// Counts distinct triples (RabbitMQ docs: bindings).
    pub fn len(&self) -> usize {
        dispatch!(self, r => r.len())
    }

    /// Whether the exchange has no bindings.
    ///
    /// Used for auto-delete exchanges (AMQP 0-9-1 §1.6.2.1 `exchange.declare`
    /// auto-delete: deleted when the last binding goes).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a binding identical to `binding` (destination, key and arguments) exists
    /// (binding identity is the whole triple, RabbitMQ docs: bindings).
    ///
    /// Used for `queue.unbind` / `exchange.unbind`, which succeed without one (RabbitMQ's
    /// `rabbit_db_binding:delete`), and by a definitions import, which counts such a
    /// binding as already there.
    pub fn contains(&self, binding: &Binding) -> bool {
        dispatch!(self, r => r.contains(binding))
    }

    /// Whether any binding leads to `destination`.
    ///
    /// Used for `exchange.delete` with if-unused (AMQP 0-9-1 §1.6.2.3) and listings.
    pub fn has_destination(&self, destination: &Destination) -> bool {
        dispatch!(self, r => r.has_destination(destination))
    }
}

/// Shorthands for the exchange types' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{Binding, Destination};
    use crate::types::FieldTable;
    use std::sync::Arc;

    /// A queue destination named `name`.
    pub(crate) fn q(name: &str) -> Destination {
        Destination::Queue(Arc::from(name))
    }

    /// A binding to `dest` with `key` and no arguments.
    pub(crate) fn binding(dest: Destination, key: &str) -> Binding {
        Binding {
            destination: dest,
            binding_key: key.to_string(),
            arguments: FieldTable::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::routing::test_support::{binding, q};
    use crate::types::field_table::FieldValue;

    const KINDS: [ExchangeKind; 5] = [
        ExchangeKind::Direct,
        ExchangeKind::Fanout,
        ExchangeKind::Topic,
        ExchangeKind::Headers,
        ExchangeKind::ConsistentHash,
    ];

    /// A binding key every kind accepts (a consistent-hash weight).
    const KEY: &str = "1";

    #[test]
    fn kinds_parse_and_print() {
        for kind in KINDS {
            assert_eq!(ExchangeKind::parse(kind.as_str()).unwrap(), kind);
            assert_eq!(Router::new(kind).kind(), kind);
        }
        let err = ExchangeKind::parse("foo").unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
        assert_eq!(err.text, "unknown exchange type 'foo'");
        assert!(ExchangeKind::parse("Direct").is_err());
        assert!(ExchangeKind::parse("consistent-hash").is_err());
        assert!(ExchangeKind::parse("").is_err());
    }

    #[test]
    fn dispatch_covers_every_kind() {
        for kind in KINDS {
            let mut r = Router::new(kind);
            assert!(r.is_empty());
            assert!(r.validate(KEY, &FieldTable::new()).is_ok());
            assert!(r.add(binding(q("a"), KEY)));
            assert!(!r.add(binding(q("a"), KEY)));
            assert!(r.add(binding(Destination::Exchange(Arc::from("x")), KEY)));
            assert_eq!(r.len(), 2);
            assert_eq!(r.bindings().len(), 2);
            let mut out = Vec::new();
            r.route(KEY, &BasicProperties::default(), &mut out);
            out.sort();
            let both = vec![q("a"), Destination::Exchange(Arc::from("x"))];
            if kind == ExchangeKind::ConsistentHash {
                // One destination of the two, whichever the hash picks.
                assert_eq!(out.len(), 1);
                assert!(both.contains(&out[0]));
            } else {
                assert_eq!(out, both, "{kind:?}");
            }
            assert!(r.has_destination(&q("a")));
            assert!(!r.has_destination(&Destination::Exchange(Arc::from("a"))));
            assert!(r.remove(&binding(q("a"), KEY)));
            assert!(!r.remove(&binding(q("a"), KEY)));
            assert_eq!(
                r.remove_destination(&Destination::Exchange(Arc::from("x"))),
                1
            );
            assert!(r.is_empty());
            let mut out = Vec::new();
            r.route(KEY, &BasicProperties::default(), &mut out);
            assert!(out.is_empty());
        }
    }

    #[test]
    fn only_key_routed_exchanges_may_be_cached_per_key() {
        let header: FieldTable = [(HASH_HEADER_ARGUMENT.to_string(), FieldValue::string("h"))]
            .into_iter()
            .collect();
        assert!(Router::new(ExchangeKind::Direct).routes_on_key_alone());
        assert!(Router::new(ExchangeKind::Topic).routes_on_key_alone());
        assert!(Router::new(ExchangeKind::Fanout).routes_on_key_alone());
        assert!(!Router::new(ExchangeKind::Headers).routes_on_key_alone());
        assert!(Router::new(ExchangeKind::ConsistentHash).routes_on_key_alone());
        let r = Router::with_arguments(ExchangeKind::ConsistentHash, &header);
        assert!(!r.routes_on_key_alone());
        assert!(r.routes_once());
        assert!(!Router::new(ExchangeKind::Topic).routes_once());
    }

    #[test]
    fn validate_dispatches_to_headers_and_consistent_hash_only() {
        let mut args = FieldTable::new();
        args.insert("x-match".into(), FieldValue::string("some"));
        for kind in [
            ExchangeKind::Direct,
            ExchangeKind::Fanout,
            ExchangeKind::Topic,
        ] {
            assert!(Router::new(kind).validate("#.a", &args).is_ok());
        }
        let err = Router::new(ExchangeKind::Headers)
            .validate("", &args)
            .unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
        let err = Router::new(ExchangeKind::ConsistentHash)
            .validate("#.a", &FieldTable::new())
            .unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
    }
}
