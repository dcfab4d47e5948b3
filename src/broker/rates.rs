//! Message rates for `list queues` and `list vhosts`: publish, deliver/get and ack per
//! second, as RabbitMQ's management API shows them (`message_stats.publish_details.rate`,
//! ...). The housekeeper samples every queue's totals every [`RATE_SAMPLE_INTERVAL_MS`];
//! a rate is the difference between the last two samples over the time between them.

use crate::broker::node::Broker;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Time between two samples of the queues' totals, in ms (RabbitMQ's
/// `collect_statistics_interval` default, 5000 ms).
pub const RATE_SAMPLE_INTERVAL_MS: u64 = 5000;

/// Messages per second over the last sample interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MessageRates {
    /// Messages enqueued per second (RabbitMQ's `publish_details.rate`).
    pub publish: f64,
    /// Messages delivered or fetched per second (`deliver_get_details.rate`).
    pub deliver_get: f64,
    /// Messages acknowledged per second (`ack_details.rate`).
    pub ack: f64,
}

/// (vhost, queue).
type QueueKey = (Arc<str>, Arc<str>);

#[derive(Debug, Clone, Copy)]
struct Totals {
    published: u64,
    delivered: u64,
    acked: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// When the last sample was taken, ms since the Unix epoch (0: never).
    sampled_ms: u64,
    totals: HashMap<QueueKey, Totals>,
    rates: HashMap<QueueKey, MessageRates>,
}

/// The rates of every queue, updated by [`Rates::sample`].
#[derive(Debug, Default)]
pub struct Rates {
    inner: Mutex<Inner>,
}

fn per_second(now: u64, before: u64, elapsed_ms: u64) -> f64 {
    now.saturating_sub(before) as f64 * 1000.0 / elapsed_ms as f64
}

impl Rates {
    /// Takes a sample at `now_ms` (ms since the Unix epoch) when
    /// [`RATE_SAMPLE_INTERVAL_MS`] passed since the last one; queues gone since are
    /// forgotten. Called by the housekeeper every round.
    pub fn sample(&self, broker: &Broker, now_ms: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now_ms.saturating_sub(inner.sampled_ms);
        if elapsed < RATE_SAMPLE_INTERVAL_MS {
            return;
        }
        let first = inner.sampled_ms == 0;
        let mut totals = HashMap::new();
        let mut rates = HashMap::new();
        for vh in broker.vhosts() {
            for q in vh.all_queues() {
                let st = q.stats();
                let now = Totals {
                    published: st.published,
                    delivered: st.delivered,
                    acked: st.acked,
                };
                let key = (Arc::clone(&vh.name), Arc::clone(&q.name));
                if let Some(before) = inner.totals.get(&key).filter(|_| !first) {
                    rates.insert(
                        key.clone(),
                        MessageRates {
                            publish: per_second(now.published, before.published, elapsed),
                            deliver_get: per_second(now.delivered, before.delivered, elapsed),
                            ack: per_second(now.acked, before.acked, elapsed),
                        },
                    );
                }
                totals.insert(key, now);
            }
        }
        inner.sampled_ms = now_ms;
        inner.totals = totals;
        inner.rates = rates;
    }

    /// The rates of one queue (zero before its second sample).
    pub fn queue(&self, vhost: &str, queue: &str) -> MessageRates {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .rates
            .get(&(Arc::from(vhost), Arc::from(queue)))
            .copied()
            .unwrap_or_default()
    }

    /// The sum of the rates of a vhost's queues.
    pub fn vhost(&self, vhost: &str) -> MessageRates {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.rates.iter().filter(|((v, _), _)| &**v == vhost).fold(
            MessageRates::default(),
            |a, (_, r)| MessageRates {
                publish: a.publish + r.publish,
                deliver_get: a.deliver_get + r.deliver_get,
                ack: a.ack + r.ack,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{BrokerConfig, QueueSpec};

    #[test]
    fn rates_are_differences_over_the_interval() {
        let broker = Broker::new(BrokerConfig::default());
        let vh = broker.vhost("/").unwrap();
        let spec = QueueSpec {
            name: "q".into(),
            ..QueueSpec::default()
        };
        vh.declare_queue(&spec, 1).unwrap();
        let rates = Rates::default();
        rates.sample(&broker, 1_000_000);
        assert_eq!(rates.queue("/", "q"), MessageRates::default());
        let q = vh.queue("q").unwrap();
        for _ in 0..50 {
            let msg = crate::broker::Message::new(
                "",
                "q",
                crate::types::BasicProperties::default(),
                Vec::<u8>::new(),
            );
            q.enqueue(Arc::new(msg));
        }
        // Too early: nothing changes.
        rates.sample(&broker, 1_000_000 + RATE_SAMPLE_INTERVAL_MS - 1);
        assert_eq!(rates.queue("/", "q").publish, 0.0);
        rates.sample(&broker, 1_000_000 + 10_000);
        assert_eq!(rates.queue("/", "q").publish, 5.0);
        assert_eq!(rates.vhost("/").publish, 5.0);
        assert_eq!(rates.vhost("other").publish, 0.0);
    }
}
