//! Crash acceptance: a real `relaymq-server` (`--fsync always`, 64 KiB segments) is killed
//! with SIGKILL at a random moment while two publishers with confirms and an acking
//! consumer work on a durable queue, then restarted on the same data directory.
//!
//! Checked after every crash:
//!
//! - `relaymq-server --check` on the crashed directory exits 0 (a crash leaves at most
//!   info: lagging `queue_stat`, torn tails);
//! - after the restart, every message whose publish was confirmed and whose ack was not
//!   sent is in the queue (drained with `basic.get` no-ack); no id appears twice; every
//!   message drained was published in this round, with its body intact (a message acked
//!   or never confirmed may or may not be back: at-least-once);
//! - after a clean stop (SIGTERM) `--check` exits 0 again, and the next round's server
//!   finds the queue empty (the drain's settles survived the clean restart).
//!
//! The data directory is kept across rounds, so segments, ack logs, record ids and
//! deleted segments accumulate. The rounds are seeded (`RELAYMQ_CRASH_SEED`, printed);
//! `RELAYMQ_CRASH_ROUNDS` changes their number (at least 20 by default).

use crate::common;

use common::{run_check, ServerProcess};
use relaymq::client::{
    ConnectOptions, Connection, ConsumeOptions, ConsumerEvent, PublishMessage, QueueDeclareOptions,
};
use relaymq::types::BasicProperties;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const QUEUE: &str = "crash.q";

/// Rounds run by default.
const ROUNDS: usize = 20;

/// The whole test fails if the rounds take longer than this (debug build, 2 CPUs: the
/// rounds take about a tenth of it).
const DEADLINE: Duration = Duration::from_secs(180);

/// Messages per `publish_batch` + `wait_for_confirms`.
const BATCH: usize = 20;

/// Bytes of padding after a message's id, so that segments of 64 KiB roll often.
const PAD_BYTES: usize = 200;

/// Bounds of the random time the server runs under load before it is killed.
const KILL_AFTER_MS: (u64, u64) = (50, 400);

/// Prefetch of the consumer.
const PREFETCH: u16 = 20;

/// Deliveries the consumer leaves unacked per round (fewer than [`PREFETCH`]).
const UNACKED_KEPT: u64 = 10;

/// Pause of the consumer after each delivery.
const CONSUMER_PAUSE: Duration = Duration::from_millis(1);

/// Time allowed to any single client call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of every server start (the log level keeps the expected recovery warnings, a
/// stale `queue_stat` after each crash, out of the test output).
const SERVER_FLAGS: [&str; 6] = [
    "--fsync",
    "always",
    "--segment-bytes",
    "65536",
    "--log-level",
    "error",
];

/// splitmix64: a small seeded generator (no `rand` dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The body of message `id`: the id, `|`, then padding derived from the id.
fn body(id: &str) -> Vec<u8> {
    let mut b = id.as_bytes().to_vec();
    b.push(b'|');
    let seed = id
        .bytes()
        .fold(0u8, |a, c| a.wrapping_mul(31).wrapping_add(c));
    b.extend((0..PAD_BYTES).map(|i| seed.wrapping_add(i as u8)));
    b
}

/// The id of a body made by [`body`], or `None` when the body is not one.
fn parse_body(b: &[u8]) -> Option<String> {
    let bar = b.iter().position(|&c| c == b'|')?;
    let id = std::str::from_utf8(&b[..bar]).ok()?.to_string();
    (body(&id) == b).then_some(id)
}

/// What the clients of one round did, as far as they know.
#[derive(Default)]
struct Ledger {
    /// Ids handed to `publish_batch` (stored or not).
    published: Mutex<HashSet<String>>,
    /// Ids whose batch `wait_for_confirms` answered `true`: they must survive.
    confirmed: Mutex<HashSet<String>>,
    /// Ids an ack was attempted for (recorded just before `basic_ack`, so the set holds
    /// every id the server may have settled): they may be gone.
    acked: Mutex<HashSet<String>>,
}

fn insert_all(set: &Mutex<HashSet<String>>, ids: &[String]) {
    set.lock().unwrap().extend(ids.iter().cloned());
}

fn connect(addr: &str) -> Option<Connection> {
    Connection::connect_with(ConnectOptions {
        timeout: CALL_TIMEOUT,
        ..ConnectOptions::new(addr)
    })
    .ok()
}

/// Publishes batches of persistent messages with confirms until the connection fails.
fn publisher(
    addr: String,
    thread: usize,
    round: usize,
    ledger: Arc<Ledger>,
    ready: mpsc::Sender<()>,
) {
    let Some(conn) = connect(&addr) else {
        return;
    };
    let Ok(ch) = conn.open_channel() else {
        return;
    };
    if ch.confirm_select().is_err() {
        return;
    }
    let _ = ready.send(());
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    for batch in 0.. {
        let ids: Vec<String> = (0..BATCH)
            .map(|i| format!("p{thread}-r{round}-{}", batch * BATCH + i))
            .collect();
        let messages: Vec<PublishMessage> = ids
            .iter()
            .map(|id| PublishMessage {
                exchange: String::new(),
                routing_key: QUEUE.into(),
                mandatory: false,
                properties: props.clone(),
                body: body(id),
            })
            .collect();
        insert_all(&ledger.published, &ids);
        if ch.publish_batch(&messages).is_err() {
            return;
        }
        match ch.wait_for_confirms(CALL_TIMEOUT) {
            Ok(true) => insert_all(&ledger.confirmed, &ids),
            // A nack: the batch may or may not be stored.
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

/// Consumes with manual acks and a prefetch of [`PREFETCH`] until the connection fails
/// or `stop` is set: acks two deliveries of three and leaves the third unacked, until
/// [`UNACKED_KEPT`] are left, then acks all. It is slower than the publishers
/// ([`CONSUMER_PAUSE`] per delivery), so that when the server dies the queue holds
/// messages acked, delivered and unacked, and never delivered.
fn consumer(addr: String, ledger: Arc<Ledger>, ready: mpsc::Sender<()>, stop: Arc<AtomicBool>) {
    let Some(conn) = connect(&addr) else {
        return;
    };
    let Ok(ch) = conn.open_channel() else {
        return;
    };
    if ch.basic_qos(PREFETCH, false).is_err() {
        return;
    }
    let Ok(consumer) = ch.basic_consume(QUEUE, ConsumeOptions::default()) else {
        return;
    };
    let _ = ready.send(());
    let (mut seen, mut unacked) = (0u64, 0u64);
    while !stop.load(Ordering::Acquire) {
        match consumer.recv_timeout(Duration::from_millis(100)) {
            Ok(ConsumerEvent::Delivery(d)) => {
                std::thread::sleep(CONSUMER_PAUSE);
                seen += 1;
                if seen % 3 == 0 && unacked < UNACKED_KEPT {
                    unacked += 1;
                    continue;
                }
                let id = parse_body(&d.body).expect("a delivered body is intact");
                insert_all(&ledger.acked, &[id]);
                if ch.basic_ack(d.delivery_tag, false).is_err() {
                    return;
                }
            }
            Ok(ConsumerEvent::Cancelled) => return,
            Err(e) if e.is_timeout() => {}
            Err(_) => return,
        }
    }
}

/// Counts of one round, for the log.
struct RoundStats {
    kill_after_ms: u64,
    published: usize,
    confirmed: usize,
    acked: usize,
    drained: usize,
    redelivered: usize,
}

fn run_round(data: &std::path::Path, round: usize, rng: &mut Rng) -> RoundStats {
    let server = ServerProcess::start(data, &SERVER_FLAGS);
    let addr = server.addr_string();
    {
        let conn = Connection::connect(&addr).expect("connect");
        let ch = conn.open_channel().unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let ok = ch.queue_declare(QUEUE, durable).unwrap();
        assert_eq!(
            ok.message_count, 0,
            "round {round}: the previous round's drain did not survive a clean restart"
        );
        conn.close().unwrap();
    }

    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut threads = Vec::new();
    for t in 0..2 {
        let (addr, ledger, ready) = (addr.clone(), Arc::clone(&ledger), ready_tx.clone());
        threads.push(std::thread::spawn(move || {
            publisher(addr, t, round, ledger, ready)
        }));
    }
    {
        let (addr, ledger, stop) = (addr.clone(), Arc::clone(&ledger), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            consumer(addr, ledger, ready_tx, stop)
        }));
    }
    for _ in 0..threads.len() {
        ready_rx
            .recv_timeout(CALL_TIMEOUT)
            .unwrap_or_else(|_| panic!("round {round}: a client did not get ready"));
    }
    let kill_after_ms = rng.range(KILL_AFTER_MS.0, KILL_AFTER_MS.1);
    std::thread::sleep(Duration::from_millis(kill_after_ms));
    server.kill9();
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().expect("client thread");
    }

    let crashed = run_check(data);
    assert_eq!(
        crashed.code, 0,
        "round {round}: --check after the crash\n{crashed}"
    );

    let server = ServerProcess::start(data, &SERVER_FLAGS);
    let conn = Connection::connect(&server.addr_string()).expect("connect after the crash");
    let ch = conn.open_channel().unwrap();
    let published = ledger.published.lock().unwrap().clone();
    let mut drained = HashSet::new();
    let mut redelivered = 0;
    while let Some(m) = ch.basic_get(QUEUE, true).expect("basic.get") {
        let id = parse_body(&m.body)
            .unwrap_or_else(|| panic!("round {round}: damaged body {:?}", m.body));
        assert!(
            published.contains(&id),
            "round {round}: {id} was never published in this round"
        );
        assert!(
            drained.insert(id.clone()),
            "round {round}: {id} is in the queue twice"
        );
        redelivered += usize::from(m.redelivered);
        assert!(drained.len() <= published.len(), "runaway queue");
    }
    let confirmed = ledger.confirmed.lock().unwrap();
    let acked = ledger.acked.lock().unwrap();
    let mut lost: Vec<&String> = confirmed
        .iter()
        .filter(|id| !acked.contains(*id) && !drained.contains(*id))
        .collect();
    lost.sort();
    assert!(
        lost.is_empty(),
        "round {round}: {} confirmed and unacked messages lost after a crash at {kill_after_ms} ms, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    conn.close().unwrap();
    assert!(server.terminate().success(), "round {round}: clean stop");

    let stopped = run_check(data);
    assert_eq!(
        stopped.code, 0,
        "round {round}: --check after the clean stop\n{stopped}"
    );
    RoundStats {
        kill_after_ms,
        published: published.len(),
        confirmed: confirmed.len(),
        acked: acked.len(),
        drained: drained.len(),
        redelivered,
    }
}

#[test]
fn confirmed_messages_survive_sigkill_at_random_moments() {
    let seed: u64 = env_or("RELAYMQ_CRASH_SEED", 0x5eed_c4a5);
    let rounds: usize = env_or("RELAYMQ_CRASH_ROUNDS", ROUNDS);
    eprintln!("crash test: seed {seed:#x}, {rounds} rounds");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let started = Instant::now();
    let mut confirmed = 0;
    for round in 0..rounds {
        let s = run_round(&data, round, &mut rng);
        eprintln!(
            "round {round:2}: killed after {:3} ms; published {:5}, confirmed {:5}, acked {:5}, \
             back {:5} ({} redelivered); {:.1} s elapsed",
            s.kill_after_ms,
            s.published,
            s.confirmed,
            s.acked,
            s.drained,
            s.redelivered,
            started.elapsed().as_secs_f64()
        );
        confirmed += s.confirmed;
        assert!(
            started.elapsed() < DEADLINE,
            "only {} of {rounds} rounds ran within {DEADLINE:?}",
            round + 1
        );
    }
    assert!(
        confirmed > 0,
        "no publish was ever confirmed: the test tested nothing"
    );
    eprintln!(
        "crash test: {rounds} rounds, {confirmed} confirmed messages, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
