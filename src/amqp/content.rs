//! Content: the content header frame (class, weight, body size, properties) and the body
//! frames that follow a method with content (AMQP 0-9-1 §2.3.5.2, §4.2.6).
//!
//! ```text
//! content header payload:
//! 0          2        4           12               14
//! +----------+--------+-----------+----------------+-----------------+
//! | class-id | weight | body-size | property-flags | property-list   |
//! | u16      | u16 =0 | u64       | u16            | present props   |
//! +----------+--------+-----------+----------------+-----------------+
//! ```
//!
//! The property flags and list are exactly [`BasicProperties`]' binary form (bit 15
//! content-type … bit 3 app-id). The body follows in body frames of at most
//! `frame_max - 8` bytes each; an empty body has no body frame.

use super::error::FrameError;
use super::frame::{write_frame, FrameType, FRAME_END, FRAME_OVERHEAD_BYTES};
use crate::types::codec::{put_u16, put_u64, Reader};
use crate::types::properties::BasicProperties;

/// The class id of `basic`, the only class with content (AMQP 0-9-1 class `basic`).
pub const BASIC_CLASS_ID: u16 = 60;

/// Bytes of a content header payload before the properties: class id, weight, body size.
pub const CONTENT_HEADER_FIXED_BYTES: usize = 12;

/// Offset of the 8-byte body size in a content header payload (after class id and
/// weight, AMQP 0-9-1 §4.2.6.1).
pub const CONTENT_BODY_SIZE_AT: usize = 4;

/// A decoded content header frame payload.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentHeader {
    /// The class of the method the content belongs to (60 for `basic`); the caller checks
    /// it matches the method's class.
    pub class_id: u16,
    /// Total body size in bytes, over all body frames that follow. Not yet checked
    /// against any bound: the caller compares it with its message size limit before it
    /// buffers a byte of body.
    pub body_size: u64,
    /// The message properties.
    pub properties: BasicProperties,
}

/// Decodes a content header frame payload (AMQP 0-9-1 §4.2.6.1).
///
/// Allocates only the property strings and headers table the payload holds.
///
/// # Errors
/// [`FrameError`] with 501 FRAME_ERROR when the payload is shorter than its fixed part
/// (as RabbitMQ), 502 SYNTAX_ERROR for a non-zero weight, properties that do not decode
/// (truncated, unknown flag bits, a string that is not UTF-8, a bad headers table) or
/// trailing bytes.
pub fn parse_content_header(payload: &[u8]) -> Result<ContentHeader, FrameError> {
    if payload.len() < CONTENT_HEADER_FIXED_BYTES {
        return Err(FrameError::frame(format!(
            "content header of {} bytes is shorter than its {} fixed bytes",
            payload.len(),
            CONTENT_HEADER_FIXED_BYTES
        )));
    }
    let mut r = Reader::new(payload);
    let syntax = |e: crate::error::DecodeError| {
        FrameError::syntax(format!("cannot decode content header: {}", e.message))
    };
    let class_id = r.u16("class-id").map_err(syntax)?;
    let weight = r.u16("weight").map_err(syntax)?;
    if weight != 0 {
        return Err(FrameError::syntax(format!(
            "content header weight {weight}, must be 0"
        )));
    }
    let body_size = r.u64("body-size").map_err(syntax)?;
    let properties = BasicProperties::decode(&mut r).map_err(syntax)?;
    if !r.is_empty() {
        return Err(FrameError::syntax(format!(
            "{} trailing bytes after the content header properties",
            r.remaining()
        )));
    }
    Ok(ContentHeader {
        class_id,
        body_size,
        properties,
    })
}

/// Appends the content header frame for `body` and its body frames on `channel`: the
/// content that follows a `basic.publish`, `basic.return`, `basic.deliver` or
/// `basic.get-ok` method frame (AMQP 0-9-1 §4.2.6).
///
/// Body frames carry at most `frame_max - 8` bytes each (`frame_max` in bytes, header
/// and end octet included); an empty body has none. The header frame is not split: a
/// headers table near the frame size makes it larger than `frame_max`, so callers keep
/// properties within [`PROPERTIES_BYTES_MAX`](crate::limits::PROPERTIES_BYTES_MAX) and the
/// frame size above it.
pub fn write_content(
    out: &mut Vec<u8>,
    channel: u16,
    class_id: u16,
    properties: &BasicProperties,
    body: &[u8],
    frame_max: u32,
) {
    write_content_header(out, channel, class_id, properties, body.len() as u64);
    write_body_frames(out, channel, body, frame_max);
}

/// Appends a content header frame on `channel` announcing `body_size` bytes of body
/// (AMQP 0-9-1 §4.2.6.1), without the body: the first half of [`write_content`], for a
/// caller that encodes the header once and the body frames per message.
///
/// The body size lies at [`CONTENT_BODY_SIZE_AT`] in the payload, so an encoded header
/// can be reused for another body size by overwriting those 8 bytes (big-endian).
#[inline]
pub fn write_content_header(
    out: &mut Vec<u8>,
    channel: u16,
    class_id: u16,
    properties: &BasicProperties,
    body_size: u64,
) {
    write_frame(out, FrameType::Header, channel, |out| {
        put_u16(out, class_id);
        put_u16(out, 0);
        put_u64(out, body_size);
        properties.encode(out);
    });
}

/// Appends the body frames of `body` on `channel`, at most `frame_max - 8` bytes of body
/// each (`frame_max` in bytes, header and end octet included; AMQP 0-9-1 §4.2.6.2); an
/// empty body has none. The second half of [`write_content`].
#[inline]
pub fn write_body_frames(out: &mut Vec<u8>, channel: u16, body: &[u8], frame_max: u32) {
    let chunk_max = (frame_max as usize)
        .saturating_sub(FRAME_OVERHEAD_BYTES)
        .max(1);
    for chunk in body.chunks(chunk_max) {
        // The size is known: the header is written whole, not patched afterwards.
        let [c0, c1] = channel.to_be_bytes();
        let [s0, s1, s2, s3] = (chunk.len() as u32).to_be_bytes();
        out.extend_from_slice(&[FrameType::Body as u8, c0, c1, s0, s1, s2, s3]);
        out.extend_from_slice(chunk);
        out.push(FRAME_END);
    }
}

/// Reads only the fixed part of a content header payload (AMQP 0-9-1 §4.2.6.1): its
/// class id and body size in bytes, leaving the properties undecoded. For a receiver that
/// needs the body size of every message but not its properties; [`parse_content_header`]
/// reads the whole header.
///
/// # Errors
/// [`FrameError`] with 501 FRAME_ERROR when the payload is shorter than its
/// [`CONTENT_HEADER_FIXED_BYTES`] (as [`parse_content_header`]), 502 SYNTAX_ERROR for a
/// non-zero weight.
#[inline]
pub fn parse_content_header_prefix(payload: &[u8]) -> Result<(u16, u64), FrameError> {
    let Some(fixed) = payload.get(..CONTENT_HEADER_FIXED_BYTES) else {
        return Err(FrameError::frame(format!(
            "content header of {} bytes is shorter than its {} fixed bytes",
            payload.len(),
            CONTENT_HEADER_FIXED_BYTES
        )));
    };
    let class_id = u16::from_be_bytes([fixed[0], fixed[1]]);
    let weight = u16::from_be_bytes([fixed[2], fixed[3]]);
    if weight != 0 {
        return Err(FrameError::syntax(format!(
            "content header weight {weight}, must be 0"
        )));
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&fixed[CONTENT_BODY_SIZE_AT..]);
    Ok((class_id, u64::from_be_bytes(size)))
}
