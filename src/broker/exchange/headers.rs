//! Headers exchanges: binding arguments are matched against the message's headers.
//!
//! The binding's `x-match` argument picks the rule (AMQP 0-9-1 §3.1.3.4; RabbitMQ docs:
//! headers exchange, and `rabbit_exchange_type_headers`):
//!
//! - `all` (the default): every binding argument must be present in the headers with an
//!   equal value; with no arguments to check, every message matches.
//! - `any`: at least one must; with none, nothing matches.
//! - `all-with-x` / `any-with-x` (RabbitMQ 3.10+): the same, but arguments whose name
//!   starts with `x-` take part too; under `all`/`any` they are ignored. `x-match`
//!   itself never does.
//!
//! A binding argument with a void value matches on the header's presence alone. Values
//! are compared as RabbitMQ does: integers of any width and signedness by number, the
//! two float types by number, everything else by type and value. The routing key is
//! ignored; a message without headers is matched as if its table were empty.

use super::bindings::{identical_bindings, BindingSet, IndexedBindings};
use super::{Binding, Destination};
use crate::error::BrokerError;
use crate::types::field_table::{FieldTable, FieldValue};

/// The argument naming the match rule.
const X_MATCH: &str = "x-match";

/// Whether every argument or at least one must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    All,
    Any,
}

/// One binding, with its match rule and the arguments that take part, precomputed.
#[derive(Clone, Debug)]
struct Entry {
    binding: Binding,
    rule: Rule,
    pattern: Vec<(String, FieldValue)>,
}

impl Entry {
    fn new(binding: Binding) -> Entry {
        let (rule, with_x) = match binding.arguments.get(X_MATCH).and_then(FieldValue::as_str) {
            Some("any") => (Rule::Any, false),
            Some("all-with-x") => (Rule::All, true),
            Some("any-with-x") => (Rule::Any, true),
            // "all", absent, or (unvalidated) anything else: RabbitMQ defaults to all.
            _ => (Rule::All, false),
        };
        let pattern = binding
            .arguments
            .iter()
            .filter(|(k, _)| k.as_str() != X_MATCH && (with_x || !k.starts_with("x-")))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Entry {
            binding,
            rule,
            pattern,
        }
    }

    fn matches(&self, headers: &FieldTable) -> bool {
        let hit = |(key, wanted): &(String, FieldValue)| {
            headers
                .get(key)
                .is_some_and(|got| value_matches(wanted, got))
        };
        match self.rule {
            Rule::All => self.pattern.iter().all(hit),
            Rule::Any => self.pattern.iter().any(hit),
        }
    }
}

/// Whether a header value `got` satisfies a binding argument `wanted`.
fn value_matches(wanted: &FieldValue, got: &FieldValue) -> bool {
    if *wanted == FieldValue::Void {
        return true;
    }
    if let (Some(a), Some(b)) = (integer(wanted), integer(got)) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (float(wanted), float(got)) {
        return a == b;
    }
    wanted == got
}

/// An integer-typed value as a number (RabbitMQ's `int` type class; timestamps are not
/// integers there).
fn integer(v: &FieldValue) -> Option<i64> {
    Some(match *v {
        FieldValue::I8(x) => x.into(),
        FieldValue::U8(x) => x.into(),
        FieldValue::I16(x) => x.into(),
        FieldValue::U16(x) => x.into(),
        FieldValue::I32(x) => x.into(),
        FieldValue::U32(x) => x.into(),
        FieldValue::I64(x) => x,
        _ => return None,
    })
}

/// A float-typed value as a number (RabbitMQ's `float` type class).
fn float(v: &FieldValue) -> Option<f64> {
    match *v {
        FieldValue::F32(x) => Some(x.into()),
        FieldValue::F64(x) => Some(x),
        _ => None,
    }
}

/// A value roughly as Erlang's `~tp` prints it in RabbitMQ's messages.
fn erlang_term(v: &FieldValue) -> String {
    match v {
        FieldValue::LongString(b) | FieldValue::Bytes(b) => {
            format!("<<\"{}\">>", String::from_utf8_lossy(b).escape_debug())
        }
        FieldValue::Bool(b) => b.to_string(),
        FieldValue::F32(x) => x.to_string(),
        FieldValue::F64(x) => x.to_string(),
        FieldValue::Timestamp(t) => t.to_string(),
        FieldValue::Void => "undefined".to_string(),
        other => match integer(other) {
            Some(i) => i.to_string(),
            None => format!("{other:?}"),
        },
    }
}

/// The bindings of a headers exchange.
///
/// Routing checks each binding's arguments against the message headers, so its cost is
/// linear in the number of bindings (as in RabbitMQ). AMQP 0-9-1 §3.1.3.4; RabbitMQ
/// docs: headers exchange.
#[derive(Clone, Debug, Default)]
pub struct HeadersRouter {
    set: BindingSet,
    entries: Vec<Entry>,
}

impl HeadersRouter {
    /// An empty router.
    ///
    /// A new exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new() -> HeadersRouter {
        HeadersRouter::default()
    }

    /// Checks a headers binding's arguments before it is added.
    ///
    /// `x-match` may be absent or one of the strings `all`, `any`, `all-with-x`,
    /// `any-with-x` (RabbitMQ: `rabbit_exchange_type_headers:validate_binding`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED with RabbitMQ's text: `Invalid x-match field value
    /// <<"foo">>; expected all, any, all-with-x, or any-with-x` for another string, or
    /// `Invalid x-match field type signedint (value 1); expected longstr` for a value
    /// that is not a long string.
    pub fn validate(arguments: &FieldTable) -> Result<(), BrokerError> {
        match arguments.get(X_MATCH) {
            None => Ok(()),
            Some(v @ FieldValue::LongString(_)) => match v.as_str() {
                Some("all" | "any" | "all-with-x" | "any-with-x") => Ok(()),
                _ => Err(BrokerError::precondition(format!(
                    "Invalid x-match field value {}; expected all, any, all-with-x, or any-with-x",
                    erlang_term(v)
                ))),
            },
            Some(other) => Err(BrokerError::precondition(format!(
                "Invalid x-match field type {} (value {}); expected longstr",
                FieldValue::rabbitmq_type_name(other),
                erlang_term(other)
            ))),
        }
    }

    /// Adds a binding; false (and no change) when an identical binding exists.
    ///
    /// Identity is the whole triple, key included even though routing ignores it
    /// (RabbitMQ docs: bindings). Call [`HeadersRouter::validate`] first; an invalid
    /// `x-match` is treated as `all`, as RabbitMQ does for legacy bindings.
    pub fn add(&mut self, binding: Binding) -> bool {
        if !self.set.insert(&binding) {
            return false;
        }
        self.entries.push(Entry::new(binding));
        true
    }

    /// Removes an identical binding; whether one was removed.
    ///
    /// Identity is the whole triple (RabbitMQ docs: bindings).
    pub fn remove(&mut self, binding: &Binding) -> bool {
        if !self.set.remove(binding) {
            return false;
        }
        if let Some(at) = self
            .entries
            .iter()
            .position(|e| identical_bindings(&e.binding, binding))
        {
            self.entries.remove(at);
        }
        true
    }

    /// Removes every binding to `destination`; how many.
    ///
    /// A deleted queue or exchange loses its bindings (AMQP 0-9-1 §3.1.3).
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        let removed = self.set.take_destination(destination).len();
        if removed > 0 {
            self.entries
                .retain(|e| e.binding.destination != *destination);
        }
        removed
    }

    /// Appends the destination of every binding whose arguments match `headers`.
    ///
    /// Missing headers count as an empty table. AMQP 0-9-1 §3.1.3.4; RabbitMQ docs:
    /// headers exchange.
    pub fn route(&self, headers: Option<&FieldTable>, out: &mut Vec<Destination>) {
        let empty = FieldTable::new();
        let headers = headers.unwrap_or(&empty);
        out.extend(
            self.entries
                .iter()
                .filter(|e| e.matches(headers))
                .map(|e| e.binding.destination.clone()),
        );
    }
}

impl IndexedBindings for HeadersRouter {
    fn binding_set(&self) -> &BindingSet {
        &self.set
    }

    /// All bindings, in the order they were added (evaluation order).
    fn bindings(&self) -> Vec<Binding> {
        self.entries.iter().map(|e| e.binding.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::routing::test_support::q;
    use crate::error::ReplyCode;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> FieldValue {
        FieldValue::string(v)
    }

    fn binding(queue: &str, args: &[(&str, FieldValue)]) -> Binding {
        Binding {
            destination: q(queue),
            binding_key: String::new(),
            arguments: table(args),
        }
    }

    /// Whether a router holding only `args` routes a message with `headers`.
    fn matches(args: &[(&str, FieldValue)], headers: Option<&[(&str, FieldValue)]>) -> bool {
        let mut r = HeadersRouter::new();
        HeadersRouter::validate(&table(args)).unwrap();
        assert!(r.add(binding("q", args)));
        let headers = headers.map(table);
        let mut out = Vec::new();
        r.route(headers.as_ref(), &mut out);
        !out.is_empty()
    }

    #[test]
    fn all_is_the_default() {
        let args = [("a", s("1")), ("b", s("2"))];
        let with_all = [("a", s("1")), ("b", s("2")), ("x-match", s("all"))];
        for args in [&args[..], &with_all[..]] {
            assert!(matches(args, Some(&[("a", s("1")), ("b", s("2"))])));
            assert!(matches(
                args,
                Some(&[("a", s("1")), ("b", s("2")), ("c", s("3"))])
            ));
            assert!(!matches(args, Some(&[("a", s("1"))])));
            assert!(!matches(args, Some(&[("a", s("1")), ("b", s("3"))])));
            assert!(!matches(args, Some(&[])));
            assert!(!matches(args, None));
        }
    }

    #[test]
    fn any() {
        let args = [("a", s("1")), ("b", s("2")), ("x-match", s("any"))];
        assert!(matches(&args, Some(&[("a", s("1"))])));
        assert!(matches(&args, Some(&[("b", s("2")), ("c", s("9"))])));
        assert!(matches(&args, Some(&[("a", s("0")), ("b", s("2"))])));
        assert!(!matches(&args, Some(&[("a", s("0")), ("b", s("0"))])));
        assert!(!matches(&args, Some(&[("c", s("1"))])));
        assert!(!matches(&args, None));
    }

    #[test]
    fn no_arguments_all_matches_everything_any_nothing() {
        assert!(matches(&[], None));
        assert!(matches(&[], Some(&[("a", s("1"))])));
        assert!(matches(&[("x-match", s("all"))], None));
        assert!(matches(&[("x-match", s("all")), ("x-foo", s("1"))], None));
        assert!(!matches(&[("x-match", s("any"))], Some(&[("a", s("1"))])));
        assert!(!matches(
            &[("x-match", s("any")), ("x-foo", s("1"))],
            Some(&[("x-foo", s("1"))])
        ));
        assert!(!matches(
            &[("x-match", s("any-with-x"))],
            Some(&[("a", s("1"))])
        ));
        assert!(matches(&[("x-match", s("all-with-x"))], None));
    }

    #[test]
    fn x_arguments_ignored_unless_with_x() {
        let headers: &[(&str, FieldValue)] = &[("a", s("1")), ("x-k", s("v"))];
        let other_x: &[(&str, FieldValue)] = &[("a", s("1")), ("x-k", s("w"))];
        // all: x-k ignored whatever its value in the message.
        let all = [("a", s("1")), ("x-k", s("v"))];
        assert!(matches(&all, Some(headers)));
        assert!(matches(&all, Some(other_x)));
        assert!(matches(&all, Some(&[("a", s("1"))])));
        // any: x-k alone never matches.
        let any = [("x-match", s("any")), ("x-k", s("v")), ("b", s("2"))];
        assert!(!matches(&any, Some(headers)));
        assert!(matches(&any, Some(&[("b", s("2"))])));
        // all-with-x: x-k must match too.
        let all_x = [("x-match", s("all-with-x")), ("a", s("1")), ("x-k", s("v"))];
        assert!(matches(&all_x, Some(headers)));
        assert!(!matches(&all_x, Some(other_x)));
        assert!(!matches(&all_x, Some(&[("a", s("1"))])));
        // any-with-x: x-k alone suffices.
        let any_x = [("x-match", s("any-with-x")), ("x-k", s("v")), ("b", s("2"))];
        assert!(matches(&any_x, Some(headers)));
        assert!(!matches(&any_x, Some(other_x)));
        assert!(matches(&any_x, Some(&[("b", s("2"))])));
        // x-match itself is never compared, even with-x.
        let only_x_match = [("x-match", s("all-with-x"))];
        assert!(matches(&only_x_match, Some(&[("x-match", s("other"))])));
        let any_x_match = [("x-match", s("any-with-x"))];
        assert!(!matches(
            &any_x_match,
            Some(&[("x-match", s("any-with-x"))])
        ));
    }

    #[test]
    fn void_matches_presence() {
        let args = [("a", FieldValue::Void)];
        assert!(matches(&args, Some(&[("a", s("anything"))])));
        assert!(matches(&args, Some(&[("a", FieldValue::I32(7))])));
        assert!(matches(&args, Some(&[("a", FieldValue::Void)])));
        assert!(!matches(&args, Some(&[("b", s("1"))])));
        assert!(!matches(&args, None));
        let any = [
            ("x-match", s("any")),
            ("a", FieldValue::Void),
            ("b", s("2")),
        ];
        assert!(matches(&any, Some(&[("a", FieldValue::Bool(false))])));
        // A void header does not match a non-void argument.
        assert!(!matches(&[("a", s("1"))], Some(&[("a", FieldValue::Void)])));
    }

    #[test]
    fn value_equality() {
        use FieldValue::*;
        let cases: &[(FieldValue, FieldValue, bool)] = &[
            (I64(1), I32(1), true),
            (I8(-1), I64(-1), true),
            (U8(200), I16(200), true),
            (U32(4_000_000_000), I64(4_000_000_000), true),
            (U16(1), I32(2), false),
            (I32(-1), U32(u32::MAX), false),
            (F32(1.5), F64(1.5), true),
            (F64(0.1), F32(0.1), false),
            (I32(1), F64(1.0), false),
            (I64(1), s("1"), false),
            (I64(5), Timestamp(5), false),
            (Timestamp(5), Timestamp(5), true),
            (Bool(true), Bool(true), true),
            (Bool(true), I8(1), false),
            (s("abc"), s("abc"), true),
            (s("abc"), s("ABC"), false),
            (s("abc"), Bytes(b"abc".to_vec()), false),
            (LongString(vec![0xff, 0]), LongString(vec![0xff, 0]), true),
            (Decimal(2, 100), Decimal(2, 100), true),
            (Array(vec![I32(1)]), Array(vec![I32(1)]), true),
        ];
        for (wanted, got, expected) in cases {
            assert_eq!(
                matches(&[("k", wanted.clone())], Some(&[("k", got.clone())])),
                *expected,
                "{wanted:?} vs {got:?}"
            );
        }
    }

    #[test]
    fn routing_key_is_ignored_and_many_bindings() {
        let mut r = HeadersRouter::new();
        assert!(r.add(binding("q1", &[("a", s("1"))])));
        assert!(r.add(binding("q2", &[("a", s("2"))])));
        assert!(r.add(binding(
            "q3",
            &[("x-match", s("any")), ("a", s("1")), ("b", s("1"))]
        )));
        assert!(r.add(binding("q4", &[])));
        let headers = table(&[("a", s("1"))]);
        let mut out = Vec::new();
        r.route(Some(&headers), &mut out);
        out.sort();
        assert_eq!(out, vec![q("q1"), q("q3"), q("q4")]);
        let mut out = Vec::new();
        r.route(None, &mut out);
        assert_eq!(out, vec![q("q4")]);
    }

    #[test]
    fn identity_and_removal() {
        let mut r = HeadersRouter::new();
        let b1 = binding("q1", &[("a", s("1"))]);
        let b1_any = binding("q1", &[("a", s("1")), ("x-match", s("any"))]);
        let b1_key = Binding {
            binding_key: "k".into(),
            ..b1.clone()
        };
        assert!(r.add(b1.clone()));
        assert!(!r.add(b1.clone()));
        assert!(r.add(b1_any.clone()));
        assert!(r.add(b1_key.clone()));
        assert!(r.add(binding("q2", &[("a", s("1"))])));
        assert_eq!(r.len(), 4);
        assert_eq!(r.bindings().len(), 4);
        assert!(r.remove(&b1_any));
        assert!(!r.remove(&b1_any));
        assert_eq!(r.len(), 3);
        assert_eq!(
            r.bindings(),
            vec![b1.clone(), b1_key, binding("q2", &[("a", s("1"))])]
        );
        assert_eq!(r.remove_destination(&q("q1")), 2);
        assert!(!r.has_destination(&q("q1")));
        assert!(r.has_destination(&q("q2")));
        let headers = table(&[("a", s("1"))]);
        let mut out = Vec::new();
        r.route(Some(&headers), &mut out);
        assert_eq!(out, vec![q("q2")]);
        assert_eq!(r.remove_destination(&q("q2")), 1);
        assert_eq!(r.len(), 0);
        assert!(r.entries.is_empty());
        let mut out = Vec::new();
        r.route(Some(&headers), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn invalid_x_match_is_rejected() {
        for ok in ["all", "any", "all-with-x", "any-with-x"] {
            assert!(HeadersRouter::validate(&table(&[("x-match", s(ok))])).is_ok());
        }
        assert!(HeadersRouter::validate(&table(&[("a", FieldValue::I8(1))])).is_ok());
        let err = HeadersRouter::validate(&table(&[("x-match", s("foo"))])).unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
        assert_eq!(
            err.text,
            "Invalid x-match field value <<\"foo\">>; expected all, any, all-with-x, or any-with-x"
        );
        for bad in ["ALL", "", " all", "any-with-X"] {
            let err = HeadersRouter::validate(&table(&[("x-match", s(bad))])).unwrap_err();
            assert_eq!(err.code, ReplyCode::PreconditionFailed, "{bad:?}");
        }
        let err = HeadersRouter::validate(&table(&[("x-match", FieldValue::I32(1))])).unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
        assert_eq!(
            err.text,
            "Invalid x-match field type signedint (value 1); expected longstr"
        );
        let err = HeadersRouter::validate(&table(&[("x-match", FieldValue::Void)])).unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
        let err =
            HeadersRouter::validate(&table(&[("x-match", FieldValue::Bytes(b"all".to_vec()))]))
                .unwrap_err();
        assert_eq!(err.code, ReplyCode::PreconditionFailed);
    }
}
