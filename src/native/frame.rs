//! Framing: the 8-byte frame header, a whole-frame check before any parse, splitting a
//! large payload over several frames and reassembling it.
//!
//! ```text
//! 0      4      5       6         8
//! +------+------+-------+---------+-------------------+
//! | size | type | flags | channel | payload (size)    |
//! | u32  | u8   | u8    | u16     | bytes             |
//! +------+------+-------+---------+-------------------+
//! ```
//!
//! `size` counts the payload only; a frame is `8 + size` bytes and may not exceed the
//! negotiated frame size. Type 1 is a method, type 2 a heartbeat (channel 0, empty payload).
//! Flag bit 0 (MORE) says the payload continues in the next frame; the frames of one split
//! payload are consecutive on the connection and on one channel.

use crate::error::DecodeError;
use crate::types::codec::{put_u16, put_u32};

/// Bytes in a frame header.
pub const FRAME_HEADER_BYTES: usize = 8;

/// Flag bit 0: the payload continues in the next frame.
pub const FLAG_MORE: u8 = 1;

/// The kind of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// A method payload (or one piece of it).
    Method = 1,
    /// A heartbeat: empty payload on channel 0.
    Heartbeat = 2,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes following the header.
    pub size: u32,
    /// Method or heartbeat.
    pub frame_type: FrameType,
    /// Flag bits ([`FLAG_MORE`]).
    pub flags: u8,
    /// Channel number; 0 is the connection itself.
    pub channel: u16,
}

/// Whether `buf` starts with a whole frame, without allocating.
///
/// Returns `Ok(Some((header, total_bytes)))` when it does, `Ok(None)` when more bytes are
/// needed.
///
/// # Errors
/// [`DecodeError`] for an unknown frame type or unknown flags, or a frame larger than
/// `frame_max` bytes (header included): the connection must then be closed with 501
/// FRAME_ERROR, since the stream can no longer be trusted.
pub fn check(buf: &[u8], frame_max: u32) -> Result<Option<(FrameHeader, usize)>, DecodeError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let frame_type = match buf[4] {
        1 => FrameType::Method,
        2 => FrameType::Heartbeat,
        other => return Err(DecodeError::new(format!("unknown frame type {other}"))),
    };
    let flags = buf[5];
    if flags & !FLAG_MORE != 0 {
        return Err(DecodeError::new(format!(
            "unknown frame flags 0x{flags:02x}"
        )));
    }
    let channel = u16::from_be_bytes([buf[6], buf[7]]);
    if frame_type == FrameType::Heartbeat && (size != 0 || flags != 0 || channel != 0) {
        return Err(DecodeError::new(
            "heartbeat frame must have channel 0, no flags and an empty payload",
        ));
    }
    let total = FRAME_HEADER_BYTES as u64 + size as u64;
    if total > frame_max as u64 {
        return Err(DecodeError::new(format!(
            "frame of {total} bytes exceeds the negotiated frame size of {frame_max} bytes"
        )));
    }
    if (buf.len() as u64) < total {
        return Ok(None);
    }
    let header = FrameHeader {
        size,
        frame_type,
        flags,
        channel,
    };
    Ok(Some((header, total as usize)))
}

/// Appends one heartbeat frame.
pub fn write_heartbeat(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0, 0, 0, FrameType::Heartbeat as u8, 0, 0, 0]);
}

/// Appends a method payload as one frame, or as several when it does not fit in
/// `frame_max` bytes. `encode` appends the payload to the buffer it is given.
///
/// Small payloads are encoded in place (no copy); a split payload is copied once.
pub fn write_method(
    out: &mut Vec<u8>,
    channel: u16,
    frame_max: u32,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    let header_at = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    encode(out);
    let payload_len = out.len() - header_at - FRAME_HEADER_BYTES;
    let chunk_max = (frame_max as usize)
        .saturating_sub(FRAME_HEADER_BYTES)
        .max(1);
    if payload_len <= chunk_max {
        let header = &mut out[header_at..header_at + FRAME_HEADER_BYTES];
        header[..4].copy_from_slice(&(payload_len as u32).to_be_bytes());
        header[4] = FrameType::Method as u8;
        header[5] = 0;
        header[6..].copy_from_slice(&channel.to_be_bytes());
        return;
    }
    let payload = out.split_off(header_at + FRAME_HEADER_BYTES);
    out.truncate(header_at);
    let mut chunks = payload.chunks(chunk_max).peekable();
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_some() {
            FLAG_MORE
        } else {
            0
        };
        put_header(out, chunk.len(), flags, channel);
        out.extend_from_slice(chunk);
    }
}

fn put_header(out: &mut Vec<u8>, size: usize, flags: u8, channel: u16) {
    put_u32(out, size as u32);
    out.push(FrameType::Method as u8);
    out.push(flags);
    put_u16(out, channel);
}

/// A payload ready to decode: whole, on one channel.
#[derive(Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A payload that arrived in one frame (borrowed from the read buffer).
    Whole(u16, &'a [u8]),
    /// A payload reassembled from several frames.
    Joined(u16, Vec<u8>),
    /// A split payload that exceeded the bound: its bytes were discarded as they arrived.
    /// `head` holds its first bytes (up to 6: the method id and request id), `size` its
    /// total length in bytes. The stream stays in sync, so the receiver can refuse just
    /// this method (406 on its channel) and keep the connection.
    Oversized {
        /// Channel the payload was sent on.
        channel: u16,
        /// First bytes of the payload (method id, request id), fewer if it was shorter.
        head: Vec<u8>,
        /// Total payload size in bytes.
        size: u64,
    },
}

/// Bytes of a discarded payload that are kept: method id (2) and request id (4).
const OVERSIZED_HEAD_BYTES: usize = 6;

#[derive(Debug)]
enum Partial {
    Joining(u16, Vec<u8>),
    Discarding {
        channel: u16,
        head: Vec<u8>,
        size: u64,
    },
}

impl Partial {
    fn channel(&self) -> u16 {
        match self {
            Partial::Joining(ch, _) => *ch,
            Partial::Discarding { channel, .. } => *channel,
        }
    }
}

/// Reassembles payloads split over several frames, within a byte bound. A payload over
/// the bound is discarded frame by frame and reported as [`Payload::Oversized`], so
/// memory stays bounded and the connection can survive it.
#[derive(Debug)]
pub struct FrameAssembler {
    partial: Option<Partial>,
    payload_max: usize,
    /// The bound once the connection is open (see [`FrameAssembler::before_open`]).
    payload_max_open: usize,
}

impl FrameAssembler {
    /// An assembler that joins payloads of at most `payload_max` bytes.
    pub fn new(payload_max: usize) -> FrameAssembler {
        FrameAssembler {
            partial: None,
            payload_max,
            payload_max_open: payload_max,
        }
    }

    /// An assembler that joins at most `handshake_max` bytes until [`FrameAssembler::open`]
    /// raises the bound to `payload_max`: a client that has not logged in cannot make the
    /// server hold or decode a large payload.
    pub fn before_open(handshake_max: usize, payload_max: usize) -> FrameAssembler {
        FrameAssembler {
            partial: None,
            payload_max: handshake_max.min(payload_max),
            payload_max_open: payload_max,
        }
    }

    /// Whether the bound is the open connection's.
    pub fn is_open(&self) -> bool {
        self.payload_max == self.payload_max_open
    }

    /// Raises the bound to the open connection's.
    pub fn open(&mut self) {
        self.payload_max = self.payload_max_open;
    }

    /// Bytes held for a payload still being reassembled.
    pub fn buffered_bytes(&self) -> usize {
        match &self.partial {
            Some(Partial::Joining(_, b)) => b.len(),
            _ => 0,
        }
    }

    /// Takes one whole method frame (header and payload as found by [`check`]) and returns
    /// the payload when it is complete.
    ///
    /// # Errors
    /// [`DecodeError`] when a frame of another channel arrives in the middle of a split
    /// payload (the frames of one payload must be consecutive).
    pub fn push<'a>(
        &mut self,
        header: &FrameHeader,
        payload: &'a [u8],
    ) -> Result<Option<Payload<'a>>, DecodeError> {
        let more = header.flags & FLAG_MORE != 0;
        let partial = match self.partial.take() {
            None if !more => return Ok(Some(Payload::Whole(header.channel, payload))),
            None => Partial::Joining(header.channel, Vec::new()),
            Some(p) => {
                if p.channel() != header.channel {
                    return Err(DecodeError::new(format!(
                        "frame on channel {} interrupts a split payload on channel {}",
                        header.channel,
                        p.channel()
                    )));
                }
                p
            }
        };
        let partial = match partial {
            Partial::Joining(channel, mut joined) => {
                if joined.len() + payload.len() <= self.payload_max {
                    joined.extend_from_slice(payload);
                    Partial::Joining(channel, joined)
                } else {
                    let size = (joined.len() + payload.len()) as u64;
                    joined.extend_from_slice(payload);
                    joined.truncate(OVERSIZED_HEAD_BYTES);
                    Partial::Discarding {
                        channel,
                        head: joined,
                        size,
                    }
                }
            }
            Partial::Discarding {
                channel,
                head,
                size,
            } => Partial::Discarding {
                channel,
                head,
                size: size + payload.len() as u64,
            },
        };
        if more {
            self.partial = Some(partial);
            return Ok(None);
        }
        Ok(Some(match partial {
            Partial::Joining(channel, joined) => Payload::Joined(channel, joined),
            Partial::Discarding {
                channel,
                head,
                size,
            } => Payload::Oversized {
                channel,
                head,
                size,
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_open_the_handshake_bound_applies_then_the_full_one() {
        let mut asm = FrameAssembler::before_open(100, 1000);
        let split = FrameHeader {
            frame_type: FrameType::Method,
            flags: FLAG_MORE,
            channel: 1,
            size: 80,
        };
        let last = FrameHeader { flags: 0, ..split };
        assert!(asm.push(&split, &[0; 80]).unwrap().is_none());
        assert!(matches!(
            asm.push(&last, &[0; 80]).unwrap(),
            Some(Payload::Oversized { size: 160, .. })
        ));
        assert!(!asm.is_open());
        asm.open();
        assert!(asm.is_open());
        assert!(asm.push(&split, &[0; 80]).unwrap().is_none());
        assert!(matches!(
            asm.push(&last, &[0; 80]).unwrap(),
            Some(Payload::Joined(1, p)) if p.len() == 160
        ));
    }

    fn frames_of(out: &[u8], frame_max: u32) -> Vec<(FrameHeader, Vec<u8>)> {
        let mut at = 0;
        let mut v = Vec::new();
        while at < out.len() {
            let (h, n) = check(&out[at..], frame_max).unwrap().unwrap();
            v.push((h, out[at + FRAME_HEADER_BYTES..at + n].to_vec()));
            at += n;
        }
        v
    }

    #[test]
    fn small_payload_is_one_frame() {
        let mut out = Vec::new();
        write_method(&mut out, 7, 4096, |b| b.extend_from_slice(b"abc"));
        assert_eq!(out, [0, 0, 0, 3, 1, 0, 0, 7, b'a', b'b', b'c']);
    }

    #[test]
    fn large_payload_is_split_and_joined() {
        let body: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        write_method(&mut out, 3, 4096, |b| b.extend_from_slice(&body));
        let frames = frames_of(&out, 4096);
        assert_eq!(frames.len(), 3);
        let mut asm = FrameAssembler::new(1 << 20);
        let mut got = None;
        for (h, p) in &frames {
            assert_eq!(h.channel, 3);
            if let Some(Payload::Joined(ch, joined)) = asm.push(h, p).unwrap() {
                got = Some((ch, joined));
            }
        }
        assert_eq!(got, Some((3, body)));
    }

    #[test]
    fn incomplete_and_oversized_frames() {
        let mut out = Vec::new();
        write_method(&mut out, 1, 4096, |b| b.extend_from_slice(&[9; 100]));
        for cut in 0..out.len() {
            assert_eq!(check(&out[..cut], 4096).unwrap(), None);
        }
        let huge = [0x7f, 0xff, 0xff, 0xff, 1, 0, 0, 1];
        assert!(check(&huge, 4096).is_err());
        assert!(check(&[0, 0, 0, 0, 9, 0, 0, 0], 4096).is_err());
        assert!(check(&[0, 0, 0, 0, 1, 0x80, 0, 0], 4096).is_err());
    }

    #[test]
    fn interleaved_or_oversized_split_payloads_are_refused() {
        let more = FrameHeader {
            size: 3,
            frame_type: FrameType::Method,
            flags: FLAG_MORE,
            channel: 1,
        };
        let other = FrameHeader { channel: 2, ..more };
        let mut asm = FrameAssembler::new(5);
        assert_eq!(asm.push(&more, b"abc").unwrap(), None);
        assert!(asm.push(&other, b"x").is_err());
    }

    #[test]
    fn oversized_split_payload_is_discarded_and_reported() {
        let more = FrameHeader {
            size: 4,
            frame_type: FrameType::Method,
            flags: FLAG_MORE,
            channel: 1,
        };
        let last = FrameHeader { flags: 0, ..more };
        let mut asm = FrameAssembler::new(5);
        assert_eq!(asm.push(&more, b"\x00\x54abcd").unwrap(), None);
        assert_eq!(asm.push(&more, b"efgh").unwrap(), None);
        assert_eq!(asm.buffered_bytes(), 0, "discarded bytes are not kept");
        let got = asm.push(&last, b"ij").unwrap();
        assert_eq!(
            got,
            Some(Payload::Oversized {
                channel: 1,
                head: b"\x00\x54abcd".to_vec(),
                size: 12
            })
        );
        // The next payload is handled normally.
        assert_eq!(
            asm.push(&last, b"ok").unwrap(),
            Some(Payload::Whole(1, b"ok"))
        );
    }
}
