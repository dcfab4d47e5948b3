//! An `on-confirm` shovel moves 100,000 persistent messages between two real
//! `relaymq-server`s while each is killed with SIGKILL 5 times at seeded moments
//! (`src/broker/shovel`). Server A holds the source queue and runs the shovel (its source
//! end in-process, its AMQP listener off); server B is the destination, reached over its
//! AMQP listener on a fixed port, so a restarted B is found at the same URI. A kill falls
//! once the shovel has moved a seeded 2,000-6,000 messages since the last restart (or
//! since the last kill of B), so every kill lands mid-transfer; the killed server is
//! restarted on its data directory at once, and the shovel reconnects after its 1 s
//! `reconnect-delay` (A's starts again from `meta.db`).
//!
//! When the source is empty and nothing is in flight, every published body is in B's
//! queue: nothing lost. A body seen twice is a duplicate at-least-once allows (the kill
//! fell between B's confirm and A's ack): counted and printed. The seed is printed
//! (`RELAYMQ_SHOVEL_CRASH_SEED` repeats a run).

use crate::common::{self, eventually, ServerProcess};
use relaymq::client::PublishMessage;
use relaymq::types::BasicProperties;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Messages published to the source.
const MESSAGES: usize = 100_000;

/// SIGKILLs of each server.
const KILLS_EACH: usize = 5;

/// Fewest and most messages the shovel moves between two kills.
const MOVED_BETWEEN_KILLS: (u64, u64) = (2_000, 6_000);

/// Messages per published batch.
const BATCH: usize = 1_000;

/// Time allowed for the transfer, kills included.
const LIMIT: Duration = Duration::from_secs(300);

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_a(data: &std::path::Path) -> ServerProcess {
    ServerProcess::start(
        data,
        &[
            "--amqp-listen",
            "off",
            "--http-listen",
            "127.0.0.1:0",
            "--log-level",
            "error",
        ],
    )
}

fn start_b(data: &std::path::Path, amqp_port: u16) -> ServerProcess {
    let listen = format!("127.0.0.1:{amqp_port}");
    ServerProcess::start(data, &["--amqp-listen", &listen, "--log-level", "error"])
}

/// The shovel's status on A (its `/api/shovels` element), if it runs.
fn shovel(a: &ServerProcess) -> Option<serde_json::Value> {
    let all = a.api().get("/shovels");
    (all.status == 200)
        .then(|| all.json()[0].clone())
        .filter(|v| !v.is_null())
}

/// Messages the shovel moved since A started, once it runs.
fn forwarded(a: &ServerProcess) -> u64 {
    shovel(a).and_then(|s| s["forwarded"].as_u64()).unwrap_or(0)
}

/// Ready plus unacked messages of A's source queue.
fn source_messages(a: &ServerProcess) -> Option<u64> {
    let r = a.api().get("/queues/%2F/src");
    (r.status == 200)
        .then(|| r.json()["messages"].as_u64())
        .flatten()
}

#[test]
fn an_on_confirm_shovel_loses_nothing_across_kills_of_either_server() {
    let mut seed = common::seed_from_env("RELAYMQ_SHOVEL_CRASH_SEED");
    println!("seed {seed} (RELAYMQ_SHOVEL_CRASH_SEED repeats this run)");
    let dir = tempfile::tempdir().unwrap();
    let (data_a, data_b) = (dir.path().join("a"), dir.path().join("b"));
    let port_b = free_port();
    let mut b = start_b(&data_b, port_b);
    let mut a = start_a(&data_a);
    {
        let c = common::connect_process(&a, Duration::from_secs(30));
        let ch = c.open_channel().unwrap();
        common::declare_queue(&ch, "src", true, &[]);
        ch.confirm_select().unwrap();
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..BasicProperties::default()
        };
        for start in (0..MESSAGES).step_by(BATCH) {
            let batch: Vec<PublishMessage> = (start..(start + BATCH).min(MESSAGES))
                .map(|i| PublishMessage {
                    exchange: String::new(),
                    routing_key: "src".into(),
                    mandatory: false,
                    properties: props.clone(),
                    body: i.to_string().into_bytes(),
                })
                .collect();
            ch.publish_batch(&batch).unwrap();
            assert!(ch.wait_for_confirms(Duration::from_secs(60)).unwrap());
        }
    }
    let started = Instant::now();
    let r = a.api().put(
        "/parameters/shovel/%2F/move",
        &json!({"value": {"src-uri": "amqp://", "src-queue": "src",
            "dest-uri": format!("amqp://guest:guest@127.0.0.1:{port_b}"),
            "dest-queue": "dst", "reconnect-delay": 1}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    // Which server each kill hits: five each, in seeded order.
    let mut order: Vec<bool> = (0..KILLS_EACH * 2).map(|i| i % 2 == 0).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (common::splitmix64(&mut seed) % (i as u64 + 1)) as usize);
    }
    let mut baseline = 0u64;
    for (k, kill_a) in order.iter().enumerate() {
        let (lo, hi) = MOVED_BETWEEN_KILLS;
        let want = lo + common::splitmix64(&mut seed) % (hi - lo);
        let moved = eventually(LIMIT, "the shovel moves", || {
            let f = forwarded(&a);
            (f >= baseline + want).then_some(f)
        });
        let left = source_messages(&a).unwrap_or(0);
        assert!(
            left > 0,
            "kill {k}: the source is already empty; more messages are needed"
        );
        if *kill_a {
            a.kill9();
            a = start_a(&data_a);
            baseline = 0;
        } else {
            b.kill9();
            b = start_b(&data_b, port_b);
            baseline = moved;
        }
        println!(
            "kill {k}: {} after {moved} moved since the last restart of A, {left} at the source",
            if *kill_a { "A" } else { "B" }
        );
    }
    eventually(LIMIT, "the source drained and nothing in flight", || {
        let s = shovel(&a)?;
        (source_messages(&a)? == 0 && s["state"] == "running" && s["pending"] == 0).then_some(())
    });
    let took = started.elapsed();
    let c = common::connect_process(&b, Duration::from_secs(30));
    let ch = c.open_channel().unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let taken = common::drain_counting(&ch, "dst", &mut seen);
    let lost: Vec<usize> = (0..MESSAGES)
        .filter(|i| !seen.contains_key(&i.to_string()))
        .collect();
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    println!(
        "{MESSAGES} published, {taken} at the destination ({} distinct, {duplicates} \
         duplicates), {} lost, {} s with {} kills",
        seen.len(),
        lost.len(),
        took.as_secs(),
        KILLS_EACH * 2
    );
    assert!(
        lost.is_empty(),
        "lost {} messages, first {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(seen.len(), MESSAGES, "only published bodies arrive");
}

/// Messages of the local shovel's throughput run.
const THROUGHPUT_MESSAGES: usize = 100_000;

/// The figure of docs/operations.md, "Shovels": a local `on-confirm` shovel moving
/// 16-byte persistent messages between two durable queues of one `relaymq-server`
/// (printed; the assertion is only that every message moved).
#[test]
fn a_local_shovel_moves_persistent_messages_between_two_queues() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_a(&dir.path().join("data"));
    let c = common::connect_process(&s, Duration::from_secs(30));
    let ch = c.open_channel().unwrap();
    common::declare_queue(&ch, "src", true, &[]);
    common::declare_queue(&ch, "dst", true, &[]);
    ch.confirm_select().unwrap();
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    for start in (0..THROUGHPUT_MESSAGES).step_by(BATCH) {
        let batch: Vec<PublishMessage> = (start..start + BATCH)
            .map(|i| PublishMessage {
                exchange: String::new(),
                routing_key: "src".into(),
                mandatory: false,
                properties: props.clone(),
                body: format!("{i:016}").into_bytes(),
            })
            .collect();
        ch.publish_batch(&batch).unwrap();
        assert!(ch.wait_for_confirms(Duration::from_secs(60)).unwrap());
    }
    let started = Instant::now();
    let r = s.api().put(
        "/parameters/shovel/%2F/local",
        &json!({"value": {"src-uri": "amqp://", "src-queue": "src",
            "dest-uri": "amqp://", "dest-queue": "dst"}}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let passive = || relaymq::client::QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    eventually(LIMIT, "every message moved", || {
        let n = ch.queue_declare("dst", passive()).ok()?.message_count as usize;
        (n == THROUGHPUT_MESSAGES).then_some(())
    });
    let took = started.elapsed().as_secs_f64();
    println!(
        "local on-confirm shovel: {THROUGHPUT_MESSAGES} persistent 16-byte messages in \
         {took:.2} s: {:.0} messages/s",
        THROUGHPUT_MESSAGES as f64 / took
    );
    assert_eq!(ch.queue_declare("src", passive()).unwrap().message_count, 0);
}
