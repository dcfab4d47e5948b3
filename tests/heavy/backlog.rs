//! A backlog larger than the memory budget (issue: backlogs larger than memory, acceptance):
//! 2 GiB of persistent 64 KiB messages queued on a real server started with
//! `--queue-memory-bytes 256MiB` keep its resident set under 512 MiB while they are
//! published, after a restart that recovers them, and while they are consumed; every one
//! is delivered once, in order, intact.
//!
//! The test writes `BACKLOG_BYTES` to a temporary directory: it is skipped, saying so, when
//! the file system has less than `FREE_BYTES_MIN` free. Loopback only.

use crate::common;

use common::ServerProcess;
use relaymq::client::{Connection, ConsumerEvent, PublishMessage, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Body size of each message, in bytes.
const BODY_BYTES: usize = 64 * 1024;
/// Bytes of bodies queued, in bytes (2 GiB: 32 768 messages).
const BACKLOG_BYTES: u64 = 2 << 30;
/// Messages queued.
const MESSAGES: u64 = BACKLOG_BYTES / BODY_BYTES as u64;
/// The server's per-queue memory budget (`--queue-memory-bytes`).
const BUDGET: &str = "256MiB";
/// The resident set the server must stay under, in bytes.
const RSS_BYTES_MAX: u64 = 512 << 20;
/// Open file descriptors the server may have (its store keeps at most
/// `handle_cache::STORE_FILES_PER_QUEUE_MAX` files open, whatever the backlog's 256
/// segments).
const FDS_MAX: usize = 64;
/// Free space required to run, in bytes (the backlog, its ack logs, and room to spare).
const FREE_BYTES_MIN: u64 = 6 << 30;
/// Messages per `publish_batch` call (4 MiB).
const PUBLISH_BATCH: u64 = 64;
/// Unacked deliveries the consumer allows.
const PREFETCH: u16 = 128;
/// The consumer acks (multiple) every this many messages.
const ACK_EVERY: u64 = 32;
/// Longest wait for one delivery.
const DELIVERY_WAIT: Duration = Duration::from_secs(60);
/// Each phase (publish, restart, consume) must end within this (a stall fails clearly;
/// generous enough for a debug build).
const PHASE_DEADLINE: Duration = Duration::from_secs(600);

const QUEUE: &str = "backlog";

/// Free bytes of the file system holding `path`, from `df -Pk` (no libc dependency).
fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().nth(1)?;
    let kib: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(kib * 1024)
}

/// A field of `/proc/<pid>/status` in bytes (`VmRSS`, `VmHWM`).
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Open file descriptors of a process.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Samples a process's VmRSS and open descriptors every 50 ms until stopped; keeps the
/// highest of each.
struct RssSampler {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicU64>,
    fds: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max = Arc::new(AtomicU64::new(0));
        let fds = Arc::new(AtomicU64::new(0));
        let (s, m, f) = (Arc::clone(&stop), Arc::clone(&max), Arc::clone(&fds));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                f.fetch_max(open_fds(pid) as u64, Ordering::Relaxed);
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(kb) = text
                        .lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        m.fetch_max(kb * 1024, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        RssSampler {
            stop,
            max,
            fds,
            thread: Some(thread),
        }
    }

    /// Stops sampling; returns the highest VmRSS seen, in bytes, and the most descriptors.
    fn finish(mut self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("sampler");
        }
        (
            self.max.load(Ordering::Relaxed),
            self.fds.load(Ordering::Relaxed) as usize,
        )
    }
}

/// Checks the server's resident set (the kernel's high-water mark) and open descriptors;
/// `sampled` are the sampler's maxima of both.
fn check_rss(server: &ServerProcess, phase: &str, sampled: (u64, usize)) {
    let pid = server.child.id();
    let rss = proc_status_bytes(pid, "VmRSS");
    let hwm = proc_status_bytes(pid, "VmHWM");
    let fds = open_fds(pid).max(sampled.1);
    eprintln!(
        "{phase}: server VmRSS {:.0} MiB now, {:.0} MiB sampled max, VmHWM {:.0} MiB; \
         at most {fds} open descriptors",
        mib(rss),
        mib(sampled.0),
        mib(hwm)
    );
    assert!(
        fds <= FDS_MAX,
        "{phase}: the server had {fds} descriptors open, over {FDS_MAX}"
    );
    assert!(
        hwm < RSS_BYTES_MAX,
        "{phase}: the server's peak resident set {:.0} MiB is over {:.0} MiB",
        mib(hwm),
        mib(RSS_BYTES_MAX)
    );
}

/// Body of message `seq`: its sequence number, then a pattern derived from it (so a body
/// from the wrong place or a damaged one is noticed).
fn body(seq: u64) -> Vec<u8> {
    let mut b = vec![(seq % 251) as u8; BODY_BYTES];
    b[..8].copy_from_slice(&seq.to_be_bytes());
    b[BODY_BYTES - 8..].copy_from_slice(&(!seq).to_be_bytes());
    b
}

fn persistent() -> BasicProperties {
    BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    }
}

fn publish_all(addr: &str) {
    let conn = Connection::connect(addr).expect("producer connects");
    let ch = conn.open_channel().unwrap();
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(QUEUE, options).expect("declare");
    ch.confirm_select().unwrap();
    let started = Instant::now();
    for from in (0..MESSAGES).step_by(PUBLISH_BATCH as usize) {
        let batch: Vec<PublishMessage> = (from..(from + PUBLISH_BATCH).min(MESSAGES))
            .map(|seq| PublishMessage {
                exchange: String::new(),
                routing_key: QUEUE.into(),
                mandatory: false,
                properties: persistent(),
                body: body(seq),
            })
            .collect();
        ch.publish_batch(&batch).expect("publish");
        assert!(
            started.elapsed() < PHASE_DEADLINE,
            "publishing stalled at {from}"
        );
    }
    assert!(
        ch.wait_for_confirms(PHASE_DEADLINE).expect("confirms"),
        "every message is confirmed"
    );
    conn.close().unwrap();
}

/// Consumes the whole backlog with acks; checks order, completeness and bodies.
fn consume_all(addr: &str) {
    let conn = Connection::connect(addr).expect("consumer connects");
    let ch = conn.open_channel().unwrap();
    ch.basic_qos(PREFETCH, false).unwrap();
    let consumer = ch.basic_consume(QUEUE, Default::default()).unwrap();
    let started = Instant::now();
    for expected in 0..MESSAGES {
        let d = match consumer.recv_timeout(DELIVERY_WAIT) {
            Ok(ConsumerEvent::Delivery(d)) => d,
            other => panic!("after {expected} of {MESSAGES} messages: {other:?}"),
        };
        assert_eq!(d.body.len(), BODY_BYTES, "message {expected}: body size");
        let seq = u64::from_be_bytes(d.body[..8].try_into().unwrap());
        assert_eq!(seq, expected, "messages arrive once each, in order");
        assert!(d.body == body(seq), "message {seq}: body damaged");
        if (expected + 1) % ACK_EVERY == 0 || expected + 1 == MESSAGES {
            ch.basic_ack(d.delivery_tag, true).unwrap();
        }
        assert!(
            started.elapsed() < PHASE_DEADLINE,
            "consuming stalled at {expected}"
        );
    }
    // Nothing more: the queue is empty.
    match consumer.recv_timeout(Duration::from_millis(200)) {
        Err(e) if e.is_timeout() => {}
        other => panic!("a message beyond the backlog: {other:?}"),
    }
    let ok = ch.queue_declare(
        QUEUE,
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
    );
    assert_eq!(ok.expect("passive declare").message_count, 0);
    conn.close().unwrap();
}

#[test]
fn a_backlog_larger_than_the_budget_stays_on_disk_and_comes_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    match free_bytes(dir.path()) {
        Some(free) if free >= FREE_BYTES_MIN => {}
        other => {
            eprintln!(
                "SKIPPED: the backlog test needs {:.0} GiB free in {}, found {:?} bytes",
                FREE_BYTES_MIN as f64 / (1u64 << 30) as f64,
                dir.path().display(),
                other
            );
            return;
        }
    }
    let data = dir.path().join("data");
    let flags = ["--queue-memory-bytes", BUDGET, "--fsync", "never"];
    let total = Instant::now();

    let server = ServerProcess::start(&data, &flags);
    let sampler = RssSampler::start(server.child.id());
    let t = Instant::now();
    publish_all(&server.addr_string());
    let published = t.elapsed();
    check_rss(&server, "after publishing", sampler.finish());
    eprintln!(
        "published {MESSAGES} messages ({:.0} MiB) in {:.1} s",
        mib(BACKLOG_BYTES),
        published.as_secs_f64()
    );
    assert!(server.terminate().success(), "clean shutdown");

    let t = Instant::now();
    let server = ServerProcess::start(&data, &flags);
    eprintln!(
        "restart with the backlog: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    check_rss(&server, "after recovery", (0, 0));

    let sampler = RssSampler::start(server.child.id());
    let t = Instant::now();
    consume_all(&server.addr_string());
    let consumed = t.elapsed();
    check_rss(&server, "after consuming", sampler.finish());
    eprintln!(
        "consumed {MESSAGES} messages in {:.1} s; whole test {:.1} s",
        consumed.as_secs_f64(),
        total.elapsed().as_secs_f64()
    );
    assert!(server.terminate().success(), "clean shutdown");
}
