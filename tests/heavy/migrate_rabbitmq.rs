//! `relaymq-cli migrate` against a real RabbitMQ, when one is given (the test skips,
//! saying so, when none is): `RELAYMQ_TEST_RABBITMQ_URI=amqp://USER:PASS@HOST:PORT` and
//! `RELAYMQ_TEST_RABBITMQ_API=http://HOST:PORT` (default port 15672 of the URI's host).
//! `tests/fixtures/migrate-from-rabbitmq.sh` runs it against a throwaway Debian
//! RabbitMQ node.
//!
//! 20 durable queues `relaymq-migrate-NN` are (re)created on the RabbitMQ with 5,000
//! confirmed persistent messages each (100,000), then migrated into a fresh
//! `relaymq-server`: every body arrives once per queue, in order, and the RabbitMQ queues
//! end empty (they are deleted afterwards). The command's own rate line is printed.

use crate::common::{self, ServerProcess};
use relaymq::amqp_client::uri::AmqpUri;
use relaymq::amqp_client::Connection;
use relaymq::client::QueueDeclareOptions;
use relaymq::types::BasicProperties;
use std::time::{Duration, Instant};

/// Queues moved.
const QUEUES: usize = 20;

/// Messages per queue.
const PER_QUEUE: usize = 5_000;

fn queue(i: usize) -> String {
    format!("relaymq-migrate-{i:02}")
}

#[test]
fn migrate_drains_a_real_rabbitmq_into_relaymq() {
    let Ok(uri_text) = std::env::var("RELAYMQ_TEST_RABBITMQ_URI") else {
        println!(
            "skipped: no RabbitMQ given (set RELAYMQ_TEST_RABBITMQ_URI=amqp://USER:PASS@HOST:PORT \
             and RELAYMQ_TEST_RABBITMQ_API=http://HOST:PORT, or run \
             tests/fixtures/migrate-from-rabbitmq.sh)"
        );
        return;
    };
    let uri = AmqpUri::parse(&uri_text).expect("RELAYMQ_TEST_RABBITMQ_URI is an AMQP URI");
    let api = std::env::var("RELAYMQ_TEST_RABBITMQ_API")
        .unwrap_or_else(|_| format!("http://{}:15672", uri.host.clone().unwrap_or_default()));
    let mut rabbit = Connection::connect(&uri.connect_options("relaymq test", None).unwrap())
        .expect("the RabbitMQ answers");
    rabbit.confirm_select().unwrap();
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    let filled = Instant::now();
    for i in 0..QUEUES {
        let q = queue(i);
        rabbit.queue_delete(&q, false, false).unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        rabbit.queue_declare(&q, durable).unwrap();
        let p = rabbit.prepare_publish("", &q, &props).unwrap();
        for n in 0..PER_QUEUE {
            rabbit.publish(&p, format!("{q}-{n}").as_bytes()).unwrap();
            if n % 1000 == 999 {
                rabbit
                    .wait_confirms_at_most(0, Duration::from_secs(60))
                    .unwrap();
            }
        }
    }
    rabbit
        .wait_confirms_at_most(0, Duration::from_secs(60))
        .unwrap();
    println!(
        "{} messages in {QUEUES} queues published to the RabbitMQ in {:.1} s",
        QUEUES * PER_QUEUE,
        filled.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir().unwrap();
    let relaymq = ServerProcess::start(&dir.path().join("data"), &["--amqp-listen", "off"]);
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args([
            "--addr",
            &relaymq.addr_string(),
            "migrate",
            "--from",
            &uri_text,
            "--from-api",
            &api,
        ])
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "migrated {} messages in {:.1} s: {:.0} messages/s (import included)",
        QUEUES * PER_QUEUE,
        took.as_secs_f64(),
        (QUEUES * PER_QUEUE) as f64 / took.as_secs_f64()
    );
    let c = common::connect_process(&relaymq, Duration::from_secs(30));
    let ch = c.open_channel().unwrap();
    let passive = || QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    for i in 0..QUEUES {
        let q = queue(i);
        let mut bodies = Vec::with_capacity(PER_QUEUE);
        common::drain_each(&ch, &q, |m| bodies.push(String::from_utf8(m.body).unwrap()));
        let want: Vec<String> = (0..PER_QUEUE).map(|n| format!("{q}-{n}")).collect();
        assert_eq!(bodies.len(), PER_QUEUE, "{q}: every message arrived once");
        assert_eq!(bodies, want, "{q}: in order");
        let left = rabbit.queue_declare(&q, passive()).unwrap().message_count;
        assert_eq!(left, 0, "{q} drained at the RabbitMQ");
        rabbit.queue_delete(&q, false, false).unwrap();
    }
    rabbit.close().unwrap();
}
