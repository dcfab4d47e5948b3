//! A blocking client library over the native protocol.
//!
//! No async runtime: a [`Connection`] runs a reader thread that routes every frame the
//! server sends (replies to the request waiting for them, deliveries to consumers,
//! publisher confirms to the channel, returned messages to the channel's returns stream)
//! and, when heartbeats are negotiated, a heartbeat thread. Requests block until their
//! reply arrives or the request timeout passes. Semantics are AMQP 0-9-1's.
//!
//! ```no_run
//! use relaymq::client::{Connection, QueueDeclareOptions, ConsumeOptions, ConsumerEvent};
//! use relaymq::types::BasicProperties;
//!
//! # fn main() -> Result<(), relaymq::client::ClientError> {
//! let conn = Connection::connect("127.0.0.1:5673")?;
//! let ch = conn.open_channel()?;
//! ch.queue_declare("jobs", QueueDeclareOptions::default())?;
//! ch.basic_publish("", "jobs", false, &BasicProperties::default(), b"hello")?;
//! let consumer = ch.basic_consume("jobs", ConsumeOptions::default())?;
//! if let ConsumerEvent::Delivery(d) = consumer.recv()? {
//!     ch.basic_ack(d.delivery_tag, false)?;
//! }
//! ch.close()?;
//! conn.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`connection`]: connect, handshake, admin requests on channel 0, close.
//! - [`blocked`]: whether the server blocks publishes (resource alarms).
//! - [`channel`]: the methods of one channel.
//! - [`consumer`]: a consumer's delivery stream.
//! - [`options`]: option structs of the requests with many flags.
//! - [`message`]: fetched and returned messages.
//! - [`error`]: the error type, [`ClientError`].
//! - `shared` (private): request/reply correlation and routing of server pushes.
//! - `io` (private): the writer, the frame reader, the reader and heartbeat threads.
//! - `tls` (private): TLS ([`TlsOptions`]): configuration, handshake, the shared stream.
//! - `validate` (private): argument checks before encoding.

pub mod admin;
pub mod blocked;
pub mod channel;
pub mod connection;
pub mod consumer;
pub mod error;
mod io;
pub mod message;
pub mod options;
pub mod parameters;
pub mod policies;
mod shared;
pub(crate) mod tls;
mod validate;

pub use crate::native::{Delivery, ListKind, PublishMessage};
pub use crate::types::MemoryWatermark;
pub use blocked::BlockedStatus;
pub use channel::{Channel, QueueDeclareOk, PUBLISH_BATCH_BYTES_MAX};
pub use connection::Connection;
pub use consumer::{Consumer, ConsumerEvent};
pub use error::ClientError;
pub use message::{GetMessage, ReturnedMessage};
pub use options::{
    ConnectOptions, ConsumeOptions, ExchangeDeclareOptions, QueueDeclareOptions, TlsOptions,
};

#[cfg(test)]
mod tests;
