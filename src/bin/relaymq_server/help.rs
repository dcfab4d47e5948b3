//! The help text of `relaymq-server`: the options, then the limits with their defaults
//! (from the constants in `relaymq::limits`, so they cannot drift), configuration and
//! signals.

use relaymq::limits::Limits;
use relaymq::types::size::format_size;

/// The help text: the options, then the limits with their defaults (from the constants
/// in `relaymq::limits`, so they cannot drift).
pub fn usage() -> String {
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
  --max-name-bytes SIZE      longest exchange name, queue name or consumer tag a client
                             may choose, 1..255; longer gets 406 [default: {}]
  --max-message-bytes SIZE   largest message body accepted, up to 128MiB; larger gets
                             406 [default: {}]
  --frame-max SIZE           largest frame offered to clients, 4KiB..1MiB [default: {}]
  --heartbeat SECONDS        heartbeat interval offered to clients; 0 = none
                             [default: {}]
  --handshake-timeout-ms MS  time from connect to a finished handshake, however slowly
                             the client sends; then the socket is closed [default: {}]
  --max-outbound-bytes SIZE  bytes waiting for a client that does not read at which it
                             is disconnected (raised to 4 x --max-message-bytes + 1MiB)
                             [default: {}]

SIZE: bytes, or a number with one of RabbitMQ's units: KiB MiB GiB TiB (powers of
  1024; also Ki Mi Gi Ti) or kB MB GB TB (powers of 1000; also k M G T), any case.

CONFIGURATION (docs/operations.md, \"Configuration\"):
  Every setting above can also come from the --config file (key = flag name without
  --) or from the environment: RELAYMQ_SERVER_ + the name upper-cased with - as _
  (RELAYMQ_SERVER_MAX_CONNECTIONS=5000). Precedence: flags > environment > file >
  defaults. An unknown key, an unknown RELAYMQ_SERVER_* variable or a bad value stops
  the start-up (exit 2) with a message naming it.

SIGNALS:
  SIGTERM, SIGINT  graceful shutdown (systemd: STOPPING=1)
  SIGHUP           read the file and environment again (flags still win) and apply
                   what can change live: log-level, memory-high-watermark,
                   disk-free-limit and the limits (frame-max, heartbeat, max-channels
                   and max-outbound-bytes for new connections only); other changes
                   are logged as needing a restart and not applied
",
        d.connections_max,
        d.connections_per_user_max,
        d.channels_per_connection_max,
        d.queues_per_vhost_max,
        d.exchanges_per_vhost_max,
        d.consumers_per_channel_max,
        d.name_bytes_max,
        format_size(d.message_bytes_max as u64),
        format_size(u64::from(d.frame_bytes_max)),
        d.heartbeat_s,
        d.handshake_timeout_ms,
        format_size(d.outbound_bytes_max as u64),
    )
}

const USAGE: &str = "\
relaymq-server: the RelayMQ message broker

USAGE: relaymq-server [OPTIONS]

OPTIONS:
  --listen ADDR              native protocol address [default: 127.0.0.1:5673]
  --amqp-listen ADDR|off     AMQP 0-9-1 address, or off [default: 127.0.0.1:5672]
  --metrics-listen ADDR|off  Prometheus metrics address (/metrics), or off
                             [default: 127.0.0.1:15692]
  --http-listen ADDR|off     management HTTP API address (/api, RabbitMQ's), or off
                             [default: 127.0.0.1:15672]
  --stats-collection on|off  sample message rates and their 10-minute history
                             (management API, list queues) [default: on]
  --data-dir DIR             data directory [default: ./data]
  --workers N                worker threads [default: number of CPUs]
  --log-level LEVEL          off|error|warn|info|debug|trace [default: info]
  --ready-file PATH          write {\"listen\": \"HOST:PORT\", \"amqp_listen\": \"HOST:PORT\"}
                             here once serving (with tls_listen, amqp_tls_listen,
                             metrics_listen, http_listen, https_listen when on);
                             removed again at the end of a graceful shutdown
  --tls-cert FILE            PEM certificate chain (server certificate first); with
                             --tls-key turns on the TLS listeners below, beside the
                             plain ones
  --tls-key FILE             PEM private key of --tls-cert
  --tls-listen ADDR|off      native protocol over TLS [default: 127.0.0.1:5674]
  --amqp-tls-listen ADDR|off AMQP 0-9-1 over TLS (amqps) [default: 127.0.0.1:5671]
  --https-listen ADDR|off    management HTTP API over TLS (RabbitMQ's usual port is
                             15671) [default: off]
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
                             [default: 8MiB]
  --queue-memory-bytes SIZE  message bodies one queue keeps in memory; beyond them the
                             persistent messages of durable queues wait on disk
                             [default: 64MiB]
  --consumer-timeout-ms MS   time a delivery may stay unacked before it is requeued and
                             its consumer cancelled, for queues without
                             x-consumer-timeout; 0 = never [default: 1800000]
  --shutdown-timeout SECONDS time allowed to flush clients at shutdown [default: 10]
  --memory-high-watermark V  resident memory above which publishers are blocked: a
                             fraction up to 1.0 of the memory available (RAM, or the
                             cgroup limit when lower), or a size of at least 64MiB like
                             2GiB [default: 0.6, RabbitMQ 4.x's]
  --disk-free-limit SIZE     free space of the data directory's filesystem below which
                             publishers are blocked [default: 1GiB]
  --config FILE              read settings from this TOML file (keys are the flag
                             names without --, e.g. max-connections = 5000); without
                             it no file is read
  --print-config             print the effective value of every setting and where it
                             came from (default|file|env|flag) as TOML, then exit
  --check                    verify the stopped data directory (--data-dir) without
                             changing it, print a report and exit: 0 clean, 1 problems
                             found, 2 could not check (in use, missing, unreadable)
  -h, --help                 print this help
  -V, --version              print the version
";
