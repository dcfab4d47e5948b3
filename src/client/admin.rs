//! Administration of users and permissions over a connection (channel-0 requests of the
//! native protocol; the connection's user needs the `administrator` tag).

use crate::client::connection::{expect_ok, unexpected, Connection};
use crate::client::error::ClientError;
use crate::client::validate;
use crate::native::method::PermissionSpec;
use crate::native::Method;

impl Connection {
    /// Creates a user with a password (hashed by the server with argon2id) and tags
    /// (`administrator`, `management`, …).
    ///
    /// # Errors
    /// The server's refusal: 403 ACCESS_REFUSED without the `administrator` tag, 406 for
    /// an existing user or a bad name or tag; [`ClientError::Usage`] for a name over 255
    /// bytes; the connection's close error or [`ClientError::Timeout`].
    pub fn add_user(&self, name: &str, password: &str, tags: &[&str]) -> Result<(), ClientError> {
        self.add_user_with(name, password, "", tags)
    }

    /// Creates a user from a password hash of `algorithm` as RabbitMQ exports it
    /// (`rabbit_password_hashing_sha256`: base64 of a 4-byte salt and the SHA-256 of salt
    /// and password). The hash is replaced by an argon2id one at the user's next login.
    ///
    /// # Errors
    /// As [`Connection::add_user`]; 406 for an unknown algorithm or a malformed hash.
    pub fn add_user_with_hash(
        &self,
        name: &str,
        algorithm: &str,
        hash: &str,
        tags: &[&str],
    ) -> Result<(), ClientError> {
        if algorithm.is_empty() {
            return Err(ClientError::Usage(
                "hashing algorithm must not be empty".into(),
            ));
        }
        self.add_user_with(name, hash, algorithm, tags)
    }

    fn add_user_with(
        &self,
        name: &str,
        secret: &str,
        algorithm: &str,
        tags: &[&str],
    ) -> Result<(), ClientError> {
        validate::short_str("user name", name)?;
        validate::short_str("hashing algorithm", algorithm)?;
        let tags = tags.join(",");
        validate::short_str("tags", &tags)?;
        let reply = self.call(Method::UserAdd {
            name: name.into(),
            secret: secret.into(),
            hash_algorithm: algorithm.into(),
            tags,
        })?;
        expect_ok(reply, "user.add")
    }

    /// Deletes a user with its permissions; the server closes its connections.
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag, 404 unknown user),
    /// [`ClientError::Usage`] for a name over 255 bytes, the connection's close error.
    pub fn delete_user(&self, name: &str) -> Result<(), ClientError> {
        validate::short_str("user name", name)?;
        let reply = self.call(Method::UserDelete { name: name.into() })?;
        expect_ok(reply, "user.delete")
    }

    /// Changes a user's password.
    ///
    /// # Errors
    /// As [`Connection::delete_user`].
    pub fn change_password(&self, name: &str, password: &str) -> Result<(), ClientError> {
        validate::short_str("user name", name)?;
        let reply = self.call(Method::UserPasswd {
            name: name.into(),
            password: password.into(),
        })?;
        expect_ok(reply, "user.passwd")
    }

    /// Replaces a user's tags.
    ///
    /// # Errors
    /// As [`Connection::delete_user`]; 406 for a bad tag.
    pub fn set_user_tags(&self, name: &str, tags: &[&str]) -> Result<(), ClientError> {
        validate::short_str("user name", name)?;
        let tags = tags.join(",");
        validate::short_str("tags", &tags)?;
        let reply = self.call(Method::UserTags {
            name: name.into(),
            tags,
        })?;
        expect_ok(reply, "user.tags")
    }

    /// Sets `user`'s configure, write and read patterns in `vhost` (RabbitMQ's
    /// `set_permissions`). Open connections of the user apply them at their next
    /// operation.
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag, 404 unknown user or
    /// vhost, 406 a pattern that does not compile), [`ClientError::Usage`] for a name over
    /// 255 bytes, the connection's close error.
    pub fn set_permissions(
        &self,
        user: &str,
        vhost: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) -> Result<(), ClientError> {
        validate::short_str("user name", user)?;
        validate::short_str("vhost", vhost)?;
        let reply = self.call(Method::PermissionSet(Box::new(PermissionSpec {
            user: user.into(),
            vhost: vhost.into(),
            configure: configure.into(),
            write: write.into(),
            read: read.into(),
        })))?;
        expect_ok(reply, "permission.set")
    }

    /// Clears `user`'s permissions in `vhost`.
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag, 404 when there are
    /// none), [`ClientError::Usage`] for a name over 255 bytes, the connection's close
    /// error.
    pub fn clear_permissions(&self, user: &str, vhost: &str) -> Result<(), ClientError> {
        validate::short_str("user name", user)?;
        validate::short_str("vhost", vhost)?;
        let reply = self.call(Method::PermissionClear {
            user: user.into(),
            vhost: vhost.into(),
        })?;
        expect_ok(reply, "permission.clear")
    }

    /// Closes connection `id` (native or AMQP, as `list connections` shows it) with 320
    /// CONNECTION_FORCED and `reason` (RabbitMQ's `rabbitmqctl close_connection`); an
    /// empty reason gives the server's default.
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag, 404 for an unknown id),
    /// [`ClientError::Usage`] for a reason over 255 bytes, the connection's close error.
    pub fn close_connection(&self, id: u64, reason: &str) -> Result<(), ClientError> {
        validate::short_str("reason", reason)?;
        let reply = self.call(Method::ConnectionCloseAdmin {
            connection_id: id,
            reason: reason.into(),
        })?;
        expect_ok(reply, "connection.close-admin")
    }

    /// The server's definitions in RabbitMQ's JSON format (`rabbitmqctl
    /// export_definitions`): vhosts, users with their hashes, permissions, durable
    /// exchanges and queues, bindings.
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag), the connection's close
    /// error.
    pub fn export_definitions(&self) -> Result<String, ClientError> {
        match self.call(Method::DefinitionsExport)? {
            Method::DefinitionsExportOk { json } => Ok(json),
            other => Err(unexpected(&other, "definitions.export")),
        }
    }

    /// Imports definitions in RabbitMQ's JSON format and returns the server's summary as
    /// JSON: `{"created": {...}, "unchanged": {...}, "not_honoured": ["..."]}`.
    ///
    /// # Errors
    /// [`ClientError::Usage`] for text over
    /// [`crate::limits::DEFINITIONS_JSON_BYTES_MAX`] bytes; the server's
    /// refusal, after which nothing of the document is applied (403 without the
    /// `administrator` tag; 406 naming the element that is not valid, not equivalent to
    /// what exists or past a limit; 404 naming one whose vhost or user exists nowhere), the
    /// connection's close error (541 when a queue's store cannot be made or `meta.db`
    /// refuses the commit).
    pub fn import_definitions(&self, json: &str) -> Result<String, ClientError> {
        let max = crate::limits::DEFINITIONS_JSON_BYTES_MAX;
        if json.len() > max {
            return Err(ClientError::Usage(format!(
                "definitions of {} bytes exceed the limit of {max} bytes",
                json.len()
            )));
        }
        match self.call(Method::DefinitionsImport { json: json.into() })? {
            Method::DefinitionsExportOk { json } => Ok(json),
            other => Err(unexpected(&other, "definitions.import")),
        }
    }
}
