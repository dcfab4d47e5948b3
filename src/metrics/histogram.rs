//! A latency histogram with fixed buckets in lock-free atomics: recording is three
//! relaxed adds, reading takes a snapshot without stopping writers (Prometheus histogram
//! semantics: cumulative `le` buckets, `_sum`, `_count`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds (0.1 ms … 10 s, the 1-2.5-5 steps of
/// Prometheus' client libraries); a last implicit bucket is `+Inf`. Sized for fsync
/// latency: ~0.1 ms on NVMe, tens of ms on spinning disks, seconds when storage stalls.
pub const BUCKET_BOUNDS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets including `+Inf`.
const BUCKETS: usize = BUCKET_BOUNDS_US.len() + 1;

/// Observations of a duration, bucketed.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative): `counts[i]` holds those ≤
    /// `BUCKET_BOUNDS_US[i]` and above the previous bound; the last one `+Inf`.
    counts: [AtomicU64; BUCKETS],
    /// Sum of every observation, in nanoseconds.
    sum_ns: AtomicU64,
}

/// A histogram read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, observations ≤ it)`, cumulative, ending with
    /// `f64::INFINITY`.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of the observations, in seconds.
    pub sum_seconds: f64,
    /// Number of observations (equals the `+Inf` bucket).
    pub count: u64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram::default()
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKET_BOUNDS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(BUCKET_BOUNDS_US.len());
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The buckets, sum and count now (writers are not stopped: an observation recorded
    /// meanwhile may be in the buckets and not yet in the sum).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = Vec::with_capacity(BUCKETS);
        let mut total = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            total = total.saturating_add(c.load(Ordering::Relaxed));
            let bound = BUCKET_BOUNDS_US
                .get(i)
                .map_or(f64::INFINITY, |&us| us as f64 / 1e6);
            buckets.push((bound, total));
        }
        HistogramSnapshot {
            buckets,
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            count: total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let h = Histogram::new();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets.len(), 17);
        assert_eq!(s.buckets[0], (0.0001, 2));
        assert_eq!(s.buckets[4].1, 2, "2.5 ms bucket");
        assert_eq!(s.buckets[5], (0.005, 3));
        assert_eq!(s.buckets[15], (10.0, 3));
        assert_eq!(s.buckets[16], (f64::INFINITY, 4));
        assert!((s.sum_seconds - 60.00315).abs() < 1e-9);
    }
}
