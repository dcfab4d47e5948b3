//! A blocking AMQP 0-9-1 client, lean enough to measure a broker with: the outbound
//! connection of `relaymq-bench`'s `amqp://` runs, and the one AMQP client of the library
//! (for talking to RelayMQ's AMQP listener, RabbitMQ or LavinMQ).
//!
//! One [`Connection`] per thread and no reader thread: the thread that owns the socket
//! writes and reads it, and one channel is in use at a time. Encoding and decoding are
//! the library's own codec ([`crate::amqp`]: frames, methods, content); this module adds
//! the socket, the buffers and the order of the conversation.
//!
//! ```no_run
//! use relaymq::amqp_client::{ConnectOptions, Connection, DeliveryEvent};
//! use relaymq::client::{ConsumeOptions, QueueDeclareOptions};
//! use relaymq::types::BasicProperties;
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), relaymq::amqp_client::AmqpClientError> {
//! let mut conn = Connection::connect(&ConnectOptions::new("127.0.0.1:5672"))?;
//! conn.queue_declare("jobs", QueueDeclareOptions::default())?;
//! let jobs = conn.prepare_publish("", "jobs", &BasicProperties::default())?;
//! conn.publish(&jobs, b"hello")?;
//! conn.flush()?;
//! conn.basic_consume("jobs", ConsumeOptions::default())?;
//! let mut body = Vec::new();
//! conn.poll_deliveries(Duration::from_secs(1), |e| match e {
//!     DeliveryEvent::Body { chunk, .. } => body.extend_from_slice(chunk),
//!     DeliveryEvent::End { head } => println!("{} bytes, tag {}", body.len(), head.delivery_tag),
//!     DeliveryEvent::Start { .. } => body.clear(),
//! })?;
//! conn.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! What makes it fast, and what the hot paths must keep:
//!
//! - a publish appends to one write buffer: its method and content header frames were
//!   encoded once ([`PreparedPublish`]), only the sizes are stamped in and the body
//!   copied after them; [`Connection::flush`] writes a whole batch at once (a buffer past
//!   [`WRITE_BUFFER_FLUSH_BYTES`] is written early);
//! - reads fill a large buffer and every whole frame of one `read()` is parsed in place:
//!   a delivery's body is handed to the caller as borrowed slices
//!   ([`DeliveryEvent`]), never copied or assembled by the client;
//! - acks are appended and written with the next read or flush.
//!
//! The server's `connection.close` and `channel.close` are answered with `close-ok` and
//! become [`AmqpClientError`]s carrying the reply code and text; a malformed frame is an
//! error, never a panic.
//!
//! # Layout
//!
//! - [`connection`]: [`ConnectOptions`], connect and the handshake (AMQP 0-9-1 §2.2.4),
//!   the write buffer, requests that wait for their reply, close.
//! - `incoming` (private): the read buffer and what each frame from the server does.
//! - [`channel`]: opening and closing channels; exchanges, queues and bindings.
//! - [`publish`]: [`PreparedPublish`] and publishing.
//! - [`confirm`]: publisher confirms (`confirm.select`, the window of unconfirmed
//!   publishes, waiting for them).
//! - [`consume`]: `basic.qos`, `basic.consume`/`cancel`, deliveries ([`DeliveryEvent`]),
//!   acks.
//! - [`error`]: the error type, [`AmqpClientError`].
//!
//! TLS (`amqps://`, [`ConnectOptions::tls`]), heartbeats ([`ConnectOptions::heartbeat`],
//! kept by [`Connection::heartbeat_tick`]) and `connection.blocked` ([`Connection::is_blocked`])
//! are there for long-lived connections (the shovel's); [`uri`] parses RabbitMQ's
//! `amqp://` / `amqps://` URIs.
//!
//! # What it does not do yet
//!
//! - No reconnecting: the caller (the shovel) connects again.
//! - A publisher blocked by a resource alarm sees [`Connection::is_blocked`] only when it
//!   reads; one that only writes sees its writes block, and fail after
//!   [`ConnectOptions::write_timeout`].
//! - SASL PLAIN only; the server's `frame_max` and `channel_max` are taken as offered.
//! - One channel in use at a time; one consumer per connection (deliveries that arrive
//!   while a request waits for its reply or for confirms are dropped, so a consuming
//!   connection reads only through [`Connection::poll_deliveries`] until it cancels).
//! - No `basic.get`, `basic.reject`, `basic.recover`, transactions, mandatory
//!   publishes or `basic.return`, `queue.purge`/`unbind`, `exchange.unbind`: send them
//!   with [`Connection::call`] where they have a reply.
//! - Field-table keys and property strings are not checked against the 255-byte short
//!   string limit (names are).

pub mod channel;
pub mod confirm;
pub mod connection;
pub mod consume;
pub mod error;
mod incoming;
pub mod publish;
mod stream;
pub mod uri;

pub use confirm::Confirm;
pub use connection::{
    ConnectOptions, Connection, READ_BUFFER_BYTES_DEFAULT, REPLY_TIMEOUT_DEFAULT,
    WRITE_BUFFER_FLUSH_BYTES, WRITE_TIMEOUT_DEFAULT,
};
pub use consume::{DeliveryEvent, DeliveryHead, RawContentHeader};
pub use error::AmqpClientError;
pub use publish::PreparedPublish;
pub use uri::AmqpUri;

#[cfg(test)]
mod tests;
