//! Field encodings of the native protocol (docs/protocol.md §6): one zero-sized marker per
//! wire type, each writing and reading the Rust types a method field may have.
//!
//! The method table in [`super::method`] names a marker for every field (`user: String as
//! Sstr`), so the enum, encoder and decoder generated from it ([`super::define`]) agree on
//! the layout. The simple types are the document's: [`Sstr`], [`Lstr`], [`U8`], [`U16`],
//! [`U32`], [`U64`], [`Bool`], [`Table`], [`Props`]. The composite ones are written here
//! once: [`Record`] (a struct's fields in order, for the structs `native_records!` defines),
//! [`Counted`] (a `u32` count, then the items) and [`Watermark`] (a form byte and a
//! value). A boxed value is written as the value.

use crate::error::DecodeError;
use crate::limits::DECODE_PREALLOC_ITEMS_MAX;
use crate::types::codec::{
    put_bool, put_long_bytes, put_short_str, put_u16, put_u32, put_u64, Reader,
};
use crate::types::field_table::{decode_table, encode_table};
use crate::types::{BasicProperties, FieldTable, MemoryWatermark};

/// How one wire type writes and reads a Rust value of type `T`.
pub(crate) trait Wire<T> {
    /// Fewest bytes an encoded value takes: bounds a count against the bytes left before
    /// anything is allocated for it ([`Counted`]).
    const BYTES_MIN: usize;

    /// Appends the value.
    fn put(value: &T, out: &mut Vec<u8>);

    /// Reads a value; `what` names the field in errors.
    ///
    /// # Errors
    /// [`DecodeError`] naming `what` for truncated or malformed input.
    fn get(r: &mut Reader<'_>, what: &str) -> Result<T, DecodeError>;
}

/// `sstr`: a `u8` length and at most 255 bytes of UTF-8. Longer text is cut on a
/// character boundary ([`put_short_str`]).
pub(crate) struct Sstr;

impl Wire<String> for Sstr {
    const BYTES_MIN: usize = 1;
    fn put(value: &String, out: &mut Vec<u8>) {
        put_short_str(out, value);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<String, DecodeError> {
        Ok(r.short_str(what)?.to_string())
    }
}

/// `lstr`: a `u32` length and bytes; UTF-8 when the field is a `String`.
pub(crate) struct Lstr;

impl Wire<String> for Lstr {
    const BYTES_MIN: usize = 4;
    fn put(value: &String, out: &mut Vec<u8>) {
        put_long_bytes(out, value.as_bytes());
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<String, DecodeError> {
        Ok(r.long_str(what)?.to_string())
    }
}

impl Wire<Vec<u8>> for Lstr {
    const BYTES_MIN: usize = 4;
    fn put(value: &Vec<u8>, out: &mut Vec<u8>) {
        put_long_bytes(out, value);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<Vec<u8>, DecodeError> {
        Ok(r.long_bytes(what)?.to_vec())
    }
}

/// `u8`: one byte; a [`ListKind`](super::ListKind) is its number.
pub(crate) struct U8;

impl Wire<super::ListKind> for U8 {
    const BYTES_MIN: usize = 1;
    fn put(value: &super::ListKind, out: &mut Vec<u8>) {
        out.push(*value as u8);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<super::ListKind, DecodeError> {
        super::ListKind::from_u8(r.u8(what)?)
    }
}

/// `u16`, big-endian.
pub(crate) struct U16;

impl Wire<u16> for U16 {
    const BYTES_MIN: usize = 2;
    fn put(value: &u16, out: &mut Vec<u8>) {
        put_u16(out, *value);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<u16, DecodeError> {
        r.u16(what)
    }
}

/// `u32`, big-endian.
pub(crate) struct U32;

impl Wire<u32> for U32 {
    const BYTES_MIN: usize = 4;
    fn put(value: &u32, out: &mut Vec<u8>) {
        put_u32(out, *value);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<u32, DecodeError> {
        r.u32(what)
    }
}

/// `u64`, big-endian; an `i64` is its two's complement.
pub(crate) struct U64;

impl Wire<u64> for U64 {
    const BYTES_MIN: usize = 8;
    fn put(value: &u64, out: &mut Vec<u8>) {
        put_u64(out, *value);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<u64, DecodeError> {
        r.u64(what)
    }
}

impl Wire<i64> for U64 {
    const BYTES_MIN: usize = 8;
    fn put(value: &i64, out: &mut Vec<u8>) {
        put_u64(out, *value as u64);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<i64, DecodeError> {
        Ok(r.u64(what)? as i64)
    }
}

/// `bool`: one byte, written 0 or 1; any non-zero byte reads as true.
pub(crate) struct Bool;

impl Wire<bool> for Bool {
    const BYTES_MIN: usize = 1;
    fn put(value: &bool, out: &mut Vec<u8>) {
        put_bool(out, *value);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<bool, DecodeError> {
        r.bool(what)
    }
}

/// `table`: an AMQP field table ([`crate::types::field_table`]), `u32` length first.
pub(crate) struct Table;

impl Wire<FieldTable> for Table {
    const BYTES_MIN: usize = 4;
    fn put(value: &FieldTable, out: &mut Vec<u8>) {
        encode_table(out, value);
    }
    fn get(r: &mut Reader<'_>, _what: &str) -> Result<FieldTable, DecodeError> {
        decode_table(r)
    }
}

/// `props`: [`BasicProperties`] in their flag-word binary form (`u16` flags first).
pub(crate) struct Props;

impl Wire<BasicProperties> for Props {
    const BYTES_MIN: usize = 2;
    fn put(value: &BasicProperties, out: &mut Vec<u8>) {
        value.encode(out);
    }
    fn get(r: &mut Reader<'_>, _what: &str) -> Result<BasicProperties, DecodeError> {
        BasicProperties::decode(r)
    }
}

/// A boxed value is written as the value (the box only keeps [`super::Method`] small).
impl<T, W: Wire<T>> Wire<Box<T>> for W {
    const BYTES_MIN: usize = W::BYTES_MIN;
    fn put(value: &Box<T>, out: &mut Vec<u8>) {
        W::put(value, out);
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<Box<T>, DecodeError> {
        W::get(r, what).map(Box::new)
    }
}

/// A struct's fields in their declared order, each in its own wire type; implemented by
/// `native_records!` for every struct it defines.
pub(crate) struct Record;

/// `u32 count`, then `count` items in wire type `W`. A count that the bytes left cannot
/// hold (each item takes at least `W::BYTES_MIN`) or above `MAX` is refused before
/// anything is allocated for it; at most [`DECODE_PREALLOC_ITEMS_MAX`] are reserved ahead.
pub(crate) struct Counted<W, const MAX: usize>(std::marker::PhantomData<W>);

impl<T, W: Wire<T>, const MAX: usize> Wire<Vec<T>> for Counted<W, MAX> {
    const BYTES_MIN: usize = 4;
    fn put(value: &Vec<T>, out: &mut Vec<u8>) {
        put_u32(out, value.len() as u32);
        for item in value {
            W::put(item, out);
        }
    }
    fn get(r: &mut Reader<'_>, what: &str) -> Result<Vec<T>, DecodeError> {
        const { assert!(W::BYTES_MIN > 0, "a counted item takes at least one byte") };
        let n = r.u32(what)? as usize;
        if n > r.remaining() / W::BYTES_MIN || n > MAX {
            return Err(DecodeError::new(format!(
                "{what}: count of {n} exceeds the payload or the limit of {MAX}"
            )));
        }
        let mut items = Vec::with_capacity(n.min(DECODE_PREALLOC_ITEMS_MAX));
        for _ in 0..n {
            items.push(W::get(r, what)?);
        }
        Ok(items)
    }
}

/// `MemoryHighWatermarkSet` form byte: a fraction of the memory available.
const WATERMARK_RELATIVE: u8 = 1;

/// `MemoryHighWatermarkSet` form byte: an absolute number of bytes.
const WATERMARK_ABSOLUTE: u8 = 2;

/// `u8 form, u64 value`: form 1 = relative (value = the fraction's IEEE 754 `f64` bits),
/// form 2 = absolute (value = bytes). The range is the server's to check.
pub(crate) struct Watermark;

impl Wire<MemoryWatermark> for Watermark {
    const BYTES_MIN: usize = 9;
    fn put(value: &MemoryWatermark, out: &mut Vec<u8>) {
        let (form, bits) = match *value {
            MemoryWatermark::Relative(f) => (WATERMARK_RELATIVE, f.to_bits()),
            MemoryWatermark::Absolute(bytes) => (WATERMARK_ABSOLUTE, bytes),
        };
        out.push(form);
        put_u64(out, bits);
    }
    fn get(r: &mut Reader<'_>, _what: &str) -> Result<MemoryWatermark, DecodeError> {
        let form = r.u8("watermark form")?;
        let value = r.u64("watermark")?;
        match form {
            WATERMARK_RELATIVE => Ok(MemoryWatermark::Relative(f64::from_bits(value))),
            WATERMARK_ABSOLUTE => Ok(MemoryWatermark::Absolute(value)),
            other => Err(DecodeError::new(format!(
                "unknown memory watermark form {other} (1 = relative, 2 = absolute)"
            ))),
        }
    }
}
