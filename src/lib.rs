//! RelayMQ: a single-node message broker in the RabbitMQ family.
//!
//! Producers publish to exchanges (direct, fanout, topic, headers); bindings route messages
//! into queues; the broker pushes them to consumers, who ack, nack or reject them, with the
//! semantics of AMQP 0-9-1. The server is synchronous: one mio I/O thread and a fixed pool
//! of worker threads, no async runtime.
//!
//! # Layout
//!
//! - [`limits`]: every bound, with its unit.
//! - [`error`]: AMQP reply codes, [`error::BrokerError`], [`error::DecodeError`].
//! - [`types`]: field tables, message properties, big-endian primitives.
//! - [`broker`]: the protocol-independent core: vhosts, exchanges, queues, bindings, the
//!   router, consumers and channels' ack state.
//! - [`protocol`]: the native wire protocol, pure encode/decode (`docs/protocol.md`).
//! - [`amqp`]: the AMQP 0-9-1 wire codec (frames, methods, content), pure encode/decode.
//! - [`alarm`]: resource alarms: the memory high-water mark, the free-disk low-water mark
//!   and their monitor thread; publishers are blocked while one is set.
//! - [`server`]: the event loop, connections, worker pool and shutdown.
//! - [`client`]: a blocking client library over the native protocol.
//! - `fuzzing`: fuzz target bodies (`fuzz/`, replayed by `tests/it/fuzz_corpus.rs`); only with
//!   the `test-support` feature, which the tests and the fuzz crate enable.
//! - [`tls`]: PEM files and the crypto provider shared by the server's and the client's
//!   TLS (rustls with *ring*).
//!
//! Binaries: `relaymq-server` (the daemon) and `relaymq-cli` (a shell tool), in `src/bin/`.

#![deny(missing_docs)]

pub mod alarm;
pub mod amqp;
pub mod auth;
pub mod broker;
pub mod client;
pub mod config;
pub mod error;
#[cfg(feature = "test-support")]
pub mod fuzzing;
pub mod limits;
pub mod metrics;
pub mod native;
pub mod server;
pub mod stoppable_thread;
pub mod storage;
pub mod tls;
pub mod types;

/// The README's code examples, compiled by `cargo test` so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
