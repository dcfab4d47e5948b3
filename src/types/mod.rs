//! Values shared by the core, the wire protocols and the store: field tables, message
//! properties, sizes with units, the memory watermark, the default vhost's name and the
//! big-endian primitives they are encoded with.

pub mod amqp_uri;
pub mod codec;
pub mod field_table;
pub mod properties;
pub mod size;
pub mod watermark;

pub use field_table::{FieldTable, FieldValue};
pub use properties::BasicProperties;
pub use watermark::MemoryWatermark;

/// Name of the virtual host every broker starts with (RabbitMQ's default vhost, `/`).
pub const DEFAULT_VHOST: &str = "/";
