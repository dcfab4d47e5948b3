//! Big-endian primitives: a bounds-checked reader over a byte slice and writers onto a
//! `Vec<u8>`.
//!
//! Every read checks the remaining length first, so truncated input is a [`DecodeError`],
//! never a panic. Strings follow AMQP 0-9-1 §4.2.5.3: a short string is a `u8` length and
//! at most 255 bytes of UTF-8, a long string a `u32` length and bytes.

use crate::error::DecodeError;
use crate::limits::SHORT_STRING_BYTES_MAX;
use byteorder::{BigEndian, ByteOrder};

/// A cursor over an input buffer; every method fails cleanly on short input.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader positioned at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// [`DecodeError`] naming `what` when fewer than `n` bytes remain.
    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::new(format!(
                "truncated {what}: need {n} bytes, {} left",
                self.remaining()
            )));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The rest of the input.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// One byte.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input.
    pub fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.bytes(1, what)?[0])
    }

    /// The next big-endian `u16` without consuming it; `None` at end of input.
    pub fn peek_u16(&self) -> Option<u16> {
        self.buf
            .get(self.pos..self.pos + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian `u16`.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input.
    pub fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        Ok(BigEndian::read_u16(self.bytes(2, what)?))
    }

    /// A big-endian `u32`.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input.
    pub fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(BigEndian::read_u32(self.bytes(4, what)?))
    }

    /// A big-endian `u64`.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input.
    pub fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(BigEndian::read_u64(self.bytes(8, what)?))
    }

    /// A boolean byte: 0 is false, anything else true.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input.
    pub fn bool(&mut self, what: &str) -> Result<bool, DecodeError> {
        Ok(self.u8(what)? != 0)
    }

    /// A short string: `u8` length, then UTF-8 bytes.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input or invalid UTF-8.
    pub fn short_str(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        let n = self.u8(what)? as usize;
        let raw = self.bytes(n, what)?;
        std::str::from_utf8(raw).map_err(|_| DecodeError::new(format!("{what} is not UTF-8")))
    }

    /// A long string: `u32` length, then bytes (not necessarily UTF-8).
    ///
    /// # Errors
    /// [`DecodeError`] on end of input.
    pub fn long_bytes(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let n = self.u32(what)? as usize;
        self.bytes(n, what)
    }

    /// A long string that must be UTF-8.
    ///
    /// # Errors
    /// [`DecodeError`] on end of input or invalid UTF-8.
    pub fn long_str(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        let raw = self.long_bytes(what)?;
        std::str::from_utf8(raw).map_err(|_| DecodeError::new(format!("{what} is not UTF-8")))
    }
}

/// Appends a big-endian `u16`.
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a boolean as one byte (1 or 0).
pub fn put_bool(out: &mut Vec<u8>, v: bool) {
    out.push(v as u8);
}

/// Appends a short string (`u8` length + bytes). Longer strings are cut at 255 bytes on a
/// character boundary; callers validate names before they get here, so this only guards
/// server-generated text (reply texts).
pub fn put_short_str(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len().min(SHORT_STRING_BYTES_MAX);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.push(n as u8);
    out.extend_from_slice(&s.as_bytes()[..n]);
}

/// Appends a long string (`u32` length + bytes).
pub fn put_long_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_written() {
        let mut out = Vec::new();
        put_u16(&mut out, 0xBEEF);
        put_u32(&mut out, 7);
        put_u64(&mut out, u64::MAX - 1);
        put_bool(&mut out, true);
        put_short_str(&mut out, "größe");
        put_long_bytes(&mut out, b"\0body");
        let mut r = Reader::new(&out);
        assert_eq!(r.u16("a").unwrap(), 0xBEEF);
        assert_eq!(r.u32("b").unwrap(), 7);
        assert_eq!(r.u64("c").unwrap(), u64::MAX - 1);
        assert!(r.bool("d").unwrap());
        assert_eq!(r.short_str("e").unwrap(), "größe");
        assert_eq!(r.long_bytes("f").unwrap(), b"\0body");
        assert!(r.is_empty());
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let mut r = Reader::new(&[0, 0, 0, 9, 1]);
        let err = r.long_bytes("body").unwrap_err();
        assert!(err.message.contains("truncated body"), "{err}");
        let mut r = Reader::new(&[]);
        assert!(r.u64("x").is_err());
    }

    #[test]
    fn short_string_is_cut_on_a_char_boundary() {
        let long = "é".repeat(200); // 400 bytes
        let mut out = Vec::new();
        put_short_str(&mut out, &long);
        assert_eq!(out[0], 254);
        let mut r = Reader::new(&out);
        assert_eq!(r.short_str("s").unwrap().chars().count(), 127);
    }
}
