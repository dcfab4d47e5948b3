//! `queue_stat`: the per-segment record counts of a queue, as text, one line per segment:
//!
//! ```text
//! <segment number>\t<records total>\t<records valid>\n
//! ```
//!
//! in increasing segment order (the design documents' `total\tvalid` per segment, with the
//! segment number in front). It is a hint, never the truth: the store rewrites it with
//! [`Backend::write_file_atomic`](crate::storage::Backend::write_file_atomic) when a segment
//! is sealed, compacted or deleted and at clean shutdown; at open it is compared with the
//! counts found by scanning, and a missing, unparseable or different file is recounted
//! (`RecoveryReport::stat_rebuilt`) but not rewritten during recovery (one file
//! write and two fsyncs per queue after a crash); the next seal, compaction, deletion or
//! clean shutdown writes it. `relaymq-server --check` reports a lagging one.

use std::collections::BTreeMap;

/// Name of the file in a queue's directory.
pub const STAT_FILE_NAME: &str = "queue_stat";

/// Largest `queue_stat` read, in bytes (16 MiB: about 400 000 segments); a larger file
/// counts as corrupt and is rebuilt.
pub const STAT_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// Record counts of one segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentCounts {
    /// Records in the segment file (valid or settled).
    pub total: u64,
    /// Records not settled.
    pub valid: u64,
}

/// Counts by segment number.
pub type StatTable = BTreeMap<u64, SegmentCounts>;

/// The text of `queue_stat` for `table`.
pub fn encode(table: &StatTable) -> String {
    let mut out = String::new();
    for (segment, c) in table {
        out.push_str(&format!("{segment}\t{}\t{}\n", c.total, c.valid));
    }
    out
}

/// Parses the text of `queue_stat`.
///
/// # Errors
/// A message saying what is wrong: not UTF-8, a line without exactly three tab-separated
/// decimal numbers, valid above total, segment numbers not strictly increasing, or a
/// missing final newline.
pub fn parse(bytes: &[u8]) -> Result<StatTable, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "queue_stat is not UTF-8".to_string())?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("queue_stat does not end with a newline".into());
    }
    let mut table = StatTable::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |what: &str| format!("queue_stat line {}: {what}", i + 1);
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != 3 {
            return Err(bad("expected three tab-separated fields"));
        }
        let mut nums = [0u64; 3];
        for (n, f) in nums.iter_mut().zip(&fields) {
            if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("not a decimal number"));
            }
            *n = f.parse().map_err(|_| bad("number out of range"))?;
        }
        let [segment, total, valid] = nums;
        if valid > total {
            return Err(bad("more valid records than records"));
        }
        if table
            .keys()
            .next_back()
            .is_some_and(|&last| last >= segment)
        {
            return Err(bad("segment numbers not increasing"));
        }
        table.insert(segment, SegmentCounts { total, valid });
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut t = StatTable::new();
        t.insert(
            1,
            SegmentCounts {
                total: 10,
                valid: 3,
            },
        );
        t.insert(4, SegmentCounts { total: 0, valid: 0 });
        let text = encode(&t);
        assert_eq!(text, "1\t10\t3\n4\t0\t0\n");
        assert_eq!(parse(text.as_bytes()), Ok(t));
        assert_eq!(parse(b""), Ok(StatTable::new()));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b"\xff\xfe"[..],
            b"1\t2\n",
            b"1\t2\t3\n",
            b"1\t2\t1",
            b"1\t2\t1\n1\t2\t1\n",
            b"2\t2\t1\n1\t2\t1\n",
            b"+1\t2\t1\n",
            b"1\t-2\t1\n",
            b"1\t99999999999999999999999\t1\n",
            b"1 2 1\n",
            b"\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let mut x = 7u32;
        for _ in 0..200 {
            let junk: Vec<u8> = (0..64)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (x >> 16) as u8
                })
                .collect();
            let _ = parse(&junk);
        }
    }
}
