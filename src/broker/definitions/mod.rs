//! Definitions in RabbitMQ's JSON format (`rabbitmqctl export_definitions` /
//! `import_definitions`, RabbitMQ docs "Schema Definition Export and Import"): vhosts,
//! users, permissions, exchanges, queues and bindings with their arguments, so a RabbitMQ
//! setup moves to RelayMQ with one file.
//!
//! [`export()`] writes the broker's definitions as RabbitMQ's export does; [`import()`]
//! validates a whole document (`validate`), decides what it changes against the broker
//! (`changes`) and applies it all or nothing (`apply`). Each section is its own function
//! in each step, so a section added later (policies) plugs in without touching the others.

mod apply;
mod changes;
pub mod export;
pub mod import;
pub mod model;
mod plan;
pub mod summary;
mod validate;

pub use export::export;
pub use import::{import, import_within};
pub use summary::ImportSummary;

pub use crate::limits::DEFINITIONS_JSON_BYTES_MAX;

/// The `rabbit_version` written in exports: the RabbitMQ release whose definitions format
/// RelayMQ writes and reads (3.10; the format is the same from 3.8 to 3.13).
pub const RABBIT_FORMAT_VERSION: &str = "3.10.8";
