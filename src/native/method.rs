//! Methods of the native protocol and their payload encoding.
//!
//! A payload is `u16` method id, `u32` request id, then the method's fields in the order
//! listed on each variant. Field encodings: `sstr` = `u8` length + UTF-8 (≤ 255 bytes);
//! `lstr` = `u32` length + bytes; `bool` = one byte; `table` = AMQP field table
//! ([`crate::types::field_table`]); `props` = [`BasicProperties`] binary form; integers
//! big-endian. Method names and fields mirror AMQP 0-9-1 (`queue.declare`,
//! `basic.consume`, …); `docs/protocol.md` lists every id.

use crate::alarm::MemoryWatermark;
use crate::error::DecodeError;
use crate::limits::{BATCH_ITEMS_MAX, DECODE_PREALLOC_ITEMS_MAX, LIST_ROWS_MAX};
use crate::types::codec::{
    put_bool, put_long_bytes, put_short_str, put_u16, put_u32, put_u64, Reader,
};
use crate::types::field_table::{decode_table, encode_table};
use crate::types::{BasicProperties, FieldTable};

/// `MemoryHighWatermarkSet` form byte: a fraction of the memory available.
const WATERMARK_RELATIVE: u8 = 1;

/// `MemoryHighWatermarkSet` form byte: an absolute number of bytes.
const WATERMARK_ABSOLUTE: u8 = 2;

/// What `list` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Virtual hosts.
    Vhosts = 1,
    /// Exchanges of the connection's vhost.
    Exchanges = 2,
    /// Queues of the connection's vhost.
    Queues = 3,
    /// Bindings of the connection's vhost.
    Bindings = 4,
    /// Consumers of the connection's vhost.
    Consumers = 5,
    /// Connections to the server.
    Connections = 6,
    /// Users (administrators only).
    Users = 7,
    /// Permissions of every user in every vhost (administrators only).
    Permissions = 8,
    /// Policies of the connection's vhost (`policymaker` or `administrator`; issue 8).
    Policies = 9,
}

impl ListKind {
    /// The kind for its wire number.
    ///
    /// # Errors
    /// [`DecodeError`] for an unknown number.
    pub fn from_u8(v: u8) -> Result<ListKind, DecodeError> {
        Ok(match v {
            1 => ListKind::Vhosts,
            2 => ListKind::Exchanges,
            3 => ListKind::Queues,
            4 => ListKind::Bindings,
            5 => ListKind::Consumers,
            6 => ListKind::Connections,
            7 => ListKind::Users,
            8 => ListKind::Permissions,
            9 => ListKind::Policies,
            _ => return Err(DecodeError::new(format!("unknown list kind {v}"))),
        })
    }
}

/// What `permission.set` carries: a user's three patterns in a vhost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionSpec {
    /// User name.
    pub user: String,
    /// Vhost name.
    pub vhost: String,
    /// Configure pattern (declare, delete).
    pub configure: String,
    /// Write pattern (publish, bind to).
    pub write: String,
    /// Read pattern (consume, get, purge, bind from).
    pub read: String,
}

/// What `policy.set` carries (RabbitMQ's `set_policy` arguments; issue 8 part 6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySpec {
    /// Vhost name.
    pub vhost: String,
    /// Policy name.
    pub name: String,
    /// Regular expression over queue/exchange names.
    pub pattern: String,
    /// `queues`, `exchanges` or `all`.
    pub apply_to: String,
    /// Priority (the highest matching policy applies).
    pub priority: i64,
    /// The definition: a JSON object, as text.
    pub definition: String,
}

/// One message of a publish batch.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishMessage {
    /// Exchange to publish to; empty is the default exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Return the message (basic.return, 312) when no queue takes it.
    pub mandatory: bool,
    /// Message properties.
    pub properties: BasicProperties,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// One message pushed to a consumer.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The consumer it is for.
    pub consumer_tag: String,
    /// Channel-scoped delivery tag, counting from 1.
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// Exchange it was published to.
    pub exchange: String,
    /// Routing key it was published with.
    pub routing_key: String,
    /// Message properties.
    pub properties: BasicProperties,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// Every method of the native protocol. Ids are given as `0xNNNN`.
#[derive(Clone, Debug, PartialEq)]
pub enum Method {
    /// 0x0001 client→server, channel 0: `sstr user, lstr password, sstr vhost,
    /// u32 frame_max, u16 heartbeat_s, u16 channel_max, sstr client_name`. 0 = no preference.
    Open {
        /// User name.
        user: String,
        /// Password.
        password: String,
        /// Virtual host to use.
        vhost: String,
        /// Largest frame the client accepts, bytes (0 = server's choice).
        frame_max: u32,
        /// Heartbeat interval the client wants, seconds (0 = no preference: the server's).
        heartbeat_s: u16,
        /// Highest channel number the client wants (0 = server's choice).
        channel_max: u16,
        /// Free-form client name, shown in `list connections`.
        client_name: String,
    },
    /// 0x0002 server→client: `u32 frame_max, u16 heartbeat_s, u16 channel_max,
    /// sstr server_version, u64 connection_id`: the negotiated values.
    OpenOk {
        /// Negotiated frame size, bytes.
        frame_max: u32,
        /// Negotiated heartbeat interval, seconds.
        heartbeat_s: u16,
        /// Highest usable channel number.
        channel_max: u16,
        /// Server version string.
        server_version: String,
        /// The server's id for this connection.
        connection_id: u64,
    },
    /// 0x0003 either way, channel 0: `u16 reply_code, sstr reply_text, u16 method_id`
    /// (the method that caused it, 0 if none). The peer answers `CloseOk`.
    Close {
        /// AMQP reply code.
        reply_code: u16,
        /// Human-readable reason.
        reply_text: String,
        /// Method id that failed, or 0.
        method_id: u16,
    },
    /// 0x0004 either way: acknowledges `Close` or `ChannelClose`.
    CloseOk,
    /// 0x0005 server→client: a request without a result succeeded.
    Ok,
    /// 0x0006 server→client, channel 0, request id 0: `sstr reason`. A resource alarm is
    /// set and this connection publishes: the server stops reading it until
    /// `ConnectionUnblocked` (RabbitMQ's `connection.blocked` extension; reasons
    /// `low on memory`, `low on disk`, `low on memory and disk`).
    ConnectionBlocked {
        /// Why publishing is blocked.
        reason: String,
    },
    /// 0x0007 server→client, channel 0, request id 0: every alarm cleared; the server
    /// reads the connection again (RabbitMQ's `connection.unblocked`).
    ConnectionUnblocked,
    /// 0x0008 channel 0, admin: `u8 form, u64 value` with form 1 = relative (value = the
    /// fraction's IEEE 754 `f64` bits, `0.0..=1.0`) or 2 = absolute (value = bytes).
    /// Sets the memory high-water mark (`rabbitmqctl set_vm_memory_high_watermark`);
    /// answered `Ok`, or 406 for a fraction out of range.
    MemoryHighWatermarkSet {
        /// The new watermark.
        watermark: MemoryWatermark,
    },
    /// 0x0009 channel 0, admin: `u64 bytes`. Sets the free-disk low-water mark
    /// (`rabbitmqctl set_disk_free_limit`); answered `Ok`.
    DiskFreeLimitSet {
        /// Free bytes below which the disk alarm sets.
        bytes: u64,
    },
    /// 0x000A channel 0, `policymaker` or `administrator`: `sstr vhost, sstr name, lstr
    /// pattern, sstr apply_to, u64 priority (two's complement i64), lstr definition` (a
    /// JSON object). Sets a policy (`rabbitmqctl set_policy`); answered `Ok`, 404 for an
    /// unknown vhost, 406 naming a bad pattern, apply-to or definition key.
    PolicySet(Box<PolicySpec>),
    /// 0x000B channel 0, `policymaker` or `administrator`: `sstr vhost, sstr name`.
    /// Clears a policy (`rabbitmqctl clear_policy`); 404 when there is none.
    PolicyClear {
        /// Vhost name.
        vhost: String,
        /// Policy name.
        name: String,
    },
    /// 0x0010 channel 0: `sstr name`. Creates a virtual host (idempotent).
    VhostDeclare {
        /// Vhost name.
        name: String,
    },
    /// 0x0011 channel 0: `sstr name`. Deletes a virtual host and everything in it.
    VhostDelete {
        /// Vhost name.
        name: String,
    },
    /// 0x0012 channel 0: `u8 kind`. Lists objects ([`ListKind`]).
    List {
        /// What to list.
        kind: ListKind,
    },
    /// 0x0013 server→client: `u32 count, count × table`. One table per row, fields named
    /// as RabbitMQ's management API names them.
    ListOk {
        /// The rows.
        rows: Vec<FieldTable>,
    },
    /// 0x0014 channel 0: server status request.
    Status,
    /// 0x0015 server→client: `table info` (version, uptime, counts).
    StatusOk {
        /// Status fields.
        info: FieldTable,
    },
    /// 0x0016 channel 0, administrators: `sstr name, lstr secret, sstr hash_algorithm,
    /// sstr tags`. Creates a user; `hash_algorithm` empty means `secret` is a password in
    /// clear (hashed by the server), otherwise `secret` is a hash of that algorithm
    /// (`rabbit_password_hashing_sha256`, …). `tags` is a comma-separated list.
    UserAdd {
        /// User name.
        name: String,
        /// Password, or hash when `hash_algorithm` is set.
        secret: String,
        /// Empty, or the algorithm of the hash in `secret`.
        hash_algorithm: String,
        /// Comma-separated tags.
        tags: String,
    },
    /// 0x0017 channel 0, administrators: `sstr name`. Deletes a user and its permissions
    /// and closes its connections.
    UserDelete {
        /// User name.
        name: String,
    },
    /// 0x0018 channel 0, administrators: `sstr name, lstr password`. Changes a password.
    UserPasswd {
        /// User name.
        name: String,
        /// New password in clear.
        password: String,
    },
    /// 0x0019 channel 0, administrators: `sstr name, sstr tags`. Replaces a user's tags.
    UserTags {
        /// User name.
        name: String,
        /// Comma-separated tags.
        tags: String,
    },
    /// 0x001A channel 0, administrators: `sstr user, sstr vhost, lstr configure, lstr
    /// write, lstr read`. Sets a user's permissions in a vhost.
    PermissionSet(Box<PermissionSpec>),
    /// 0x001B channel 0, administrators: `sstr user, sstr vhost`. Clears them.
    PermissionClear {
        /// User name.
        user: String,
        /// Vhost name.
        vhost: String,
    },
    /// 0x001C channel 0, administrators: `u64 connection_id, sstr reason`. Closes a native
    /// or AMQP connection (its id as `list connections` shows it) with 320
    /// CONNECTION_FORCED and the reason (RabbitMQ's `rabbitmqctl close_connection`); 404
    /// for an unknown id. Answered with `Ok`.
    ConnectionCloseAdmin {
        /// The connection's id.
        connection_id: u64,
        /// Text the client receives after `CONNECTION_FORCED - `.
        reason: String,
    },
    /// 0x001D channel 0, administrators: no fields. Asks for the definitions in
    /// RabbitMQ's JSON format; answered with `DefinitionsExportOk`.
    DefinitionsExport,
    /// 0x001E server→client: `lstr json`. The definitions (answer to `DefinitionsExport`)
    /// or the import summary (answer to `DefinitionsImport`), UTF-8 JSON of at most
    /// [`crate::broker::definitions::DEFINITIONS_JSON_BYTES_MAX`] bytes.
    DefinitionsExportOk {
        /// The JSON text.
        json: String,
    },
    /// 0x001F channel 0, administrators: `lstr json`. Imports definitions in RabbitMQ's
    /// JSON format; answered with `DefinitionsExportOk` carrying the import summary.
    DefinitionsImport {
        /// The JSON text.
        json: String,
    },
    /// 0x0020 client→server on a new channel number: opens the channel.
    ChannelOpen,
    /// 0x0021 either way: `u16 reply_code, sstr reply_text, u16 method_id`. Closes one
    /// channel; the peer answers `CloseOk` on that channel and ignores other frames on it
    /// until then.
    ChannelClose {
        /// AMQP reply code.
        reply_code: u16,
        /// Human-readable reason.
        reply_text: String,
        /// Method id that failed, or 0.
        method_id: u16,
    },
    /// 0x0030: `sstr exchange, sstr kind, bool passive, bool durable, bool auto_delete,
    /// bool internal, table arguments`.
    ExchangeDeclare {
        /// Exchange name.
        exchange: String,
        /// `direct`, `fanout`, `topic` or `headers`.
        kind: String,
        /// Only check that it exists.
        passive: bool,
        /// Survives a restart.
        durable: bool,
        /// Deleted when its last binding goes.
        auto_delete: bool,
        /// Cannot be published to directly.
        internal: bool,
        /// Optional arguments.
        arguments: FieldTable,
    },
    /// 0x0031: `sstr exchange, bool if_unused`.
    ExchangeDelete {
        /// Exchange name.
        exchange: String,
        /// Refuse (406) when it has bindings.
        if_unused: bool,
    },
    /// 0x0032: `sstr destination, sstr source, sstr routing_key, table arguments`.
    ExchangeBind {
        /// Exchange receiving the routed messages.
        destination: String,
        /// Exchange messages are published to.
        source: String,
        /// Binding key.
        routing_key: String,
        /// Binding arguments (headers exchange match).
        arguments: FieldTable,
    },
    /// 0x0033: fields as `ExchangeBind`.
    ExchangeUnbind {
        /// Exchange receiving the routed messages.
        destination: String,
        /// Exchange messages are published to.
        source: String,
        /// Binding key.
        routing_key: String,
        /// Binding arguments.
        arguments: FieldTable,
    },
    /// 0x0040: `sstr queue, bool passive, bool durable, bool exclusive, bool auto_delete,
    /// table arguments`. An empty name asks the server to generate one.
    QueueDeclare {
        /// Queue name, or empty.
        queue: String,
        /// Only check that it exists.
        passive: bool,
        /// Survives a restart.
        durable: bool,
        /// Owned by this connection, deleted when it closes.
        exclusive: bool,
        /// Deleted when its last consumer goes.
        auto_delete: bool,
        /// Optional arguments.
        arguments: FieldTable,
    },
    /// 0x0041: `sstr queue, u32 message_count, u32 consumer_count`.
    QueueDeclareOk {
        /// The (possibly generated) name.
        queue: String,
        /// Ready messages.
        message_count: u32,
        /// Active consumers.
        consumer_count: u32,
    },
    /// 0x0042: `sstr queue, sstr exchange, sstr routing_key, table arguments`.
    QueueBind {
        /// Queue name.
        queue: String,
        /// Exchange name.
        exchange: String,
        /// Binding key.
        routing_key: String,
        /// Binding arguments.
        arguments: FieldTable,
    },
    /// 0x0043: fields as `QueueBind`.
    QueueUnbind {
        /// Queue name.
        queue: String,
        /// Exchange name.
        exchange: String,
        /// Binding key.
        routing_key: String,
        /// Binding arguments.
        arguments: FieldTable,
    },
    /// 0x0044: `sstr queue`.
    QueuePurge {
        /// Queue name.
        queue: String,
    },
    /// 0x0045: `u32 message_count` (messages purged).
    QueuePurgeOk {
        /// Messages removed.
        message_count: u32,
    },
    /// 0x0046: `sstr queue, bool if_unused, bool if_empty`.
    QueueDelete {
        /// Queue name.
        queue: String,
        /// Refuse (406) when it has consumers.
        if_unused: bool,
        /// Refuse (406) when it has messages.
        if_empty: bool,
    },
    /// 0x0047: `u32 message_count` (messages deleted with the queue).
    QueueDeleteOk {
        /// Messages deleted.
        message_count: u32,
    },
    /// 0x0050: `u16 prefetch_count, bool global`.
    BasicQos {
        /// Unacked deliveries allowed (0 = unlimited).
        prefetch_count: u16,
        /// false: per consumer; true: per channel (RabbitMQ's meaning).
        global: bool,
    },
    /// 0x0051: `sstr queue, sstr consumer_tag, bool no_ack, bool exclusive, table arguments`.
    BasicConsume {
        /// Queue name.
        queue: String,
        /// Consumer tag, or empty to have one generated.
        consumer_tag: String,
        /// Deliveries are acked on sending.
        no_ack: bool,
        /// Only consumer of the queue.
        exclusive: bool,
        /// Consumer arguments.
        arguments: FieldTable,
    },
    /// 0x0052: `sstr consumer_tag`.
    BasicConsumeOk {
        /// The (possibly generated) tag.
        consumer_tag: String,
    },
    /// 0x0053 either way: `sstr consumer_tag`. From the server (request id 0) it says the
    /// consumer was cancelled (queue deleted); the client does not answer.
    BasicCancel {
        /// Consumer tag.
        consumer_tag: String,
    },
    /// 0x0054 client→server, no reply: `u32 count`, then per message `sstr exchange,
    /// sstr routing_key, bool mandatory, props, lstr body`.
    Publish {
        /// The messages, processed in order.
        messages: Vec<PublishMessage>,
    },
    /// 0x0055 server→client: `u16 reply_code, sstr reply_text, sstr exchange,
    /// sstr routing_key, props, lstr body`. An unroutable mandatory message.
    Return {
        /// 312 NO_ROUTE.
        reply_code: u16,
        /// Reason text.
        reply_text: String,
        /// Exchange it was published to.
        exchange: String,
        /// Routing key.
        routing_key: String,
        /// Properties (boxed: keeps the method enum small for the many methods that
        /// move through mailboxes).
        properties: Box<BasicProperties>,
        /// Body.
        body: Vec<u8>,
    },
    /// 0x0056 server→client: `u32 count`, then per delivery `sstr consumer_tag,
    /// u64 delivery_tag, bool redelivered, sstr exchange, sstr routing_key, props, lstr body`.
    Deliver {
        /// The deliveries, in delivery-tag order.
        deliveries: Vec<Delivery>,
    },
    /// 0x0057: `sstr queue, bool no_ack`.
    BasicGet {
        /// Queue name.
        queue: String,
        /// Ack on sending.
        no_ack: bool,
    },
    /// 0x0058: `u64 delivery_tag, bool redelivered, sstr exchange, sstr routing_key,
    /// u32 message_count, props, lstr body`.
    GetOk {
        /// Delivery tag.
        delivery_tag: u64,
        /// Delivered before.
        redelivered: bool,
        /// Exchange.
        exchange: String,
        /// Routing key.
        routing_key: String,
        /// Messages left ready in the queue.
        message_count: u32,
        /// Properties (boxed, as in `Return`).
        properties: Box<BasicProperties>,
        /// Body.
        body: Vec<u8>,
    },
    /// 0x0059: the queue had no ready message.
    GetEmpty,
    /// 0x005A either way, no reply: `u64 delivery_tag, bool multiple`. From the server:
    /// a publisher confirm.
    Ack {
        /// Delivery tag (or publish sequence number for confirms).
        delivery_tag: u64,
        /// Everything up to and including the tag.
        multiple: bool,
    },
    /// 0x005B either way, no reply: `u64 delivery_tag, bool multiple, bool requeue`.
    Nack {
        /// Delivery tag (or publish sequence number).
        delivery_tag: u64,
        /// Everything up to and including the tag.
        multiple: bool,
        /// Requeue instead of discarding.
        requeue: bool,
    },
    /// 0x005C client→server, no reply: `u64 delivery_tag, bool requeue`.
    Reject {
        /// Delivery tag.
        delivery_tag: u64,
        /// Requeue instead of discarding.
        requeue: bool,
    },
    /// 0x005D: `bool requeue`. Redeliver every unacked message of the channel.
    Recover {
        /// Must be true (AMQP's requeue=false is not supported, as in RabbitMQ).
        requeue: bool,
    },
    /// 0x0060: puts the channel in publisher-confirm mode.
    ConfirmSelect,
}

impl Method {
    /// The method's wire id.
    pub fn id(&self) -> u16 {
        use Method::*;
        match self {
            Open { .. } => 0x0001,
            OpenOk { .. } => 0x0002,
            Close { .. } => 0x0003,
            CloseOk => 0x0004,
            Ok => 0x0005,
            ConnectionBlocked { .. } => 0x0006,
            ConnectionUnblocked => 0x0007,
            MemoryHighWatermarkSet { .. } => 0x0008,
            DiskFreeLimitSet { .. } => 0x0009,
            PolicySet(_) => 0x000A,
            PolicyClear { .. } => 0x000B,
            VhostDeclare { .. } => 0x0010,
            VhostDelete { .. } => 0x0011,
            List { .. } => 0x0012,
            ListOk { .. } => 0x0013,
            Status => 0x0014,
            StatusOk { .. } => 0x0015,
            UserAdd { .. } => 0x0016,
            UserDelete { .. } => 0x0017,
            UserPasswd { .. } => 0x0018,
            UserTags { .. } => 0x0019,
            PermissionSet(_) => 0x001A,
            PermissionClear { .. } => 0x001B,
            ConnectionCloseAdmin { .. } => 0x001C,
            DefinitionsExport => 0x001D,
            DefinitionsExportOk { .. } => 0x001E,
            DefinitionsImport { .. } => 0x001F,
            ChannelOpen => 0x0020,
            ChannelClose { .. } => 0x0021,
            ExchangeDeclare { .. } => 0x0030,
            ExchangeDelete { .. } => 0x0031,
            ExchangeBind { .. } => 0x0032,
            ExchangeUnbind { .. } => 0x0033,
            QueueDeclare { .. } => 0x0040,
            QueueDeclareOk { .. } => 0x0041,
            QueueBind { .. } => 0x0042,
            QueueUnbind { .. } => 0x0043,
            QueuePurge { .. } => 0x0044,
            QueuePurgeOk { .. } => 0x0045,
            QueueDelete { .. } => 0x0046,
            QueueDeleteOk { .. } => 0x0047,
            BasicQos { .. } => 0x0050,
            BasicConsume { .. } => 0x0051,
            BasicConsumeOk { .. } => 0x0052,
            BasicCancel { .. } => 0x0053,
            Publish { .. } => 0x0054,
            Return { .. } => 0x0055,
            Deliver { .. } => 0x0056,
            BasicGet { .. } => 0x0057,
            GetOk { .. } => 0x0058,
            GetEmpty => 0x0059,
            Ack { .. } => 0x005A,
            Nack { .. } => 0x005B,
            Reject { .. } => 0x005C,
            Recover { .. } => 0x005D,
            ConfirmSelect => 0x0060,
        }
    }

    /// The method's name as in AMQP (`queue.declare`), for logs and error texts.
    pub fn name(&self) -> &'static str {
        method_name(self.id())
    }

    /// Appends the payload: method id, request id, fields.
    pub fn encode(&self, request_id: u32, out: &mut Vec<u8>) {
        use Method::*;
        put_u16(out, self.id());
        put_u32(out, request_id);
        match self {
            Open {
                user,
                password,
                vhost,
                frame_max,
                heartbeat_s,
                channel_max,
                client_name,
            } => {
                put_short_str(out, user);
                put_long_bytes(out, password.as_bytes());
                put_short_str(out, vhost);
                put_u32(out, *frame_max);
                put_u16(out, *heartbeat_s);
                put_u16(out, *channel_max);
                put_short_str(out, client_name);
            }
            OpenOk {
                frame_max,
                heartbeat_s,
                channel_max,
                server_version,
                connection_id,
            } => {
                put_u32(out, *frame_max);
                put_u16(out, *heartbeat_s);
                put_u16(out, *channel_max);
                put_short_str(out, server_version);
                put_u64(out, *connection_id);
            }
            Close {
                reply_code,
                reply_text,
                method_id,
            }
            | ChannelClose {
                reply_code,
                reply_text,
                method_id,
            } => {
                put_u16(out, *reply_code);
                put_short_str(out, reply_text);
                put_u16(out, *method_id);
            }
            CloseOk | Ok | ConnectionUnblocked | Status | ChannelOpen | GetEmpty
            | ConfirmSelect | DefinitionsExport => {}
            ConnectionCloseAdmin {
                connection_id,
                reason,
            } => {
                put_u64(out, *connection_id);
                put_short_str(out, reason);
            }
            DefinitionsExportOk { json } | DefinitionsImport { json } => {
                put_long_bytes(out, json.as_bytes())
            }
            ConnectionBlocked { reason } => put_short_str(out, reason),
            MemoryHighWatermarkSet { watermark } => match *watermark {
                MemoryWatermark::Relative(f) => {
                    out.push(WATERMARK_RELATIVE);
                    put_u64(out, f.to_bits());
                }
                MemoryWatermark::Absolute(bytes) => {
                    out.push(WATERMARK_ABSOLUTE);
                    put_u64(out, bytes);
                }
            },
            DiskFreeLimitSet { bytes } => put_u64(out, *bytes),
            PolicySet(p) => {
                put_short_str(out, &p.vhost);
                put_short_str(out, &p.name);
                put_long_bytes(out, p.pattern.as_bytes());
                put_short_str(out, &p.apply_to);
                put_u64(out, p.priority as u64);
                put_long_bytes(out, p.definition.as_bytes());
            }
            PolicyClear { vhost, name } => {
                put_short_str(out, vhost);
                put_short_str(out, name);
            }
            VhostDeclare { name } | VhostDelete { name } => put_short_str(out, name),
            List { kind } => out.push(*kind as u8),
            ListOk { rows } => {
                put_u32(out, rows.len() as u32);
                for row in rows {
                    encode_table(out, row);
                }
            }
            StatusOk { info } => encode_table(out, info),
            UserAdd {
                name,
                secret,
                hash_algorithm,
                tags,
            } => {
                put_short_str(out, name);
                put_long_bytes(out, secret.as_bytes());
                put_short_str(out, hash_algorithm);
                put_short_str(out, tags);
            }
            UserDelete { name } => put_short_str(out, name),
            UserPasswd { name, password } => {
                put_short_str(out, name);
                put_long_bytes(out, password.as_bytes());
            }
            UserTags { name, tags } => {
                put_short_str(out, name);
                put_short_str(out, tags);
            }
            PermissionSet(p) => {
                put_short_str(out, &p.user);
                put_short_str(out, &p.vhost);
                put_long_bytes(out, p.configure.as_bytes());
                put_long_bytes(out, p.write.as_bytes());
                put_long_bytes(out, p.read.as_bytes());
            }
            PermissionClear { user, vhost } => {
                put_short_str(out, user);
                put_short_str(out, vhost);
            }
            ExchangeDeclare {
                exchange,
                kind,
                passive,
                durable,
                auto_delete,
                internal,
                arguments,
            } => {
                put_short_str(out, exchange);
                put_short_str(out, kind);
                put_bool(out, *passive);
                put_bool(out, *durable);
                put_bool(out, *auto_delete);
                put_bool(out, *internal);
                encode_table(out, arguments);
            }
            ExchangeDelete {
                exchange,
                if_unused,
            } => {
                put_short_str(out, exchange);
                put_bool(out, *if_unused);
            }
            ExchangeBind {
                destination,
                source,
                routing_key,
                arguments,
            }
            | ExchangeUnbind {
                destination,
                source,
                routing_key,
                arguments,
            } => {
                put_short_str(out, destination);
                put_short_str(out, source);
                put_short_str(out, routing_key);
                encode_table(out, arguments);
            }
            QueueDeclare {
                queue,
                passive,
                durable,
                exclusive,
                auto_delete,
                arguments,
            } => {
                put_short_str(out, queue);
                put_bool(out, *passive);
                put_bool(out, *durable);
                put_bool(out, *exclusive);
                put_bool(out, *auto_delete);
                encode_table(out, arguments);
            }
            QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            } => {
                put_short_str(out, queue);
                put_u32(out, *message_count);
                put_u32(out, *consumer_count);
            }
            QueueBind {
                queue,
                exchange,
                routing_key,
                arguments,
            }
            | QueueUnbind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => {
                put_short_str(out, queue);
                put_short_str(out, exchange);
                put_short_str(out, routing_key);
                encode_table(out, arguments);
            }
            QueuePurge { queue } => put_short_str(out, queue),
            QueuePurgeOk { message_count } | QueueDeleteOk { message_count } => {
                put_u32(out, *message_count)
            }
            QueueDelete {
                queue,
                if_unused,
                if_empty,
            } => {
                put_short_str(out, queue);
                put_bool(out, *if_unused);
                put_bool(out, *if_empty);
            }
            BasicQos {
                prefetch_count,
                global,
            } => {
                put_u16(out, *prefetch_count);
                put_bool(out, *global);
            }
            BasicConsume {
                queue,
                consumer_tag,
                no_ack,
                exclusive,
                arguments,
            } => {
                put_short_str(out, queue);
                put_short_str(out, consumer_tag);
                put_bool(out, *no_ack);
                put_bool(out, *exclusive);
                encode_table(out, arguments);
            }
            BasicConsumeOk { consumer_tag } | BasicCancel { consumer_tag } => {
                put_short_str(out, consumer_tag)
            }
            Publish { messages } => {
                put_u32(out, messages.len() as u32);
                for m in messages {
                    encode_publish(
                        out,
                        &m.exchange,
                        &m.routing_key,
                        m.mandatory,
                        &m.properties,
                        &m.body,
                    );
                }
            }
            Return {
                reply_code,
                reply_text,
                exchange,
                routing_key,
                properties,
                body,
            } => {
                put_u16(out, *reply_code);
                put_short_str(out, reply_text);
                put_short_str(out, exchange);
                put_short_str(out, routing_key);
                properties.encode(out);
                put_long_bytes(out, body);
            }
            Deliver { deliveries } => {
                put_u32(out, deliveries.len() as u32);
                for d in deliveries {
                    encode_delivery(
                        out,
                        &d.consumer_tag,
                        d.delivery_tag,
                        d.redelivered,
                        &d.exchange,
                        &d.routing_key,
                        &d.properties,
                        &d.body,
                    );
                }
            }
            BasicGet { queue, no_ack } => {
                put_short_str(out, queue);
                put_bool(out, *no_ack);
            }
            GetOk {
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                message_count,
                properties,
                body,
            } => {
                put_u64(out, *delivery_tag);
                put_bool(out, *redelivered);
                put_short_str(out, exchange);
                put_short_str(out, routing_key);
                put_u32(out, *message_count);
                properties.encode(out);
                put_long_bytes(out, body);
            }
            Ack {
                delivery_tag,
                multiple,
            } => {
                put_u64(out, *delivery_tag);
                put_bool(out, *multiple);
            }
            Nack {
                delivery_tag,
                multiple,
                requeue,
            } => {
                put_u64(out, *delivery_tag);
                put_bool(out, *multiple);
                put_bool(out, *requeue);
            }
            Reject {
                delivery_tag,
                requeue,
            } => {
                put_u64(out, *delivery_tag);
                put_bool(out, *requeue);
            }
            Recover { requeue } => put_bool(out, *requeue),
        }
    }

    /// Decodes one whole payload into its request id and method.
    ///
    /// # Errors
    /// [`DecodeError`] for an unknown method id, a truncated or malformed field, or bytes
    /// left over after the last field.
    pub fn decode(payload: &[u8]) -> Result<(u32, Method), DecodeError> {
        let mut r = Reader::new(payload);
        let id = r.u16("method id")?;
        let request_id = r.u32("request id")?;
        let m = decode_fields(id, &mut r)?;
        if !r.is_empty() {
            return Err(DecodeError::new(format!(
                "{} bytes left over after {}",
                r.remaining(),
                method_name(id)
            )));
        }
        Ok((request_id, m))
    }
}

/// Appends one message of a publish batch (without the batch count).
pub fn encode_publish(
    out: &mut Vec<u8>,
    exchange: &str,
    routing_key: &str,
    mandatory: bool,
    properties: &BasicProperties,
    body: &[u8],
) {
    put_short_str(out, exchange);
    put_short_str(out, routing_key);
    put_bool(out, mandatory);
    properties.encode(out);
    put_long_bytes(out, body);
}

/// Appends one delivery of a `Deliver` batch (without the batch count), from borrowed
/// parts so the server encodes straight from a queued message.
#[allow(clippy::too_many_arguments)]
pub fn encode_delivery(
    out: &mut Vec<u8>,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    properties: &BasicProperties,
    body: &[u8],
) {
    put_short_str(out, consumer_tag);
    put_u64(out, delivery_tag);
    put_bool(out, redelivered);
    put_short_str(out, exchange);
    put_short_str(out, routing_key);
    properties.encode(out);
    put_long_bytes(out, body);
}

/// The AMQP-style name of a method id (`"unknown"` for ids not in the protocol).
pub fn method_name(id: u16) -> &'static str {
    match id {
        0x0001 => "connection.open",
        0x0002 => "connection.open-ok",
        0x0003 => "connection.close",
        0x0004 => "close-ok",
        0x0005 => "ok",
        0x0006 => "connection.blocked",
        0x0007 => "connection.unblocked",
        0x0008 => "memory-high-watermark.set",
        0x0009 => "disk-free-limit.set",
        0x000A => "policy.set",
        0x000B => "policy.clear",
        0x0010 => "vhost.declare",
        0x0011 => "vhost.delete",
        0x0012 => "list",
        0x0013 => "list-ok",
        0x0014 => "status",
        0x0015 => "status-ok",
        0x0016 => "user.add",
        0x0017 => "user.delete",
        0x0018 => "user.passwd",
        0x0019 => "user.tags",
        0x001A => "permission.set",
        0x001B => "permission.clear",
        0x001C => "connection.close-admin",
        0x001D => "definitions.export",
        0x001E => "definitions.export-ok",
        0x001F => "definitions.import",
        0x0020 => "channel.open",
        0x0021 => "channel.close",
        0x0030 => "exchange.declare",
        0x0031 => "exchange.delete",
        0x0032 => "exchange.bind",
        0x0033 => "exchange.unbind",
        0x0040 => "queue.declare",
        0x0041 => "queue.declare-ok",
        0x0042 => "queue.bind",
        0x0043 => "queue.unbind",
        0x0044 => "queue.purge",
        0x0045 => "queue.purge-ok",
        0x0046 => "queue.delete",
        0x0047 => "queue.delete-ok",
        0x0050 => "basic.qos",
        0x0051 => "basic.consume",
        0x0052 => "basic.consume-ok",
        0x0053 => "basic.cancel",
        0x0054 => "basic.publish",
        0x0055 => "basic.return",
        0x0056 => "basic.deliver",
        0x0057 => "basic.get",
        0x0058 => "basic.get-ok",
        0x0059 => "basic.get-empty",
        0x005A => "basic.ack",
        0x005B => "basic.nack",
        0x005C => "basic.reject",
        0x005D => "basic.recover",
        0x0060 => "confirm.select",
        _ => "unknown",
    }
}

fn sstr(r: &mut Reader<'_>, what: &str) -> Result<String, DecodeError> {
    Ok(r.short_str(what)?.to_string())
}

fn decode_fields(id: u16, r: &mut Reader<'_>) -> Result<Method, DecodeError> {
    use Method::*;
    let m = match id {
        0x0001 => Open {
            user: sstr(r, "user")?,
            password: r.long_str("password")?.to_string(),
            vhost: sstr(r, "vhost")?,
            frame_max: r.u32("frame_max")?,
            heartbeat_s: r.u16("heartbeat")?,
            channel_max: r.u16("channel_max")?,
            client_name: sstr(r, "client_name")?,
        },
        0x0002 => OpenOk {
            frame_max: r.u32("frame_max")?,
            heartbeat_s: r.u16("heartbeat")?,
            channel_max: r.u16("channel_max")?,
            server_version: sstr(r, "server_version")?,
            connection_id: r.u64("connection_id")?,
        },
        0x0003 => Close {
            reply_code: r.u16("reply_code")?,
            reply_text: sstr(r, "reply_text")?,
            method_id: r.u16("method_id")?,
        },
        0x0004 => CloseOk,
        0x0005 => Method::Ok,
        0x0006 => ConnectionBlocked {
            reason: sstr(r, "reason")?,
        },
        0x0007 => ConnectionUnblocked,
        0x0008 => {
            let form = r.u8("watermark form")?;
            let value = r.u64("watermark")?;
            let watermark = match form {
                WATERMARK_RELATIVE => MemoryWatermark::Relative(f64::from_bits(value)),
                WATERMARK_ABSOLUTE => MemoryWatermark::Absolute(value),
                other => {
                    return Err(DecodeError::new(format!(
                        "unknown memory watermark form {other} (1 = relative, 2 = absolute)"
                    )))
                }
            };
            MemoryHighWatermarkSet { watermark }
        }
        0x0009 => DiskFreeLimitSet {
            bytes: r.u64("disk free limit")?,
        },
        0x000A => PolicySet(Box::new(PolicySpec {
            vhost: sstr(r, "vhost")?,
            name: sstr(r, "policy name")?,
            pattern: r.long_str("policy pattern")?.to_string(),
            apply_to: sstr(r, "apply-to")?,
            priority: r.u64("policy priority")? as i64,
            definition: r.long_str("policy definition")?.to_string(),
        })),
        0x000B => PolicyClear {
            vhost: sstr(r, "vhost")?,
            name: sstr(r, "policy name")?,
        },
        0x0010 => VhostDeclare {
            name: sstr(r, "vhost")?,
        },
        0x0011 => VhostDelete {
            name: sstr(r, "vhost")?,
        },
        0x0012 => List {
            kind: ListKind::from_u8(r.u8("list kind")?)?,
        },
        0x0013 => {
            let n = r.u32("row count")? as usize;
            // Each row takes at least 4 bytes: refuse counts the payload cannot hold.
            if n > r.remaining() / 4 || n > LIST_ROWS_MAX {
                return Err(DecodeError::new("row count exceeds payload or limit"));
            }
            let mut rows = Vec::with_capacity(n.min(DECODE_PREALLOC_ITEMS_MAX));
            for _ in 0..n {
                rows.push(decode_table(r)?);
            }
            ListOk { rows }
        }
        0x0014 => Status,
        0x0015 => StatusOk {
            info: decode_table(r)?,
        },
        0x0016 => UserAdd {
            name: sstr(r, "user name")?,
            secret: r.long_str("password")?.to_string(),
            hash_algorithm: sstr(r, "hash algorithm")?,
            tags: sstr(r, "tags")?,
        },
        0x0017 => UserDelete {
            name: sstr(r, "user name")?,
        },
        0x0018 => UserPasswd {
            name: sstr(r, "user name")?,
            password: r.long_str("password")?.to_string(),
        },
        0x0019 => UserTags {
            name: sstr(r, "user name")?,
            tags: sstr(r, "tags")?,
        },
        0x001A => PermissionSet(Box::new(PermissionSpec {
            user: sstr(r, "user name")?,
            vhost: sstr(r, "vhost")?,
            configure: r.long_str("configure pattern")?.to_string(),
            write: r.long_str("write pattern")?.to_string(),
            read: r.long_str("read pattern")?.to_string(),
        })),
        0x001B => PermissionClear {
            user: sstr(r, "user name")?,
            vhost: sstr(r, "vhost")?,
        },
        0x001C => ConnectionCloseAdmin {
            connection_id: r.u64("connection id")?,
            reason: sstr(r, "reason")?,
        },
        0x001D => DefinitionsExport,
        0x001E => DefinitionsExportOk {
            json: r.long_str("definitions")?.to_string(),
        },
        0x001F => DefinitionsImport {
            json: r.long_str("definitions")?.to_string(),
        },
        0x0020 => ChannelOpen,
        0x0021 => ChannelClose {
            reply_code: r.u16("reply_code")?,
            reply_text: sstr(r, "reply_text")?,
            method_id: r.u16("method_id")?,
        },
        0x0030 => ExchangeDeclare {
            exchange: sstr(r, "exchange")?,
            kind: sstr(r, "exchange type")?,
            passive: r.bool("passive")?,
            durable: r.bool("durable")?,
            auto_delete: r.bool("auto_delete")?,
            internal: r.bool("internal")?,
            arguments: decode_table(r)?,
        },
        0x0031 => ExchangeDelete {
            exchange: sstr(r, "exchange")?,
            if_unused: r.bool("if_unused")?,
        },
        0x0032 | 0x0033 => {
            let destination = sstr(r, "destination")?;
            let source = sstr(r, "source")?;
            let routing_key = sstr(r, "routing_key")?;
            let arguments = decode_table(r)?;
            if id == 0x0032 {
                ExchangeBind {
                    destination,
                    source,
                    routing_key,
                    arguments,
                }
            } else {
                ExchangeUnbind {
                    destination,
                    source,
                    routing_key,
                    arguments,
                }
            }
        }
        0x0040 => QueueDeclare {
            queue: sstr(r, "queue")?,
            passive: r.bool("passive")?,
            durable: r.bool("durable")?,
            exclusive: r.bool("exclusive")?,
            auto_delete: r.bool("auto_delete")?,
            arguments: decode_table(r)?,
        },
        0x0041 => QueueDeclareOk {
            queue: sstr(r, "queue")?,
            message_count: r.u32("message_count")?,
            consumer_count: r.u32("consumer_count")?,
        },
        0x0042 | 0x0043 => {
            let queue = sstr(r, "queue")?;
            let exchange = sstr(r, "exchange")?;
            let routing_key = sstr(r, "routing_key")?;
            let arguments = decode_table(r)?;
            if id == 0x0042 {
                QueueBind {
                    queue,
                    exchange,
                    routing_key,
                    arguments,
                }
            } else {
                QueueUnbind {
                    queue,
                    exchange,
                    routing_key,
                    arguments,
                }
            }
        }
        0x0044 => QueuePurge {
            queue: sstr(r, "queue")?,
        },
        0x0045 => QueuePurgeOk {
            message_count: r.u32("message_count")?,
        },
        0x0046 => QueueDelete {
            queue: sstr(r, "queue")?,
            if_unused: r.bool("if_unused")?,
            if_empty: r.bool("if_empty")?,
        },
        0x0047 => QueueDeleteOk {
            message_count: r.u32("message_count")?,
        },
        0x0050 => BasicQos {
            prefetch_count: r.u16("prefetch_count")?,
            global: r.bool("global")?,
        },
        0x0051 => BasicConsume {
            queue: sstr(r, "queue")?,
            consumer_tag: sstr(r, "consumer_tag")?,
            no_ack: r.bool("no_ack")?,
            exclusive: r.bool("exclusive")?,
            arguments: decode_table(r)?,
        },
        0x0052 => BasicConsumeOk {
            consumer_tag: sstr(r, "consumer_tag")?,
        },
        0x0053 => BasicCancel {
            consumer_tag: sstr(r, "consumer_tag")?,
        },
        0x0054 => {
            let n = r.u32("message count")? as usize;
            // A message takes at least 9 bytes (3 lengths, flag, property flags).
            if n > r.remaining() / 9 || n > BATCH_ITEMS_MAX {
                return Err(DecodeError::new(format!(
                    "publish batch of {n} messages exceeds the payload or the limit of {BATCH_ITEMS_MAX}"
                )));
            }
            let mut messages = Vec::with_capacity(n.min(DECODE_PREALLOC_ITEMS_MAX));
            for _ in 0..n {
                messages.push(PublishMessage {
                    exchange: sstr(r, "exchange")?,
                    routing_key: sstr(r, "routing_key")?,
                    mandatory: r.bool("mandatory")?,
                    properties: BasicProperties::decode(r)?,
                    body: r.long_bytes("body")?.to_vec(),
                });
            }
            Publish { messages }
        }
        0x0055 => Return {
            reply_code: r.u16("reply_code")?,
            reply_text: sstr(r, "reply_text")?,
            exchange: sstr(r, "exchange")?,
            routing_key: sstr(r, "routing_key")?,
            properties: Box::new(BasicProperties::decode(r)?),
            body: r.long_bytes("body")?.to_vec(),
        },
        0x0056 => {
            let n = r.u32("delivery count")? as usize;
            if n > r.remaining() / 18 || n > BATCH_ITEMS_MAX {
                return Err(DecodeError::new(format!(
                    "deliver batch of {n} exceeds the payload or the limit of {BATCH_ITEMS_MAX}"
                )));
            }
            let mut deliveries = Vec::with_capacity(n.min(DECODE_PREALLOC_ITEMS_MAX));
            for _ in 0..n {
                deliveries.push(Delivery {
                    consumer_tag: sstr(r, "consumer_tag")?,
                    delivery_tag: r.u64("delivery_tag")?,
                    redelivered: r.bool("redelivered")?,
                    exchange: sstr(r, "exchange")?,
                    routing_key: sstr(r, "routing_key")?,
                    properties: BasicProperties::decode(r)?,
                    body: r.long_bytes("body")?.to_vec(),
                });
            }
            Deliver { deliveries }
        }
        0x0057 => BasicGet {
            queue: sstr(r, "queue")?,
            no_ack: r.bool("no_ack")?,
        },
        0x0058 => GetOk {
            delivery_tag: r.u64("delivery_tag")?,
            redelivered: r.bool("redelivered")?,
            exchange: sstr(r, "exchange")?,
            routing_key: sstr(r, "routing_key")?,
            message_count: r.u32("message_count")?,
            properties: Box::new(BasicProperties::decode(r)?),
            body: r.long_bytes("body")?.to_vec(),
        },
        0x0059 => GetEmpty,
        0x005A => Ack {
            delivery_tag: r.u64("delivery_tag")?,
            multiple: r.bool("multiple")?,
        },
        0x005B => Nack {
            delivery_tag: r.u64("delivery_tag")?,
            multiple: r.bool("multiple")?,
            requeue: r.bool("requeue")?,
        },
        0x005C => Reject {
            delivery_tag: r.u64("delivery_tag")?,
            requeue: r.bool("requeue")?,
        },
        0x005D => Recover {
            requeue: r.bool("requeue")?,
        },
        0x0060 => ConfirmSelect,
        other => return Err(DecodeError::new(format!("unknown method id 0x{other:04x}"))),
    };
    Result::Ok(m)
}
