//! AMQP 0-9-1 framing (§2.3.5, §4.2.3): the protocol header, the 7-byte frame header, the
//! frame-end octet, and writers for method and heartbeat frames.
//!
//! ```text
//! 0      1         3      7              7+size
//! +------+---------+------+--------------+-----------+
//! | type | channel | size | payload      | frame-end |
//! | u8   | u16     | u32  | size bytes   | 0xCE      |
//! +------+---------+------+--------------+-----------+
//! ```
//!
//! A frame is `size + 8` bytes; the negotiated `frame-max` bounds that whole length
//! (header and end octet included), as RabbitMQ checks it.

use super::error::FrameError;
use super::method::AmqpMethod;
use crate::types::codec::{put_short_str, put_u16, put_u32, put_u64};

/// The bytes a client sends first: `AMQP`, 0, then protocol version 0-9-1 (AMQP 0-9-1
/// §4.2.2). A server that does not speak the version answers with this header and closes.
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";

/// Bytes in a frame header: type, channel, size (AMQP 0-9-1 §4.2.3).
pub const FRAME_HEADER_BYTES: usize = 7;

/// The octet that ends every frame (AMQP 0-9-1 `frame-end`, §4.2.3).
pub const FRAME_END: u8 = 0xCE;

/// Bytes a frame adds around its payload: header and frame-end octet (RabbitMQ's
/// `EMPTY_FRAME_SIZE`).
pub const FRAME_OVERHEAD_BYTES: usize = FRAME_HEADER_BYTES + 1;

/// The type of a frame (AMQP 0-9-1 §4.2.3, constants `frame-method` … `frame-heartbeat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// 1: a method.
    Method = 1,
    /// 2: a content header (class, body size, properties).
    Header = 2,
    /// 3: a piece of content body.
    Body = 3,
    /// 8: a heartbeat (channel 0, empty payload).
    Heartbeat = 8,
}

impl FrameType {
    /// The frame type for a type octet, `None` for an unknown one.
    pub fn from_u8(v: u8) -> Option<FrameType> {
        Some(match v {
            1 => FrameType::Method,
            2 => FrameType::Header,
            3 => FrameType::Body,
            8 => FrameType::Heartbeat,
            _ => return None,
        })
    }
}

/// A checked frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFrameHeader {
    /// The frame type.
    pub frame_type: FrameType,
    /// The channel; 0 is the connection itself.
    pub channel: u16,
    /// Payload bytes (header and frame-end excluded).
    pub size: u32,
}

impl RawFrameHeader {
    /// The payload of the frame this header starts, given the whole frame as returned
    /// with it by [`check`] (`&buf[..total]`).
    pub fn payload<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        let end = FRAME_HEADER_BYTES + self.size as usize;
        frame.get(FRAME_HEADER_BYTES..end).unwrap_or(&[])
    }
}

/// Whether `buf` starts with a whole, well-formed frame, without allocating.
///
/// Returns `Ok(Some((header, total_bytes)))` when it does (the frame is
/// `&buf[..total_bytes]`, its payload [`RawFrameHeader::payload`]), `Ok(None)` when more
/// bytes are needed. `frame_max` is the negotiated frame size in bytes, header and end
/// octet included; callers resolve a negotiated 0 ("no limit") to their own bound first.
///
/// # Errors
/// [`FrameError`] with 501 FRAME_ERROR (AMQP 0-9-1 §2.3.5, §4.2.3, §4.2.7) for an unknown
/// frame type, a frame longer than `frame_max`, a heartbeat not on channel 0 or with a
/// payload, or a last octet other than [`FRAME_END`]. The stream can no longer be trusted:
/// the connection must be closed.
pub fn check(buf: &[u8], frame_max: u32) -> Result<Option<(RawFrameHeader, usize)>, FrameError> {
    let Some(&type_octet) = buf.first() else {
        return Ok(None);
    };
    let Some(frame_type) = FrameType::from_u8(type_octet) else {
        return Err(FrameError::frame(format!(
            "unknown frame type {type_octet}"
        )));
    };
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]);
    let total = FRAME_OVERHEAD_BYTES as u64 + size as u64;
    if total > frame_max as u64 {
        return Err(FrameError::frame(format!(
            "frame of {total} bytes exceeds the negotiated frame_max of {frame_max} bytes"
        )));
    }
    if frame_type == FrameType::Heartbeat && (channel != 0 || size != 0) {
        return Err(FrameError::frame(format!(
            "heartbeat frame on channel {channel} with {size} payload bytes; \
             heartbeats must be on channel 0 and empty"
        )));
    }
    let total = total as usize;
    let Some(&end) = buf.get(total - 1) else {
        return Ok(None);
    };
    if end != FRAME_END {
        return Err(FrameError::frame(format!(
            "frame end octet 0x{end:02x}, expected 0x{FRAME_END:02x}"
        )));
    }
    let header = RawFrameHeader {
        frame_type,
        channel,
        size,
    };
    Ok(Some((header, total)))
}

/// Appends a frame of `frame_type` on `channel` whose payload `payload` appends, filling
/// in the size afterwards (no copy).
pub(crate) fn write_frame(
    out: &mut Vec<u8>,
    frame_type: FrameType,
    channel: u16,
    payload: impl FnOnce(&mut Vec<u8>),
) {
    out.push(frame_type as u8);
    put_u16(out, channel);
    let size_at = out.len();
    put_u32(out, 0);
    payload(out);
    let size = (out.len() - size_at - 4) as u32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    out.push(FRAME_END);
}

/// Appends one method frame on `channel` (AMQP 0-9-1 §4.2.4). A method always fits one
/// frame: the caller keeps method arguments within the negotiated frame size.
pub fn write_method(out: &mut Vec<u8>, channel: u16, m: &AmqpMethod) {
    write_frame(out, FrameType::Method, channel, |out| m.encode(out));
}

/// Appends the `basic.deliver` (60,60) method frame from borrowed parts: the same bytes
/// as [`write_method`] with [`AmqpMethod::BasicDeliver`], without building the method
/// (the delivery path runs once per message).
pub fn write_basic_deliver(
    out: &mut Vec<u8>,
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
) {
    write_frame(out, FrameType::Method, channel, |out| {
        put_u16(out, 60);
        put_u16(out, 60);
        put_short_str(out, consumer_tag);
        put_u64(out, delivery_tag);
        out.push(u8::from(redelivered));
        put_short_str(out, exchange);
        put_short_str(out, routing_key);
    });
}

/// Appends one heartbeat frame: type 8, channel 0, empty payload (AMQP 0-9-1 §4.2.7).
pub fn write_heartbeat(out: &mut Vec<u8>) {
    out.extend_from_slice(&[FrameType::Heartbeat as u8, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

#[cfg(test)]
mod deliver_tests {
    use super::*;

    #[test]
    fn basic_deliver_from_parts_matches_the_method_encoder() {
        for (tag, redelivered, exchange) in [(1, false, ""), (u64::MAX, true, "amq.topic")] {
            let mut a = Vec::new();
            write_basic_deliver(&mut a, 7, "ctag-1", tag, redelivered, exchange, "a.b");
            let mut b = Vec::new();
            let m = AmqpMethod::BasicDeliver {
                consumer_tag: "ctag-1".into(),
                delivery_tag: tag,
                redelivered,
                exchange: exchange.into(),
                routing_key: "a.b".into(),
            };
            write_method(&mut b, 7, &m);
            assert_eq!(a, b);
        }
    }
}
