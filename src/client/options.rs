//! Option structs for the requests that take many flags. Every field defaults to AMQP's
//! default (`false`, empty).

use crate::types::FieldTable;
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
