//! (being written: trait signatures fixed, implementations land with the message store)
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file of the store.
#[allow(clippy::len_without_is_empty)]
pub trait StorageFile: Send + Sync + std::fmt::Debug {
    /// Appends bytes; returns their offset.
    fn append(&self, buf: &[u8]) -> io::Result<u64>;
    /// Exact read at an offset.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// fdatasync.
    fn sync(&self) -> io::Result<()>;
    /// Truncates.
    fn truncate(&self, len: u64) -> io::Result<()>;
    /// Its path.
    fn path(&self) -> &Path;
}

/// File-system access of the store.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// mkdir -p.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Opens for read + append.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Whether it exists.
    fn exists(&self, path: &Path) -> bool;
    /// Entries of a directory.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// rename.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// unlink.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// rm -r.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// fsync of a directory.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// tmp + fsync + rename + sync_dir.
    fn write_file_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
}

/// std::fs backend (lands with the message store).
#[derive(Debug)]
pub struct OsBackend;
