//! Field tables: the typed key/value maps of AMQP 0-9-1 §4.2.5.5, used for message headers,
//! queue/exchange/binding arguments and listings.
//!
//! The type tags are RabbitMQ's (the errata to the specification): `t` bool, `b` i8,
//! `B` u8, `s` i16, `u` u16, `I` i32, `i` u32, `l` i64, `f` f32, `d` f64, `D` decimal,
//! `S` long string, `x` byte array, `A` array, `T` timestamp, `F` table, `V` void.
//! A table is encoded as a `u32` byte length followed by entries (short-string key,
//! tag byte, value). Keys are kept sorted, so two tables with the same entries are equal
//! whatever order a client sent them in (argument equivalence checks rely on this).

use crate::error::DecodeError;
use crate::limits::{FIELD_TABLE_DEPTH_MAX, PROPERTIES_BYTES_MAX};
use crate::types::codec::{put_long_bytes, put_short_str, put_u16, put_u32, put_u64, Reader};
use std::collections::BTreeMap;

/// Largest encoded field table accepted, in bytes: [`PROPERTIES_BYTES_MAX`] (1 MiB).
///
/// A decoded table takes up to about 32 times its encoded size in memory (a one-byte `V`
/// value is a 32-byte [`FieldValue`]), so without a bound a native payload split over
/// frames (up to the body limit, 16 MiB by default) could make the decoder allocate
/// gigabytes for one argument table. No table RelayMQ accepts needs more: message headers
/// live in a properties block, itself bounded by `PROPERTIES_BYTES_MAX`, and an AMQP 0-9-1
/// table must fit one frame (at most 1 MiB). Found by fuzzing (docs/security.md §7.2).
pub const FIELD_TABLE_BYTES_MAX: usize = PROPERTIES_BYTES_MAX;

/// A field table: keys (short strings) to typed values.
pub type FieldTable = BTreeMap<String, FieldValue>;

/// One typed value of a field table or array.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    /// `t`: a boolean.
    Bool(bool),
    /// `b`: a signed 8-bit integer.
    I8(i8),
    /// `B`: an unsigned 8-bit integer.
    U8(u8),
    /// `s`: a signed 16-bit integer.
    I16(i16),
    /// `u`: an unsigned 16-bit integer.
    U16(u16),
    /// `I`: a signed 32-bit integer.
    I32(i32),
    /// `i`: an unsigned 32-bit integer.
    U32(u32),
    /// `l`: a signed 64-bit integer.
    I64(i64),
    /// `f`: a 32-bit float.
    F32(f32),
    /// `d`: a 64-bit float.
    F64(f64),
    /// `D`: a decimal: scale (digits after the point) and unscaled value.
    Decimal(u8, u32),
    /// `S`: a long string (bytes, usually UTF-8).
    LongString(Vec<u8>),
    /// `x`: a byte array.
    Bytes(Vec<u8>),
    /// `A`: an array of values.
    Array(Vec<FieldValue>),
    /// `T`: a timestamp, seconds since the Unix epoch.
    Timestamp(u64),
    /// `F`: a nested table.
    Table(FieldTable),
    /// `V`: no value.
    Void,
}

impl FieldValue {
    /// A long-string value holding `s`.
    pub fn string(s: impl Into<String>) -> FieldValue {
        FieldValue::LongString(s.into().into_bytes())
    }

    /// The value as text when it is a UTF-8 long string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::LongString(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer when it is any integer type.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            FieldValue::I8(v) => v as i64,
            FieldValue::U8(v) => v as i64,
            FieldValue::I16(v) => v as i64,
            FieldValue::U16(v) => v as i64,
            FieldValue::I32(v) => v as i64,
            FieldValue::U32(v) => v as i64,
            FieldValue::I64(v) => v,
            FieldValue::Timestamp(v) => i64::try_from(v).ok()?,
            _ => return None,
        })
    }

    /// RabbitMQ's name for the value's type, as its error messages show it (`long`,
    /// `longstr`, `signedint`, …).
    pub fn rabbitmq_type_name(&self) -> &'static str {
        match self {
            FieldValue::Bool(_) => "bool",
            FieldValue::I8(_) => "byte",
            FieldValue::U8(_) => "unsignedbyte",
            FieldValue::I16(_) => "short",
            FieldValue::U16(_) => "unsignedshort",
            FieldValue::I32(_) => "signedint",
            FieldValue::U32(_) => "unsignedint",
            FieldValue::I64(_) => "long",
            FieldValue::F32(_) => "float",
            FieldValue::F64(_) => "double",
            FieldValue::Decimal(..) => "decimal",
            FieldValue::LongString(_) => "longstr",
            FieldValue::Bytes(_) => "binary",
            FieldValue::Array(_) => "array",
            FieldValue::Timestamp(_) => "timestamp",
            FieldValue::Table(_) => "table",
            FieldValue::Void => "void",
        }
    }

    /// The value as JSON (strings as text, byte arrays and non-UTF-8 strings as arrays of
    /// numbers, decimals as numbers).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            FieldValue::Bool(b) => J::Bool(*b),
            FieldValue::F32(v) => {
                serde_json::Number::from_f64(*v as f64).map_or(J::Null, J::Number)
            }
            FieldValue::F64(v) => serde_json::Number::from_f64(*v).map_or(J::Null, J::Number),
            FieldValue::Decimal(scale, v) => {
                serde_json::Number::from_f64(*v as f64 / 10f64.powi(*scale as i32))
                    .map_or(J::Null, J::Number)
            }
            FieldValue::LongString(b) => match std::str::from_utf8(b) {
                Ok(s) => J::String(s.to_string()),
                Err(_) => J::Array(b.iter().map(|x| J::from(*x)).collect()),
            },
            FieldValue::Bytes(b) => J::Array(b.iter().map(|x| J::from(*x)).collect()),
            FieldValue::Array(items) => J::Array(items.iter().map(FieldValue::to_json).collect()),
            FieldValue::Table(t) => table_to_json(t),
            FieldValue::Void => J::Null,
            other => other.as_i64().map_or(J::Null, J::from),
        }
    }

    /// A value from JSON: integers become `l` (i64), other numbers `d`, strings `S`,
    /// objects tables, arrays arrays, null void.
    pub fn from_json(v: &serde_json::Value) -> FieldValue {
        use serde_json::Value as J;
        match v {
            J::Null => FieldValue::Void,
            J::Bool(b) => FieldValue::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => FieldValue::I64(i),
                None => FieldValue::F64(n.as_f64().unwrap_or(0.0)),
            },
            J::String(s) => FieldValue::string(s.clone()),
            J::Array(items) => FieldValue::Array(items.iter().map(FieldValue::from_json).collect()),
            J::Object(map) => FieldValue::Table(
                map.iter()
                    .map(|(k, v)| (k.clone(), FieldValue::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// A table as a JSON object.
pub fn table_to_json(t: &FieldTable) -> serde_json::Value {
    serde_json::Value::Object(t.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
}

/// Appends `table` in its wire form (`u32` length + entries).
pub fn encode_table(out: &mut Vec<u8>, table: &FieldTable) {
    let len_at = out.len();
    put_u32(out, 0);
    for (k, v) in table {
        put_short_str(out, k);
        encode_value(out, v);
    }
    let len = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

fn encode_value(out: &mut Vec<u8>, v: &FieldValue) {
    match v {
        FieldValue::Bool(b) => out.extend_from_slice(&[b't', *b as u8]),
        FieldValue::I8(x) => out.extend_from_slice(&[b'b', *x as u8]),
        FieldValue::U8(x) => out.extend_from_slice(&[b'B', *x]),
        FieldValue::I16(x) => {
            out.push(b's');
            put_u16(out, *x as u16);
        }
        FieldValue::U16(x) => {
            out.push(b'u');
            put_u16(out, *x);
        }
        FieldValue::I32(x) => {
            out.push(b'I');
            put_u32(out, *x as u32);
        }
        FieldValue::U32(x) => {
            out.push(b'i');
            put_u32(out, *x);
        }
        FieldValue::I64(x) => {
            out.push(b'l');
            put_u64(out, *x as u64);
        }
        FieldValue::F32(x) => {
            out.push(b'f');
            put_u32(out, x.to_bits());
        }
        FieldValue::F64(x) => {
            out.push(b'd');
            put_u64(out, x.to_bits());
        }
        FieldValue::Decimal(scale, x) => {
            out.extend_from_slice(&[b'D', *scale]);
            put_u32(out, *x);
        }
        FieldValue::LongString(b) => {
            out.push(b'S');
            put_long_bytes(out, b);
        }
        FieldValue::Bytes(b) => {
            out.push(b'x');
            put_long_bytes(out, b);
        }
        FieldValue::Array(items) => {
            out.push(b'A');
            let len_at = out.len();
            put_u32(out, 0);
            for item in items {
                encode_value(out, item);
            }
            let len = (out.len() - len_at - 4) as u32;
            out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
        }
        FieldValue::Timestamp(t) => {
            out.push(b'T');
            put_u64(out, *t);
        }
        FieldValue::Table(t) => {
            out.push(b'F');
            encode_table(out, t);
        }
        FieldValue::Void => out.push(b'V'),
    }
}

/// How deep tables and arrays nest inside `table`: 0 when it holds only scalars, 1 with a
/// table or array of scalars among its values, and so on.
pub fn nesting_depth(table: &FieldTable) -> usize {
    fn value(v: &FieldValue) -> usize {
        match v {
            FieldValue::Table(t) => 1 + nesting_depth(t),
            FieldValue::Array(items) => 1 + items.iter().map(value).max().unwrap_or(0),
            _ => 0,
        }
    }
    table.values().map(value).max().unwrap_or(0)
}

/// Checks that `table` nests no deeper than a decoder accepts ([`FIELD_TABLE_DEPTH_MAX`]
/// levels below it, less one so arrays at the last level decode too), so that what is
/// accepted from JSON (the management API, definitions, the CLI) can be stored, sent and
/// read back: a table decoded from the wire always passes.
///
/// # Errors
/// A text naming `what` and the limit.
pub fn check_nesting(table: &FieldTable, what: &str) -> Result<(), String> {
    let depth = nesting_depth(table);
    if depth >= FIELD_TABLE_DEPTH_MAX {
        return Err(format!(
            "{what} nest {depth} levels deep; at most {} are allowed",
            FIELD_TABLE_DEPTH_MAX - 1
        ));
    }
    Ok(())
}

/// Reads a table in its wire form.
///
/// # Errors
/// [`DecodeError`] on truncation, an unknown type tag, a key that is not UTF-8, nesting
/// deeper than [`FIELD_TABLE_DEPTH_MAX`], or a table longer than [`FIELD_TABLE_BYTES_MAX`]
/// bytes (refused before any entry is decoded).
pub fn decode_table(r: &mut Reader<'_>) -> Result<FieldTable, DecodeError> {
    decode_table_at(r, 0)
}

fn decode_table_at(r: &mut Reader<'_>, depth: usize) -> Result<FieldTable, DecodeError> {
    if depth > FIELD_TABLE_DEPTH_MAX {
        return Err(DecodeError::new("field table nested too deeply"));
    }
    let raw = r.long_bytes("field table")?;
    if raw.len() > FIELD_TABLE_BYTES_MAX {
        return Err(DecodeError::new(format!(
            "field table of {} bytes exceeds the limit of {FIELD_TABLE_BYTES_MAX} bytes",
            raw.len()
        )));
    }
    let mut inner = Reader::new(raw);
    let mut table = FieldTable::new();
    while !inner.is_empty() {
        let key = inner.short_str("field table key")?.to_string();
        let value = decode_value(&mut inner, depth)?;
        table.insert(key, value);
    }
    Ok(table)
}

fn decode_value(r: &mut Reader<'_>, depth: usize) -> Result<FieldValue, DecodeError> {
    let tag = r.u8("field value tag")?;
    Ok(match tag {
        b't' => FieldValue::Bool(r.bool("bool field")?),
        b'b' => FieldValue::I8(r.u8("i8 field")? as i8),
        b'B' => FieldValue::U8(r.u8("u8 field")?),
        b's' => FieldValue::I16(r.u16("i16 field")? as i16),
        b'u' => FieldValue::U16(r.u16("u16 field")?),
        b'I' => FieldValue::I32(r.u32("i32 field")? as i32),
        b'i' => FieldValue::U32(r.u32("u32 field")?),
        // RabbitMQ reads `L` as a signed 64-bit long too (`rabbit_binary_parser`), and
        // py-amqp (Celery, kombu) writes large integers with it.
        b'l' | b'L' => FieldValue::I64(r.u64("i64 field")? as i64),
        b'f' => FieldValue::F32(f32::from_bits(r.u32("f32 field")?)),
        b'd' => FieldValue::F64(f64::from_bits(r.u64("f64 field")?)),
        b'D' => FieldValue::Decimal(r.u8("decimal scale")?, r.u32("decimal value")?),
        b'S' => FieldValue::LongString(r.long_bytes("string field")?.to_vec()),
        b'x' => FieldValue::Bytes(r.long_bytes("bytes field")?.to_vec()),
        b'A' => {
            if depth >= FIELD_TABLE_DEPTH_MAX {
                return Err(DecodeError::new("field array nested too deeply"));
            }
            let raw = r.long_bytes("array field")?;
            let mut inner = Reader::new(raw);
            let mut items = Vec::new();
            while !inner.is_empty() {
                items.push(decode_value(&mut inner, depth + 1)?);
            }
            FieldValue::Array(items)
        }
        b'T' => FieldValue::Timestamp(r.u64("timestamp field")?),
        b'F' => FieldValue::Table(decode_table_at(r, depth + 1)?),
        b'V' => FieldValue::Void,
        other => {
            return Err(DecodeError::new(format!(
                "unknown field value type tag 0x{other:02x}"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FieldTable {
        let mut nested = FieldTable::new();
        nested.insert("inner".into(), FieldValue::I16(-3));
        let mut t = FieldTable::new();
        t.insert("bool".into(), FieldValue::Bool(true));
        t.insert("i8".into(), FieldValue::I8(-1));
        t.insert("u8".into(), FieldValue::U8(255));
        t.insert("u16".into(), FieldValue::U16(65535));
        t.insert("i32".into(), FieldValue::I32(-70000));
        t.insert("u32".into(), FieldValue::U32(70000));
        t.insert("i64".into(), FieldValue::I64(-1 << 40));
        t.insert("f32".into(), FieldValue::F32(1.5));
        t.insert("f64".into(), FieldValue::F64(-2.25));
        t.insert("dec".into(), FieldValue::Decimal(2, 12345));
        t.insert("str".into(), FieldValue::string("héllo"));
        t.insert("bin".into(), FieldValue::Bytes(vec![0, 1, 2]));
        t.insert(
            "arr".into(),
            FieldValue::Array(vec![FieldValue::Void, FieldValue::string("x")]),
        );
        t.insert("ts".into(), FieldValue::Timestamp(1_700_000_000));
        t.insert("tbl".into(), FieldValue::Table(nested));
        t
    }

    #[test]
    fn every_type_round_trips() {
        let t = sample();
        let mut out = Vec::new();
        encode_table(&mut out, &t);
        let mut r = Reader::new(&out);
        assert_eq!(decode_table(&mut r).unwrap(), t);
        assert!(r.is_empty());
    }

    #[test]
    fn an_upper_case_l_is_a_signed_long_as_rabbitmq_reads_it() {
        let mut raw = vec![0, 0, 0, 11, 1, b'k', b'L'];
        raw.extend_from_slice(&(-5i64).to_be_bytes());
        let mut r = Reader::new(&raw);
        let t = decode_table_at(&mut r, 0).unwrap();
        assert_eq!(t.get("k"), Some(&FieldValue::I64(-5)));
    }

    #[test]
    fn unknown_tag_and_truncation_are_errors() {
        let mut out = Vec::new();
        let mut t = FieldTable::new();
        t.insert("k".into(), FieldValue::U8(1));
        encode_table(&mut out, &t);
        let tag_at = out.len() - 2;
        out[tag_at] = b'?';
        assert!(decode_table(&mut Reader::new(&out)).is_err());
        let mut out = Vec::new();
        encode_table(&mut out, &sample());
        for cut in 0..out.len() {
            assert!(decode_table(&mut Reader::new(&out[..cut])).is_err());
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut t = FieldTable::new();
        for _ in 0..40 {
            let mut outer = FieldTable::new();
            outer.insert("t".into(), FieldValue::Table(t));
            t = outer;
        }
        let mut out = Vec::new();
        encode_table(&mut out, &t);
        let err = decode_table(&mut Reader::new(&out)).unwrap_err();
        assert!(err.message.contains("deeply"));
    }

    /// Regression (fuzzing notes, finding 1): a table over the bound is refused before any
    /// entry is decoded, whatever it holds; one at the bound decodes.
    #[test]
    fn table_longer_than_its_bound_is_refused_before_decoding() {
        let void_array = |bytes: usize| {
            // One key "a", tag 'A', array length, then `V` values.
            let values = bytes - 1 - 1 - 1 - 4;
            let mut out = Vec::new();
            put_u32(&mut out, bytes as u32);
            out.extend_from_slice(&[1, b'a', b'A']);
            put_u32(&mut out, values as u32);
            out.resize(4 + bytes, b'V');
            out
        };
        let at_bound = void_array(FIELD_TABLE_BYTES_MAX);
        let t = decode_table(&mut Reader::new(&at_bound)).unwrap();
        assert!(matches!(&t["a"], FieldValue::Array(v) if v.len() == FIELD_TABLE_BYTES_MAX - 7));
        let over = void_array(FIELD_TABLE_BYTES_MAX + 1);
        let err = decode_table(&mut Reader::new(&over)).unwrap_err();
        assert!(err.message.contains("exceeds the limit"), "{err}");
    }

    #[test]
    fn json_conversion() {
        let v = FieldValue::from_json(&serde_json::json!({"a": 1, "b": "x", "c": [true]}));
        assert_eq!(
            v.to_json(),
            serde_json::json!({"a": 1, "b": "x", "c": [true]})
        );
    }
}
