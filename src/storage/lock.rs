//! The data directory's lock: `<data-dir>/LOCK`, held with `flock` (docs/storage.md) by
//! the running server so that two servers never share one directory.
//!
//! `flock` locks belong to an open file description, so the kernel releases the lock when
//! the holder's file is closed, including when the process dies: a crash never leaves a
//! stale lock behind, and the file's existence means nothing. The file holds the holder's
//! pid as text, for the operator: a refused server or `--check` names it in its message
//! ([`StorageError::Locked`]); nothing else reads it back.

use crate::storage::error::StorageError;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// File name of the lock inside the data directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Most bytes of a `LOCK` file read for the holder's pid (a pid and a newline need 11);
/// a longer file is not a pid.
pub const LOCK_FILE_BYTES_MAX: u64 = 32;

/// The holder's process id as `file` (an open `LOCK` file) tells it: the decimal number
/// on its first line, `None` when the file cannot be read, is empty (the holder is between
/// taking the lock and writing its pid) or holds something else.
pub fn holder_pid(file: &File) -> Option<u32> {
    let mut text = String::new();
    file.take(LOCK_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .ok()?;
    if text.len() as u64 > LOCK_FILE_BYTES_MAX {
        return None;
    }
    text.lines().next()?.trim().parse().ok()
}

/// [`StorageError::Locked`] for `dir`, naming the holder's pid from its lock `file` when
/// readable.
pub fn locked(dir: &Path, file: &File) -> StorageError {
    StorageError::Locked {
        dir: dir.to_path_buf(),
        holder_pid: holder_pid(file),
    }
}

/// Exclusive lock of a data directory (`<dir>/LOCK`, an exclusive `flock`); released when
/// dropped.
#[derive(Debug)]
pub struct DataDirLock {
    /// The open lock file: the lock lives as long as this descriptor.
    file: File,
    /// The locked directory, for messages.
    dir: PathBuf,
}

impl DataDirLock {
    /// Creates the directory if missing and takes the lock without waiting.
    ///
    /// # Errors
    /// [`StorageError::Locked`] (naming `dir`) when another holder has it — another process,
    /// or another `DataDirLock` of this process; [`StorageError::Io`] when the directory or
    /// the lock file cannot be created or written.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
        let path = dir.join(LOCK_FILE_NAME);
        // No truncate on open: a failed attempt must not touch the holder's pid.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        try_lock(&file, dir, &path)?;
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|e| StorageError::io(&path, e))?;
        Ok(DataDirLock {
            file,
            dir: dir.to_path_buf(),
        })
    }

    /// Whether another holder has the lock right now (for `--check`, which must refuse a
    /// live directory). Takes the lock and releases it at once when it is free. A missing
    /// directory or lock file means not locked; nothing is created.
    ///
    /// # Errors
    /// [`StorageError::Io`] when the lock file exists but cannot be opened or locked.
    pub fn is_locked(dir: &Path) -> Result<bool, StorageError> {
        let path = dir.join(LOCK_FILE_NAME);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        match try_lock(&file, dir, &path) {
            // Closing `file` releases the lock.
            Ok(()) => Ok(false),
            Err(StorageError::Locked { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DataDirLock {
    // `File::unlock` is stable since Rust 1.89, above the crate's declared rust-version.
    #[allow(
        clippy::incompatible_msrv,
        reason = "File::unlock is stable since 1.89"
    )]
    fn drop(&mut self) {
        // Closing the file releases the lock anyway; unlocking first makes the release
        // independent of other descriptors a child process may have inherited.
        let _ = self.file.unlock();
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `file`.
// `File::try_lock` is stable since Rust 1.89, above the crate's declared rust-version.
#[allow(
    clippy::incompatible_msrv,
    reason = "File::try_lock is stable since 1.89"
)]
fn try_lock(file: &File, dir: &Path, path: &Path) -> Result<(), StorageError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(locked(dir, file)),
        Err(TryLockError::Error(e)) => Err(StorageError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    /// Set in the child process of `lock_held_by_another_process`: the directory to lock.
    const CHILD_DIR_ENV: &str = "RELAYMQ_TEST_LOCK_CHILD_DIR";

    #[test]
    fn the_holder_pid_is_read_only_from_a_pid_line() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(LOCK_FILE_NAME);
        for (text, want) in [
            ("4242\n", Some(4242)),
            ("4242", Some(4242)),
            ("", None),
            ("not a pid\n", None),
            ("12345678901234567890123456789012345\n", None),
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(holder_pid(&File::open(&path).unwrap()), want, "{text:?}");
        }
        let err = locked(tmp.path(), &File::open(&path).unwrap());
        assert_eq!(
            err.to_string(),
            format!(
                "data directory {} is in use by another relaymq-server",
                tmp.path().display()
            )
        );
        std::fs::write(&path, "4242\n").unwrap();
        let err = locked(tmp.path(), &File::open(&path).unwrap());
        assert!(
            err.to_string().ends_with("relaymq-server (pid 4242)"),
            "{err}"
        );
    }

    #[test]
    fn second_acquire_in_one_process_is_refused_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let first = DataDirLock::acquire(&dir).unwrap();
        assert!(dir.join(LOCK_FILE_NAME).is_file());
        assert_eq!(first.dir(), dir);
        match DataDirLock::acquire(&dir) {
            Err(StorageError::Locked { dir: p, holder_pid }) => {
                assert_eq!(p, dir);
                assert_eq!(holder_pid, Some(std::process::id()));
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(DataDirLock::is_locked(&dir).unwrap());
        drop(first);
        assert!(!DataDirLock::is_locked(&dir).unwrap());
        let again = DataDirLock::acquire(&dir).unwrap();
        let pid = std::fs::read_to_string(dir.join(LOCK_FILE_NAME)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        drop(again);
    }

    #[test]
    fn is_locked_on_a_missing_directory_is_false_and_creates_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("absent");
        assert!(!DataDirLock::is_locked(&dir).unwrap());
        assert!(!dir.exists());
    }

    #[test]
    fn is_locked_does_not_keep_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        drop(DataDirLock::acquire(tmp.path()).unwrap());
        assert!(!DataDirLock::is_locked(tmp.path()).unwrap());
        assert!(!DataDirLock::is_locked(tmp.path()).unwrap());
        DataDirLock::acquire(tmp.path()).unwrap();
    }

    #[test]
    fn the_error_message_names_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let _held = DataDirLock::acquire(tmp.path()).unwrap();
        let err = DataDirLock::acquire(tmp.path()).unwrap_err();
        assert!(err.to_string().contains(&tmp.path().display().to_string()));
    }

    /// Not a test on its own: the child half of `lock_held_by_another_process`. Holds the
    /// lock of `$RELAYMQ_TEST_LOCK_CHILD_DIR`, says so on stdout, and keeps it until its
    /// stdin is closed.
    #[test]
    fn child_process_holding_the_lock() {
        let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
            return;
        };
        let _lock = DataDirLock::acquire(Path::new(&dir)).unwrap();
        println!("LOCKED");
        let mut line = String::new();
        let _ = io::stdin().read_line(&mut line);
    }

    #[test]
    fn lock_held_by_another_process() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "storage::lock::tests::child_process_holding_the_lock",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR_ENV, tmp.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Keep reading the child's stdout to the end: closing it early would fail the
        // harness's own output in the child.
        let mut lines = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok);
        assert!(
            lines.by_ref().any(|l| l.contains("LOCKED")),
            "child did not take the lock"
        );

        assert!(DataDirLock::is_locked(tmp.path()).unwrap());
        assert!(matches!(
            DataDirLock::acquire(tmp.path()),
            Err(StorageError::Locked { .. })
        ));

        drop(child.stdin.take()); // the child returns and exits, which releases the lock
        lines.for_each(drop);
        assert!(child.wait().unwrap().success());
        assert!(!DataDirLock::is_locked(tmp.path()).unwrap());
        DataDirLock::acquire(tmp.path()).unwrap();
    }
}
