//! Checks on what the caller asks to send, made before anything is encoded.
//!
//! The codec cuts a short string at 255 bytes instead of failing
//! ([`crate::types::codec::put_short_str`]), so a name that is too long must be refused
//! here or the server would act on a different name than the caller gave.

use super::error::ClientError;
use crate::limits::SHORT_STRING_BYTES_MAX;
use crate::types::{BasicProperties, FieldTable, FieldValue};

/// Checks that `value` fits in an AMQP short string (AMQP 0-9-1 §4.2.5.3).
///
/// # Errors
/// [`ClientError::Usage`] naming `what` when `value` is longer than 255 bytes.
pub(crate) fn short_str(what: &str, value: &str) -> Result<(), ClientError> {
    if value.len() > SHORT_STRING_BYTES_MAX {
        return Err(ClientError::Usage(format!(
            "{what} is {} bytes long; the limit is {SHORT_STRING_BYTES_MAX} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// Checks every key of a field table (nested tables and arrays included).
///
/// # Errors
/// [`ClientError::Usage`] for a key longer than 255 bytes.
pub(crate) fn table(what: &str, t: &FieldTable) -> Result<(), ClientError> {
    for (k, v) in t {
        short_str(&format!("{what} key"), k)?;
        value(what, v)?;
    }
    Ok(())
}

fn value(what: &str, v: &FieldValue) -> Result<(), ClientError> {
    match v {
        FieldValue::Table(t) => table(what, t),
        FieldValue::Array(items) => items.iter().try_for_each(|i| value(what, i)),
        _ => Ok(()),
    }
}

/// Checks the short-string properties and the header keys of a message.
///
/// # Errors
/// [`ClientError::Usage`] naming the property that is too long.
pub(crate) fn properties(p: &BasicProperties) -> Result<(), ClientError> {
    let strings = [
        ("content_type", &p.content_type),
        ("content_encoding", &p.content_encoding),
        ("correlation_id", &p.correlation_id),
        ("reply_to", &p.reply_to),
        ("expiration", &p.expiration),
        ("message_id", &p.message_id),
        ("type", &p.kind),
        ("user_id", &p.user_id),
        ("app_id", &p.app_id),
    ];
    for (name, v) in strings {
        if let Some(v) = v {
            short_str(name, v)?;
        }
    }
    if let Some(h) = &p.headers {
        table("headers", h)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_and_keys_are_refused() {
        assert!(short_str("queue", &"q".repeat(255)).is_ok());
        let err = short_str("queue", &"q".repeat(256)).unwrap_err();
        assert!(err.to_string().contains("queue is 256 bytes"), "{err}");
        let mut inner = FieldTable::new();
        inner.insert("k".repeat(300), FieldValue::Void);
        let mut t = FieldTable::new();
        t.insert(
            "x".into(),
            FieldValue::Array(vec![FieldValue::Table(inner)]),
        );
        assert!(table("arguments", &t).is_err());
        let p = BasicProperties {
            app_id: Some("a".repeat(256)),
            ..Default::default()
        };
        assert!(properties(&p).unwrap_err().to_string().contains("app_id"));
    }
}
