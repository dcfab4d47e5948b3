//! The HTTP endpoints, each on its own threads and `mio` poll (never the AMQP I/O thread
//! or the workers): the Prometheus page (`/metrics`, [`listener`]) and the management
//! HTTP API (`/api`, [`api`]) with the web UI that uses it (every other path, [`ui`]) on
//! the HTTP/1.1 server of [`server`].

pub mod api;
mod conn;
pub mod listener;
pub mod metrics;
pub mod request;
pub mod response;
pub mod server;
mod stream;
pub mod ui;

/// Connections of the HTTP part of the file-descriptor budget (`http`) the metrics
/// endpoint and the management API get: the metrics endpoint, when on, a quarter (at
/// least 1, at most [`listener::METRICS_CONNECTIONS_MAX`]: Prometheus scrapes one page at
/// a time), the API the rest.
pub fn split_connections(http: usize, metrics_on: bool) -> (usize, usize) {
    let metrics = if metrics_on {
        (http / 4).clamp(1, listener::METRICS_CONNECTIONS_MAX)
    } else {
        0
    };
    (metrics, http.saturating_sub(metrics).max(1))
}
