//! The definitions store, `<data-dir>/meta.db`: vhosts, durable exchanges, durable queues
//! and the bindings between durable ends, in SQLite (docs/storage.md).
//!
//! Every write is one transaction, committed before the method returns, with WAL and
//! `synchronous = FULL`: a declare the client was told about survives a power loss. A
//! definitions import writes its whole file in one (`meta_batch.rs`). Names
//! (arbitrary UTF-8 up to 255 bytes, including `/`, `..`, quotes) only ever travel as bound
//! parameters, never as SQL text. A durable queue's messages live under `queues/<id>/`,
//! where `<id>` comes from [`new_queue_id`], never from the queue's name.
//!
//! # Schema (version 1)
//!
//! Arguments columns hold a field table in its wire form (`u32` big-endian byte length,
//! then entries; AMQP 0-9-1 §4.2.5.5 with RabbitMQ's type tags), decoded on load. Booleans
//! are `0`/`1`. A foreign key ties each exchange, queue and binding to its vhost; bindings
//! have none to their ends, because a durable binding may start at a built-in exchange
//! (`amq.direct`, …) that is not stored.
//!
//! ```sql
//! -- The schema's version: one row; an older file is migrated step by step on open.
//! CREATE TABLE schema_version (
//!     id      INTEGER PRIMARY KEY CHECK (id = 1),
//!     version INTEGER NOT NULL
//! );
//! -- Virtual hosts, by name.
//! CREATE TABLE vhosts (
//!     name TEXT NOT NULL PRIMARY KEY
//! ) WITHOUT ROWID;
//! -- Durable exchanges of a vhost.
//! CREATE TABLE exchanges (
//!     vhost       TEXT NOT NULL REFERENCES vhosts (name),
//!     name        TEXT NOT NULL,
//!     kind        TEXT NOT NULL,
//!     auto_delete INTEGER NOT NULL CHECK (auto_delete IN (0, 1)),
//!     internal    INTEGER NOT NULL CHECK (internal IN (0, 1)),
//!     arguments   BLOB NOT NULL,
//!     PRIMARY KEY (vhost, name)
//! ) WITHOUT ROWID;
//! -- Durable queues of a vhost; id (32 lowercase hex) names the directory queues/<id>/.
//! CREATE TABLE queues (
//!     vhost       TEXT NOT NULL REFERENCES vhosts (name),
//!     name        TEXT NOT NULL,
//!     id          TEXT NOT NULL UNIQUE CHECK (length(id) = 32 AND id NOT GLOB '*[^0-9a-f]*'),
//!     auto_delete INTEGER NOT NULL CHECK (auto_delete IN (0, 1)),
//!     arguments   BLOB NOT NULL,
//!     PRIMARY KEY (vhost, name)
//! ) WITHOUT ROWID;
//! -- Bindings from an exchange to a queue or exchange; a binding's identity is every column.
//! CREATE TABLE bindings (
//!     vhost                   TEXT NOT NULL REFERENCES vhosts (name),
//!     source                  TEXT NOT NULL,
//!     destination             TEXT NOT NULL,
//!     destination_is_exchange INTEGER NOT NULL CHECK (destination_is_exchange IN (0, 1)),
//!     routing_key             TEXT NOT NULL,
//!     arguments               BLOB NOT NULL,
//!     PRIMARY KEY (vhost, source, destination, destination_is_exchange, routing_key, arguments)
//! ) WITHOUT ROWID;
//! -- Bindings by destination, for deleting the bindings to a queue or exchange.
//! CREATE INDEX bindings_by_destination ON bindings (vhost, destination, destination_is_exchange);
//! ```
//!
//! # Schema version 2
//!
//! ```sql
//! -- Users (version 2): a password hash with the name of its algorithm (argon2id, or
//! -- RabbitMQ's rabbit_password_hashing_sha256/_sha512 until the next login), and tags
//! -- separated by commas.
//! CREATE TABLE users (
//!     name           TEXT NOT NULL PRIMARY KEY,
//!     hash_algorithm TEXT NOT NULL,
//!     password_hash  TEXT NOT NULL,
//!     tags           TEXT NOT NULL
//! ) WITHOUT ROWID;
//! -- A user's configure, write and read patterns in a vhost.
//! CREATE TABLE permissions (
//!     user      TEXT NOT NULL REFERENCES users (name),
//!     vhost     TEXT NOT NULL REFERENCES vhosts (name),
//!     configure TEXT NOT NULL,
//!     write     TEXT NOT NULL,
//!     read      TEXT NOT NULL,
//!     PRIMARY KEY (user, vhost)
//! ) WITHOUT ROWID;
//! -- One row until the default user is seeded: written with the users table, so the default
//! -- user is created exactly once, at the first start with this schema.
//! CREATE TABLE default_user_pending (
//!     id INTEGER PRIMARY KEY CHECK (id = 1)
//! );
//! INSERT INTO default_user_pending (id) VALUES (1);
//! ```
//!
//! # Schema version 3
//!
//! ```sql
//! -- Policies (version 3): RabbitMQ's fields; the definition is a JSON object as
//! -- text, kept as written (keys RelayMQ does not act on included, for export).
//! CREATE TABLE policies (
//!     vhost      TEXT NOT NULL REFERENCES vhosts (name),
//!     name       TEXT NOT NULL,
//!     pattern    TEXT NOT NULL,
//!     apply_to   TEXT NOT NULL,
//!     priority   INTEGER NOT NULL,
//!     definition TEXT NOT NULL,
//!     PRIMARY KEY (vhost, name)
//! ) WITHOUT ROWID;
//! ```
//!
//! # Schema version 4
//!
//! ```sql
//! -- Limits and vhost metadata (version 4): RabbitMQ's vhost limits (max-connections,
//! -- max-queues) and user limits (max-connections, max-channels); a negative value is
//! -- kept as set and means no limit.
//! CREATE TABLE vhost_limits (
//!     vhost TEXT NOT NULL REFERENCES vhosts (name),
//!     name  TEXT NOT NULL,
//!     value INTEGER NOT NULL,
//!     PRIMARY KEY (vhost, name)
//! ) WITHOUT ROWID;
//! CREATE TABLE user_limits (
//!     user  TEXT NOT NULL REFERENCES users (name),
//!     name  TEXT NOT NULL,
//!     value INTEGER NOT NULL,
//!     PRIMARY KEY (user, name)
//! ) WITHOUT ROWID;
//! -- A vhost's description, tags (separated by commas) and default queue type.
//! CREATE TABLE vhost_metadata (
//!     vhost              TEXT NOT NULL PRIMARY KEY REFERENCES vhosts (name),
//!     description        TEXT NOT NULL,
//!     tags               TEXT NOT NULL,
//!     default_queue_type TEXT NOT NULL
//! ) WITHOUT ROWID;
//! ```
//!
//! # Schema version 5
//!
//! ```sql
//! -- Runtime parameters, global parameters and operator policies (version 5):
//! -- RabbitMQ's runtime parameters of a vhost (component, name, a JSON value), its
//! -- global parameters (cluster_name, ...) and its operator policies (the policies'
//! -- fields). Values and definitions are JSON texts kept as written.
//! CREATE TABLE runtime_parameters (
//!     vhost     TEXT NOT NULL REFERENCES vhosts (name),
//!     component TEXT NOT NULL,
//!     name      TEXT NOT NULL,
//!     value     TEXT NOT NULL,
//!     PRIMARY KEY (vhost, component, name)
//! ) WITHOUT ROWID;
//! CREATE TABLE global_parameters (
//!     name  TEXT NOT NULL PRIMARY KEY,
//!     value TEXT NOT NULL
//! ) WITHOUT ROWID;
//! CREATE TABLE operator_policies (
//!     vhost      TEXT NOT NULL REFERENCES vhosts (name),
//!     name       TEXT NOT NULL,
//!     pattern    TEXT NOT NULL,
//!     apply_to   TEXT NOT NULL,
//!     priority   INTEGER NOT NULL,
//!     definition TEXT NOT NULL,
//!     PRIMARY KEY (vhost, name)
//! ) WITHOUT ROWID;
//! ```
//!
//! # Schema version 6
//!
//! ```sql
//! -- Pausing (version 6): a paused queue keeps its consumers and delivers nothing
//! -- until it is resumed (docs/lifecycle.md, "Pausing a queue").
//! ALTER TABLE queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1));
//! ```

use crate::storage::error::StorageError;
use crate::storage::meta_limits::{
    load_vhost_limits, load_vhost_metadata, LimitRow, VhostMetadataRow,
};
use crate::storage::meta_parameters::{
    load_global_parameters, load_operator_policies, load_parameters, GlobalParameterRow,
    ParameterRow,
};
use crate::storage::meta_policies::{load_policies, PolicyRow};
use crate::types::codec::Reader;
use crate::types::field_table::{decode_table, encode_table};
use crate::types::FieldTable;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Current schema version.
pub const SCHEMA_VERSION: u32 = 6;

/// Step `i` migrates a file at schema version `i` to version `i + 1` (version 0 is an
/// empty file). Each step runs in its own transaction together with the version update, so
/// a crash mid-migration leaves the file at a whole version.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6,
];

/// Version 1: the whole schema. Kept identical to the module documentation (a unit test
/// checks every line).
const SCHEMA_V1: &str = "
-- The schema's version: one row; an older file is migrated step by step on open.
CREATE TABLE schema_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
-- Virtual hosts, by name.
CREATE TABLE vhosts (
    name TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;
-- Durable exchanges of a vhost.
CREATE TABLE exchanges (
    vhost       TEXT NOT NULL REFERENCES vhosts (name),
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    auto_delete INTEGER NOT NULL CHECK (auto_delete IN (0, 1)),
    internal    INTEGER NOT NULL CHECK (internal IN (0, 1)),
    arguments   BLOB NOT NULL,
    PRIMARY KEY (vhost, name)
) WITHOUT ROWID;
-- Durable queues of a vhost; id (32 lowercase hex) names the directory queues/<id>/.
CREATE TABLE queues (
    vhost       TEXT NOT NULL REFERENCES vhosts (name),
    name        TEXT NOT NULL,
    id          TEXT NOT NULL UNIQUE CHECK (length(id) = 32 AND id NOT GLOB '*[^0-9a-f]*'),
    auto_delete INTEGER NOT NULL CHECK (auto_delete IN (0, 1)),
    arguments   BLOB NOT NULL,
    PRIMARY KEY (vhost, name)
) WITHOUT ROWID;
-- Bindings from an exchange to a queue or exchange; a binding's identity is every column.
CREATE TABLE bindings (
    vhost                   TEXT NOT NULL REFERENCES vhosts (name),
    source                  TEXT NOT NULL,
    destination             TEXT NOT NULL,
    destination_is_exchange INTEGER NOT NULL CHECK (destination_is_exchange IN (0, 1)),
    routing_key             TEXT NOT NULL,
    arguments               BLOB NOT NULL,
    PRIMARY KEY (vhost, source, destination, destination_is_exchange, routing_key, arguments)
) WITHOUT ROWID;
-- Bindings by destination, for deleting the bindings to a queue or exchange.
CREATE INDEX bindings_by_destination ON bindings (vhost, destination, destination_is_exchange);
";

/// Version 2: users, permissions and the default user's seed marker. Kept identical to
/// the module documentation.
const SCHEMA_V2: &str = "
-- Users (version 2): a password hash with the name of its algorithm (argon2id, or
-- RabbitMQ's rabbit_password_hashing_sha256/_sha512 until the next login), and tags
-- separated by commas.
CREATE TABLE users (
    name           TEXT NOT NULL PRIMARY KEY,
    hash_algorithm TEXT NOT NULL,
    password_hash  TEXT NOT NULL,
    tags           TEXT NOT NULL
) WITHOUT ROWID;
-- A user's configure, write and read patterns in a vhost.
CREATE TABLE permissions (
    user      TEXT NOT NULL REFERENCES users (name),
    vhost     TEXT NOT NULL REFERENCES vhosts (name),
    configure TEXT NOT NULL,
    write     TEXT NOT NULL,
    read      TEXT NOT NULL,
    PRIMARY KEY (user, vhost)
) WITHOUT ROWID;
-- One row until the default user is seeded: written with the users table, so the default
-- user is created exactly once, at the first start with this schema.
CREATE TABLE default_user_pending (
    id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO default_user_pending (id) VALUES (1);
";

/// Version 3: policies. Kept identical to the module documentation.
const SCHEMA_V3: &str = "
-- Policies (version 3): RabbitMQ's fields; the definition is a JSON object as
-- text, kept as written (keys RelayMQ does not act on included, for export).
CREATE TABLE policies (
    vhost      TEXT NOT NULL REFERENCES vhosts (name),
    name       TEXT NOT NULL,
    pattern    TEXT NOT NULL,
    apply_to   TEXT NOT NULL,
    priority   INTEGER NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (vhost, name)
) WITHOUT ROWID;
";

/// Version 4: vhost and user limits, vhost metadata. Kept identical to the module
/// documentation.
const SCHEMA_V4: &str = "
-- Limits and vhost metadata (version 4): RabbitMQ's vhost limits (max-connections,
-- max-queues) and user limits (max-connections, max-channels); a negative value is
-- kept as set and means no limit.
CREATE TABLE vhost_limits (
    vhost TEXT NOT NULL REFERENCES vhosts (name),
    name  TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (vhost, name)
) WITHOUT ROWID;
CREATE TABLE user_limits (
    user  TEXT NOT NULL REFERENCES users (name),
    name  TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (user, name)
) WITHOUT ROWID;
-- A vhost's description, tags (separated by commas) and default queue type.
CREATE TABLE vhost_metadata (
    vhost              TEXT NOT NULL PRIMARY KEY REFERENCES vhosts (name),
    description        TEXT NOT NULL,
    tags               TEXT NOT NULL,
    default_queue_type TEXT NOT NULL
) WITHOUT ROWID;
";

/// Version 5: runtime parameters, global parameters, operator policies. Kept identical
/// to the module documentation.
const SCHEMA_V5: &str = "
-- Runtime parameters, global parameters and operator policies (version 5):
-- RabbitMQ's runtime parameters of a vhost (component, name, a JSON value), its
-- global parameters (cluster_name, ...) and its operator policies (the policies'
-- fields). Values and definitions are JSON texts kept as written.
CREATE TABLE runtime_parameters (
    vhost     TEXT NOT NULL REFERENCES vhosts (name),
    component TEXT NOT NULL,
    name      TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (vhost, component, name)
) WITHOUT ROWID;
CREATE TABLE global_parameters (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE operator_policies (
    vhost      TEXT NOT NULL REFERENCES vhosts (name),
    name       TEXT NOT NULL,
    pattern    TEXT NOT NULL,
    apply_to   TEXT NOT NULL,
    priority   INTEGER NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (vhost, name)
) WITHOUT ROWID;
";

/// Version 6: the paused flag of a durable queue. Kept identical to the module
/// documentation.
const SCHEMA_V6: &str = "
-- Pausing (version 6): a paused queue keeps its consumers and delivers nothing
-- until it is resumed (docs/lifecycle.md, \"Pausing a queue\").
ALTER TABLE queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1));
";

/// How long a statement waits for a lock held by another connection (only `--check` or an
/// operator's `sqlite3` can hold one; the server uses a single connection).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A durable exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Type name: direct, fanout, topic, headers or x-consistent-hash.
    pub kind: String,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Clients cannot publish to it.
    pub internal: bool,
    /// Declare arguments.
    pub arguments: FieldTable,
}

/// A durable queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Stable id naming its directory `queues/<id>/`: 32 lowercase hex chars, from
    /// [`new_queue_id`].
    pub id: String,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Declare arguments.
    pub arguments: FieldTable,
    /// Paused: its consumers stay attached and get nothing until it is resumed (schema
    /// version 6; docs/lifecycle.md, "Pausing a queue").
    pub paused: bool,
}

/// A binding between durable ends.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingDef {
    /// Its vhost.
    pub vhost: String,
    /// Source exchange.
    pub source: String,
    /// Destination queue or exchange.
    pub destination: String,
    /// Whether `destination` names an exchange (an exchange-to-exchange binding).
    pub destination_is_exchange: bool,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments (headers exchanges match on them).
    pub arguments: FieldTable,
}

/// Everything `meta.db` holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Definitions {
    /// Vhost names, sorted.
    pub vhosts: Vec<String>,
    /// Exchanges, sorted by (vhost, name).
    pub exchanges: Vec<ExchangeDef>,
    /// Queues, sorted by (vhost, name).
    pub queues: Vec<QueueDef>,
    /// Bindings, sorted by (vhost, source, destination kind, destination, routing key,
    /// arguments bytes).
    pub bindings: Vec<BindingDef>,
    /// Policies, sorted by (vhost, name) (schema version 3).
    pub policies: Vec<PolicyRow>,
    /// Vhost limits, sorted by (vhost, name) (schema version 4).
    pub vhost_limits: Vec<LimitRow>,
    /// Vhost metadata rows, sorted by vhost (schema version 4).
    pub vhost_metadata: Vec<VhostMetadataRow>,
    /// Runtime parameters, sorted by (vhost, component, name) (schema version 5).
    pub parameters: Vec<ParameterRow>,
    /// Global parameters, sorted by name (schema version 5).
    pub global_parameters: Vec<GlobalParameterRow>,
    /// Operator policies, sorted by (vhost, name) (schema version 5).
    pub operator_policies: Vec<PolicyRow>,
}

/// The definitions store: one SQLite connection to `meta.db`. Not `Sync`; the broker
/// wraps it in a `Mutex`.
#[derive(Debug)]
pub struct MetaStore {
    /// The connection; every method runs one transaction on it.
    conn: Connection,
    /// Path of `meta.db`, for error messages.
    path: PathBuf,
}

impl MetaStore {
    /// Opens or creates `path` (`<data-dir>/meta.db`; the directory must exist): WAL journal,
    /// `synchronous = FULL` (a commit survives power loss before the client is told),
    /// foreign keys on; creates the schema or migrates an older one step by step.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails, when the file has a schema version newer
    /// than [`SCHEMA_VERSION`] ("… has schema version N, this relaymq-server supports up to
    /// M"), or when it holds tables but no `schema_version` (not a RelayMQ file).
    pub fn open(path: &Path) -> Result<MetaStore, StorageError> {
        let at = |what: &'static str| {
            move |e: rusqlite::Error| StorageError::Meta(format!("{what} {}: {e}", path.display()))
        };
        let conn = Connection::open(path).map_err(at("open"))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(at("configure"))?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(at("configure"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StorageError::Meta(format!(
                "{}: journal_mode is {mode}, WAL is required",
                path.display()
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(at("configure"))?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(at("configure"))?;
        let store = MetaStore {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// Everything stored, vhosts first, each list sorted by (vhost, name) for determinism.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the table and row when a row's arguments do not
    /// decode or a queue id is malformed; [`StorageError::Meta`] when SQLite fails.
    pub fn load(&self) -> Result<Definitions, StorageError> {
        let err = meta_err("load");
        // One read transaction: a consistent snapshot even if another connection writes.
        let tx = self.conn.unchecked_transaction().map_err(&err)?;
        let vhosts =
            query_all(&tx, "SELECT name FROM vhosts ORDER BY name", |r| r.get(0)).map_err(&err)?;

        let mut exchanges = Vec::new();
        let rows = query_all(
            &tx,
            "SELECT vhost, name, kind, auto_delete, internal, arguments FROM exchanges
             ORDER BY vhost, name",
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, bool>(3)?,
                    r.get::<_, bool>(4)?,
                    r.get::<_, Vec<u8>>(5)?,
                ))
            },
        )
        .map_err(&err)?;
        for (vhost, name, kind, auto_delete, internal, blob) in rows {
            let arguments = self.decode_arguments(&blob, || {
                format!("exchanges row (vhost {vhost:?}, name {name:?})")
            })?;
            exchanges.push(ExchangeDef {
                vhost,
                name,
                kind,
                auto_delete,
                internal,
                arguments,
            });
        }

        let mut queues = Vec::new();
        let rows = query_all(
            &tx,
            "SELECT vhost, name, id, auto_delete, arguments, paused FROM queues
             ORDER BY vhost, name",
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, bool>(3)?,
                    r.get::<_, Vec<u8>>(4)?,
                    r.get::<_, bool>(5)?,
                ))
            },
        )
        .map_err(&err)?;
        for (vhost, name, id, auto_delete, blob, paused) in rows {
            let row = || format!("queues row (vhost {vhost:?}, name {name:?})");
            if !is_valid_queue_id(&id) {
                return Err(self.corrupt(format!(
                    "{}: id {id:?} is not 32 lowercase hex chars",
                    row()
                )));
            }
            let arguments = self.decode_arguments(&blob, row)?;
            queues.push(QueueDef {
                vhost,
                name,
                id,
                auto_delete,
                arguments,
                paused,
            });
        }

        let mut bindings = Vec::new();
        let rows = query_all(
            &tx,
            "SELECT vhost, source, destination, destination_is_exchange, routing_key, arguments
             FROM bindings
             ORDER BY vhost, source, destination_is_exchange, destination, routing_key, arguments",
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, bool>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Vec<u8>>(5)?,
                ))
            },
        )
        .map_err(&err)?;
        for (vhost, source, destination, destination_is_exchange, routing_key, blob) in rows {
            let arguments = self.decode_arguments(&blob, || {
                format!(
                    "bindings row (vhost {vhost:?}, source {source:?}, destination \
                     {destination:?}, routing key {routing_key:?})"
                )
            })?;
            bindings.push(BindingDef {
                vhost,
                source,
                destination,
                destination_is_exchange,
                routing_key,
                arguments,
            });
        }
        let policies = load_policies(&tx).map_err(&err)?;
        let vhost_limits = load_vhost_limits(&tx).map_err(&err)?;
        let vhost_metadata = load_vhost_metadata(&tx).map_err(&err)?;
        let parameters = load_parameters(&tx).map_err(&err)?;
        let global_parameters = load_global_parameters(&tx).map_err(&err)?;
        let operator_policies = load_operator_policies(&tx).map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(Definitions {
            vhosts,
            exchanges,
            queues,
            bindings,
            policies,
            vhost_limits,
            vhost_metadata,
            parameters,
            global_parameters,
            operator_policies,
        })
    }

    /// Stores a vhost; storing it again is a no-op.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn put_vhost(&self, name: &str) -> Result<(), StorageError> {
        self.write("put_vhost", |tx| insert_vhost(tx, name))
    }

    /// Deletes a vhost with its exchanges, queues and bindings, in one transaction. Deleting
    /// an absent vhost succeeds and returns nothing.
    ///
    /// Returns the deleted queues' ids, sorted: their directories are for the caller to
    /// remove, after this commit.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails; nothing is deleted then.
    pub fn delete_vhost(&self, name: &str) -> Result<Vec<String>, StorageError> {
        self.write("delete_vhost", |tx| {
            let ids = {
                let mut stmt = tx.prepare("SELECT id FROM queues WHERE vhost = ?1 ORDER BY id")?;
                let ids = stmt
                    .query_map(params![name], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                ids
            };
            tx.execute("DELETE FROM bindings WHERE vhost = ?1", params![name])?;
            tx.execute("DELETE FROM permissions WHERE vhost = ?1", params![name])?;
            tx.execute("DELETE FROM policies WHERE vhost = ?1", params![name])?;
            tx.execute("DELETE FROM vhost_limits WHERE vhost = ?1", params![name])?;
            tx.execute("DELETE FROM vhost_metadata WHERE vhost = ?1", params![name])?;
            tx.execute(
                "DELETE FROM runtime_parameters WHERE vhost = ?1",
                params![name],
            )?;
            tx.execute(
                "DELETE FROM operator_policies WHERE vhost = ?1",
                params![name],
            )?;
            tx.execute("DELETE FROM queues WHERE vhost = ?1", params![name])?;
            tx.execute("DELETE FROM exchanges WHERE vhost = ?1", params![name])?;
            tx.execute("DELETE FROM vhosts WHERE name = ?1", params![name])?;
            Ok(ids)
        })
    }

    /// Stores an exchange, replacing a stored one of the same vhost and name.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_exchange(&self, def: &ExchangeDef) -> Result<(), StorageError> {
        self.write_in_vhost("put_exchange", &def.vhost, |tx| upsert_exchange(tx, def))
    }

    /// Deletes an exchange and every binding from or to it, in one transaction. Deleting an
    /// absent exchange still deletes such bindings, and succeeds.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails; nothing is deleted then.
    pub fn delete_exchange(&self, vhost: &str, name: &str) -> Result<(), StorageError> {
        self.write("delete_exchange", |tx| {
            tx.execute(
                "DELETE FROM bindings WHERE vhost = ?1
                 AND (source = ?2 OR (destination = ?2 AND destination_is_exchange = 1))",
                params![vhost, name],
            )?;
            tx.execute(
                "DELETE FROM exchanges WHERE vhost = ?1 AND name = ?2",
                params![vhost, name],
            )?;
            Ok(())
        })
    }

    /// Stores a queue, replacing a stored one of the same vhost and name (id included: the
    /// old id's directory is then the caller's to remove).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the id is not 32 lowercase hex chars, another queue has
    /// it, the vhost is not stored, or SQLite fails.
    pub fn put_queue(&self, def: &QueueDef) -> Result<(), StorageError> {
        if !is_valid_queue_id(&def.id) {
            return Err(StorageError::Meta(format!(
                "put_queue: queue id {:?} of queue {:?} is not 32 lowercase hex chars",
                def.id, def.name
            )));
        }
        self.write_in_vhost("put_queue", &def.vhost, |tx| upsert_queue(tx, def))
    }

    /// Sets the paused flag of a stored queue (docs/lifecycle.md, "Pausing a queue");
    /// returns whether the queue is stored.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn set_queue_paused(
        &self,
        vhost: &str,
        name: &str,
        paused: bool,
    ) -> Result<bool, StorageError> {
        self.write("set_queue_paused", |tx| {
            Ok(tx.execute(
                "UPDATE queues SET paused = ?3 WHERE vhost = ?1 AND name = ?2",
                params![vhost, name, paused],
            )? > 0)
        })
    }

    /// Deletes a queue and every binding to it, in one transaction.
    ///
    /// Returns its id (`None` when it was not stored); its directory is for the caller to
    /// remove, after this commit.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails; nothing is deleted then.
    pub fn delete_queue(&self, vhost: &str, name: &str) -> Result<Option<String>, StorageError> {
        self.write("delete_queue", |tx| {
            tx.execute(
                "DELETE FROM bindings WHERE vhost = ?1
                 AND destination = ?2 AND destination_is_exchange = 0",
                params![vhost, name],
            )?;
            let id = tx
                .query_row(
                    "SELECT id FROM queues WHERE vhost = ?1 AND name = ?2",
                    params![vhost, name],
                    |r| r.get(0),
                )
                .optional()?;
            tx.execute(
                "DELETE FROM queues WHERE vhost = ?1 AND name = ?2",
                params![vhost, name],
            )?;
            Ok(id)
        })
    }

    /// Stores a binding; storing it again is a no-op (identity: every field, arguments as
    /// their encoded bytes). Its ends need not be stored (built-in exchanges are not).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when the vhost is not stored or SQLite fails.
    pub fn put_binding(&self, def: &BindingDef) -> Result<(), StorageError> {
        self.write_in_vhost("put_binding", &def.vhost, |tx| insert_binding(tx, def))
    }

    /// Deletes a binding (matched on every field); deleting an absent one succeeds.
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn delete_binding(&self, def: &BindingDef) -> Result<(), StorageError> {
        let args = encode_arguments(&def.arguments);
        self.write("delete_binding", |tx| {
            tx.execute(
                "DELETE FROM bindings WHERE vhost = ?1 AND source = ?2 AND destination = ?3
                 AND destination_is_exchange = ?4 AND routing_key = ?5 AND arguments = ?6",
                params![
                    def.vhost,
                    def.source,
                    def.destination,
                    def.destination_is_exchange,
                    def.routing_key,
                    args
                ],
            )?;
            Ok(())
        })
    }

    /// Every stored queue id, sorted (for finding orphan directories under `queues/`).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails.
    pub fn queue_ids(&self) -> Result<Vec<String>, StorageError> {
        query_all(&self.conn, "SELECT id FROM queues ORDER BY id", |r| {
            r.get(0)
        })
        .map_err(meta_err("queue_ids"))
    }

    /// What `PRAGMA integrity_check` and `PRAGMA foreign_key_check` find, one finding per
    /// line; `["ok"]` when the file is sound (for `--check`).
    ///
    /// # Errors
    /// [`StorageError::Meta`] when SQLite fails to run the checks.
    pub fn integrity_check(&self) -> Result<Vec<String>, StorageError> {
        let err = meta_err("integrity_check");
        let mut lines: Vec<String> =
            query_all(&self.conn, "PRAGMA integrity_check", |r| r.get(0)).map_err(&err)?;
        let orphans: Vec<String> = query_all(&self.conn, "PRAGMA foreign_key_check", |r| {
            Ok(format!(
                "foreign key violation: a row of {} refers to a missing row of {}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(2)?
            ))
        })
        .map_err(&err)?;
        if !orphans.is_empty() {
            lines.retain(|l| l != "ok");
            lines.extend(orphans);
        }
        Ok(lines)
    }

    /// Brings the file to [`SCHEMA_VERSION`], one step per transaction.
    fn migrate(&self) -> Result<(), StorageError> {
        let mut version = self.schema_version()?;
        if version > SCHEMA_VERSION {
            return Err(StorageError::Meta(format!(
                "{} has schema version {version}, this relaymq-server supports up to \
                 {SCHEMA_VERSION}",
                self.path.display()
            )));
        }
        while version < SCHEMA_VERSION {
            let step = MIGRATIONS[version as usize];
            let next = version + 1;
            self.write("migrate", |tx| {
                tx.execute_batch(step)?;
                tx.execute(
                    "INSERT INTO schema_version (id, version) VALUES (1, ?1)
                     ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                    params![next],
                )?;
                Ok(())
            })
            .map_err(|e| StorageError::Meta(format!("migrating to schema version {next}: {e}")))?;
            log::info!("{}: schema migrated to version {next}", self.path.display());
            version = next;
        }
        Ok(())
    }

    /// The file's schema version; 0 for an empty file.
    fn schema_version(&self) -> Result<u32, StorageError> {
        read_schema_version(&self.conn, &self.path)
    }

    /// Runs `f` in one immediate transaction and commits it; any error rolls it back.
    pub(super) fn write<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        let err = meta_err(what);
        let tx =
            Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate).map_err(&err)?;
        let out = f(&tx).map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(out)
    }

    /// [`MetaStore::write`] after checking, in the same transaction, that `vhost` is stored
    /// (a clearer error than the foreign key's).
    pub(super) fn write_in_vhost<T>(
        &self,
        what: &'static str,
        vhost: &str,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        let mut missing = false;
        let out = self.write(what, |tx| {
            let exists: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM vhosts WHERE name = ?1)",
                params![vhost],
                |r| r.get(0),
            )?;
            if !exists {
                missing = true;
                // Abandons the transaction; the error below replaces this one.
                return Err(rusqlite::Error::QueryReturnedNoRows);
            }
            f(tx)
        });
        if missing {
            return Err(StorageError::Meta(format!(
                "{what}: vhost {vhost:?} is not stored"
            )));
        }
        out
    }

    /// Decodes an arguments blob; `row` names the row for the error.
    fn decode_arguments(
        &self,
        blob: &[u8],
        row: impl FnOnce() -> String,
    ) -> Result<FieldTable, StorageError> {
        let mut r = Reader::new(blob);
        match decode_table(&mut r) {
            Ok(t) if r.is_empty() => Ok(t),
            Ok(_) => Err(self.corrupt(format!(
                "{}: arguments have {} trailing bytes",
                row(),
                r.remaining()
            ))),
            Err(e) => Err(self.corrupt(format!("{}: arguments do not decode: {e}", row()))),
        }
    }

    fn corrupt(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }
}

/// A new stable queue id: 32 lowercase hex chars (a random UUID v4, simple form), never
/// derived from the name, so any name stays inside the data directory.
pub fn new_queue_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The store id of durable `x-delayed-message` exchange `exchange` of `vhost`: 32
/// lowercase hex chars (the first 16 bytes of SHA-256 over a fixed prefix, the vhost and
/// the name, NUL-separated), the same at every start, so the exchange's delayed messages
/// are found again without a `meta.db` column. The hash only names a directory; any name
/// stays inside the data directory.
pub fn delayed_store_id(vhost: &str, exchange: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"relaymq delayed exchange\0");
    h.update(vhost.as_bytes());
    h.update(b"\0");
    h.update(exchange.as_bytes());
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `id` has the form of [`new_queue_id`]'s ids (32 lowercase hex chars), so it is
/// safe as a directory name.
pub fn is_valid_queue_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Stores a vhost in `tx`; a stored one stays as it is.
pub(super) fn insert_vhost(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO vhosts (name) VALUES (?1) ON CONFLICT (name) DO NOTHING",
        params![name],
    )?;
    Ok(())
}

/// Stores an exchange in `tx`, replacing a stored one of the same vhost and name.
pub(super) fn upsert_exchange(tx: &Transaction<'_>, def: &ExchangeDef) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO exchanges (vhost, name, kind, auto_delete, internal, arguments)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (vhost, name) DO UPDATE SET kind = excluded.kind,
             auto_delete = excluded.auto_delete, internal = excluded.internal,
             arguments = excluded.arguments",
        params![
            def.vhost,
            def.name,
            def.kind,
            def.auto_delete,
            def.internal,
            encode_arguments(&def.arguments)
        ],
    )?;
    Ok(())
}

/// Stores a queue in `tx`, replacing a stored one of the same vhost and name (its id is
/// checked by the caller), paused flag included.
pub(super) fn upsert_queue(tx: &Transaction<'_>, def: &QueueDef) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO queues (vhost, name, id, auto_delete, arguments, paused)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (vhost, name) DO UPDATE SET id = excluded.id,
             auto_delete = excluded.auto_delete, arguments = excluded.arguments,
             paused = excluded.paused",
        params![
            def.vhost,
            def.name,
            def.id,
            def.auto_delete,
            encode_arguments(&def.arguments),
            def.paused
        ],
    )?;
    Ok(())
}

/// Stores a binding in `tx`; storing it again is a no-op.
pub(super) fn insert_binding(tx: &Transaction<'_>, def: &BindingDef) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO bindings
             (vhost, source, destination, destination_is_exchange, routing_key, arguments)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT DO NOTHING",
        params![
            def.vhost,
            def.source,
            def.destination,
            def.destination_is_exchange,
            def.routing_key,
            encode_arguments(&def.arguments)
        ],
    )?;
    Ok(())
}

/// A field table in the wire form `meta.db` stores (`u32` byte length, then entries):
/// equal tables give equal bytes, so it also serves as a binding's identity.
pub(crate) fn encode_arguments(arguments: &FieldTable) -> Vec<u8> {
    let mut out = Vec::new();
    encode_table(&mut out, arguments);
    out
}

/// Maps a SQLite error to [`StorageError::Meta`], naming the operation.
fn meta_err(what: &'static str) -> impl Fn(rusqlite::Error) -> StorageError {
    move |e| StorageError::Meta(format!("{what}: {e}"))
}

/// Every row of a parameterless query.
fn query_all<T>(
    conn: &Connection,
    sql: &str,
    f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], f)?;
    rows.collect()
}

/// The schema version of the definitions store open on `conn` (at `path`, for messages);
/// 0 for an empty file. Shared by [`MetaStore::open`] and the read-only `--check`.
///
/// # Errors
/// [`StorageError::Meta`] when the file holds tables but no `schema_version` (not a
/// RelayMQ store) or SQLite fails; [`StorageError::Corrupt`] when the version row is
/// missing or not a version.
pub(crate) fn read_schema_version(conn: &Connection, path: &Path) -> Result<u32, StorageError> {
    let err = meta_err("reading the schema version");
    let has_version_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema
                            WHERE type = 'table' AND name = 'schema_version')",
            [],
            |r| r.get(0),
        )
        .map_err(&err)?;
    if !has_version_table {
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )
            .map_err(&err)?;
        if tables > 0 {
            return Err(StorageError::Meta(format!(
                "{} holds tables but no schema_version: not a RelayMQ definitions store",
                path.display()
            )));
        }
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row("SELECT version FROM schema_version WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(&err)?;
    let corrupt = |reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    match version.map(u32::try_from) {
        Some(Ok(v)) => Ok(v),
        Some(Err(_)) => Err(corrupt(format!(
            "schema_version holds {}, not a version",
            version.unwrap_or_default()
        ))),
        None => Err(corrupt("schema_version has no row".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_doc_shows_the_schema_line_for_line() {
        let doc: Vec<&str> = include_str!("meta.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .map(str::trim)
            .collect();
        for line in SCHEMA_V1
            .lines()
            .chain(SCHEMA_V2.lines())
            .chain(SCHEMA_V3.lines())
            .chain(SCHEMA_V4.lines())
            .chain(SCHEMA_V5.lines())
            .chain(SCHEMA_V6.lines())
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            assert!(
                doc.contains(&line),
                "schema line missing from the doc: {line}"
            );
        }
    }

    #[test]
    fn a_schema_5_file_migrates_to_6_keeping_its_queues_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let db = Connection::open(&path).unwrap();
        for step in &MIGRATIONS[..5] {
            db.execute_batch(step).unwrap();
        }
        let id = new_queue_id();
        db.execute_batch(&format!(
            "INSERT INTO schema_version (id, version) VALUES (1, 5);
             INSERT INTO vhosts (name) VALUES ('v');
             INSERT INTO queues (vhost, name, id, auto_delete, arguments)
             VALUES ('v', 'q', '{id}', 0, x'00000000');"
        ))
        .unwrap();
        drop(db);
        let m = MetaStore::open(&path).unwrap();
        let q = &m.load().unwrap().queues[0];
        assert_eq!(
            (q.name.as_str(), q.id.as_str(), q.paused),
            ("q", id.as_str(), false)
        );
        assert!(m.set_queue_paused("v", "q", true).unwrap());
        assert!(!m.set_queue_paused("v", "absent", true).unwrap());
        drop(m);
        let m = MetaStore::open(&path).unwrap();
        assert!(m.load().unwrap().queues[0].paused, "kept across a reopen");
        assert_eq!(m.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn queue_ids_are_valid_and_unique() {
        let a = new_queue_id();
        let b = new_queue_id();
        assert!(is_valid_queue_id(&a) && is_valid_queue_id(&b));
        assert_ne!(a, b);
        assert!(!is_valid_queue_id("../../etc"));
        assert!(!is_valid_queue_id(&a.to_uppercase()));
        assert!(!is_valid_queue_id(&a[..31]));
    }
}
