//! Values shared by the core, the wire protocols and (later) the store: field tables,
//! message properties and the big-endian primitives they are encoded with.

pub mod codec;
pub mod field_table;
pub mod properties;
pub mod size;

pub use field_table::{FieldTable, FieldValue};
pub use properties::BasicProperties;
