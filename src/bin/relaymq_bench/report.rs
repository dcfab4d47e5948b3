//! The figures of a run: counters the threads share, the latency histogram, the lines
//! printed every second and the final report (text or one JSON object).

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Largest end-to-end latency recorded, ns (an hour; longer values are clamped).
pub const LATENCY_NS_MAX: u64 = 3_600_000_000_000;

/// Significant decimal digits the latency histogram keeps.
pub const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// Nanoseconds per microsecond.
const NS_PER_US: f64 = 1_000.0;

/// An empty latency histogram (ns).
pub fn new_histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGNIFICANT_DIGITS)
        .map_err(|e| format!("latency histogram: {e}"))
}

/// Counters and latencies the producers and consumers update.
pub struct Stats {
    /// Messages handed to the client library.
    pub published: AtomicU64,
    /// Messages the server confirmed (with `--confirm`).
    pub confirmed: AtomicU64,
    /// Deliveries received.
    pub delivered: AtomicU64,
    /// Messages published towards each queue (the default, direct, topic and headers
    /// routes send each message to one queue).
    pub published_to: Vec<AtomicU64>,
    /// Deliveries received from each queue.
    pub delivered_from: Vec<AtomicU64>,
    /// Deliveries flagged as redelivered.
    pub redelivered: AtomicU64,
    /// Latencies recorded since the reporter last looked (ns).
    pub interval: Mutex<Histogram<u64>>,
}

impl Stats {
    pub fn new(queues: usize) -> Result<Stats, String> {
        Ok(Stats {
            published: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            published_to: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            delivered_from: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            redelivered: AtomicU64::new(0),
            interval: Mutex::new(new_histogram()?),
        })
    }

    /// Moves a consumer's latencies into the shared interval histogram.
    pub fn merge_latencies(&self, local: &mut Histogram<u64>) {
        if local.is_empty() {
            return;
        }
        let mut shared = self.interval.lock().unwrap_or_else(|e| e.into_inner());
        // Same bounds on both sides: adding cannot fail; a failure would only lose samples.
        let _ = shared.add(&*local);
        local.reset();
    }

    /// Takes the interval histogram, leaving an empty one.
    pub fn take_interval(&self) -> Histogram<u64> {
        let mut shared = self.interval.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = shared.clone();
        shared.reset();
        snapshot
    }

    /// Published, confirmed and delivered counts now.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.published.load(Ordering::Relaxed),
            self.confirmed.load(Ordering::Relaxed),
            self.delivered.load(Ordering::Relaxed),
        )
    }
}

/// Latency percentiles in µs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / NS_PER_US;
        Some(Latency {
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        })
    }
}

/// The outcome of a run.
#[derive(Debug)]
pub struct Summary {
    pub messages_published: u64,
    pub messages_confirmed: u64,
    pub messages_delivered: u64,
    /// Seconds from the first publish to the last publish (and its confirms).
    pub publish_seconds: f64,
    /// Seconds from the first publish to the last delivery (to the end of publishing
    /// when nothing consumes).
    pub seconds: f64,
    pub latency: Option<Latency>,
    pub server_rss_bytes: Option<u64>,
}

fn per_s(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

impl Summary {
    pub fn published_per_s(&self) -> f64 {
        per_s(self.messages_published, self.publish_seconds)
    }
    pub fn confirmed_per_s(&self) -> f64 {
        per_s(self.messages_confirmed, self.publish_seconds)
    }
    pub fn delivered_per_s(&self) -> f64 {
        per_s(self.messages_delivered, self.seconds)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let l = self.latency.unwrap_or_default();
        serde_json::json!({
            "published_per_s": self.published_per_s().round(),
            "confirmed_per_s": self.confirmed_per_s().round(),
            "delivered_per_s": self.delivered_per_s().round(),
            "latency_us": {"p50": l.p50, "p99": l.p99, "p999": l.p999, "max": l.max},
            "server_rss_bytes": self.server_rss_bytes,
            "messages_published": self.messages_published,
            "messages_confirmed": self.messages_confirmed,
            "messages_delivered": self.messages_delivered,
            "seconds": self.seconds,
        })
    }

    pub fn to_text(&self) -> String {
        let lat = match self.latency {
            Some(l) => format!(
                "p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
                l.p50, l.p99, l.p999, l.max
            ),
            None => "none (nothing delivered)".into(),
        };
        let rss = match self.server_rss_bytes {
            Some(b) => format!("{b} bytes ({})", mib(b)),
            None => "unknown (server not found on this machine)".into(),
        };
        format!(
            "summary: {} published in {:.2} s, {} delivered in {:.2} s\n\
             published: {:.0} msg/s\nconfirmed: {:.0} msg/s\ndelivered: {:.0} msg/s\n\
             latency:   {lat}\nserver RSS (highest sample): {rss}",
            self.messages_published,
            self.publish_seconds,
            self.messages_delivered,
            self.seconds,
            self.published_per_s(),
            self.confirmed_per_s(),
            self.delivered_per_s(),
        )
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// One line of the once-a-second progress report.
pub fn interval_line(
    elapsed_s: f64,
    delta: (u64, u64, u64),
    interval_s: f64,
    latency: Option<Latency>,
    rss: Option<u64>,
) -> String {
    let lat = match latency {
        Some(l) => format!(
            "latency p50 {:.0} p99 {:.0} p99.9 {:.0} max {:.0} µs",
            l.p50, l.p99, l.p999, l.max
        ),
        None => "latency -".into(),
    };
    let rss = rss
        .map(|b| format!(", server RSS {}", mib(b)))
        .unwrap_or_default();
    format!(
        "{elapsed_s:6.1}s  published {:.0}/s  confirmed {:.0}/s  delivered {:.0}/s  {lat}{rss}",
        per_s(delta.0, interval_s),
        per_s(delta.1, interval_s),
        per_s(delta.2, interval_s),
    )
}
