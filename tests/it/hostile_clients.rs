//! The hostile-client suite (issue 7, part 6): against a real `relaymq-server` process,
//! hostile clients on both listeners — random bytes, valid-then-garbage frames, oversized
//! lengths, thousands of channels, half-open sockets, a slowloris handshake, a slow reader
//! that never reads its deliveries, a flood of declares — while a well-behaved client on
//! each listener publishes and gets its messages back throughout.
//!
//! For each: the offending connection is closed (or throttled: the slow reader), the
//! server's sockets come back to the well-behaved ones, its resident memory stays under
//! [`RSS_BOUND_BYTES`] during and after the load, and the well-behaved clients see every
//! round trip answered correctly.
//!
//! tests/it/hostile_input.rs holds the single-connection cases on the native listener
//! (garbage headers, malformed methods, a client that never reads its replies); this
//! suite runs them at scale, on both listeners, with the memory bound measured.
//! Everything is loopback, bounded in count and time; the only timings asserted are
//! generous deadlines.

use crate::common;

use common::amqp_raw;
use common::Raw;
use relaymq::amqp::{self, AmqpMethod, FrameType};
use relaymq::native::{Method, PublishMessage, PROTOCOL_HEADER};
use relaymq::types::{BasicProperties, FieldTable};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The server's resident memory must stay under this during and after the hostile load,
/// in bytes (the load itself queues at most ~40 MiB of message bodies).
const RSS_BOUND_BYTES: u64 = 256 << 20;

/// `--handshake-timeout-ms` of the server under test, in milliseconds.
const HANDSHAKE_TIMEOUT_MS: u64 = 2_000;

/// `--max-queues-per-vhost` of the server under test, in queues.
const QUEUES_MAX: usize = 5_000;

/// `--max-exchanges-per-vhost` of the server under test, in exchanges.
const EXCHANGES_MAX: usize = 1_000;

/// Channels per connection: the server's default `--max-channels`.
const CHANNELS_MAX: u16 = relaymq::limits::CHANNEL_MAX;

/// How long a hostile socket may stay open after it should have been closed.
const CLOSE_DEADLINE: Duration = Duration::from_secs(15);

/// Longest a well-behaved round trip (publish, then get) may take while under attack.
const ROUND_TRIP_DEADLINE: Duration = Duration::from_secs(10);

/// Sockets the server may hold beyond the baseline once a phase is over (the canaries'
/// are in the baseline; a lingering close or two).
const FD_SLACK: usize = 8;

/// A `relaymq-server` child process with a short handshake timeout and small queue and
/// exchange limits, whose descriptors the phases count through its pid
/// (`common::ServerProcess` is the general one), killed when dropped.
struct HostileServer {
    child: Child,
    native: SocketAddr,
    amqp: SocketAddr,
    _dir: tempfile::TempDir,
}

impl HostileServer {
    fn start() -> HostileServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let ready = dir.path().join("ready.json");
        let child = Command::new(env!("CARGO_BIN_EXE_relaymq-server"))
            .args(["--listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "off", "--http-listen", "off"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--ready-file")
            .arg(&ready)
            .args(["--workers", "2", "--log-level", "error", "--fsync", "never"])
            .args(["--handshake-timeout-ms", &HANDSHAKE_TIMEOUT_MS.to_string()])
            .args(["--max-queues-per-vhost", &QUEUES_MAX.to_string()])
            .args(["--max-exchanges-per-vhost", &EXCHANGES_MAX.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("relaymq-server starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        let json = loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                break text;
            }
            assert!(Instant::now() < deadline, "no ready file within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        let v: serde_json::Value = serde_json::from_str(&json).expect("ready file is JSON");
        let addr = |k: &str| v[k].as_str().expect(k).parse().expect("an address");
        HostileServer {
            native: addr("listen"),
            amqp: addr("amqp_listen"),
            child,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of process `pid`, in bytes (`VmRSS` of /proc/PID/status).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Open file descriptors of process `pid` (its sockets, files and pipes).
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Samples the server's RSS every 50 ms until stopped; keeps the peak.
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid)));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        RssSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak()
    }
}

/// What a well-behaved client saw: round trips done and the slowest one.
#[derive(Debug, Default)]
struct CanaryReport {
    rounds: u64,
    slowest: Duration,
}

/// A well-behaved native client: publish a numbered message, get it back, until `stop`.
/// Panics (failing the test at join) on any wrong or missing answer.
fn native_canary(addr: SocketAddr, stop: Arc<AtomicBool>) -> CanaryReport {
    let mut raw = Raw::connect(addr);
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = raw.call(
        1,
        Method::QueueDeclare {
            queue: "canary-native".into(),
            passive: false,
            durable: false,
            exclusive: true,
            auto_delete: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    let mut report = CanaryReport::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let body = report.rounds.to_be_bytes().to_vec();
        raw.send(
            1,
            0,
            &Method::Publish {
                messages: vec![PublishMessage {
                    exchange: String::new(),
                    routing_key: "canary-native".into(),
                    mandatory: false,
                    properties: BasicProperties::default(),
                    body: body.clone(),
                }],
            },
        );
        let (_, _, got) = raw.call(
            1,
            Method::BasicGet {
                queue: "canary-native".into(),
                no_ack: true,
            },
        );
        assert!(
            matches!(&got, Method::GetOk { body: b, .. } if *b == body),
            "native canary round {}: {got:?}",
            report.rounds
        );
        report.slowest = report.slowest.max(started.elapsed());
        report.rounds += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    report
}

/// A well-behaved AMQP 0-9-1 client: publish a numbered message, `basic.get` it back.
fn amqp_canary(addr: SocketAddr, stop: Arc<AtomicBool>) -> CanaryReport {
    let mut r = amqp_raw::Raw::open(addr);
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(1, &amqp_queue_declare("canary-amqp", true));
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::QueueDeclareOk { .. }))
    ));
    let mut report = CanaryReport::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let body = report.rounds.to_be_bytes();
        r.send(&amqp_publish_bytes(1, "canary-amqp", &body));
        r.method(
            1,
            &AmqpMethod::BasicGet {
                queue: "canary-amqp".into(),
                no_ack: true,
            },
        );
        let got = r.recv_frame();
        assert!(
            matches!(&got, Some((FrameType::Method, 1, _))),
            "amqp canary round {}: {got:?}",
            report.rounds
        );
        let Some((_, _, payload)) = got else {
            unreachable!()
        };
        let m = AmqpMethod::decode(&payload).expect("decodes");
        assert!(
            matches!(m, AmqpMethod::BasicGetOk { .. }),
            "amqp canary round {}: {m:?}",
            report.rounds
        );
        assert!(matches!(r.recv_frame(), Some((FrameType::Header, 1, _))));
        let body_frame = r.recv_frame();
        assert!(
            matches!(&body_frame, Some((FrameType::Body, 1, b)) if *b == body),
            "amqp canary round {}: {body_frame:?}",
            report.rounds
        );
        report.slowest = report.slowest.max(started.elapsed());
        report.rounds += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    report
}

fn amqp_queue_declare(name: &str, exclusive: bool) -> AmqpMethod {
    AmqpMethod::QueueDeclare {
        queue: name.into(),
        passive: false,
        durable: false,
        exclusive,
        auto_delete: false,
        no_wait: false,
        arguments: FieldTable::new(),
    }
}

/// `basic.publish` to the default exchange with its content, as bytes.
fn amqp_publish_bytes(ch: u16, queue: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    amqp::write_method(
        &mut out,
        ch,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: queue.into(),
            mandatory: false,
            immediate: false,
        },
    );
    amqp::write_content(
        &mut out,
        ch,
        amqp::BASIC_CLASS_ID,
        &BasicProperties::default(),
        body,
        amqp_raw::FRAME_MAX,
    );
    out
}

/// A native method frame, as bytes.
fn native_frame(ch: u16, request_id: u32, m: &Method) -> Vec<u8> {
    let mut out = Vec::new();
    relaymq::native::frame::write_method(&mut out, ch, 128 * 1024, |b| m.encode(request_id, b));
    out
}

/// Deterministic pseudo-random bytes (xorshift64).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Reads and discards until EOF or reset; true when that came before `deadline`.
fn closed_by(s: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let _ = s.set_read_timeout(Some(left.min(Duration::from_millis(500))));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
}

/// Asserts that every socket of `socks` is closed by the server within [`CLOSE_DEADLINE`].
fn assert_all_closed(what: &str, socks: &mut [TcpStream]) {
    let deadline = Instant::now() + CLOSE_DEADLINE;
    let open = socks
        .iter_mut()
        .map(|s| closed_by(s, deadline))
        .filter(|c| !c)
        .count();
    assert_eq!(
        open, 0,
        "{what}: {open} sockets still open after {CLOSE_DEADLINE:?}"
    );
}

/// Waits until the server holds no more than `baseline + FD_SLACK` descriptors.
fn assert_sockets_released(what: &str, pid: u32, baseline: usize) {
    let deadline = Instant::now() + CLOSE_DEADLINE;
    loop {
        let n = fd_count(pid);
        if n <= baseline + FD_SLACK {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the server still holds {n} descriptors (baseline {baseline})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Random bytes, with and without a valid protocol header first, on both listeners.
fn random_bytes(server: &HostileServer) {
    let mut socks = Vec::new();
    for i in 0..40u64 {
        for (addr, header) in [
            (server.native, &PROTOCOL_HEADER[..]),
            (server.amqp, &amqp::PROTOCOL_HEADER[..]),
        ] {
            let mut s = connect(addr);
            let mut bytes = if i % 2 == 0 {
                header.to_vec()
            } else {
                Vec::new()
            };
            bytes.extend(noise(i + 1, 16 * 1024));
            let _ = s.write_all(&bytes);
            socks.push(s);
        }
    }
    assert_all_closed("random bytes", &mut socks);
}

/// Open connections that turn to garbage after a valid request.
fn valid_then_garbage(server: &HostileServer) {
    let mut socks = Vec::new();
    for i in 0..20u64 {
        let mut raw = Raw::connect(server.native);
        assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
        let _ = raw.stream.write_all(&noise(100 + i, 8 * 1024));
        socks.push(raw.stream);
        let mut a = amqp_raw::Raw::open(server.amqp);
        a.method(1, &AmqpMethod::ChannelOpen {});
        assert!(matches!(a.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
        let _ = a.s.write_all(&noise(200 + i, 8 * 1024));
        socks.push(a.s);
    }
    assert_all_closed("valid then garbage", &mut socks);
}

/// Frame lengths near 4 GiB, and an AMQP content header announcing a 1 TiB body whose
/// first 32 MiB are sent: the frames are refused before anything is allocated for them,
/// the body is discarded as it arrives.
fn oversized_lengths(server: &HostileServer) {
    let mut socks = Vec::new();
    for _ in 0..10 {
        let mut raw = Raw::connect(server.native);
        // size 0xFFFF_FFF0, type 1 (method), flags 0, channel 1.
        let _ = raw
            .stream
            .write_all(&[0xFF, 0xFF, 0xFF, 0xF0, 1, 0, 0, 1, 0, 0]);
        socks.push(raw.stream);
        let mut a = amqp_raw::Raw::open(server.amqp);
        // type 1 (method), channel 1, size 0xFFFF_FFF0.
        let _ = a.s.write_all(&[1, 0, 1, 0xFF, 0xFF, 0xFF, 0xF0, 0, 0]);
        socks.push(a.s);
    }
    assert_all_closed("oversized frame lengths", &mut socks);

    let mut a = amqp_raw::Raw::open(server.amqp);
    a.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(a.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    let mut out = Vec::new();
    amqp::write_method(
        &mut out,
        1,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: "nowhere".into(),
            mandatory: false,
            immediate: false,
        },
    );
    // Content header: class 60, weight 0, body size 1 TiB, no properties.
    let mut header = vec![0, 60, 0, 0];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    header.extend_from_slice(&[0, 0]);
    out.push(2);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(header.len() as u32).to_be_bytes());
    out.extend_from_slice(&header);
    out.push(0xCE);
    a.send(&out);
    let chunk = vec![0xAB; amqp_raw::FRAME_MAX as usize - 8];
    let mut body_frame = vec![3, 0, 1];
    body_frame.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
    body_frame.extend_from_slice(&chunk);
    body_frame.push(0xCE);
    for _ in 0..(32 << 20) / chunk.len() {
        a.send(&body_frame);
    }
    match a.recv() {
        Some((1, AmqpMethod::ChannelClose { reply_code, .. })) => assert_eq!(reply_code, 406),
        other => panic!("oversized body: expected channel.close 406, got {other:?}"),
    }
    // The connection itself survives the refused body, on another channel (channel 1
    // still owes the rest of its announced body: a method there would be 505).
    a.method(2, &AmqpMethod::ChannelOpen {});
    assert!(matches!(a.recv(), Some((2, AmqpMethod::ChannelOpenOk {}))));
}

/// Connections that open every channel they may (2047), then one more.
fn thousands_of_channels(server: &HostileServer) {
    let mut socks = Vec::new();
    for _ in 0..3 {
        let mut raw = Raw::connect(server.native);
        let mut out = Vec::new();
        for ch in 1..=CHANNELS_MAX {
            out.extend(native_frame(ch, u32::from(ch), &Method::ChannelOpen));
        }
        raw.stream.write_all(&out).unwrap();
        for _ in 1..=CHANNELS_MAX {
            let (_, _, m) = raw.recv().expect("channel.open reply");
            assert_eq!(m, Method::Ok);
        }
        let (_, _, m) = raw.call(CHANNELS_MAX + 1, Method::ChannelOpen);
        assert!(
            matches!(
                m,
                Method::Close {
                    reply_code: 530,
                    ..
                }
            ),
            "{m:?}"
        );
        socks.push(raw.stream);
    }
    let (mut a, (offered, _)) = amqp_raw::Raw::try_open(server.amqp, 0).expect("opens");
    assert_eq!(offered, CHANNELS_MAX);
    let mut out = Vec::new();
    for ch in 1..=CHANNELS_MAX {
        amqp::write_method(&mut out, ch, &AmqpMethod::ChannelOpen {});
    }
    a.send(&out);
    for _ in 1..=CHANNELS_MAX {
        assert!(matches!(a.recv(), Some((_, AmqpMethod::ChannelOpenOk {}))));
    }
    a.method(CHANNELS_MAX + 1, &AmqpMethod::ChannelOpen {});
    a.expect_connection_close(530);
    socks.push(a.s);
    assert_all_closed("thousands of channels", &mut socks);
}

/// Sockets that connect and never send, that send a header and shut their write side,
/// and opened connections whose client shuts its write side and never reads.
fn half_open_sockets(server: &HostileServer) {
    let mut socks = Vec::new();
    for i in 0..300 {
        let addr = if i % 2 == 0 {
            server.native
        } else {
            server.amqp
        };
        socks.push(connect(addr));
    }
    for i in 0..100 {
        let (addr, header) = if i % 2 == 0 {
            (server.native, &PROTOCOL_HEADER[..])
        } else {
            (server.amqp, &amqp::PROTOCOL_HEADER[..])
        };
        let mut s = connect(addr);
        s.write_all(header).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        socks.push(s);
    }
    for _ in 0..25 {
        let raw = Raw::connect(server.native);
        raw.stream.shutdown(Shutdown::Write).unwrap();
        socks.push(raw.stream);
        let a = amqp_raw::Raw::open(server.amqp);
        a.s.shutdown(Shutdown::Write).unwrap();
        socks.push(a.s);
    }
    assert_all_closed("half-open sockets", &mut socks);
}

/// Sockets trickling a valid handshake one byte at a time: all closed at the handshake
/// deadline counted from accept, however much they sent.
fn slowloris(server: &HostileServer) {
    let mut native_open = PROTOCOL_HEADER.to_vec();
    native_open.extend(native_frame(
        0,
        1,
        &Method::Open {
            user: "guest".into(),
            password: "guest".into(),
            vhost: "/".into(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: "slowloris".repeat(20),
        },
    ));
    let mut amqp_start = amqp::PROTOCOL_HEADER.to_vec();
    amqp_start.extend_from_slice(&[1, 0, 0, 0, 0, 0x03, 0xE8]);
    amqp_start.resize(amqp_start.len() + 1000, 0);
    let mut socks: Vec<(TcpStream, &[u8], usize, bool)> = (0..100)
        .map(|i| {
            let (addr, bytes) = if i % 2 == 0 {
                (server.native, &native_open[..])
            } else {
                (server.amqp, &amqp_start[..])
            };
            let s = connect(addr);
            s.set_nonblocking(true).unwrap();
            (s, bytes, 0, false)
        })
        .collect();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while socks.iter().any(|s| !s.3) {
        assert!(
            started.elapsed() < Duration::from_millis(HANDSHAKE_TIMEOUT_MS) + CLOSE_DEADLINE,
            "slowloris: {} sockets still open",
            socks.iter().filter(|s| !s.3).count()
        );
        for (s, bytes, at, closed) in socks.iter_mut().filter(|s| !s.3) {
            assert!(*at < bytes.len(), "a slowloris finished its handshake");
            if s.write(&bytes[*at..*at + 1]).is_err() {
                *closed = true;
                continue;
            }
            *at += 1;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => *closed = true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => *closed = true,
                }
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(HANDSHAKE_TIMEOUT_MS - 500),
        "closed after {took:?}, before the handshake deadline"
    );
}

/// A consumer that never reads its deliveries while 32 MiB is published to its queue:
/// the server stops delivering to it (throttled, not closed) and keeps the rest in the
/// queue, not in its outbound buffer.
fn slow_reader(server: &HostileServer) {
    const BODY_BYTES: usize = 256 * 1024;
    const MESSAGES: usize = 128;
    let mut producer = Raw::connect(server.native);
    assert_eq!(producer.call(1, Method::ChannelOpen).2, Method::Ok);
    let declare = |passive| Method::QueueDeclare {
        queue: "slow".into(),
        passive,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    };
    let (_, _, m) = producer.call(1, declare(false));
    assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
    let mut reader = Raw::connect(server.native);
    assert_eq!(reader.call(1, Method::ChannelOpen).2, Method::Ok);
    let (_, _, m) = reader.call(
        1,
        Method::BasicConsume {
            queue: "slow".into(),
            consumer_tag: "never-reads".into(),
            no_ack: true,
            exclusive: false,
            arguments: FieldTable::new(),
        },
    );
    assert!(matches!(m, Method::BasicConsumeOk { .. }), "{m:?}");
    for i in 0..MESSAGES {
        producer.send(
            1,
            0,
            &Method::Publish {
                messages: vec![PublishMessage {
                    exchange: String::new(),
                    routing_key: "slow".into(),
                    mandatory: false,
                    properties: BasicProperties::default(),
                    body: noise(i as u64 + 7, BODY_BYTES),
                }],
            },
        );
    }
    let (_, _, m) = producer.call(1, declare(true));
    let Method::QueueDeclareOk { message_count, .. } = m else {
        panic!("{m:?}");
    };
    assert!(
        message_count > 0,
        "all 32 MiB went to a client that reads nothing: not throttled"
    );
    // Still connected: the reader drains what was sent to it when it reads at last.
    reader
        .stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let got = reader
        .stream
        .read(&mut buf)
        .expect("the throttled reader is still connected");
    assert!(got > 0);
    drop(reader);
    let (_, _, m) = producer.call(
        1,
        Method::QueueDelete {
            queue: "slow".into(),
            if_unused: false,
            if_empty: false,
        },
    );
    assert!(matches!(m, Method::QueueDeleteOk { .. }), "{m:?}");
}

/// Pipelined declares without reading a reply: queues up to the vhost limit then 406,
/// exchanges likewise; the exclusive queues go with the connection.
fn flood_of_declares(server: &HostileServer) {
    let mut raw = Raw::connect(server.native);
    assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
    assert_eq!(raw.call(2, Method::ChannelOpen).2, Method::Ok);
    let flood = QUEUES_MAX + 1000;
    let mut out = Vec::new();
    for i in 0..flood {
        out.extend(native_frame(
            1,
            i as u32 + 100,
            &Method::QueueDeclare {
                queue: format!("flood-{i}"),
                passive: false,
                durable: false,
                exclusive: true,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
        ));
    }
    for i in 0..EXCHANGES_MAX + 100 {
        out.extend(native_frame(
            2,
            0,
            &Method::ExchangeDeclare {
                exchange: format!("flood-x-{i}"),
                kind: "fanout".into(),
                passive: false,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::new(),
            },
        ));
    }
    // The replies are read by another thread only after everything was written, so the
    // server's mailbox and outbound budgets do the holding back.
    raw.stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = raw.stream.try_clone().unwrap();
    let sent = std::thread::spawn(move || writer.write_all(&out).is_ok());
    let mut queue_limit = None;
    let mut exchange_limit = None;
    while queue_limit.is_none() || exchange_limit.is_none() {
        let (ch, _, m) = raw.recv().expect("replies to the flood");
        if let Method::ChannelClose {
            reply_code,
            reply_text,
            ..
        } = m
        {
            assert_eq!(reply_code, 406, "{reply_text}");
            if ch == 1 {
                queue_limit = Some(reply_text);
            } else {
                exchange_limit = Some(reply_text);
            }
        }
    }
    assert!(sent.join().unwrap(), "the flood was not read");
    let q = queue_limit.unwrap_or_default();
    assert!(
        q.contains("queue limit in vhost '/' (5000) is reached"),
        "{q}"
    );
    let x = exchange_limit.unwrap_or_default();
    assert!(
        x.contains("exchange limit in vhost '/' (1000) is reached"),
        "{x}"
    );
    drop(raw);
    // The exclusive queues are gone with the connection: room for new queues again.
    let deadline = Instant::now() + CLOSE_DEADLINE;
    let mut probe = Raw::connect(server.native);
    let mut ch = 1;
    loop {
        assert_eq!(probe.call(ch, Method::ChannelOpen).2, Method::Ok);
        let (_, _, m) = probe.call(
            ch,
            Method::QueueDeclare {
                queue: "after-flood".into(),
                passive: false,
                durable: false,
                exclusive: true,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
        );
        if matches!(m, Method::QueueDeclareOk { .. }) {
            break;
        }
        assert!(Instant::now() < deadline, "queues not released: {m:?}");
        ch += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One kind of hostile client, run to completion against the server.
type Phase = fn(&HostileServer);

#[test]
fn hostile_clients_are_cut_off_while_memory_stays_bounded_and_others_are_served() {
    let server = HostileServer::start();
    let pid = server.pid();
    let sampler = RssSampler::start(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let canaries = [
        {
            let (addr, stop) = (server.native, Arc::clone(&stop));
            std::thread::spawn(move || native_canary(addr, stop))
        },
        {
            let (addr, stop) = (server.amqp, Arc::clone(&stop));
            std::thread::spawn(move || amqp_canary(addr, stop))
        },
    ];
    // The canaries' sockets are in the baseline once they are connected.
    std::thread::sleep(Duration::from_millis(500));
    let baseline = fd_count(pid);
    let rss_start = rss_bytes(pid);
    let phases: [(&str, Phase); 8] = [
        ("random bytes", random_bytes),
        ("valid then garbage", valid_then_garbage),
        ("oversized lengths", oversized_lengths),
        ("thousands of channels", thousands_of_channels),
        ("half-open sockets", half_open_sockets),
        ("slowloris", slowloris),
        ("slow reader", slow_reader),
        ("flood of declares", flood_of_declares),
    ];
    for (name, phase) in phases {
        let started = Instant::now();
        phase(&server);
        assert_sockets_released(name, pid, baseline);
        let peak = sampler.peak();
        eprintln!(
            "phase {name}: {:?}, peak RSS so far {} MiB",
            started.elapsed(),
            peak >> 20
        );
        assert!(
            peak < RSS_BOUND_BYTES,
            "{name}: RSS peaked at {peak} bytes, bound {RSS_BOUND_BYTES}"
        );
        assert!(
            canaries.iter().all(|c| !c.is_finished()),
            "{name}: a well-behaved client failed"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for (name, c) in ["native", "AMQP"].into_iter().zip(canaries) {
        let report = c
            .join()
            .unwrap_or_else(|_| panic!("the {name} canary failed"));
        eprintln!("{name} canary: {report:?}");
        assert!(report.rounds > 0);
        assert!(
            report.slowest < ROUND_TRIP_DEADLINE,
            "{name} canary waited {:?}",
            report.slowest
        );
    }
    let peak = sampler.finish();
    let rss_after = rss_bytes(pid);
    eprintln!(
        "RSS: {} MiB at start, peak {} MiB, {} MiB after (bound {} MiB)",
        rss_start >> 20,
        peak >> 20,
        rss_after >> 20,
        RSS_BOUND_BYTES >> 20
    );
    assert!(peak < RSS_BOUND_BYTES, "RSS peaked at {peak} bytes");
    assert!(rss_after < RSS_BOUND_BYTES, "RSS after: {rss_after} bytes");
}
