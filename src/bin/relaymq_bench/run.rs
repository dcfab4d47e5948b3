//! One benchmark run: declare the topology, start the consumers, then the producers,
//! report every second, wait for the consumers to drain what was published, check that
//! every queue delivered exactly what it was sent, clean up and summarise.
//!
//! The same run over either protocol: the connections are [`session`]s, native or AMQP
//! by the URI's scheme.

use super::args::{Amount, Options};
use super::report::{self, interval_line, Latency, Stats, Summary};
use super::session::{self, AdminSession, Batch, DeliveryInfo, Route};
use super::{interrupt, queued, rss};
use hdrhistogram::Histogram;
use relaymq::types::properties::DELIVERY_MODE_PERSISTENT;
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

/// Bytes of bodies a publish batch carries at most (the server refuses a batch payload
/// over its message size limit, 16 MiB by default).
const PUBLISH_BATCH_BYTES_MAX: usize = 1024 * 1024;

/// With `--confirm N`, a publish batch is at most N / this many messages.
const CONFIRM_BATCHES_PER_WINDOW: usize = 4;

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

/// Runs the benchmark; `Err` holds why the run failed, with the summary when there is
/// one to show.
pub fn run(opts: Options) -> Result<Summary, (String, Option<Summary>)> {
    let mut admin = session::connect_admin(&opts).map_err(|e| (format!("setup: {e}"), None))?;
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
    declare(admin.as_mut(), &opts).map_err(|e| (format!("declaring the topology: {e}"), None))?;

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
        if deadline.is_some_and(|d| now >= d) || interrupt::interrupted() {
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
            // A consumer that ended on its own failed: no use waiting for the drain.
            let consumer_failed = consumers.iter().any(|c| c.is_finished());
            if interrupt::interrupted() {
                failures.push("interrupted (Ctrl-C): the queues were deleted".into());
                run_end = Some(now);
            } else if !failures.is_empty()
                || consumer_failed
                || opts.consumers == 0
                || drained(&run)
            {
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
        if let Err(e) = queued::wait_until_queued(admin.as_mut(), &opts, published) {
            failures.push(e);
        }
    }
    sample_rss(&mut rss_max);
    if let Err(e) = clean_up(admin.as_mut(), &opts) {
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

/// Removes what an earlier run may have left, then declares the queues, the exchange,
/// the bindings and the dummy bindings.
fn declare(admin: &mut dyn AdminSession, opts: &Options) -> Result<(), String> {
    clean_up(admin, opts)?;
    for i in 0..opts.queues {
        admin.queue_declare(&queue_name(i), opts.persistent)?;
    }
    let Some(kind) = opts.exchange_type.as_deref() else {
        return Ok(());
    };
    admin.exchange_declare(EXCHANGE, kind, opts.persistent)?;
    for i in 0..opts.queues {
        let name = queue_name(i);
        let (key, args) = match kind {
            "fanout" => (String::new(), FieldTable::new()),
            "headers" => (String::new(), headers_match(ROUTE_HEADER, &name)),
            _ => (name.clone(), FieldTable::new()),
        };
        admin.queue_bind(&name, EXCHANGE, &key, args)?;
    }
    if opts.bindings > 0 {
        admin.exchange_declare(SINK_EXCHANGE, "fanout", opts.persistent)?;
        for i in 0..opts.bindings {
            // Keys and header values no published message carries.
            let dummy = format!("relaymq-bench.dummy.{i}");
            let args = if kind == "headers" {
                headers_match("relaymq-bench-dummy", &dummy)
            } else {
                FieldTable::new()
            };
            admin.exchange_bind(SINK_EXCHANGE, EXCHANGE, &dummy, args)?;
        }
    }
    Ok(())
}

/// Binding arguments of a headers exchange matching `key = value`.
fn headers_match(key: &str, value: &str) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x-match".into(), FieldValue::string("all"));
    t.insert(key.into(), FieldValue::string(value));
    t
}

/// Deletes the queues and exchanges of a run; missing ones are fine.
fn clean_up(admin: &mut dyn AdminSession, opts: &Options) -> Result<(), String> {
    for i in 0..opts.queues {
        admin.queue_delete(&queue_name(i))?;
    }
    for x in [EXCHANGE, SINK_EXCHANGE] {
        admin.exchange_delete(x)?;
    }
    Ok(())
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

/// The route of each queue's messages: exchange, routing key and properties.
fn routes(opts: &Options) -> Vec<Route> {
    let kind = opts.exchange_type.as_deref();
    let exchange = if kind.is_some() { EXCHANGE } else { "" };
    (0..opts.queues)
        .map(|q| {
            let name = queue_name(q);
            let mut properties = BasicProperties::default();
            if opts.persistent {
                properties.delivery_mode = Some(DELIVERY_MODE_PERSISTENT);
            }
            let routing_key = match kind {
                Some("fanout") => String::new(),
                Some("headers") => {
                    let mut h = FieldTable::new();
                    h.insert(ROUTE_HEADER.into(), FieldValue::string(name));
                    properties.headers = Some(h);
                    String::new()
                }
                _ => name,
            };
            Route {
                exchange: exchange.into(),
                routing_key,
                properties,
            }
        })
        .collect()
}

/// One producer: publishes round-robin over the queues until its share of `--count` is
/// sent or the run is told to stop.
fn produce(run: &Run, index: usize) -> Result<(), String> {
    let opts = &run.opts;
    let role = format!("producer {index}");
    let fail = |e: String| format!("{role}: {e}");
    let mut session = session::connect_producer(opts, &role, routes(opts)).map_err(fail)?;
    let quota = match opts.amount {
        Amount::Messages(n) => Some(share(n, opts.producers, index)),
        Amount::Seconds(_) => None,
    };
    let rate = if opts.rate > 0 {
        Some(share(opts.rate, opts.producers, index).max(1))
    } else {
        None
    };
    // With confirms, batches of a quarter of the window: the next batch goes out while
    // the rest of the window is still unconfirmed (a whole-window batch would wait for
    // every confirm first, stop-and-wait, and keep far fewer than N in flight on average).
    let batch_max = opts.confirm.map_or(PUBLISH_BATCH_MESSAGES, |w| {
        (w / CONFIRM_BATCHES_PER_WINDOW).clamp(1, PUBLISH_BATCH_MESSAGES)
    });
    let batch_max = batch_max.min((PUBLISH_BATCH_BYTES_MAX / opts.size).max(1));
    let mut next_queue = index % opts.queues;
    let mut sent: u64 = 0;
    let mut confirmed: u64 = 0;
    let mut per_queue = vec![0u64; opts.queues];
    let mut batch_routes: Vec<usize> = Vec::with_capacity(batch_max);
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
            let unconfirmed = session
                .wait_confirms_at_most(limit, CONFIRM_TIMEOUT)
                .map_err(|e| format!("{role}: waiting for confirms: {e}"))?;
            let now_confirmed = sent - unconfirmed as u64;
            run.stats
                .confirmed
                .fetch_add(now_confirmed - confirmed, Ordering::Relaxed);
            confirmed = now_confirmed;
        }
        batch_routes.clear();
        for _ in 0..n {
            batch_routes.push(next_queue);
            per_queue[next_queue] += 1;
            next_queue = (next_queue + 1) % opts.queues;
        }
        session
            .publish(&Batch {
                routes: &batch_routes,
                sent_ns: now_ns(run),
                first_seq: seq_base + sent,
            })
            .map_err(fail)?;
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
        session
            .wait_confirms_at_most(0, CONFIRM_TIMEOUT)
            .map_err(|e| format!("{role}: waiting for the last confirms: {e}"))?;
        run.stats
            .confirmed
            .fetch_add(sent - confirmed, Ordering::Relaxed);
    }
    session.close().map_err(fail)
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
    let fail = |e: String| format!("{role}: {e}");
    let mut session = session::connect_consumer(opts, &role, &queue_name(queue)).map_err(fail)?;
    let _ = ready.send(Ok(()));
    let mut latencies: Histogram<u64> = report::new_histogram()?;
    let mut deliveries: Vec<DeliveryInfo> = Vec::new();
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
        deliveries.clear();
        session.poll(CONSUMER_POLL, &mut deliveries).map_err(fail)?;
        if deliveries.is_empty() {
            if unacked > 0 {
                session.ack(last_tag, true).map_err(fail)?;
                unacked = 0;
            }
            flush(&mut delivered, &mut redelivered, &mut latencies);
            last_flush = Instant::now();
            if run.stop_consumers.load(Ordering::Relaxed) {
                break;
            }
            continue;
        }
        let now = now_ns(run);
        for d in &deliveries {
            if d.body_bytes != opts.size as u64 {
                return Err(format!(
                    "{role}: a body of {} bytes arrived, {} were sent",
                    d.body_bytes, opts.size
                ));
            }
            latencies.saturating_record(now.saturating_sub(d.sent_ns).max(1));
            delivered += 1;
            redelivered += u64::from(d.redelivered);
            if !opts.no_ack {
                unacked += 1;
                last_tag = d.delivery_tag;
                if unacked >= opts.multi_ack {
                    session.ack(last_tag, opts.multi_ack > 1).map_err(fail)?;
                    unacked = 0;
                }
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
    if unacked > 0 {
        session.ack(last_tag, true).map_err(fail)?;
    }
    flush(&mut delivered, &mut redelivered, &mut latencies);
    session.close().map_err(fail)
}
