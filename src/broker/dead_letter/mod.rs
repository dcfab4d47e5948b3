//! Dead-lettering (RabbitMQ's `x-dead-letter-exchange`): a message a queue gives up on is
//! republished to another exchange with the history of its deaths in an `x-death` header.
//!
//! The triggers are a rejection (`basic.reject` / `basic.nack` with `requeue = false`),
//! a TTL that passed, a length limit and a delivery limit (docs/lifecycle.md). The
//! `x-death` entries follow RabbitMQ: `queue`, `reason`, `count`, `exchange`,
//! `routing-keys`, `time`, most recent first, one entry per (queue, reason) whose count
//! grows; `x-first-death-*` are set once, `x-last-death-*` every time. The `expiration`
//! property is removed, so the dead letter does not expire again where it lands, and kept
//! as `original-expiration` in the new entry.

pub mod jobs;
pub mod replay;

use crate::broker::message::{Message, RouteNames};
use crate::error::BrokerError;
use crate::types::{BasicProperties, FieldTable, FieldValue};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a queue sends the messages it gives up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Exchange to republish to (`x-dead-letter-exchange`; "" is the default exchange).
    pub exchange: String,
    /// Routing key to use (`x-dead-letter-routing-key`); `None` keeps the message's own.
    pub routing_key: Option<String>,
}

impl DeadLetter {
    /// Reads the dead-letter settings from queue arguments (`None` when the queue has no
    /// `x-dead-letter-exchange`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED when either argument is not a string, or a routing key is
    /// given without an exchange (RabbitMQ's validation).
    pub fn from_arguments(arguments: &FieldTable) -> Result<Option<DeadLetter>, BrokerError> {
        let text = |key: &str| -> Result<Option<String>, BrokerError> {
            match arguments.get(key) {
                None => Ok(None),
                Some(v) => v.as_str().map(|s| Some(s.to_string())).ok_or_else(|| {
                    BrokerError::precondition(format!(
                        "invalid arg '{key}': {} is not a string",
                        v.to_json()
                    ))
                }),
            }
        };
        let exchange = text("x-dead-letter-exchange")?;
        let routing_key = text("x-dead-letter-routing-key")?;
        match (exchange, routing_key) {
            (Some(exchange), routing_key) => Ok(Some(DeadLetter {
                exchange,
                routing_key,
            })),
            (None, Some(_)) => Err(BrokerError::precondition(
                "invalid arg 'x-dead-letter-routing-key': it needs x-dead-letter-exchange",
            )),
            (None, None) => Ok(None),
        }
    }

    /// The message to republish: same body and properties, headers extended with this
    /// death; and the routing key to publish it with. Without `x-dead-letter-routing-key`
    /// it keeps every routing key it had, those of its `CC` and `BCC` headers included;
    /// with it, that key is its only one (RabbitMQ's `rabbit_dead_letter:publish`).
    pub fn message(&self, msg: &Message, queue: &str, reason: &str) -> (Message, String) {
        let (routing_key, header_routes) = match &self.routing_key {
            Some(key) => (key.clone(), None),
            None => (msg.routing_key().to_string(), msg.header_routes().cloned()),
        };
        let mut properties: BasicProperties = msg.properties().clone();
        let mut headers = properties.headers.take().unwrap_or_default();
        let expiration = properties.expiration.take();
        record_death(&mut headers, msg, queue, reason, expiration.as_deref());
        properties.headers = Some(headers);
        let body = msg.body.clone();
        let names = RouteNames::with_header_routes(
            self.exchange.as_str().into(),
            routing_key.as_str().into(),
            header_routes,
        );
        (
            Message::with_names(Arc::new(names), properties.into_boxed(), body),
            routing_key,
        )
    }
}

fn s(v: &str) -> FieldValue {
    FieldValue::string(v)
}

/// Adds one death to `headers` (RabbitMQ's `x-death` rules).
fn record_death(
    headers: &mut FieldTable,
    msg: &Message,
    queue: &str,
    reason: &str,
    original_expiration: Option<&str>,
) {
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut deaths = match headers.remove("x-death") {
        Some(FieldValue::Array(items)) => items,
        _ => Vec::new(),
    };
    let same = |t: &FieldTable| {
        t.get("queue").and_then(FieldValue::as_str) == Some(queue)
            && t.get("reason").and_then(FieldValue::as_str) == Some(reason)
    };
    let existing = deaths
        .iter()
        .position(|d| matches!(d, FieldValue::Table(t) if same(t)));
    let entry = match existing.map(|i| deaths.remove(i)) {
        Some(FieldValue::Table(mut t)) => {
            let count = t.get("count").and_then(FieldValue::as_i64).unwrap_or(0);
            t.insert("count".into(), FieldValue::I64(count + 1));
            t.insert("time".into(), FieldValue::Timestamp(now_s));
            t
        }
        _ => {
            let mut t = FieldTable::new();
            t.insert("queue".into(), s(queue));
            t.insert("reason".into(), s(reason));
            t.insert("count".into(), FieldValue::I64(1));
            t.insert("exchange".into(), s(msg.exchange()));
            // Its routing key and CC keys, not its BCC keys (RabbitMQ's `mc:record_death`).
            let cc = msg.header_routes().map_or(&[][..], |h| h.cc());
            let keys = std::iter::once(msg.routing_key()).chain(cc.iter().map(String::as_str));
            t.insert(
                "routing-keys".into(),
                FieldValue::Array(keys.map(s).collect()),
            );
            t.insert("time".into(), FieldValue::Timestamp(now_s));
            if let Some(e) = original_expiration {
                t.insert("original-expiration".into(), s(e));
            }
            t
        }
    };
    deaths.insert(0, FieldValue::Table(entry));
    headers.insert("x-death".into(), FieldValue::Array(deaths));
    for (key, value) in [
        ("queue", queue),
        ("reason", reason),
        ("exchange", msg.exchange()),
    ] {
        headers
            .entry(format!("x-first-death-{key}"))
            .or_insert_with(|| s(value));
        headers.insert(format!("x-last-death-{key}"), s(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(h: &FieldTable, i: usize) -> FieldTable {
        match h.get("x-death") {
            Some(FieldValue::Array(a)) => match &a[i] {
                FieldValue::Table(t) => t.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn first_death_then_a_repeat_counts_up_and_moves_to_the_front() {
        let dl = DeadLetter {
            exchange: String::new(),
            routing_key: Some("dlq".into()),
        };
        let m = Message::new("orders", "new", BasicProperties::default(), b"x".to_vec());
        let (m1, key) = dl.message(&m, "work", "rejected");
        assert_eq!(key, "dlq");
        let h = m1.headers().unwrap();
        let d = death(h, 0);
        assert_eq!(d.get("queue").and_then(FieldValue::as_str), Some("work"));
        assert_eq!(d.get("count"), Some(&FieldValue::I64(1)));
        assert_eq!(
            d.get("exchange").and_then(FieldValue::as_str),
            Some("orders")
        );
        assert_eq!(
            h.get("x-first-death-queue").and_then(FieldValue::as_str),
            Some("work")
        );
        let (m2, _) = dl.message(&m1, "dlq", "rejected");
        let (m3, _) = dl.message(&m2, "work", "rejected");
        let h = m3.headers().unwrap();
        let front = death(h, 0);
        assert_eq!(
            front.get("queue").and_then(FieldValue::as_str),
            Some("work")
        );
        assert_eq!(front.get("count"), Some(&FieldValue::I64(2)));
        assert_eq!(
            death(h, 1).get("queue").and_then(FieldValue::as_str),
            Some("dlq")
        );
        assert_eq!(
            h.get("x-first-death-queue").and_then(FieldValue::as_str),
            Some("work")
        );
        assert_eq!(
            h.get("x-last-death-queue").and_then(FieldValue::as_str),
            Some("work")
        );
    }

    #[test]
    fn arguments_are_validated() {
        let mut a = FieldTable::new();
        assert_eq!(DeadLetter::from_arguments(&a).unwrap(), None);
        a.insert("x-dead-letter-routing-key".into(), s("k"));
        assert!(DeadLetter::from_arguments(&a).is_err());
        a.insert("x-dead-letter-exchange".into(), FieldValue::I64(1));
        assert!(DeadLetter::from_arguments(&a).is_err());
        a.insert("x-dead-letter-exchange".into(), s("dlx"));
        assert_eq!(
            DeadLetter::from_arguments(&a).unwrap(),
            Some(DeadLetter {
                exchange: "dlx".into(),
                routing_key: Some("k".into())
            })
        );
    }
}
