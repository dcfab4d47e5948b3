//! Channel-0 administration requests of the native protocol: vhosts, users, permissions,
//! policies and the resource alarm settings. Each is for administrators only (RabbitMQ's
//! `administrator` tag) and is refused with 403 ACCESS_REFUSED otherwise; policies are
//! also open to RabbitMQ's `policymaker` tag in the vhosts the user may access.

use crate::auth::permission::PermissionDef;
use crate::auth::users::parse_tags;
use crate::broker::access::Credential;
use crate::broker::policy::{PolicyDef, POLICY_DEFINITION_BYTES_MAX};
use crate::broker::Broker;
use crate::error::{BrokerError, ReplyCode};
use crate::protocol::{Method, PolicySpec};

/// Runs the admin request `method` for `user` and returns the reply.
///
/// # Errors
/// 403 ACCESS_REFUSED for a user without the `administrator` tag; the operation's own
/// errors (404 unknown user or vhost, 406 bad name, tag, password or pattern); 503
/// COMMAND_INVALID for a method that is not a channel-0 request.
pub fn run(broker: &Broker, user: &str, method: Method) -> Result<Method, BrokerError> {
    let name = method.name();
    let is_admin_request = matches!(
        method,
        Method::VhostDeclare { .. }
            | Method::VhostDelete { .. }
            | Method::UserAdd { .. }
            | Method::UserDelete { .. }
            | Method::UserPasswd { .. }
            | Method::UserTags { .. }
            | Method::PermissionSet(_)
            | Method::PermissionClear { .. }
            | Method::MemoryHighWatermarkSet { .. }
            | Method::DiskFreeLimitSet { .. }
            | Method::PolicySet(_)
            | Method::PolicyClear { .. }
    );
    if !is_admin_request {
        return Err(BrokerError::new(
            ReplyCode::CommandInvalid,
            format!("{name} is not allowed on channel 0"),
        ));
    }
    match &method {
        Method::PolicySet(p) => broker.require_policymaker(user, &p.vhost, name)?,
        Method::PolicyClear { vhost, .. } => broker.require_policymaker(user, vhost, name)?,
        _ => broker.require_administrator(user, name)?,
    }
    match method {
        Method::PolicySet(p) => {
            broker.set_policy(policy_def(*p)?)?;
        }
        Method::PolicyClear { vhost, name } => broker.clear_policy(&vhost, &name)?,
        // The creator of a new vhost gets full access to it.
        Method::VhostDeclare { name } if broker.vhost(&name).is_none() => {
            broker.declare_vhost(&name)?;
            broker.grant_creator(user, &name)?;
        }
        Method::VhostDeclare { .. } => {}
        Method::VhostDelete { name } => broker.delete_vhost(&name)?,
        Method::UserAdd {
            name,
            secret,
            hash_algorithm,
            tags,
        } => {
            let credential = if hash_algorithm.is_empty() {
                Credential::Password(secret)
            } else {
                Credential::Hash(hash_algorithm, secret)
            };
            broker.add_user(&name, &credential, parse_tags(&tags)?)?;
        }
        Method::UserDelete { name } => broker.delete_user(&name)?,
        Method::UserPasswd { name, password } => broker.change_password(&name, &password)?,
        Method::UserTags { name, tags } => broker.set_user_tags(&name, parse_tags(&tags)?)?,
        Method::PermissionSet(p) => broker.set_permission(
            &p.user,
            &p.vhost,
            PermissionDef {
                configure: p.configure,
                write: p.write,
                read: p.read,
            },
        )?,
        Method::PermissionClear { user: u, vhost } => broker.clear_permission(&u, &vhost)?,
        // Resource alarm settings (docs/security.md §6), like rabbitmqctl's.
        Method::MemoryHighWatermarkSet { watermark } => broker
            .alarms()
            .set_memory_high_watermark(watermark)
            .map_err(|e| BrokerError::precondition(e.message))?,
        Method::DiskFreeLimitSet { bytes } => broker.alarms().set_disk_free_limit(bytes),
        _ => {}
    }
    Ok(Method::Ok)
}

/// The policy a `policy.set` request describes; its definition must be a JSON object.
///
/// # Errors
/// 406 PRECONDITION_FAILED when the definition is longer than
/// [`POLICY_DEFINITION_BYTES_MAX`] or not a JSON object.
pub fn policy_def(p: PolicySpec) -> Result<PolicyDef, BrokerError> {
    if p.definition.len() > POLICY_DEFINITION_BYTES_MAX {
        return Err(BrokerError::precondition(format!(
            "Validation failed: policy definition is longer than \
             {POLICY_DEFINITION_BYTES_MAX} bytes"
        )));
    }
    let definition = match serde_json::from_str::<serde_json::Value>(&p.definition) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(other) => {
            return Err(BrokerError::precondition(format!(
                "Validation failed: policy definition {other} is not a JSON object"
            )))
        }
        Err(e) => {
            return Err(BrokerError::precondition(format!(
                "Validation failed: policy definition is not JSON: {e}"
            )))
        }
    };
    Ok(PolicyDef {
        vhost: p.vhost,
        name: p.name,
        pattern: p.pattern,
        apply_to: p.apply_to,
        priority: p.priority,
        definition,
    })
}
