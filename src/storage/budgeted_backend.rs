//! A [`Backend`] whose every open file descriptor counts against a [`FileBudget`]: files,
//! directories opened to be synced or listed, temporary files. The server wraps the real
//! file system in it ([`crate::storage::OsBackend`]); tests wrap the simulated one to run
//! the power-loss workload with a handful of descriptors.

use crate::storage::file_budget::{FileBudget, Permit};
use crate::storage::{Backend, StorageFile};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `inner` with every descriptor it opens taken from `budget` first.
#[derive(Debug, Clone)]
pub struct BudgetedBackend {
    inner: Arc<dyn Backend>,
    budget: Arc<FileBudget>,
}

impl BudgetedBackend {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Backend>, budget: Arc<FileBudget>) -> BudgetedBackend {
        BudgetedBackend { inner, budget }
    }
}

/// A file of the inner backend holding its descriptor's permit until it is closed.
struct BudgetedFile {
    inner: Arc<dyn StorageFile>,
    _permit: Permit,
}

impl fmt::Debug for BudgetedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl StorageFile for BudgetedFile {
    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        self.inner.append(buf)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl Backend for BudgetedBackend {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let permit = self.budget.acquire()?;
        let inner = self.inner.open(path, create)?;
        Ok(Arc::new(BudgetedFile {
            inner,
            _permit: permit,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let _permit = self.budget.acquire()?;
        self.inner.list_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        // std's remove_dir_all holds the directory open while it walks it.
        let _permit = self.budget.acquire()?;
        self.inner.remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let _permit = self.budget.acquire()?;
        self.inner.sync_dir(dir)
    }

    fn file_budget(&self) -> Option<&Arc<FileBudget>> {
        Some(&self.budget)
    }
}
