//! Power loss at random moments (SimBackend): every message whose append was covered by a
//! successful flusher sync (a publisher confirm) and that was not settled survives, once,
//! in order; every settle covered by a sync stays settled. Segment rolls, deletions and
//! compactions happen inside the loop, and one test crashes in the middle of compactions on
//! purpose. Skipping the syncs ("--fsync never") must lose confirmed messages: proof that
//! the test observes the fsync.

use relaymq::storage::{
    check_dir, Backend, BudgetedBackend, FileBudget, MessageData, QueueStore, RecordRef,
    RecoveredMessage, SimBackend, StorageError, StoreConfig,
};
use relaymq::types::BasicProperties;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const DIR: &str = "/data/queues/q1";

/// SplitMix64: seeded, so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// The workload's shape: action percentages per step (the rest compacts when needed).
#[derive(Debug, Clone, Copy)]
struct Workload {
    segment_bytes: u64,
    steps: u64,
    /// Whether the "flusher" really syncs ("--fsync never" when false).
    fsync: bool,
    /// Whether the store holds writes in memory until the flusher takes its files
    /// (`--fsync always` in the server).
    buffered: bool,
    append_pct: u64,
    settle_recent_pct: u64,
    settle_oldest_pct: u64,
    deliver_pct: u64,
    flush_pct: u64,
    /// Store files open at once (a [`FileBudget`] over the simulated disk), 0 for none.
    budget_files: usize,
    /// Other stores on the same budget, writing and flushing between the steps: their
    /// opens close the tested store's handles (after an early fsync when dirty).
    neighbours: usize,
}

/// Small segments: many rolls and deletions.
const SMALL: Workload = Workload {
    segment_bytes: 1500,
    steps: 800,
    fsync: true,
    buffered: false,
    append_pct: 50,
    settle_recent_pct: 25,
    settle_oldest_pct: 8,
    deliver_pct: 5,
    flush_pct: 10,
    budget_files: 0,
    neighbours: 0,
};

/// Segments of ~2100 records: compaction (over 2000 records, under 50% valid).
const COMPACTING: Workload = Workload {
    segment_bytes: 110_000,
    steps: 10_000,
    fsync: true,
    buffered: false,
    append_pct: 48,
    settle_recent_pct: 28,
    settle_oldest_pct: 8,
    deliver_pct: 3,
    flush_pct: 7,
    budget_files: 0,
    neighbours: 0,
};

/// What the test knows about the messages, from the calls that succeeded.
#[derive(Debug, Default)]
struct Model {
    /// Every appended message's body, by record id.
    bodies: BTreeMap<u64, Vec<u8>>,
    /// Appended and not settled, to be settled soon (a consumer acking).
    short_lived: Vec<RecordRef>,
    /// Appended and not settled, kept long (a backlog), oldest first.
    long_lived: Vec<RecordRef>,
    appends_pending: Vec<u64>,
    confirmed: BTreeSet<u64>,
    settled: BTreeSet<u64>,
    settles_pending: Vec<u64>,
    settled_confirmed: BTreeSet<u64>,
    delivered: BTreeMap<u64, u32>,
    deliveries_pending: Vec<u64>,
    delivered_confirmed: BTreeMap<u64, u32>,
}

/// What one run saw and what recovery gave back.
#[derive(Debug, Default)]
struct Outcome {
    /// Confirmed, unsettled messages missing after recovery.
    lost: Vec<u64>,
    compactions: u64,
    deletions: u64,
    /// The fault struck inside `compact`.
    crashed_in_compaction: bool,
    /// Mutating ops (after open) at the start and end of the first compaction that did work.
    first_compaction_ops: Option<(u64, u64)>,
    /// Handles the file budget closed for another file (0 without a budget).
    evictions: u64,
    /// Of those, fsynced first.
    early_syncs: u64,
}

/// The simulated disk, behind a file budget when the workload has one.
fn backend(sim: &SimBackend, w: Workload) -> (Arc<dyn Backend>, Option<Arc<FileBudget>>) {
    if w.budget_files == 0 {
        return (Arc::new(sim.clone()), None);
    }
    let budget = FileBudget::new(w.budget_files);
    let backend = BudgetedBackend::new(Arc::new(sim.clone()), Arc::clone(&budget));
    (Arc::new(backend), Some(budget))
}

fn open(backend: &Arc<dyn Backend>, w: Workload) -> (QueueStore, Vec<RecoveredMessage>) {
    open_at(backend, w, DIR)
}

fn open_at(
    backend: &Arc<dyn Backend>,
    w: Workload,
    dir: &str,
) -> (QueueStore, Vec<RecoveredMessage>) {
    let (store, msgs, _report) = QueueStore::open(
        Arc::clone(backend),
        PathBuf::from(dir),
        StoreConfig {
            segment_bytes: w.segment_bytes,
        },
    )
    .expect("recovery never fails after a power loss");
    let mut store = store;
    store.set_write_buffering(w.buffered).unwrap();
    (store, msgs)
}

fn append(store: &mut QueueStore, body: &[u8]) -> Result<RecordRef, StorageError> {
    let props = BasicProperties::default();
    store.append(&MessageData {
        timestamp_ms: 7,
        exchange: "",
        routing_key: "q",
        properties: &props,
        body,
    })
}

/// A neighbour's turn: an append, now and then a flush (its files synced and dropped).
fn neighbour_step(neighbours: &mut [QueueStore], rng: &mut Rng) -> Result<(), StorageError> {
    if neighbours.is_empty() || rng.below(100) >= 40 {
        return Ok(());
    }
    let n = rng.below(neighbours.len() as u64) as usize;
    let store = &mut neighbours[n];
    append(store, b"neighbour")?;
    if rng.below(100) < 30 {
        for f in store.take_files_to_sync()? {
            f.sync().map_err(|e| StorageError::io(f.path(), e))?;
        }
    }
    Ok(())
}

/// One step of the workload; `Err` means the disk is gone.
#[allow(
    clippy::too_many_arguments,
    reason = "the workload's state, passed whole to each step"
)]
fn step(
    store: &mut QueueStore,
    neighbours: &mut [QueueStore],
    sim: &SimBackend,
    m: &mut Model,
    rng: &mut Rng,
    w: Workload,
    out: &mut Outcome,
    base_ops: u64,
) -> Result<(), StorageError> {
    neighbour_step(neighbours, rng)?;
    let mut roll = rng.below(100);
    let mut pick = |pct: u64| {
        let hit = roll < pct;
        roll = roll.wrapping_sub(pct);
        hit
    };
    if pick(w.append_pct) {
        let body = format!("m{:06}", m.bodies.len()).into_bytes();
        let r = append(store, &body)?;
        m.bodies.insert(r.id, body);
        m.appends_pending.push(r.id);
        if rng.below(3) == 0 {
            m.long_lived.push(r);
        } else {
            m.short_lived.push(r);
        }
    } else if pick(w.settle_recent_pct) {
        if !m.short_lived.is_empty() {
            let i = rng.below(m.short_lived.len() as u64) as usize;
            let r = m.short_lived[i];
            settle(store, m, r, out)?;
            m.short_lived.swap_remove(i);
        }
    } else if pick(w.settle_oldest_pct) {
        if let Some(&r) = m.long_lived.first() {
            settle(store, m, r, out)?;
            m.long_lived.remove(0);
        }
    } else if pick(w.deliver_pct) {
        let all = m.short_lived.len() + m.long_lived.len();
        if all > 0 {
            let i = rng.below(all as u64) as usize;
            let r = m
                .short_lived
                .get(i)
                .copied()
                .unwrap_or_else(|| m.long_lived[i - m.short_lived.len()]);
            store.mark_delivered(r)?;
            *m.delivered.entry(r.id).or_default() += 1;
            m.deliveries_pending.push(r.id);
        }
    } else if pick(w.flush_pct) {
        // The flusher: take the files, sync them (outside any lock), then confirm.
        let files = store.take_files_to_sync()?;
        if w.fsync {
            for f in &files {
                f.sync().map_err(|e| StorageError::io(f.path(), e))?;
            }
        }
        m.confirmed.extend(m.appends_pending.drain(..));
        m.settled_confirmed.extend(m.settles_pending.drain(..));
        for id in m.deliveries_pending.drain(..) {
            *m.delivered_confirmed.entry(id).or_default() += 1;
        }
    } else if store.needs_compaction() {
        let start = sim.ops() - base_ops;
        match store.compact() {
            Ok(reclaimed) => {
                assert!(reclaimed > 0);
                out.compactions += 1;
                out.first_compaction_ops
                    .get_or_insert((start, sim.ops() - base_ops));
            }
            Err(e) => {
                out.crashed_in_compaction = true;
                return Err(e);
            }
        }
    }
    Ok(())
}

fn settle(
    store: &mut QueueStore,
    m: &mut Model,
    r: RecordRef,
    out: &mut Outcome,
) -> Result<(), StorageError> {
    let before = store.stats().segments;
    store.settle(r)?;
    if store.stats().segments < before {
        out.deletions += 1;
    }
    m.settled.insert(r.id);
    m.settles_pending.push(r.id);
    Ok(())
}

/// Runs the workload with `seed`, lets the disk vanish after `fault_after` mutating ops
/// (or at the end), crashes, recovers and checks what came back.
fn run(seed: u64, w: Workload, fault_after: Option<u64>) -> Outcome {
    let sim = SimBackend::new();
    let (backend, budget) = self::backend(&sim, w);
    let (mut store, msgs) = open(&backend, w);
    assert!(msgs.is_empty());
    let mut neighbours: Vec<QueueStore> = (0..w.neighbours)
        .map(|i| open_at(&backend, w, &format!("/data/queues/n{i}")).0)
        .collect();
    let base_ops = sim.ops();
    sim.fail_after(fault_after);
    let mut rng = Rng(seed);
    let mut m = Model::default();
    let mut out = Outcome::default();
    for _ in 0..w.steps {
        let r = step(
            &mut store,
            &mut neighbours,
            &sim,
            &mut m,
            &mut rng,
            w,
            &mut out,
            base_ops,
        );
        if r.is_err() {
            break;
        }
    }
    if let Some(b) = &budget {
        let stats = b.stats();
        assert!(stats.peak <= w.budget_files, "seed {seed}: {stats:?}");
        out.evictions = stats.evictions;
        out.early_syncs = stats.early_syncs;
    }
    drop(store);
    drop(neighbours);
    sim.crash(seed);

    let (mut store, msgs) = open(&backend, w);
    let ids: Vec<u64> = msgs.iter().map(|x| x.record.id).collect();
    assert!(
        ids.windows(2).all(|p| p[0] < p[1]),
        "seed {seed}: recovered ids out of order or duplicated"
    );
    let present: BTreeSet<u64> = ids.iter().copied().collect();
    for x in &msgs {
        assert_eq!(
            m.bodies.get(&x.record.id),
            Some(&x.body),
            "seed {seed}: record {} is not what was appended",
            x.record.id
        );
        assert_eq!((x.exchange.as_str(), x.routing_key.as_str()), ("", "q"));
        if w.fsync {
            let confirmed = m
                .delivered_confirmed
                .get(&x.record.id)
                .copied()
                .unwrap_or(0);
            let all = m.delivered.get(&x.record.id).copied().unwrap_or(0);
            assert!(
                (confirmed..=all).contains(&x.delivery_count),
                "seed {seed}: record {} delivered {} times, recovered count {}",
                x.record.id,
                all,
                x.delivery_count
            );
        }
    }
    out.lost = m
        .confirmed
        .iter()
        .copied()
        .filter(|id| !m.settled.contains(id) && !present.contains(id))
        .collect();
    if w.fsync {
        let back: Vec<&u64> = m.settled_confirmed.intersection(&present).collect();
        assert!(
            back.is_empty(),
            "seed {seed}: confirmed settles undone: {back:?}"
        );
        let check = check_dir(&sim, Path::new(DIR));
        assert!(check.is_ok(), "seed {seed}: after recovery: {check}");
        // The recovered store works on top of what it repaired: settles (appended after a
        // possibly torn ack tail) and one more message survive a clean reopen.
        let mut keep: Vec<RecordRef> = Vec::new();
        for (i, x) in msgs.iter().enumerate() {
            if i % 2 == 0 {
                store.settle(x.record).unwrap();
            } else {
                keep.push(x.record);
            }
        }
        keep.push(append(&mut store, b"after").unwrap());
        for f in store.take_files_to_sync().unwrap() {
            f.sync().unwrap();
        }
        drop(store);
        let (_, again) = open(&backend, w);
        let again: Vec<RecordRef> = again.iter().map(|x| x.record).collect();
        assert_eq!(
            again, keep,
            "seed {seed}: after settling half of the recovered messages"
        );
    }
    out
}

fn assert_nothing_lost(seed: u64, out: &Outcome) {
    assert!(
        out.lost.is_empty(),
        "seed {seed}: {} confirmed messages lost, first ids {:?}",
        out.lost.len(),
        &out.lost[..out.lost.len().min(10)]
    );
}

#[test]
fn confirmed_messages_survive_power_loss_at_any_moment() {
    let seeds = 200;
    let (mut deletions, mut crashes_midway) = (0, 0);
    for seed in 0..seeds {
        // Most runs lose the disk at a random op; every fourth one runs to the end and
        // crashes with whatever is pending.
        let fault = (seed % 4 != 0).then(|| Rng(seed ^ 0xFA17).below(SMALL.steps));
        let out = run(seed, SMALL, fault);
        assert_nothing_lost(seed, &out);
        deletions += out.deletions;
        crashes_midway += u64::from(fault.is_some());
    }
    assert!(deletions > 0, "the workload never deleted a segment");
    assert!(crashes_midway > 100);
}

#[test]
fn buffered_writes_survive_power_loss() {
    for seed in 0..100 {
        let w = Workload {
            buffered: true,
            ..SMALL
        };
        let fault = (seed % 4 != 0).then(|| Rng(seed ^ 0xB0F).below(w.steps));
        assert_nothing_lost(seed, &run(2000 + seed, w, fault));
    }
    let mut compactions = 0;
    for seed in 0..20 {
        let w = Workload {
            buffered: true,
            ..COMPACTING
        };
        let fault = Rng(seed ^ 0xB0FC).below(2 * w.steps);
        let out = run(3000 + seed, w, Some(fault));
        assert_nothing_lost(seed, &out);
        compactions += out.compactions;
    }
    assert!(compactions > 0, "the buffered workload never compacted");
}

#[test]
fn compaction_and_deletion_survive_power_loss() {
    let (mut compactions, mut deletions) = (0, 0);
    for seed in 0..40 {
        let fault = Rng(seed ^ 0xC0DE).below(2 * COMPACTING.steps);
        let out = run(1000 + seed, COMPACTING, Some(fault));
        assert_nothing_lost(seed, &out);
        compactions += out.compactions;
        deletions += out.deletions;
    }
    eprintln!("{compactions} compactions, {deletions} segment deletions");
    assert!(compactions > 0, "the workload never compacted");
    assert!(deletions > 0, "the workload never deleted a segment");
}

#[test]
fn a_crash_in_the_middle_of_a_compaction_loses_nothing() {
    let seeds = 60;
    for seed in 0..seeds {
        let seed = 2000 + seed;
        // A dry run finds where the first compaction's operations are ...
        let dry = run(seed, COMPACTING, None);
        let (start, end) = dry
            .first_compaction_ops
            .unwrap_or_else(|| panic!("seed {seed}: no compaction in the dry run"));
        assert!(dry.lost.is_empty());
        // ... and the same run loses the disk inside it: half the seeds at a random op, half
        // in the last steps (final sync, rename, directory sync, queue_stat).
        let mut rng = Rng(seed);
        let span = end - start;
        let at = if seed % 2 == 0 {
            start + rng.below(span)
        } else {
            end - 1 - rng.below(span.min(10))
        };
        let out = run(seed, COMPACTING, Some(at));
        assert!(
            out.crashed_in_compaction,
            "seed {seed}: fault at op {at} missed [{start}, {end})"
        );
        assert_nothing_lost(seed, &out);
    }
}

#[test]
fn without_fsync_confirmed_messages_are_lost() {
    let no_fsync = Workload {
        fsync: false,
        ..SMALL
    };
    let mut lost = 0;
    for seed in 0..50 {
        lost += run(seed, no_fsync, None).lost.len();
    }
    assert!(
        lost > 0,
        "no seed lost a confirmed message without fsync: the test does not test the fsync"
    );
}

/// Eight stores share a budget of six files (the tested one and seven neighbours that
/// write and flush between its steps): its handles are closed under it all the time,
/// the dirty ones after an fsync of their own; power loss at any moment still loses no
/// confirmed message, and never more than six files are open.
#[test]
fn a_file_budget_closing_handles_under_the_store_loses_nothing() {
    let (mut evictions, mut early_syncs) = (0, 0);
    for seed in 0..60 {
        let w = Workload {
            budget_files: 6,
            neighbours: 7,
            buffered: seed % 2 == 0,
            ..SMALL
        };
        let fault = (seed % 4 != 0).then(|| Rng(seed ^ 0xFD).below(3 * w.steps));
        let out = run(5000 + seed, w, fault);
        assert_nothing_lost(seed, &out);
        evictions += out.evictions;
        early_syncs += out.early_syncs;
    }
    eprintln!("{evictions} handles closed, {early_syncs} of them after an early fsync");
    assert!(evictions > 100, "the budget never closed a handle");
    assert!(early_syncs > 10, "no dirty handle was closed (early fsync)");
}
