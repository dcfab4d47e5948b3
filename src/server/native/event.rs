//! The events a native-protocol connection's handler takes: what its input decoded, and
//! the [`ConnEvent`]s every connection takes.

use crate::native::{Method, PublishBatch};
use crate::server::event::ConnEvent;

/// What the I/O thread (or the core) asks a native connection's worker to do.
// Methods dominate the mailbox; boxing them would cost an allocation per request.
#[allow(
    clippy::large_enum_variant,
    reason = "boxing methods would cost an allocation per request"
)]
#[derive(Debug)]
pub enum NativeEvent {
    /// A decoded method.
    Method {
        /// Channel it arrived on.
        channel: u16,
        /// Its request id.
        request_id: u32,
        /// The method.
        method: Method,
    },
    /// A `basic.publish`, checked and kept as its payload (read in place by the worker).
    Publish {
        /// Channel it arrived on.
        channel: u16,
        /// Its request id.
        request_id: u32,
        /// The messages.
        batch: PublishBatch,
    },
    /// A split payload over the size limit was discarded.
    Oversized {
        /// Channel it arrived on.
        channel: u16,
        /// Method id, if its first frame carried one.
        method_id: u16,
        /// Request id, if its first frame carried one.
        request_id: u32,
        /// Its size in bytes.
        size: u64,
    },
    /// An event every connection takes.
    Conn(ConnEvent),
}
