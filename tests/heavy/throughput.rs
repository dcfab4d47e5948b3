//! One producer and one consumer move a million small messages through one queue: all
//! arrive exactly once and in order. The rate is printed, never asserted; an overall
//! deadline (generous enough for a debug build) turns a stall into a clear failure.

use crate::common;

use common::TestServer;
use relaymq::client::{Connection, ConsumerEvent, PublishMessage, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TOTAL: u64 = 1_000_000;
const BODY_BYTES: usize = 16;
const PUBLISH_BATCH: u64 = 1_000;
const PREFETCH: u16 = 1_000;
const ACK_EVERY: u64 = 100;
const DEADLINE: Duration = Duration::from_secs(300);

/// A 16-byte body: the big-endian sequence number, then its bitwise complement (so a
/// corrupted body is noticed, not just a reordered one).
fn body(seq: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(BODY_BYTES);
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&(!seq).to_be_bytes());
    b
}

fn seq_of(body: &[u8]) -> u64 {
    assert_eq!(body.len(), BODY_BYTES, "body size");
    let seq = u64::from_be_bytes(body[..8].try_into().unwrap());
    let check = u64::from_be_bytes(body[8..].try_into().unwrap());
    assert_eq!(check, !seq, "body of message {seq} is corrupted");
    seq
}

fn run(addr: String) -> Duration {
    let consumer_conn = Connection::connect(&addr).expect("consumer connects");
    let ch = consumer_conn.open_channel().unwrap();
    ch.queue_declare("bench", QueueDeclareOptions::default())
        .unwrap();
    ch.basic_qos(PREFETCH, false).unwrap();
    let consumer = ch.basic_consume("bench", Default::default()).unwrap();

    let started = Instant::now();
    let producer = std::thread::spawn(move || {
        let conn = Connection::connect(&addr).expect("producer connects");
        let pch = conn.open_channel().unwrap();
        for from in (0..TOTAL).step_by(PUBLISH_BATCH as usize) {
            let batch: Vec<PublishMessage> = (from..from + PUBLISH_BATCH)
                .map(|seq| PublishMessage {
                    exchange: String::new(),
                    routing_key: "bench".into(),
                    mandatory: false,
                    properties: BasicProperties::default(),
                    body: body(seq),
                })
                .collect();
            pch.publish_batch(&batch).expect("publish");
        }
        pch.close().expect("producer channel closes cleanly");
        conn.close().expect("producer connection closes cleanly");
    });

    let mut expected = 0;
    while expected < TOTAL {
        let d = match consumer.recv_timeout(Duration::from_secs(30)) {
            Ok(ConsumerEvent::Delivery(d)) => d,
            other => panic!("after {expected} of {TOTAL} messages: {other:?}"),
        };
        assert_eq!(
            seq_of(&d.body),
            expected,
            "messages arrive once each, in order"
        );
        assert!(!d.redelivered);
        expected += 1;
        if expected % ACK_EVERY == 0 {
            ch.basic_ack(d.delivery_tag, true).unwrap();
        }
    }
    let elapsed = started.elapsed();
    producer.join().expect("producer");

    // Nothing extra is waiting or unacked.
    assert!(ch.basic_get("bench", true).unwrap().is_none());
    let declared = ch
        .queue_declare(
            "bench",
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(declared.message_count, 0);
    drop(consumer);
    ch.close().unwrap();
    consumer_conn.close().unwrap();
    elapsed
}

#[test]
fn one_producer_and_one_consumer_move_a_million_messages_in_order() {
    let server = TestServer::start();
    let addr = server.addr_string();
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(run(addr));
    });
    let elapsed = match rx.recv_timeout(DEADLINE) {
        Ok(elapsed) => elapsed,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("moving {TOTAL} messages took longer than the {DEADLINE:?} deadline")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker sends before it ends"),
        },
    };
    let _ = worker.join();
    let secs = elapsed.as_secs_f64();
    eprintln!(
        "throughput: {:.0} msg/s (1,000,000 messages, {secs:.2} s)",
        TOTAL as f64 / secs
    );
}
