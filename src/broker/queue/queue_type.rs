//! Queue types (`x-queue-type`): `classic` (the default) and `quorum`, with the checks a
//! declaration of each must pass, in RabbitMQ 4.x's words (`rabbit_amqqueue`
//! `check_declare_arguments`, `rabbit_queue_type_util`, `rabbit_quorum_queue:capabilities`).
//!
//! A quorum queue on RelayMQ is a queue on one node with RabbitMQ's quorum-queue rules:
//! always durable, never exclusive, auto-delete or server-named; every message stored
//! whatever its delivery mode; a delivery limit of 20 unless set; RabbitMQ's poison-message
//! counting (`x-delivery-count`); 32 message priorities. `stream` is recognised and refused
//! (docs/lifecycle.md, "Quorum queues").

use crate::error::{BrokerError, ReplyCode};
use crate::types::{FieldTable, FieldValue};

/// The delivery limit of a quorum queue declared without one (RabbitMQ 4.0+,
/// `rabbit_quorum_queue` `?DEFAULT_DELIVERY_LIMIT`), in failed deliveries.
pub const QUORUM_DELIVERY_LIMIT_DEFAULT: u32 = 20;

/// Highest message priority of a quorum queue (RabbitMQ 4.x `rabbit_fifo` `?MAX_PRIORITY`:
/// 32 levels, 0–31).
pub const QUORUM_PRIORITY_MAX: u8 = 31;

/// The priority of a message without a `priority` property in a quorum queue (RabbitMQ 4.x
/// `rabbit_fifo` `?DEFAULT_PRIORITY`).
pub const QUORUM_PRIORITY_DEFAULT: u8 = 4;

/// A queue's type, read from its `x-queue-type` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// `classic` (or no `x-queue-type`).
    #[default]
    Classic,
    /// `quorum`.
    Quorum,
}

/// The arguments only RabbitMQ's streams take (`rabbit_stream_queue:capabilities/0`):
/// with the classic and quorum lists, every argument some queue type gives a meaning. A
/// type refuses those of the others it does not take.
const STREAM_ONLY_ARGUMENTS: [&str; 3] = [
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
];

/// What a classic queue takes: RabbitMQ's classic list, plus
/// `x-delivery-limit` and `x-consumer-timeout`, which RelayMQ's classic queues honour too.
const CLASSIC_ARGUMENTS: [&str; 16] = [
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
    "x-queue-leader-locator",
    "x-delivery-limit",
    "x-consumer-timeout",
];

/// What a quorum queue takes (`rabbit_quorum_queue:capabilities/0`).
const QUORUM_ARGUMENTS: [&str; 21] = [
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-overflow",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-member-placement-tag",
    "x-delivery-limit",
    "x-message-ttl",
    "x-queue-leader-locator",
    "x-consumer-disconnected-timeout",
    "x-consumer-timeout",
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
];

impl QueueType {
    /// The type of a queue with `arguments` as stored (validated at declare: anything but
    /// `quorum` is classic).
    pub fn of(arguments: &FieldTable) -> QueueType {
        match arguments.get("x-queue-type").and_then(FieldValue::as_str) {
            Some("quorum") => QueueType::Quorum,
            _ => QueueType::Classic,
        }
    }

    /// The type named by a declaration's `x-queue-type`.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED `invalid arg 'x-queue-type': …` (the caller adds the queue):
    /// for `stream`, which RelayMQ recognises but does not have; for an unknown name,
    /// RabbitMQ's `"unsupported queue type 'foo'"`; for a value that is not a string,
    /// `{unacceptable_type,T}`.
    pub fn parse(arguments: &FieldTable) -> Result<QueueType, BrokerError> {
        let Some(v) = arguments.get("x-queue-type") else {
            return Ok(QueueType::Classic);
        };
        match v.as_str() {
            Some("classic") => Ok(QueueType::Classic),
            Some("quorum") => Ok(QueueType::Quorum),
            Some("stream") => Err(BrokerError::precondition(
                "invalid arg 'x-queue-type': \"stream queues are not supported by this \
                 version of RelayMQ: declare a classic or quorum queue\"",
            )),
            Some(other) => Err(BrokerError::precondition(format!(
                "invalid arg 'x-queue-type': \"unsupported queue type '{other}'\""
            ))),
            None => Err(BrokerError::precondition(format!(
                "invalid arg 'x-queue-type': {{unacceptable_type,{}}}",
                v.rabbitmq_type_name()
            ))),
        }
    }

    /// The type's name as declared and listed (`classic`, `quorum`).
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }

    /// RabbitMQ's module name for the type, as its error texts print it.
    fn module(self) -> &'static str {
        match self {
            QueueType::Classic => "rabbit_classic_queue",
            QueueType::Quorum => "rabbit_quorum_queue",
        }
    }

    /// Whether some queue type gives `argument` a meaning.
    fn is_typed(argument: &str) -> bool {
        CLASSIC_ARGUMENTS.contains(&argument)
            || QUORUM_ARGUMENTS.contains(&argument)
            || STREAM_ONLY_ARGUMENTS.contains(&argument)
    }

    /// Whether this type takes `argument`.
    fn takes(self, argument: &str) -> bool {
        match self {
            QueueType::Classic => CLASSIC_ARGUMENTS.contains(&argument),
            QueueType::Quorum => QUORUM_ARGUMENTS.contains(&argument),
        }
    }

    /// Checks a declaration of a queue of this type named `name` in `vhost` (not
    /// passive): its properties and its arguments' names. The values of the arguments a
    /// type shares with others are checked elsewhere (`check_queue_arguments`).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED with RabbitMQ 4.x's texts, in its order: `Cannot declare a
    /// server-named queue for type rabbit_quorum_queue` (`generated`); `invalid arg
    /// 'x-max-priority' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue` (an
    /// argument of another type) and the values of the quorum-only arguments
    /// (`x-dead-letter-strategy`, `x-quorum-initial-group-size`); `invalid property
    /// 'auto-delete' for queue 'q' in vhost '/'`, then `'exclusive-owner'`, then
    /// `'non-durable'` (`rabbit_queue_type_util`).
    pub fn check_declaration(
        self,
        name: &str,
        vhost: &str,
        properties: DeclaredProperties,
        arguments: &FieldTable,
    ) -> Result<(), BrokerError> {
        let queue = format!("queue '{name}' in vhost '{vhost}'");
        if self == QueueType::Quorum && properties.generated {
            return Err(BrokerError::precondition(format!(
                "Cannot declare a server-named queue for type {}",
                self.module()
            )));
        }
        for key in arguments.keys() {
            if Self::is_typed(key) && !self.takes(key) {
                return Err(BrokerError::precondition(format!(
                    "invalid arg '{key}' for {queue} of queue type {}",
                    self.module()
                )));
            }
        }
        if let Some(v) = arguments.get("x-dead-letter-strategy") {
            match v.as_str() {
                Some("at-most-once" | "at-least-once") => {}
                Some(_) => {
                    return Err(BrokerError::precondition(format!(
                        "invalid arg 'x-dead-letter-strategy' for {queue}: invalid_dlx_strategy"
                    )))
                }
                None => {
                    return Err(BrokerError::precondition(format!(
                        "invalid arg 'x-dead-letter-strategy' for {queue}: \
                         {{unacceptable_type,{}}}",
                        v.rabbitmq_type_name()
                    )))
                }
            }
        }
        if let Some(v) = arguments.get("x-quorum-initial-group-size") {
            let why = match v.as_i64() {
                Some(n) if n > 0 => None,
                Some(0) => Some("{value_zero,0}".to_string()),
                Some(n) => Some(format!("{{value_negative,{n}}}")),
                None => Some(format!("{{unacceptable_type,{}}}", v.rabbitmq_type_name())),
            };
            if let Some(why) = why {
                return Err(BrokerError::precondition(format!(
                    "invalid arg 'x-quorum-initial-group-size' for {queue}: {why}"
                )));
            }
        }
        if self == QueueType::Quorum {
            for (refused, property) in [
                (properties.auto_delete, "auto-delete"),
                (properties.exclusive, "exclusive-owner"),
                (!properties.durable, "non-durable"),
            ] {
                if refused {
                    return Err(BrokerError::precondition(format!(
                        "invalid property '{property}' for {queue}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The 540 NOT_IMPLEMENTED RabbitMQ gives a `basic.consume` on a quorum queue from a
    /// channel with a global prefetch limit (`rabbit_quorum_queue:consume/3`).
    pub fn global_qos_refused(name: &str, vhost: &str) -> BrokerError {
        BrokerError::new(
            ReplyCode::NotImplemented,
            format!("queue '{name}' in vhost '{vhost}' does not support global qos"),
        )
    }

    /// The 540 NOT_IMPLEMENTED RabbitMQ gives a `queue.delete` of a quorum queue with
    /// `if-unused` or `if-empty` (`rabbit_quorum_queue:delete/4`).
    pub fn conditional_delete_refused(name: &str, vhost: &str, if_unused: bool) -> BrokerError {
        let flag = if if_unused { "if-unused" } else { "if-empty" };
        BrokerError::new(
            ReplyCode::NotImplemented,
            format!(
                "cannot delete queue '{name}' in vhost '{vhost}'. queue.delete operations with \
                 {flag} flag set are not supported by quorum queues"
            ),
        )
    }
}

/// The properties of a queue declaration a queue type checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclaredProperties {
    /// `durable`.
    pub durable: bool,
    /// `exclusive`.
    pub exclusive: bool,
    /// `auto-delete`.
    pub auto_delete: bool,
    /// The name was empty: the server generates one.
    pub generated: bool,
}

/// The effective delivery limit of a quorum queue from its argument and its policies'
/// values (RabbitMQ 4.x `rabbit_quorum_queue:resolve_delivery_limit`: the smaller, unless
/// one is negative, then the larger; none at all is [`QUORUM_DELIVERY_LIMIT_DEFAULT`]).
/// `None`: unlimited (a negative result).
pub fn quorum_delivery_limit(values: impl IntoIterator<Item = Option<i64>>) -> Option<u32> {
    let mut limit: Option<i64> = None;
    for v in values.into_iter().flatten() {
        limit = Some(match limit {
            None => v,
            Some(l) if l < 0 || v < 0 => l.max(v),
            Some(l) => l.min(v),
        });
    }
    match limit {
        None => Some(QUORUM_DELIVERY_LIMIT_DEFAULT),
        Some(n) if n < 0 => None,
        Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

/// Which returned messages of a quorum queue wait before they are ready again (RabbitMQ
/// 4.3 `delayed-retry-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryKind {
    /// `all`: every returned message.
    All,
    /// `failed`: messages whose delivery failed (`basic.reject`, a closed channel).
    Failed,
    /// `returned`: messages handed back unprocessed (`basic.nack`, recover, a consumer
    /// timeout).
    Returned,
}

/// A quorum queue's delayed retry (RabbitMQ 4.3 `rabbit_fifo` `delayed_retry`): a returned
/// message of the kind it names is ready again only after
/// min(`min_ms` × its delivery count (at least 1), `max_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayedRetry {
    /// Which returns wait.
    pub kind: RetryKind,
    /// The delay per failed delivery, ms (> 0).
    pub min_ms: u64,
    /// The longest delay, ms (≥ `min_ms` when set by the rules; RabbitMQ takes what it is
    /// given).
    pub max_ms: u64,
}

/// A quorum queue's delayed-retry settings from one source (its arguments, or its
/// policies merged): the type, min and max as given, not yet checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetrySource {
    /// `delayed-retry-type` (`x-delayed-retry-type`).
    pub kind: Option<String>,
    /// `delayed-retry-min`, ms.
    pub min: Option<i64>,
    /// `delayed-retry-max`, ms.
    pub max: Option<i64>,
}

impl RetrySource {
    /// The `x-delayed-retry-*` arguments of a queue.
    pub fn of_arguments(arguments: &FieldTable) -> RetrySource {
        RetrySource {
            kind: arguments
                .get("x-delayed-retry-type")
                .and_then(FieldValue::as_str)
                .map(str::to_string),
            min: arguments
                .get("x-delayed-retry-min")
                .and_then(FieldValue::as_i64),
            max: arguments
                .get("x-delayed-retry-max")
                .and_then(FieldValue::as_i64),
        }
    }
}

impl DelayedRetry {
    /// The delayed retry in force from a queue's arguments and its (merged) policy value,
    /// RabbitMQ 4.3's rules (`rabbit_quorum_queue:get_delayed_retry_config`): the type
    /// from the policy when it has one, else the argument; min and max each the smaller of
    /// the two; `disabled`, an unknown type or no valid min is no delayed retry; a max
    /// missing or ≤ 0 is the min.
    pub fn resolve(arguments: &RetrySource, policy: &RetrySource) -> Option<DelayedRetry> {
        let kind = match policy.kind.as_deref().or(arguments.kind.as_deref())? {
            "all" => RetryKind::All,
            "failed" => RetryKind::Failed,
            "returned" => RetryKind::Returned,
            _ => return None,
        };
        let smaller = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min = smaller(policy.min, arguments.min).filter(|&m| m > 0)? as u64;
        let max = smaller(policy.max, arguments.max)
            .filter(|&m| m > 0)
            .map_or(min, |m| m as u64);
        Some(DelayedRetry {
            kind,
            min_ms: min,
            max_ms: max,
        })
    }

    /// Whether a return waits: `failed` tells a failed delivery from one handed back.
    pub fn applies(&self, failed: bool) -> bool {
        match self.kind {
            RetryKind::All => true,
            RetryKind::Failed => failed,
            RetryKind::Returned => !failed,
        }
    }

    /// The wait of a message returned with `delivery_count` failed deliveries, ms
    /// (`rabbit_fifo:calculate_ready_at`: min(min × max(1, count), max)), at most
    /// [`DELAY_MS_MAX`](crate::broker::delayed::DELAY_MS_MAX) (ten years), so a due time
    /// always fits the HTTP API's 64-bit signed integers.
    pub fn delay_ms(&self, delivery_count: u32) -> u64 {
        self.min_ms
            .saturating_mul(u64::from(delivery_count.max(1)))
            .min(self.max_ms)
            .min(crate::broker::delayed::DELAY_MS_MAX)
    }

    /// RabbitMQ's description of it (`fmt_delayed_retry`): `all (min: 1000ms, max:
    /// 60000ms)`.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            RetryKind::All => "all",
            RetryKind::Failed => "failed",
            RetryKind::Returned => "returned",
        };
        format!("{kind} (min: {}ms, max: {}ms)", self.min_ms, self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(kind: Option<&str>, min: Option<i64>, max: Option<i64>) -> RetrySource {
        RetrySource {
            kind: kind.map(str::to_string),
            min,
            max,
        }
    }

    #[test]
    fn delayed_retry_follows_rabbitmq_4_3() {
        let none = RetrySource::default();
        let r = DelayedRetry::resolve(&source(Some("all"), Some(100), Some(1000)), &none).unwrap();
        assert_eq!(r.delay_ms(0), 100);
        assert_eq!(r.delay_ms(1), 100);
        assert_eq!(r.delay_ms(3), 300);
        assert_eq!(r.delay_ms(50), 1000);
        let huge =
            DelayedRetry::resolve(&source(Some("all"), Some(i64::MAX), None), &none).unwrap();
        assert_eq!(huge.delay_ms(3), crate::broker::delayed::DELAY_MS_MAX);
        assert_eq!(r.describe(), "all (min: 100ms, max: 1000ms)");
        assert!(r.applies(true) && r.applies(false));
        // No max: the min. No min, disabled, unknown: none.
        let r = DelayedRetry::resolve(&source(Some("failed"), Some(50), None), &none).unwrap();
        assert_eq!((r.min_ms, r.max_ms), (50, 50));
        assert!(r.applies(true) && !r.applies(false));
        assert!(DelayedRetry::resolve(&source(Some("all"), None, Some(9)), &none).is_none());
        assert!(DelayedRetry::resolve(&source(Some("disabled"), Some(9), None), &none).is_none());
        assert!(DelayedRetry::resolve(&source(Some("often"), Some(9), None), &none).is_none());
        assert!(DelayedRetry::resolve(&source(None, Some(9), None), &none).is_none());
        // The policy's type wins; min and max are the smaller of the two.
        let r = DelayedRetry::resolve(
            &source(Some("all"), Some(100), Some(5000)),
            &source(Some("returned"), Some(200), Some(1000)),
        )
        .unwrap();
        assert_eq!(r.kind, RetryKind::Returned);
        assert_eq!((r.min_ms, r.max_ms), (100, 1000));
        assert!(!r.applies(true) && r.applies(false));
    }

    fn args(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    const DURABLE: DeclaredProperties = DeclaredProperties {
        durable: true,
        exclusive: false,
        auto_delete: false,
        generated: false,
    };

    fn refusal(t: QueueType, p: DeclaredProperties, a: &[(&str, FieldValue)]) -> String {
        let e = t.check_declaration("q", "/", p, &args(a)).unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        e.text
    }

    #[test]
    fn the_type_argument_is_parsed_with_rabbitmqs_texts() {
        let q = args(&[("x-queue-type", FieldValue::string("quorum"))]);
        assert_eq!(QueueType::parse(&q).unwrap(), QueueType::Quorum);
        assert_eq!(QueueType::of(&q), QueueType::Quorum);
        assert_eq!(
            QueueType::parse(&FieldTable::new()).unwrap(),
            QueueType::Classic
        );
        let stream = QueueType::parse(&args(&[("x-queue-type", FieldValue::string("stream"))]));
        assert!(stream
            .unwrap_err()
            .text
            .contains("stream queues are not supported"));
        let other = QueueType::parse(&args(&[("x-queue-type", FieldValue::string("lazy"))]));
        assert!(other
            .unwrap_err()
            .text
            .contains("\"unsupported queue type 'lazy'\""));
        let number = QueueType::parse(&args(&[("x-queue-type", FieldValue::I64(1))]));
        assert!(number.unwrap_err().text.contains("{unacceptable_type,"));
    }

    #[test]
    fn a_quorum_queue_is_durable_shared_and_named() {
        let t = QueueType::Quorum;
        let mut p = DURABLE;
        assert!(t.check_declaration("q", "/", p, &FieldTable::new()).is_ok());
        p.auto_delete = true;
        p.exclusive = true;
        assert_eq!(
            refusal(t, p, &[]),
            "invalid property 'auto-delete' for queue 'q' in vhost '/'"
        );
        p.auto_delete = false;
        assert_eq!(
            refusal(t, p, &[]),
            "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"
        );
        p.exclusive = false;
        p.durable = false;
        assert_eq!(
            refusal(t, p, &[]),
            "invalid property 'non-durable' for queue 'q' in vhost '/'"
        );
        let generated = DeclaredProperties {
            generated: true,
            ..DURABLE
        };
        assert_eq!(
            refusal(t, generated, &[]),
            "Cannot declare a server-named queue for type rabbit_quorum_queue"
        );
        // A classic queue may be all of these.
        assert!(QueueType::Classic
            .check_declaration("q", "/", generated, &FieldTable::new())
            .is_ok());
    }

    #[test]
    fn each_type_refuses_the_arguments_of_the_others() {
        assert_eq!(
            refusal(
                QueueType::Quorum,
                DURABLE,
                &[("x-max-priority", FieldValue::I64(5))]
            ),
            "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type \
             rabbit_quorum_queue"
        );
        assert!(refusal(
            QueueType::Classic,
            DURABLE,
            &[(
                "x-dead-letter-strategy",
                FieldValue::string("at-least-once")
            )]
        )
        .ends_with("of queue type rabbit_classic_queue"));
        // Arguments no type knows are kept, as RabbitMQ keeps them.
        assert!(QueueType::Quorum
            .check_declaration(
                "q",
                "/",
                DURABLE,
                &args(&[("x-app-thing", FieldValue::I64(1))])
            )
            .is_ok());
    }

    #[test]
    fn quorum_only_arguments_are_checked() {
        let t = QueueType::Quorum;
        assert!(refusal(
            t,
            DURABLE,
            &[("x-dead-letter-strategy", FieldValue::string("sometimes"))]
        )
        .ends_with(": invalid_dlx_strategy"));
        assert!(refusal(
            t,
            DURABLE,
            &[("x-quorum-initial-group-size", FieldValue::I64(0))]
        )
        .ends_with(": {value_zero,0}"));
        let ok = args(&[
            (
                "x-dead-letter-strategy",
                FieldValue::string("at-least-once"),
            ),
            ("x-quorum-initial-group-size", FieldValue::I64(3)),
            ("x-delivery-limit", FieldValue::I64(-1)),
        ]);
        assert!(t.check_declaration("q", "/", DURABLE, &ok).is_ok());
    }

    #[test]
    fn the_delivery_limit_resolves_as_rabbitmqs() {
        assert_eq!(quorum_delivery_limit([None, None]), Some(20));
        assert_eq!(quorum_delivery_limit([Some(5), None]), Some(5));
        assert_eq!(quorum_delivery_limit([Some(5), Some(3)]), Some(3));
        assert_eq!(quorum_delivery_limit([Some(-1), None]), None);
        assert_eq!(quorum_delivery_limit([Some(-1), Some(7)]), Some(7));
        assert_eq!(quorum_delivery_limit([Some(0), None]), Some(0));
    }
}
