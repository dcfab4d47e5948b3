//! Policies over a connection (channel-0 `policy.set` / `policy.clear` and `list
//! policies` of the native protocol; the connection's user needs the `policymaker` or
//! `administrator` tag) and operator policies (`operator-policy.set` / `.clear` and
//! `list operator-policies`; administrators, as `rabbit_mgmt_wm_operator_policy`).

use crate::client::connection::{expect_ok, Connection};
use crate::client::error::ClientError;
use crate::client::validate;
use crate::native::{ListKind, Method, PolicySpec};
use crate::types::FieldTable;

/// The record of a policy or operator policy, its short strings checked (`name_what`
/// names the name in the error).
///
/// # Errors
/// [`ClientError::Usage`] for a vhost, name or apply-to over 255 bytes.
fn policy_spec(
    name_what: &str,
    vhost: &str,
    name: &str,
    pattern: &str,
    definition: &str,
    priority: i64,
    apply_to: &str,
) -> Result<Box<PolicySpec>, ClientError> {
    validate::short_str("vhost", vhost)?;
    validate::short_str(name_what, name)?;
    validate::short_str("apply-to", apply_to)?;
    Ok(Box::new(PolicySpec {
        vhost: vhost.into(),
        name: name.into(),
        pattern: pattern.into(),
        apply_to: apply_to.into(),
        priority,
        definition: definition.into(),
    }))
}

impl Connection {
    /// Sets (adds or replaces) a policy in `vhost`, as `rabbitmqctl set_policy`:
    /// `pattern` is a regular expression over names, `definition` a JSON object as text
    /// (`{"max-length": 10}`), `apply_to` is `queues`, `exchanges` or `all`, the highest
    /// `priority` among matching policies wins. It applies at once to existing queues.
    ///
    /// # Errors
    /// The server's refusal: 403 ACCESS_REFUSED without the `policymaker` or
    /// `administrator` tag, 404 for an unknown vhost, 406 naming a bad pattern, apply-to
    /// or definition key; [`ClientError::Usage`] for a vhost, name or apply-to over 255
    /// bytes; the connection's close error or [`ClientError::Timeout`].
    pub fn set_policy(
        &self,
        vhost: &str,
        name: &str,
        pattern: &str,
        definition: &str,
        priority: i64,
        apply_to: &str,
    ) -> Result<(), ClientError> {
        let spec = policy_spec(
            "policy name",
            vhost,
            name,
            pattern,
            definition,
            priority,
            apply_to,
        )?;
        expect_ok(self.call(Method::PolicySet(spec))?, "policy.set")
    }

    /// Clears a policy of `vhost` (`rabbitmqctl clear_policy`).
    ///
    /// # Errors
    /// The server's refusal (403 without the tag, 404 when there is no such policy or
    /// vhost), [`ClientError::Usage`] for a name over 255 bytes, the connection's close
    /// error.
    pub fn clear_policy(&self, vhost: &str, name: &str) -> Result<(), ClientError> {
        validate::short_str("vhost", vhost)?;
        validate::short_str("policy name", name)?;
        let reply = self.call(Method::PolicyClear {
            vhost: vhost.into(),
            name: name.into(),
        })?;
        expect_ok(reply, "policy.clear")
    }

    /// The policies of the connection's vhost, one row each with `rabbitmqctl
    /// list_policies`' fields (`vhost`, `name`, `pattern`, `apply-to`, `definition`,
    /// `priority`), sorted by name.
    ///
    /// # Errors
    /// The server's refusal (403 without the tag), the connection's close error.
    pub fn list_policies(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::Policies)
    }

    /// Sets (adds or replaces) an operator policy in `vhost`, as `rabbitmqctl
    /// set_operator_policy` and `PUT /api/operator-policies/{vhost}/{name}`: the arguments
    /// of [`Connection::set_policy`]; the definition takes only the keys operator policies
    /// take (`max-length`, `message-ttl`, …: docs/operations.md, "Limits, parameters and operator policies"). A
    /// queue's settings merge its policy with its operator policy, the lower value of each
    /// numeric key winning.
    ///
    /// # Errors
    /// The server's refusal: 403 ACCESS_REFUSED without the `administrator` tag, 404 for an
    /// unknown vhost, 406 naming a bad pattern, apply-to or definition key;
    /// [`ClientError::Usage`] for a vhost, name or apply-to over 255 bytes; the
    /// connection's close error or [`ClientError::Timeout`].
    pub fn set_operator_policy(
        &self,
        vhost: &str,
        name: &str,
        pattern: &str,
        definition: &str,
        priority: i64,
        apply_to: &str,
    ) -> Result<(), ClientError> {
        let spec = policy_spec(
            "operator policy name",
            vhost,
            name,
            pattern,
            definition,
            priority,
            apply_to,
        )?;
        expect_ok(
            self.call(Method::OperatorPolicySet(spec))?,
            "operator-policy.set",
        )
    }

    /// Clears an operator policy of `vhost` (`rabbitmqctl clear_operator_policy`).
    ///
    /// # Errors
    /// The server's refusal (403 without the `administrator` tag, 404 when there is no such
    /// operator policy or vhost), [`ClientError::Usage`] for a name over 255 bytes, the
    /// connection's close error.
    pub fn clear_operator_policy(&self, vhost: &str, name: &str) -> Result<(), ClientError> {
        validate::short_str("vhost", vhost)?;
        validate::short_str("operator policy name", name)?;
        let reply = self.call(Method::OperatorPolicyClear {
            vhost: vhost.into(),
            name: name.into(),
        })?;
        expect_ok(reply, "operator-policy.clear")
    }

    /// The operator policies of every vhost, one row each with the fields of
    /// [`Connection::list_policies`], sorted by vhost and name (`rabbitmqctl
    /// list_operator_policies`). A user without `administrator` or `monitoring` sees the
    /// vhosts it has permissions in.
    ///
    /// # Errors
    /// The server's refusal (403 without a management tag), the connection's close error.
    pub fn list_operator_policies(&self) -> Result<Vec<FieldTable>, ClientError> {
        self.list(ListKind::OperatorPolicies)
    }
}
