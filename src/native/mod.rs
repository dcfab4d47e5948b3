//! The native RelayMQ wire protocol: pure encode/decode, no I/O.
//!
//! The full specification, with a worked hex example, is `docs/protocol.md`. In short:
//!
//! - The client opens with the 8-byte [`PROTOCOL_HEADER`] (`"RMQP"`, version `u16`, `u16` 0).
//! - Every later byte is a frame: `u32` payload size, `u8` type, `u8` flags, `u16` channel,
//!   payload (see [`frame`]). All integers are big-endian.
//! - A method payload is `u16` method id, `u32` request id, fields (see [`method`], the
//!   table every method is listed in once; `define.rs` generates the enum and its codec
//!   from it, `wire.rs` holds the field encodings). A payload larger than the negotiated
//!   frame size is split into consecutive frames with the MORE flag set on all but the
//!   last.
//! - Requests carry a client-chosen request id; the reply carries the same id. Server
//!   pushes (deliveries, confirms, returns, cancels) carry request id 0.

#[macro_use]
mod define;
pub mod frame;
pub mod method;
#[cfg(test)]
mod method_tests;
pub mod publish_batch;
#[cfg(test)]
mod table_tests;
mod wire;

pub use frame::{FrameAssembler, FrameHeader, FrameType, FRAME_HEADER_BYTES};
pub use method::{Delivery, ListKind, Method, PolicySpec, PublishMessage};
pub use publish_batch::{PublishBatch, PublishRef};

/// The bytes a client sends first: ASCII `RMQP`, protocol version 1 (`u16`), reserved `u16` 0.
/// A server that does not speak the version answers with its own header and closes.
pub const PROTOCOL_HEADER: [u8; 8] = [b'R', b'M', b'Q', b'P', 0, 1, 0, 0];

/// The protocol version carried in bytes 4–5 of [`PROTOCOL_HEADER`].
pub const PROTOCOL_VERSION: u16 = 1;
