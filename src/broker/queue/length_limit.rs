//! Queue length limits (RabbitMQ's `x-max-length`, `x-max-length-bytes`, `x-overflow`):
//! bounds on a queue's *ready* messages and what happens to a publish past them.

use crate::error::BrokerError;
use crate::types::FieldTable;

/// What a full queue does with a new message (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop messages from the head to make room (RabbitMQ's default).
    #[default]
    DropHead,
    /// Refuse the new message: a publisher in confirm mode gets a nack.
    RejectPublish,
    /// Refuse the new message (nack) and dead-letter it (RabbitMQ 3.8+).
    RejectPublishDlx,
}

impl Overflow {
    /// The argument's value for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::DropHead => "drop-head",
            Overflow::RejectPublish => "reject-publish",
            Overflow::RejectPublishDlx => "reject-publish-dlx",
        }
    }
}

/// A queue's length limits; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LengthLimit {
    /// Ready messages at most (`x-max-length`).
    pub max_messages: Option<usize>,
    /// Body bytes of ready messages at most (`x-max-length-bytes`).
    pub max_bytes: Option<usize>,
    /// What happens past a limit.
    pub overflow: Overflow,
}

fn non_negative(arguments: &FieldTable, key: &str) -> Result<Option<usize>, BrokerError> {
    match arguments.get(key) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(BrokerError::precondition(format!(
                "invalid arg '{key}': {} is not a non-negative integer",
                v.to_json()
            ))),
        },
    }
}

impl LengthLimit {
    /// Reads the limits from queue arguments.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED for a value that is not a non-negative integer, an unknown
    /// `x-overflow` (RabbitMQ validates these arguments the same way).
    pub fn from_arguments(arguments: &FieldTable) -> Result<LengthLimit, BrokerError> {
        let overflow = match arguments.get("x-overflow") {
            None => Overflow::DropHead,
            Some(v) => match v.as_str() {
                Some("drop-head") => Overflow::DropHead,
                Some("reject-publish") => Overflow::RejectPublish,
                Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
                _ => {
                    return Err(BrokerError::precondition(format!(
                        "invalid arg 'x-overflow': {} is not drop-head, reject-publish or \
                         reject-publish-dlx",
                        v.to_json()
                    )))
                }
            },
        };
        Ok(LengthLimit {
            max_messages: non_negative(arguments, "x-max-length")?,
            max_bytes: non_negative(arguments, "x-max-length-bytes")?,
            overflow,
        })
    }

    /// Whether `messages` ready messages of `bytes` body bytes exceed a limit.
    pub fn exceeded(&self, messages: usize, bytes: usize) -> bool {
        self.max_messages.is_some_and(|m| messages > m) || self.max_bytes.is_some_and(|b| bytes > b)
    }

    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.max_messages.is_some() || self.max_bytes.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FieldValue;

    fn args(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn parses_limits_and_overflow() {
        let l = LengthLimit::from_arguments(&args(&[
            ("x-max-length", FieldValue::I64(3)),
            ("x-max-length-bytes", FieldValue::U32(100)),
            ("x-overflow", FieldValue::string("reject-publish")),
        ]))
        .unwrap();
        assert_eq!(l.max_messages, Some(3));
        assert_eq!(l.max_bytes, Some(100));
        assert_eq!(l.overflow, Overflow::RejectPublish);
        assert!(!l.exceeded(3, 100));
        assert!(l.exceeded(4, 0));
        assert!(l.exceeded(0, 101));
        assert_eq!(
            LengthLimit::from_arguments(&FieldTable::new()).unwrap(),
            LengthLimit::default()
        );
    }

    #[test]
    fn refuses_bad_values() {
        for bad in [
            args(&[("x-max-length", FieldValue::I64(-1))]),
            args(&[("x-max-length", FieldValue::string("3"))]),
            args(&[("x-overflow", FieldValue::string("drop-tail"))]),
        ] {
            let e = LengthLimit::from_arguments(&bad).unwrap_err();
            assert_eq!(
                e.code,
                crate::error::ReplyCode::PreconditionFailed,
                "{bad:?}"
            );
        }
    }
}
