//! A dead-letter replay killed mid-way (docs/lifecycle.md, "Replaying dead letters"): a
//! real `relaymq-server` (`--fsync always`) holds 20,000 persistent dead letters of one
//! queue; `relaymq-cli replay --to-origin` moves them back and the server is killed with
//! SIGKILL once part of them has moved. After a restart on the same data directory every
//! original body is in the source or the target, and at most one is in both (the message
//! in flight: each replayed message is fsynced in its target before it leaves the source).
//! The moment of the kill is seeded (`RELAYMQ_REPLAY_CRASH_SEED`, printed);
//! `RELAYMQ_REPLAY_CRASH_MESSAGES` changes the number of messages.

use crate::common;

use common::ServerProcess;
use relaymq::client::{Channel, Connection, PublishMessage, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Dead letters replayed by default.
const MESSAGES: usize = 20_000;

/// Messages per `publish_batch` + `wait_for_confirms` while filling the dead-letter queue.
const BATCH: usize = 500;

/// Messages that must be in the origin queue before the server is killed: at least the
/// first, plus a seeded number below the second (the replay is then under way, and far
/// from done).
const MOVED_BEFORE_KILL: (u32, u32) = (500, 2000);

/// Time allowed to any single client call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for the dead-letter queue to fill, and for the replay to move
/// [`MOVED_BEFORE_KILL`] messages.
const WAIT: Duration = Duration::from_secs(120);

const SERVER_FLAGS: [&str; 4] = ["--fsync", "always", "--log-level", "error"];

fn connect(server: &ServerProcess) -> Connection {
    common::connect_process(server, CALL_TIMEOUT)
}

/// Messages in `queue` (a passive declare).
fn count(ch: &Channel, queue: &str) -> u32 {
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(queue, options)
        .expect("passive declare")
        .message_count
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Declares `origin` (dead-lettering to `dlq` through the default exchange) and `dlq`,
/// both durable, and fills `dlq` with `n` dead letters of `origin`: persistent messages
/// published with a TTL of 0 expire on arrival (dead-lettering removes the TTL).
fn fill(ch: &Channel, n: usize) {
    let durable = |args: FieldTable| QueueDeclareOptions {
        durable: true,
        arguments: args,
        ..QueueDeclareOptions::default()
    };
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange".into(), FieldValue::string(""));
    args.insert(
        "x-dead-letter-routing-key".into(),
        FieldValue::string("dlq"),
    );
    ch.queue_declare("origin", durable(args)).unwrap();
    ch.queue_declare("dlq", durable(FieldTable::new())).unwrap();
    ch.confirm_select().unwrap();
    let props = BasicProperties {
        delivery_mode: Some(2),
        expiration: Some("0".into()),
        ..BasicProperties::default()
    };
    for start in (0..n).step_by(BATCH) {
        let batch: Vec<PublishMessage> = (start..n.min(start + BATCH))
            .map(|i| PublishMessage {
                exchange: String::new(),
                routing_key: "origin".into(),
                mandatory: false,
                properties: props.clone(),
                body: format!("m{i}").into_bytes(),
            })
            .collect();
        ch.publish_batch(&batch).unwrap();
        assert!(ch.wait_for_confirms(CALL_TIMEOUT).unwrap(), "confirmed");
    }
    wait_for("every message dead-lettered", || {
        count(ch, "dlq") as usize == n
    });
    assert_eq!(count(ch, "origin"), 0);
}

#[test]
fn a_replay_killed_mid_way_loses_nothing_and_duplicates_at_most_one() {
    let n: usize = std::env::var("RELAYMQ_REPLAY_CRASH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MESSAGES);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(&data, &SERVER_FLAGS);
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    fill(&ch, n);

    let mut replay = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args([
            "--addr",
            &server.addr_string(),
            "replay",
            "dlq",
            "--to-origin",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("relaymq-cli runs");
    let seed = common::seed_from_env("RELAYMQ_REPLAY_CRASH_SEED");
    let kill_at = MOVED_BEFORE_KILL.0 + (seed % u64::from(MOVED_BEFORE_KILL.1)) as u32;
    eprintln!("RELAYMQ_REPLAY_CRASH_SEED={seed}: kill once {kill_at} messages moved");
    let probe = conn.open_channel().unwrap();
    wait_for("the replay under way", || {
        count(&probe, "origin") >= kill_at
    });
    server.kill9();
    let _ = replay.wait();
    drop(conn);

    let server = ServerProcess::start(&data, &SERVER_FLAGS);
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let mut seen = HashMap::new();
    let in_origin = common::drain_counting(&ch, "origin", &mut seen);
    let in_dlq = common::drain_counting(&ch, "dlq", &mut seen);
    assert!(
        in_origin >= kill_at as usize && in_dlq > 0,
        "killed mid-way: {in_origin} in origin, {in_dlq} in dlq"
    );
    let missing: Vec<usize> = (0..n)
        .filter(|i| !seen.contains_key(&format!("m{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} bodies lost, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let duplicated: Vec<(&String, &usize)> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(
        duplicated.len() <= 1 && duplicated.iter().all(|(_, c)| **c == 2),
        "more than one duplicate: {duplicated:?}"
    );
    assert_eq!(seen.len(), n, "only the bodies published");
    eprintln!(
        "replay killed: {in_origin} in origin, {in_dlq} in dlq after the restart, {} \
         duplicated",
        duplicated.len()
    );
    assert!(server.terminate().success());
}
