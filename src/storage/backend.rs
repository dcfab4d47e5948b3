//! File access of the message store, behind two traits so tests can simulate power loss.
//!
//! [`OsBackend`] is the real thing (`std::fs`, `pwrite`/`pread`, `fdatasync`). The
//! simulated disk of the crash tests, `SimBackend` (in `storage/sim_backend.rs`, built
//! only with the `test-support` feature), implements the same traits.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One open file of the store: appended to at its end, read anywhere.
///
/// Implementations are thread-safe: the flusher calls [`StorageFile::sync`] on handles while
/// the queue that owns them goes on appending.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Appends `buf` at the end of the file; returns the offset it starts at, in bytes.
    ///
    /// # Errors
    /// The OS's error. A failed append may have written part of `buf`
    /// ([`OsBackend`] cuts the file back to its previous length when it can).
    fn append(&self, buf: &[u8]) -> io::Result<u64>;

    /// Fills `buf` with the bytes starting at `offset`.
    ///
    /// # Errors
    /// [`io::ErrorKind::UnexpectedEof`] when the file ends before `buf` is full; the OS's
    /// error otherwise.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Current length of the file, in bytes (appends not yet synced included).
    ///
    /// # Errors
    /// The OS's error.
    fn len(&self) -> io::Result<u64>;

    /// Whether the file is empty.
    ///
    /// # Errors
    /// As [`StorageFile::len`].
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Makes every byte appended so far durable (`fdatasync`).
    ///
    /// # Errors
    /// The OS's error. A failed sync must not be retried as if the data were safe
    /// (docs/storage.md): the caller takes the store out of service.
    fn sync(&self) -> io::Result<()>;

    /// Cuts the file to `len` bytes (used to drop a torn tail).
    ///
    /// # Errors
    /// The OS's error.
    fn truncate(&self, len: u64) -> io::Result<()>;

    /// The path the file was opened at.
    fn path(&self) -> &Path;
}

/// The file system operations the store uses.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Creates `dir` and its missing parents.
    ///
    /// # Errors
    /// The OS's error.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Opens `path` for reading and appending, creating an empty file when `create` is set
    /// and the file does not exist.
    ///
    /// # Errors
    /// [`io::ErrorKind::NotFound`] when the file (or, with `create`, its directory) is
    /// missing; the OS's error otherwise.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;

    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;

    /// The names (final components only, not full paths) of the entries of `dir`, files
    /// and directories alike, not recursive, sorted.
    ///
    /// # Errors
    /// [`io::ErrorKind::NotFound`] when `dir` does not exist; the OS's error otherwise.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;

    /// Renames `from` to `to`, replacing `to` if it exists (atomic on POSIX; durable once
    /// the directory is synced).
    ///
    /// # Errors
    /// The OS's error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the file `path` (durable once the directory is synced).
    ///
    /// # Errors
    /// The OS's error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Removes `dir` and everything under it.
    ///
    /// # Errors
    /// The OS's error.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Makes the entries of `dir` (files created, renamed or removed in it) durable
    /// (`fsync` on the directory).
    ///
    /// # Errors
    /// The OS's error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Replaces the file `path` by `bytes` atomically and durably: writes `<path>.tmp`,
    /// syncs it, renames it over `path` and syncs the directory. After a crash `path` holds
    /// either its old or its new content, never a mix.
    ///
    /// # Errors
    /// The OS's error; `<path>.tmp` may be left behind (the store removes it at open).
    fn write_file_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let tmp = tmp_path(path);
        let file = self.open(&tmp, true)?;
        file.truncate(0)?;
        file.append(bytes)?;
        file.sync()?;
        drop(file);
        self.rename(&tmp, path)?;
        self.sync_dir(parent_dir(path))
    }

    /// The budget every descriptor this backend opens counts against, when there is one
    /// ([`crate::storage::BudgetedBackend`]); stores then keep their handles in a
    /// [`crate::storage::HandleCache`] the budget can reclaim from.
    fn file_budget(&self) -> Option<&Arc<crate::storage::FileBudget>> {
        None
    }
}

/// The temporary name [`Backend::write_file_atomic`] writes before renaming: `<path>.tmp`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(".tmp");
    PathBuf::from(s)
}

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Locks a mutex, ignoring poisoning: every critical section here leaves its data
/// consistent before any call that could panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------
// OsBackend

/// The real file system through `std::fs`.
///
/// Appends are positioned writes (`pwrite`) at an end offset kept under a mutex, so a
/// handle may be shared between threads; reads are `pread`; [`StorageFile::sync`] is
/// `fdatasync`; [`Backend::sync_dir`] opens the directory and `fsync`s it.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsBackend;

/// A file opened by [`OsBackend`].
#[derive(Debug)]
struct OsFile {
    /// The open file (read + write).
    file: File,
    /// The path it was opened at, for errors.
    path: PathBuf,
    /// Where the next append goes, in bytes; the lock also serialises appends.
    end: Mutex<u64>,
}

impl StorageFile for OsFile {
    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        let mut end = lock(&self.end);
        let at = *end;
        if let Err(e) = self.file.write_all_at(buf, at) {
            // Best effort: do not leave half a write behind for the next append to follow.
            let _ = self.file.set_len(at);
            return Err(e);
        }
        *end = at + buf.len() as u64;
        Ok(at)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(*lock(&self.end))
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut end = lock(&self.end);
        self.file.set_len(len)?;
        *end = len;
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Backend for OsBackend {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        Ok(Arc::new(OsFile {
            file,
            path: path.to_path_buf(),
            end: Mutex::new(len),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            names.push(PathBuf::from(entry?.file_name()));
        }
        names.sort();
        Ok(names)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn os_backend_appends_reads_truncates_and_lists() {
        let tmp = tempfile::tempdir().unwrap();
        let b = OsBackend;
        let dir = tmp.path().join("q");
        b.create_dir_all(&dir).unwrap();
        let f = b.open(&dir.join("a"), true).unwrap();
        assert_eq!(f.append(b"hello").unwrap(), 0);
        assert_eq!(f.append(b" world").unwrap(), 5);
        let mut buf = [0u8; 5];
        f.read_at(6, &mut buf).unwrap();
        assert_eq!(&buf, b"world");
        let err = f.read_at(8, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        f.sync().unwrap();
        f.truncate(5).unwrap();
        assert_eq!(f.len().unwrap(), 5);
        assert_eq!(f.append(b"!").unwrap(), 5);
        b.write_file_atomic(&dir.join("stat"), b"x").unwrap();
        b.sync_dir(&dir).unwrap();
        assert_eq!(b.list_dir(&dir).unwrap(), vec![p("a"), p("stat")]);
        assert!(b.open(&dir.join("missing"), false).is_err());
        let again = b.open(&dir.join("a"), false).unwrap();
        assert_eq!(again.len().unwrap(), 6);
    }
}
