//! Space reclaim on a real server: 10,000 persistent messages acked out of order shrink
//! the queue's files through compaction and segment deletion, and a SIGKILL in the middle
//! of it loses no unacked message (issue 3, compaction acceptance).

use crate::common;

use common::ServerProcess;
use relaymq::client::{
    Channel, Connection, ConsumeOptions, ConsumerEvent, ListKind, PublishMessage,
    QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldValue};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const MESSAGES: usize = 10_000;
const QUEUE: &str = "compact.q";

fn disk_bytes(conn: &Connection) -> i64 {
    conn.list(ListKind::Queues)
        .unwrap()
        .iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some(QUEUE))
        .and_then(|r| r.get("disk_bytes").and_then(FieldValue::as_i64))
        .expect("disk_bytes of the queue")
}

fn publish_all(ch: &Channel) {
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    ch.confirm_select().unwrap();
    let batch: Vec<PublishMessage> = (0..MESSAGES)
        .map(|i| PublishMessage {
            exchange: String::new(),
            routing_key: QUEUE.into(),
            mandatory: false,
            properties: props.clone(),
            body: format!("{i:016}").into_bytes(),
        })
        .collect();
    ch.publish_batch(&batch).unwrap();
    assert!(ch.wait_for_confirms(Duration::from_secs(60)).unwrap());
}

fn index(body: &[u8]) -> usize {
    std::str::from_utf8(body).unwrap().parse().unwrap()
}

#[test]
fn acks_out_of_order_shrink_the_files_and_a_kill_meanwhile_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // ~2,800 records of ~70 bytes per segment: sealed segments pass the 2,000-record mark.
    let flags = ["--segment-bytes", "196608", "--fsync", "always"];
    let server = ServerProcess::start(&data, &flags);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(QUEUE, durable).unwrap();
    publish_all(&ch);
    let before = disk_bytes(&conn);

    // Take every message, ack four out of five (out of order: by index pattern, across
    // segments), keep the fifth unacked.
    let cch = conn.open_channel().unwrap();
    cch.basic_qos(0, false).unwrap();
    let consumer = cch.basic_consume(QUEUE, ConsumeOptions::default()).unwrap();
    let mut kept = BTreeSet::new();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < MESSAGES {
        assert!(Instant::now() < deadline, "only {seen} messages arrived");
        match consumer.recv_timeout(Duration::from_secs(10)).unwrap() {
            ConsumerEvent::Delivery(d) => {
                seen += 1;
                let i = index(&d.body);
                if i.is_multiple_of(5) {
                    kept.insert(i);
                } else {
                    cch.basic_ack(d.delivery_tag, false).unwrap();
                }
            }
            ConsumerEvent::Cancelled => panic!("consumer cancelled"),
        }
    }
    // A round trip makes sure the acks were processed.
    conn.list(ListKind::Queues).unwrap();
    let shrunk_by = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let now = disk_bytes(&conn);
        if now * 4 < before * 3 || Instant::now() > shrunk_by {
            break now;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Records are ~70 bytes and each delivery and ack adds a 13-byte log entry, and the
    // active segment is never compacted: a quarter off is what compaction must at least
    // give back here.
    assert!(
        after * 4 < before * 3,
        "disk use fell only from {before} to {after} bytes after 80% were acked"
    );

    // Crash while unacked messages are held: they must all come back.
    drop(consumer);
    server.kill9();
    let server = ServerProcess::start(&data, &flags);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let mut back = BTreeSet::new();
    while let Some(m) = ch.basic_get(QUEUE, true).unwrap() {
        assert!(back.insert(index(&m.body)), "duplicate {}", index(&m.body));
    }
    let missing: Vec<_> = kept.difference(&back).collect();
    assert!(missing.is_empty(), "lost unacked messages: {missing:?}");
    conn.close().unwrap();
    assert!(server.terminate().success());
}
