//! Command-line flags of `relaymq-bench` (parsed with `lexopt`).

pub use super::uri::{parse_uri, Protocol, Target};
use super::BenchError;
use std::ffi::OsString;

pub const USAGE: &str = "\
relaymq-bench: measure a RelayMQ server's throughput, latency and memory

USAGE: relaymq-bench [OPTIONS]
       relaymq-bench compare URI URI... [OPTIONS]   (the same run against each URI, one
                                                    table; ratios relative to the first)

OPTIONS:
  --uri URI                  relaymq://[USER:PASS@]HOST:PORT[/VHOST] (native protocol) or
                             amqp://[USER:PASS@]HOST[:PORT][/VHOST] (AMQP 0-9-1, port 5672);
                             vhost / is %2F [default: relaymq://127.0.0.1:5673]
  --producers N              producer connections [default: 1]
  --consumers N              consumer connections; 0 = publish only [default: 1]
  --queues N                 queues relaymq-bench.q.0.. [default: 1]
  --size BYTES               body size, at least 16 (send time and sequence) [default: 16]
  --duration SECONDS         publish for this long [default: 10]
  --count N                  publish N messages in total (instead of --duration)
  --persistent               durable queues, persistent messages
  --confirm N                publisher confirms, at most N unconfirmed per producer
  --multi-ack K              ack every K deliveries with multiple [default: 1]
  --no-ack                   consume without acks
  --prefetch N               consumer prefetch count; 0 = unlimited [default: 0]
  --rate MSG_PER_S           total publish rate, paced; 0 = flat out [default: 0]
  --exchange-type TYPE       direct|fanout|topic|headers: publish to exchange
                             relaymq-bench.x bound to the queues [default: the default
                             exchange]
  --bindings N               extra bindings on the exchange that match nothing
                             (needs --exchange-type) [default: 0]
  --null-relay               run against a relay inside this process that only parses
                             and forwards frames (the loopback baseline; --uri ignored)
  --client-lib               native producers and consumers on the relaymq::client
                             library instead of the bench's own lean connection
  --json                     print one JSON object at the end, nothing while running
                             (compare: {\"runs\":[...]} with the ratios)
  -h, --help                 print this help
  -V, --version              print the version

SUBCOMMANDS (each with --help):
  relaymq-bench idle --connections N      server RSS per idle connection
  relaymq-bench recovery --server PATH    time to serve again after kill -9
  relaymq-bench http-api --server PATH    the management API's speed and memory
  relaymq-bench delayed                   delayed delivery's lateness, and the server's
                                          RSS per waiting delayed message

EXIT CODES: 0 ok, 1 the run failed (error, lost or duplicated message), 2 usage error
";

/// Smallest `--size`, bytes: an 8-byte send time in ns and an 8-byte sequence number.
pub const BODY_BYTES_MIN: usize = 16;

/// Largest `--size`, bytes (the server's default message limit, 16 MiB).
pub const BODY_BYTES_MAX: usize = 16 << 20;

/// Most producer or consumer threads (each has its own connection).
pub const CLIENTS_MAX: usize = 1_000;

/// Most queues.
pub const QUEUES_MAX: usize = 10_000;

/// Most extra bindings, bindings.
pub const BINDINGS_MAX: usize = 1_000_000;

/// Most URIs `compare` takes.
pub const COMPARE_URIS_MAX: usize = 16;

/// Default run length when neither `--duration` nor `--count` is given, seconds.
pub const DURATION_DEFAULT_S: u64 = 10;

/// How much to publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    /// For this many seconds.
    Seconds(u64),
    /// This many messages in total.
    Messages(u64),
}

/// Exchange types `--exchange-type` accepts.
pub const EXCHANGE_TYPES: [&str; 4] = ["direct", "fanout", "topic", "headers"];

/// A parsed command line.
#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    pub producers: usize,
    pub consumers: usize,
    pub queues: usize,
    pub size: usize,
    pub amount: Amount,
    pub persistent: bool,
    /// Most unconfirmed publishes per producer; `None` without confirms.
    pub confirm: Option<usize>,
    pub multi_ack: u64,
    pub no_ack: bool,
    pub prefetch: u16,
    /// Total messages per second; 0 = flat out.
    pub rate: u64,
    /// `None`: the default exchange.
    pub exchange_type: Option<String>,
    pub bindings: usize,
    /// Run against an in-process null relay instead of `target` (see `null_relay`).
    pub null_relay: bool,
    /// Native producers and consumers on `relaymq::client` instead of the bench's lean
    /// connection (`native_wire`): measures the client library too.
    pub client_lib: bool,
    pub json: bool,
}

/// What the command line asks for.
pub enum Invocation {
    Help,
    Version,
    Run(Box<Options>),
    /// `compare URI URI…`: the same run against each target in turn (`Options::target`
    /// is the first).
    Compare(Box<Options>, Vec<Target>),
}

fn usage(e: impl std::fmt::Display) -> BenchError {
    BenchError::Usage(e.to_string())
}

/// Parses a number flag's value, naming the flag in the error.
fn number<T: std::str::FromStr>(flag: &str, value: OsString) -> Result<T, BenchError> {
    let text = value.to_string_lossy().into_owned();
    text.parse()
        .map_err(|_| BenchError::Usage(format!("--{flag}: '{text}' is not a valid number")))
}

/// Checks `min <= v <= max`, naming the flag.
fn bounded(flag: &str, v: usize, min: usize, max: usize) -> Result<usize, BenchError> {
    if v < min || v > max {
        return Err(BenchError::Usage(format!(
            "--{flag} must be between {min} and {max}"
        )));
    }
    Ok(v)
}

/// Parses the arguments (without the program name).
///
/// # Errors
/// [`BenchError::Usage`] for a bad flag, value, URI or combination.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, BenchError> {
    use lexopt::prelude::*;
    let mut args = args.into_iter().peekable();
    let compare = args.next_if(|a| a == "compare").is_some();
    let mut compare_uris: Vec<String> = Vec::new();
    let mut uri = "relaymq://127.0.0.1:5673".to_string();
    let mut producers = 1;
    let mut consumers = 1;
    let mut queues = 1;
    let mut size = BODY_BYTES_MIN;
    let mut duration: Option<u64> = None;
    let mut count: Option<u64> = None;
    let mut persistent = false;
    let mut confirm = None;
    let mut multi_ack: Option<u64> = None;
    let mut no_ack = false;
    let mut prefetch = 0u16;
    let mut rate = 0u64;
    let mut exchange_type = None;
    let mut bindings = 0;
    let mut json = false;
    let mut null_relay = false;
    let mut client_lib = false;
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(usage)? {
        match arg {
            Long("uri") if compare => {
                return Err(usage("compare takes its URIs as arguments, not --uri"))
            }
            Long("uri") => uri = parser.value().map_err(usage)?.to_string_lossy().into(),
            Value(v) if compare => compare_uris.push(v.to_string_lossy().into_owned()),
            Long("producers") => {
                producers = bounded(
                    "producers",
                    number("producers", parser.value().map_err(usage)?)?,
                    1,
                    CLIENTS_MAX,
                )?
            }
            Long("consumers") => {
                consumers = bounded(
                    "consumers",
                    number("consumers", parser.value().map_err(usage)?)?,
                    0,
                    CLIENTS_MAX,
                )?
            }
            Long("queues") => {
                queues = bounded(
                    "queues",
                    number("queues", parser.value().map_err(usage)?)?,
                    1,
                    QUEUES_MAX,
                )?
            }
            Long("size") => {
                size = bounded(
                    "size",
                    number("size", parser.value().map_err(usage)?)?,
                    BODY_BYTES_MIN,
                    BODY_BYTES_MAX,
                )?
            }
            Long("duration") => {
                let d: u64 = number("duration", parser.value().map_err(usage)?)?;
                if d == 0 {
                    return Err(usage("--duration must be at least 1 second"));
                }
                duration = Some(d);
            }
            Long("count") => {
                let n: u64 = number("count", parser.value().map_err(usage)?)?;
                if n == 0 {
                    return Err(usage("--count must be at least 1"));
                }
                count = Some(n);
            }
            Long("persistent") => persistent = true,
            Long("confirm") => {
                confirm = Some(bounded(
                    "confirm",
                    number("confirm", parser.value().map_err(usage)?)?,
                    1,
                    usize::MAX,
                )?)
            }
            Long("multi-ack") => {
                let k: u64 = number("multi-ack", parser.value().map_err(usage)?)?;
                if k == 0 {
                    return Err(usage("--multi-ack must be at least 1"));
                }
                multi_ack = Some(k);
            }
            Long("no-ack") => no_ack = true,
            Long("prefetch") => prefetch = number("prefetch", parser.value().map_err(usage)?)?,
            Long("rate") => rate = number("rate", parser.value().map_err(usage)?)?,
            Long("exchange-type") => {
                let t = parser
                    .value()
                    .map_err(usage)?
                    .to_string_lossy()
                    .into_owned();
                if !EXCHANGE_TYPES.contains(&t.as_str()) {
                    return Err(BenchError::Usage(format!(
                        "--exchange-type must be one of {}",
                        EXCHANGE_TYPES.join(", ")
                    )));
                }
                exchange_type = Some(t);
            }
            Long("bindings") => {
                bindings = bounded(
                    "bindings",
                    number("bindings", parser.value().map_err(usage)?)?,
                    0,
                    BINDINGS_MAX,
                )?
            }
            Long("json") => json = true,
            Long("null-relay") => null_relay = true,
            Long("client-lib") => client_lib = true,
            Short('h') | Long("help") => return Ok(Invocation::Help),
            Short('V') | Long("version") => return Ok(Invocation::Version),
            _ => return Err(usage(arg.unexpected())),
        }
    }
    if compare {
        if compare_uris.len() < 2 || compare_uris.len() > COMPARE_URIS_MAX {
            return Err(usage(format!(
                "compare needs 2 to {COMPARE_URIS_MAX} URIs, got {} \
                 (like: compare relaymq://127.0.0.1:5673 amqp://127.0.0.1:5672)",
                compare_uris.len()
            )));
        }
        uri = compare_uris[0].clone();
    }
    let target = parse_uri(&uri)?;
    let amount = match (duration, count) {
        (Some(_), Some(_)) => return Err(usage("give --duration or --count, not both")),
        (Some(d), None) => Amount::Seconds(d),
        (None, Some(n)) => Amount::Messages(n),
        (None, None) => Amount::Seconds(DURATION_DEFAULT_S),
    };
    if no_ack && multi_ack.is_some() {
        return Err(usage("--multi-ack needs manual acks: drop --no-ack"));
    }
    let multi_ack = multi_ack.unwrap_or(1);
    if !no_ack && prefetch != 0 && u64::from(prefetch) < multi_ack {
        return Err(usage(
            "--prefetch must be at least --multi-ack (or the consumer waits for its own acks)",
        ));
    }
    if bindings > 0 && exchange_type.is_none() {
        return Err(usage("--bindings needs --exchange-type"));
    }
    if client_lib && target.protocol != Protocol::Native {
        return Err(usage(
            "--client-lib is the native client library: give a relaymq:// --uri",
        ));
    }
    if consumers > 0 && consumers < queues {
        return Err(usage(
            "--consumers must be at least --queues (every queue needs a consumer), or 0",
        ));
    }
    let options = Box::new(Options {
        target,
        producers,
        consumers,
        queues,
        size,
        amount,
        persistent,
        confirm,
        multi_ack,
        no_ack,
        prefetch,
        rate,
        exchange_type,
        bindings,
        null_relay,
        client_lib,
        json,
    });
    if compare {
        let targets = compare_uris
            .iter()
            .map(|u| parse_uri(u))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Invocation::Compare(options, targets));
    }
    Ok(Invocation::Run(options))
}
