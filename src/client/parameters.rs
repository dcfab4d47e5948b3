//! Vhost limits, user limits, runtime parameters and global parameters over a connection
//! (channel-0 `vhost-limit.set`/`.clear`, `user-limit.set`/`.clear`, `parameter.set`/
//! `.clear`, `global-parameter.set`/`.clear` and their `list` kinds of the native
//! protocol, with the shovels' status list; docs/protocol.md §12). Limits need the
//! `administrator` tag; runtime parameters `policymaker` (with permissions in the vhost)
//! or `administrator`; global parameters `policymaker` or `administrator` — the
//! management API's rules.
//!
//! Values travel as JSON text and are checked by the server with the management API's
//! checks, so a refusal has the API's text (`max-queues should be a number, actually was
//! <<"x">>`, `not_json`).

use crate::client::connection::{expect_ok, Connection};
use crate::client::error::ClientError;
use crate::client::validate;
use crate::native::{ListKind, Method};
use crate::types::FieldTable;

/// The global parameter that holds the cluster's name (RabbitMQ's `cluster_name`).
pub const CLUSTER_NAME_PARAMETER: &str = "cluster_name";

impl Connection {
    /// Sets the vhost limit `name` of `vhost` (`max-connections` or `max-queues`) to
    /// `value`, JSON text of an integer (`"256"`; negative: no limit), as `rabbitmqctl
    /// set_vhost_limits` and `PUT /api/vhost-limits/{vhost}/{name}`. Connections and
    /// queues that already exist stay.
    ///
    /// # Errors
    /// The server's refusal: 403 ACCESS_REFUSED without the `administrator` tag, 404 for an
    /// unknown vhost, 406 with RabbitMQ's text for another limit name or a value that is
    /// not an integer; [`ClientError::Usage`] for a vhost or name over 255 bytes; the
    /// connection's close error or [`ClientError::Timeout`].
    pub fn set_vhost_limit(&self, vhost: &str, name: &str, value: &str) -> Result<(), ClientError> {
        validate::short_str("vhost", vhost)?;
        validate::short_str("limit name", name)?;
        let reply = self.call(Method::VhostLimitSet {
            vhost: vhost.into(),
            name: name.into(),
            value: value.into(),
        })?;
        expect_ok(reply, "vhost-limit.set")
    }

    /// Clears the vhost limit `name` of `vhost` (`rabbitmqctl clear_vhost_limits`); not an
    /// error when it was not set.
    ///
    /// # Errors
    /// As [`Connection::set_vhost_limit`]: 403, 404 for an unknown vhost.
    pub fn clear_vhost_limit(&self, vhost: &str, name: &str) -> Result<(), ClientError> {
        validate::short_str("vhost", vhost)?;
        validate::short_str("limit name", name)?;
        let reply = self.call(Method::VhostLimitClear {
            vhost: vhost.into(),
            name: name.into(),
        })?;
        expect_ok(reply, "vhost-limit.clear")
    }

    /// The limits of every vhost that has some, one row each: `vhost`, `value` (a table of
    /// limit name → integer), as `GET /api/vhost-limits`. A user without `administrator`
    /// or `monitoring` sees the vhosts it has permissions in.
    ///
    /// # Errors
    /// The server's refusal (403 without a management tag), the connection's close error.
    pub fn list_vhost_limits(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::VhostLimits)
    }

    /// Sets the user limit `name` of `user` (`max-connections` or `max-channels`) to
    /// `value`, JSON text of an integer (negative: no limit), as `rabbitmqctl
    /// set_user_limits` and `PUT /api/user-limits/{user}/{name}`.
    ///
    /// # Errors
    /// The server's refusal: 403 without the `administrator` tag, 404 for an unknown user,
    /// 406 with RabbitMQ's text for another limit name or a value that is not an integer;
    /// [`ClientError::Usage`] for a user or name over 255 bytes; the connection's close
    /// error or [`ClientError::Timeout`].
    pub fn set_user_limit(&self, user: &str, name: &str, value: &str) -> Result<(), ClientError> {
        validate::short_str("user name", user)?;
        validate::short_str("limit name", name)?;
        let reply = self.call(Method::UserLimitSet {
            user: user.into(),
            name: name.into(),
            value: value.into(),
        })?;
        expect_ok(reply, "user-limit.set")
    }

    /// Clears the user limit `name` of `user` (`all`: every one), as `rabbitmqctl
    /// clear_user_limits`; not an error when it was not set.
    ///
    /// # Errors
    /// As [`Connection::set_user_limit`]: 403, 404 for an unknown user.
    pub fn clear_user_limit(&self, user: &str, name: &str) -> Result<(), ClientError> {
        validate::short_str("user name", user)?;
        validate::short_str("limit name", name)?;
        let reply = self.call(Method::UserLimitClear {
            user: user.into(),
            name: name.into(),
        })?;
        expect_ok(reply, "user-limit.clear")
    }

    /// The limits of every user that has some, one row each: `user`, `value` (a table of
    /// limit name → integer), as `GET /api/user-limits`.
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag), the connection's close
    /// error.
    pub fn list_user_limits(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::UserLimits)
    }

    /// Sets the runtime parameter `name` of `component` in `vhost` to `value`, any JSON
    /// value as text, as `rabbitmqctl set_parameter` and `PUT
    /// /api/parameters/{component}/{vhost}/{name}` (docs/operations.md, "Limits,
    /// parameters and operator policies": `vhost-limits`, `operator_policy` and `shovel`
    /// (a dynamic shovel, "Shovels") are acted on, federation components stored only).
    ///
    /// # Errors
    /// The server's refusal: 403 without `policymaker` (with permissions in the vhost) or
    /// `administrator`, 404 for an unknown vhost, 406 with RabbitMQ's text for a value that
    /// is not JSON (`not_json`), an unknown component or a bad value;
    /// [`ClientError::Usage`] for a component, vhost or name over 255 bytes; the
    /// connection's close error or [`ClientError::Timeout`].
    pub fn set_parameter(
        &self,
        component: &str,
        vhost: &str,
        name: &str,
        value: &str,
    ) -> Result<(), ClientError> {
        validate::short_str("component", component)?;
        validate::short_str("vhost", vhost)?;
        validate::short_str("parameter name", name)?;
        let reply = self.call(Method::ParameterSet {
            component: component.into(),
            vhost: vhost.into(),
            name: name.into(),
            value: value.into(),
        })?;
        expect_ok(reply, "parameter.set")
    }

    /// Clears a runtime parameter (`rabbitmqctl clear_parameter`).
    ///
    /// # Errors
    /// As [`Connection::set_parameter`]; 404 "Parameter does not exist" when there is none.
    pub fn clear_parameter(
        &self,
        component: &str,
        vhost: &str,
        name: &str,
    ) -> Result<(), ClientError> {
        validate::short_str("component", component)?;
        validate::short_str("vhost", vhost)?;
        validate::short_str("parameter name", name)?;
        let reply = self.call(Method::ParameterClear {
            component: component.into(),
            vhost: vhost.into(),
            name: name.into(),
        })?;
        expect_ok(reply, "parameter.clear")
    }

    /// The runtime parameters of every vhost, one row each: `vhost`, `component`, `name`,
    /// `value` (the JSON value as a field value), as `GET /api/parameters`. A
    /// `policymaker` without `administrator` sees the vhosts it has permissions in.
    ///
    /// # Errors
    /// The server's refusal (403 without `policymaker` or `administrator`), the
    /// connection's close error.
    pub fn list_parameters(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::Parameters)
    }

    /// Every dynamic shovel's status, sorted by vhost and name, one row each with the
    /// fields of its `GET /api/shovels` element: `name`, `vhost`, `type`, `state`
    /// (`starting`, `running`, `blocked`, `terminated`), `timestamp`; `reason` when
    /// terminated; while running `src_uri`, `dest_uri` (credentials left out), `src_queue`
    /// or `src_exchange`…, `forwarded`, `pending`, `remaining` (docs/protocol.md §12, kind
    /// 15). A user without `administrator` or `monitoring` sees the vhosts it has
    /// permissions in. Shovels are set and cleared as runtime parameters of component
    /// `shovel` ([`Connection::set_parameter`]).
    ///
    /// # Errors
    /// The server's refusal (403 without a management tag), the connection's close error.
    pub fn list_shovels(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::Shovels)
    }

    /// Sets the global parameter `name` to `value`, any JSON value as text, as
    /// `rabbitmqctl set_global_parameter` and `PUT /api/global-parameters/{name}`.
    ///
    /// # Errors
    /// The server's refusal: 403 without `policymaker` or `administrator`, 406 for a value
    /// that is not JSON (`not_json`) or a `cluster_name` that is not a non-empty string;
    /// [`ClientError::Usage`] for a name over 255 bytes; the connection's close error or
    /// [`ClientError::Timeout`].
    pub fn set_global_parameter(&self, name: &str, value: &str) -> Result<(), ClientError> {
        validate::short_str("parameter name", name)?;
        let reply = self.call(Method::GlobalParameterSet {
            name: name.into(),
            value: value.into(),
        })?;
        expect_ok(reply, "global-parameter.set")
    }

    /// Clears the global parameter `name` (`rabbitmqctl clear_global_parameter`).
    ///
    /// # Errors
    /// As [`Connection::set_global_parameter`]; 404 "Parameter does not exist" when it is
    /// not set.
    pub fn clear_global_parameter(&self, name: &str) -> Result<(), ClientError> {
        validate::short_str("parameter name", name)?;
        let reply = self.call(Method::GlobalParameterClear { name: name.into() })?;
        expect_ok(reply, "global-parameter.clear")
    }

    /// The global parameters, one row each: `name`, `value` (the JSON value as a field
    /// value), as `GET /api/global-parameters`.
    ///
    /// # Errors
    /// The server's refusal (403 without `policymaker` or `administrator`), the
    /// connection's close error.
    pub fn list_global_parameters(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::GlobalParameters)
    }

    /// Sets the cluster's name (`rabbitmqctl set_cluster_name`, `PUT /api/cluster-name`):
    /// the global parameter [`CLUSTER_NAME_PARAMETER`] as a JSON string.
    ///
    /// # Errors
    /// As [`Connection::set_global_parameter`]; 406 for an empty name.
    pub fn set_cluster_name(&self, name: &str) -> Result<(), ClientError> {
        let value = serde_json::Value::String(name.to_string()).to_string();
        self.set_global_parameter(CLUSTER_NAME_PARAMETER, &value)
    }
}
