//! Message properties (AMQP 0-9-1 `basic` class content header, §4.2.6.1 and the
//! specification's `basic` property list) and their compact binary form.
//!
//! The binary form is a `u16` property-flags word with AMQP's bit assignment (bit 15
//! content-type … bit 3 app-id), followed by the present properties in that order. Absent
//! properties cost nothing: no bytes on the wire and no allocation in memory.

use crate::error::DecodeError;
use crate::limits::PROPERTIES_BYTES_MAX;
use crate::types::codec::{put_short_str, put_u16, put_u64, Reader};
use crate::types::field_table::{decode_table, encode_table, FieldTable};

const FLAG_CONTENT_TYPE: u16 = 1 << 15;
const FLAG_CONTENT_ENCODING: u16 = 1 << 14;
const FLAG_HEADERS: u16 = 1 << 13;
const FLAG_DELIVERY_MODE: u16 = 1 << 12;
const FLAG_PRIORITY: u16 = 1 << 11;
const FLAG_CORRELATION_ID: u16 = 1 << 10;
const FLAG_REPLY_TO: u16 = 1 << 9;
const FLAG_EXPIRATION: u16 = 1 << 8;
const FLAG_MESSAGE_ID: u16 = 1 << 7;
const FLAG_TIMESTAMP: u16 = 1 << 6;
const FLAG_TYPE: u16 = 1 << 5;
const FLAG_USER_ID: u16 = 1 << 4;
const FLAG_APP_ID: u16 = 1 << 3;
const FLAG_CLUSTER_ID: u16 = 1 << 2;
/// Every property flag: bits 15 … 2 (bit 0 would announce a second flag word, which the
/// `basic` class never needs).
const FLAGS_KNOWN: u16 = 0xFFFC;

/// Delivery mode 2: the message is persistent (survives a restart in a durable queue).
pub const DELIVERY_MODE_PERSISTENT: u8 = 2;

/// The properties of a message; every one is optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BasicProperties {
    /// MIME content type of the body.
    pub content_type: Option<String>,
    /// MIME content encoding of the body.
    pub content_encoding: Option<String>,
    /// Application headers; the headers exchange routes on them.
    pub headers: Option<FieldTable>,
    /// 1 = transient, 2 = persistent.
    pub delivery_mode: Option<u8>,
    /// Priority 0–9 (used by priority queues).
    pub priority: Option<u8>,
    /// Application correlation identifier (RPC replies).
    pub correlation_id: Option<String>,
    /// Queue name to reply to (RPC).
    pub reply_to: Option<String>,
    /// Per-message TTL in milliseconds, as a decimal string (RabbitMQ's convention).
    pub expiration: Option<String>,
    /// Application message identifier.
    pub message_id: Option<String>,
    /// Message timestamp, seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    /// Message type name (`type` in AMQP).
    pub kind: Option<String>,
    /// Creating user id.
    pub user_id: Option<String>,
    /// Creating application id.
    pub app_id: Option<String>,
    /// Deprecated in AMQP 0-9-1 (`cluster-id`, "must be empty") but accepted and carried
    /// unchanged, as RabbitMQ does, so a client that sets every property is not refused.
    pub cluster_id: Option<String>,
}

impl BasicProperties {
    /// Whether delivery mode is 2 (persistent).
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(DELIVERY_MODE_PERSISTENT)
    }

    /// The message's own TTL in ms: its `expiration`, an optionally signed decimal integer
    /// of ms up to [`EXPIRY_MS_MAX`](crate::limits::EXPIRY_MS_MAX), nothing before or after
    /// it (RabbitMQ's rule, Erlang's `string:to_integer`; AMQP 0-9-1 leaves the format to
    /// the server).
    ///
    /// # Errors
    /// RabbitMQ's reason when it is not such a number: `no_integer`,
    /// `{leftover_string,"…"}`, `{value_negative,N}` or `{value_too_large,N}`.
    pub fn expiration_ms(&self) -> Result<Option<u64>, String> {
        let Some(text) = self.expiration.as_deref() else {
            return Ok(None);
        };
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err("no_integer".into());
        }
        let (number, leftover) = rest.split_at(digits);
        if !leftover.is_empty() {
            return Err(format!("{{leftover_string,{leftover:?}}}"));
        }
        let shown = format!(
            "{}{}",
            if negative { "-" } else { "" },
            number.trim_start_matches('0')
        );
        let shown = if shown.is_empty() || shown == "-" {
            "0".to_string()
        } else {
            shown
        };
        if negative && number.bytes().any(|b| b != b'0') {
            return Err(format!("{{value_negative,{shown}}}"));
        }
        match number.parse::<u64>() {
            Ok(n) if n <= crate::limits::EXPIRY_MS_MAX => Ok(Some(n)),
            _ => Err(format!("{{value_too_large,{shown}}}")),
        }
    }

    /// Whether no property is set.
    pub fn is_empty(&self) -> bool {
        *self == BasicProperties::default()
    }

    /// Appends the binary form: flags `u16`, then each present property (short strings as
    /// `u8` length + bytes, headers as a field table, timestamp as `u64`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let flags_at = out.len();
        put_u16(out, 0);
        let mut flags = 0u16;
        let mut s = |out: &mut Vec<u8>, flag: u16, v: &Option<String>| {
            if let Some(v) = v {
                flags |= flag;
                put_short_str(out, v);
            }
        };
        s(out, FLAG_CONTENT_TYPE, &self.content_type);
        s(out, FLAG_CONTENT_ENCODING, &self.content_encoding);
        if let Some(h) = &self.headers {
            flags |= FLAG_HEADERS;
            encode_table(out, h);
        }
        if let Some(d) = self.delivery_mode {
            flags |= FLAG_DELIVERY_MODE;
            out.push(d);
        }
        if let Some(p) = self.priority {
            flags |= FLAG_PRIORITY;
            out.push(p);
        }
        let mut s = |out: &mut Vec<u8>, flag: u16, v: &Option<String>| {
            if let Some(v) = v {
                flags |= flag;
                put_short_str(out, v);
            }
        };
        s(out, FLAG_CORRELATION_ID, &self.correlation_id);
        s(out, FLAG_REPLY_TO, &self.reply_to);
        s(out, FLAG_EXPIRATION, &self.expiration);
        s(out, FLAG_MESSAGE_ID, &self.message_id);
        if let Some(t) = self.timestamp {
            flags |= FLAG_TIMESTAMP;
            put_u64(out, t);
        }
        let mut s = |out: &mut Vec<u8>, flag: u16, v: &Option<String>| {
            if let Some(v) = v {
                flags |= flag;
                put_short_str(out, v);
            }
        };
        s(out, FLAG_TYPE, &self.kind);
        s(out, FLAG_USER_ID, &self.user_id);
        s(out, FLAG_APP_ID, &self.app_id);
        s(out, FLAG_CLUSTER_ID, &self.cluster_id);
        out[flags_at..flags_at + 2].copy_from_slice(&flags.to_be_bytes());
    }

    /// Reads the binary form written by [`BasicProperties::encode`].
    ///
    /// # Errors
    /// [`DecodeError`] on truncation, a property flag RelayMQ does not know, a string
    /// that is not UTF-8, a bad headers table, or a block longer than
    /// [`PROPERTIES_BYTES_MAX`] bytes (the headers table is refused before it is decoded
    /// when it alone is over the bound,
    /// [`FIELD_TABLE_BYTES_MAX`](crate::types::field_table::FIELD_TABLE_BYTES_MAX)).
    pub fn decode(r: &mut Reader<'_>) -> Result<BasicProperties, DecodeError> {
        let remaining_at_start = r.remaining();
        let p = BasicProperties::decode_fields(r)?;
        let block_bytes = remaining_at_start - r.remaining();
        if block_bytes > PROPERTIES_BYTES_MAX {
            return Err(DecodeError::new(format!(
                "properties of {block_bytes} bytes exceed the limit of {PROPERTIES_BYTES_MAX} bytes"
            )));
        }
        Ok(p)
    }

    fn decode_fields(r: &mut Reader<'_>) -> Result<BasicProperties, DecodeError> {
        let flags = r.u16("property flags")?;
        if flags & !FLAGS_KNOWN != 0 {
            return Err(DecodeError::new(format!(
                "unknown property flags 0x{:04x}",
                flags & !FLAGS_KNOWN
            )));
        }
        let mut p = BasicProperties::default();
        if flags == 0 {
            return Ok(p);
        }
        let s =
            |r: &mut Reader<'_>, flag: u16, what: &str| -> Result<Option<String>, DecodeError> {
                if flags & flag != 0 {
                    Ok(Some(r.short_str(what)?.to_string()))
                } else {
                    Ok(None)
                }
            };
        p.content_type = s(r, FLAG_CONTENT_TYPE, "content-type")?;
        p.content_encoding = s(r, FLAG_CONTENT_ENCODING, "content-encoding")?;
        if flags & FLAG_HEADERS != 0 {
            p.headers = Some(decode_table(r)?);
        }
        if flags & FLAG_DELIVERY_MODE != 0 {
            p.delivery_mode = Some(r.u8("delivery-mode")?);
        }
        if flags & FLAG_PRIORITY != 0 {
            p.priority = Some(r.u8("priority")?);
        }
        p.correlation_id = s(r, FLAG_CORRELATION_ID, "correlation-id")?;
        p.reply_to = s(r, FLAG_REPLY_TO, "reply-to")?;
        p.expiration = s(r, FLAG_EXPIRATION, "expiration")?;
        p.message_id = s(r, FLAG_MESSAGE_ID, "message-id")?;
        if flags & FLAG_TIMESTAMP != 0 {
            p.timestamp = Some(r.u64("timestamp")?);
        }
        p.kind = s(r, FLAG_TYPE, "type")?;
        p.user_id = s(r, FLAG_USER_ID, "user-id")?;
        p.app_id = s(r, FLAG_APP_ID, "app-id")?;
        p.cluster_id = s(r, FLAG_CLUSTER_ID, "cluster-id")?;
        Ok(p)
    }

    /// The properties boxed, or `None` when none is set: how a message keeps them (a
    /// message without properties costs one pointer, and moving it costs no copy).
    pub fn into_boxed(self) -> Option<Box<BasicProperties>> {
        if self.is_empty() {
            None
        } else {
            Some(Box::new(self))
        }
    }

    /// Decodes a properties block straight into its boxed form ([`BasicProperties::into_boxed`]):
    /// a block with no flag set allocates nothing.
    ///
    /// # Errors
    /// As [`BasicProperties::decode`].
    pub fn decode_boxed(r: &mut Reader<'_>) -> Result<Option<Box<BasicProperties>>, DecodeError> {
        if r.peek_u16() == Some(0) {
            r.u16("property flags")?;
            return Ok(None);
        }
        Ok(BasicProperties::decode(r)?.into_boxed())
    }

    /// Decodes a whole buffer holding exactly one properties block.
    ///
    /// # Errors
    /// As [`BasicProperties::decode`], and when bytes are left over.
    pub fn from_bytes(raw: &[u8]) -> Result<BasicProperties, DecodeError> {
        let mut r = Reader::new(raw);
        let p = BasicProperties::decode(&mut r)?;
        if !r.is_empty() {
            return Err(DecodeError::new("trailing bytes after properties"));
        }
        Ok(p)
    }

    /// The binary form as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// The properties as a JSON object with AMQP's names (`content_type`, `delivery_mode`,
    /// `headers`, `type`, …); absent properties are left out.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        let mut s = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                m.insert(k.into(), serde_json::Value::String(v.clone()));
            }
        };
        s("content_type", &self.content_type);
        s("content_encoding", &self.content_encoding);
        s("correlation_id", &self.correlation_id);
        s("reply_to", &self.reply_to);
        s("expiration", &self.expiration);
        s("message_id", &self.message_id);
        s("type", &self.kind);
        s("user_id", &self.user_id);
        s("app_id", &self.app_id);
        s("cluster_id", &self.cluster_id);
        if let Some(h) = &self.headers {
            m.insert(
                "headers".into(),
                crate::types::field_table::table_to_json(h),
            );
        }
        if let Some(d) = self.delivery_mode {
            m.insert("delivery_mode".into(), d.into());
        }
        if let Some(p) = self.priority {
            m.insert("priority".into(), p.into());
        }
        if let Some(t) = self.timestamp {
            m.insert("timestamp".into(), t.into());
        }
        serde_json::Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FieldValue;

    fn full() -> BasicProperties {
        let mut h = FieldTable::new();
        h.insert("x".into(), FieldValue::I32(1));
        BasicProperties {
            content_type: Some("text/plain".into()),
            content_encoding: Some("gzip".into()),
            headers: Some(h),
            delivery_mode: Some(2),
            priority: Some(5),
            correlation_id: Some("c".into()),
            reply_to: Some("amq.gen-1".into()),
            expiration: Some("6000".into()),
            message_id: Some("m".into()),
            timestamp: Some(1_700_000_000),
            kind: Some("t".into()),
            user_id: Some("guest".into()),
            app_id: Some("app".into()),
            cluster_id: Some("c1".into()),
        }
    }

    #[test]
    fn full_and_empty_round_trip() {
        for p in [full(), BasicProperties::default()] {
            let raw = p.to_bytes();
            assert_eq!(BasicProperties::from_bytes(&raw).unwrap(), p);
        }
        assert_eq!(BasicProperties::default().to_bytes(), vec![0, 0]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let raw = full().to_bytes();
        for cut in 0..raw.len() {
            assert!(
                BasicProperties::from_bytes(&raw[..cut]).is_err(),
                "cut {cut}"
            );
        }
    }

    /// Regression (fuzzing notes, finding 1): `PROPERTIES_BYTES_MAX` is enforced where
    /// properties are decoded, for the whole block.
    #[test]
    fn a_block_over_the_properties_bound_is_refused() {
        let mut headers = FieldTable::new();
        // A table just under its own bound, plus a content type: the block is over.
        let big = PROPERTIES_BYTES_MAX - 64;
        headers.insert("h".into(), FieldValue::Bytes(vec![0; big]));
        let mut p = BasicProperties {
            headers: Some(headers),
            content_type: Some("x".repeat(200)),
            ..BasicProperties::default()
        };
        let err = BasicProperties::from_bytes(&p.to_bytes()).unwrap_err();
        assert!(err.message.contains("exceed the limit"), "{err}");
        p.content_type = None;
        assert_eq!(BasicProperties::from_bytes(&p.to_bytes()).unwrap(), p);
    }

    #[test]
    fn unknown_flag_bits_are_refused() {
        assert!(BasicProperties::from_bytes(&[0, 1]).is_err());
    }
}
