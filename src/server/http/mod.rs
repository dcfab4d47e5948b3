//! The HTTP endpoint: its own thread and `mio` poll loop (never the AMQP I/O thread or the
//! workers), its connections, and the Prometheus page it serves (`/metrics`).

mod conn;
pub mod listener;
pub mod metrics;
