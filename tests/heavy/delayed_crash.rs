//! At-least-once delayed delivery across 20 SIGKILLs (`src/broker/delayed`): a real
//! `relaymq-server` (`--fsync always`) has a durable `x-delayed-message` exchange
//! (`x-delayed-type: direct`) bound to a durable classic queue and a durable quorum queue,
//! so a due message is stored by both queue kinds before its held record is settled. Each
//! round publishes confirmed persistent messages with seeded `x-delay`s of 1 to 1,500 ms
//! (one in ten 0: routed at once) and kills the server with SIGKILL at a seeded moment
//! while some are still held and others are coming due; the next round restarts it on
//! the same data directory, where the held messages wait again with their due times
//! (those due meanwhile go at once). A last round publishes on the final server, with a
//! consumer on each queue and no kill: no message arrives before its delay has passed
//! since it was published (the client's clock, no slack).
//!
//! Once the exchange holds nothing (`messages_delayed` of `GET /api/exchanges/%2F/…`)
//! every confirmed body is in each queue: nothing lost; a body seen twice in a queue is a
//! duplicate at-least-once allows (the kill fell between its copies' fsync and the
//! settlement of its held record): counted and reported. Every copy carries its published
//! `x-delay` negated. The seed is printed (`RELAYMQ_DELAYED_CRASH_SEED` repeats a run).

use crate::common;

use common::ServerProcess;
use relaymq::client::{
    Channel, ConsumeOptions, ConsumerEvent, ExchangeDeclareOptions, PublishMessage,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Kill rounds (a last round without a kill follows).
const ROUNDS: u64 = 20;

/// Confirmed messages published per round.
const PER_ROUND: usize = 200;

/// Longest seeded `x-delay`, in ms.
const DELAY_MS_MAX: u64 = 1_500;

/// One message in this many gets `x-delay` 0 (routed at once, not held).
const IMMEDIATE_ONE_IN: u64 = 10;

/// Longest seeded wait between a round's confirms and its kill, in ms: below
/// [`DELAY_MS_MAX`], so messages are still held when the server dies while earlier ones
/// are coming due.
const KILL_AFTER_MS_MAX: u64 = 1_000;

/// Time allowed to any single client call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait, after the last publish, for the exchange to hold nothing.
const HELD_WAIT: Duration = Duration::from_secs(60);

/// Wait after the exchange holds nothing before draining: the last batch taken from its
/// index may still be being routed into the queues.
const ROUTING_GRACE: Duration = Duration::from_millis(500);

/// The delayed-message exchange.
const EXCHANGE: &str = "delayed";

/// The binding key of both queues (the messages' routing key).
const KEY: &str = "k";

/// The queues bound to [`EXCHANGE`], with their `x-queue-type`.
const QUEUES: [(&str, &str); 2] = [("classic", "classic"), ("quorum", "quorum")];

/// `--fsync always`, and the HTTP API for `messages_delayed`.
const SERVER_FLAGS: [&str; 6] = [
    "--fsync",
    "always",
    "--log-level",
    "error",
    "--http-listen",
    "127.0.0.1:0",
];

/// Declares the exchange and the queues and binds them (again after each restart: an
/// equivalent redeclaration is a no-op).
fn declare(ch: &Channel) {
    let mut arguments = FieldTable::new();
    arguments.insert("x-delayed-type".into(), FieldValue::string("direct"));
    ch.exchange_declare(
        EXCHANGE,
        "x-delayed-message",
        ExchangeDeclareOptions {
            durable: true,
            arguments,
            ..ExchangeDeclareOptions::default()
        },
    )
    .unwrap();
    for (queue, kind) in QUEUES {
        common::declare_queue(
            ch,
            queue,
            true,
            &[("x-queue-type", FieldValue::string(kind))],
        );
        ch.queue_bind(queue, EXCHANGE, KEY, FieldTable::new())
            .unwrap();
    }
}

/// Publishes round `round`'s messages with seeded delays and waits for their confirms;
/// records each body's delay in `sent`.
fn publish_round(ch: &Channel, round: u64, seed: &mut u64, sent: &mut HashMap<String, u64>) {
    let batch: Vec<PublishMessage> = (0..PER_ROUND)
        .map(|i| {
            let delay = if common::splitmix64(seed).is_multiple_of(IMMEDIATE_ONE_IN) {
                0
            } else {
                1 + common::splitmix64(seed) % DELAY_MS_MAX
            };
            let body = format!("r{round}-m{i}");
            sent.insert(body.clone(), delay);
            let mut headers = FieldTable::new();
            headers.insert("x-delay".into(), FieldValue::I32(delay as i32));
            PublishMessage {
                exchange: EXCHANGE.into(),
                routing_key: KEY.into(),
                mandatory: false,
                properties: BasicProperties {
                    delivery_mode: Some(2),
                    headers: Some(headers),
                    ..BasicProperties::default()
                },
                body: body.into_bytes(),
            }
        })
        .collect();
    ch.publish_batch(&batch).unwrap();
    assert!(ch.wait_for_confirms(CALL_TIMEOUT).unwrap(), "confirmed");
}

/// One message taken from a queue: its body, its `x-delay` header, when the client got it.
struct Arrival {
    /// The body (the message's id).
    body: String,
    /// Its `x-delay` header, when an integer.
    x_delay: Option<i64>,
    /// When the client got it.
    at: Instant,
}

impl Arrival {
    /// A message received now.
    fn new(body: Vec<u8>, properties: &BasicProperties) -> Arrival {
        Arrival {
            body: String::from_utf8(body).expect("text body"),
            x_delay: properties
                .headers
                .as_ref()
                .and_then(|h| h.get("x-delay"))
                .and_then(FieldValue::as_i64),
            at: Instant::now(),
        }
    }
}

/// Starts a no-ack consumer on `queue`; its thread returns what arrived once the consumer
/// is cancelled (or its channel closes). Returns the consumer tag and the thread.
fn consume(ch: &Channel, queue: &str) -> (String, JoinHandle<Vec<Arrival>>) {
    let consumer = ch
        .basic_consume(
            queue,
            ConsumeOptions {
                no_ack: true,
                ..ConsumeOptions::default()
            },
        )
        .unwrap();
    let tag = consumer.tag().to_string();
    let thread = std::thread::spawn(move || {
        let mut arrivals = Vec::new();
        while let Ok(ConsumerEvent::Delivery(d)) = consumer.recv() {
            arrivals.push(Arrival::new(d.body, &d.properties));
        }
        arrivals
    });
    (tag, thread)
}

/// What one queue received, checked against what was published: the failures found (lost,
/// unknown, wrong `x-delay`, early), the duplicated bodies with their counts, and how soon
/// after its delay the promptest held message of the last round arrived.
struct QueueReport {
    /// What went wrong, one line each.
    failures: Vec<String>,
    /// The bodies received more than once, with how many times.
    duplicates: Vec<(String, usize)>,
    /// The smallest time between a held last-round message's delay and its arrival.
    closest: Option<Duration>,
}

/// Checks `arrivals` of `queue` against `sent` (body → published delay in ms); the bodies
/// of the last round (`last_prefix`), published at `published_at`, must not arrive before
/// their delay has passed.
fn check_queue(
    queue: &str,
    arrivals: &[Arrival],
    sent: &HashMap<String, u64>,
    last_prefix: &str,
    published_at: Instant,
) -> QueueReport {
    let mut failures = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut closest: Option<Duration> = None;
    for a in arrivals {
        *seen.entry(&a.body).or_default() += 1;
        let Some(&delay) = sent.get(&a.body) else {
            failures.push(format!("{queue}: {} was never published", a.body));
            continue;
        };
        // A held message comes with its delay negated; one of delay 0 was not held and
        // keeps its header (-0 = 0).
        if a.x_delay != Some(-(delay as i64)) {
            failures.push(format!(
                "{queue}: {} published with x-delay {delay} arrived with {:?}",
                a.body, a.x_delay
            ));
        }
        if !a.body.starts_with(last_prefix) || delay == 0 {
            continue;
        }
        let waited = a.at.saturating_duration_since(published_at);
        match waited.checked_sub(Duration::from_millis(delay)) {
            Some(late) => closest = Some(closest.map_or(late, |c| c.min(late))),
            None => failures.push(format!(
                "{queue}: {} with x-delay {delay} ms arrived early, {waited:?} after its publish",
                a.body
            )),
        }
    }
    let mut lost: Vec<&String> = sent
        .keys()
        .filter(|b| !seen.contains_key(b.as_str()))
        .collect();
    lost.sort();
    if !lost.is_empty() {
        failures.push(format!(
            "{queue}: {} confirmed bodies lost, first {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        ));
    }
    let mut duplicates: Vec<(String, usize)> = seen
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(b, n)| (b.to_string(), n))
        .collect();
    duplicates.sort();
    QueueReport {
        failures,
        duplicates,
        closest,
    }
}

#[test]
fn delayed_messages_survive_20_kills_at_least_once_and_never_early() {
    let started = Instant::now();
    let mut seed = common::seed_from_env("RELAYMQ_DELAYED_CRASH_SEED");
    eprintln!("RELAYMQ_DELAYED_CRASH_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Every confirmed body, with its published delay in ms.
    let mut sent = HashMap::new();
    for round in 0..ROUNDS {
        let server = ServerProcess::start(&data, &SERVER_FLAGS);
        let conn = common::connect_process(&server, CALL_TIMEOUT);
        let ch = conn.open_channel().unwrap();
        declare(&ch);
        ch.confirm_select().unwrap();
        publish_round(&ch, round, &mut seed, &mut sent);
        let kill_after = common::splitmix64(&mut seed) % KILL_AFTER_MS_MAX;
        std::thread::sleep(Duration::from_millis(kill_after));
        server.kill9();
    }

    // The last round: consumers on both queues first, then publish, no kill.
    let server = ServerProcess::start(&data, &SERVER_FLAGS);
    let conn = common::connect_process(&server, CALL_TIMEOUT);
    let ch = conn.open_channel().unwrap();
    declare(&ch);
    let consumers: Vec<(String, JoinHandle<Vec<Arrival>>)> =
        QUEUES.iter().map(|(q, _)| consume(&ch, q)).collect();
    let publisher = conn.open_channel().unwrap();
    publisher.confirm_select().unwrap();
    let published_at = Instant::now();
    publish_round(&publisher, ROUNDS, &mut seed, &mut sent);

    let api = server.api();
    let path = format!("/exchanges/%2F/{EXCHANGE}");
    common::wait_until(HELD_WAIT, "the exchange holds nothing", || {
        api.get_ok(&path)["messages_delayed"] == 0
    });
    std::thread::sleep(ROUTING_GRACE);

    let last_prefix = format!("r{ROUNDS}-");
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for ((queue, _), (tag, thread)) in QUEUES.iter().zip(consumers) {
        ch.basic_cancel(&tag).unwrap();
        let mut arrivals = thread.join().expect("consumer thread");
        let consumed = arrivals.len();
        let left = common::drain_each(&ch, queue, |m| {
            arrivals.push(Arrival::new(m.body, &m.properties));
        });
        let report = check_queue(queue, &arrivals, &sent, &last_prefix, published_at);
        failures.extend(report.failures);
        let extra: usize = report.duplicates.iter().map(|(_, n)| n - 1).sum();
        summary.push(format!(
            "{queue}: {} received ({consumed} consumed, {left} drained), last round's \
             promptest {:?} after its delay, {extra} duplicated {:?}",
            arrivals.len(),
            report.closest.unwrap_or_default(),
            report
                .duplicates
                .iter()
                .map(|(b, n)| format!("{b}x{n}"))
                .collect::<Vec<_>>()
        ));
    }
    eprintln!(
        "{ROUNDS} kills: {} confirmed; {}; in {:.1} s",
        sent.len(),
        summary.join("; "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(server.terminate().success());
}
