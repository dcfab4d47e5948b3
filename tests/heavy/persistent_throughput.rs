//! Persistent publish throughput with publisher confirms under `--fsync always`: 1 and 8
//! publishers, 16-byte bodies, each with a window of confirms in flight. Prints the
//! figures (never asserts a speed): every message must be confirmed and stored.

use crate::common;

use common::TestServer;
use relaymq::client::{Connection, PublishMessage, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::time::{Duration, Instant};

/// Messages each publisher sends.
const PER_PUBLISHER: usize = 20_000;
/// Publishes in flight per publisher before it waits for their confirms.
const WINDOW: usize = 100;

fn run(publishers: usize) {
    let server = TestServer::start();
    let addr = server.addr_string();
    let setup = Connection::connect(&addr).unwrap();
    let ch = setup.open_channel().unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("persistent.bench", durable).unwrap();
    let started = Instant::now();
    let handles: Vec<_> = (0..publishers)
        .map(|p| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let conn = Connection::connect(&addr).unwrap();
                let ch = conn.open_channel().unwrap();
                ch.confirm_select().unwrap();
                let props = BasicProperties {
                    delivery_mode: Some(2),
                    ..BasicProperties::default()
                };
                for chunk in 0..PER_PUBLISHER / WINDOW {
                    let batch: Vec<PublishMessage> = (0..WINDOW)
                        .map(|i| PublishMessage {
                            exchange: String::new(),
                            routing_key: "persistent.bench".into(),
                            mandatory: false,
                            properties: props.clone(),
                            body: format!("{p:02}-{:013}", chunk * WINDOW + i).into_bytes(),
                        })
                        .collect();
                    ch.publish_batch(&batch).unwrap();
                    assert!(ch.wait_for_confirms(Duration::from_secs(60)).unwrap());
                }
                conn.close().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let total = publishers * PER_PUBLISHER;
    let declared = ch
        .queue_declare(
            "persistent.bench",
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(
        declared.message_count as usize, total,
        "every confirmed message is queued"
    );
    let rate = total as f64 / secs;
    eprintln!(
        "persistent throughput: {publishers} publisher(s): {rate:.0} msg/s confirmed \
         ({total} x 16 B, window {WINDOW}, fsync always, {secs:.2} s)"
    );
}

#[test]
fn persistent_publishes_with_confirms_under_fsync_always() {
    run(1);
    run(8);
}
