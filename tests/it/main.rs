//! The integration tests: one module per behaviour, in one test binary (one link of the
//! crate instead of one per file), run in parallel. A test that needs a server starts its
//! own on free loopback ports with its own data directory, so tests never share state.
//! Helpers shared by every module are in `tests/common/`; the Python interop scripts are
//! in `tests/interop/`, RabbitMQ's recorded outputs in `tests/fixtures/`. A test that loads
//! the machine (many crash rounds, GiB of data, benchmarks, the shell scripts) goes in
//! `tests/heavy/`; a single kill -9 and restart stays here.

#[path = "../common/mod.rs"]
mod common;

mod access_control;
mod alarms;
mod alternate_exchange;
mod amqp_connection;
mod amqp_frames;
mod amqp_interop;
mod amqp_properties;
mod amqp_tx;
mod backpressure;
mod check;
mod cli_parity;
mod compaction;
mod config;
mod consistent_hash_exchanges;
mod consumer_timeout;
mod consuming;
mod dead_letter;
mod definitions;
mod delayed_delivery;
mod delivery_limit;
mod disk_trouble;
mod docs;
mod exchanges;
mod federation;
mod fuzz_corpus;
mod golden_shape;
mod hostile_clients;
mod hostile_input;
mod http_admin;
mod http_api;
mod http_authorization;
mod http_clients;
mod http_connections;
mod http_parameters;
mod http_topology;
mod layering;
mod length_limits;
mod lifecycle_restart;
mod limits;
mod logging;
mod management_clients;
mod messages;
mod meta_store;
mod metrics;
mod migrate;
mod policies;
mod priorities;
mod publishing;
mod queue_names_on_disk;
mod queue_pause;
mod queue_tools;
mod queue_unacked;
mod queues;
mod quorum_queues;
mod raw_smoke;
mod restart;
mod shovels;
mod store_recovery;
mod tls;
mod topic_routing;
mod topology_changes;
mod torn_tail;
mod ttl;
mod ui;
mod vhosts;
