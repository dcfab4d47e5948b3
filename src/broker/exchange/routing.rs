//! Routing: which destinations a message published to an exchange reaches.
//!
//! An exchange's bindings live in a [`Router`] indexed for the exchange's type
//! (AMQP 0-9-1 §3.1.3): [`DirectRouter`] (exact key, hash lookup), [`FanoutRouter`]
//! (every binding), [`TopicRouter`] (a trie of words with `*` and `#` wildcards) and
//! [`HeadersRouter`] (matching the message's headers table). Routers know nothing of
//! queues or exchanges beyond their names: the broker core resolves [`Destination`]s,
//! follows exchange-to-exchange bindings and removes duplicates.

use super::bindings::IndexedBindings;
use crate::error::{BrokerError, ReplyCode};
use crate::types::field_table::FieldTable;
use std::sync::Arc;

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
/// fanout, recommends topic and headers; RabbitMQ provides all four).
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
}

impl ExchangeKind {
    /// The kind named by an `exchange.declare` type field.
    ///
    /// Names are exact and case-sensitive, as in RabbitMQ.
    ///
    /// # Errors
    /// 503 COMMAND_INVALID with RabbitMQ's text `invalid exchange type 'foo'` for any
    /// name other than `direct`, `fanout`, `topic` and `headers` (RabbitMQ:
    /// `rabbit_exchange:check_type`).
    pub fn parse(s: &str) -> Result<ExchangeKind, BrokerError> {
        match s {
            "direct" => Ok(ExchangeKind::Direct),
            "fanout" => Ok(ExchangeKind::Fanout),
            "topic" => Ok(ExchangeKind::Topic),
            "headers" => Ok(ExchangeKind::Headers),
            other => Err(BrokerError::new(
                ReplyCode::CommandInvalid,
                format!("invalid exchange type '{other}'"),
            )),
        }
    }

    /// The type's name as declared and listed (`direct`, `fanout`, `topic`, `headers`).
    ///
    /// The inverse of [`ExchangeKind::parse`] (AMQP 0-9-1 §3.1.3).
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

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
}

macro_rules! dispatch {
    ($self:expr, $r:ident => $e:expr) => {
        match $self {
            Router::Direct($r) => $e,
            Router::Fanout($r) => $e,
            Router::Topic($r) => $e,
            Router::Headers($r) => $e,
        }
    };
}

impl Router {
    /// An empty router for an exchange of `kind`.
    ///
    /// A newly declared exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new(kind: ExchangeKind) -> Router {
        match kind {
            ExchangeKind::Direct => Router::Direct(DirectRouter::new()),
            ExchangeKind::Fanout => Router::Fanout(FanoutRouter::new()),
            ExchangeKind::Topic => Router::Topic(TopicRouter::new()),
            ExchangeKind::Headers => Router::Headers(HeadersRouter::new()),
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
        }
    }

    /// Validates a binding for this exchange type before it is added.
    ///
    /// Direct, fanout and topic exchanges accept any key (name lengths and UTF-8 are
    /// checked elsewhere). Headers exchanges check `x-match` (RabbitMQ:
    /// `rabbit_exchange_type_headers:validate_binding`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED, in RabbitMQ's wording, when a headers binding's
    /// `x-match` is present but is not the string `all`, `any`, `all-with-x` or
    /// `any-with-x`.
    pub fn validate(&self, binding_key: &str, arguments: &FieldTable) -> Result<(), BrokerError> {
        let _ = binding_key;
        match self {
            Router::Headers(_) => HeadersRouter::validate(arguments),
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
    /// per queue). `headers` is the message's headers table, if any; only headers
    /// exchanges read it, and only headers and fanout exchanges ignore `routing_key`.
    pub fn route(
        &self,
        routing_key: &str,
        headers: Option<&FieldTable>,
        out: &mut Vec<Destination>,
    ) {
        match self {
            Router::Direct(r) => r.route(routing_key, out),
            Router::Fanout(r) => r.route(out),
            Router::Topic(r) => r.route(routing_key, out),
            Router::Headers(r) => r.route(headers, out),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::field_table::FieldValue;

    fn q(name: &str) -> Destination {
        Destination::Queue(Arc::from(name))
    }

    fn binding(dest: Destination, key: &str) -> Binding {
        Binding {
            destination: dest,
            binding_key: key.to_string(),
            arguments: FieldTable::new(),
        }
    }

    #[test]
    fn kinds_parse_and_print() {
        for kind in [
            ExchangeKind::Direct,
            ExchangeKind::Fanout,
            ExchangeKind::Topic,
            ExchangeKind::Headers,
        ] {
            assert_eq!(ExchangeKind::parse(kind.as_str()).unwrap(), kind);
            assert_eq!(Router::new(kind).kind(), kind);
        }
        let err = ExchangeKind::parse("foo").unwrap_err();
        assert_eq!(err.code, ReplyCode::CommandInvalid);
        assert_eq!(err.text, "invalid exchange type 'foo'");
        assert!(ExchangeKind::parse("Direct").is_err());
        assert!(ExchangeKind::parse("").is_err());
    }

    #[test]
    fn dispatch_covers_every_kind() {
        for kind in [
            ExchangeKind::Direct,
            ExchangeKind::Fanout,
            ExchangeKind::Topic,
            ExchangeKind::Headers,
        ] {
            let mut r = Router::new(kind);
            assert!(r.is_empty());
            assert!(r.validate("k", &FieldTable::new()).is_ok());
            assert!(r.add(binding(q("a"), "k")));
            assert!(!r.add(binding(q("a"), "k")));
            assert!(r.add(binding(Destination::Exchange(Arc::from("x")), "k")));
            assert_eq!(r.len(), 2);
            assert_eq!(r.bindings().len(), 2);
            let mut out = Vec::new();
            r.route("k", None, &mut out);
            out.sort();
            assert_eq!(
                out,
                vec![q("a"), Destination::Exchange(Arc::from("x"))],
                "{kind:?}"
            );
            assert!(r.has_destination(&q("a")));
            assert!(!r.has_destination(&Destination::Exchange(Arc::from("a"))));
            assert!(r.remove(&binding(q("a"), "k")));
            assert!(!r.remove(&binding(q("a"), "k")));
            assert_eq!(
                r.remove_destination(&Destination::Exchange(Arc::from("x"))),
                1
            );
            assert!(r.is_empty());
            let mut out = Vec::new();
            r.route("k", None, &mut out);
            assert!(out.is_empty());
        }
    }

    #[test]
    fn validate_dispatches_to_headers_only() {
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
    }
}
