//! Checking one queue's directory without changing anything: every segment and ack log
//! read and verified, `queue_stat` compared with the counts (docs/storage.md §9). Used by
//! `relaymq-server --check` ([`super::check_data_dir`]) and the store's tests.

use crate::storage::ack_log::{self, AckKind};
use crate::storage::backend::{tmp_path, Backend};
use crate::storage::queue_store::recovery::read_stat;
use crate::storage::queue_store::{
    acks_name, data_name, needs_compaction, Listing, FINDINGS_LISTED_MAX,
};
use crate::storage::record;
use crate::storage::stat::{SegmentCounts, StatTable, STAT_FILE_NAME};
use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

/// What [`check_dir`] found in a queue directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Damage that recovery would have to skip or that means lost data: damaged records
    /// or ack entries in the middle of a file, unreadable files, records of an unknown
    /// format version.
    pub problems: Vec<String>,
    /// Findings that recovery repairs as a matter of course: torn tails (normal after a
    /// crash), a missing, corrupt or lagging `queue_stat`, leftover files, fully settled
    /// sealed segments, segments due for compaction.
    pub info: Vec<String>,
    /// Segment files.
    pub segments: u64,
    /// Valid records found (checksums verified).
    pub records_total: u64,
    /// Records among them not settled.
    pub records_valid: u64,
    /// Valid ack log entries.
    pub ack_entries: u64,
    /// Bytes of all files of the directory.
    pub bytes_on_disk: u64,
}

impl CheckReport {
    /// Whether no problem was found (info lines do not count).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        for i in &self.info {
            writeln!(f, "info: {i}")?;
        }
        write!(
            f,
            "{} segments, {} records ({} valid), {} ack entries, {} bytes: {}",
            self.segments,
            self.records_total,
            self.records_valid,
            self.ack_entries,
            self.bytes_on_disk,
            if self.is_ok() { "ok" } else { "PROBLEMS" }
        )
    }
}

/// Verifies a queue directory without changing anything (for `relaymq-server --check`):
/// the checksums of every record and ack entry, `queue_stat` against the actual counts,
/// and leftover or unexpected files. What each finding means is in [`CheckReport`] and
/// `docs/storage.md`.
pub fn check_dir(backend: &dyn Backend, dir: &Path) -> CheckReport {
    let mut r = CheckReport::default();
    let listing = match Listing::read(backend, dir) {
        Ok(l) => l,
        Err(e) => {
            r.problems
                .push(format!("{}: cannot list: {e}", dir.display()));
            return r;
        }
    };
    for name in &listing.compact {
        r.info.push(format!(
            "{}: leftover of an interrupted compaction (removed on open; the segment is \
             complete)",
            dir.join(name).display()
        ));
    }
    if listing.stat_tmp {
        r.info.push(format!(
            "{}: leftover of an interrupted write (removed on open)",
            dir.join(tmp_path(Path::new(STAT_FILE_NAME))).display()
        ));
    }
    for name in &listing.unknown {
        r.info.push(format!(
            "{}: unknown file (left alone)",
            dir.join(name).display()
        ));
    }
    for n in listing.orphan_acks() {
        let path = dir.join(acks_name(n));
        r.info.push(format!(
            "{}: ack log without a segment (removed on open)",
            path.display()
        ));
        if let Ok(len) = backend.open(&path, false).and_then(|f| f.len()) {
            r.bytes_on_disk += len;
        }
    }
    let active = listing.data.last().copied();
    let mut actual = StatTable::new();
    for &n in &listing.data {
        if let Some(counts) = check_segment(backend, dir, n, listing.acks.contains(&n), &mut r) {
            if Some(n) != active {
                if counts.valid == 0 {
                    r.info.push(format!(
                        "{}: sealed and fully settled (deleted on open)",
                        dir.join(data_name(n)).display()
                    ));
                } else if needs_compaction(counts) {
                    r.info.push(format!(
                        "{}: due for compaction ({} of {} records valid)",
                        dir.join(data_name(n)).display(),
                        counts.valid,
                        counts.total
                    ));
                }
            }
            actual.insert(n, counts);
        }
    }
    r.segments = listing.data.len() as u64;
    let stat_path = dir.join(STAT_FILE_NAME);
    match read_stat(backend, dir) {
        // A store that never held a record has neither segments nor `queue_stat`.
        Ok(None) if actual.is_empty() => {}
        Ok(None) => r.info.push(format!(
            "{}: missing (recounted on open, rewritten at the next clean shutdown)",
            stat_path.display()
        )),
        Err(e) => r.info.push(format!(
            "{}: unusable: {e} (recounted on open, rewritten at the next clean shutdown)",
            stat_path.display()
        )),
        Ok(Some((table, len))) => {
            r.bytes_on_disk += len;
            if table != actual {
                let differences: Vec<String> = actual
                    .keys()
                    .chain(table.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|n| table.get(n) != actual.get(n))
                    .take(FINDINGS_LISTED_MAX)
                    .map(|n| {
                        let show = |c: Option<&SegmentCounts>| {
                            c.map_or("-".to_string(), |c| format!("{}/{}", c.total, c.valid))
                        };
                        format!(
                            "segment {n}: says {}, is {}",
                            show(table.get(n)),
                            show(actual.get(n))
                        )
                    })
                    .collect();
                r.info.push(format!(
                    "{}: lags behind the segments (normal after a crash, or follows from a damaged record reported above; recounted on open, rewritten at the next clean shutdown): \
                     total/valid {}",
                    stat_path.display(),
                    differences.join("; ")
                ));
            }
        }
    }
    r
}

/// Checks one segment and its ack log for [`check_dir`]; returns its counts unless the
/// segment could not be read.
fn check_segment(
    backend: &dyn Backend,
    dir: &Path,
    n: u64,
    has_acks: bool,
    r: &mut CheckReport,
) -> Option<SegmentCounts> {
    let data_path = dir.join(data_name(n));
    let acks_path = dir.join(acks_name(n));
    let mut settled: BTreeSet<u64> = BTreeSet::new();
    if has_acks {
        let scan = backend.open(&acks_path, false).and_then(|f| {
            ack_log::read_file(&*f, &mut |e| {
                if e.kind == AckKind::Settled {
                    settled.insert(e.id);
                }
            })
        });
        match scan {
            Err(e) => r
                .problems
                .push(format!("{}: cannot read: {e}", acks_path.display())),
            Ok(scan) => {
                r.ack_entries += scan.entries;
                r.bytes_on_disk += scan.len;
                if scan.bad_entries > 0 {
                    r.problems.push(format!(
                        "{}: {} damaged entries (first at offset {}); their acks or \
                         deliveries are lost",
                        acks_path.display(),
                        scan.bad_entries,
                        scan.first_bad_offset.unwrap_or(0)
                    ));
                }
                if scan.tail_bytes() > 0 {
                    r.info.push(format!(
                        "{}: torn tail of {} bytes at offset {} (truncated on open)",
                        acks_path.display(),
                        scan.tail_bytes(),
                        scan.valid_len
                    ));
                }
            }
        }
    } else {
        r.info.push(format!(
            "{}: missing (created empty on open)",
            acks_path.display()
        ));
    }
    let mut counts = SegmentCounts::default();
    let scan = backend.open(&data_path, false).and_then(|f| {
        record::scan_file(&*f, &mut |_, rec| {
            counts.total += 1;
            if !settled.contains(&rec.id) {
                counts.valid += 1;
            }
        })
    });
    let scan = match scan {
        Ok(s) => s,
        Err(e) => {
            r.problems
                .push(format!("{}: cannot read: {e}", data_path.display()));
            return None;
        }
    };
    r.bytes_on_disk += scan.len;
    r.records_total += counts.total;
    r.records_valid += counts.valid;
    if let Some((offset, reason)) = &scan.unsupported {
        r.problems.push(format!(
            "{}: record at offset {offset}: {reason} (written by a newer RelayMQ?)",
            data_path.display()
        ));
    }
    let middle = scan.middle();
    for span in middle.iter().take(FINDINGS_LISTED_MAX) {
        r.problems.push(format!(
            "{}: damaged bytes {}..{} ({}); the records there are lost",
            data_path.display(),
            span.start,
            span.end,
            span.reason
        ));
    }
    if middle.len() > FINDINGS_LISTED_MAX {
        r.problems.push(format!(
            "{}: {} more damaged spans",
            data_path.display(),
            middle.len() - FINDINGS_LISTED_MAX
        ));
    }
    if let Some(tail) = scan.tail() {
        r.info.push(format!(
            "{}: torn tail of {} bytes at offset {} ({}; normal after a crash, truncated on \
             open)",
            data_path.display(),
            tail.end - tail.start,
            tail.start,
            tail.reason
        ));
    }
    Some(counts)
}
