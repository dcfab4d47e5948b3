//! Errors of the storage layer.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A storage failure, naming the file involved.
#[derive(Debug)]
pub enum StorageError {
    /// An I/O call failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// Data on disk is not what the format says (beyond what recovery repairs).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `meta.db` failed.
    Meta(String),
    /// The data directory is locked by another process.
    Locked {
        /// The locked directory.
        dir: PathBuf,
        /// The holder's process id, as its `LOCK` file tells it (`None`: unreadable).
        holder_pid: Option<u32>,
    },
    /// The store was taken out of service after an earlier failure (e.g. a failed fsync).
    Failed(String),
}

impl StorageError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> StorageError {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether the error is running out of file descriptors (the store's budget, or the
    /// OS's `EMFILE`/`ENFILE`): nothing was changed on disk, and a later attempt may
    /// succeed ([`crate::storage::file_budget::is_out_of_files`]).
    pub fn is_out_of_files(&self) -> bool {
        matches!(self, StorageError::Io { source, .. } if crate::storage::file_budget::is_out_of_files(source))
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            StorageError::Corrupt { path, reason } => write!(f, "{}: {reason}", path.display()),
            StorageError::Meta(m) => write!(f, "meta.db: {m}"),
            StorageError::Locked { dir, holder_pid } => {
                write!(
                    f,
                    "data directory {} is in use by another relaymq-server",
                    dir.display()
                )?;
                match holder_pid {
                    Some(pid) => write!(f, " (pid {pid})"),
                    None => Ok(()),
                }
            }
            StorageError::Failed(m) => write!(f, "store out of service: {m}"),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StorageError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
