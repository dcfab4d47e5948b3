//! `relaymq-bench delayed`: how punctually an `x-delayed-message` exchange delivers, and
//! what the messages it holds cost the server's memory.
//!
//! Two runs against a server on this machine (`--uri`, loopback only: lateness compares
//! the publisher's and the consumer's reading of one clock), each skipped when its size
//! is 0:
//!
//! 1. **Memory** (`--waiting N`): the server's RSS is read, N messages with a long delay
//!    (`--wait-delay-s`) and small bodies are published to exchange [`WAITING_EXCHANGE`]
//!    (no binding: nothing is ever routed), the exchange's `messages_delayed` is polled
//!    until it reports all N held, and the RSS is read again; then the exchange is
//!    deleted, which discards them. This runs first, on the server as it was given, so
//!    the "before" reading is not inflated by the accuracy run's freed heap.
//! 2. **Accuracy** (`--rate R --window S`): R × S messages are published to exchange
//!    [`EXCHANGE`] (bound to queue [`QUEUE`], consumed with no-ack) ahead of time, `--lead-ms`
//!    after the publishing starts the first becomes due, then R a second for S seconds.
//!    Message `i` is due at the whole millisecond `first_due + i × 1000 / R` (wall clock,
//!    ms since the Unix epoch, as the server counts them); its `x-delay` is that minus the
//!    publisher's clock in whole ms when its batch is sent, so the server (which adds the
//!    delay to its own, later, reading) never schedules it earlier than intended. The
//!    batches are small and each is confirmed before the next, so a message is not
//!    scheduled later than intended by the time it queued behind others either (at most
//!    one batch's round trip: `hold_lag_max_ms`). The consumer reads the clock when a
//!    delivery arrives: lateness = arrival − intended due time, recorded in µs in an HDR
//!    histogram. A delivery before its due time is "early", one never received within
//!    [`DRAIN_GRACE`] of the last due time "lost".
//!
//! A lost, early or duplicated message fails the run (exit 1) after the report. The
//! exchanges and the queue are deleted before (an earlier run's leftovers) and after
//! each run, also when it fails or is interrupted.

use super::args::{parse_uri, Target};
use super::report::mib;
use super::rss;
use super::{BenchError, EXIT_RUN_FAILED, EXIT_USAGE};
use hdrhistogram::Histogram;
use relaymq::client::{
    Channel, ClientError, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent,
    ExchangeDeclareOptions, ListKind, PublishMessage, QueueDeclareOptions,
};
use relaymq::types::field_table::{FieldTable, FieldValue};
use relaymq::types::BasicProperties;
use std::ffi::OsString;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The word that selects this subcommand: `relaymq-bench delayed …`.
pub const SUBCOMMAND: &str = "delayed";

/// Usage of `relaymq-bench delayed`.
pub const USAGE: &str = "\
relaymq-bench delayed: delayed delivery's punctuality, and the server's memory per
waiting delayed message (an x-delayed-message exchange)

USAGE: relaymq-bench delayed [OPTIONS]

OPTIONS:
  --uri URI           relaymq://[USER:PASS@]HOST:PORT[/VHOST], a loopback address
                      [default: relaymq://127.0.0.1:5673]
  --rate N            accuracy run: messages becoming due per second; 0 skips the run
                      [default: 10000]
  --window SECONDS    accuracy run: for how long they become due [default: 10]
  --lead-ms MS        accuracy run: from the start of publishing to the first due time
                      (all are published before) [default: 3000]
  --waiting N         memory run: messages held with a long delay; 0 skips the run
                      [default: 1000000]
  --wait-delay-s S    memory run: their delay, seconds [default: 3600]
  --size BYTES        body size, at least 16 [default: 16]
  --server-pid PID    read this process's RSS [default: the process listening on the
                      URI's port]
  --json              print one JSON object at the end, nothing else
  -h, --help          print this help

The memory run goes first (its RSS before is the server as given: use a fresh one),
then the accuracy run. The server must run on this machine.

EXIT CODES: 0 ok, 1 the run failed (a message lost, early or duplicated, an error), 2
usage error
";

/// The exchange of the accuracy run (`x-delayed-type` direct).
pub const EXCHANGE: &str = "relaymq-bench.delayed";

/// The queue the accuracy run's messages are routed to, and its binding key.
pub const QUEUE: &str = "relaymq-bench.delayed.q";

/// The exchange of the memory run (no binding).
pub const WAITING_EXCHANGE: &str = "relaymq-bench.delayed.waiting";

/// Exchange type of a delayed-message exchange.
const DELAYED_TYPE: &str = "x-delayed-message";

/// Default `--rate`, messages due per second.
pub const RATE_DEFAULT: u64 = 10_000;

/// Default `--window`, seconds.
pub const WINDOW_DEFAULT_S: u64 = 10;

/// Default `--lead-ms`.
pub const LEAD_DEFAULT_MS: u64 = 3_000;

/// Default `--waiting`.
pub const WAITING_DEFAULT: u64 = 1_000_000;

/// Default `--wait-delay-s` (an hour).
pub const WAIT_DELAY_DEFAULT_S: u64 = 3_600;

/// Most messages an accuracy run publishes (`--rate` × `--window`).
pub const ACCURACY_MESSAGES_MAX: u64 = 10_000_000;

/// Longest `--window`, seconds.
pub const WINDOW_MAX_S: u64 = 3_600;

/// Longest `--lead-ms`.
pub const LEAD_MAX_MS: u64 = 600_000;

/// Most `--waiting` messages.
pub const WAITING_MAX: u64 = 100_000_000;

/// Longest `--wait-delay-s`: a day (any delay far beyond the run does).
pub const WAIT_DELAY_MAX_S: u64 = 86_400;

/// Smallest `--size`: the due time and the sequence number, 8 bytes each.
pub const BODY_BYTES_MIN: usize = 16;

/// Largest `--size` (1 MiB: a million held messages of it is already a terabyte).
pub const BODY_BYTES_MAX: usize = 1 << 20;

/// The header holding a message's delay, ms.
const DELAY_HEADER: &str = "x-delay";

/// How long after the last due time the consumer keeps waiting for stragglers.
pub const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// How long the memory run waits for the exchange to report every message held, once
/// they are all confirmed.
pub const HELD_TIMEOUT: Duration = Duration::from_secs(120);

/// Messages per publish batch of the memory run.
const BATCH_MESSAGES: usize = 500;

/// Unconfirmed messages the memory run's publisher allows.
const CONFIRM_WINDOW: usize = 4_000;

/// Messages per publish batch of the accuracy run, each batch confirmed before the next
/// is built. A delay counts from the server's reading of its clock when the message
/// arrives, so a message queued behind a window of others would be due later than the
/// publisher intended by that queueing time: small lock-step batches keep it to one
/// batch's round trip (reported as `hold_lag_max_ms`).
const ACCURACY_BATCH_MESSAGES: u64 = 50;

/// Time allowed for confirms, declares and deletes.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The consumer's wait for one delivery before it checks the deadline and Ctrl-C.
const RECV_POLL: Duration = Duration::from_millis(100);

/// Pause between two looks at the exchange's `messages_delayed`.
const HELD_POLL: Duration = Duration::from_millis(100);

/// Largest lateness the histogram records, µs (an hour; longer is clamped).
const LATENESS_US_MAX: u64 = 3_600_000_000;

/// Significant digits of the lateness histogram.
const LATENESS_SIGNIFICANT_DIGITS: u8 = 3;

/// Parsed flags of `relaymq-bench delayed`.
#[derive(Clone, Debug)]
pub struct DelayedOptions {
    /// The server.
    pub target: Target,
    /// Accuracy run: messages due per second (0: no accuracy run).
    pub rate: u64,
    /// Accuracy run: seconds over which they become due.
    pub window_s: u64,
    /// Accuracy run: from the start of publishing to the first due time, ms.
    pub lead_ms: u64,
    /// Memory run: messages held (0: no memory run).
    pub waiting: u64,
    /// Memory run: their delay, s.
    pub wait_delay_s: u64,
    /// Body size, bytes.
    pub size: usize,
    /// The server's pid, when given (else found by the URI's port).
    pub server_pid: Option<u32>,
    /// One JSON object at the end.
    pub json: bool,
}

impl DelayedOptions {
    /// Messages of the accuracy run.
    pub fn accuracy_messages(&self) -> u64 {
        self.rate * self.window_s
    }
}

/// Lateness percentiles, ms (µs resolution).
#[derive(Clone, Copy, Debug, Default)]
pub struct Lateness {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl Lateness {
    /// The percentiles of a histogram of µs; `None` when it is empty.
    fn of(h: &Histogram<u64>) -> Option<Lateness> {
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1_000.0;
        Some(Lateness {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        })
    }
}

/// Figures of the accuracy run.
#[derive(Clone, Debug, Default)]
pub struct AccuracyReport {
    /// Messages becoming due per second.
    pub rate: u64,
    /// Seconds over which they became due.
    pub window_s: u64,
    /// Messages published (all confirmed).
    pub published: u64,
    /// Seconds from the first publish to the last confirm.
    pub publish_seconds: f64,
    /// The longest time from reading the clock for a publish batch to its confirms, ms:
    /// how much later than intended the server can have started a message's delay (it
    /// counts from its own reading of the clock), so lateness up to this much is the
    /// publishing's, not the timer's.
    pub hold_lag_max_ms: f64,
    /// Messages published at or after their due time (the publisher was too slow for
    /// `--lead-ms`): sent with a 1 ms delay, so their lateness includes that.
    pub published_after_due: u64,
    /// Distinct messages received.
    pub received: u64,
    /// Messages never received.
    pub lost: u64,
    /// Deliveries of a message already received.
    pub duplicates: u64,
    /// Messages received before their due time.
    pub early: u64,
    /// The earliest of them, ms before the due time (0 when none).
    pub earliest_ms: f64,
    /// Deliveries without a negative `x-delay` (not held by the exchange).
    pub not_delayed: u64,
    /// Lateness of the messages received on time or late.
    pub lateness: Option<Lateness>,
}

/// Figures of the memory run.
#[derive(Clone, Debug, Default)]
pub struct MemoryReport {
    /// Messages held.
    pub waiting: u64,
    /// Their delay, s.
    pub delay_s: u64,
    /// Seconds from the first publish to the last confirm.
    pub publish_seconds: f64,
    /// Seconds from the last confirm until the exchange reported all held.
    pub held_seconds: f64,
    /// Server RSS before the exchange was declared, bytes.
    pub rss_before_bytes: Option<u64>,
    /// Server RSS once all were held, bytes.
    pub rss_after_bytes: Option<u64>,
    /// Highest RSS sampled while publishing and waiting, bytes.
    pub rss_peak_bytes: Option<u64>,
    /// Server RSS right after the exchange (and its messages) was deleted, bytes.
    pub rss_after_delete_bytes: Option<u64>,
}

impl MemoryReport {
    /// (after − before) / waiting, bytes.
    pub fn rss_per_message_bytes(&self) -> Option<f64> {
        let (b, a) = (self.rss_before_bytes?, self.rss_after_bytes?);
        Some(a.saturating_sub(b) as f64 / self.waiting.max(1) as f64)
    }
}

/// Figures of `relaymq-bench delayed`.
#[derive(Clone, Debug, Default)]
pub struct DelayedReport {
    /// Body size, bytes.
    pub size: usize,
    /// The memory run, when it ran.
    pub memory: Option<MemoryReport>,
    /// The accuracy run, when it ran.
    pub accuracy: Option<AccuracyReport>,
}

impl DelayedReport {
    /// The JSON object `--json` prints.
    pub fn to_json(&self) -> serde_json::Value {
        let memory = self.memory.as_ref().map(|m| {
            serde_json::json!({
                "waiting": m.waiting,
                "delay_s": m.delay_s,
                "publish_seconds": m.publish_seconds,
                "published_per_s": (m.waiting as f64 / m.publish_seconds.max(1e-9)).round(),
                "held_seconds": m.held_seconds,
                "server_rss_before_bytes": m.rss_before_bytes,
                "server_rss_after_bytes": m.rss_after_bytes,
                "server_rss_peak_bytes": m.rss_peak_bytes,
                "server_rss_after_delete_bytes": m.rss_after_delete_bytes,
                "rss_per_message_bytes": m.rss_per_message_bytes().map(f64::round),
            })
        });
        let accuracy = self.accuracy.as_ref().map(|a| {
            let lateness = a.lateness.map(|l| {
                serde_json::json!({
                    "p50": l.p50, "p90": l.p90, "p99": l.p99, "p999": l.p999, "max": l.max,
                })
            });
            serde_json::json!({
                "rate": a.rate,
                "window_s": a.window_s,
                "published": a.published,
                "publish_seconds": a.publish_seconds,
                "hold_lag_max_ms": a.hold_lag_max_ms,
                "published_after_due": a.published_after_due,
                "received": a.received,
                "lost": a.lost,
                "duplicates": a.duplicates,
                "early": a.early,
                "earliest_ms": a.earliest_ms,
                "not_delayed": a.not_delayed,
                "lateness_ms": lateness,
            })
        });
        serde_json::json!({
            "size_bytes": self.size,
            "memory": memory,
            "accuracy": accuracy,
        })
    }

    /// The text summary.
    pub fn to_text(&self) -> String {
        let rss =
            |b: Option<u64>| b.map_or("unknown".into(), |b| format!("{b} bytes ({})", mib(b)));
        let mut out = Vec::new();
        if let Some(m) = &self.memory {
            out.push(format!(
                "memory: {} messages of {} bytes held for {} s, published in {:.2} s \
                 ({:.0}/s), all held {:.2} s later\n\
                 server RSS before:       {}\nserver RSS after:        {}\n\
                 server RSS peak:         {}\nper waiting message:     {}\n\
                 server RSS after delete: {}",
                m.waiting,
                self.size,
                m.delay_s,
                m.publish_seconds,
                m.waiting as f64 / m.publish_seconds.max(1e-9),
                m.held_seconds,
                rss(m.rss_before_bytes),
                rss(m.rss_after_bytes),
                rss(m.rss_peak_bytes),
                m.rss_per_message_bytes()
                    .map_or("unknown".into(), |b| format!("{b:.1} bytes")),
                rss(m.rss_after_delete_bytes),
            ));
        }
        if let Some(a) = &self.accuracy {
            let lateness = a.lateness.map_or("none (nothing received)".into(), |l| {
                format!(
                    "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
                    l.p50, l.p90, l.p99, l.p999, l.max
                )
            });
            out.push(format!(
                "accuracy: {} messages due at {}/s over {} s, published in {:.2} s \
                 ({} after their due time; publish-to-confirm at most {:.3} ms)\n\
                 received {}, lost {}, duplicates {}, early {} (earliest {:.3} ms), \
                 not delayed {}\nlateness: {lateness}",
                a.published,
                a.rate,
                a.window_s,
                a.publish_seconds,
                a.published_after_due,
                a.hold_lag_max_ms,
                a.received,
                a.lost,
                a.duplicates,
                a.early,
                a.earliest_ms,
                a.not_delayed,
            ));
        }
        if out.is_empty() {
            out.push("nothing run (--rate 0 and --waiting 0)".into());
        }
        out.join("\n")
    }

    /// Why the run failed although it finished: lost, early or duplicated messages.
    fn failure(&self) -> Option<String> {
        let a = self.accuracy.as_ref()?;
        (a.lost > 0 || a.early > 0 || a.duplicates > 0).then(|| {
            format!(
                "{} messages lost, {} early, {} duplicated",
                a.lost, a.early, a.duplicates
            )
        })
    }
}

/// Runs `relaymq-bench delayed` with the arguments after `delayed`; returns the exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            let _ = write!(io::stdout(), "{USAGE}");
            return 0;
        }
        Err(e) => {
            eprintln!("error: {}", e.message());
            if e.exit_code() == EXIT_USAGE {
                eprintln!("usage: relaymq-bench delayed [OPTIONS] (try --help)");
            }
            return e.exit_code();
        }
    };
    let (report, failure) = match run(&opts) {
        Ok(r) => {
            let why = r.failure();
            (Some(r), why)
        }
        Err((why, r)) => (r.map(|b| *b), Some(why)),
    };
    if let Some(r) = report {
        let out = if opts.json {
            r.to_json().to_string()
        } else {
            r.to_text()
        };
        let _ = writeln!(io::stdout(), "{out}");
    }
    match failure {
        None => 0,
        Some(why) => {
            eprintln!("error: the delayed run failed: {why}");
            EXIT_RUN_FAILED
        }
    }
}

/// The value of the flag just read.
fn value(parser: &mut lexopt::Parser) -> Result<OsString, BenchError> {
    parser.value().map_err(|e| BenchError::Usage(e.to_string()))
}

/// Parses a number flag's value and checks `min <= v <= max`, naming the flag.
fn number_in(flag: &str, v: OsString, min: u64, max: u64) -> Result<u64, BenchError> {
    let t = v.to_string_lossy().into_owned();
    let n: u64 = t
        .parse()
        .map_err(|_| BenchError::Usage(format!("--{flag}: '{t}' is not a valid number")))?;
    if n < min || n > max {
        return Err(BenchError::Usage(format!(
            "--{flag} must be between {min} and {max}"
        )));
    }
    Ok(n)
}

/// Whether every address `addr` (`HOST:PORT`) resolves to is a loopback address.
fn is_loopback(addr: &str) -> bool {
    match std::net::ToSocketAddrs::to_socket_addrs(addr) {
        Ok(mut all) => {
            let all: Vec<_> = all.by_ref().collect();
            !all.is_empty() && all.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// Parses the flags after `delayed`; `None` for `--help`.
///
/// # Errors
/// [`BenchError::Usage`] for a bad flag or value, or a URI that is not a loopback native
/// one.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
) -> Result<Option<DelayedOptions>, BenchError> {
    use lexopt::prelude::*;
    let usage = |e: String| BenchError::Usage(e);
    let mut uri = "relaymq://127.0.0.1:5673".to_string();
    let mut rate = RATE_DEFAULT;
    let mut window_s = WINDOW_DEFAULT_S;
    let mut lead_ms = LEAD_DEFAULT_MS;
    let mut waiting = WAITING_DEFAULT;
    let mut wait_delay_s = WAIT_DELAY_DEFAULT_S;
    let mut size = BODY_BYTES_MIN;
    let mut server_pid = None;
    let mut json = false;
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(|e| usage(e.to_string()))? {
        match arg {
            Long("uri") => uri = value(&mut parser)?.to_string_lossy().into_owned(),
            Long("rate") => {
                rate = number_in("rate", value(&mut parser)?, 0, ACCURACY_MESSAGES_MAX)?
            }
            Long("window") => window_s = number_in("window", value(&mut parser)?, 1, WINDOW_MAX_S)?,
            Long("lead-ms") => lead_ms = number_in("lead-ms", value(&mut parser)?, 1, LEAD_MAX_MS)?,
            Long("waiting") => waiting = number_in("waiting", value(&mut parser)?, 0, WAITING_MAX)?,
            Long("wait-delay-s") => {
                wait_delay_s = number_in("wait-delay-s", value(&mut parser)?, 1, WAIT_DELAY_MAX_S)?
            }
            Long("size") => {
                size = number_in(
                    "size",
                    value(&mut parser)?,
                    BODY_BYTES_MIN as u64,
                    BODY_BYTES_MAX as u64,
                )? as usize
            }
            Long("server-pid") => {
                server_pid =
                    Some(number_in("server-pid", value(&mut parser)?, 1, u32::MAX.into())? as u32)
            }
            Long("json") => json = true,
            Short('h') | Long("help") => return Ok(None),
            _ => return Err(usage(arg.unexpected().to_string())),
        }
    }
    let target = parse_uri(&uri)?;
    if target.protocol != super::uri::Protocol::Native {
        return Err(usage(
            "delayed speaks the native protocol: give a relaymq:// --uri".into(),
        ));
    }
    if !is_loopback(&target.addr) {
        return Err(usage(format!(
            "--uri: {} is not a loopback address (lateness compares this machine's clock \
             with itself)",
            target.addr
        )));
    }
    if rate * window_s > ACCURACY_MESSAGES_MAX {
        return Err(usage(format!(
            "--rate × --window must be at most {ACCURACY_MESSAGES_MAX} messages"
        )));
    }
    Ok(Some(DelayedOptions {
        target,
        rate,
        window_s,
        lead_ms,
        waiting,
        wait_delay_s,
        size,
        server_pid,
        json,
    }))
}

/// The wall clock in µs since the Unix epoch (the server's delays count in its ms).
fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Ends a step early after Ctrl-C: the caller deletes what was declared.
fn stop_if_interrupted() -> Result<(), String> {
    if super::interrupt::interrupted() {
        return Err("interrupted (Ctrl-C)".into());
    }
    Ok(())
}

/// A connection of the client library to `--uri`, named after its `role`.
fn connect(opts: &DelayedOptions, role: &str) -> Result<Connection, String> {
    Connection::connect_with(ConnectOptions {
        addr: opts.target.addr.clone(),
        user: opts.target.user.clone(),
        password: opts.target.password.clone(),
        vhost: opts.target.vhost.clone(),
        timeout: CALL_TIMEOUT,
        client_name: format!("relaymq-bench delayed {role}"),
        ..ConnectOptions::default()
    })
    .map_err(|e| format!("cannot connect to {}: {e}", opts.target.addr))
}

/// Deletes what a run declares (missing ones are fine), each on a fresh channel (a 404
/// closes the channel it was asked on).
fn delete_all(conn: &Connection) -> Result<(), String> {
    for exchange in [EXCHANGE, WAITING_EXCHANGE] {
        let ch = conn.open_channel().map_err(|e| e.to_string())?;
        match ch.exchange_delete(exchange, false) {
            Ok(()) => ch.close().map_err(|e| e.to_string())?,
            Err(e) if e.reply_code() == Some(404) => {}
            Err(e) => return Err(format!("deleting exchange {exchange}: {e}")),
        }
    }
    let ch = conn.open_channel().map_err(|e| e.to_string())?;
    match ch.queue_delete(QUEUE, false, false) {
        Ok(_) => ch.close().map_err(|e| e.to_string()),
        Err(e) if e.reply_code() == Some(404) => Ok(()),
        Err(e) => Err(format!("deleting queue {QUEUE}: {e}")),
    }
}

/// Declares a transient delayed-message exchange routing as `direct`.
fn declare_delayed(ch: &Channel, name: &str) -> Result<(), String> {
    let mut arguments = FieldTable::new();
    arguments.insert("x-delayed-type".into(), FieldValue::string("direct"));
    ch.exchange_declare(
        name,
        DELAYED_TYPE,
        ExchangeDeclareOptions {
            arguments,
            ..Default::default()
        },
    )
    .map_err(|e| format!("declaring exchange {name} ({DELAYED_TYPE}): {e}"))
}

/// Properties asking for a delay of `delay_ms`.
fn delay_properties(delay_ms: u64) -> BasicProperties {
    let value = i32::try_from(delay_ms).map_or(FieldValue::I64(delay_ms as i64), FieldValue::I32);
    let mut headers = FieldTable::new();
    headers.insert(DELAY_HEADER.into(), value);
    BasicProperties {
        headers: Some(headers),
        ..Default::default()
    }
}

/// A body of `size` bytes starting with `a` and `b` (big-endian).
fn body(size: usize, a: u64, b: u64) -> Vec<u8> {
    let mut body = vec![0u8; size];
    body[..8].copy_from_slice(&a.to_be_bytes());
    body[8..16].copy_from_slice(&b.to_be_bytes());
    body
}

/// Publishes `count` messages with confirms, in batches of [`BATCH_MESSAGES`] with at
/// most [`CONFIRM_WINDOW`] unconfirmed; `make(i)` builds message `i`, `each_batch` runs
/// after each batch. Returns the seconds from the first publish to the last confirm.
fn publish_windowed(
    ch: &Channel,
    count: u64,
    mut make: impl FnMut(u64) -> PublishMessage,
    mut each_batch: impl FnMut(),
) -> Result<f64, String> {
    let fail = |e: ClientError| e.to_string();
    ch.confirm_select().map_err(fail)?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut batch = Vec::with_capacity(BATCH_MESSAGES);
    while sent < count {
        stop_if_interrupted()?;
        let n = (count - sent).min(BATCH_MESSAGES as u64);
        let (_, all_acked) = ch
            .wait_for_confirms_at_most(CONFIRM_WINDOW - n as usize, CALL_TIMEOUT)
            .map_err(fail)?;
        if !all_acked {
            return Err("the server nacked a publish".into());
        }
        batch.clear();
        batch.extend((sent..sent + n).map(&mut make));
        ch.publish_batch(&batch).map_err(fail)?;
        sent += n;
        each_batch();
    }
    if !ch.wait_for_confirms(CALL_TIMEOUT).map_err(fail)? {
        return Err("the server nacked a publish".into());
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Publishes `count` messages in batches of [`ACCURACY_BATCH_MESSAGES`], each confirmed
/// before the next is built; `make(i, now_ms)` builds message `i` (`now_ms`: the wall
/// clock, ms since the Unix epoch, read when its batch is built). Returns the seconds
/// from the first publish to the last confirm, and the longest time from reading the
/// clock for a batch to its confirms, s.
fn publish_lockstep(
    ch: &Channel,
    count: u64,
    mut make: impl FnMut(u64, u64) -> PublishMessage,
) -> Result<(f64, f64), String> {
    let fail = |e: ClientError| e.to_string();
    ch.confirm_select().map_err(fail)?;
    let started = Instant::now();
    let mut lag_max = 0f64;
    let mut sent = 0u64;
    let mut batch = Vec::with_capacity(ACCURACY_BATCH_MESSAGES as usize);
    while sent < count {
        stop_if_interrupted()?;
        let n = (count - sent).min(ACCURACY_BATCH_MESSAGES);
        batch.clear();
        let built = Instant::now();
        let now_ms = wall_us() / 1_000;
        batch.extend((sent..sent + n).map(|i| make(i, now_ms)));
        ch.publish_batch(&batch).map_err(fail)?;
        if !ch.wait_for_confirms(CALL_TIMEOUT).map_err(fail)? {
            return Err("the server nacked a publish".into());
        }
        lag_max = lag_max.max(built.elapsed().as_secs_f64());
        sent += n;
    }
    Ok((started.elapsed().as_secs_f64(), lag_max))
}

/// Runs the memory run, then the accuracy run; deletes what they declared in any case.
/// `Err` holds why it failed, with the figures so far.
pub fn run(opts: &DelayedOptions) -> Result<DelayedReport, (String, Option<Box<DelayedReport>>)> {
    let mut report = DelayedReport {
        size: opts.size,
        ..Default::default()
    };
    let admin = connect(opts, "admin").map_err(|e| (e, None))?;
    let outcome = delete_all(&admin).and_then(|()| {
        if opts.waiting > 0 {
            report.memory = Some(memory_run(opts, &admin)?);
        }
        if opts.rate > 0 {
            report.accuracy = Some(accuracy_run(opts)?);
        }
        Ok(())
    });
    let cleanup = delete_all(&admin).and_then(|()| admin.close().map_err(|e| e.to_string()));
    match (outcome, cleanup) {
        (Ok(()), Ok(())) => Ok(report),
        (Err(e), _) => Err((e, Some(Box::new(report)))),
        (Ok(()), Err(e)) => Err((format!("cleaning up: {e}"), Some(Box::new(report)))),
    }
}

/// Messages the exchange `name` holds (`messages_delayed` of the exchange listing).
fn messages_delayed(conn: &Connection, name: &str) -> Result<u64, String> {
    let rows = conn.list(ListKind::Exchanges).map_err(|e| e.to_string())?;
    let row = rows
        .iter()
        .find(|r| r.get("name").and_then(FieldValue::as_str) == Some(name))
        .ok_or_else(|| format!("exchange {name} is not listed"))?;
    row.get("messages_delayed")
        .and_then(FieldValue::as_i64)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| format!("exchange {name} lists no messages_delayed"))
}

/// The memory run: RSS, `--waiting` held messages, RSS, delete.
fn memory_run(opts: &DelayedOptions, admin: &Connection) -> Result<MemoryReport, String> {
    let pid = opts
        .server_pid
        .or_else(|| rss::find_server_pid(&opts.target.addr));
    let sample = || pid.and_then(rss::rss_bytes);
    let mut r = MemoryReport {
        waiting: opts.waiting,
        delay_s: opts.wait_delay_s,
        rss_before_bytes: sample(),
        ..Default::default()
    };
    let mut peak = r.rss_before_bytes;
    let conn = connect(opts, "publisher")?;
    let ch = conn.open_channel().map_err(|e| e.to_string())?;
    declare_delayed(&ch, WAITING_EXCHANGE)?;
    let properties = delay_properties(opts.wait_delay_s * 1_000);
    let mut batches = 0u64;
    r.publish_seconds = publish_windowed(
        &ch,
        opts.waiting,
        |i| PublishMessage {
            exchange: WAITING_EXCHANGE.into(),
            routing_key: String::new(),
            mandatory: false,
            properties: properties.clone(),
            body: body(opts.size, i, 0),
        },
        || {
            batches += 1;
            // About once a second at a few hundred thousand messages a second.
            if batches.is_multiple_of(500) {
                peak = peak.max(sample());
            }
        },
    )?;
    ch.close().map_err(|e| e.to_string())?;
    conn.close().map_err(|e| e.to_string())?;
    let confirmed = Instant::now();
    loop {
        stop_if_interrupted()?;
        let held = messages_delayed(admin, WAITING_EXCHANGE)?;
        peak = peak.max(sample());
        if held == opts.waiting {
            break;
        }
        if confirmed.elapsed() >= HELD_TIMEOUT {
            return Err(format!(
                "exchange {WAITING_EXCHANGE} holds {held} of {} messages after {} s",
                opts.waiting,
                HELD_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(HELD_POLL);
    }
    r.held_seconds = confirmed.elapsed().as_secs_f64();
    r.rss_after_bytes = sample();
    r.rss_peak_bytes = peak.max(r.rss_after_bytes);
    let ch = admin.open_channel().map_err(|e| e.to_string())?;
    ch.exchange_delete(WAITING_EXCHANGE, false)
        .map_err(|e| format!("deleting exchange {WAITING_EXCHANGE}: {e}"))?;
    ch.close().map_err(|e| e.to_string())?;
    r.rss_after_delete_bytes = sample();
    Ok(r)
}

/// What the consumer of the accuracy run saw.
struct Received {
    received: u64,
    duplicates: u64,
    early: u64,
    earliest_us: u64,
    not_delayed: u64,
    lateness_us: Histogram<u64>,
}

/// The accuracy run: declare, consume, publish ahead of time, wait for every due time.
fn accuracy_run(opts: &DelayedOptions) -> Result<AccuracyReport, String> {
    let count = opts.accuracy_messages();
    let conn = connect(opts, "consumer")?;
    let ch = conn.open_channel().map_err(|e| e.to_string())?;
    declare_delayed(&ch, EXCHANGE)?;
    ch.queue_declare(QUEUE, QueueDeclareOptions::default())
        .map_err(|e| format!("declaring queue {QUEUE}: {e}"))?;
    ch.queue_bind(QUEUE, EXCHANGE, QUEUE, FieldTable::new())
        .map_err(|e| format!("binding queue {QUEUE}: {e}"))?;
    let consumer = ch
        .basic_consume(
            QUEUE,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .map_err(|e| format!("consuming from {QUEUE}: {e}"))?;
    let first_due_ms = wall_us() / 1_000 + opts.lead_ms;
    let due_ms = |i: u64| first_due_ms + i * 1_000 / opts.rate;
    let last_due_ms = due_ms(count - 1);
    let deadline_us = last_due_ms * 1_000 + DRAIN_GRACE.as_micros() as u64;

    // Set when publishing failed: the consumer stops waiting.
    let abandoned = AtomicBool::new(false);
    let (published, received) = std::thread::scope(|scope| {
        let consuming = scope.spawn(|| -> Result<Received, String> {
            let mut seen = vec![false; count as usize];
            let mut r = Received {
                received: 0,
                duplicates: 0,
                early: 0,
                earliest_us: 0,
                not_delayed: 0,
                lateness_us: Histogram::new_with_bounds(
                    1,
                    LATENESS_US_MAX,
                    LATENESS_SIGNIFICANT_DIGITS,
                )
                .map_err(|e| format!("lateness histogram: {e}"))?,
            };
            while r.received < count && wall_us() < deadline_us {
                stop_if_interrupted()?;
                if abandoned.load(Ordering::Relaxed) {
                    return Err("publishing failed".into());
                }
                let d = match consumer.recv_timeout(RECV_POLL) {
                    Ok(ConsumerEvent::Delivery(d)) => d,
                    Ok(ConsumerEvent::Cancelled) => {
                        return Err(format!("the server cancelled the consumer of {QUEUE}"))
                    }
                    Err(ClientError::Timeout) => continue,
                    Err(e) => return Err(format!("consuming: {e}")),
                };
                let now_us = wall_us();
                let (Some(due), Some(seq)) = (d.body.get(..8), d.body.get(8..16)) else {
                    return Err(format!("a delivery of {} bytes", d.body.len()));
                };
                let due_ms = u64::from_be_bytes(due.try_into().unwrap_or_default());
                let seq = u64::from_be_bytes(seq.try_into().unwrap_or_default());
                let Some(slot) = seen.get_mut(seq as usize) else {
                    return Err(format!("a delivery with sequence number {seq}"));
                };
                if std::mem::replace(slot, true) {
                    r.duplicates += 1;
                    continue;
                }
                r.received += 1;
                let delayed = d
                    .properties
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(DELAY_HEADER))
                    .and_then(FieldValue::as_i64)
                    .is_some_and(|v| v < 0);
                if !delayed {
                    r.not_delayed += 1;
                }
                let due_us = due_ms * 1_000;
                if now_us < due_us {
                    r.early += 1;
                    r.earliest_us = r.earliest_us.max(due_us - now_us);
                } else {
                    r.lateness_us
                        .saturating_record((now_us - due_us).min(LATENESS_US_MAX));
                }
            }
            Ok(r)
        });
        let published = (|| -> Result<(f64, f64, u64), String> {
            let conn = connect(opts, "publisher")?;
            let ch = conn.open_channel().map_err(|e| e.to_string())?;
            let mut after_due = 0u64;
            let (seconds, lag) = publish_lockstep(&ch, count, |i, now_ms| {
                let due = due_ms(i);
                let delay = if due > now_ms {
                    due - now_ms
                } else {
                    after_due += 1;
                    1
                };
                PublishMessage {
                    exchange: EXCHANGE.into(),
                    routing_key: QUEUE.into(),
                    mandatory: false,
                    properties: delay_properties(delay),
                    body: body(opts.size, due, i),
                }
            })?;
            ch.close().map_err(|e| e.to_string())?;
            conn.close().map_err(|e| e.to_string())?;
            Ok((seconds, lag, after_due))
        })();
        if published.is_err() {
            abandoned.store(true, Ordering::Relaxed);
        }
        let received = consuming
            .join()
            .unwrap_or_else(|_| Err("the consumer panicked".into()));
        (published, received)
    });
    // The publisher's error first: the consumer's is then only "publishing failed".
    let (publish_seconds, hold_lag_s, published_after_due) = published?;
    let r = received?;
    consumer.cancel().map_err(|e| e.to_string())?;
    ch.close().map_err(|e| e.to_string())?;
    conn.close().map_err(|e| e.to_string())?;
    Ok(AccuracyReport {
        rate: opts.rate,
        window_s: opts.window_s,
        published: count,
        publish_seconds,
        hold_lag_max_ms: hold_lag_s * 1_000.0,
        published_after_due,
        received: r.received,
        lost: count - r.received,
        duplicates: r.duplicates,
        early: r.early,
        earliest_ms: r.earliest_us as f64 / 1_000.0,
        not_delayed: r.not_delayed,
        lateness: Lateness::of(&r.lateness_us),
    })
}
