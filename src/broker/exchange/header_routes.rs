//! RabbitMQ's sender-selected distribution: the `CC` and `BCC` headers of a published
//! message add routing keys to the one it was published with.
//!
//! Each header, when present, must be an array; its long-string entries are extra routing
//! keys (other entries are ignored), `CC` first, then `BCC`. The message is routed with
//! every key, through exchange-to-exchange bindings and alternate exchanges alike, and
//! keeps them for dead-lettering without `x-dead-letter-routing-key`. `BCC` is removed
//! from the headers before the message is stored or delivered, and its keys are left out
//! of the `routing-keys` of an `x-death` entry. Source: RabbitMQ's "Sender-selected
//! Distribution" extension, `rabbit_basic:header_routes/1` and `mc_amqpl` (4.x).
//!
//! A stored message keeps its `BCC` keys in a `BCC` header of its record only
//! ([`HeaderRoutes::stored_properties`]); reading the record back takes them out again
//! ([`HeaderRoutes::take`]).

use crate::error::BrokerError;
use crate::types::{BasicProperties, FieldValue};

/// The header whose keys are routed to and stay visible to consumers.
pub const CC_HEADER: &str = "CC";

/// The header whose keys are routed to and removed before the message is stored or
/// delivered ("blind carbon copy").
pub const BCC_HEADER: &str = "BCC";

/// The extra routing keys of one message: its `CC` keys, then its `BCC` keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRoutes {
    /// `CC` keys, then `BCC` keys, in header order.
    keys: Vec<String>,
    /// How many of `keys` came from `CC`.
    cc: usize,
}

impl HeaderRoutes {
    /// Reads the `CC` and `BCC` headers of `properties` and removes `BCC` from them
    /// (whatever its content). `None` when the two give no key: the message is routed by
    /// its routing key alone.
    ///
    /// A long string that is not UTF-8 becomes a key with U+FFFD in place of the bad
    /// bytes: it can only match wildcard bindings, as its bytes match nothing else.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED with RabbitMQ's text when either header is not an array,
    /// e.g. `invalid message: {unacceptable_type_in_header,"CC",longstr}`
    /// (`rabbit_channel`, publishing); `properties` is then unchanged.
    pub fn take(properties: &mut BasicProperties) -> Result<Option<HeaderRoutes>, BrokerError> {
        let Some(headers) = properties.headers.as_mut() else {
            return Ok(None);
        };
        let mut keys = Vec::new();
        let mut cc = 0;
        for name in [CC_HEADER, BCC_HEADER] {
            match headers.get(name) {
                None => {}
                Some(FieldValue::Array(items)) => {
                    keys.extend(items.iter().filter_map(|v| match v {
                        FieldValue::LongString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                        _ => None,
                    }));
                }
                Some(other) => {
                    return Err(BrokerError::precondition(format!(
                        "invalid message: {{unacceptable_type_in_header,\"{name}\",{}}}",
                        other.rabbitmq_type_name()
                    )))
                }
            }
            if name == CC_HEADER {
                cc = keys.len();
            }
        }
        headers.remove(BCC_HEADER);
        Ok((!keys.is_empty()).then_some(HeaderRoutes { keys, cc }))
    }

    /// Every extra key: `CC`'s, then `BCC`'s.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The keys from `CC` (they show in `x-death`'s `routing-keys`).
    pub fn cc(&self) -> &[String] {
        &self.keys[..self.cc]
    }

    /// The keys from `BCC` (hidden from consumers and from `x-death`).
    pub fn bcc(&self) -> &[String] {
        &self.keys[self.cc..]
    }

    /// The properties to store for a message with these routes: `properties` with a `BCC`
    /// header holding the `BCC` keys, so they survive a restart or a body read back from
    /// disk; `None` when there are no `BCC` keys (the properties are stored as they are).
    pub fn stored_properties(&self, properties: &BasicProperties) -> Option<BasicProperties> {
        if self.bcc().is_empty() {
            return None;
        }
        let mut stored = properties.clone();
        let keys = self.bcc().iter().map(|k| FieldValue::string(k.as_str()));
        stored
            .headers
            .get_or_insert_with(Default::default)
            .insert(BCC_HEADER.into(), FieldValue::Array(keys.collect()));
        Some(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ReplyCode;
    use crate::types::FieldTable;

    fn keys(v: &[&str]) -> FieldValue {
        FieldValue::Array(v.iter().map(|k| FieldValue::string(*k)).collect())
    }

    fn with_headers(pairs: Vec<(&str, FieldValue)>) -> BasicProperties {
        let mut h = FieldTable::new();
        for (k, v) in pairs {
            h.insert(k.into(), v);
        }
        BasicProperties {
            headers: Some(h),
            ..BasicProperties::default()
        }
    }

    #[test]
    fn cc_then_bcc_keys_and_bcc_is_removed() {
        let mut p = with_headers(vec![
            ("CC", keys(&["a", "b"])),
            (
                "BCC",
                FieldValue::Array(vec![FieldValue::string("c"), FieldValue::I32(7)]),
            ),
            ("other", FieldValue::I32(1)),
        ]);
        let r = HeaderRoutes::take(&mut p).unwrap().unwrap();
        assert_eq!(r.keys(), ["a", "b", "c"]);
        assert_eq!(r.cc(), ["a", "b"]);
        assert_eq!(r.bcc(), ["c"]);
        let h = p.headers.as_ref().unwrap();
        assert!(!h.contains_key("BCC"));
        assert_eq!(h.get("CC"), Some(&keys(&["a", "b"])));
        // Stored with its BCC keys, read back to the same routes.
        let mut stored = r.stored_properties(&p).unwrap();
        assert_eq!(HeaderRoutes::take(&mut stored).unwrap(), Some(r));
        assert_eq!(stored, p);
    }

    #[test]
    fn no_header_or_no_key_routes_by_the_routing_key_alone() {
        assert_eq!(
            HeaderRoutes::take(&mut BasicProperties::default()).unwrap(),
            None
        );
        let mut p = with_headers(vec![("BCC", keys(&[])), ("x", FieldValue::Void)]);
        assert_eq!(HeaderRoutes::take(&mut p).unwrap(), None);
        assert!(!p.headers.as_ref().unwrap().contains_key("BCC"));
        let r = HeaderRoutes {
            keys: vec!["a".into()],
            cc: 1,
        };
        assert_eq!(r.stored_properties(&p), None);
    }

    #[test]
    fn a_header_that_is_not_an_array_is_refused_with_rabbitmqs_text() {
        let mut p = with_headers(vec![("CC", FieldValue::string("a"))]);
        let e = HeaderRoutes::take(&mut p).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        assert_eq!(
            e.text,
            "invalid message: {unacceptable_type_in_header,\"CC\",longstr}"
        );
        let mut p = with_headers(vec![("CC", keys(&["a"])), ("BCC", FieldValue::I64(1))]);
        let e = HeaderRoutes::take(&mut p).unwrap_err();
        assert_eq!(
            e.text,
            "invalid message: {unacceptable_type_in_header,\"BCC\",long}"
        );
        assert!(p.headers.as_ref().unwrap().contains_key("BCC"));
    }
}
