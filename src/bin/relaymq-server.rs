//! `relaymq-server`: the RelayMQ broker daemon. Parses flags, installs signal handling and
//! runs the server until SIGINT or SIGTERM. With `--check` it verifies a stopped data
//! directory instead, prints a report and exits 0 (clean), 1 (problems) or 2 (could not
//! check).

use anyhow::{bail, Context, Result};
use relaymq::limits::Limits;
use relaymq::server::tls::{ClientAuth, TlsConfig};
use relaymq::server::{self, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;

use std::io::Write;

/// The help text: the options, then the limits with their defaults (from the constants
/// in `relaymq::limits`, so they cannot drift).
fn usage() -> String {
    let d = Limits::default();
    format!(
        "{USAGE}
LIMITS (docs/security.md §5; reaching one is an error with an AMQP reply code):
  --max-connections N        open connections, both listeners together; more are
                             refused at connection.open with 530 [default: {}]
  --max-connections-per-user N
                             open connections per user name; more get 530 [default: {}]
  --max-channels N           channels per connection (the channel_max offered; alias
                             --channel-max); above it 530 [default: {}]
  --max-queues-per-vhost N   queues per vhost; a new one beyond gets 406 [default: {}]
  --max-exchanges-per-vhost N
                             exchanges per vhost, amq.* and the default one not
                             counted; a new one beyond gets 406 [default: {}]
  --max-consumers-per-channel N
                             consumers per channel; one more gets 406 [default: {}]
  --max-name-bytes N         longest exchange name, queue name or consumer tag a client
                             may choose, 1..255; longer gets 406 [default: {}]
  --max-message-bytes N      largest message body accepted; larger gets 406
                             [default: {}]
  --frame-max BYTES          largest frame offered to clients [default: {}]
  --heartbeat SECONDS        heartbeat interval offered to clients; 0 = none
                             [default: {}]
  --handshake-timeout-ms MS  time from connect to a finished handshake, however slowly
                             the client sends; then the socket is closed [default: {}]
  --max-outbound-bytes SIZE  bytes waiting for a client that does not read at which it
                             is disconnected (bytes, or with a KiB/MiB/GiB suffix; raised
                             to 4 x --max-message-bytes + 1MiB) [default: {}]
",
        d.connections_max,
        d.connections_per_user_max,
        d.channels_per_connection_max,
        d.queues_per_vhost_max,
        d.exchanges_per_vhost_max,
        d.consumers_per_channel_max,
        d.name_bytes_max,
        d.message_bytes_max,
        d.frame_bytes_max,
        d.heartbeat_s,
        d.handshake_timeout_ms,
        d.outbound_bytes_max,
    )
}

const USAGE: &str = "\
relaymq-server: the RelayMQ message broker

USAGE: relaymq-server [OPTIONS]

OPTIONS:
  --listen ADDR              native protocol address [default: 127.0.0.1:5673]
  --amqp-listen ADDR|off     AMQP 0-9-1 address, or off [default: 127.0.0.1:5672]
  --data-dir DIR             data directory [default: ./data]
  --workers N                worker threads [default: number of CPUs]
  --log-level LEVEL          error|warn|info|debug|trace [default: info]
  --metrics-listen ADDR|off  Prometheus metrics (GET /metrics), or off
                             [default: 127.0.0.1:15692]
  --ready-file PATH          write {\"listen\": \"HOST:PORT\", \"amqp_listen\": \"HOST:PORT\"}
                             here once serving (with tls_listen, amqp_tls_listen,
                             metrics_listen when on)
  --tls-cert FILE            PEM certificate chain (server certificate first); with
                             --tls-key turns on the TLS listeners below, beside the
                             plain ones
  --tls-key FILE             PEM private key of --tls-cert
  --tls-listen ADDR|off      native protocol over TLS [default: 127.0.0.1:5674]
  --amqp-tls-listen ADDR|off AMQP 0-9-1 over TLS (amqps) [default: 127.0.0.1:5671]
  --tls-client-ca FILE       PEM CA(s) client certificates must chain to; clients are
                             then asked for a certificate
  --tls-client-auth MODE     required | optional: whether a client without a
                             certificate is refused (needs --tls-client-ca)
                             [default: required]
  --default-user NAME        the administrator created at the first start (users then
                             live in meta.db: relaymq-cli user ...) [default: guest]
  --default-pass PASSWORD    its password [default: guest]
  --fsync MODE               always | interval:MS | never: when persistent messages are
                             fsynced; under always a confirm waits for it [default: always]
  --segment-bytes SIZE       size at which a queue's segment file is sealed, 4KiB..1GiB
                             (bytes, or with a KiB/MiB/GiB suffix) [default: 8MiB]
  --queue-memory-bytes SIZE  message bodies one queue keeps in memory; beyond them the
                             persistent messages of durable queues wait on disk. Bytes, or
                             with a KiB, MiB or GiB suffix [default: 64MiB]
  --consumer-timeout-ms MS   time a delivery may stay unacked before it is requeued and
                             its consumer cancelled, for queues without
                             x-consumer-timeout; 0 = never [default: 1800000]
  --shutdown-timeout SECONDS time allowed to flush clients at shutdown [default: 10]
  --memory-high-watermark V  resident memory above which publishers are blocked: a
                             fraction of the memory available (RAM, or the cgroup limit
                             when lower), or a size like 512MiB [default: 0.4]
  --disk-free-limit SIZE     free space of the data directory's filesystem below which
                             publishers are blocked [default: 1GiB]
  --check                    verify the stopped data directory (--data-dir) without
                             changing it, print a report and exit: 0 clean, 1 problems
                             found, 2 could not check (in use, missing, unreadable)
  -h, --help                 print this help
  -V, --version              print the version
";

/// Smallest `--segment-bytes`, bytes (tests use small segments).
const SEGMENT_BYTES_MIN: u64 = 4096;

/// Largest `--segment-bytes`, bytes (1 GiB).
const SEGMENT_BYTES_MAX: u64 = 1 << 30;

/// Parses a size in bytes with [`relaymq::types::size::parse_size`] (`256MiB`, `1GiB`,
/// `65536`), as a `usize`.
fn parse_size(text: &str) -> Result<usize> {
    let bytes = relaymq::types::size::parse_size(text)?;
    usize::try_from(bytes).with_context(|| format!("'{text}' is too large"))
}

/// The value of a numeric flag, or an error naming the flag.
fn number<T: std::str::FromStr>(parser: &mut lexopt::Parser, flag: &str) -> Result<T> {
    use lexopt::prelude::*;
    let text: String = parser.value()?.parse()?;
    text.parse()
        .map_err(|_| anyhow::anyhow!("{flag}: '{text}' is not a number in range"))
}

/// Accepted values of `--log-level`.
const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

struct Args {
    config: ServerConfig,
    log_level: String,
    /// `--check`: verify the data directory instead of serving.
    check: bool,
}

/// Exit code of `--check` when problems were found.
const CHECK_EXIT_PROBLEMS: i32 = 1;

/// Exit code of `--check` when the directory could not be checked.
const CHECK_EXIT_CANNOT_CHECK: i32 = 2;

/// The TLS flags as given, checked together once all are read ([`TlsFlags::into_config`]).
#[derive(Default)]
struct TlsFlags {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    /// `--tls-listen`: `Some(None)` is `off`.
    listen: Option<Option<SocketAddr>>,
    /// `--amqp-tls-listen`: `Some(None)` is `off`.
    amqp_listen: Option<Option<SocketAddr>>,
    client_ca: Option<PathBuf>,
    client_auth: Option<ClientAuth>,
}

impl TlsFlags {
    /// The TLS settings, `None` without `--tls-cert`/`--tls-key`.
    fn into_config(self) -> Result<Option<TlsConfig>> {
        let (cert, key) = match (self.cert, self.key) {
            (Some(c), Some(k)) => (c, k),
            (Some(_), None) => bail!("--tls-cert needs --tls-key (the certificate's private key)"),
            (None, Some(_)) => bail!("--tls-key needs --tls-cert (the server's certificate)"),
            (None, None) => {
                if self.listen.is_some()
                    || self.amqp_listen.is_some()
                    || self.client_ca.is_some()
                    || self.client_auth.is_some()
                {
                    bail!("the --tls-* options need --tls-cert and --tls-key");
                }
                return Ok(None);
            }
        };
        if self.client_auth.is_some() && self.client_ca.is_none() {
            bail!("--tls-client-auth needs --tls-client-ca (the CA client certificates are checked against)");
        }
        let mut tls = TlsConfig::new(cert, key);
        if let Some(l) = self.listen {
            tls.listen = l;
        }
        if let Some(l) = self.amqp_listen {
            tls.amqp_listen = l;
        }
        if tls.listen.is_none() && tls.amqp_listen.is_none() {
            bail!("--tls-listen and --amqp-tls-listen are both off: TLS would serve nothing");
        }
        tls.client_ca_file = self.client_ca;
        tls.client_auth = self.client_auth.unwrap_or(ClientAuth::Required);
        Ok(Some(tls))
    }
}

/// Parses `ADDR|off` of a listen flag.
fn listen_or_off(flag: &str, v: &str, example: &str) -> Result<Option<SocketAddr>> {
    if v == "off" {
        return Ok(None);
    }
    v.parse()
        .map(Some)
        .with_context(|| format!("{flag}: '{v}' is not an address like {example} or off"))
}

fn parse_args() -> Result<Args> {
    use lexopt::prelude::*;
    let mut config = ServerConfig::default();
    let mut tls = TlsFlags::default();
    let mut log_level = "info".to_string();
    let mut check = false;
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("listen") => {
                let v: String = parser.value()?.parse()?;
                config.listen = v.parse().with_context(|| {
                    format!("--listen: '{v}' is not an address like 127.0.0.1:5673")
                })?;
            }
            Long("amqp-listen") => {
                let v: String = parser.value()?.parse()?;
                config.amqp_listen = if v == "off" {
                    None
                } else {
                    Some(v.parse().with_context(|| {
                        format!("--amqp-listen: '{v}' is not an address like 127.0.0.1:5672 or off")
                    })?)
                };
            }
            Long("metrics-listen") => {
                let v: String = parser.value()?.parse()?;
                config.metrics_listen = listen_or_off("--metrics-listen", &v, "127.0.0.1:15692")?;
            }
            Long("tls-cert") => tls.cert = Some(PathBuf::from(parser.value()?)),
            Long("tls-key") => tls.key = Some(PathBuf::from(parser.value()?)),
            Long("tls-client-ca") => tls.client_ca = Some(PathBuf::from(parser.value()?)),
            Long("tls-listen") => {
                let v: String = parser.value()?.parse()?;
                tls.listen = Some(listen_or_off("--tls-listen", &v, "127.0.0.1:5674")?);
            }
            Long("amqp-tls-listen") => {
                let v: String = parser.value()?.parse()?;
                tls.amqp_listen = Some(listen_or_off("--amqp-tls-listen", &v, "0.0.0.0:5671")?);
            }
            Long("tls-client-auth") => {
                let v: String = parser.value()?.parse()?;
                tls.client_auth = Some(match v.as_str() {
                    "required" => ClientAuth::Required,
                    "optional" => ClientAuth::Optional,
                    _ => bail!("--tls-client-auth must be required or optional, not '{v}'"),
                });
            }
            Long("data-dir") => config.data_dir = PathBuf::from(parser.value()?),
            Long("workers") => {
                config.workers = parser.value()?.parse()?;
                if config.workers == 0 {
                    bail!("--workers must be at least 1");
                }
            }
            Long("log-level") => {
                log_level = parser.value()?.parse()?;
                if !LOG_LEVELS.contains(&log_level.as_str()) {
                    bail!("--log-level must be one of {}", LOG_LEVELS.join(", "));
                }
            }
            Long("ready-file") => config.ready_file = Some(PathBuf::from(parser.value()?)),
            Long("default-user") => config.broker.default_user = parser.value()?.parse()?,
            Long("default-pass") => config.broker.default_pass = parser.value()?.parse()?,
            Long("max-message-bytes") => {
                config.broker.limits.message_bytes_max = number(&mut parser, "--max-message-bytes")?
            }
            Long("frame-max") => {
                config.broker.limits.frame_bytes_max = number(&mut parser, "--frame-max")?
            }
            Long("heartbeat") => {
                config.broker.limits.heartbeat_s = number(&mut parser, "--heartbeat")?
            }
            Long("max-connections") => {
                config.broker.limits.connections_max = number(&mut parser, "--max-connections")?
            }
            Long("max-connections-per-user") => {
                config.broker.limits.connections_per_user_max =
                    number(&mut parser, "--max-connections-per-user")?
            }
            Long("max-channels") | Long("channel-max") => {
                config.broker.limits.channels_per_connection_max =
                    number(&mut parser, "--max-channels")?
            }
            Long("max-queues-per-vhost") => {
                config.broker.limits.queues_per_vhost_max =
                    number(&mut parser, "--max-queues-per-vhost")?
            }
            Long("max-exchanges-per-vhost") => {
                config.broker.limits.exchanges_per_vhost_max =
                    number(&mut parser, "--max-exchanges-per-vhost")?
            }
            Long("max-consumers-per-channel") => {
                config.broker.limits.consumers_per_channel_max =
                    number(&mut parser, "--max-consumers-per-channel")?
            }
            Long("max-name-bytes") => {
                config.broker.limits.name_bytes_max = number(&mut parser, "--max-name-bytes")?
            }
            Long("handshake-timeout-ms") => {
                config.broker.limits.handshake_timeout_ms =
                    number(&mut parser, "--handshake-timeout-ms")?
            }
            Long("max-outbound-bytes") => {
                let v: String = parser.value()?.parse()?;
                config.broker.limits.outbound_bytes_max =
                    parse_size(&v).context("--max-outbound-bytes")?;
            }
            Long("fsync") => {
                let v: String = parser.value()?.parse()?;
                config.fsync = relaymq::storage::flusher::FsyncMode::parse(&v)
                    .map_err(|e| anyhow::anyhow!("--fsync: {e}"))?;
            }
            Long("segment-bytes") => {
                let text: String = parser.value()?.parse()?;
                let v = parse_size(&text).context("--segment-bytes")? as u64;
                if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&v) {
                    bail!("--segment-bytes must be between {SEGMENT_BYTES_MIN} and {SEGMENT_BYTES_MAX}");
                }
                config.segment_bytes = v;
            }
            Long("queue-memory-bytes") => {
                let v: String = parser.value()?.parse()?;
                config.broker.queue_memory_bytes =
                    parse_size(&v).context("--queue-memory-bytes")?;
            }
            Long("consumer-timeout-ms") => {
                let v: String = parser.value()?.parse()?;
                config.broker.consumer_timeout_ms = v.parse().with_context(|| {
                    format!("--consumer-timeout-ms: '{v}' is not a number of milliseconds")
                })?;
            }
            Long("shutdown-timeout") => {
                let s: u64 = parser.value()?.parse()?;
                config.shutdown_flush_ms = s.saturating_mul(1000);
            }
            Long("memory-high-watermark") => {
                let v: String = parser.value()?.parse()?;
                config.broker.alarms.memory_high_watermark =
                    relaymq::alarm::MemoryWatermark::parse(&v)
                        .map_err(|e| anyhow::anyhow!("--memory-high-watermark: {e}"))?;
            }
            Long("disk-free-limit") => {
                let v: String = parser.value()?.parse()?;
                config.broker.alarms.disk_free_limit_bytes =
                    relaymq::types::size::parse_size(&v).context("--disk-free-limit")?;
            }
            Long("check") => check = true,
            Short('h') | Long("help") => {
                // A closed pipe (`--help | head -1`) is not worth a panic.
                let _ = write!(std::io::stdout(), "{}", usage());
                std::process::exit(0);
            }
            Short('V') | Long("version") => {
                let _ = writeln!(
                    std::io::stdout(),
                    "relaymq-server {}",
                    env!("CARGO_PKG_VERSION")
                );
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected().into()),
        }
    }
    config.broker.limits.validate()?;
    config.tls = tls.into_config()?;
    Ok(Args {
        config,
        log_level,
        check,
    })
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e:#}\n\n{}", usage());
            std::process::exit(2);
        }
    };
    if args.check {
        std::process::exit(check(&args.config.data_dir));
    }
    if let Err(e) = run(args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// `--check`: prints the report of `data_dir` on stdout (or why it could not be checked
/// on stderr) and returns the exit code.
fn check(data_dir: &std::path::Path) -> i32 {
    match relaymq::storage::check::check_data_dir(data_dir) {
        Ok(report) => {
            println!("{report}");
            if report.is_ok() {
                0
            } else {
                CHECK_EXIT_PROBLEMS
            }
        }
        Err(e) => {
            eprintln!("error: cannot check {}: {e}", data_dir.display());
            CHECK_EXIT_CANNOT_CHECK
        }
    }
}

fn run(args: Args) -> Result<()> {
    env_logger::Builder::new()
        .parse_filters(&args.log_level)
        .format_timestamp_millis()
        .init();
    let handle = server::start(args.config).context("cannot start the server")?;
    let trigger = handle.shutdown_trigger();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("relaymq-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log::info!("received signal {sig}, shutting down");
                trigger();
            }
        })?;
    handle.join().context("server failed")?;
    Ok(())
}
