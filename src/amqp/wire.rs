//! Method argument encoding: AMQP 0-9-1 domain types and bit packing (§4.2.5).
//!
//! Arguments are written in the specification's order. Integers are big-endian;
//! `shortstr` is a `u8` length and UTF-8 bytes, `longstr` a `u32` length and bytes, `table`
//! a field table (§4.2.5.5, RabbitMQ's type tags). Consecutive `bit` arguments share
//! octets, least significant bit first, eight to an octet; any other type ends the run
//! (§4.2.5.2). The reader and writer here keep that bit state, so the method table in
//! [`super::method`] only lists arguments in order.

use crate::error::DecodeError;
use crate::types::codec::{put_long_bytes, put_short_str, put_u16, put_u32, put_u64, Reader};
use crate::types::field_table::{decode_table, encode_table, FieldTable};

/// Bits packed into one octet (AMQP 0-9-1 §4.2.5.2).
const BITS_PER_OCTET: u8 = 8;

/// Appends method arguments, packing consecutive bits.
pub(crate) struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    /// Index of the octet holding the current bit run and the next free bit in it.
    bits: Option<(usize, u8)>,
}

impl<'a> Encoder<'a> {
    /// An encoder appending to `out`.
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Encoder<'a> {
        Encoder { out, bits: None }
    }

    /// The buffer, for a non-bit argument: ends any bit run.
    fn bytes(&mut self) -> &mut Vec<u8> {
        self.bits = None;
        self.out
    }

    /// One `bit` argument.
    fn bit(&mut self, v: bool) {
        let (at, next) = match self.bits {
            Some((at, next)) if next < BITS_PER_OCTET => (at, next),
            _ => {
                self.out.push(0);
                (self.out.len() - 1, 0)
            }
        };
        if v {
            self.out[at] |= 1 << next;
        }
        self.bits = Some((at, next + 1));
    }
}

/// Reads method arguments, unpacking consecutive bits.
pub(crate) struct Decoder<'a> {
    r: Reader<'a>,
    /// The octet holding the current bit run and the next bit to read in it.
    bits: Option<(u8, u8)>,
}

impl<'a> Decoder<'a> {
    /// A decoder over the argument bytes of one method.
    pub(crate) fn new(args: &'a [u8]) -> Decoder<'a> {
        Decoder {
            r: Reader::new(args),
            bits: None,
        }
    }

    /// The reader, for a non-bit argument: ends any bit run.
    fn reader(&mut self) -> &mut Reader<'a> {
        self.bits = None;
        &mut self.r
    }

    /// One `bit` argument.
    fn bit(&mut self, what: &str) -> Result<bool, DecodeError> {
        let (octet, next) = match self.bits {
            Some((octet, next)) if next < BITS_PER_OCTET => (octet, next),
            _ => (self.r.u8(what)?, 0),
        };
        self.bits = Some((octet, next + 1));
        Ok(octet & (1 << next) != 0)
    }

    /// Checks that every argument byte was read.
    ///
    /// # Errors
    /// [`DecodeError`] when bytes are left over.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.r.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::new(format!(
                "{} trailing bytes after the arguments",
                self.r.remaining()
            )))
        }
    }
}

/// A Rust type standing for one AMQP 0-9-1 argument domain: `u8` octet, `u16` short,
/// `u32` long, `u64` longlong (and timestamp), `bool` bit, `String` shortstr, `Vec<u8>`
/// longstr, [`FieldTable`] table.
pub(crate) trait WireField: Sized {
    /// Appends the value.
    fn put(&self, e: &mut Encoder<'_>);
    /// Reads a value; `what` names the argument in errors.
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<Self, DecodeError>;
}

impl WireField for u8 {
    fn put(&self, e: &mut Encoder<'_>) {
        e.bytes().push(*self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<u8, DecodeError> {
        d.reader().u8(what)
    }
}

impl WireField for u16 {
    fn put(&self, e: &mut Encoder<'_>) {
        put_u16(e.bytes(), *self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<u16, DecodeError> {
        d.reader().u16(what)
    }
}

impl WireField for u32 {
    fn put(&self, e: &mut Encoder<'_>) {
        put_u32(e.bytes(), *self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<u32, DecodeError> {
        d.reader().u32(what)
    }
}

impl WireField for u64 {
    fn put(&self, e: &mut Encoder<'_>) {
        put_u64(e.bytes(), *self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<u64, DecodeError> {
        d.reader().u64(what)
    }
}

impl WireField for bool {
    fn put(&self, e: &mut Encoder<'_>) {
        e.bit(*self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<bool, DecodeError> {
        d.bit(what)
    }
}

impl WireField for String {
    /// A shortstr; text over 255 bytes is cut on a character boundary
    /// ([`put_short_str`]).
    fn put(&self, e: &mut Encoder<'_>) {
        put_short_str(e.bytes(), self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<String, DecodeError> {
        Ok(d.reader().short_str(what)?.to_string())
    }
}

impl WireField for Vec<u8> {
    /// A longstr; its length is bounded by the frame that carries it.
    fn put(&self, e: &mut Encoder<'_>) {
        put_long_bytes(e.bytes(), self);
    }
    fn get(d: &mut Decoder<'_>, what: &str) -> Result<Vec<u8>, DecodeError> {
        Ok(d.reader().long_bytes(what)?.to_vec())
    }
}

impl WireField for FieldTable {
    fn put(&self, e: &mut Encoder<'_>) {
        encode_table(e.bytes(), self);
    }
    fn get(d: &mut Decoder<'_>, _what: &str) -> Result<FieldTable, DecodeError> {
        decode_table(d.reader())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_bits_share_octets_and_other_types_end_the_run() {
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out);
        for i in 0..10 {
            (i % 3 == 0).put(&mut e);
        }
        7u8.put(&mut e);
        true.put(&mut e);
        // bits 0,3,6,9 set: octet 1 = 0b0100_1001, octet 2 = 0b0000_0010.
        assert_eq!(out, [0b0100_1001, 0b0000_0010, 7, 1]);
        let mut d = Decoder::new(&out);
        for i in 0..10 {
            assert_eq!(bool::get(&mut d, "b").unwrap(), i % 3 == 0);
        }
        assert_eq!(u8::get(&mut d, "o").unwrap(), 7);
        assert!(bool::get(&mut d, "b").unwrap());
        d.finish().unwrap();
    }
}
