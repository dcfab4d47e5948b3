//! Replays the fuzz corpus on stable Rust: every file under `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` goes through the same `relaymq::fuzzing` function its
//! cargo-fuzz target calls, so a crash found and fixed once stays fixed
//! (docs/security.md §7.2).

use relaymq::fuzzing;
use std::path::{Path, PathBuf};

/// A fuzz target: its name (the directory of its corpus) and its function.
type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 3] = [
    ("native_frame", fuzzing::native_frame),
    ("amqp_frame", fuzzing::amqp_frame),
    ("storage_record", fuzzing::storage_record),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("read dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs every file of `kind` (`corpus` or `regressions`) through its target; returns how
/// many ran.
fn replay(kind: &str) -> usize {
    let mut ran = 0;
    for (target, run) in TARGETS {
        for path in files(&fuzz_dir().join(kind).join(target)) {
            let data = std::fs::read(&path).expect("read corpus file");
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target}: {} panicked", path.display());
            ran += 1;
        }
    }
    ran
}

#[test]
fn committed_corpus_replays_without_a_panic() {
    let ran = replay("corpus");
    assert!(ran >= 30, "only {ran} corpus files found under fuzz/corpus");
}

#[test]
fn regressions_replay_without_a_panic() {
    replay("regressions");
}

#[test]
fn generated_seeds_pass_every_property() {
    for (name, data) in fuzzing::seeds::native_frame() {
        std::panic::catch_unwind(|| fuzzing::native_frame(&data))
            .unwrap_or_else(|_| panic!("{name}"));
    }
    for (name, data) in fuzzing::seeds::amqp_frame() {
        std::panic::catch_unwind(|| fuzzing::amqp_frame(&data))
            .unwrap_or_else(|_| panic!("{name}"));
    }
    for (name, data) in fuzzing::seeds::storage_record() {
        std::panic::catch_unwind(|| fuzzing::storage_record(&data))
            .unwrap_or_else(|_| panic!("{name}"));
    }
}

/// Writes the seed corpus to `fuzz/corpus/<target>/seed-<name>` (run by hand before
/// fuzzing: `cargo test --release --test it -- --ignored fuzz_corpus::write_seed_corpus`).
#[test]
#[ignore = "writes files under fuzz/corpus; run by hand"]
fn write_seed_corpus() {
    let sets = [
        ("native_frame", fuzzing::seeds::native_frame()),
        ("amqp_frame", fuzzing::seeds::amqp_frame()),
        ("storage_record", fuzzing::seeds::storage_record()),
    ];
    for (target, seeds) in sets {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        for (name, data) in seeds {
            std::fs::write(dir.join(format!("seed-{name}")), data).expect("write seed");
        }
    }
}
