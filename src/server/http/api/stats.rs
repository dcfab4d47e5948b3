//! Statistics in RabbitMQ's shapes (`rabbit_mgmt_format`, `rabbit_mgmt_stats`): a
//! counter with its `*_details` `{"rate": …}`, and with `samples`, `avg_rate` and `avg`
//! when the request asks for history (`msg_rates_age`/`msg_rates_incr`,
//! `lengths_age`/`lengths_incr`, in seconds), from [`crate::broker::rates`].

use crate::broker::queue::QueueStats;
use crate::broker::rates::{self, series, History, MessageRates};
use crate::server::http::request::Request;
use serde_json::{json, Map, Value};

/// Longest history a request may ask for, in seconds: what is kept
/// ([`rates::RATE_HISTORY_SAMPLES`] samples at [`rates::RATE_SAMPLE_INTERVAL_MS`]).
pub const HISTORY_AGE_MAX_S: u64 =
    (rates::RATE_HISTORY_SAMPLES as u64 - 1) * rates::RATE_SAMPLE_INTERVAL_MS / 1000;

/// A window of history: the last `age_s` seconds, a sample every `incr_s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    age_s: u64,
    incr_s: u64,
}

/// The windows a request asks for: (message rates, lengths).
pub fn windows(request: &Request) -> (Option<Window>, Option<Window>) {
    let window = |age: &str, incr: &str| {
        let age_s: u64 = request.query(age)?.parse().ok()?;
        let incr_s: u64 = request
            .query(incr)
            .and_then(|v| v.parse().ok())
            .unwrap_or(5);
        Some(Window {
            age_s: age_s.min(HISTORY_AGE_MAX_S),
            incr_s: incr_s.max(rates::RATE_SAMPLE_INTERVAL_MS / 1000),
        })
    };
    (
        window("msg_rates_age", "msg_rates_incr"),
        window("lengths_age", "lengths_incr"),
    )
}

/// The samples of `h` inside `w`: indexes, oldest first, one every `incr_s`.
fn picked<const N: usize>(h: &History<N>, w: Window) -> Vec<usize> {
    let Some(&newest) = h.timestamps.last() else {
        return Vec::new();
    };
    let from = newest.saturating_sub(w.age_s * 1000);
    let step = usize::try_from(w.incr_s * 1000 / rates::RATE_SAMPLE_INTERVAL_MS)
        .unwrap_or(1)
        .max(1);
    let mut idx: Vec<usize> = (0..h.timestamps.len())
        .rev()
        .step_by(step)
        .filter(|&i| h.timestamps[i] >= from)
        .collect();
    idx.reverse();
    idx
}

/// `{"rate": r}`, rounded to 0.1 as RabbitMQ shows rates.
pub fn rate(r: f64) -> Value {
    json!({ "rate": (r * 10.0).round() / 10.0 })
}

/// A counter's details with its history: `samples` are the counter's totals at each
/// picked sample (the total now less the increments since), `avg_rate` the rate over the
/// window, `avg` the mean of the samples.
pub fn counter_details<const N: usize>(
    r: f64,
    total: u64,
    h: &History<N>,
    s: usize,
    w: Window,
) -> Value {
    let idx = picked(h, w);
    let mut d = rate(r);
    if idx.is_empty() {
        return d;
    }
    // Totals at each sample, from the newest backwards.
    let mut at = vec![0u64; h.samples.len()];
    let mut t = total;
    for i in (0..h.samples.len()).rev() {
        at[i] = t;
        t = t.saturating_sub(u64::from(h.samples[i][s]));
    }
    let samples: Vec<Value> = idx
        .iter()
        .rev()
        .map(|&i| json!({"sample": at[i], "timestamp": h.timestamps[i]}))
        .collect();
    let (first, last) = (idx[0], idx[idx.len() - 1]);
    let span_ms = h.timestamps[last].saturating_sub(h.timestamps[first]);
    let avg_rate = if span_ms == 0 {
        0.0
    } else {
        at[last].saturating_sub(at[first]) as f64 * 1000.0 / span_ms as f64
    };
    let avg = idx.iter().map(|&i| at[i] as f64).sum::<f64>() / idx.len() as f64;
    d["samples"] = Value::Array(samples);
    d["avg_rate"] = json!((avg_rate * 10.0).round() / 10.0);
    d["avg"] = json!(avg);
    d
}

/// A length's details with its history (`samples` the length at each picked sample).
fn length_details(
    r: f64,
    h: &History,
    pick: impl Fn(&[u32; rates::HISTORY_SERIES]) -> u64,
    w: Option<Window>,
) -> Value {
    let mut d = rate(r);
    let Some(w) = w else {
        return d;
    };
    let idx = picked(h, w);
    if idx.is_empty() {
        return d;
    }
    let values: Vec<u64> = idx.iter().map(|&i| pick(&h.samples[i])).collect();
    d["samples"] = Value::Array(
        idx.iter()
            .zip(&values)
            .rev()
            .map(|(&i, v)| json!({"sample": v, "timestamp": h.timestamps[i]}))
            .collect(),
    );
    let span_ms = h.timestamps[idx[idx.len() - 1]].saturating_sub(h.timestamps[idx[0]]);
    let avg_rate = if span_ms == 0 {
        0.0
    } else {
        (values[values.len() - 1] as f64 - values[0] as f64) * 1000.0 / span_ms as f64
    };
    d["avg_rate"] = json!((avg_rate * 10.0).round() / 10.0);
    d["avg"] = json!(values.iter().sum::<u64>() as f64 / values.len() as f64);
    d
}

/// Totals of the counters RabbitMQ shows in a queue's (or a sum's) `message_stats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Messages enqueued.
    pub publish: u64,
    /// Pushed to consumers that ack.
    pub deliver: u64,
    /// Pushed without acks.
    pub deliver_no_ack: u64,
    /// `basic.get` with acks.
    pub get: u64,
    /// `basic.get` without acks.
    pub get_no_ack: u64,
    /// `basic.get` on an empty queue.
    pub get_empty: u64,
    /// All four kinds.
    pub deliver_get: u64,
    /// Delivered again.
    pub redeliver: u64,
    /// Acknowledged.
    pub ack: u64,
}

impl Counters {
    /// A queue's counters.
    pub fn of(st: &QueueStats) -> Counters {
        let gets = st.got + st.got_no_ack;
        let pushes = st.delivered.saturating_sub(gets);
        Counters {
            publish: st.published,
            deliver: pushes.saturating_sub(st.delivered_no_ack),
            deliver_no_ack: st.delivered_no_ack,
            get: st.got,
            get_no_ack: st.got_no_ack,
            get_empty: st.get_empty,
            deliver_get: st.delivered,
            redeliver: st.redelivered,
            ack: st.acked,
        }
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &Counters) {
        self.publish += o.publish;
        self.deliver += o.deliver;
        self.deliver_no_ack += o.deliver_no_ack;
        self.get += o.get;
        self.get_no_ack += o.get_no_ack;
        self.get_empty += o.get_empty;
        self.deliver_get += o.deliver_get;
        self.redeliver += o.redeliver;
        self.ack += o.ack;
    }
}

/// `message_stats` with every counter, its rate, and with history for the four kept
/// series when `w` asks for it.
pub fn message_stats(
    c: &Counters,
    r: &MessageRates,
    h: &History,
    w: Option<Window>,
) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |name: &str, total: u64, rate_now: f64, kept: Option<usize>| {
        m.insert(name.to_string(), json!(total));
        let details = match (kept, w) {
            (Some(s), Some(w)) => counter_details(rate_now, total, h, s, w),
            _ => rate(rate_now),
        };
        m.insert(format!("{name}_details"), details);
    };
    put("publish", c.publish, r.publish, Some(series::PUBLISH));
    put("deliver", c.deliver, r.deliver, None);
    put("deliver_no_ack", c.deliver_no_ack, r.deliver_no_ack, None);
    put("get", c.get, r.get, None);
    put("get_no_ack", c.get_no_ack, r.get_no_ack, None);
    put("get_empty", c.get_empty, r.get_empty, None);
    put(
        "deliver_get",
        c.deliver_get,
        r.deliver_get,
        Some(series::DELIVER_GET),
    );
    put(
        "redeliver",
        c.redeliver,
        r.redeliver,
        Some(series::REDELIVER),
    );
    put("ack", c.ack, r.ack, Some(series::ACK));
    m
}

/// `messages`, `messages_ready`, `messages_unacknowledged` and their `*_details`
/// (`samples` when `w` asks for them), into `into`.
pub fn lengths(
    into: &mut Map<String, Value>,
    ready: usize,
    unacked: usize,
    r: &MessageRates,
    h: &History,
    w: Option<Window>,
) {
    let ready_of = |s: &[u32; rates::HISTORY_SERIES]| u64::from(s[series::READY]);
    let unacked_of = |s: &[u32; rates::HISTORY_SERIES]| u64::from(s[series::UNACKED]);
    into.insert("messages".into(), json!(ready + unacked));
    into.insert(
        "messages_details".into(),
        length_details(r.ready + r.unacked, h, |s| ready_of(s) + unacked_of(s), w),
    );
    into.insert("messages_ready".into(), json!(ready));
    into.insert(
        "messages_ready_details".into(),
        length_details(r.ready, h, ready_of, w),
    );
    into.insert("messages_unacknowledged".into(), json!(unacked));
    into.insert(
        "messages_unacknowledged_details".into(),
        length_details(r.unacked, h, unacked_of, w),
    );
}

/// Messages published to `vh`'s exchanges (their `publish_in`s): what its clients
/// published, routed or not.
pub fn published(vh: &crate::broker::vhost::VirtualHost) -> u64 {
    vh.all_exchanges().iter().map(|x| x.counters.read().0).sum()
}

/// A time as RabbitMQ's management API writes `idle_since`: UTC, milliseconds,
/// `2026-12-01T21:03:20.024+00:00`; `ms` is since the Unix epoch.
pub fn timestamp(ms: u64) -> Value {
    let text = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3f+00:00").to_string())
        .unwrap_or_default();
    Value::String(text)
}

/// `message_stats` from sampled object counters: for each `(name, index)`, the total
/// `now[index]` and its rate.
pub fn object_stats(
    fields: &[(&str, usize)],
    now: &[u64; rates::OBJECT_COUNTERS_MAX],
    r: &rates::ObjectRates,
) -> Map<String, Value> {
    let mut m = Map::new();
    for (name, i) in fields {
        m.insert((*name).to_string(), json!(now[*i]));
        m.insert(format!("{name}_details"), rate(r.rates[*i]));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        History {
            timestamps: (0..5).map(|i| 1_000_000 + i * 5_000).collect(),
            samples: (0..5).map(|i| [10, 0, 0, 0, i as u32, 0]).collect(),
        }
    }

    #[test]
    fn timestamps_are_written_as_rabbitmq_writes_idle_since() {
        assert_eq!(
            timestamp(1_796_159_000_024),
            json!("2026-12-01T21:03:20.024+00:00")
        );
        assert_eq!(timestamp(0), json!("1970-01-01T00:00:00.000+00:00"));
    }

    #[test]
    fn counter_samples_are_totals_going_back_from_now() {
        let w = Window {
            age_s: 20,
            incr_s: 10,
        };
        let d = counter_details(2.0, 100, &history(), series::PUBLISH, w);
        assert_eq!(
            d["samples"],
            json!([
                {"sample": 100, "timestamp": 1_020_000},
                {"sample": 80, "timestamp": 1_010_000},
                {"sample": 60, "timestamp": 1_000_000},
            ])
        );
        assert_eq!(d["avg_rate"], json!(2.0));
        assert_eq!(d["avg"], json!(80.0));
    }

    #[test]
    fn length_samples_are_the_lengths() {
        let w = Window {
            age_s: 10,
            incr_s: 5,
        };
        let d = length_details(0.2, &history(), |s| u64::from(s[series::READY]), Some(w));
        assert_eq!(
            d["samples"][0],
            json!({"sample": 4, "timestamp": 1_020_000})
        );
        assert_eq!(d["samples"].as_array().unwrap().len(), 3);
        assert_eq!(
            length_details(0.2, &history(), |_| 0, None),
            json!({"rate": 0.2})
        );
    }
}
