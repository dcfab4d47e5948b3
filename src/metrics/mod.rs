//! Metrics the broker counts as it works, for the Prometheus endpoint
//! (`docs/operations.md`, "Metrics"): lock-free counters and histograms the hot paths bump
//! with one relaxed atomic add, and the Prometheus text format they are written in.
//!
//! Layout: `counters` (message events per vhost and broker-wide), `histogram` (fixed
//! buckets, the fsync latency), `text` (the exposition format: HELP/TYPE lines, label
//! escaping). The page itself is built by `server::http::metrics` and served by
//! `server::http::listener`.

pub mod counters;
pub mod histogram;
pub mod text;

pub use counters::{EventCounters, EventSnapshot, QueueChurn, VhostCounters, DEAD_LETTER_REASONS};
pub use histogram::{Histogram, HistogramSnapshot};
