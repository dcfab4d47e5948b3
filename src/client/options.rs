//! Option structs for the requests that take many flags. Every field defaults to AMQP's
//! default (`false`, empty).

use crate::types::FieldTable;
use std::path::PathBuf;
use std::time::Duration;

/// How to connect: address, credentials, virtual host and the values proposed to the
/// server at connection open.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// `HOST:PORT` of the server's native listener.
    pub addr: String,
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
    /// Virtual host to open (RabbitMQ's default is `/`).
    pub vhost: String,
    /// Heartbeat interval to ask for, in seconds (0: the server's choice). The negotiated
    /// value is the smaller of the two; only a server configured with 0 turns heartbeats
    /// off (`docs/protocol.md` §4).
    pub heartbeat_s: u16,
    /// Largest frame to ask for, in bytes, header included (0: the server's choice).
    pub frame_max: u32,
    /// Time allowed to connect and for each request's reply.
    pub timeout: Duration,
    /// Free-form name shown by `list connections`.
    pub client_name: String,
    /// Connect over TLS (to the server's TLS listener, `--tls-listen`, default port
    /// 5674); `None`: plain TCP.
    pub tls: Option<TlsOptions>,
}

/// How to connect over TLS: whom to trust, what to present, which name to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of the CA(s) the server's certificate must chain to. There is no
    /// fallback to the system's trust store: a broker's certificate is usually signed by
    /// the operator's own CA.
    pub ca_file: PathBuf,
    /// PEM file of this client's certificate chain, for a server that asks for one
    /// (`--tls-client-ca`); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM file of this client's private key; needs `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Name the server's certificate must carry (a DNS name or an IP address); `None`:
    /// the host part of the address connected to.
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// Trust the CAs in `ca_file`, present no client certificate, check the address's
    /// host name.
    pub fn new(ca_file: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions {
            ca_file: ca_file.into(),
            cert_file: None,
            key_file: None,
            server_name: None,
        }
    }
}

impl ConnectOptions {
    /// Default options (guest/guest, vhost `/`, heartbeat 60 s, timeout 30 s) for `addr`.
    pub fn new(addr: impl Into<String>) -> ConnectOptions {
        ConnectOptions {
            addr: addr.into(),
            ..ConnectOptions::default()
        }
    }
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            addr: "127.0.0.1:5673".into(),
            user: "guest".into(),
            password: "guest".into(),
            vhost: "/".into(),
            heartbeat_s: crate::limits::HEARTBEAT_S_DEFAULT,
            frame_max: 0,
            timeout: Duration::from_secs(30),
            client_name: "relaymq-client".into(),
            tls: None,
        }
    }
}

/// Flags of `exchange.declare` (AMQP 0-9-1 §1.6.2.1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExchangeDeclareOptions {
    /// Only check that the exchange exists (404 when it does not).
    pub passive: bool,
    /// The exchange survives a server restart.
    pub durable: bool,
    /// The exchange is deleted when its last binding is removed.
    pub auto_delete: bool,
    /// Clients cannot publish to it directly; only exchange-to-exchange bindings feed it.
    pub internal: bool,
    /// Optional arguments (e.g. `alternate-exchange`).
    pub arguments: FieldTable,
}

/// Flags of `queue.declare` (AMQP 0-9-1 §1.7.2.1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueDeclareOptions {
    /// Only check that the queue exists (404 when it does not).
    pub passive: bool,
    /// The queue survives a server restart.
    pub durable: bool,
    /// The queue belongs to this connection and is deleted when it closes.
    pub exclusive: bool,
    /// The queue is deleted when its last consumer is cancelled.
    pub auto_delete: bool,
    /// Optional arguments (`x-message-ttl`, `x-max-length`, `x-dead-letter-exchange`, ...).
    pub arguments: FieldTable,
}

/// Flags of `basic.consume` (AMQP 0-9-1 §1.8.3.3).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumeOptions {
    /// Consumer tag; empty asks the server to generate one.
    pub consumer_tag: String,
    /// Deliveries count as acknowledged as soon as they are sent.
    pub no_ack: bool,
    /// Be the only consumer of the queue (403 ACCESS_REFUSED when another exists).
    pub exclusive: bool,
    /// Consumer arguments (e.g. `x-priority`).
    pub arguments: FieldTable,
}
