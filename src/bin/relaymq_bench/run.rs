//! One benchmark run: declare the topology, start the consumers, then the producers,
//! report every second, wait for the consumers to drain what was published, check that
//! every queue delivered exactly what it was sent, clean up and summarise.

use super::args::{Amount, Options};
use super::report::{self, interval_line, Latency, Stats, Summary};
use super::{queued, rss};
use hdrhistogram::Histogram;
use relaymq::client::{
    Channel, ClientError, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent,
    ExchangeDeclareOptions, PublishMessage, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Prefix of the queue names: `relaymq-bench.q.0`, `relaymq-bench.q.1`, ...
pub const QUEUE_PREFIX: &str = "relaymq-bench.q.";

/// The exchange declared with `--exchange-type`.
pub const EXCHANGE: &str = "relaymq-bench.x";

/// The exchange the `--bindings` dummy bindings lead to (it has no bindings itself).
pub const SINK_EXCHANGE: &str = "relaymq-bench.sink";

/// Header the headers exchange routes on: the queue's name.
const ROUTE_HEADER: &str = "relaymq-bench-queue";

/// Messages a flat-out producer hands to `publish_batch` at once.
const PUBLISH_BATCH_MESSAGES: usize = 1_000;

/// Longest a paced producer sleeps before looking at the clock and the stop flag again.
const PACE_SLEEP_MAX: Duration = Duration::from_millis(10);

/// Time a producer waits for confirms before giving up.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Time a consumer waits for a delivery before it flushes its counts, acks what it holds
/// and looks at the stop flag.
const CONSUMER_POLL: Duration = Duration::from_millis(50);

/// Longest a consumer keeps counts and latencies to itself before sharing them.
const CONSUMER_FLUSH_INTERVAL: Duration = Duration::from_millis(50);

/// Time allowed for every consumer to be registered before publishing starts.
const CONSUMERS_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Time allowed after the producers finish for the consumers to receive what was
/// published.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Interval of the progress report and of the server's RSS samples.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// How often the main thread looks at the producers' and consumers' progress.
const MAIN_POLL: Duration = Duration::from_millis(5);

/// Nanoseconds per second.
const NS_PER_S: u128 = 1_000_000_000;

/// Bits of a body's sequence number that count messages within one producer (the
/// producer's index is above them).
const SEQ_PRODUCER_SHIFT: u32 = 40;

/// State every thread of the run shares.
struct Run {
    opts: Options,
    /// The origin of the send timestamps in the bodies.
    origin: Instant,
    stats: Stats,
    /// Set to end the producers early (duration over, or a failure).
    stop_producers: AtomicBool,
    /// Set once the drain is over.
    stop_consumers: AtomicBool,
    /// Producers still running.
    producers_running: AtomicUsize,
}

fn queue_name(i: usize) -> String {
    format!("{QUEUE_PREFIX}{i}")
}

fn connect(opts: &Options, role: &str) -> Result<Connection, String> {
    let t = &opts.target;
    Connection::connect_with(ConnectOptions {
        addr: t.addr.clone(),
        user: t.user.clone(),
        password: t.password.clone(),
        vhost: t.vhost.clone(),
        client_name: format!("relaymq-bench {role}"),
        ..ConnectOptions::default()
    })
    .map_err(|e| format!("{role}: cannot connect to {}: {e}", t.addr))
}

/// Runs the benchmark; `Err` holds why the run failed, with the summary when there is
/// one to show.
pub fn run(opts: Options) -> Result<Summary, (String, Option<Summary>)> {
    let admin = connect(&opts, "setup").map_err(|e| (e, None))?;
    // A null relay listens in this very process: its RSS is not a server's.
    let server_pid = (!opts.null_relay)
        .then(|| rss::find_server_pid(&opts.target.addr))
        .flatten();
    let mut rss_max: Option<u64> = None;
    let sample_rss = |max: &mut Option<u64>| -> Option<u64> {
        let now = server_pid.and_then(rss::rss_bytes);
        if let Some(b) = now {
            *max = Some(max.map_or(b, |m| m.max(b)));
        }
        now
    };
    sample_rss(&mut rss_max);
    declare(&admin, &opts).map_err(|e| (format!("declaring the topology: {e}"), None))?;

    let stats = Stats::new(opts.queues).map_err(|e| (e, None))?;
    let run = Arc::new(Run {
        origin: Instant::now(),
        stats,
        stop_producers: AtomicBool::new(false),
        stop_consumers: AtomicBool::new(false),
        producers_running: AtomicUsize::new(opts.producers),
        opts: opts.clone(),
    });
    let mut failures: Vec<String> = Vec::new();

    // Consumers first, each registered before anything is published.
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let consumers: Vec<JoinHandle<Result<(), String>>> = (0..opts.consumers)
        .map(|i| {
            let run = Arc::clone(&run);
            let ready = ready_tx.clone();
            std::thread::spawn(move || consume(&run, i, ready))
        })
        .collect();
    drop(ready_tx);
    let ready_deadline = Instant::now() + CONSUMERS_READY_TIMEOUT;
    for _ in 0..opts.consumers {
        let left = ready_deadline.saturating_duration_since(Instant::now());
        match ready_rx.recv_timeout(left) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("consumers did not start in time".into()),
        }
        if !failures.is_empty() {
            break;
        }
    }

    let started = Instant::now();
    let mut publish_end = started;
    let mut producers = Vec::new();
    if failures.is_empty() {
        producers = (0..opts.producers)
            .map(|i| {
                let run = Arc::clone(&run);
                std::thread::spawn(move || {
                    let r = produce(&run, i);
                    if r.is_err() {
                        run.stop_producers.store(true, Ordering::Relaxed);
                    }
                    run.producers_running.fetch_sub(1, Ordering::Release);
                    r
                })
            })
            .collect();
    } else {
        run.producers_running.store(0, Ordering::Release);
    }

    // Publishing, then draining, with a line every second.
    let mut last_report = Instant::now();
    let mut last_counts = (0, 0, 0);
    let mut total = report::new_histogram().map_err(|e| (e, None))?;
    let deadline = match opts.amount {
        Amount::Seconds(s) => Some(started + Duration::from_secs(s)),
        Amount::Messages(_) => None,
    };
    let mut producers_done = false;
    let mut drain_deadline = None;
    let mut run_end = None;
    while run_end.is_none() {
        std::thread::sleep(MAIN_POLL);
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            run.stop_producers.store(true, Ordering::Relaxed);
        }
        if !producers_done && run.producers_running.load(Ordering::Acquire) == 0 {
            producers_done = true;
            publish_end = Instant::now();
            for p in producers.drain(..) {
                match p.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failures.push(e),
                    Err(_) => failures.push("a producer thread panicked".into()),
                }
            }
            drain_deadline = Some(Instant::now() + DRAIN_TIMEOUT);
        }
        if producers_done {
            if !failures.is_empty() || opts.consumers == 0 || drained(&run) {
                run_end = Some(if opts.consumers == 0 {
                    publish_end
                } else {
                    now
                });
            } else if drain_deadline.is_some_and(|d| now >= d) {
                failures.push(format!(
                    "consumers did not receive everything published within {} s of the end \
                     of publishing",
                    DRAIN_TIMEOUT.as_secs()
                ));
                run_end = Some(now);
            }
        }
        if now.duration_since(last_report) >= REPORT_INTERVAL {
            let rss_now = sample_rss(&mut rss_max);
            let interval = run.stats.take_interval();
            let _ = total.add(&interval);
            let counts = run.stats.counts();
            if !opts.json {
                let delta = (
                    counts.0 - last_counts.0,
                    counts.1 - last_counts.1,
                    counts.2 - last_counts.2,
                );
                let line = interval_line(
                    now.duration_since(started).as_secs_f64(),
                    delta,
                    now.duration_since(last_report).as_secs_f64(),
                    Latency::of(&interval),
                    rss_now,
                );
                let _ = writeln!(std::io::stdout(), "{line}");
            }
            last_counts = counts;
            last_report = now;
        }
    }
    let run_end = run_end.unwrap_or_else(Instant::now);

    run.stop_consumers.store(true, Ordering::Relaxed);
    for c in consumers {
        match c.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("a consumer thread panicked".into()),
        }
    }
    let _ = total.add(run.stats.take_interval());
    if opts.consumers == 0 && !opts.null_relay && failures.is_empty() {
        let published = run.stats.published.load(Ordering::Relaxed);
        if let Err(e) = queued::wait_until_queued(&admin, &opts, published) {
            failures.push(e);
        }
    }
    sample_rss(&mut rss_max);
    if let Err(e) = clean_up(&admin, &opts) {
        failures.push(format!("cleaning up: {e}"));
    }
    let _ = admin.close();

    let (published, confirmed, delivered) = run.stats.counts();
    let summary = Summary {
        messages_published: published,
        messages_confirmed: confirmed,
        messages_delivered: delivered,
        publish_seconds: publish_end.duration_since(started).as_secs_f64(),
        seconds: run_end.duration_since(started).as_secs_f64(),
        latency: Latency::of(&total),
        server_rss_bytes: rss_max,
    };
    if failures.is_empty() && opts.consumers > 0 {
        failures.extend(check_counts(&run));
    }
    if failures.is_empty() {
        Ok(summary)
    } else {
        Err((failures.join("; "), Some(summary)))
    }
}

/// Messages each queue should deliver, from what was published.
fn expected_per_queue(run: &Run) -> Vec<u64> {
    let published = run.stats.published.load(Ordering::Relaxed);
    let fanout = run.opts.exchange_type.as_deref() == Some("fanout");
    run.stats
        .published_to
        .iter()
        .map(|n| {
            if fanout {
                published
            } else {
                n.load(Ordering::Relaxed)
            }
        })
        .collect()
}

/// Whether every queue delivered at least what it was sent.
fn drained(run: &Run) -> bool {
    expected_per_queue(run)
        .iter()
        .zip(&run.stats.delivered_from)
        .all(|(want, got)| got.load(Ordering::Relaxed) >= *want)
}

/// One message per queue for each lost or duplicated delivery.
fn check_counts(run: &Run) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, (want, got)) in expected_per_queue(run)
        .iter()
        .zip(&run.stats.delivered_from)
        .enumerate()
    {
        let got = got.load(Ordering::Relaxed);
        if got < *want {
            problems.push(format!(
                "{}: {} of {want} messages lost (delivered {got})",
                queue_name(i),
                want - got
            ));
        } else if got > *want {
            problems.push(format!(
                "{}: {} duplicate deliveries (delivered {got}, sent {want})",
                queue_name(i),
                got - want
            ));
        }
    }
    let redelivered = run.stats.redelivered.load(Ordering::Relaxed);
    if redelivered > 0 {
        problems.push(format!("{redelivered} deliveries were redeliveries"));
    }
    problems
}

/// Runs `f` on a channel, opening a fresh one after a server refusal closed it.
fn on_channel<T>(
    conn: &Connection,
    ch: &mut Channel,
    f: impl FnOnce(&Channel) -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    let r = f(ch);
    if !ch.is_open() {
        *ch = conn.open_channel()?;
    }
    r
}

/// Removes what an earlier run may have left, then declares the queues, the exchange,
/// the bindings and the dummy bindings.
fn declare(conn: &Connection, opts: &Options) -> Result<(), ClientError> {
    clean_up(conn, opts)?;
    let ch = conn.open_channel()?;
    for i in 0..opts.queues {
        ch.queue_declare(
            &queue_name(i),
            QueueDeclareOptions {
                durable: opts.persistent,
                ..Default::default()
            },
        )?;
    }
    let Some(kind) = opts.exchange_type.as_deref() else {
        return ch.close();
    };
    let xopts = || ExchangeDeclareOptions {
        durable: opts.persistent,
        ..Default::default()
    };
    ch.exchange_declare(EXCHANGE, kind, xopts())?;
    for i in 0..opts.queues {
        let name = queue_name(i);
        let (key, args) = match kind {
            "fanout" => (String::new(), FieldTable::new()),
            "headers" => (String::new(), headers_match(ROUTE_HEADER, &name)),
            _ => (name.clone(), FieldTable::new()),
        };
        ch.queue_bind(&name, EXCHANGE, &key, args)?;
    }
    if opts.bindings > 0 {
        ch.exchange_declare(SINK_EXCHANGE, "fanout", xopts())?;
        for i in 0..opts.bindings {
            // Keys and header values no published message carries.
            let dummy = format!("relaymq-bench.dummy.{i}");
            let args = if kind == "headers" {
                headers_match("relaymq-bench-dummy", &dummy)
            } else {
                FieldTable::new()
            };
            ch.exchange_bind(SINK_EXCHANGE, EXCHANGE, &dummy, args)?;
        }
    }
    ch.close()
}

/// Binding arguments of a headers exchange matching `key = value`.
fn headers_match(key: &str, value: &str) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-match".into(), FieldValue::string("all"));
    t.insert(key.into(), FieldValue::string(value));
    t
}

/// Deletes the queues and exchanges of a run; missing ones are fine.
fn clean_up(conn: &Connection, opts: &Options) -> Result<(), ClientError> {
    let mut ch = conn.open_channel()?;
    let missing = |e: &ClientError| e.reply_code() == Some(404);
    for i in 0..opts.queues {
        match on_channel(conn, &mut ch, |c| {
            c.queue_delete(&queue_name(i), false, false)
        }) {
            Ok(_) => {}
            Err(e) if missing(&e) => {}
            Err(e) => return Err(e),
        }
    }
    for x in [EXCHANGE, SINK_EXCHANGE] {
        match on_channel(conn, &mut ch, |c| c.exchange_delete(x, false)) {
            Ok(()) => {}
            Err(e) if missing(&e) => {}
            Err(e) => return Err(e),
        }
    }
    ch.close()
}

/// A body of `size` bytes: the send time (ns since the run's origin), then `seq`.
fn fill_body(body: &mut [u8], sent_ns: u64, seq: u64) {
    body[..8].copy_from_slice(&sent_ns.to_be_bytes());
    body[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// Nanoseconds since the run's origin.
fn now_ns(run: &Run) -> u64 {
    u64::try_from(run.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Splits `total` into `parts` shares differing by at most one.
fn share(total: u64, parts: usize, i: usize) -> u64 {
    let parts = parts as u64;
    total / parts + u64::from((i as u64) < total % parts)
}

/// One producer: publishes round-robin over the queues until its share of `--count` is
/// sent or the run is told to stop.
fn produce(run: &Run, index: usize) -> Result<(), String> {
    let opts = &run.opts;
    let role = format!("producer {index}");
    let conn = connect(opts, &role)?;
    let fail = |e: ClientError| format!("{role}: {e}");
    let ch = conn.open_channel().map_err(fail)?;
    if opts.confirm.is_some() {
        ch.confirm_select().map_err(fail)?;
    }
    let quota = match opts.amount {
        Amount::Messages(n) => Some(share(n, opts.producers, index)),
        Amount::Seconds(_) => None,
    };
    let rate = if opts.rate > 0 {
        Some(share(opts.rate, opts.producers, index).max(1))
    } else {
        None
    };
    let kind = opts.exchange_type.as_deref();
    let exchange = if kind.is_some() { EXCHANGE } else { "" };
    // Per queue: the routing key and the properties of its messages.
    let routes: Vec<(String, BasicProperties)> = (0..opts.queues)
        .map(|q| {
            let name = queue_name(q);
            let mut props = BasicProperties::default();
            if opts.persistent {
                props.delivery_mode = Some(2);
            }
            match kind {
                Some("fanout") => (String::new(), props),
                Some("headers") => {
                    let mut h = FieldTable::new();
                    h.insert(ROUTE_HEADER.into(), FieldValue::string(name));
                    props.headers = Some(h);
                    (String::new(), props)
                }
                _ => (name, props),
            }
        })
        .collect();
    let batch_max = opts
        .confirm
        .map_or(PUBLISH_BATCH_MESSAGES, |w| w.min(PUBLISH_BATCH_MESSAGES));
    let mut next_queue = index % opts.queues;
    let mut sent: u64 = 0;
    let mut confirmed: u64 = 0;
    let mut per_queue = vec![0u64; opts.queues];
    let mut batch: Vec<PublishMessage> = Vec::with_capacity(batch_max);
    let seq_base = (index as u64) << SEQ_PRODUCER_SHIFT;
    let paced_from = Instant::now();
    loop {
        if run.stop_producers.load(Ordering::Relaxed) {
            break;
        }
        let left = quota.map_or(u64::MAX, |q| q - sent);
        if left == 0 {
            break;
        }
        let mut n = (batch_max as u64).min(left);
        if let Some(r) = rate {
            let elapsed = paced_from.elapsed().as_nanos();
            let due = (elapsed * u128::from(r) / NS_PER_S) as u64;
            if due <= sent {
                let next_at = Duration::from_nanos(
                    u64::try_from(u128::from(sent + 1) * NS_PER_S / u128::from(r))
                        .unwrap_or(u64::MAX),
                );
                let wait = next_at.saturating_sub(paced_from.elapsed());
                std::thread::sleep(wait.min(PACE_SLEEP_MAX));
                continue;
            }
            n = n.min(due - sent);
        }
        if let Some(window) = opts.confirm {
            let limit = window.saturating_sub(n as usize);
            let (unconfirmed, all_acked) = ch
                .wait_for_confirms_at_most(limit, CONFIRM_TIMEOUT)
                .map_err(|e| format!("{role}: waiting for confirms: {e}"))?;
            if !all_acked {
                return Err(format!("{role}: the server nacked a publish"));
            }
            let now_confirmed = sent - unconfirmed as u64;
            run.stats
                .confirmed
                .fetch_add(now_confirmed - confirmed, Ordering::Relaxed);
            confirmed = now_confirmed;
        }
        batch.clear();
        let sent_ns = now_ns(run);
        for k in 0..n {
            let (key, props) = &routes[next_queue];
            per_queue[next_queue] += 1;
            next_queue = (next_queue + 1) % opts.queues;
            let mut body = vec![0u8; opts.size];
            fill_body(&mut body, sent_ns, seq_base + sent + k);
            batch.push(PublishMessage {
                exchange: exchange.into(),
                routing_key: key.clone(),
                mandatory: false,
                properties: props.clone(),
                body,
            });
        }
        ch.publish_batch(&batch).map_err(fail)?;
        sent += n;
        // Counted per queue before the total: a consumer never sees a total that
        // includes messages its queue was not yet told about.
        for (q, c) in per_queue.iter_mut().enumerate() {
            if *c > 0 {
                run.stats.published_to[q].fetch_add(*c, Ordering::Relaxed);
                *c = 0;
            }
        }
        run.stats.published.fetch_add(n, Ordering::Relaxed);
    }
    if opts.confirm.is_some() {
        let all_acked = ch
            .wait_for_confirms(CONFIRM_TIMEOUT)
            .map_err(|e| format!("{role}: waiting for the last confirms: {e}"))?;
        if !all_acked {
            return Err(format!("{role}: the server nacked a publish"));
        }
        run.stats
            .confirmed
            .fetch_add(sent - confirmed, Ordering::Relaxed);
    }
    ch.close().map_err(fail)?;
    conn.close().map_err(fail)
}

/// One consumer of queue `index % queues`: counts deliveries, records latencies and
/// acks (every `--multi-ack` with multiple) until the run is drained.
fn consume(run: &Run, index: usize, ready: mpsc::Sender<Result<(), String>>) -> Result<(), String> {
    let r = consume_inner(run, index, &ready);
    if let Err(e) = &r {
        // Unblocks the main thread when the failure came before the consumer was ready.
        let _ = ready.send(Err(e.clone()));
    }
    r
}

fn consume_inner(
    run: &Run,
    index: usize,
    ready: &mpsc::Sender<Result<(), String>>,
) -> Result<(), String> {
    let opts = &run.opts;
    let queue = index % opts.queues;
    let role = format!("consumer {index}");
    let fail = |e: ClientError| format!("{role}: {e}");
    let conn = connect(opts, &role)?;
    let ch = conn.open_channel().map_err(fail)?;
    if opts.prefetch > 0 && !opts.no_ack {
        ch.basic_qos(opts.prefetch, false).map_err(fail)?;
    }
    let consumer = ch
        .basic_consume(
            &queue_name(queue),
            ConsumeOptions {
                no_ack: opts.no_ack,
                ..Default::default()
            },
        )
        .map_err(fail)?;
    let _ = ready.send(Ok(()));
    let mut latencies: Histogram<u64> = report::new_histogram()?;
    let mut delivered: u64 = 0;
    let mut redelivered: u64 = 0;
    let mut unacked: u64 = 0;
    let mut last_tag: u64 = 0;
    let mut last_flush = Instant::now();
    let flush = |delivered: &mut u64, redelivered: &mut u64, h: &mut Histogram<u64>| {
        run.stats.merge_latencies(h);
        run.stats.delivered_from[queue].fetch_add(*delivered, Ordering::Relaxed);
        run.stats.delivered.fetch_add(*delivered, Ordering::Relaxed);
        run.stats
            .redelivered
            .fetch_add(*redelivered, Ordering::Relaxed);
        *delivered = 0;
        *redelivered = 0;
    };
    loop {
        match consumer.recv_timeout(CONSUMER_POLL) {
            Ok(ConsumerEvent::Delivery(d)) => {
                let now = now_ns(run);
                if d.body.len() != opts.size {
                    return Err(format!(
                        "{role}: a body of {} bytes arrived, {} were sent",
                        d.body.len(),
                        opts.size
                    ));
                }
                let mut sent = [0u8; 8];
                sent.copy_from_slice(&d.body[..8]);
                let sent = u64::from_be_bytes(sent);
                latencies.saturating_record(now.saturating_sub(sent).max(1));
                delivered += 1;
                redelivered += u64::from(d.redelivered);
                if !opts.no_ack {
                    unacked += 1;
                    last_tag = d.delivery_tag;
                    if unacked >= opts.multi_ack {
                        ch.basic_ack(last_tag, opts.multi_ack > 1).map_err(fail)?;
                        unacked = 0;
                    }
                }
                if last_flush.elapsed() >= CONSUMER_FLUSH_INTERVAL {
                    flush(&mut delivered, &mut redelivered, &mut latencies);
                    last_flush = Instant::now();
                    if run.stop_consumers.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            Ok(ConsumerEvent::Cancelled) => {
                return Err(format!("{role}: the server cancelled the consumer"))
            }
            Err(ClientError::Timeout) => {
                if unacked > 0 {
                    ch.basic_ack(last_tag, true).map_err(fail)?;
                    unacked = 0;
                }
                flush(&mut delivered, &mut redelivered, &mut latencies);
                last_flush = Instant::now();
                if run.stop_consumers.load(Ordering::Relaxed) {
                    break;
                }
            }
            Err(e) => return Err(fail(e)),
        }
    }
    if unacked > 0 {
        ch.basic_ack(last_tag, true).map_err(fail)?;
    }
    flush(&mut delivered, &mut redelivered, &mut latencies);
    consumer.cancel().map_err(fail)?;
    drop(consumer);
    ch.close().map_err(fail)?;
    conn.close().map_err(fail)
}
