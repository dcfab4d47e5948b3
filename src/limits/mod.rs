//! Every bound RelayMQ enforces, in one place, with its unit in the name.
//!
//! A limit that input can reach is checked where the input enters (the frame codec, the
//! connection, the broker core) and answered with an AMQP reply code, never a panic or an
//! unbounded buffer. Values follow RabbitMQ's defaults where RabbitMQ has one.
//!
//! The limits an operator sets (`relaymq-server --max-…` flags) are a [`Limits`] value
//! whose defaults are the constants here; the broker holds the values in force in a
//! [`LiveLimits`], which can be replaced while the server runs (docs/security.md §5).

pub mod fds;
mod runtime;

pub use fds::FdBudget;
pub use runtime::{Limits, LimitsError, LiveLimits};

/// Longest exchange name, queue name, routing key, binding key or consumer tag, in bytes
/// (AMQP 0-9-1 `shortstr`, §4.2.5.3).
pub const SHORT_STRING_BYTES_MAX: usize = 255;

/// Largest message body accepted by default, in bytes (16 MiB; RabbitMQ's
/// `max_message_size` default is 128 MiB, we choose a smaller default).
pub const MESSAGE_BODY_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;

/// Largest encoded properties block of one message, in bytes (headers tables included).
pub const PROPERTIES_BYTES_MAX: usize = 1024 * 1024;

/// Frame size (header included) the server proposes and uses by default, in bytes (128 KiB,
/// RabbitMQ's `frame_max` default).
pub const FRAME_BYTES_DEFAULT: u32 = 128 * 1024;

/// Smallest frame size a peer may negotiate, in bytes (AMQP 0-9-1 `frame-min-size` is 4096).
pub const FRAME_BYTES_MIN: u32 = 4096;

/// Largest frame size a peer may negotiate, in bytes (1 MiB).
pub const FRAME_BYTES_MAX: u32 = 1024 * 1024;

/// Frame size allowed before negotiation (the handshake frame), in bytes.
pub const FRAME_BYTES_HANDSHAKE: u32 = 64 * 1024;

/// Largest logical payload (one method, possibly split over several frames), in bytes:
/// the largest body plus room for its properties and names.
pub const PAYLOAD_BYTES_MAX: usize =
    MESSAGE_BODY_BYTES_MAX_DEFAULT + PROPERTIES_BYTES_MAX + 4 * SHORT_STRING_BYTES_MAX + 64;

/// Highest channel number a connection may open (RabbitMQ's `channel_max` default 2047).
pub const CHANNEL_MAX: u16 = 2047;

/// Heartbeat interval the server proposes, in seconds (RabbitMQ's default is 60).
pub const HEARTBEAT_S_DEFAULT: u16 = 60;

/// Nesting depth allowed in field tables and arrays.
pub const FIELD_TABLE_DEPTH_MAX: usize = 16;

/// Decoded requests (bytes of their payloads) a connection may have waiting for a worker
/// before the I/O thread stops reading its socket, in bytes.
pub const MAILBOX_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Requests one worker executes for one connection before it lets other connections run.
pub const WORKER_SLICE_REQUESTS: usize = 256;

/// Outbound bytes above which a connection's consumers get no new deliveries, in bytes.
pub const OUTBOUND_HIGH_WATER_BYTES: usize = 1024 * 1024;

/// Outbound bytes below which deliveries to a throttled connection resume, in bytes.
pub const OUTBOUND_LOW_WATER_BYTES: usize = 256 * 1024;

/// Outbound bytes at which a connection that does not read its replies is disconnected,
/// in bytes. Well above the delivery high-water mark: only replies, confirms and returns
/// can push a buffer past it.
pub const OUTBOUND_HARD_CAP_BYTES: usize = 64 * 1024 * 1024;

/// Part of a connection's outbound hard cap that direct replies may fill, as a divisor
/// (1/2): a reply that would take the backlog past `hard cap / 2` bytes is dropped rather
/// than written, so replies other clients send can never get a requester disconnected,
/// and the other half stays for the requester's own method replies, confirms and
/// returns. The hard cap is at least four of the largest messages plus
/// [`OUTBOUND_HIGH_WATER_BYTES`], so the largest reply always fits an idle connection
/// (docs/amqp.md, "Direct reply-to").
pub const DIRECT_REPLY_BACKLOG_DIVISOR: usize = 2;

/// Capacity a buffer keeps after it drains; larger ones are released, in bytes. An idle
/// connection costs about two of these plus its socket.
pub const BUFFER_IDLE_BYTES: usize = 4 * 1024;

/// Bytes read from one socket per readiness event before other sockets are served.
pub const READ_BYTES_PER_EVENT: usize = 1024 * 1024;

/// Time a shutdown waits for outbound buffers to flush, in milliseconds (default).
pub const SHUTDOWN_FLUSH_MS_DEFAULT: u64 = 10_000;

/// Time a client has to complete the handshake after connecting, in milliseconds, by
/// default (`--handshake-timeout-ms`; RabbitMQ's `handshake_timeout` is 10 s). Counted
/// from accept, whatever the client trickles meanwhile (slowloris).
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Shortest `--handshake-timeout-ms`, in milliseconds (the I/O thread's timers run every
/// 250 ms, so a shorter deadline could not be kept anyway).
pub const HANDSHAKE_TIMEOUT_MS_MIN: u64 = 250;

/// Longest `--handshake-timeout-ms`, in milliseconds (10 minutes).
pub const HANDSHAKE_TIMEOUT_MS_MAX: u64 = 600_000;

/// Open connections the server allows at most, in connections: the default and the
/// ceiling of `--max-connections` (RabbitMQ's `connection_max` is unlimited by default;
/// we bound it).
pub const CONNECTIONS_MAX: usize = 65_536;

/// Sockets still in their handshake the server holds beyond `--max-connections`, in
/// sockets. A socket accepted beyond `max_connections + HANDSHAKES_PENDING_MAX` is closed
/// at once; the others are refused at `connection.open` with 530 when the limit is
/// reached, or dropped at their handshake deadline.
pub const HANDSHAKES_PENDING_MAX: usize = 1024;

/// Queues one vhost may hold by default, in queues (`--max-queues-per-vhost`; RabbitMQ's
/// `max-queues` vhost limit is unlimited by default; we bound it).
pub const QUEUES_PER_VHOST_MAX_DEFAULT: usize = 100_000;

/// Exchanges one vhost may hold by default, not counting the default and `amq.*` ones, in
/// exchanges (`--max-exchanges-per-vhost`; RabbitMQ has no such limit).
pub const EXCHANGES_PER_VHOST_MAX_DEFAULT: usize = 100_000;

/// Consumers one channel may hold by default, in consumers
/// (`--max-consumers-per-channel`; RabbitMQ's `consumer_max_per_channel`, unlimited by
/// default; we bound it).
pub const CONSUMERS_PER_CHANNEL_MAX_DEFAULT: usize = 65_536;

/// Smallest `--max-outbound-bytes`, in bytes: twice the delivery high-water mark, so that
/// deliveries are held back well before a connection is cut off.
pub const OUTBOUND_BYTES_MAX_MIN: usize = 2 * OUTBOUND_HIGH_WATER_BYTES;

/// Largest `--max-message-bytes`, in bytes (128 MiB, RabbitMQ's `max_message_size`
/// default).
pub const MESSAGE_BODY_BYTES_MAX_MAX: usize = 8 * MESSAGE_BODY_BYTES_MAX_DEFAULT;

/// Rows a `list` reply carries at most.
pub const LIST_ROWS_MAX: usize = 100_000;

/// Messages one `basic.publish` batch or one `basic.deliver` batch may carry.
pub const BATCH_ITEMS_MAX: usize = 4096;

/// Items reserved up front when decoding a counted list; larger lists grow as they decode,
/// so a lying count cannot make the decoder allocate before it reads.
pub const DECODE_PREALLOC_ITEMS_MAX: usize = 256;

/// Body bytes of ready messages a queue keeps in memory by default, in bytes (64 MiB,
/// `--queue-memory-bytes`). Beyond it, new persistent messages of a durable queue keep only
/// their place in the store and are read back at delivery (docs/storage.md, "Memory
/// budget").
pub const QUEUE_MEMORY_BYTES_DEFAULT: usize = 64 * 1024 * 1024;

/// Largest `x-message-ttl`, `x-expires` or message `expiration`, in ms: 315,360,000,000,
/// ten years of 365 days (RabbitMQ's `rabbit_misc:check_expiry`). Policies' `message-ttl`
/// and `expires` are not bounded, as in RabbitMQ (`rabbit_policies`); deadlines saturate.
pub const EXPIRY_MS_MAX: u64 = 315_360_000_000;

/// Time a delivery may stay unacknowledged before its consumer is cancelled and it is
/// requeued, by default, in ms (30 minutes, RabbitMQ's `consumer_timeout` default;
/// `--consumer-timeout-ms`, overridden per queue by `x-consumer-timeout`; 0 = never).
pub const CONSUMER_TIMEOUT_MS_DEFAULT: u64 = 30 * 60 * 1000;

/// Delivery tags of timed-out deliveries a channel remembers, so a late ack, nack or
/// reject of one is ignored instead of closing the channel with 406, in tags. Beyond it
/// the oldest (lowest) tags are forgotten: a late ack of one of those is a 406 again.
pub const TIMED_OUT_TAGS_MAX: usize = 4096;

/// Largest PEM file (certificate chain, private key, CA bundle) read for TLS, in bytes
/// (1 MiB: a chain of a few certificates is a few KiB; a bigger file is a mistake, not a
/// reason to read without bound).
pub const TLS_PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Bytes of encrypted records (and of plaintext written before the TLS handshake ends) one
/// TLS connection may hold in its TLS layer beyond its outbound buffer, in bytes (rustls's
/// `set_buffer_limit`; rustls's own default is 64 KiB). What a client does not read stays
/// in the outbound buffer, under its high-water mark and hard cap.
pub const TLS_SEND_BUFFER_BYTES: usize = 256 * 1024;

/// Largest definitions document accepted or produced, in bytes (16 MiB: it travels as one
/// native-protocol payload, whose bound is [`PAYLOAD_BYTES_MAX`]; enough for about 100,000
/// queues with their bindings).
pub const DEFINITIONS_JSON_BYTES_MAX: usize = MESSAGE_BODY_BYTES_MAX_DEFAULT;

// Relations between the bounds, checked when the crate compiles.
const _: () = assert!(OUTBOUND_LOW_WATER_BYTES < OUTBOUND_HIGH_WATER_BYTES);
const _: () = assert!(OUTBOUND_HIGH_WATER_BYTES < OUTBOUND_HARD_CAP_BYTES);
const _: () = assert!(OUTBOUND_BYTES_MAX_MIN <= OUTBOUND_HARD_CAP_BYTES);
const _: () = assert!(FRAME_BYTES_MIN <= FRAME_BYTES_MAX);
const _: () = assert!(SHORT_STRING_BYTES_MAX < FRAME_BYTES_MIN as usize);
const _: () = assert!(PROPERTIES_BYTES_MAX <= FRAME_BYTES_MAX as usize);
const _: () = assert!(HANDSHAKE_TIMEOUT_MS_MIN <= HANDSHAKE_TIMEOUT_MS);
const _: () = assert!(HANDSHAKE_TIMEOUT_MS <= HANDSHAKE_TIMEOUT_MS_MAX);
const _: () = assert!(DECODE_PREALLOC_ITEMS_MAX <= BATCH_ITEMS_MAX);
const _: () = assert!(MESSAGE_BODY_BYTES_MAX_DEFAULT <= MESSAGE_BODY_BYTES_MAX_MAX);
const _: () = assert!(CONSUMER_TIMEOUT_MS_DEFAULT <= EXPIRY_MS_MAX);
const _: () = assert!(DEFINITIONS_JSON_BYTES_MAX <= PAYLOAD_BYTES_MAX);
