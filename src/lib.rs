//! RelayMQ: a single-node message broker in the RabbitMQ family.
//!
//! Producers publish to exchanges (direct, fanout, topic, headers, x-consistent-hash);
//! bindings route messages into queues; the broker pushes them to consumers, who ack, nack
//! or reject them, with the semantics of AMQP 0-9-1. The server is synchronous: one mio
//! I/O thread and a fixed pool of worker threads, no async runtime.
//!
//! # Layout
//!
//! From the bottom layer up (a module imports only from layers below it; the test
//! `tests/it/layering.rs` holds it to that; `docs/architecture.md` §1 has a row for every
//! file):
//!
//! - Foundations: [`limits`] (the protocol bounds and the operator's limits, each with its unit), [`error`] (AMQP reply codes,
//!   [`error::BrokerError`], [`error::DecodeError`]), [`types`] (field tables, message
//!   properties, sizes, the memory watermark value, big-endian primitives),
//!   [`stoppable_thread`] (background threads with a stop channel) and [`tls`] (PEM files
//!   and the crypto provider shared by the server's and the client's TLS).
//! - Codecs, pure encode/decode with no I/O: [`native`] (the native protocol: frames,
//!   methods generated from one table, publish batches; `docs/protocol.md`) and [`amqp`]
//!   (AMQP 0-9-1: frames, methods generated from one table, content).
//! - Client libraries on the codecs, blocking: [`client`] (the native protocol) and
//!   [`amqp_client`] (AMQP 0-9-1: the benchmark's, and the library's outbound
//!   connection).
//! - Beside the core, never importing it: [`storage`] (`meta.db`, the segment-file message
//!   store, group commit, recovery, `--check`), [`auth`] (users, passwords, permissions,
//!   login throttling), [`alarm`] (the memory and disk alarms and their monitor) and
//!   [`metrics`] (counters, histograms, the Prometheus text format).
//! - [`broker`]: the protocol-independent core, by concept: `queue/`, `exchange/` (one
//!   file per exchange type, bindings), `consumer`, `channel/`, `session`, `vhost`,
//!   `policy/`, `dead_letter/`, `definitions/`, `access/`, `message/`.
//! - [`server`]: the mio event loop and what every protocol shares (connections, worker
//!   pool, outbound buffers, lifecycle and close handshakes, TLS), with one folder per
//!   adapter: `server/native/`, `server/amqp/`, `server/http/` (the metrics endpoint, on
//!   its own thread).
//! - [`config`]: the server's settings, one table read by flags, environment, file and
//!   reload.
//! - `fuzzing`: fuzz target bodies (`fuzz/`, replayed by `tests/it/fuzz_corpus.rs`); only
//!   with the `test-support` feature, which the tests and the fuzz crate enable.
//!
//! Binaries, in `src/bin/`: `relaymq-server` (the daemon), `relaymq-cli` (a shell tool)
//! and `relaymq-bench` (the benchmark).
// serde_json's `json!` for the management API's larger objects nests deeper than 128.
#![recursion_limit = "256"]
#![deny(missing_docs)]

pub mod alarm;
pub mod amqp;
pub mod amqp_client;
pub mod auth;
pub mod broker;
pub mod client;
pub mod config;
pub mod error;
#[cfg(feature = "test-support")]
pub mod fuzzing;
pub mod limits;
pub mod links;
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
