//! Disk trouble (issue 3, part 8): a failed fsync is never treated as success — the
//! confirms waiting for it are nacked and the queue is taken out of service while the
//! others keep serving; a full disk refuses persistent publishes with a nack.
//!
//! Runs the broker core in-process over a file backend that fails on command.

use relaymq::broker::channel::Channel;
use relaymq::broker::{
    Broker, BrokerConfig, CancelReason, ClientSink, Message, QueueSpec, Session,
};
use relaymq::error::ReplyCode;
use relaymq::storage::durability::Durability;
use relaymq::storage::flusher::FsyncMode;
use relaymq::storage::{Backend, OsBackend, StorageFile, StoreConfig};
use relaymq::types::BasicProperties;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which files misbehave: those under `dir`, on sync (EIO) or on append (ENOSPC).
#[derive(Debug, Default)]
struct Faults {
    fail_sync_under: Option<PathBuf>,
    full_under: Option<PathBuf>,
}

#[derive(Debug, Clone, Default)]
struct FaultyBackend {
    faults: Arc<Mutex<Faults>>,
}

#[derive(Debug)]
struct FaultyFile {
    inner: Arc<dyn StorageFile>,
    faults: Arc<Mutex<Faults>>,
}

fn under(dir: &Option<PathBuf>, path: &Path) -> bool {
    dir.as_ref().is_some_and(|d| path.starts_with(d))
}

impl StorageFile for FaultyFile {
    fn append(&self, buf: &[u8]) -> io::Result<u64> {
        if under(&self.faults.lock().unwrap().full_under, self.inner.path()) {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.inner.append(buf)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn sync(&self) -> io::Result<()> {
        if under(
            &self.faults.lock().unwrap().fail_sync_under,
            self.inner.path(),
        ) {
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        self.inner.sync()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.inner.truncate(len)
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl Backend for FaultyBackend {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsBackend.create_dir_all(dir)
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let inner = OsBackend.open(path, create)?;
        Ok(Arc::new(FaultyFile {
            inner,
            faults: Arc::clone(&self.faults),
        }))
    }
    fn exists(&self, path: &Path) -> bool {
        OsBackend.exists(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        OsBackend.list_dir(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsBackend.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        OsBackend.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsBackend.remove_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsBackend.sync_dir(dir)
    }
}

/// Records the confirms a channel receives.
#[derive(Default)]
struct Confirms(Mutex<Vec<(u64, bool)>>);

impl ClientSink for Confirms {
    fn deliver(&self, _: u16, _: &str, _: u64, _: bool, _: &Message) {}
    fn cancel(&self, _: &Arc<Channel>, _: &str, _: CancelReason) {}
    fn basic_return(&self, _: u16, _: ReplyCode, _: &str, _: &Message) {}
    fn confirm(&self, _: u16, seq: u64, _multiple: bool, ack: bool) {
        self.0.lock().unwrap().push((seq, ack));
    }
    fn is_saturated(&self) -> bool {
        false
    }
    fn force_close(&self, _: ReplyCode, _: &str) {}
}

impl Confirms {
    /// Waits (≤ 10 s) for the confirm of `seq` and returns whether it was an ack.
    fn wait_for(&self, seq: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(&(_, ack)) = self.0.lock().unwrap().iter().find(|(s, _)| *s >= seq) {
                return ack;
            }
            assert!(Instant::now() < deadline, "no confirm for publish {seq}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    faults: Arc<Mutex<Faults>>,
    session: Session,
    confirms: Arc<Confirms>,
    seq: u64,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let backend = FaultyBackend::default();
        let faults = Arc::clone(&backend.faults);
        let (durability, defs) = Durability::open(
            &dir.path().join("data"),
            FsyncMode::Always,
            StoreConfig::default(),
            Arc::new(backend),
        )
        .unwrap();
        let broker = Arc::new(Broker::open(BrokerConfig::default(), durability, defs));
        let vhost = broker.vhost("/").unwrap();
        let confirms = Arc::new(Confirms::default());
        let mut session = Session::new(
            broker,
            1,
            vhost,
            confirms.clone(),
            16,
            Arc::new(AtomicUsize::new(0)),
        );
        session.open_channel(1).unwrap();
        session.confirm_select(1).unwrap();
        for name in ["bad", "good"] {
            let spec = QueueSpec {
                name: name.into(),
                durable: true,
                ..QueueSpec::default()
            };
            session.queue_declare(1, &spec).unwrap();
        }
        Fixture {
            _dir: dir,
            faults,
            session,
            confirms,
            seq: 0,
        }
    }

    fn queue_dir(&self, name: &str) -> PathBuf {
        let q = self.session.vhost().queue(name).unwrap();
        let id = q.storage_id.clone().unwrap();
        self.session.broker().durability().unwrap().queue_dir(&id)
    }

    /// Publishes one persistent message to `queue`; returns whether it was acked.
    fn publish(&mut self, queue: &str) -> bool {
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..BasicProperties::default()
        };
        self.session
            .basic_publish(1, "", queue, false, props.into_boxed(), b"payload".to_vec())
            .unwrap();
        self.session.flush_confirms(1);
        self.seq += 1;
        self.confirms.wait_for(self.seq)
    }
}

#[test]
fn a_failed_fsync_nacks_and_takes_only_that_queue_out_of_service() {
    let mut f = Fixture::new();
    assert!(f.publish("bad"), "healthy disk: acked after fsync");
    f.faults.lock().unwrap().fail_sync_under = Some(f.queue_dir("bad"));
    assert!(
        !f.publish("bad"),
        "the fsync failed: the confirm must be a nack"
    );
    // The disk "recovers", but the queue stays out of service: the data of the failed
    // epoch was never known to be safe.
    f.faults.lock().unwrap().fail_sync_under = None;
    assert!(
        !f.publish("bad"),
        "an out-of-service queue refuses persistent messages"
    );
    assert!(f.publish("good"), "the other queues keep serving");
    let rows = relaymq::broker::listing::queues(f.session.vhost());
    let failed = |name: &str| {
        rows.iter()
            .find(|r| r.get("name").and_then(|v| v.as_str()) == Some(name))
            .and_then(|r| r.get("storage_failed").cloned())
    };
    assert_eq!(failed("bad"), Some(relaymq::types::FieldValue::Bool(true)));
    assert_eq!(
        failed("good"),
        Some(relaymq::types::FieldValue::Bool(false))
    );
}

#[test]
fn a_full_disk_refuses_persistent_publishes_with_a_nack() {
    let mut f = Fixture::new();
    f.faults.lock().unwrap().full_under = Some(f.queue_dir("bad"));
    assert!(
        !f.publish("bad"),
        "no space: nacked, not silently kept in memory"
    );
    assert_eq!(
        f.session.vhost().queue("bad").unwrap().message_count(),
        0,
        "the refused message is not in the queue"
    );
    assert!(f.publish("good"));
}
