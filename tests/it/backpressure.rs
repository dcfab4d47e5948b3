//! Back-pressure (docs/architecture.md §7): a client that publishes and consumes on one
//! connection cannot deadlock, and a consumer that stops reading its socket makes the
//! server hold messages in the queue instead of buffering them for the socket.
//!
//! Every scenario runs under an overall deadline and fails with a message when it is
//! exceeded; waits inside have their own timeouts.

use crate::common;

use common::{Raw, TestServer};
use relaymq::client::{Connection, ConsumerEvent, ListKind, PublishMessage, QueueDeclareOptions};
use relaymq::limits::OUTBOUND_HIGH_WATER_BYTES;
use relaymq::native::Method;
use relaymq::types::{BasicProperties, FieldTable};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `f` on its own thread and fails the test when it takes longer than `limit`.
fn with_deadline<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = worker.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not finish within {limit:?}: stalled or deadlocked")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker sends before it ends"),
        },
    }
}

/// A body of `len` bytes starting with the big-endian sequence number `seq`.
fn numbered_body(seq: u64, len: usize) -> Vec<u8> {
    let mut body = vec![0xab; len];
    body[..8].copy_from_slice(&seq.to_be_bytes());
    body
}

fn seq_of(body: &[u8]) -> u64 {
    u64::from_be_bytes(body[..8].try_into().expect("8-byte sequence number"))
}

fn numbered_batch(queue: &str, from: u64, count: u64, len: usize) -> Vec<PublishMessage> {
    (from..from + count)
        .map(|seq| PublishMessage {
            exchange: String::new(),
            routing_key: queue.into(),
            mandatory: false,
            properties: BasicProperties::default(),
            body: numbered_body(seq, len),
        })
        .collect()
}

/// (messages_ready, messages_unacknowledged) of `queue`, as `list queues` reports them.
fn queue_counts(conn: &Connection, queue: &str) -> (i64, i64) {
    let rows = conn.list(ListKind::Queues).expect("list queues");
    let row = rows
        .iter()
        .find(|r| r.get("name").and_then(|v| v.as_str()) == Some(queue))
        .unwrap_or_else(|| panic!("queue {queue} not listed: {rows:?}"));
    let field = |k: &str| row.get(k).and_then(|v| v.as_i64()).expect(k);
    (field("messages_ready"), field("messages_unacknowledged"))
}

/// The largest value a kernel socket buffer of this kind may grow to, in bytes.
fn socket_buffer_max(proc_file: &str) -> usize {
    std::fs::read_to_string(proc_file)
        .ok()
        .and_then(|s| s.split_whitespace().last()?.parse().ok())
        .unwrap_or(8 << 20)
}

#[test]
fn one_connection_that_publishes_and_consumes_with_acks_does_not_deadlock() {
    const TOTAL: u64 = 200_000;
    const BATCH: u64 = 1_000;
    const BODY: usize = 256;
    let server = TestServer::start();
    let addr = server.addr_string();
    with_deadline(
        Duration::from_secs(240),
        "publish + consume on one connection",
        move || {
            let started = Instant::now();
            let conn = Connection::connect(&addr).unwrap();
            let publisher = conn.open_channel().unwrap();
            let consumer_ch = conn.open_channel().unwrap();
            publisher
                .queue_declare("loop", QueueDeclareOptions::default())
                .unwrap();
            consumer_ch.basic_qos(1000, false).unwrap();
            let consumer = consumer_ch
                .basic_consume("loop", Default::default())
                .unwrap();

            let producer = std::thread::spawn(move || {
                for from in (0..TOTAL).step_by(BATCH as usize) {
                    publisher
                        .publish_batch(&numbered_batch("loop", from, BATCH, BODY))
                        .expect("publish");
                }
            });

            let mut expected = 0;
            while expected < TOTAL {
                let d = match consumer.recv_timeout(Duration::from_secs(30)) {
                    Ok(ConsumerEvent::Delivery(d)) => d,
                    other => panic!("after {expected} deliveries: {other:?}"),
                };
                assert_eq!(seq_of(&d.body), expected, "deliveries in publish order");
                expected += 1;
                if expected % 100 == 0 {
                    consumer_ch.basic_ack(d.delivery_tag, true).unwrap();
                }
            }
            producer.join().expect("producer");
            assert_eq!(queue_counts(&conn, "loop"), (0, 0));
            eprintln!(
                "one connection moved {TOTAL} messages in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        },
    );
}

#[test]
fn a_consumer_that_stops_reading_leaves_messages_in_the_queue_until_it_reads_again() {
    const BODY: usize = 64 * 1024;
    const TOTAL: u64 = 4_800; // 300 MiB of bodies
    let server = TestServer::start();
    let addr = server.addr();
    with_deadline(
        Duration::from_secs(240),
        "non-reading consumer scenario",
        move || {
            // The consumer: no_ack, no prefetch limit, then it stops reading its socket.
            let mut raw = Raw::connect(addr);
            assert_eq!(raw.call(1, Method::ChannelOpen).2, Method::Ok);
            let (_, _, m) = raw.call(
                1,
                Method::QueueDeclare {
                    queue: "slow".into(),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: FieldTable::new(),
                },
            );
            assert!(matches!(m, Method::QueueDeclareOk { .. }), "{m:?}");
            let (_, _, m) = raw.call(
                1,
                Method::BasicConsume {
                    queue: "slow".into(),
                    consumer_tag: "sleepy".into(),
                    no_ack: true,
                    exclusive: false,
                    arguments: FieldTable::new(),
                },
            );
            assert!(matches!(m, Method::BasicConsumeOk { .. }), "{m:?}");

            // The producer, on its own connection, publishes 300 MiB with confirms.
            let conn = Connection::connect(&addr.to_string()).unwrap();
            let ch = conn.open_channel().unwrap();
            ch.confirm_select().unwrap();
            for from in (0..TOTAL).step_by(100) {
                ch.publish_batch(&numbered_batch("slow", from, 100, BODY))
                    .expect("publish");
            }
            assert!(ch.wait_for_confirms(Duration::from_secs(120)).unwrap());

            // At most the delivery high-water mark (plus the message that crossed it) and
            // what the kernel buffers on both sides may have left the queue.
            let in_flight_max = OUTBOUND_HIGH_WATER_BYTES
                + BODY
                + socket_buffer_max("/proc/sys/net/ipv4/tcp_wmem")
                + socket_buffer_max("/proc/sys/net/ipv4/tcp_rmem");
            let margin = 16;
            let ready_min = TOTAL as i64 - (in_flight_max / BODY) as i64 - margin;
            let (ready, unacked) = queue_counts(&conn, "slow");
            eprintln!(
                "while the consumer does not read: {ready} of {TOTAL} messages still ready \
             (at least {ready_min} required)"
            );
            assert_eq!(unacked, 0, "no_ack deliveries are never unacked");
            assert!(
                ready >= ready_min,
                "the server pushed {} messages towards a consumer that does not read",
                TOTAL as i64 - ready
            );

            // The consumer reads again: deliveries resume and everything arrives, in order.
            let mut expected = 0;
            while expected < TOTAL {
                let (ch, _, m) = raw
                    .recv()
                    .unwrap_or_else(|| panic!("disconnected after {expected} deliveries"));
                let Method::Deliver { deliveries } = m else {
                    panic!("expected basic.deliver, got {m:?}");
                };
                assert_eq!(ch, 1);
                for d in deliveries {
                    assert_eq!(d.body.len(), BODY);
                    assert_eq!(seq_of(&d.body), expected, "deliveries in publish order");
                    expected += 1;
                }
            }
            assert_eq!(queue_counts(&conn, "slow"), (0, 0));
        },
    );
}
