//! AMQP 0-9-1 wire codec: frames, methods and content, pure encode/decode with no I/O.
//!
//! This is the codec for the AMQP 0-9-1 listener (unmodified RabbitMQ clients). It follows
//! the AMQP 0-9-1 specification (§2.3.5 framing, §4.2 the wire format) and RabbitMQ's
//! version of it: RabbitMQ's field-table type tags, its protocol extensions
//! (`exchange.bind`, `basic.nack`, `confirm.select`, `connection.blocked`,
//! `connection.update-secret`) and its frame-size check.
//!
//! - [`frame`]: [`PROTOCOL_HEADER`], the 7-byte frame header and frame-end octet,
//!   [`check`] (is a whole frame buffered?), [`write_method`], [`write_heartbeat`].
//! - [`content`]: the content header frame ([`parse_content_header`],
//!   [`write_content_header`]) and body frames ([`write_content`], [`write_body_frames`]).
//! - [`method`]: [`AmqpMethod`], every method of classes connection, channel, exchange,
//!   queue, basic, confirm and tx in both directions, with [`AmqpMethod::decode`] and
//!   [`AmqpMethod::encode`].
//! - [`error`]: [`FrameError`] and [`MethodError`], each carrying the
//!   [`ReplyCode`](crate::error::ReplyCode) and text for `connection.close`.
//!
//! # Why our own codec
//!
//! The issue allowed the `amq-protocol` crate. We do not use it: it brings nom and
//! cookie-factory and its own value and table types, which would have to be converted to
//! and from ours at every boundary, and its decoders do not share our bounds. RelayMQ
//! already had bounded, AMQP-compatible decoders for the hard parts — field tables with
//! RabbitMQ's type tags and a nesting bound ([`crate::types::field_table`]), the `basic`
//! property list with AMQP's flag word ([`crate::types::properties`]) and bounds-checked
//! primitives ([`crate::types::codec`]). What remained is framing and one table of methods
//! (`method.rs`), from which the enum, encoder and decoder are generated so they cannot
//! disagree.
//!
//! Decoding never panics and allocates only what the input holds (bounded by the frame
//! size); every error carries the reply code RabbitMQ or the specification prescribes.

#[macro_use]
mod define;
pub mod content;
pub mod error;
pub mod frame;
pub mod method;
mod wire;

#[cfg(test)]
mod tests;

pub use content::{
    parse_content_header, parse_content_header_prefix, write_body_frames, write_content,
    write_content_header, ContentHeader, BASIC_CLASS_ID, CONTENT_BODY_SIZE_AT,
    CONTENT_HEADER_FIXED_BYTES,
};
pub use error::{FrameError, MethodError};
pub use frame::{
    check, write_basic_deliver, write_heartbeat, write_method, FrameType, RawFrameHeader,
    FRAME_END, FRAME_HEADER_BYTES, FRAME_OVERHEAD_BYTES, PROTOCOL_HEADER,
};
pub use method::AmqpMethod;
