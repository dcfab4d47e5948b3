//! Server settings: what `relaymq-server`'s flags set.

use crate::broker::BrokerConfig;
use crate::limits::SHUTDOWN_FLUSH_MS_DEFAULT;
use crate::server::tls::TlsConfig;
use crate::storage::flusher::FsyncMode;
use crate::storage::types::SEGMENT_BYTES_DEFAULT;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Default native-protocol listen address (loopback only, port 5673).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:5673";

/// Default AMQP 0-9-1 listen address: loopback, port 5672, the port every AMQP client
/// assumes (IANA's `amqp`).
pub const AMQP_LISTEN_DEFAULT: &str = "127.0.0.1:5672";

/// Default Prometheus metrics address (`--metrics-listen`): loopback, port 15692, the
/// port of RabbitMQ's `rabbitmq_prometheus` plugin, so existing scrape configs carry over.
pub const METRICS_LISTEN_DEFAULT: &str = "127.0.0.1:15692";

/// Default management HTTP API address (`--http-listen`): loopback, port 15672, the
/// port of RabbitMQ's management plugin, so tools and bookmarks carry over (and clash
/// with a local RabbitMQ's management plugin on the same machine).
pub const HTTP_LISTEN_DEFAULT: &str = "127.0.0.1:15672";

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address of the native-protocol listener (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Address of the AMQP 0-9-1 listener (`--amqp-listen`; `None` = off; port 0 picks a
    /// free port).
    pub amqp_listen: Option<SocketAddr>,
    /// Data directory (created if missing).
    pub data_dir: PathBuf,
    /// Worker threads executing requests.
    pub workers: usize,
    /// Where to write `{"listen": "HOST:PORT", "amqp_listen": "HOST:PORT"}` once the server
    /// serves (`amqp_listen`, `tls_listen`, `amqp_tls_listen` and `metrics_listen` only
    /// when those listeners are on).
    pub ready_file: Option<PathBuf>,
    /// Time a shutdown waits for outbound buffers to flush, in milliseconds.
    pub shutdown_flush_ms: u64,
    /// When persistent messages are fsynced (`--fsync`).
    pub fsync: FsyncMode,
    /// Size at which a queue's segment file is sealed, in bytes (`--segment-bytes`).
    pub segment_bytes: u64,
    /// Core settings, with the limits the server starts with (`broker.limits`: frame
    /// size, heartbeat and channel max offered, connection counts, …).
    pub broker: BrokerConfig,
    /// TLS listeners beside the plain ones (`--tls-cert`, `--tls-key`, ...; `None` = no
    /// TLS). See `docs/security.md §4`.
    pub tls: Option<TlsConfig>,
    /// Address of the Prometheus metrics endpoint (`--metrics-listen`; `None` = off; port
    /// 0 picks a free port). Issue 8, `docs/operations.md`.
    pub metrics_listen: Option<SocketAddr>,
    /// Address of the management HTTP API (`--http-listen`; `None` = off; port 0 picks a
    /// free port). `docs/http-api.md`.
    pub http_listen: Option<SocketAddr>,
    /// Whether message rates and their history are sampled (`--stats-collection`,
    /// RabbitMQ's `disable_metrics_collector` inverted): off, rates read zero and no
    /// history is kept. `docs/http-api.md` §5.
    pub stats_collection: bool,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 5673)),
            amqp_listen: Some(SocketAddr::from(([127, 0, 0, 1], 5672))),
            data_dir: PathBuf::from("./data"),
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            ready_file: None,
            shutdown_flush_ms: SHUTDOWN_FLUSH_MS_DEFAULT,
            fsync: FsyncMode::Always,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            broker: BrokerConfig::default(),
            tls: None,
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 15692))),
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 15672))),
            stats_collection: true,
        }
    }
}

/// The negotiated value of a setting both sides offer: 0 means "no preference", otherwise
/// the smaller one wins (AMQP 0-9-1 §1.4.2.6 tune rules, simplified).
pub fn negotiate<T: Copy + Ord + Default>(client: T, server: T) -> T {
    let zero = T::default();
    match (client == zero, server == zero) {
        (true, _) => server,
        (false, true) => client,
        (false, false) => client.min(server),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_addresses_match_their_constants() {
        let c = ServerConfig::default();
        assert_eq!(c.listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(
            c.amqp_listen.map(|a| a.to_string()).as_deref(),
            Some(AMQP_LISTEN_DEFAULT)
        );
        assert_eq!(
            c.metrics_listen.map(|a| a.to_string()).as_deref(),
            Some(METRICS_LISTEN_DEFAULT)
        );
        assert_eq!(
            c.http_listen.map(|a| a.to_string()).as_deref(),
            Some(HTTP_LISTEN_DEFAULT)
        );
    }

    #[test]
    fn zero_means_no_preference() {
        assert_eq!(negotiate(0u32, 131072), 131072);
        assert_eq!(negotiate(4096u32, 131072), 4096);
        assert_eq!(negotiate(60u16, 0), 60);
        assert_eq!(negotiate(0u16, 0), 0);
    }
}
