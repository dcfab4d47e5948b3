//! What a run needs from a protocol, so one run (`run.rs`) drives either: a setup
//! session that declares and deletes the topology ([`AdminSession`]), a producer
//! ([`ProducerSession`]) and a consumer ([`ConsumerSession`]), each on its own connection
//! and owned by one thread. [`native`](super::native) implements them on
//! `relaymq::client` (or [`native_wire`](super::native_wire), the bench's lean native
//! connection), [`amqp`](super::amqp) on the library's AMQP 0-9-1 client,
//! `relaymq::amqp_client`; `connect_*` picks by the URI's scheme.
//!
//! Errors are strings: the run only reports them.

use super::amqp;
use super::args::{Options, Protocol};
use super::{native, native_wire};
use relaymq::types::{BasicProperties, FieldTable};
use std::time::Duration;

/// Bytes at the start of every body: the send time (ns since the run's origin, u64
/// big-endian), then the sequence number (u64 big-endian).
pub const BODY_STAMP_BYTES: usize = 16;

/// Where the messages for one queue go: exchange, routing key and properties (the same
/// for every message of the run to that queue).
#[derive(Clone, Debug)]
pub struct Route {
    /// The exchange; empty is the default exchange.
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    /// The properties (delivery mode, the headers exchange's header).
    pub properties: BasicProperties,
}

/// One batch of publishes: message `k` goes by route `routes[k]` with sequence number
/// `first_seq + k`, every body stamped `sent_ns`.
pub struct Batch<'a> {
    /// Index into the producer's routes, per message.
    pub routes: &'a [usize],
    /// The send time written into every body, ns since the run's origin.
    pub sent_ns: u64,
    /// The sequence number of the first message.
    pub first_seq: u64,
}

/// What a consumer needs of one delivery.
#[derive(Clone, Copy, Debug)]
pub struct DeliveryInfo {
    /// The channel's delivery tag, for acks.
    pub delivery_tag: u64,
    /// The server flagged it as delivered before.
    pub redelivered: bool,
    /// Body size, bytes.
    pub body_bytes: u64,
    /// The send time stamped in the body, ns since the run's origin (0 for a body
    /// shorter than the stamp).
    pub sent_ns: u64,
}

/// Writes the stamp into the first [`BODY_STAMP_BYTES`] of `body` (which is at least
/// that long: `--size` is at least 16).
pub fn fill_body(body: &mut [u8], sent_ns: u64, seq: u64) {
    body[..8].copy_from_slice(&sent_ns.to_be_bytes());
    body[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// The send time stamped in a body, 0 when the body is shorter than 8 bytes.
pub fn sent_ns_of(body: &[u8]) -> u64 {
    body.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// Declares and deletes the run's queues, exchanges and bindings.
pub trait AdminSession {
    /// Declares a queue (not exclusive, not auto-delete).
    ///
    /// # Errors
    /// The server's refusal or a connection failure.
    fn queue_declare(&mut self, name: &str, durable: bool) -> Result<(), String>;
    /// The ready messages of a queue (a passive declare).
    ///
    /// # Errors
    /// As [`AdminSession::queue_declare`] (404 for a missing queue).
    fn message_count(&mut self, name: &str) -> Result<u64, String>;
    /// Deletes a queue; a missing queue is fine.
    ///
    /// # Errors
    /// As [`AdminSession::queue_declare`].
    fn queue_delete(&mut self, name: &str) -> Result<(), String>;
    /// Declares an exchange of `kind`.
    ///
    /// # Errors
    /// As [`AdminSession::queue_declare`].
    fn exchange_declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<(), String>;
    /// Deletes an exchange; a missing exchange is fine.
    ///
    /// # Errors
    /// As [`AdminSession::queue_declare`].
    fn exchange_delete(&mut self, name: &str) -> Result<(), String>;
    /// Binds `queue` to `exchange`.
    ///
    /// # Errors
    /// As [`AdminSession::queue_declare`].
    fn queue_bind(
        &mut self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String>;
    /// Binds exchange `destination` to `source`.
    ///
    /// # Errors
    /// As [`AdminSession::queue_declare`].
    fn exchange_bind(
        &mut self,
        destination: &str,
        source: &str,
        key: &str,
        args: FieldTable,
    ) -> Result<(), String>;
    /// Closes the connection.
    ///
    /// # Errors
    /// A close the server did not confirm.
    fn close(self: Box<Self>) -> Result<(), String>;
}

/// One producer's connection and channel (in confirm mode with `--confirm`).
pub trait ProducerSession {
    /// Publishes a batch (one write for the whole batch when the protocol allows).
    ///
    /// # Errors
    /// A write failure, or the server having closed the channel or connection.
    fn publish(&mut self, batch: &Batch<'_>) -> Result<(), String>;
    /// Waits until at most `limit` publishes are unconfirmed (`limit` 0: all confirmed);
    /// returns how many are unconfirmed.
    ///
    /// # Errors
    /// A nack, no confirm within `timeout`, or a failure as for `publish`.
    fn wait_confirms_at_most(&mut self, limit: usize, timeout: Duration) -> Result<usize, String>;
    /// Closes the channel and the connection.
    ///
    /// # Errors
    /// An earlier channel error not yet reported, or a close not confirmed.
    fn close(self: Box<Self>) -> Result<(), String>;
}

/// One consumer's connection, channel and consumer.
pub trait ConsumerSession {
    /// Waits at most `timeout` for deliveries and appends what arrived to `out` (nothing
    /// when the time ran out); sends the acks given since the last call first.
    ///
    /// # Errors
    /// The server cancelled the consumer or closed the channel or connection, or a
    /// malformed frame.
    fn poll(&mut self, timeout: Duration, out: &mut Vec<DeliveryInfo>) -> Result<(), String>;
    /// Acks `delivery_tag` (and every earlier one with `multiple`); may be sent at the
    /// next `poll` or `close`.
    ///
    /// # Errors
    /// As [`ConsumerSession::poll`].
    fn ack(&mut self, delivery_tag: u64, multiple: bool) -> Result<(), String>;
    /// Cancels the consumer, closes the channel and the connection (sending any held ack
    /// first).
    ///
    /// # Errors
    /// As [`ConsumerSession::poll`].
    fn close(self: Box<Self>) -> Result<(), String>;
}

/// Opens the setup session.
///
/// # Errors
/// The connection or handshake failed (connection refused, login refused, no vhost).
pub fn connect_admin(opts: &Options) -> Result<Box<dyn AdminSession>, String> {
    match opts.target.protocol {
        Protocol::Native => native::Admin::connect(opts),
        Protocol::Amqp => amqp::Admin::connect(opts),
    }
}

/// Opens producer `role`'s session, publishing by `routes` with `--size` bodies.
///
/// # Errors
/// As [`connect_admin`], and a refused `confirm.select`.
pub fn connect_producer(
    opts: &Options,
    role: &str,
    routes: Vec<Route>,
) -> Result<Box<dyn ProducerSession>, String> {
    match opts.target.protocol {
        Protocol::Native if opts.client_lib => native::Producer::connect(opts, role, routes),
        Protocol::Native => native_wire::Producer::connect(opts, role, routes),
        Protocol::Amqp => amqp::Producer::connect(opts, role, routes),
    }
}

/// Opens consumer `role`'s session on `queue` (with `--prefetch` and `--no-ack`); it is
/// registered when this returns.
///
/// # Errors
/// As [`connect_admin`], and a refused `basic.qos` or `basic.consume`.
pub fn connect_consumer(
    opts: &Options,
    role: &str,
    queue: &str,
) -> Result<Box<dyn ConsumerSession>, String> {
    match opts.target.protocol {
        Protocol::Native if opts.client_lib => native::Consumer::connect(opts, role, queue),
        Protocol::Native => native_wire::Consumer::connect(opts, role, queue),
        Protocol::Amqp => amqp::Consumer::connect(opts, role, queue),
    }
}
