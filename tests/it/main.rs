//! The integration tests: one module per behaviour, in one test binary (one link of the
//! crate instead of one per file), run in parallel. Each module starts its own servers on
//! free loopback ports with their own data directories, so tests never share state.
//! Helpers shared by every module are in `tests/common/`. Tests that kill servers, fill
//! multi-GiB backlogs, run benchmarks or shell scripts are in `tests/heavy/`.

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
mod compaction;
mod config;
mod consumer_timeout;
mod consuming;
mod dead_letter;
mod definitions;
mod delivery_limit;
mod disk_trouble;
mod docs;
mod exchanges;
mod fuzz_corpus;
mod hostile_clients;
mod hostile_input;
mod layering;
mod length_limits;
mod lifecycle_restart;
mod limits;
mod logging;
mod messages;
mod meta_store;
mod metrics;
mod policies;
mod priorities;
mod publishing;
mod queue_names_on_disk;
mod queues;
mod raw_smoke;
mod restart;
mod store_recovery;
mod tls;
mod topic_routing;
mod topology_changes;
mod torn_tail;
mod ttl;
mod vhosts;
