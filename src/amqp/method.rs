//! The method table: every method of the classes RabbitMQ implements (connection 10,
//! channel 20, exchange 40, queue 50, basic 60, confirm 85, tx 90), in both directions,
//! and [`AmqpMethod::decode`].
//!
//! Ids, argument names, types and order are those of the AMQP 0-9-1 XML specification as
//! RabbitMQ ships it (`amqp0-9-1.stripped.extended.xml`, with RabbitMQ's extensions:
//! `exchange.bind`/`unbind`, `basic.nack`, `confirm`, `connection.blocked`/`unblocked`,
//! `connection.update-secret`). Argument names are the specification's in snake_case;
//! `type` is `kind` (a Rust keyword).

use super::error::MethodError;
use super::wire::{Decoder, Encoder, WireField};
use crate::error::{DecodeError, ReplyCode};
use crate::types::codec::put_u16;
use crate::types::field_table::FieldTable;

/// Bytes of class id and method id at the start of a method payload (AMQP 0-9-1 §4.2.4).
pub const METHOD_IDS_BYTES: usize = 4;

/// Reply code for method arguments that do not decode (truncated, trailing bytes, a string
/// that is not UTF-8, a bad field table): 502 SYNTAX_ERROR, "a frame that contained illegal
/// values for one or more fields" (AMQP 0-9-1 constants). RabbitMQ answers 501 FRAME_ERROR
/// ("cannot decode …") here; both close the connection.
pub const ARGUMENT_ERROR_CODE: ReplyCode = ReplyCode::SyntaxError;

/// Reply code for class/method ids not in the table: 540 NOT_IMPLEMENTED, "functionality
/// that is not implemented in the server" (AMQP 0-9-1 constants). RabbitMQ's reader has no
/// reply for them (its lookup exits with `unknown_method_id` and the connection drops).
pub const UNKNOWN_METHOD_CODE: ReplyCode = ReplyCode::NotImplemented;

amqp_methods! {
    // ---- connection (10), AMQP 0-9-1 §1.4.2 --------------------------------------------

    /// `connection.start` (10,10), server → client: protocol version, server properties,
    /// SASL mechanisms and locales offered.
    ConnectionStart(10, 10, "connection.start", false) {
        /// Protocol major version (0).
        version_major: u8,
        /// Protocol minor version (9).
        version_minor: u8,
        /// Server properties (product, version, capabilities, …).
        server_properties: FieldTable,
        /// Space-separated SASL mechanisms, e.g. `PLAIN AMQPLAIN`.
        mechanisms: Vec<u8>,
        /// Space-separated message locales, e.g. `en_US`.
        locales: Vec<u8>,
    } wire [version_major, version_minor, server_properties, mechanisms, locales];

    /// `connection.start-ok` (10,11), client → server: client properties and the chosen
    /// SASL mechanism with its initial response.
    ConnectionStartOk(10, 11, "connection.start-ok", false) {
        /// Client properties (product, version, capabilities, connection_name, …).
        client_properties: FieldTable,
        /// The chosen SASL mechanism.
        mechanism: String,
        /// The SASL response (for PLAIN: `\0user\0password`).
        response: Vec<u8>,
        /// The chosen message locale.
        locale: String,
    } wire [client_properties, mechanism, response, locale];

    /// `connection.secure` (10,20), server → client: a SASL challenge.
    ConnectionSecure(10, 20, "connection.secure", false) {
        /// The SASL challenge.
        challenge: Vec<u8>,
    } wire [challenge];

    /// `connection.secure-ok` (10,21), client → server: a SASL response.
    ConnectionSecureOk(10, 21, "connection.secure-ok", false) {
        /// The SASL response.
        response: Vec<u8>,
    } wire [response];

    /// `connection.tune` (10,30), server → client: the server's limits.
    ConnectionTune(10, 30, "connection.tune", false) {
        /// Highest channel number the server allows; 0 = no limit.
        channel_max: u16,
        /// Largest frame the server accepts, in bytes (header and end octet included);
        /// 0 = no limit.
        frame_max: u32,
        /// Heartbeat interval the server wants, in seconds; 0 = none.
        heartbeat: u16,
    } wire [channel_max, frame_max, heartbeat];

    /// `connection.tune-ok` (10,31), client → server: the negotiated limits.
    ConnectionTuneOk(10, 31, "connection.tune-ok", false) {
        /// Highest channel number the client will use; 0 = no limit.
        channel_max: u16,
        /// Largest frame either peer will send, in bytes; 0 = no limit.
        frame_max: u32,
        /// Heartbeat interval, in seconds; 0 = none.
        heartbeat: u16,
    } wire [channel_max, frame_max, heartbeat];

    /// `connection.open` (10,40), client → server: opens a virtual host. The reserved
    /// `capabilities` shortstr and `insist` bit are not kept.
    ConnectionOpen(10, 40, "connection.open", false) {
        /// The virtual host path, e.g. `/`.
        virtual_host: String,
    } wire [virtual_host, [reserved String], [reserved bool]];

    /// `connection.open-ok` (10,41), server → client. The reserved `known-hosts` shortstr
    /// is not kept.
    ConnectionOpenOk(10, 41, "connection.open-ok", false) {} wire [[reserved String]];

    /// `connection.close` (10,50), either direction: closes the connection, with the
    /// reason.
    ConnectionClose(10, 50, "connection.close", false) {
        /// The reply code (AMQP 0-9-1 constants; 200 for a normal close).
        reply_code: u16,
        /// The reason, for humans.
        reply_text: String,
        /// Class id of the method that caused the close, 0 if none.
        class_id: u16,
        /// Method id of the method that caused the close, 0 if none.
        method_id: u16,
    } wire [reply_code, reply_text, class_id, method_id];

    /// `connection.close-ok` (10,51), either direction: confirms a close.
    ConnectionCloseOk(10, 51, "connection.close-ok", false) {} wire [];

    /// `connection.blocked` (10,60), server → client (RabbitMQ extension): publishing is
    /// blocked by a resource alarm.
    ConnectionBlocked(10, 60, "connection.blocked", false) {
        /// Why, e.g. `low on memory`.
        reason: String,
    } wire [reason];

    /// `connection.unblocked` (10,61), server → client (RabbitMQ extension): publishing
    /// may resume.
    ConnectionUnblocked(10, 61, "connection.unblocked", false) {} wire [];

    /// `connection.update-secret` (10,70), client → server (RabbitMQ extension): replaces
    /// the connection's credential (e.g. an expiring token).
    ConnectionUpdateSecret(10, 70, "connection.update-secret", false) {
        /// The new secret.
        new_secret: Vec<u8>,
        /// Why, for the log.
        reason: String,
    } wire [new_secret, reason];

    /// `connection.update-secret-ok` (10,71), server → client (RabbitMQ extension).
    ConnectionUpdateSecretOk(10, 71, "connection.update-secret-ok", false) {} wire [];

    // ---- channel (20) -------------------------------------------------------------------

    /// `channel.open` (20,10), client → server. The reserved `out-of-band` shortstr is not
    /// kept.
    ChannelOpen(20, 10, "channel.open", false) {} wire [[reserved String]];

    /// `channel.open-ok` (20,11), server → client. The reserved `channel-id` longstr is not
    /// kept.
    ChannelOpenOk(20, 11, "channel.open-ok", false) {} wire [[reserved Vec<u8>]];

    /// `channel.flow` (20,20), either direction: pause (false) or resume (true) content
    /// from the peer.
    ChannelFlow(20, 20, "channel.flow", false) {
        /// Whether content may flow.
        active: bool,
    } wire [active];

    /// `channel.flow-ok` (20,21), either direction: confirms a flow change.
    ChannelFlowOk(20, 21, "channel.flow-ok", false) {
        /// The flow state now in force.
        active: bool,
    } wire [active];

    /// `channel.close` (20,40), either direction: closes the channel, with the reason.
    ChannelClose(20, 40, "channel.close", false) {
        /// The reply code (AMQP 0-9-1 constants; 200 for a normal close).
        reply_code: u16,
        /// The reason, for humans.
        reply_text: String,
        /// Class id of the method that caused the close, 0 if none.
        class_id: u16,
        /// Method id of the method that caused the close, 0 if none.
        method_id: u16,
    } wire [reply_code, reply_text, class_id, method_id];

    /// `channel.close-ok` (20,41), either direction: confirms a close.
    ChannelCloseOk(20, 41, "channel.close-ok", false) {} wire [];

    // ---- exchange (40) ------------------------------------------------------------------

    /// `exchange.declare` (40,10), client → server. The reserved `ticket` short is not
    /// kept.
    ExchangeDeclare(40, 10, "exchange.declare", false) {
        /// The exchange name.
        exchange: String,
        /// The exchange type (`type` in the specification): `direct`, `fanout`, `topic`,
        /// `headers`.
        kind: String,
        /// Only check that the exchange exists (404 if not).
        passive: bool,
        /// The exchange survives a broker restart.
        durable: bool,
        /// Delete the exchange when its last binding is removed (RabbitMQ semantics).
        auto_delete: bool,
        /// Clients may not publish to it directly.
        internal: bool,
        /// The server sends no `declare-ok`.
        no_wait: bool,
        /// Optional arguments (e.g. `alternate-exchange`).
        arguments: FieldTable,
    } wire [[reserved u16], exchange, kind, passive, durable, auto_delete, internal, no_wait,
            arguments];

    /// `exchange.declare-ok` (40,11), server → client.
    ExchangeDeclareOk(40, 11, "exchange.declare-ok", false) {} wire [];

    /// `exchange.delete` (40,20), client → server. The reserved `ticket` short is not kept.
    ExchangeDelete(40, 20, "exchange.delete", false) {
        /// The exchange name.
        exchange: String,
        /// Only delete it if it has no bindings.
        if_unused: bool,
        /// The server sends no `delete-ok`.
        no_wait: bool,
    } wire [[reserved u16], exchange, if_unused, no_wait];

    /// `exchange.delete-ok` (40,21), server → client.
    ExchangeDeleteOk(40, 21, "exchange.delete-ok", false) {} wire [];

    /// `exchange.bind` (40,30), client → server (RabbitMQ extension): binds exchange to
    /// exchange. The reserved `ticket` short is not kept.
    ExchangeBind(40, 30, "exchange.bind", false) {
        /// The exchange messages are routed to.
        destination: String,
        /// The exchange messages are routed from.
        source: String,
        /// The binding key.
        routing_key: String,
        /// The server sends no `bind-ok`.
        no_wait: bool,
        /// Binding arguments (headers exchange matching).
        arguments: FieldTable,
    } wire [[reserved u16], destination, source, routing_key, no_wait, arguments];

    /// `exchange.bind-ok` (40,31), server → client (RabbitMQ extension).
    ExchangeBindOk(40, 31, "exchange.bind-ok", false) {} wire [];

    /// `exchange.unbind` (40,40), client → server (RabbitMQ extension). The reserved
    /// `ticket` short is not kept.
    ExchangeUnbind(40, 40, "exchange.unbind", false) {
        /// The exchange messages were routed to.
        destination: String,
        /// The exchange messages were routed from.
        source: String,
        /// The binding key.
        routing_key: String,
        /// The server sends no `unbind-ok`.
        no_wait: bool,
        /// Binding arguments.
        arguments: FieldTable,
    } wire [[reserved u16], destination, source, routing_key, no_wait, arguments];

    /// `exchange.unbind-ok` (40,51), server → client (RabbitMQ extension; method id 51,
    /// not 41, as RabbitMQ assigns it).
    ExchangeUnbindOk(40, 51, "exchange.unbind-ok", false) {} wire [];

    // ---- queue (50) ---------------------------------------------------------------------

    /// `queue.declare` (50,10), client → server. The reserved `ticket` short is not kept.
    QueueDeclare(50, 10, "queue.declare", false) {
        /// The queue name; empty asks the server to generate one.
        queue: String,
        /// Only check that the queue exists (404 if not).
        passive: bool,
        /// The queue survives a broker restart.
        durable: bool,
        /// Only this connection may use the queue; deleted when it closes.
        exclusive: bool,
        /// Delete the queue when its last consumer is cancelled.
        auto_delete: bool,
        /// The server sends no `declare-ok`.
        no_wait: bool,
        /// Optional arguments (`x-message-ttl`, `x-max-length`, …).
        arguments: FieldTable,
    } wire [[reserved u16], queue, passive, durable, exclusive, auto_delete, no_wait,
            arguments];

    /// `queue.declare-ok` (50,11), server → client.
    QueueDeclareOk(50, 11, "queue.declare-ok", false) {
        /// The queue name (the generated one for an empty request name).
        queue: String,
        /// Messages ready in the queue.
        message_count: u32,
        /// Consumers on the queue.
        consumer_count: u32,
    } wire [queue, message_count, consumer_count];

    /// `queue.bind` (50,20), client → server. The reserved `ticket` short is not kept.
    QueueBind(50, 20, "queue.bind", false) {
        /// The queue name.
        queue: String,
        /// The exchange name.
        exchange: String,
        /// The binding key.
        routing_key: String,
        /// The server sends no `bind-ok`.
        no_wait: bool,
        /// Binding arguments (headers exchange matching).
        arguments: FieldTable,
    } wire [[reserved u16], queue, exchange, routing_key, no_wait, arguments];

    /// `queue.bind-ok` (50,21), server → client.
    QueueBindOk(50, 21, "queue.bind-ok", false) {} wire [];

    /// `queue.purge` (50,30), client → server. The reserved `ticket` short is not kept.
    QueuePurge(50, 30, "queue.purge", false) {
        /// The queue name.
        queue: String,
        /// The server sends no `purge-ok`.
        no_wait: bool,
    } wire [[reserved u16], queue, no_wait];

    /// `queue.purge-ok` (50,31), server → client.
    QueuePurgeOk(50, 31, "queue.purge-ok", false) {
        /// Messages purged.
        message_count: u32,
    } wire [message_count];

    /// `queue.delete` (50,40), client → server. The reserved `ticket` short is not kept.
    QueueDelete(50, 40, "queue.delete", false) {
        /// The queue name.
        queue: String,
        /// Only delete it if it has no consumers.
        if_unused: bool,
        /// Only delete it if it has no messages.
        if_empty: bool,
        /// The server sends no `delete-ok`.
        no_wait: bool,
    } wire [[reserved u16], queue, if_unused, if_empty, no_wait];

    /// `queue.delete-ok` (50,41), server → client.
    QueueDeleteOk(50, 41, "queue.delete-ok", false) {
        /// Messages deleted with the queue.
        message_count: u32,
    } wire [message_count];

    /// `queue.unbind` (50,50), client → server (no `no-wait` argument). The reserved
    /// `ticket` short is not kept.
    QueueUnbind(50, 50, "queue.unbind", false) {
        /// The queue name.
        queue: String,
        /// The exchange name.
        exchange: String,
        /// The binding key.
        routing_key: String,
        /// Binding arguments.
        arguments: FieldTable,
    } wire [[reserved u16], queue, exchange, routing_key, arguments];

    /// `queue.unbind-ok` (50,51), server → client.
    QueueUnbindOk(50, 51, "queue.unbind-ok", false) {} wire [];

    // ---- basic (60) ---------------------------------------------------------------------

    /// `basic.qos` (60,10), client → server: prefetch limits.
    BasicQos(60, 10, "basic.qos", false) {
        /// Prefetch window in bytes; 0 = no limit (RabbitMQ refuses other values).
        prefetch_size: u32,
        /// Prefetch window in unacknowledged messages; 0 = no limit.
        prefetch_count: u16,
        /// RabbitMQ: apply to the whole channel (true) or to each new consumer (false).
        global: bool,
    } wire [prefetch_size, prefetch_count, global];

    /// `basic.qos-ok` (60,11), server → client.
    BasicQosOk(60, 11, "basic.qos-ok", false) {} wire [];

    /// `basic.consume` (60,20), client → server. The reserved `ticket` short is not kept.
    BasicConsume(60, 20, "basic.consume", false) {
        /// The queue name.
        queue: String,
        /// The consumer tag; empty asks the server to generate one.
        consumer_tag: String,
        /// Do not deliver messages published on this connection (RabbitMQ ignores it).
        no_local: bool,
        /// Deliveries need no acknowledgement.
        no_ack: bool,
        /// Only this consumer may consume from the queue.
        exclusive: bool,
        /// The server sends no `consume-ok`.
        no_wait: bool,
        /// Consumer arguments (`x-priority`, …).
        arguments: FieldTable,
    } wire [[reserved u16], queue, consumer_tag, no_local, no_ack, exclusive, no_wait,
            arguments];

    /// `basic.consume-ok` (60,21), server → client.
    BasicConsumeOk(60, 21, "basic.consume-ok", false) {
        /// The consumer tag (the generated one for an empty request tag).
        consumer_tag: String,
    } wire [consumer_tag];

    /// `basic.cancel` (60,30), either direction: ends a consumer (server → client when
    /// the queue goes away, RabbitMQ's consumer cancel notification).
    BasicCancel(60, 30, "basic.cancel", false) {
        /// The consumer tag.
        consumer_tag: String,
        /// The peer sends no `cancel-ok`.
        no_wait: bool,
    } wire [consumer_tag, no_wait];

    /// `basic.cancel-ok` (60,31), either direction.
    BasicCancelOk(60, 31, "basic.cancel-ok", false) {
        /// The consumer tag.
        consumer_tag: String,
    } wire [consumer_tag];

    /// `basic.publish` (60,40), client → server, with content. The reserved `ticket` short
    /// is not kept.
    BasicPublish(60, 40, "basic.publish", true) {
        /// The exchange name; empty is the default exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
        /// Return the message (`basic.return`) if no queue gets it.
        mandatory: bool,
        /// Return the message if no consumer takes it at once (RabbitMQ refuses it).
        immediate: bool,
    } wire [[reserved u16], exchange, routing_key, mandatory, immediate];

    /// `basic.return` (60,50), server → client, with content: an unroutable mandatory
    /// message.
    BasicReturn(60, 50, "basic.return", true) {
        /// Why (312 NO_ROUTE).
        reply_code: u16,
        /// The reason, for humans.
        reply_text: String,
        /// The exchange it was published to.
        exchange: String,
        /// The routing key it was published with.
        routing_key: String,
    } wire [reply_code, reply_text, exchange, routing_key];

    /// `basic.deliver` (60,60), server → client, with content: a message for a consumer.
    BasicDeliver(60, 60, "basic.deliver", true) {
        /// The consumer tag.
        consumer_tag: String,
        /// The channel-scoped delivery tag, from 1.
        delivery_tag: u64,
        /// The message was delivered before.
        redelivered: bool,
        /// The exchange it was published to.
        exchange: String,
        /// The routing key it was published with.
        routing_key: String,
    } wire [consumer_tag, delivery_tag, redelivered, exchange, routing_key];

    /// `basic.get` (60,70), client → server: fetch one message. The reserved `ticket`
    /// short is not kept.
    BasicGet(60, 70, "basic.get", false) {
        /// The queue name.
        queue: String,
        /// The message needs no acknowledgement.
        no_ack: bool,
    } wire [[reserved u16], queue, no_ack];

    /// `basic.get-ok` (60,71), server → client, with content.
    BasicGetOk(60, 71, "basic.get-ok", true) {
        /// The channel-scoped delivery tag.
        delivery_tag: u64,
        /// The message was delivered before.
        redelivered: bool,
        /// The exchange it was published to.
        exchange: String,
        /// The routing key it was published with.
        routing_key: String,
        /// Messages left in the queue.
        message_count: u32,
    } wire [delivery_tag, redelivered, exchange, routing_key, message_count];

    /// `basic.get-empty` (60,72), server → client: the queue was empty. The reserved
    /// `cluster-id` shortstr is not kept.
    BasicGetEmpty(60, 72, "basic.get-empty", false) {} wire [[reserved String]];

    /// `basic.ack` (60,80), either direction (server → client for publisher confirms).
    BasicAck(60, 80, "basic.ack", false) {
        /// The delivery tag (or publish sequence number, for confirms).
        delivery_tag: u64,
        /// Acknowledge every tag up to and including this one.
        multiple: bool,
    } wire [delivery_tag, multiple];

    /// `basic.reject` (60,90), client → server: refuse one delivery.
    BasicReject(60, 90, "basic.reject", false) {
        /// The delivery tag.
        delivery_tag: u64,
        /// Requeue the message (else drop or dead-letter it).
        requeue: bool,
    } wire [delivery_tag, requeue];

    /// `basic.recover-async` (60,100), client → server: redeliver unacknowledged messages,
    /// no reply (deprecated by the specification).
    BasicRecoverAsync(60, 100, "basic.recover-async", false) {
        /// Requeue them (else redeliver to the same consumer).
        requeue: bool,
    } wire [requeue];

    /// `basic.recover` (60,110), client → server: redeliver unacknowledged messages.
    BasicRecover(60, 110, "basic.recover", false) {
        /// Requeue them (else redeliver to the same consumer).
        requeue: bool,
    } wire [requeue];

    /// `basic.recover-ok` (60,111), server → client.
    BasicRecoverOk(60, 111, "basic.recover-ok", false) {} wire [];

    /// `basic.nack` (60,120), either direction (RabbitMQ extension; server → client for
    /// publisher confirms).
    BasicNack(60, 120, "basic.nack", false) {
        /// The delivery tag (or publish sequence number, for confirms).
        delivery_tag: u64,
        /// Every tag up to and including this one.
        multiple: bool,
        /// Requeue the messages (else drop or dead-letter them).
        requeue: bool,
    } wire [delivery_tag, multiple, requeue];

    // ---- confirm (85), RabbitMQ extension -----------------------------------------------

    /// `confirm.select` (85,10), client → server: turn on publisher confirms.
    ConfirmSelect(85, 10, "confirm.select", false) {
        /// The server sends no `select-ok` (`nowait` in RabbitMQ's specification).
        nowait: bool,
    } wire [nowait];

    /// `confirm.select-ok` (85,11), server → client.
    ConfirmSelectOk(85, 11, "confirm.select-ok", false) {} wire [];

    // ---- tx (90) ------------------------------------------------------------------------

    /// `tx.select` (90,10), client → server: make the channel transactional.
    TxSelect(90, 10, "tx.select", false) {} wire [];

    /// `tx.select-ok` (90,11), server → client.
    TxSelectOk(90, 11, "tx.select-ok", false) {} wire [];

    /// `tx.commit` (90,20), client → server.
    TxCommit(90, 20, "tx.commit", false) {} wire [];

    /// `tx.commit-ok` (90,21), server → client.
    TxCommitOk(90, 21, "tx.commit-ok", false) {} wire [];

    /// `tx.rollback` (90,30), client → server.
    TxRollback(90, 30, "tx.rollback", false) {} wire [];

    /// `tx.rollback-ok` (90,31), server → client.
    TxRollbackOk(90, 31, "tx.rollback-ok", false) {} wire [];
}

impl AmqpMethod {
    /// Decodes one method payload: class id, method id, arguments (AMQP 0-9-1 §4.2.4).
    ///
    /// Allocates only the strings and tables the payload holds, so memory is bounded by
    /// the payload (itself bounded by the negotiated frame size); field tables nest at
    /// most [`FIELD_TABLE_DEPTH_MAX`](crate::limits::FIELD_TABLE_DEPTH_MAX) deep.
    ///
    /// # Errors
    /// [`MethodError`] with
    /// - 501 FRAME_ERROR when the payload is shorter than the two ids (as RabbitMQ);
    /// - [`UNKNOWN_METHOD_CODE`] (540 NOT_IMPLEMENTED) for ids not in the table;
    /// - [`ARGUMENT_ERROR_CODE`] (502 SYNTAX_ERROR) when the arguments are truncated, have
    ///   trailing bytes, hold a shortstr that is not UTF-8 or a bad field table.
    pub fn decode(payload: &[u8]) -> Result<AmqpMethod, MethodError> {
        if payload.len() < METHOD_IDS_BYTES {
            return Err(MethodError {
                code: ReplyCode::FrameError,
                text: format!(
                    "method frame payload of {} bytes is shorter than its class and method ids",
                    payload.len()
                ),
                class_id: 0,
                method_id: 0,
            });
        }
        let class_id = u16::from_be_bytes([payload[0], payload[1]]);
        let method_id = u16::from_be_bytes([payload[2], payload[3]]);
        let args = &payload[METHOD_IDS_BYTES..];
        match AmqpMethod::decode_args(class_id, method_id, args) {
            Some(Ok(m)) => Ok(m),
            Some(Err(e)) => Err(MethodError {
                code: ARGUMENT_ERROR_CODE,
                text: format!(
                    "cannot decode {}: {}",
                    AmqpMethod::name_of(class_id, method_id).unwrap_or("method"),
                    e.message
                ),
                class_id,
                method_id,
            }),
            None => Err(MethodError {
                code: UNKNOWN_METHOD_CODE,
                text: format!("unknown method: class {class_id}, method {method_id}"),
                class_id,
                method_id,
            }),
        }
    }
}
