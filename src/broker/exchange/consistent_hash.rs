//! Consistent-hash exchanges (`x-consistent-hash`, RabbitMQ's bundled plugin
//! `rabbitmq_consistent_hash_exchange`): each message goes to one bound destination, picked
//! by hashing its routing key, one of its headers or one of its properties; a binding's key
//! is its weight.
//!
//! The ring is the plugin's (`rabbit_exchange_type_consistent_hash.erl`): every destination
//! owns a run of `weight` consecutive buckets, runs in the order the destinations were
//! bound, and a message's bucket is Lamping and Veach's jump consistent hash of its value
//! over the total number of buckets. Adding a destination appends buckets, so only about
//! `weight / total` of the values move to it. The bucket is mapped to its destination by a
//! binary search of the runs' ends: routing costs O(log buckets) for the jump hash and
//! O(log destinations) for the search, whatever the weights.
//!
//! The value's 64-bit hash is FNV-1a with MurmurHash3's finaliser, not Erlang's `phash2`
//! seeding `exs1024` as in RabbitMQ: the spread over the buckets is the same (uniform), the
//! bucket a given value lands in is not.

use super::bindings::{identical_tables, BindingSet, IndexedBindings};
use super::{Binding, Destination};
use crate::error::BrokerError;
use crate::types::field_table::{FieldTable, FieldValue};
use crate::types::BasicProperties;

/// Largest binding weight, in buckets (RabbitMQ's `MAX_BINDING_WEIGHT`).
pub const BINDING_WEIGHT_MAX: u32 = 10_000;

/// The exchange argument naming the header whose value is hashed instead of the routing
/// key (RabbitMQ's plugin).
pub const HASH_HEADER_ARGUMENT: &str = "hash-header";

/// The exchange argument naming the property whose value is hashed instead of the routing
/// key (RabbitMQ's plugin); one of [`HASH_PROPERTIES`].
pub const HASH_PROPERTY_ARGUMENT: &str = "hash-property";

/// The properties `hash-property` may name, as RabbitMQ's plugin spells them (its
/// `PROPERTIES`).
pub const HASH_PROPERTIES: [&str; 3] = ["correlation_id", "message_id", "timestamp"];

/// A message property a consistent-hash exchange can hash (`hash-property`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashProperty {
    /// `correlation_id`.
    CorrelationId,
    /// `message_id`.
    MessageId,
    /// `timestamp` (seconds since the Unix epoch).
    Timestamp,
}

/// What a consistent-hash exchange hashes to pick a message's destination.
///
/// Chosen by the exchange's arguments (RabbitMQ's plugin, `hash_on/1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum HashSource {
    /// The routing key the message was published with (its `CC`/`BCC` keys are not
    /// hashed: the plugin takes the first routing key only). The default.
    #[default]
    RoutingKey,
    /// The value of the named header (`hash-header`).
    Header(Box<str>),
    /// The named property (`hash-property`).
    Property(HashProperty),
}

impl HashSource {
    /// The source an exchange declared with `arguments` hashes, checked as RabbitMQ's
    /// plugin checks it when the exchange is declared (`validate/1`). `exchange` and
    /// `vhost` only name the exchange in an error.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED with the plugin's texts: `hash-header and hash-property are
    /// mutually exclusive` when both are given, `Unsupported property: app_id` for a
    /// property outside [`HASH_PROPERTIES`]; and `invalid arg 'hash-header' for exchange
    /// 'x' in vhost '/': 5 is not a string` for a value that is not a string (the plugin
    /// fails on one with an internal error).
    pub fn from_arguments(
        arguments: &FieldTable,
        exchange: &str,
        vhost: &str,
    ) -> Result<HashSource, BrokerError> {
        let string_argument = |name: &str| -> Result<Option<&str>, BrokerError> {
            match arguments.get(name) {
                None => Ok(None),
                Some(v) => match v.as_str() {
                    Some(s) => Ok(Some(s)),
                    None => Err(BrokerError::precondition(format!(
                        "invalid arg '{name}' for exchange '{exchange}' in vhost '{vhost}': \
                         {} is not a string",
                        v.to_json()
                    ))),
                },
            }
        };
        let header = string_argument(HASH_HEADER_ARGUMENT)?;
        let property = string_argument(HASH_PROPERTY_ARGUMENT)?;
        match (header, property) {
            (None, None) => Ok(HashSource::RoutingKey),
            (Some(h), None) => Ok(HashSource::Header(h.into())),
            (None, Some(p)) => match p {
                "correlation_id" => Ok(HashSource::Property(HashProperty::CorrelationId)),
                "message_id" => Ok(HashSource::Property(HashProperty::MessageId)),
                "timestamp" => Ok(HashSource::Property(HashProperty::Timestamp)),
                other => Err(BrokerError::precondition(format!(
                    "Unsupported property: {other}"
                ))),
            },
            (Some(_), Some(_)) => Err(BrokerError::precondition(
                "hash-header and hash-property are mutually exclusive",
            )),
        }
    }

    /// The 64-bit hash of what this source takes from a message published with
    /// `routing_key` and `properties`.
    ///
    /// A missing header or property (or a header with no value) hashes to one fixed value,
    /// so all such messages go to the same destination, as in RabbitMQ's plugin (it hashes
    /// `undefined`). A header holding an array hashes its first element, as the plugin
    /// does; integers hash by value whatever their width.
    pub fn hash(&self, routing_key: &str, properties: &BasicProperties) -> u64 {
        match self {
            HashSource::RoutingKey => hash_bytes(routing_key.as_bytes()),
            HashSource::Header(name) => properties
                .headers
                .as_ref()
                .and_then(|h| h.get(&**name))
                .map_or(MISSING_VALUE_HASH, hash_value),
            HashSource::Property(HashProperty::CorrelationId) => properties
                .correlation_id
                .as_deref()
                .map_or(MISSING_VALUE_HASH, |s| hash_bytes(s.as_bytes())),
            HashSource::Property(HashProperty::MessageId) => properties
                .message_id
                .as_deref()
                .map_or(MISSING_VALUE_HASH, |s| hash_bytes(s.as_bytes())),
            HashSource::Property(HashProperty::Timestamp) => properties
                .timestamp
                .map_or(MISSING_VALUE_HASH, hash_integer),
        }
    }
}

/// The weight a consistent-hash binding key gives, in buckets: a decimal integer
/// (optionally signed, nothing around it) from 1 to [`BINDING_WEIGHT_MAX`].
///
/// RabbitMQ's plugin, `validate_binding/2` (Erlang's `list_to_integer`).
///
/// # Errors
/// 406 PRECONDITION_FAILED with the plugin's texts: `The binding key must be an integer:
/// <<"abc">>`, `The binding key must be greater than 0`, `The binding key must not exceed
/// 10000`.
pub fn binding_weight(binding_key: &str) -> Result<u32, BrokerError> {
    let (negative, digits) = match binding_key.as_bytes().first() {
        Some(b'-') => (true, &binding_key[1..]),
        Some(b'+') => (false, &binding_key[1..]),
        _ => (false, binding_key),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BrokerError::precondition(format!(
            "The binding key must be an integer: {}",
            erlang_binary(binding_key)
        )));
    }
    let significant = digits.trim_start_matches('0');
    if negative || significant.is_empty() {
        return Err(BrokerError::precondition(
            "The binding key must be greater than 0",
        ));
    }
    match significant.parse::<u32>() {
        Ok(w) if w <= BINDING_WEIGHT_MAX => Ok(w),
        _ => Err(BrokerError::precondition(format!(
            "The binding key must not exceed {BINDING_WEIGHT_MAX}"
        ))),
    }
}

/// A binary as Erlang's `~tp` prints it in RabbitMQ's messages: `<<"abc">>`, or
/// `<<"é"/utf8>>` when it is not ASCII.
fn erlang_binary(s: &str) -> String {
    let suffix = if s.is_ascii() { "" } else { "/utf8" };
    format!("<<\"{}\"{suffix}>>", s.escape_debug())
}

/// One destination's run of buckets on the ring.
#[derive(Clone, Debug)]
struct Member {
    destination: Destination,
    /// The destination's bindings in the order they were added: binding key, arguments,
    /// weight. The first one's weight is the run's length (the plugin counts one binding
    /// per destination: later ones do not change the ring).
    bindings: Vec<(String, FieldTable, u32)>,
}

impl Member {
    /// Buckets the destination owns.
    fn weight(&self) -> u64 {
        self.bindings.first().map_or(0, |b| u64::from(b.2))
    }
}

/// The bindings of a consistent-hash exchange, with the ring built from them.
///
/// A message reaches exactly one destination while any is bound (none otherwise), chosen
/// by its [`HashSource`] (RabbitMQ's plugin `rabbitmq_consistent_hash_exchange`). Binding
/// and unbinding rebuild the runs' ends, linear in the number of destinations (as the
/// plugin's ring updates); routing is logarithmic.
#[derive(Clone, Debug, Default)]
pub struct ConsistentHashRouter {
    set: BindingSet,
    source: HashSource,
    /// Destinations in ring order (the order they were first bound).
    members: Vec<Member>,
    /// `ends[i]`: one past the last bucket of `members[i]`, so `ends` is non-decreasing
    /// and its last value is the total number of buckets.
    ends: Vec<u64>,
}

impl ConsistentHashRouter {
    /// An empty ring hashing `source`.
    ///
    /// A new exchange has no bindings (AMQP 0-9-1 §3.1.3).
    pub fn new(source: HashSource) -> ConsistentHashRouter {
        ConsistentHashRouter {
            source,
            ..ConsistentHashRouter::default()
        }
    }

    /// What this exchange hashes.
    ///
    /// Fixed when the exchange is declared (its `hash-header` / `hash-property`).
    pub fn source(&self) -> &HashSource {
        &self.source
    }

    /// Checks a binding key is a weight ([`binding_weight`]), before the binding is added.
    ///
    /// # Errors
    /// As [`binding_weight`].
    pub fn validate(binding_key: &str) -> Result<(), BrokerError> {
        binding_weight(binding_key).map(|_| ())
    }

    /// Adds a binding; false (and no change) when an identical binding exists.
    ///
    /// A destination's first binding gives it `weight` buckets at the end of the ring;
    /// further bindings to the same destination are kept (listed, removable) but do not
    /// change the ring, as in RabbitMQ's plugin ("only the first one will actually update
    /// the ring"). A key that is not a valid weight (only a store edited by hand can hold
    /// one: binds are validated) gives no buckets.
    pub fn add(&mut self, binding: Binding) -> bool {
        if !self.set.insert(&binding) {
            return false;
        }
        let weight = binding_weight(&binding.binding_key).unwrap_or(0);
        let entry = (binding.binding_key, binding.arguments, weight);
        match self.member_mut(&binding.destination) {
            Some(m) => m.bindings.push(entry),
            None => self.members.push(Member {
                destination: binding.destination,
                bindings: vec![entry],
            }),
        }
        self.rebuild_ends();
        true
    }

    /// Removes an identical binding; whether one was removed.
    ///
    /// The destination keeps its place on the ring while it has another binding (with the
    /// weight of its oldest remaining one); its last binding takes its buckets off, and the
    /// runs after it move down (the plugin's `ch_hash_ring_delete_fun`).
    pub fn remove(&mut self, binding: &Binding) -> bool {
        if !self.set.remove(binding) {
            return false;
        }
        if let Some(i) = self.member_index(&binding.destination) {
            let bindings = &mut self.members[i].bindings;
            if let Some(at) = bindings.iter().position(|(key, arguments, _)| {
                *key == binding.binding_key && identical_tables(arguments, &binding.arguments)
            }) {
                bindings.remove(at);
            }
            if bindings.is_empty() {
                self.members.remove(i);
            }
        }
        self.rebuild_ends();
        true
    }

    /// Removes every binding to `destination`, and its buckets; how many bindings.
    ///
    /// A deleted queue or exchange loses its bindings (AMQP 0-9-1 §3.1.3).
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        let taken = self.set.take_destination(destination).len();
        if taken > 0 {
            if let Some(i) = self.member_index(destination) {
                self.members.remove(i);
            }
            self.rebuild_ends();
        }
        taken
    }

    /// Appends the one destination the message's hash lands on, or nothing when no
    /// bucket is bound.
    ///
    /// RabbitMQ's plugin, `route/3`: jump consistent hash over the buckets, then the
    /// bucket's owner (here by binary search of the runs' ends).
    pub fn route(
        &self,
        routing_key: &str,
        properties: &BasicProperties,
        out: &mut Vec<Destination>,
    ) {
        let Some(&buckets) = self.ends.last() else {
            return;
        };
        if buckets == 0 {
            return;
        }
        let bucket = jump_consistent_hash(self.source.hash(routing_key, properties), buckets);
        let owner = self.ends.partition_point(|&end| end <= bucket);
        if let Some(m) = self.members.get(owner) {
            out.push(m.destination.clone());
        }
    }

    /// The ring: each destination with its number of buckets, in ring order.
    ///
    /// The plugin's ring state (`rabbitmq-diagnostics consistent_hash_exchange_ring_state`).
    pub fn ring(&self) -> Vec<(Destination, u64)> {
        self.members
            .iter()
            .map(|m| (m.destination.clone(), m.weight()))
            .collect()
    }

    fn member_index(&self, destination: &Destination) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.destination == *destination)
    }

    fn member_mut(&mut self, destination: &Destination) -> Option<&mut Member> {
        self.members
            .iter_mut()
            .find(|m| m.destination == *destination)
    }

    fn rebuild_ends(&mut self) {
        self.ends.clear();
        let mut end = 0u64;
        for m in &self.members {
            end += m.weight();
            self.ends.push(end);
        }
    }
}

impl IndexedBindings for ConsistentHashRouter {
    fn binding_set(&self) -> &BindingSet {
        &self.set
    }
}

/// The hash of a missing header or property: one fixed value (RabbitMQ's plugin hashes the
/// atom `undefined`), so every such message lands in the same bucket.
const MISSING_VALUE_HASH: u64 = 0x6d69_7373_696e_6721;

/// The hash of an empty array header (the plugin hashes `[]` rather than its first
/// element).
const EMPTY_ARRAY_HASH: u64 = 0x656d_7074_795f_5b5d;

/// FNV-1a's 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Bytes hashed: FNV-1a, each kind of value behind its own tag byte.
struct Fnv(u64);

impl Fnv {
    fn new(tag: u8) -> Fnv {
        let mut h = Fnv(FNV_OFFSET);
        h.write(&[tag]);
        h
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// The hash, mixed by MurmurHash3's 64-bit finaliser so that every input bit reaches
    /// the high bits the jump hash reads first.
    fn finish(self) -> u64 {
        let mut k = self.0;
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    }
}

/// Tag of a string or byte array (a routing key, a string header or property).
const TAG_BYTES: u8 = b'S';
/// Tag of an integer (any width) or a timestamp.
const TAG_INTEGER: u8 = b'I';

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = Fnv::new(TAG_BYTES);
    h.write(bytes);
    h.finish()
}

fn hash_integer(v: impl Into<i128>) -> u64 {
    let mut h = Fnv::new(TAG_INTEGER);
    h.write(&v.into().to_le_bytes());
    h.finish()
}

/// The hash of a header's value.
fn hash_value(v: &FieldValue) -> u64 {
    if let Some(i) = v.as_i64() {
        return hash_integer(i);
    }
    match v {
        FieldValue::LongString(b) | FieldValue::Bytes(b) => hash_bytes(b),
        FieldValue::Timestamp(t) => hash_integer(*t),
        FieldValue::Void => MISSING_VALUE_HASH,
        FieldValue::Array(items) => items.first().map_or(EMPTY_ARRAY_HASH, hash_value),
        other => {
            let mut h = Fnv::new(b'V');
            feed(&mut h, other);
            h.finish()
        }
    }
}

/// Feeds any value, tagged by its type, into `h` (floats, decimals, booleans, tables).
fn feed(h: &mut Fnv, v: &FieldValue) {
    match v {
        FieldValue::Bool(b) => h.write(&[b't', u8::from(*b)]),
        FieldValue::F32(x) => {
            h.write(b"f");
            h.write(&x.to_bits().to_le_bytes());
        }
        FieldValue::F64(x) => {
            h.write(b"d");
            h.write(&x.to_bits().to_le_bytes());
        }
        FieldValue::Decimal(scale, value) => {
            h.write(&[b'D', *scale]);
            h.write(&value.to_le_bytes());
        }
        FieldValue::LongString(b) | FieldValue::Bytes(b) => {
            h.write(b"S");
            h.write(&(b.len() as u64).to_le_bytes());
            h.write(b);
        }
        FieldValue::Array(items) => {
            h.write(b"A");
            h.write(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        FieldValue::Table(t) => {
            h.write(b"F");
            h.write(&(t.len() as u64).to_le_bytes());
            for (k, item) in t {
                h.write(&(k.len() as u64).to_le_bytes());
                h.write(k.as_bytes());
                feed(h, item);
            }
        }
        FieldValue::Timestamp(t) => {
            h.write(b"T");
            h.write(&t.to_le_bytes());
        }
        FieldValue::Void => h.write(b"V"),
        integer => {
            h.write(b"I");
            h.write(&integer.as_i64().unwrap_or(0).to_le_bytes());
        }
    }
}

/// The bucket in `0..buckets` that `key` lands in: Lamping and Veach, "A Fast, Minimal
/// Memory, Consistent Hash Algorithm" (2014), the function RabbitMQ's plugin uses (with a
/// different generator). About ln(buckets) steps; when `buckets` grows by one, a key
/// moves only if it moves to the new bucket. `buckets` must be positive.
pub fn jump_consistent_hash(mut key: u64, buckets: u64) -> u64 {
    /// The paper's 64-bit linear congruential generator multiplier.
    const LCG_MULTIPLIER: u64 = 2_862_933_555_777_941_757;
    /// 2^31, the scale of the paper's fixed-point step.
    const STEP_SCALE: f64 = (1u64 << 31) as f64;
    let mut b = 0u64;
    let mut j = 0u64;
    while j < buckets {
        b = j;
        key = key.wrapping_mul(LCG_MULTIPLIER).wrapping_add(1);
        // A float to integer cast saturates, so a huge step cannot wrap around.
        j = ((b + 1) as f64 * (STEP_SCALE / ((key >> 33) + 1) as f64)) as u64;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::routing::test_support::{binding, q};
    use crate::error::ReplyCode;
    use std::sync::Arc;

    fn no_properties() -> BasicProperties {
        BasicProperties::default()
    }

    fn route_key(r: &ConsistentHashRouter, key: &str) -> Vec<Destination> {
        let mut out = Vec::new();
        r.route(key, &no_properties(), &mut out);
        out
    }

    /// A small deterministic generator (xorshift64*) for random-looking routing keys.
    struct Keys(u64);

    impl Keys {
        fn next_key(&mut self) -> String {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            format!("{:x}", self.0.wrapping_mul(0x2545_f491_4f6c_dd1d))
        }
    }

    /// How many of `n` random routing keys each of `queues` gets.
    fn spread(r: &ConsistentHashRouter, queues: &[&str], n: usize) -> Vec<usize> {
        let mut counts = vec![0; queues.len()];
        let mut keys = Keys(0x9e37_79b9_7f4a_7c15);
        for _ in 0..n {
            let out = route_key(r, &keys.next_key());
            assert_eq!(out.len(), 1);
            let i = queues.iter().position(|name| out[0] == q(name)).unwrap();
            counts[i] += 1;
        }
        counts
    }

    #[test]
    fn weights_parse_as_the_plugin_parses_them() {
        assert_eq!(binding_weight("1").unwrap(), 1);
        assert_eq!(binding_weight("+7").unwrap(), 7);
        assert_eq!(binding_weight("007").unwrap(), 7);
        assert_eq!(binding_weight("10000").unwrap(), BINDING_WEIGHT_MAX);
        let text = |key: &str| {
            let e = binding_weight(key).unwrap_err();
            assert_eq!(e.code, ReplyCode::PreconditionFailed);
            e.text
        };
        assert_eq!(
            text("abc"),
            "The binding key must be an integer: <<\"abc\">>"
        );
        assert_eq!(text(""), "The binding key must be an integer: <<\"\">>");
        assert_eq!(text(" 1"), "The binding key must be an integer: <<\" 1\">>");
        assert_eq!(
            text("1.5"),
            "The binding key must be an integer: <<\"1.5\">>"
        );
        assert_eq!(text("-"), "The binding key must be an integer: <<\"-\">>");
        assert_eq!(
            text("é"),
            "The binding key must be an integer: <<\"é\"/utf8>>"
        );
        assert_eq!(text("0"), "The binding key must be greater than 0");
        assert_eq!(text("-1"), "The binding key must be greater than 0");
        assert_eq!(text("-0"), "The binding key must be greater than 0");
        assert_eq!(text("10001"), "The binding key must not exceed 10000");
        assert_eq!(text("500000000"), "The binding key must not exceed 10000");
        assert_eq!(
            text("99999999999999999999999999"),
            "The binding key must not exceed 10000"
        );
    }

    #[test]
    fn hash_arguments_are_checked_as_the_plugin_checks_them() {
        let args = |entries: &[(&str, FieldValue)]| -> FieldTable {
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect()
        };
        let source = |t: FieldTable| HashSource::from_arguments(&t, "x", "/");
        assert_eq!(source(FieldTable::new()).unwrap(), HashSource::RoutingKey);
        assert_eq!(
            source(args(&[("hash-header", FieldValue::string("h"))])).unwrap(),
            HashSource::Header("h".into())
        );
        for (name, p) in [
            ("message_id", HashProperty::MessageId),
            ("correlation_id", HashProperty::CorrelationId),
            ("timestamp", HashProperty::Timestamp),
        ] {
            assert_eq!(
                source(args(&[("hash-property", FieldValue::string(name))])).unwrap(),
                HashSource::Property(p)
            );
        }
        let e = source(args(&[("hash-property", FieldValue::string("app_id"))])).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        assert_eq!(e.text, "Unsupported property: app_id");
        let e = source(args(&[
            ("hash-header", FieldValue::string("h")),
            ("hash-property", FieldValue::string("app_id")),
        ]))
        .unwrap_err();
        assert_eq!(
            e.text,
            "hash-header and hash-property are mutually exclusive"
        );
        let e = source(args(&[("hash-header", FieldValue::I32(5))])).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        assert_eq!(
            e.text,
            "invalid arg 'hash-header' for exchange 'x' in vhost '/': 5 is not a string"
        );
    }

    #[test]
    fn the_spread_follows_the_weights() {
        let mut r = ConsistentHashRouter::new(HashSource::RoutingKey);
        for (name, weight) in [("a", "1"), ("b", "2"), ("c", "3")] {
            assert!(r.add(binding(q(name), weight)));
        }
        let n = 100_000;
        let counts = spread(&r, &["a", "b", "c"], n);
        println!("{n} keys over weights 1, 2, 3: {counts:?}");
        assert_eq!(counts.iter().sum::<usize>(), n);
        for (count, weight) in counts.iter().zip([1, 2, 3]) {
            let expected = n * weight / 6;
            let off = count.abs_diff(expected) as f64 / expected as f64;
            assert!(off < 0.05, "{counts:?}: weight {weight} is {off:.3} off");
        }
    }

    #[test]
    fn the_same_value_always_reaches_the_same_destination() {
        let mut r = ConsistentHashRouter::new(HashSource::RoutingKey);
        for name in ["a", "b", "c", "d"] {
            r.add(binding(q(name), "1"));
        }
        let mut keys = Keys(7);
        for _ in 0..1000 {
            let key = keys.next_key();
            assert_eq!(route_key(&r, &key), route_key(&r, &key));
        }
    }

    #[test]
    fn adding_a_destination_moves_only_what_it_takes() {
        let mut r = ConsistentHashRouter::new(HashSource::RoutingKey);
        for name in ["a", "b", "c"] {
            r.add(binding(q(name), "1"));
        }
        let mut keys = Keys(11);
        let sample: Vec<String> = (0..10_000).map(|_| keys.next_key()).collect();
        let before: Vec<_> = sample.iter().map(|k| route_key(&r, k)).collect();
        r.add(binding(q("d"), "1"));
        for (k, was) in sample.iter().zip(&before) {
            let now = route_key(&r, k);
            assert!(
                now == *was || now == [q("d")],
                "{k} moved from {was:?} to {now:?}"
            );
        }
        r.remove(&binding(q("d"), "1"));
        let after: Vec<_> = sample.iter().map(|k| route_key(&r, k)).collect();
        assert_eq!(after, before);
    }

    #[test]
    fn the_ring_counts_one_binding_per_destination() {
        let mut r = ConsistentHashRouter::new(HashSource::RoutingKey);
        assert!(route_key(&r, "k").is_empty());
        assert!(r.add(binding(q("a"), "2")));
        assert!(!r.add(binding(q("a"), "2")));
        assert!(r.add(binding(q("a"), "3")));
        assert!(r.add(binding(q("b"), "4")));
        assert_eq!(r.len(), 3);
        assert_eq!(r.ring(), vec![(q("a"), 2), (q("b"), 4)]);
        // The ignored duplicate goes: nothing changes.
        assert!(r.remove(&binding(q("a"), "3")));
        assert_eq!(r.ring(), vec![(q("a"), 2), (q("b"), 4)]);
        // A second binding takes over when the counted one goes.
        assert!(r.add(binding(q("a"), "5")));
        assert!(r.remove(&binding(q("a"), "2")));
        assert_eq!(r.ring(), vec![(q("a"), 5), (q("b"), 4)]);
        assert!(!r.remove(&binding(q("a"), "2")));
        assert!(r.remove(&binding(q("a"), "5")));
        assert_eq!(r.ring(), vec![(q("b"), 4)]);
        for key in ["x", "y", "z"] {
            assert_eq!(route_key(&r, key), vec![q("b")]);
        }
        let x = Destination::Exchange(Arc::from("x"));
        assert!(r.add(binding(x.clone(), "1")));
        assert!(r.add(binding(x.clone(), "2")));
        assert_eq!(r.remove_destination(&x), 2);
        assert_eq!(r.ring(), vec![(q("b"), 4)]);
        assert_eq!(r.remove_destination(&q("b")), 1);
        assert!(r.ring().is_empty());
        assert_eq!(r.len(), 0);
        assert!(route_key(&r, "k").is_empty());
    }

    #[test]
    fn a_key_that_is_not_a_weight_gives_no_buckets() {
        let mut r = ConsistentHashRouter::new(HashSource::RoutingKey);
        assert!(r.add(binding(q("a"), "zero")));
        assert!(route_key(&r, "k").is_empty());
        assert!(r.add(binding(q("b"), "1")));
        assert_eq!(route_key(&r, "k"), vec![q("b")]);
    }

    #[test]
    fn headers_and_properties_are_hashed_and_a_missing_one_is_one_value() {
        let mut header = ConsistentHashRouter::new(HashSource::Header("h".into()));
        let mut by_id = ConsistentHashRouter::new(HashSource::Property(HashProperty::MessageId));
        for r in [&mut header, &mut by_id] {
            for name in ["a", "b", "c", "d", "e", "f", "g", "h"] {
                r.add(binding(q(name), "1"));
            }
        }
        let route = |r: &ConsistentHashRouter, props: &BasicProperties, key: &str| {
            let mut out = Vec::new();
            r.route(key, props, &mut out);
            assert_eq!(out.len(), 1);
            out.pop().unwrap()
        };
        let with_header = |v: FieldValue| BasicProperties {
            headers: Some([("h".to_string(), v)].into_iter().collect()),
            ..BasicProperties::default()
        };
        // The routing key does not matter; the header does.
        let mut keys = Keys(3);
        let mut reached = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let props = with_header(FieldValue::string(keys.next_key()));
            let first = route(&header, &props, "k1");
            assert_eq!(route(&header, &props, "k2"), first);
            reached.insert(first);
        }
        assert_eq!(reached.len(), 8);
        // Integers hash by value, whatever their width; an array by its first element.
        assert_eq!(
            route(&header, &with_header(FieldValue::I8(42)), ""),
            route(&header, &with_header(FieldValue::I64(42)), "")
        );
        assert_eq!(
            route(&header, &with_header(FieldValue::string("v")), ""),
            route(
                &header,
                &with_header(FieldValue::Array(vec![
                    FieldValue::string("v"),
                    FieldValue::I8(1)
                ])),
                ""
            )
        );
        // Every message without the header (or with a void one) goes to one destination.
        let missing = route(&header, &no_properties(), "k1");
        let mut keys = Keys(5);
        for _ in 0..100 {
            assert_eq!(route(&header, &no_properties(), &keys.next_key()), missing);
        }
        assert_eq!(route(&header, &with_header(FieldValue::Void), "k"), missing);
        // Other value types hash without trouble.
        for v in [
            FieldValue::Bool(true),
            FieldValue::F64(f64::NAN),
            FieldValue::Decimal(2, 5),
            FieldValue::Array(Vec::new()),
            FieldValue::Table(FieldTable::new()),
            FieldValue::Timestamp(7),
        ] {
            route(&header, &with_header(v), "");
        }

        let mut keys = Keys(9);
        let mut reached = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let props = BasicProperties {
                message_id: Some(keys.next_key()),
                ..BasicProperties::default()
            };
            let first = route(&by_id, &props, "k1");
            assert_eq!(route(&by_id, &props, "k2"), first);
            reached.insert(first);
        }
        assert_eq!(reached.len(), 8);
        let missing = route(&by_id, &no_properties(), "k1");
        assert_eq!(route(&by_id, &no_properties(), "k2"), missing);
    }

    #[test]
    fn jump_hash_stays_in_range_and_spreads() {
        let mut counts = [0u32; 10];
        let mut keys = Keys(1);
        for _ in 0..10_000 {
            let b = jump_consistent_hash(hash_bytes(keys.next_key().as_bytes()), 10);
            counts[b as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(jump_consistent_hash(12345, 1), 0);
        for buckets in [2, 3, 1000, u64::from(u32::MAX) * 4, u64::MAX] {
            assert!(jump_consistent_hash(hash_bytes(b"k"), buckets) < buckets);
        }
    }
}
