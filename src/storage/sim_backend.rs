//! A simulated disk for tests: an in-memory [`Backend`] that models power loss.
//!
//! It keeps everything in memory and models what a power cut does to a POSIX file system:
//! bytes written since a file's last `sync` may be lost or torn, and directory entries
//! (create, rename, remove) become durable only when their directory is synced. The store's
//! crash tests (`tests/heavy/store_power_loss.rs`) run against it; the rules it encodes are the
//! ones the store's protocols in `docs/storage.md` rely on. Built only for tests (the
//! `test-support` feature), never into the release binaries.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::backend::{lock, parent_dir, Backend, StorageFile};

/// An in-memory file system that simulates power loss, for tests.
///
/// The model (what the store's crash safety relies on, and no more):
///
/// - Every file keeps its *durable* bytes (as of its last [`StorageFile::sync`]) and its
///   current bytes. [`SimBackend::crash`] keeps the durable bytes and a random prefix of
///   what was appended since (a torn write); in one crash out of four per file the kept
///   part ends in zeros instead of the data (the size reached the disk, the data did not,
///   as on ext4 with `data=writeback`). A file truncated since its last sync comes back
///   either as its durable bytes or as the truncated bytes plus a torn part of what
///   followed.
/// - Directory entries (a file created, renamed or removed) become durable only when
///   [`Backend::sync_dir`] is called on their directory (or through
///   [`Backend::write_file_atomic`]); a crash reverts every other entry change. A file whose
///   entry is not durable is lost with its data, synced or not.
/// - Directories themselves are created and removed durably at once (a simplification:
///   the store never relies on a directory's own creation being undone).
///
/// After [`SimBackend::crash`] the same instance is used to "reopen"; handles opened
/// before the crash fail with an error, as the process that held them is gone.
/// [`SimBackend::fail_after`] makes the disk vanish after a given number of mutating
/// operations, so a test can crash in the middle of any multi-step protocol.
#[derive(Clone, Default)]
pub struct SimBackend {
    /// The whole simulated disk, shared with the file handles.
    state: Arc<Mutex<SimState>>,
}

impl fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("SimBackend")
            .field("generation", &st.generation)
            .field("files", &st.live.len())
            .field("durable_entries", &st.durable.len())
            .finish()
    }
}

/// One file's contents (an inode: it survives renames and outlives its name while open).
#[derive(Debug, Default)]
struct SimInode {
    /// Current contents, as reads see them.
    data: Vec<u8>,
    /// Contents as of the last sync.
    durable: Vec<u8>,
    /// Length of the prefix of `data` equal to `durable` (shrinks on truncate), in bytes.
    stable: usize,
}

impl SimInode {
    /// `fdatasync`.
    fn sync(&mut self) {
        if self.stable == self.durable.len() {
            self.durable.extend_from_slice(&self.data[self.stable..]);
        } else {
            self.durable = self.data.clone();
        }
        self.stable = self.data.len();
    }

    /// What a power cut leaves of this file.
    fn crash(&mut self, rng: &mut SplitMix64) {
        let truncated_since_sync = self.stable < self.durable.len();
        if truncated_since_sync && rng.below(2) == 0 {
            // The truncation never reached the disk.
            self.data = self.durable.clone();
        } else {
            let pending = self.data.len() - self.stable;
            let keep = rng.below(pending as u64 + 1) as usize;
            self.data.truncate(self.stable + keep);
            if keep > 0 && rng.below(4) == 0 {
                let zero_from = self.stable + rng.below(keep as u64) as usize;
                self.data[zero_from..].fill(0);
            }
        }
        self.durable = self.data.clone();
        self.stable = self.data.len();
    }
}

/// The simulated disk.
#[derive(Debug, Default)]
struct SimState {
    /// Incremented by each crash; handles of an older generation are dead.
    generation: u64,
    /// Next inode number to hand out.
    next_inode: u64,
    /// File contents by inode number (ordered, so a seeded crash is reproducible).
    inodes: BTreeMap<u64, SimInode>,
    /// Existing directories (always durable).
    dirs: BTreeSet<PathBuf>,
    /// Directory entries as the running process sees them: path → inode.
    live: BTreeMap<PathBuf, u64>,
    /// Directory entries as they are on the disk: path → inode.
    durable: BTreeMap<PathBuf, u64>,
    /// Mutating operations left before the disk "vanishes"; `None` = no fault planned.
    fault_budget: Option<u64>,
    /// Mutating operations done so far (for tests choosing a fault point).
    ops: u64,
}

impl SimState {
    /// Counts one mutating operation, or fails it when the planned fault has come.
    fn mutate(&mut self) -> io::Result<()> {
        match self.fault_budget {
            Some(0) => return Err(io::Error::other("simulated power loss: the disk is gone")),
            Some(n) => self.fault_budget = Some(n - 1),
            None => {}
        }
        self.ops += 1;
        Ok(())
    }

    /// Entries (from `map`) directly inside `dir`.
    fn children<'a>(
        map: &'a BTreeMap<PathBuf, u64>,
        dir: &'a Path,
    ) -> impl Iterator<Item = &'a PathBuf> + 'a {
        map.range::<Path, _>((std::ops::Bound::Excluded(dir), std::ops::Bound::Unbounded))
            .map(|(p, _)| p)
            .take_while(move |p| p.starts_with(dir))
            .filter(move |p| p.parent() == Some(dir))
    }

    fn require_dir(&self, dir: &Path) -> io::Result<()> {
        if self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(not_found(dir))
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

impl SimBackend {
    /// An empty disk holding only the root directory `/`.
    pub fn new() -> SimBackend {
        let sim = SimBackend::default();
        lock(&sim.state).dirs.insert(PathBuf::from("/"));
        sim
    }

    /// Simulates a power cut and a reboot (see the type's doc for what survives), using a
    /// random generator seeded with `rng_seed` so a failing seed can be replayed. Clears a
    /// fault planned with [`SimBackend::fail_after`]; handles opened before are dead.
    pub fn crash(&self, rng_seed: u64) {
        let mut st = lock(&self.state);
        let mut rng = SplitMix64(rng_seed);
        st.live = st.durable.clone();
        let referenced: BTreeSet<u64> = st.durable.values().copied().collect();
        st.inodes.retain(|id, _| referenced.contains(id));
        for inode in st.inodes.values_mut() {
            inode.crash(&mut rng);
        }
        st.generation += 1;
        st.fault_budget = None;
    }

    /// Lets `ops` more mutating operations (appends, truncates, syncs, creates, renames,
    /// removals) succeed and fails every one after them, as if the machine had lost power
    /// at that point; `None` cancels the plan. Reads keep working. Follow with
    /// [`SimBackend::crash`].
    pub fn fail_after(&self, ops: Option<u64>) {
        lock(&self.state).fault_budget = ops;
    }

    /// Mutating operations performed since the disk was created (failed ones excluded).
    pub fn ops(&self) -> u64 {
        lock(&self.state).ops
    }

    /// The current contents of the file at `path`, if it exists (for tests that tamper
    /// with or inspect files).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        let inode = st.live.get(path)?;
        st.inodes.get(inode).map(|i| i.data.clone())
    }

    /// Replaces the contents of the file at `path` and makes them durable at once (for
    /// tests that corrupt files).
    ///
    /// # Errors
    /// [`io::ErrorKind::NotFound`] when there is no such file.
    pub fn set_contents(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut st = lock(&self.state);
        let id = *st.live.get(path).ok_or_else(|| not_found(path))?;
        let inode = st.inodes.entry(id).or_default();
        inode.data = bytes.to_vec();
        inode.durable = bytes.to_vec();
        inode.stable = bytes.len();
        Ok(())
    }
}

/// A handle on a [`SimBackend`] file.
#[derive(Debug)]
struct SimFile {
    /// The disk.
    state: Arc<Mutex<SimState>>,
    /// The file's inode.
    inode: u64,
    /// Generation the handle was opened in.
    generation: u64,
    /// Path it was opened at.
    path: PathBuf,
}

impl SimFile {
    fn with<R>(
        &self,
        mutating: bool,
        f: impl FnOnce(&mut SimInode) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut st = lock(&self.state);
        if st.generation != self.generation {
            return Err(io::Error::other(
                "stale handle: the simulated machine crashed since it was opened",
            ));
        }
        if mutating {
            st.mutate()?;
        }
        let inode = st
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| not_found(&self.path))?;
        f(inode)
    }
}

impl StorageFile for SimFile {
    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        self.with(true, |i| {
            let at = i.data.len() as u64;
            i.data.extend_from_slice(buf);
            Ok(at)
        })
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with(false, |i| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            match start.checked_add(buf.len()) {
                Some(end) if end <= i.data.len() => {
                    buf.copy_from_slice(&i.data[start..end]);
                    Ok(())
                }
                _ => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past the end of the file",
                )),
            }
        })
    }

    fn len(&self) -> io::Result<u64> {
        self.with(false, |i| Ok(i.data.len() as u64))
    }

    fn sync(&self) -> io::Result<()> {
        self.with(true, |i| {
            i.sync();
            Ok(())
        })
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.with(true, |i| {
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len < i.data.len() {
                i.data.truncate(len);
            } else {
                i.data.resize(len, 0);
            }
            i.stable = i.stable.min(len);
            Ok(())
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Backend for SimBackend {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty() && !st.dirs.contains(*a))
            .map(Path::to_path_buf)
            .collect();
        if missing.iter().any(|d| st.live.contains_key(d)) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: a file is in the way", dir.display()),
            ));
        }
        if !missing.is_empty() {
            st.mutate()?;
        }
        st.dirs.extend(missing);
        Ok(())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut st = lock(&self.state);
        st.require_dir(parent_dir(path))?;
        if st.dirs.contains(path) {
            return Err(io::Error::other(format!(
                "{}: is a directory",
                path.display()
            )));
        }
        let inode = match st.live.get(path) {
            Some(&inode) => inode,
            None if create => {
                st.mutate()?;
                let inode = st.next_inode;
                st.next_inode += 1;
                st.inodes.insert(inode, SimInode::default());
                st.live.insert(path.to_path_buf(), inode);
                inode
            }
            None => return Err(not_found(path)),
        };
        Ok(Arc::new(SimFile {
            state: Arc::clone(&self.state),
            inode,
            generation: st.generation,
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let st = lock(&self.state);
        st.live.contains_key(path) || st.dirs.contains(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let st = lock(&self.state);
        st.require_dir(dir)?;
        let mut names: Vec<PathBuf> = SimState::children(&st.live, dir)
            .chain(
                st.dirs
                    .iter()
                    .filter(|d| d.parent() == Some(dir) && d.as_path() != dir),
            )
            .filter_map(|p| p.file_name().map(PathBuf::from))
            .collect();
        names.sort();
        Ok(names)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.require_dir(parent_dir(to))?;
        if !st.live.contains_key(from) {
            return Err(not_found(from));
        }
        st.mutate()?;
        if let Some(inode) = st.live.remove(from) {
            st.live.insert(to.to_path_buf(), inode);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if !st.live.contains_key(path) {
            return Err(not_found(path));
        }
        st.mutate()?;
        st.live.remove(path);
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.require_dir(dir)?;
        st.mutate()?;
        st.dirs.retain(|d| !d.starts_with(dir));
        st.live.retain(|p, _| !p.starts_with(dir));
        st.durable.retain(|p, _| !p.starts_with(dir));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.require_dir(dir)?;
        st.mutate()?;
        let paths: BTreeSet<PathBuf> = SimState::children(&st.live, dir)
            .chain(SimState::children(&st.durable, dir))
            .cloned()
            .collect();
        for p in paths {
            match st.live.get(&p).copied() {
                Some(inode) => st.durable.insert(p, inode),
                None => st.durable.remove(&p),
            };
        }
        Ok(())
    }
}

/// A small seeded random generator (SplitMix64), so crashes replay from their seed
/// without a dependency.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn sim_synced_bytes_survive_and_pending_bytes_are_torn() {
        for seed in 0..50 {
            let sim = SimBackend::new();
            sim.create_dir_all(Path::new("/d")).unwrap();
            let f = sim.open(Path::new("/d/f"), true).unwrap();
            sim.sync_dir(Path::new("/d")).unwrap();
            f.append(b"durable").unwrap();
            f.sync().unwrap();
            f.append(b"pending").unwrap();
            sim.crash(seed);
            assert!(f.len().is_err(), "old handles are dead");
            let data = sim.contents(Path::new("/d/f")).unwrap();
            assert!(data.len() >= 7 && data.len() <= 14, "{data:?}");
            assert_eq!(&data[..7], b"durable");
            for (i, &b) in data[7..].iter().enumerate() {
                assert!(b == b"pending"[i] || b == 0);
            }
        }
    }

    #[test]
    fn sim_entries_need_a_directory_sync() {
        let sim = SimBackend::new();
        sim.create_dir_all(Path::new("/d")).unwrap();
        let f = sim.open(Path::new("/d/new"), true).unwrap();
        f.append(b"x").unwrap();
        f.sync().unwrap();
        let g = sim.open(Path::new("/d/old"), true).unwrap();
        g.append(b"old").unwrap();
        g.sync().unwrap();
        sim.sync_dir(Path::new("/d")).unwrap();
        let h = sim.open(Path::new("/d/lost"), true).unwrap();
        h.append(b"y").unwrap();
        h.sync().unwrap();
        sim.rename(Path::new("/d/new"), Path::new("/d/old"))
            .unwrap();
        sim.crash(1);
        assert_eq!(sim.contents(Path::new("/d/old")).unwrap(), b"old");
        assert_eq!(sim.contents(Path::new("/d/new")).unwrap(), b"x");
        assert!(!sim.exists(Path::new("/d/lost")));
        // The same rename, made durable, sticks.
        sim.rename(Path::new("/d/new"), Path::new("/d/old"))
            .unwrap();
        sim.sync_dir(Path::new("/d")).unwrap();
        sim.crash(2);
        assert_eq!(sim.contents(Path::new("/d/old")).unwrap(), b"x");
        assert_eq!(sim.list_dir(Path::new("/d")).unwrap(), vec![p("old")]);
    }

    #[test]
    fn sim_write_file_atomic_is_all_or_nothing() {
        for budget in 0..8 {
            let sim = SimBackend::new();
            sim.create_dir_all(Path::new("/d")).unwrap();
            sim.write_file_atomic(Path::new("/d/s"), b"one").unwrap();
            sim.fail_after(Some(budget));
            let ok = sim.write_file_atomic(Path::new("/d/s"), b"two").is_ok();
            sim.crash(budget);
            let got = sim.contents(Path::new("/d/s")).unwrap();
            assert!(got == b"one" || got == b"two", "{got:?}");
            if ok {
                assert_eq!(got, b"two");
            }
        }
    }

    #[test]
    fn sim_fault_stops_every_mutation() {
        let sim = SimBackend::new();
        sim.create_dir_all(Path::new("/d")).unwrap();
        let f = sim.open(Path::new("/d/f"), true).unwrap();
        sim.fail_after(Some(1));
        f.append(b"a").unwrap();
        assert!(f.append(b"b").is_err());
        assert!(f.sync().is_err());
        assert!(sim.sync_dir(Path::new("/d")).is_err());
        let mut one = [0u8; 1];
        f.read_at(0, &mut one).unwrap();
        sim.crash(0);
        assert!(!sim.exists(Path::new("/d/f")));
        sim.open(Path::new("/d/f2"), true).unwrap();
    }
}
