//! `relaymq-server --check`: verifies a stopped data directory and reports what it finds,
//! without changing anything.
//!
//! [`check_data_dir`] does the work and returns a [`DataDirReport`]; the binary prints it
//! and maps it to an exit code (0 clean, 1 problems, 2 could not check). What is checked:
//!
//! 1. The directory exists and no running server holds it. The check holds a *shared*
//!    `flock` on `<data-dir>/LOCK` while it runs: a server holds the lock exclusively, so a
//!    live directory is refused ([`StorageError::Locked`]) and a server cannot start in
//!    the middle of a check. The `LOCK` file is neither created nor written.
//! 2. `meta.db`, opened read-only (no migration, no journal-mode change, nothing written):
//!    its schema version, `PRAGMA integrity_check` and `PRAGMA foreign_key_check`, that
//!    every queue id has the form of a directory name ([`is_valid_queue_id`]) and that
//!    every row's arguments decode (the server refuses to start otherwise).
//! 3. Every stored queue's directory `queues/<id>/`, with
//!    [`crate::storage::check_dir`] through a backend that refuses every write.
//!    A missing directory is a problem (its messages are lost; the next start creates it
//!    empty).
//! 4. Entries of `queues/` that `meta.db` does not know: orphans, left by a crash between
//!    a queue's deletion and its files' removal (or between a declare's files and its
//!    commit). The next start removes them, so they are info, not problems.
//!
//! The report keeps two kinds of findings apart, as [`CheckReport`] does: *problems* (data
//! lost or not understood; the exit code is 1) and *info* (what the next start repairs as
//! a matter of course: torn tails after a crash, a lagging `queue_stat`, orphans).
//!
//! A damaged record in the middle of a segment stays a problem after a start has skipped
//! it: records are never rewritten in place, so the damaged bytes stay in the file (and
//! the record stays lost) until the segment is deleted, which happens once every other
//! record of it is acked, or compacted. A torn tail, by contrast, is truncated by the
//! start and no longer reported.

mod queue_dir;

use crate::storage::backend::{Backend, StorageFile};
use crate::storage::durability::{META_DB, QUEUES_DIR};
use crate::storage::error::StorageError;
use crate::storage::lock::LOCK_FILE_NAME;
use crate::storage::meta::{is_valid_queue_id, read_schema_version, SCHEMA_VERSION};
use crate::types::codec::Reader;
use crate::types::field_table::decode_table;
pub use queue_dir::{check_dir, CheckReport};
use rusqlite::{Connection, OpenFlags};
use std::collections::HashSet;
use std::fmt;
use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Findings of one kind listed one by one for `meta.db` before they are summarised.
const META_FINDINGS_MAX: usize = 20;

/// How long a `meta.db` statement waits for a lock held by another reader.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// What [`check_data_dir`] found in one stored queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueCheck {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its id in `meta.db` (the name of its directory when valid).
    pub id: String,
    /// What its directory holds (a problem when the directory is missing or the id is
    /// malformed; nothing was read then).
    pub report: CheckReport,
}

/// What [`check_data_dir`] found in a data directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataDirReport {
    /// The directory checked.
    pub dir: PathBuf,
    /// Schema version of `meta.db` (0: empty, created at the next start).
    pub schema_version: u32,
    /// Problems outside the queues' directories (`meta.db`).
    pub problems: Vec<String>,
    /// Info outside the queues' directories (orphans, unknown entries, an empty
    /// `meta.db`).
    pub info: Vec<String>,
    /// Every queue stored in `meta.db`, sorted by (vhost, name).
    pub queues: Vec<QueueCheck>,
}

impl DataDirReport {
    /// Whether no problem was found anywhere (info does not count).
    pub fn is_ok(&self) -> bool {
        self.problem_count() == 0
    }

    /// Problems found, in `meta.db` and in every queue.
    pub fn problem_count(&self) -> usize {
        self.problems.len()
            + self
                .queues
                .iter()
                .map(|q| q.report.problems.len())
                .sum::<usize>()
    }

    /// Info findings, in `meta.db` and in every queue.
    pub fn info_count(&self) -> usize {
        self.info.len()
            + self
                .queues
                .iter()
                .map(|q| q.report.info.len())
                .sum::<usize>()
    }

    /// Valid (unacked) messages of every queue.
    pub fn valid_messages(&self) -> u64 {
        self.queues.iter().map(|q| q.report.records_valid).sum()
    }

    /// Bytes of every queue's files.
    pub fn bytes_on_disk(&self) -> u64 {
        self.queues.iter().map(|q| q.report.bytes_on_disk).sum()
    }
}

impl fmt::Display for DataDirReport {
    /// One line per queue (vhost, name, id, valid messages, bytes) followed by its
    /// findings, then the data directory's findings, then a summary line ending in `ok` or
    /// `PROBLEMS`. Names are quoted and escaped, so a line never breaks inside one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "data directory {}", self.dir.display())?;
        writeln!(f, "meta.db: schema version {}", self.schema_version)?;
        for q in &self.queues {
            let r = &q.report;
            writeln!(
                f,
                "queue {:?} in vhost {:?} id {}: {} valid messages ({} records, {} segments), \
                 {} bytes on disk: {}",
                q.name,
                q.vhost,
                q.id,
                r.records_valid,
                r.records_total,
                r.segments,
                r.bytes_on_disk,
                if r.is_ok() { "ok" } else { "PROBLEMS" }
            )?;
            for p in &r.problems {
                writeln!(f, "  problem: {p}")?;
            }
            for i in &r.info {
                writeln!(f, "  info: {i}")?;
            }
        }
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        for i in &self.info {
            writeln!(f, "info: {i}")?;
        }
        write!(
            f,
            "summary: {} queues, {} valid messages, {} bytes on disk; {} problems, {} info: {}",
            self.queues.len(),
            self.valid_messages(),
            self.bytes_on_disk(),
            self.problem_count(),
            self.info_count(),
            if self.is_ok() { "ok" } else { "PROBLEMS" }
        )
    }
}

/// Verifies the stopped data directory `dir` without changing anything (see the module
/// documentation for what is checked).
///
/// # Errors
/// The directory could not be checked: [`StorageError::Locked`] when a running server
/// holds it; [`StorageError::Io`] when it is missing, not a directory, or its lock file
/// cannot be opened; [`StorageError::Meta`] when `meta.db` is missing, cannot be read, is
/// not a RelayMQ definitions store or has a newer schema than this build knows.
pub fn check_data_dir(dir: &Path) -> Result<DataDirReport, StorageError> {
    let meta = std::fs::metadata(dir).map_err(|e| StorageError::io(dir, e))?;
    if !meta.is_dir() {
        return Err(StorageError::io(
            dir,
            io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
        ));
    }
    let _lock = SharedLock::take(dir)?;
    let mut report = DataDirReport {
        dir: dir.to_path_buf(),
        ..DataDirReport::default()
    };

    let meta_path = dir.join(META_DB);
    if !meta_path.is_file() {
        return Err(StorageError::Meta(format!(
            "{}: missing; not a RelayMQ data directory (or no server ever started in it)",
            meta_path.display()
        )));
    }
    let meta = ReadOnlyMeta::open(&meta_path)?;
    report.schema_version = meta.schema_version()?;
    let (rows, delayed) = if report.schema_version == 0 {
        report.info.push(format!(
            "{}: empty (the schema is created at the next start)",
            meta_path.display()
        ));
        (Vec::new(), Vec::new())
    } else {
        report.problems.extend(meta.integrity()?);
        report.problems.extend(meta.undecodable_arguments()?);
        (meta.queues()?, meta.delayed_exchanges()?)
    };

    let queues_dir = dir.join(QUEUES_DIR);
    let backend = ReadOnlyBackend;
    let mut known = HashSet::new();
    for (vhost, name, id) in rows {
        let mut check = QueueCheck {
            vhost,
            name,
            id: id.clone(),
            report: CheckReport::default(),
        };
        if !is_valid_queue_id(&id) {
            check.report.problems.push(format!(
                "{}: queue id {id:?} is not 32 lowercase hex chars (the server refuses to \
                 start)",
                meta_path.display()
            ));
        } else {
            known.insert(id.clone());
            let qdir = queues_dir.join(&id);
            match std::fs::symlink_metadata(&qdir) {
                Ok(m) if m.is_dir() => check.report = check_dir(&backend, &qdir),
                Ok(_) => check.report.problems.push(format!(
                    "{}: not a directory (the queue cannot be recovered)",
                    qdir.display()
                )),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    check.report.problems.push(format!(
                        "{}: missing; the queue's persistent messages are lost (created \
                         empty at the next start)",
                        qdir.display()
                    ))
                }
                Err(e) => check
                    .report
                    .problems
                    .push(format!("{}: cannot read: {e}", qdir.display())),
            }
        }
        report.queues.push(check);
    }
    // A durable delayed-message exchange's held messages: a store like a queue's, listed
    // under the exchange's name (created empty at the next start when missing).
    for (vhost, name) in delayed {
        let id = crate::storage::delayed_store_id(&vhost, &name);
        known.insert(id.clone());
        let qdir = queues_dir.join(&id);
        if qdir.is_dir() {
            report.queues.push(QueueCheck {
                vhost,
                name: format!("{name} (x-delayed-message exchange)"),
                report: check_dir(&backend, &qdir),
                id,
            });
        }
    }

    match backend.list_dir(&queues_dir) {
        Ok(entries) => {
            for entry in entries {
                // As the start does: an entry named by a stored id is the queue's (one
                // that is not a directory is reported with its queue above).
                if !entry.to_str().is_some_and(|n| known.contains(n)) {
                    report.info.push(format!(
                        "{}: orphan directory, removed at the next start (no queue in meta.db \
                         owns it)",
                        queues_dir.join(&entry).display()
                    ));
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if report.queues.is_empty() {
                report.info.push(format!(
                    "{}: missing (created at the next start)",
                    queues_dir.display()
                ));
            }
            // Otherwise every queue already reports its directory as missing.
        }
        Err(e) => report
            .problems
            .push(format!("{}: cannot list: {e}", queues_dir.display())),
    }

    let expected = [
        LOCK_FILE_NAME.to_string(),
        META_DB.to_string(),
        format!("{META_DB}-wal"),
        format!("{META_DB}-shm"),
        QUEUES_DIR.to_string(),
    ];
    match backend.list_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                if !entry
                    .to_str()
                    .is_some_and(|n| expected.iter().any(|e| e == n))
                {
                    report.info.push(format!(
                        "{}: unknown entry (left alone)",
                        dir.join(&entry).display()
                    ));
                }
            }
        }
        Err(e) => report
            .problems
            .push(format!("{}: cannot list: {e}", dir.display())),
    }
    Ok(report)
}

/// A shared `flock` on `<data-dir>/LOCK`, held while the check runs; released when
/// dropped (the file is closed). No lock when the file does not exist: nothing is
/// created.
#[derive(Debug)]
struct SharedLock {
    _file: Option<File>,
}

impl SharedLock {
    // `File::try_lock_shared` is stable since Rust 1.89, above what clippy assumes for the
    // crate (see `lock.rs`).
    #[allow(
        clippy::incompatible_msrv,
        reason = "File::try_lock_shared is stable since 1.89"
    )]
    fn take(dir: &Path) -> Result<SharedLock, StorageError> {
        let path = dir.join(LOCK_FILE_NAME);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SharedLock { _file: None }),
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(SharedLock { _file: Some(file) }),
            Err(TryLockError::WouldBlock) => Err(crate::storage::lock::locked(dir, &file)),
            Err(TryLockError::Error(e)) => Err(StorageError::io(&path, e)),
        }
    }
}

/// A read-only connection to `meta.db`.
struct ReadOnlyMeta {
    conn: Connection,
    path: PathBuf,
}

impl ReadOnlyMeta {
    /// Opens `path` read-only: no schema migrated, no pragma written, no file created.
    ///
    /// Without a `-wal` file (the last server stopped cleanly and SQLite checkpointed and
    /// removed it) the file is opened `immutable`: a read-only connection to a WAL
    /// database would otherwise create `-wal` and `-shm` files and leave them behind.
    /// With one (the last server crashed), its committed transactions are part of the
    /// database, so the file is opened read-only through the WAL; SQLite may then rebuild
    /// the `-shm` index, which is derived from the WAL and holds no data of its own.
    fn open(path: &Path) -> Result<ReadOnlyMeta, StorageError> {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let opened = if Path::new(&wal).exists() {
            Connection::open_with_flags(path, flags)
        } else {
            Connection::open_with_flags(
                format!("file:{}?immutable=1", uri_path(path)),
                flags | OpenFlags::SQLITE_OPEN_URI,
            )
        };
        let conn =
            opened.map_err(|e| StorageError::Meta(format!("open {}: {e}", path.display())))?;
        let meta = ReadOnlyMeta {
            conn,
            path: path.to_path_buf(),
        };
        meta.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(meta.err("configure"))?;
        Ok(meta)
    }

    fn err(&self, what: &'static str) -> impl Fn(rusqlite::Error) -> StorageError + '_ {
        move |e| StorageError::Meta(format!("{what} {}: {e}", self.path.display()))
    }

    /// The schema version; 0 for an empty file. Refuses a file that is not a RelayMQ
    /// store or is newer than this build.
    fn schema_version(&self) -> Result<u32, StorageError> {
        let v = read_schema_version(&self.conn, &self.path)?;
        if v > SCHEMA_VERSION {
            return Err(StorageError::Meta(format!(
                "{} has schema version {v}, this relaymq-server supports up to \
                 {SCHEMA_VERSION}",
                self.path.display()
            )));
        }
        Ok(v)
    }

    /// What `PRAGMA integrity_check` and `PRAGMA foreign_key_check` find, as problems.
    fn integrity(&self) -> Result<Vec<String>, StorageError> {
        let err = self.err("integrity check of");
        let mut problems: Vec<String> = query_all(&self.conn, "PRAGMA integrity_check", |r| {
            r.get::<_, String>(0)
        })
        .map_err(&err)?
        .into_iter()
        .filter(|l| l != "ok")
        .map(|l| format!("{}: integrity check: {l}", self.path.display()))
        .collect();
        let orphans = query_all(&self.conn, "PRAGMA foreign_key_check", |r| {
            Ok(format!(
                "{}: foreign key violation: a row of {} refers to a missing row of {}",
                self.path.display(),
                r.get::<_, String>(0)?,
                r.get::<_, String>(2)?
            ))
        })
        .map_err(&err)?;
        problems.extend(orphans);
        Ok(summarise(problems, &self.path))
    }

    /// Rows whose arguments blob does not decode (the server's `load` refuses them).
    fn undecodable_arguments(&self) -> Result<Vec<String>, StorageError> {
        let err = self.err("reading");
        let mut problems = Vec::new();
        for (table, key) in [
            ("exchanges", "vhost, name"),
            ("queues", "vhost, name"),
            ("bindings", "vhost, source, destination, routing_key"),
        ] {
            let sql = format!("SELECT {key}, arguments FROM {table} ORDER BY {key}");
            let columns = key.split(", ").count();
            let rows = query_all(&self.conn, &sql, |r| {
                let mut names = Vec::with_capacity(columns);
                for i in 0..columns {
                    names.push(format!("{:?}", r.get::<_, String>(i)?));
                }
                Ok((names.join(", "), r.get::<_, Vec<u8>>(columns)?))
            })
            .map_err(&err)?;
            for (row, blob) in rows {
                let mut reader = Reader::new(&blob);
                let why = match decode_table(&mut reader) {
                    Ok(_) if reader.is_empty() => continue,
                    Ok(_) => format!("{} trailing bytes", reader.remaining()),
                    Err(e) => e.to_string(),
                };
                problems.push(format!(
                    "{}: {table} row ({key} = {row}): arguments do not decode: {why} (the \
                     server refuses to start)",
                    self.path.display()
                ));
            }
        }
        Ok(summarise(problems, &self.path))
    }

    /// Every stored queue as (vhost, name, id), sorted by (vhost, name).
    /// (vhost, name) of every durable `x-delayed-message` exchange (its store's id is
    /// [`crate::storage::delayed_store_id`]).
    fn delayed_exchanges(&self) -> Result<Vec<(String, String)>, StorageError> {
        query_all(
            &self.conn,
            "SELECT vhost, name FROM exchanges WHERE kind = 'x-delayed-message' \
             ORDER BY vhost, name",
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(self.err("reading the exchanges of"))
    }

    fn queues(&self) -> Result<Vec<(String, String, String)>, StorageError> {
        query_all(
            &self.conn,
            "SELECT vhost, name, id FROM queues ORDER BY vhost, name",
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(self.err("reading the queues of"))
    }
}

/// `path` as the path of a `file:` URI: every byte but unreserved ones and `/`
/// percent-encoded (RFC 3986), so `?`, `#` and `%` in a directory name stay literal.
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Keeps the first [`META_FINDINGS_MAX`] findings and counts the rest.
fn summarise(mut findings: Vec<String>, path: &Path) -> Vec<String> {
    if findings.len() > META_FINDINGS_MAX {
        let more = findings.len() - META_FINDINGS_MAX;
        findings.truncate(META_FINDINGS_MAX);
        findings.push(format!("{}: {more} more findings", path.display()));
    }
    findings
}

/// Every row of a parameterless query.
fn query_all<T>(
    conn: &Connection,
    sql: &str,
    f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], f)?;
    rows.collect()
}

/// The real file system, read-only: files are opened for reading only and every
/// mutating operation fails, so a check cannot change a byte whatever `check_dir` does.
#[derive(Debug, Clone, Copy, Default)]
struct ReadOnlyBackend;

/// A file opened by [`ReadOnlyBackend`].
#[derive(Debug)]
struct ReadOnlyFile {
    file: File,
    path: PathBuf,
}

fn read_only(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: the check does not write", path.display()),
    )
}

impl StorageFile for ReadOnlyFile {
    fn append(&self, _buf: &[u8]) -> io::Result<u64> {
        Err(read_only(&self.path))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn sync(&self) -> io::Result<()> {
        Err(read_only(&self.path))
    }

    fn truncate(&self, _len: u64) -> io::Result<()> {
        Err(read_only(&self.path))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Backend for ReadOnlyBackend {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(dir))
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        if create && !path.exists() {
            return Err(read_only(path));
        }
        let file = File::open(path)?;
        Ok(Arc::new(ReadOnlyFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(PathBuf::from(entry?.file_name()));
        }
        names.sort();
        Ok(names)
    }

    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        Err(read_only(from))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(read_only(path))
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(dir))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::meta::{new_queue_id, MetaStore, QueueDef};
    use crate::storage::{OsBackend, QueueStore, StoreConfig};
    use crate::types::{BasicProperties, FieldTable};
    use std::collections::BTreeMap;

    /// Every file under `dir` with its length and CRC32 (directories as `None`).
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<(usize, u32)>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    out.insert(p.clone(), None);
                    stack.push(p);
                } else {
                    let bytes = std::fs::read(&p).unwrap();
                    out.insert(p.clone(), Some((bytes.len(), crc32fast::hash(&bytes))));
                }
            }
        }
        out
    }

    /// A data directory with one stored queue holding `messages` messages; returns the
    /// queue's id.
    fn data_dir(dir: &Path, messages: usize) -> String {
        data_dir_open(dir, messages).0
    }

    /// As [`data_dir`], also returning the still open `meta.db`.
    fn data_dir_open(dir: &Path, messages: usize) -> (String, MetaStore) {
        std::fs::create_dir_all(dir.join(QUEUES_DIR)).unwrap();
        let meta = MetaStore::open(&dir.join(META_DB)).unwrap();
        meta.put_vhost("/").unwrap();
        let id = new_queue_id();
        let (mut store, _, _) = QueueStore::open(
            Arc::new(OsBackend),
            dir.join(QUEUES_DIR).join(&id),
            StoreConfig::default(),
        )
        .unwrap();
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..BasicProperties::default()
        };
        for i in 0..messages {
            let body = format!("m{i}");
            store
                .append(&crate::storage::MessageData {
                    timestamp_ms: 1,
                    exchange: "",
                    routing_key: "q",
                    properties: &props,
                    body: body.as_bytes(),
                })
                .unwrap();
        }
        store.write_stat().unwrap();
        meta.put_queue(&QueueDef {
            vhost: "/".into(),
            name: "../q\n".into(),
            id: id.clone(),
            auto_delete: false,
            arguments: FieldTable::new(),
            paused: false,
        })
        .unwrap();
        (id, meta)
    }

    #[test]
    fn a_clean_directory_is_ok_and_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let id = data_dir(&dir, 3);
        let before = snapshot(&dir);
        let report = check_data_dir(&dir).unwrap();
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.schema_version, SCHEMA_VERSION);
        assert_eq!(report.queues.len(), 1);
        assert_eq!(report.queues[0].id, id);
        assert_eq!(report.queues[0].name, "../q\n");
        assert_eq!(report.valid_messages(), 3);
        let text = report.to_string();
        assert!(text.contains(&format!(
            "queue \"../q\\n\" in vhost \"/\" id {id}: 3 valid"
        )));
        assert!(text.ends_with(": ok"), "{text}");
        assert_eq!(snapshot(&dir), before, "the check changed the directory");
    }

    #[test]
    fn a_directory_name_with_uri_characters_is_checked_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d?x=1#%41 é");
        data_dir(&dir, 2);
        let before = snapshot(&dir);
        let report = check_data_dir(&dir).unwrap();
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.valid_messages(), 2);
        assert_eq!(snapshot(&dir), before);
    }

    #[test]
    fn transactions_only_in_the_wal_are_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let (id, meta) = data_dir_open(&dir, 1);
        // A server killed with its connection open: the commits are only in the WAL.
        #[allow(
            clippy::mem_forget,
            reason = "a kill -9: the connection is never closed"
        )]
        std::mem::forget(meta);
        assert!(dir.join(format!("{META_DB}-wal")).exists());
        let before = snapshot(&dir);
        let report = check_data_dir(&dir).unwrap();
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.queues.len(), 1);
        assert_eq!(report.queues[0].id, id);
        let shm = dir.join(format!("{META_DB}-shm"));
        let without_shm = |mut m: BTreeMap<PathBuf, Option<(usize, u32)>>| {
            m.remove(&shm);
            m
        };
        assert_eq!(without_shm(snapshot(&dir)), without_shm(before));
    }

    #[test]
    fn orphans_are_info_and_missing_queue_directories_are_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let id = data_dir(&dir, 1);
        let orphan = dir.join(QUEUES_DIR).join(new_queue_id());
        std::fs::create_dir(&orphan).unwrap();
        let report = check_data_dir(&dir).unwrap();
        assert!(report.is_ok(), "{report}");
        assert!(report
            .info
            .iter()
            .any(|i| i.contains("orphan directory") && i.contains(&orphan.display().to_string())));

        std::fs::remove_dir_all(dir.join(QUEUES_DIR).join(&id)).unwrap();
        let report = check_data_dir(&dir).unwrap();
        assert!(!report.is_ok());
        assert!(report.queues[0].report.problems[0].contains("missing"));
    }

    #[test]
    fn a_locked_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        data_dir(&dir, 0);
        let held = crate::storage::lock::DataDirLock::acquire(&dir).unwrap();
        let err = check_data_dir(&dir).unwrap_err();
        assert!(matches!(err, StorageError::Locked { .. }), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("(pid {})", std::process::id())),
            "{err}"
        );
        drop(held);
        assert!(check_data_dir(&dir).unwrap().is_ok());
    }

    #[test]
    fn a_missing_directory_or_meta_db_cannot_be_checked() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(
            check_data_dir(&tmp.path().join("absent")),
            Err(StorageError::Io { .. })
        ));
        assert!(matches!(
            check_data_dir(tmp.path()),
            Err(StorageError::Meta(_))
        ));
        assert!(
            !tmp.path().join(META_DB).exists(),
            "the check created meta.db"
        );
        std::fs::write(tmp.path().join(META_DB), b"not a database at all, no").unwrap();
        assert!(matches!(
            check_data_dir(tmp.path()),
            Err(StorageError::Meta(_))
        ));
    }

    #[test]
    fn the_read_only_backend_refuses_every_write() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let b = ReadOnlyBackend;
        let f = b.open(&path, false).unwrap();
        let mut buf = [0u8; 3];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
        assert_eq!(f.len().unwrap(), 3);
        assert!(f.append(b"x").is_err());
        assert!(f.truncate(0).is_err());
        assert!(f.sync().is_err());
        assert!(b.open(&tmp.path().join("new"), true).is_err());
        assert!(!tmp.path().join("new").exists());
        assert!(b.remove_file(&path).is_err());
        assert!(b.rename(&path, &tmp.path().join("g")).is_err());
        assert!(b.create_dir_all(&tmp.path().join("d")).is_err());
        assert!(b.remove_dir_all(tmp.path()).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
    }
}
