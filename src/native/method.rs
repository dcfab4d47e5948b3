//! Methods of the native protocol and their payload encoding: the one table every
//! method is listed in.
//!
//! A payload is `u16` method id, `u32` request id, then the method's fields in the order
//! listed on each variant. Field encodings: `sstr` = `u8` length + UTF-8 (≤ 255 bytes);
//! `lstr` = `u32` length + bytes; `bool` = one byte; `table` = AMQP field table
//! ([`crate::types::field_table`]); `props` = [`BasicProperties`] binary form; integers
//! big-endian. Method names and fields mirror AMQP 0-9-1 (`queue.declare`,
//! `basic.consume`, …); `docs/protocol.md` lists every id.
//!
//! The `native_records!` and `native_methods!` invocations below are the table: each
//! struct and each method once, its fields with their wire types (`wire.rs`) in wire
//! order. The enum, [`Method::id`], [`Method::name`], [`method_name`], [`Method::encode`]
//! and [`Method::decode`] are generated from it by the macros of `define.rs`, so they
//! cannot disagree.

use super::wire::{Bool, Counted, Lstr, Props, Record, Sstr, Table, Watermark, U16, U32, U64, U8};
use crate::error::DecodeError;
use crate::limits::{BATCH_ITEMS_MAX, LIST_ROWS_MAX};
use crate::types::codec::{put_bool, put_long_bytes, put_short_str, put_u64, Reader};
use crate::types::{BasicProperties, FieldTable, MemoryWatermark};

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
    /// Policies of the connection's vhost (`policymaker` or `administrator`).
    Policies = 9,
    /// Vhost limits of every vhost that has some (`rabbitmqctl list_vhost_limits
    /// --global`, `GET /api/vhost-limits`): management users, for the vhosts they see.
    VhostLimits = 10,
    /// User limits of every user that has some (`rabbitmqctl list_user_limits`, `GET
    /// /api/user-limits`): administrators only.
    UserLimits = 11,
    /// Runtime parameters of every vhost (`rabbitmqctl list_parameters`, `GET
    /// /api/parameters`): `policymaker` or `administrator`; a `policymaker` sees the vhosts
    /// it has permissions in.
    Parameters = 12,
    /// Global parameters (`rabbitmqctl list_global_parameters`, `GET
    /// /api/global-parameters`): `policymaker` or `administrator`.
    GlobalParameters = 13,
    /// Operator policies of every vhost (`rabbitmqctl list_operator_policies`, `GET
    /// /api/operator-policies`): management users, for the vhosts they see.
    OperatorPolicies = 14,
    /// Dynamic shovels' statuses, every vhost's (`rabbitmqctl shovel_status`, `GET
    /// /api/shovels`): management users, for the vhosts they see.
    Shovels = 15,
    /// Federation links' statuses, every vhost's (`rabbitmqctl federation_status`, `GET
    /// /api/federation-links`): management users, for the vhosts they see.
    FederationLinks = 16,
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
            10 => ListKind::VhostLimits,
            11 => ListKind::UserLimits,
            12 => ListKind::Parameters,
            13 => ListKind::GlobalParameters,
            14 => ListKind::OperatorPolicies,
            15 => ListKind::Shovels,
            16 => ListKind::FederationLinks,
            _ => return Err(DecodeError::new(format!("unknown list kind {v}"))),
        })
    }
}

// The structs methods carry, each field with its wire type, in wire order.
native_records! {
    /// What `permission.set` carries: a user's three patterns in a vhost.
    #[derive(Clone, Debug, PartialEq, Eq)]
    PermissionSpec {
        /// User name.
        user: String as Sstr,
        /// Vhost name.
        vhost: String as Sstr,
        /// Configure pattern (declare, delete).
        configure: String as Lstr,
        /// Write pattern (publish, bind to).
        write: String as Lstr,
        /// Read pattern (consume, get, purge, bind from).
        read: String as Lstr,
    }

    /// What `policy.set` carries (RabbitMQ's `set_policy` arguments).
    #[derive(Clone, Debug, PartialEq, Eq)]
    PolicySpec {
        /// Vhost name.
        vhost: String as Sstr,
        /// Policy name.
        name: String as Sstr,
        /// Regular expression over queue/exchange names.
        pattern: String as Lstr,
        /// `queues`, `exchanges` or `all`.
        apply_to: String as Sstr,
        /// Priority (the highest matching policy applies).
        priority: i64 as U64,
        /// The definition: a JSON object, as text.
        definition: String as Lstr,
    }

    /// One message of a publish batch.
    #[derive(Clone, Debug, PartialEq)]
    PublishMessage {
        /// Exchange to publish to; empty is the default exchange.
        exchange: String as Sstr,
        /// Routing key.
        routing_key: String as Sstr,
        /// Return the message (basic.return, 312) when no queue takes it.
        mandatory: bool as Bool,
        /// Message properties.
        properties: BasicProperties as Props,
        /// Body bytes.
        body: Vec<u8> as Lstr,
    }

    /// One message pushed to a consumer.
    #[derive(Clone, Debug, PartialEq)]
    Delivery {
        /// The consumer it is for.
        consumer_tag: String as Sstr,
        /// Channel-scoped delivery tag, counting from 1.
        delivery_tag: u64 as U64,
        /// Whether it was delivered before.
        redelivered: bool as Bool,
        /// Exchange it was published to.
        exchange: String as Sstr,
        /// Routing key it was published with.
        routing_key: String as Sstr,
        /// Message properties.
        properties: BasicProperties as Props,
        /// Body bytes.
        body: Vec<u8> as Lstr,
    }
}

// Every method once: variant, id, name, then its fields with their wire types, in wire
// order. Each doc names the id and the fields as docs/protocol.md §7 does
// (`table_tests.rs` holds the two to each other).
native_methods! {
    /// 0x0001 client→server, channel 0: `sstr user, lstr password, sstr vhost,
    /// u32 frame_max, u16 heartbeat_s, u16 channel_max, sstr client_name`. 0 = no preference.
    Open(0x0001, "connection.open") {
        /// User name.
        user: String as Sstr,
        /// Password.
        password: String as Lstr,
        /// Virtual host to use.
        vhost: String as Sstr,
        /// Largest frame the client accepts, bytes (0 = server's choice).
        frame_max: u32 as U32,
        /// Heartbeat interval the client wants, seconds (0 = no preference: the server's).
        heartbeat_s: u16 as U16,
        /// Highest channel number the client wants (0 = server's choice).
        channel_max: u16 as U16,
        /// Free-form client name, shown in `list connections`.
        client_name: String as Sstr,
    },
    /// 0x0002 server→client: `u32 frame_max, u16 heartbeat_s, u16 channel_max,
    /// sstr server_version, u64 connection_id`: the negotiated values.
    OpenOk(0x0002, "connection.open-ok") {
        /// Negotiated frame size, bytes.
        frame_max: u32 as U32,
        /// Negotiated heartbeat interval, seconds.
        heartbeat_s: u16 as U16,
        /// Highest usable channel number.
        channel_max: u16 as U16,
        /// Server version string.
        server_version: String as Sstr,
        /// The server's id for this connection.
        connection_id: u64 as U64,
    },
    /// 0x0003 either way, channel 0: `u16 reply_code, sstr reply_text, u16 method_id`
    /// (the method that caused it, 0 if none). The peer answers `CloseOk`.
    Close(0x0003, "connection.close") {
        /// AMQP reply code.
        reply_code: u16 as U16,
        /// Human-readable reason.
        reply_text: String as Sstr,
        /// Method id that failed, or 0.
        method_id: u16 as U16,
    },
    /// 0x0004 either way: acknowledges `Close` or `ChannelClose`.
    CloseOk(0x0004, "close-ok"),
    /// 0x0005 server→client: a request without a result succeeded.
    Ok(0x0005, "ok"),
    /// 0x0006 server→client, channel 0, request id 0: `sstr reason`. A resource alarm is
    /// set and this connection publishes: the server stops reading it until
    /// `ConnectionUnblocked` (RabbitMQ's `connection.blocked` extension; reasons
    /// `low on memory`, `low on disk`, `low on memory and disk`).
    ConnectionBlocked(0x0006, "connection.blocked") {
        /// Why publishing is blocked.
        reason: String as Sstr,
    },
    /// 0x0007 server→client, channel 0, request id 0: every alarm cleared; the server
    /// reads the connection again (RabbitMQ's `connection.unblocked`).
    ConnectionUnblocked(0x0007, "connection.unblocked"),
    /// 0x0008 channel 0, admin: `u8 form, u64 value` with form 1 = relative (value = the
    /// fraction's IEEE 754 `f64` bits, `0.0..=1.0`) or 2 = absolute (value = bytes).
    /// Sets the memory high-water mark (`rabbitmqctl set_vm_memory_high_watermark`);
    /// answered `Ok`, or 406 for a fraction out of range.
    MemoryHighWatermarkSet(0x0008, "memory-high-watermark.set") {
        /// The new watermark.
        watermark: MemoryWatermark as Watermark,
    },
    /// 0x0009 channel 0, admin: `u64 bytes`. Sets the free-disk low-water mark
    /// (`rabbitmqctl set_disk_free_limit`); answered `Ok`.
    DiskFreeLimitSet(0x0009, "disk-free-limit.set") {
        /// Free bytes below which the disk alarm sets.
        bytes: u64 as U64,
    },
    /// 0x000A channel 0, `policymaker` or `administrator`: `sstr vhost, sstr name, lstr
    /// pattern, sstr apply_to, u64 priority (two's complement i64), lstr definition` (a
    /// JSON object). Sets a policy (`rabbitmqctl set_policy`); answered `Ok`, 404 for an
    /// unknown vhost, 406 naming a bad pattern, apply-to or definition key.
    PolicySet(0x000A, "policy.set")(spec: Box<PolicySpec> as Record),
    /// 0x000B channel 0, `policymaker` or `administrator`: `sstr vhost, sstr name`.
    /// Clears a policy (`rabbitmqctl clear_policy`); 404 when there is none.
    PolicyClear(0x000B, "policy.clear") {
        /// Vhost name.
        vhost: String as Sstr,
        /// Policy name.
        name: String as Sstr,
    },
    /// 0x000C channel 0, administrators: `sstr vhost, sstr name, lstr value` (JSON text).
    /// Sets the vhost limit `name` (`max-connections` or `max-queues`) of a vhost to
    /// `value`, an integer (negative: no limit), as `rabbitmqctl set_vhost_limits` and
    /// `PUT /api/vhost-limits/{vhost}/{name}`; answered `Ok`, 404 for an unknown vhost,
    /// 406 with RabbitMQ's text for another name or a value that is not an integer.
    VhostLimitSet(0x000C, "vhost-limit.set") {
        /// Vhost name.
        vhost: String as Sstr,
        /// Limit name: `max-connections` or `max-queues`.
        name: String as Sstr,
        /// The value, as JSON text (an integer).
        value: String as Lstr,
    },
    /// 0x000D channel 0, administrators: `sstr vhost, sstr name`. Clears a vhost limit
    /// (`rabbitmqctl clear_vhost_limits`); `Ok` also when it was not set, 404 for an
    /// unknown vhost.
    VhostLimitClear(0x000D, "vhost-limit.clear") {
        /// Vhost name.
        vhost: String as Sstr,
        /// Limit name.
        name: String as Sstr,
    },
    /// 0x000E channel 0, administrators: `sstr user, sstr name, lstr value` (JSON text).
    /// Sets the user limit `name` (`max-connections` or `max-channels`) of a user, as
    /// `rabbitmqctl set_user_limits` and `PUT /api/user-limits/{user}/{name}`; answered
    /// `Ok`, 404 for an unknown user, 406 with RabbitMQ's text for another name or a value
    /// that is not an integer.
    UserLimitSet(0x000E, "user-limit.set") {
        /// User name.
        user: String as Sstr,
        /// Limit name: `max-connections` or `max-channels`.
        name: String as Sstr,
        /// The value, as JSON text (an integer).
        value: String as Lstr,
    },
    /// 0x000F channel 0, administrators: `sstr user, sstr name`. Clears a user limit
    /// (`rabbitmqctl clear_user_limits`; `all` clears every one); `Ok` also when it was
    /// not set, 404 for an unknown user.
    UserLimitClear(0x000F, "user-limit.clear") {
        /// User name.
        user: String as Sstr,
        /// Limit name, or `all`.
        name: String as Sstr,
    },
    /// 0x0010 channel 0: `sstr name`. Creates a virtual host (idempotent).
    VhostDeclare(0x0010, "vhost.declare") {
        /// Vhost name.
        name: String as Sstr,
    },
    /// 0x0011 channel 0: `sstr name`. Deletes a virtual host and everything in it.
    VhostDelete(0x0011, "vhost.delete") {
        /// Vhost name.
        name: String as Sstr,
    },
    /// 0x0012 channel 0: `u8 kind`. Lists objects ([`ListKind`]).
    List(0x0012, "list") {
        /// What to list.
        kind: ListKind as U8,
    },
    /// 0x0013 server→client: `u32 count, count × table`. One table per row, fields named
    /// as RabbitMQ's management API names them.
    ListOk(0x0013, "list-ok") {
        /// The rows.
        rows: Vec<FieldTable> as Counted<Table, LIST_ROWS_MAX>,
    },
    /// 0x0014 channel 0: server status request.
    Status(0x0014, "status"),
    /// 0x0015 server→client: `table info` (version, uptime, counts).
    StatusOk(0x0015, "status-ok") {
        /// Status fields.
        info: FieldTable as Table,
    },
    /// 0x0016 channel 0, administrators: `sstr name, lstr secret, sstr hash_algorithm,
    /// sstr tags`. Creates a user; `hash_algorithm` empty means `secret` is a password in
    /// clear (hashed by the server), otherwise `secret` is a hash of that algorithm
    /// (`rabbit_password_hashing_sha256`, …). `tags` is a comma-separated list.
    UserAdd(0x0016, "user.add") {
        /// User name.
        name: String as Sstr,
        /// Password, or hash when `hash_algorithm` is set.
        secret: String as Lstr,
        /// Empty, or the algorithm of the hash in `secret`.
        hash_algorithm: String as Sstr,
        /// Comma-separated tags.
        tags: String as Sstr,
    },
    /// 0x0017 channel 0, administrators: `sstr name`. Deletes a user and its permissions
    /// and closes its connections.
    UserDelete(0x0017, "user.delete") {
        /// User name.
        name: String as Sstr,
    },
    /// 0x0018 channel 0, administrators: `sstr name, lstr password`. Changes a password.
    UserPasswd(0x0018, "user.passwd") {
        /// User name.
        name: String as Sstr,
        /// New password in clear.
        password: String as Lstr,
    },
    /// 0x0019 channel 0, administrators: `sstr name, sstr tags`. Replaces a user's tags.
    UserTags(0x0019, "user.tags") {
        /// User name.
        name: String as Sstr,
        /// Comma-separated tags.
        tags: String as Sstr,
    },
    /// 0x001A channel 0, administrators: `sstr user, sstr vhost, lstr configure, lstr
    /// write, lstr read`. Sets a user's permissions in a vhost.
    PermissionSet(0x001A, "permission.set")(spec: Box<PermissionSpec> as Record),
    /// 0x001B channel 0, administrators: `sstr user, sstr vhost`. Clears them.
    PermissionClear(0x001B, "permission.clear") {
        /// User name.
        user: String as Sstr,
        /// Vhost name.
        vhost: String as Sstr,
    },
    /// 0x001C channel 0, administrators: `u64 connection_id, sstr reason`. Closes a native
    /// or AMQP connection (its id as `list connections` shows it) with 320
    /// CONNECTION_FORCED and the reason (RabbitMQ's `rabbitmqctl close_connection`); 404
    /// for an unknown id. Answered with `Ok`.
    ConnectionCloseAdmin(0x001C, "connection.close-admin") {
        /// The connection's id.
        connection_id: u64 as U64,
        /// Text the client receives after `CONNECTION_FORCED - `.
        reason: String as Sstr,
    },
    /// 0x001D channel 0, administrators: no fields. Asks for the definitions in
    /// RabbitMQ's JSON format; answered with `DefinitionsExportOk`.
    DefinitionsExport(0x001D, "definitions.export"),
    /// 0x001E server→client: `lstr json`. The definitions (answer to `DefinitionsExport`)
    /// or the import summary (answer to `DefinitionsImport`), UTF-8 JSON of at most
    /// [`crate::limits::DEFINITIONS_JSON_BYTES_MAX`] bytes.
    DefinitionsExportOk(0x001E, "definitions.export-ok") {
        /// The JSON text.
        json: String as Lstr,
    },
    /// 0x001F channel 0, administrators: `lstr json`. Imports definitions in RabbitMQ's
    /// JSON format; answered with `DefinitionsExportOk` carrying the import summary.
    DefinitionsImport(0x001F, "definitions.import") {
        /// The JSON text.
        json: String as Lstr,
    },
    /// 0x0020 client→server on a new channel number: opens the channel.
    ChannelOpen(0x0020, "channel.open"),
    /// 0x0021 either way: `u16 reply_code, sstr reply_text, u16 method_id`. Closes one
    /// channel; the peer answers `CloseOk` on that channel and ignores other frames on it
    /// until then.
    ChannelClose(0x0021, "channel.close") {
        /// AMQP reply code.
        reply_code: u16 as U16,
        /// Human-readable reason.
        reply_text: String as Sstr,
        /// Method id that failed, or 0.
        method_id: u16 as U16,
    },
    /// 0x0022 channel 0, `policymaker` or `administrator` (a `policymaker` also needs
    /// permissions in the vhost): `sstr component, sstr vhost, sstr name, lstr value`
    /// (JSON text). Sets a runtime parameter (`rabbitmqctl set_parameter`, `PUT
    /// /api/parameters/{component}/{vhost}/{name}`); answered `Ok`, 404 for an unknown
    /// vhost, 406 with RabbitMQ's text for a value that is not JSON (`not_json`), an
    /// unknown component or a bad value.
    ParameterSet(0x0022, "parameter.set") {
        /// Component (`vhost-limits`, `operator_policy`, `federation-upstream`, …).
        component: String as Sstr,
        /// Vhost name.
        vhost: String as Sstr,
        /// Parameter name.
        name: String as Sstr,
        /// The value, as JSON text.
        value: String as Lstr,
    },
    /// 0x0023 channel 0, as `ParameterSet`: `sstr component, sstr vhost, sstr name`.
    /// Clears a runtime parameter (`rabbitmqctl clear_parameter`); 404 when there is none.
    ParameterClear(0x0023, "parameter.clear") {
        /// Component.
        component: String as Sstr,
        /// Vhost name.
        vhost: String as Sstr,
        /// Parameter name.
        name: String as Sstr,
    },
    /// 0x0024 channel 0, `policymaker` or `administrator`: `sstr name, lstr value` (JSON
    /// text). Sets a global parameter (`rabbitmqctl set_global_parameter`, `PUT
    /// /api/global-parameters/{name}`; `cluster_name` is the cluster's name); answered
    /// `Ok`, 406 for a value that is not JSON or a bad `cluster_name`.
    GlobalParameterSet(0x0024, "global-parameter.set") {
        /// Parameter name.
        name: String as Sstr,
        /// The value, as JSON text.
        value: String as Lstr,
    },
    /// 0x0025 channel 0, `policymaker` or `administrator`: `sstr name`. Clears a global
    /// parameter (`rabbitmqctl clear_global_parameter`); 404 when there is none.
    GlobalParameterClear(0x0025, "global-parameter.clear") {
        /// Parameter name.
        name: String as Sstr,
    },
    /// 0x0026 channel 0, administrators: `sstr vhost, sstr name, lstr pattern, sstr
    /// apply_to, u64 priority (two's complement i64), lstr definition` (a JSON object), as
    /// `PolicySet`. Sets an operator policy (`rabbitmqctl set_operator_policy`); answered
    /// `Ok`, 404 for an unknown vhost, 406 naming a bad pattern, apply-to or a definition
    /// key operator policies do not take.
    OperatorPolicySet(0x0026, "operator-policy.set")(spec: Box<PolicySpec> as Record),
    /// 0x0027 channel 0, administrators: `sstr vhost, sstr name`. Clears an operator
    /// policy (`rabbitmqctl clear_operator_policy`); 404 when there is none.
    OperatorPolicyClear(0x0027, "operator-policy.clear") {
        /// Vhost name.
        vhost: String as Sstr,
        /// Operator policy name.
        name: String as Sstr,
    },
    /// 0x0030: `sstr exchange, sstr kind, bool passive, bool durable, bool auto_delete,
    /// bool internal, table arguments`.
    ExchangeDeclare(0x0030, "exchange.declare") {
        /// Exchange name.
        exchange: String as Sstr,
        /// `direct`, `fanout`, `topic` or `headers`.
        kind: String as Sstr,
        /// Only check that it exists.
        passive: bool as Bool,
        /// Survives a restart.
        durable: bool as Bool,
        /// Deleted when its last binding goes.
        auto_delete: bool as Bool,
        /// Cannot be published to directly.
        internal: bool as Bool,
        /// Optional arguments.
        arguments: FieldTable as Table,
    },
    /// 0x0031: `sstr exchange, bool if_unused`.
    ExchangeDelete(0x0031, "exchange.delete") {
        /// Exchange name.
        exchange: String as Sstr,
        /// Refuse (406) when it has bindings.
        if_unused: bool as Bool,
    },
    /// 0x0032: `sstr destination, sstr source, sstr routing_key, table arguments`.
    ExchangeBind(0x0032, "exchange.bind") {
        /// Exchange receiving the routed messages.
        destination: String as Sstr,
        /// Exchange messages are published to.
        source: String as Sstr,
        /// Binding key.
        routing_key: String as Sstr,
        /// Binding arguments (headers exchange match).
        arguments: FieldTable as Table,
    },
    /// 0x0033: `sstr destination, sstr source, sstr routing_key, table arguments`, as
    /// `ExchangeBind`.
    ExchangeUnbind(0x0033, "exchange.unbind") {
        /// Exchange receiving the routed messages.
        destination: String as Sstr,
        /// Exchange messages are published to.
        source: String as Sstr,
        /// Binding key.
        routing_key: String as Sstr,
        /// Binding arguments.
        arguments: FieldTable as Table,
    },
    /// 0x0040: `sstr queue, bool passive, bool durable, bool exclusive, bool auto_delete,
    /// table arguments`. An empty name asks the server to generate one.
    QueueDeclare(0x0040, "queue.declare") {
        /// Queue name, or empty.
        queue: String as Sstr,
        /// Only check that it exists.
        passive: bool as Bool,
        /// Survives a restart.
        durable: bool as Bool,
        /// Owned by this connection, deleted when it closes.
        exclusive: bool as Bool,
        /// Deleted when its last consumer goes.
        auto_delete: bool as Bool,
        /// Optional arguments.
        arguments: FieldTable as Table,
    },
    /// 0x0041: `sstr queue, u32 message_count, u32 consumer_count`.
    QueueDeclareOk(0x0041, "queue.declare-ok") {
        /// The (possibly generated) name.
        queue: String as Sstr,
        /// Ready messages.
        message_count: u32 as U32,
        /// Active consumers.
        consumer_count: u32 as U32,
    },
    /// 0x0042: `sstr queue, sstr exchange, sstr routing_key, table arguments`.
    QueueBind(0x0042, "queue.bind") {
        /// Queue name.
        queue: String as Sstr,
        /// Exchange name.
        exchange: String as Sstr,
        /// Binding key.
        routing_key: String as Sstr,
        /// Binding arguments.
        arguments: FieldTable as Table,
    },
    /// 0x0043: `sstr queue, sstr exchange, sstr routing_key, table arguments`, as
    /// `QueueBind`.
    QueueUnbind(0x0043, "queue.unbind") {
        /// Queue name.
        queue: String as Sstr,
        /// Exchange name.
        exchange: String as Sstr,
        /// Binding key.
        routing_key: String as Sstr,
        /// Binding arguments.
        arguments: FieldTable as Table,
    },
    /// 0x0044: `sstr queue`.
    QueuePurge(0x0044, "queue.purge") {
        /// Queue name.
        queue: String as Sstr,
    },
    /// 0x0045: `u32 message_count` (messages purged).
    QueuePurgeOk(0x0045, "queue.purge-ok") {
        /// Messages removed.
        message_count: u32 as U32,
    },
    /// 0x0046: `sstr queue, bool if_unused, bool if_empty`.
    QueueDelete(0x0046, "queue.delete") {
        /// Queue name.
        queue: String as Sstr,
        /// Refuse (406) when it has consumers.
        if_unused: bool as Bool,
        /// Refuse (406) when it has messages.
        if_empty: bool as Bool,
    },
    /// 0x0047: `u32 message_count` (messages deleted with the queue).
    QueueDeleteOk(0x0047, "queue.delete-ok") {
        /// Messages deleted.
        message_count: u32 as U32,
    },
    /// 0x0048: `sstr queue, lstr request` (JSON text: the body of `POST
    /// /api/queues/{vhost}/{queue}/peek`). Reads ready messages without consuming them.
    QueuePeek(0x0048, "queue.peek") {
        /// Queue name.
        queue: String as Sstr,
        /// The request, JSON text.
        request: String as Lstr,
    },
    /// 0x0049: `lstr json` (UTF-8 text: the HTTP API's answer to the same request).
    QueueToolOk(0x0049, "queue.tool-ok") {
        /// The answer, JSON text.
        json: String as Lstr,
    },
    /// 0x004A: `sstr queue, lstr request` (JSON text: the body of `POST
    /// /api/queues/{vhost}/{queue}/replay`). Moves messages to their origin or a target.
    QueueReplay(0x004A, "queue.replay") {
        /// Queue name.
        queue: String as Sstr,
        /// The request, JSON text.
        request: String as Lstr,
    },
    /// 0x004B: `sstr queue, lstr request` (JSON text: the body of `POST
    /// /api/queues/{vhost}/{queue}/search`). Finds messages by text.
    QueueSearch(0x004B, "queue.search") {
        /// Queue name.
        queue: String as Sstr,
        /// The request, JSON text.
        request: String as Lstr,
    },
    /// 0x004C: `sstr queue`. Pauses deliveries to the queue's consumers (docs/lifecycle.md,
    /// "Pausing a queue"); answered `ok`.
    QueuePause(0x004C, "queue.pause") {
        /// Queue name.
        queue: String as Sstr,
    },
    /// 0x004D: `sstr queue`. Resumes deliveries of a paused queue; answered `ok`.
    QueueResume(0x004D, "queue.resume") {
        /// Queue name.
        queue: String as Sstr,
    },
    /// 0x004E: `sstr queue, lstr request` (JSON text: `{"limit", "encoding", "truncate"}`,
    /// the query parameters of `GET /api/queues/{vhost}/{queue}/unacked`). Lists the
    /// deliveries awaiting their ack, oldest first; answered `queue.tool-ok`.
    QueueUnacked(0x004E, "queue.unacked") {
        /// Queue name.
        queue: String as Sstr,
        /// The request, JSON text.
        request: String as Lstr,
    },
    /// 0x0050: `u16 prefetch_count, bool global`.
    BasicQos(0x0050, "basic.qos") {
        /// Unacked deliveries allowed (0 = unlimited).
        prefetch_count: u16 as U16,
        /// false: per consumer; true: per channel (RabbitMQ's meaning).
        global: bool as Bool,
    },
    /// 0x0051: `sstr queue, sstr consumer_tag, bool no_ack, bool exclusive, table arguments`.
    BasicConsume(0x0051, "basic.consume") {
        /// Queue name.
        queue: String as Sstr,
        /// Consumer tag, or empty to have one generated.
        consumer_tag: String as Sstr,
        /// Deliveries are acked on sending.
        no_ack: bool as Bool,
        /// Only consumer of the queue.
        exclusive: bool as Bool,
        /// Consumer arguments.
        arguments: FieldTable as Table,
    },
    /// 0x0052: `sstr consumer_tag`.
    BasicConsumeOk(0x0052, "basic.consume-ok") {
        /// The (possibly generated) tag.
        consumer_tag: String as Sstr,
    },
    /// 0x0053 either way: `sstr consumer_tag`. From the server (request id 0) it says the
    /// consumer was cancelled (queue deleted); the client does not answer.
    BasicCancel(0x0053, "basic.cancel") {
        /// Consumer tag.
        consumer_tag: String as Sstr,
    },
    /// 0x0054 client→server, no reply: `u32 count`, then per message `sstr exchange,
    /// sstr routing_key, bool mandatory, props properties, lstr body` ([`PublishMessage`]).
    Publish(0x0054, "basic.publish") {
        /// The messages, processed in order.
        messages: Vec<PublishMessage> as Counted<Record, BATCH_ITEMS_MAX>,
    },
    /// 0x0055 server→client: `u16 reply_code, sstr reply_text, sstr exchange,
    /// sstr routing_key, props properties, lstr body`. An unroutable mandatory message.
    Return(0x0055, "basic.return") {
        /// 312 NO_ROUTE.
        reply_code: u16 as U16,
        /// Reason text.
        reply_text: String as Sstr,
        /// Exchange it was published to.
        exchange: String as Sstr,
        /// Routing key.
        routing_key: String as Sstr,
        /// Properties (boxed: keeps the method enum small for the many methods that
        /// move through mailboxes).
        properties: Box<BasicProperties> as Props,
        /// Body.
        body: Vec<u8> as Lstr,
    },
    /// 0x0056 server→client: `u32 count`, then per delivery `sstr consumer_tag,
    /// u64 delivery_tag, bool redelivered, sstr exchange, sstr routing_key, props properties,
    /// lstr body` ([`Delivery`]).
    Deliver(0x0056, "basic.deliver") {
        /// The deliveries, in delivery-tag order.
        deliveries: Vec<Delivery> as Counted<Record, BATCH_ITEMS_MAX>,
    },
    /// 0x0057: `sstr queue, bool no_ack`.
    BasicGet(0x0057, "basic.get") {
        /// Queue name.
        queue: String as Sstr,
        /// Ack on sending.
        no_ack: bool as Bool,
    },
    /// 0x0058: `u64 delivery_tag, bool redelivered, sstr exchange, sstr routing_key,
    /// u32 message_count, props properties, lstr body`.
    GetOk(0x0058, "basic.get-ok") {
        /// Delivery tag.
        delivery_tag: u64 as U64,
        /// Delivered before.
        redelivered: bool as Bool,
        /// Exchange.
        exchange: String as Sstr,
        /// Routing key.
        routing_key: String as Sstr,
        /// Messages left ready in the queue.
        message_count: u32 as U32,
        /// Properties (boxed, as in `Return`).
        properties: Box<BasicProperties> as Props,
        /// Body.
        body: Vec<u8> as Lstr,
    },
    /// 0x0059: the queue had no ready message.
    GetEmpty(0x0059, "basic.get-empty"),
    /// 0x005A either way, no reply: `u64 delivery_tag, bool multiple`. From the server:
    /// a publisher confirm.
    Ack(0x005A, "basic.ack") {
        /// Delivery tag (or publish sequence number for confirms).
        delivery_tag: u64 as U64,
        /// Everything up to and including the tag.
        multiple: bool as Bool,
    },
    /// 0x005B either way, no reply: `u64 delivery_tag, bool multiple, bool requeue`.
    Nack(0x005B, "basic.nack") {
        /// Delivery tag (or publish sequence number).
        delivery_tag: u64 as U64,
        /// Everything up to and including the tag.
        multiple: bool as Bool,
        /// Requeue instead of discarding.
        requeue: bool as Bool,
    },
    /// 0x005C client→server, no reply: `u64 delivery_tag, bool requeue`.
    Reject(0x005C, "basic.reject") {
        /// Delivery tag.
        delivery_tag: u64 as U64,
        /// Requeue instead of discarding.
        requeue: bool as Bool,
    },
    /// 0x005D: `bool requeue`. Redeliver every unacked message of the channel.
    Recover(0x005D, "basic.recover") {
        /// Must be true (AMQP's requeue=false is not supported, as in RabbitMQ).
        requeue: bool as Bool,
    },
    /// 0x0060: puts the channel in publisher-confirm mode.
    ConfirmSelect(0x0060, "confirm.select"),
}

impl Method {
    /// Decodes one whole payload into its request id and method.
    ///
    /// # Errors
    /// [`DecodeError`] for an unknown method id, a truncated or malformed field, a count
    /// the payload cannot hold or over its limit, or bytes left over after the last field.
    pub fn decode(payload: &[u8]) -> Result<(u32, Method), DecodeError> {
        let mut r = Reader::new(payload);
        let id = r.u16("method id")?;
        let request_id = r.u32("request id")?;
        let m = Method::decode_fields(id, &mut r)?;
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

/// Appends one message of a publish batch (without the batch count), from borrowed parts:
/// the layout of [`PublishMessage`] (the method tests hold the two to each other).
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
/// parts so the server encodes straight from a queued message: the layout of [`Delivery`]
/// (the method tests hold the two to each other).
#[allow(
    clippy::too_many_arguments,
    reason = "the delivery's fields, borrowed from the queued message"
)]
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
