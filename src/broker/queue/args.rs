//! The message-lifecycle queue arguments with a number for a value (RabbitMQ's names and
//! ranges): `x-message-ttl`, `x-expires`, `x-max-priority`, `x-consumer-timeout`,
//! `x-delivery-limit`, and the per-message `expiration` property.
//!
//! Every parser returns `Ok(None)` when the argument is absent and a 406 naming the
//! argument when it has the wrong type or is out of range (docs/lifecycle.md).

use crate::broker::queue::queue_type::{quorum_delivery_limit, QueueType};
use crate::error::BrokerError;
use crate::limits::EXPIRY_MS_MAX;
use crate::types::{BasicProperties, FieldTable};

/// Highest `x-max-priority` (RabbitMQ's limit).
pub const PRIORITY_MAX: u8 = 255;

/// The lifecycle settings of a queue, read from its arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LifecycleArgs {
    /// `x-message-ttl`: ms a message may stay ready in the queue.
    pub message_ttl_ms: Option<u64>,
    /// `x-expires`: ms the queue may stay unused before it is deleted.
    pub expires_ms: Option<u64>,
    /// `x-max-priority`: highest message priority honoured (0–255; 0 is accepted, as in
    /// RabbitMQ, and makes a queue with one level).
    pub max_priority: Option<u8>,
    /// `x-consumer-timeout`: ms a delivery may stay unacked (0 = never times out).
    pub consumer_timeout_ms: Option<u64>,
    /// `x-delivery-limit`: deliveries after which a returned message is dead-lettered.
    pub delivery_limit: Option<u32>,
}

impl LifecycleArgs {
    /// Reads every lifecycle argument.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED naming the first argument of the wrong type or out of range.
    pub fn from_arguments(arguments: &FieldTable) -> Result<LifecycleArgs, BrokerError> {
        let max_priority = integer(arguments, "x-max-priority", 0, i64::from(PRIORITY_MAX))?;
        let delivery_limit = integer(arguments, "x-delivery-limit", 0, i64::from(u32::MAX))?;
        Ok(LifecycleArgs {
            message_ttl_ms: ms(arguments, "x-message-ttl", 0)?,
            expires_ms: ms(arguments, "x-expires", 1)?,
            max_priority: max_priority.map(|n| n as u8),
            consumer_timeout_ms: integer(arguments, "x-consumer-timeout", 0, i64::MAX)?
                .map(|n| n as u64),
            delivery_limit: delivery_limit.map(|n| n as u32),
        })
    }
}

impl LifecycleArgs {
    /// Reads every lifecycle argument of a queue of type `queue_type`: a quorum queue's
    /// `x-delivery-limit` may be any integer (negative: unlimited) and defaults to
    /// [`crate::broker::queue::queue_type::QUORUM_DELIVERY_LIMIT_DEFAULT`] (RabbitMQ 4.x).
    ///
    /// # Errors
    /// As [`LifecycleArgs::from_arguments`].
    pub fn for_type(
        arguments: &FieldTable,
        queue_type: QueueType,
    ) -> Result<LifecycleArgs, BrokerError> {
        if queue_type == QueueType::Classic {
            return LifecycleArgs::from_arguments(arguments);
        }
        let limit = integer(arguments, "x-delivery-limit", i64::MIN, i64::MAX)?;
        let mut rest = arguments.clone();
        rest.remove("x-delivery-limit");
        let mut lifecycle = LifecycleArgs::from_arguments(&rest)?;
        lifecycle.delivery_limit = quorum_delivery_limit([limit]);
        Ok(lifecycle)
    }
}

/// An integer argument in `min..=max`.
fn integer(
    arguments: &FieldTable,
    key: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, BrokerError> {
    let Some(v) = arguments.get(key) else {
        return Ok(None);
    };
    match v.as_i64() {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        Some(n) => Err(BrokerError::precondition(format!(
            "invalid arg '{key}': {n} is out of range {min}..{max}"
        ))),
        None => Err(BrokerError::precondition(format!(
            "invalid arg '{key}': {} is not an integer",
            v.to_json()
        ))),
    }
}

/// A duration argument in ms, `min..=EXPIRY_MS_MAX` (`min` is 0 or 1), refused with
/// RabbitMQ's terms (`rabbit_amqqueue:check_expires_arg`, `rabbit_misc:check_expiry`):
/// `{value_zero,0}` for an `x-expires` of 0, `{value_negative,N}`,
/// `{value_too_large,N}`.
fn ms(arguments: &FieldTable, key: &str, min: i64) -> Result<Option<u64>, BrokerError> {
    let Some(v) = arguments.get(key) else {
        return Ok(None);
    };
    let Some(n) = v.as_i64() else {
        return Err(BrokerError::precondition(format!(
            "invalid arg '{key}': {} is not an integer",
            v.to_json()
        )));
    };
    let term = if n == 0 && min > 0 {
        "value_zero"
    } else if n < 0 {
        "value_negative"
    } else if n > EXPIRY_MS_MAX as i64 {
        "value_too_large"
    } else {
        return Ok(Some(n as u64));
    };
    Err(BrokerError::precondition(format!(
        "invalid arg '{key}': {{{term},{n}}}"
    )))
}

/// The per-message TTL of a published message: its `expiration` property, a decimal
/// number of ms (AMQP 0-9-1 leaves the format to the server; RabbitMQ's rule).
///
/// # Errors
/// 406 PRECONDITION_FAILED with RabbitMQ's text ("invalid expiration '…': …") when it is
/// not a non-negative integer up to [`EXPIRY_MS_MAX`]; the publish is refused.
pub fn expiration_ms(properties: &BasicProperties) -> Result<Option<u64>, BrokerError> {
    properties.expiration_ms().map_err(|why| {
        BrokerError::precondition(format!(
            "invalid expiration '{}': {why}",
            properties.expiration.as_deref().unwrap_or("")
        ))
    })
}

/// The TTL a message gets in a queue: the smaller of the queue's `x-message-ttl` and the
/// message's own `expiration` (RabbitMQ: "the lower of the two applies").
pub fn effective_ttl_ms(queue_ttl_ms: Option<u64>, properties: &BasicProperties) -> Option<u64> {
    // An invalid expiration was refused at publish; one read back from an older store is
    // ignored.
    let own = properties.expiration_ms().ok().flatten();
    match (queue_ttl_ms, own) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ReplyCode;
    use crate::types::FieldValue;

    fn args(pairs: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in pairs {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    fn error(pairs: &[(&str, FieldValue)]) -> String {
        let e = LifecycleArgs::from_arguments(&args(pairs)).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        e.text
    }

    #[test]
    fn valid_arguments_are_read() {
        let a = LifecycleArgs::from_arguments(&args(&[
            ("x-message-ttl", FieldValue::I32(0)),
            ("x-expires", FieldValue::I64(1000)),
            ("x-max-priority", FieldValue::U8(10)),
            ("x-consumer-timeout", FieldValue::I64(0)),
            ("x-delivery-limit", FieldValue::I16(3)),
        ]))
        .unwrap();
        assert_eq!(
            a,
            LifecycleArgs {
                message_ttl_ms: Some(0),
                expires_ms: Some(1000),
                max_priority: Some(10),
                consumer_timeout_ms: Some(0),
                delivery_limit: Some(3),
            }
        );
        assert_eq!(
            LifecycleArgs::from_arguments(&FieldTable::new()).unwrap(),
            LifecycleArgs::default()
        );
    }

    #[test]
    fn wrong_types_and_ranges_name_the_argument() {
        let text = error(&[("x-message-ttl", FieldValue::LongString(b"10".to_vec()))]);
        assert!(
            text.contains("'x-message-ttl'") && text.contains("not an integer"),
            "{text}"
        );
        // RabbitMQ's terms (rabbit_misc:check_expiry, check_expires_arg).
        let text = error(&[("x-message-ttl", FieldValue::I64(-1))]);
        assert_eq!(text, "invalid arg 'x-message-ttl': {value_negative,-1}");
        let text = error(&[("x-expires", FieldValue::I64(0))]);
        assert_eq!(text, "invalid arg 'x-expires': {value_zero,0}");
        let text = error(&[("x-expires", FieldValue::I64(-5))]);
        assert_eq!(text, "invalid arg 'x-expires': {value_negative,-5}");
        let text = error(&[("x-max-priority", FieldValue::I64(256))]);
        assert!(
            text.contains("'x-max-priority'") && text.contains("0..255"),
            "{text}"
        );
        let text = error(&[("x-max-priority", FieldValue::I64(-1))]);
        assert!(text.contains("'x-max-priority'"), "{text}");
        let text = error(&[("x-consumer-timeout", FieldValue::Bool(true))]);
        assert!(text.contains("'x-consumer-timeout'"), "{text}");
        let text = error(&[("x-message-ttl", FieldValue::I64(EXPIRY_MS_MAX as i64 + 1))]);
        assert_eq!(
            text,
            "invalid arg 'x-message-ttl': {value_too_large,315360000001}"
        );
    }

    fn with_expiration(e: &str) -> BasicProperties {
        BasicProperties {
            expiration: Some(e.into()),
            ..BasicProperties::default()
        }
    }

    #[test]
    fn expiration_is_a_decimal_number_of_ms() {
        assert_eq!(expiration_ms(&BasicProperties::default()).unwrap(), None);
        assert_eq!(expiration_ms(&with_expiration("1500")).unwrap(), Some(1500));
        assert_eq!(expiration_ms(&with_expiration("0")).unwrap(), Some(0));
        let e = expiration_ms(&with_expiration("soon")).unwrap_err();
        assert_eq!(e.text, "invalid expiration 'soon': no_integer");
        let e = expiration_ms(&with_expiration("-5")).unwrap_err();
        assert_eq!(e.text, "invalid expiration '-5': {value_negative,-5}");
        assert_eq!(expiration_ms(&with_expiration("+5")).unwrap(), Some(5));
        assert_eq!(expiration_ms(&with_expiration("-0")).unwrap(), Some(0));
        // RabbitMQ's `check_expiry`: up to ten years, beyond 2^32 - 1.
        assert_eq!(
            expiration_ms(&with_expiration("4294967296")).unwrap(),
            Some(4_294_967_296)
        );
        assert_eq!(
            expiration_ms(&with_expiration("315360000000")).unwrap(),
            Some(315_360_000_000)
        );
        for (text, why) in [
            (" 5", "no_integer"),
            ("", "no_integer"),
            ("1e3", "{leftover_string,\"e3\"}"),
            ("5 ", "{leftover_string,\" \"}"),
            ("315360000001", "{value_too_large,315360000001}"),
            (
                "99999999999999999999999",
                "{value_too_large,99999999999999999999999}",
            ),
        ] {
            let e = expiration_ms(&with_expiration(text)).unwrap_err();
            assert_eq!(
                e.text,
                format!("invalid expiration '{text}': {why}"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_lower_ttl_applies() {
        let p = with_expiration("500");
        assert_eq!(effective_ttl_ms(Some(1000), &p), Some(500));
        assert_eq!(effective_ttl_ms(Some(100), &p), Some(100));
        assert_eq!(effective_ttl_ms(None, &p), Some(500));
        assert_eq!(
            effective_ttl_ms(Some(7), &BasicProperties::default()),
            Some(7)
        );
        assert_eq!(effective_ttl_ms(None, &BasicProperties::default()), None);
    }
}
