//! Channel-0 administration requests of the native protocol: vhosts, users, permissions,
//! policies, vhost and user limits, runtime and global parameters, operator policies, the
//! resource alarm settings, closing a connection and definitions export/import. Each is
//! for administrators only (RabbitMQ's `administrator` tag) and is refused with 403
//! ACCESS_REFUSED otherwise; policies and runtime parameters are also open to RabbitMQ's
//! `policymaker` tag in the vhosts the user may access, global parameters to any
//! `policymaker` — the management API's rules (`is_authorized_policies`,
//! `is_authorized_global_parameters`), so that `relaymq-cli` can do what the API can. The
//! changes go through the same broker calls as the API's, so validation, storage in
//! `meta.db` and error texts are shared.

use crate::auth::permission::PermissionDef;
use crate::auth::users::{parse_tags, TAG_ADMINISTRATOR, TAG_POLICYMAKER};
use crate::broker::access::Credential;
use crate::broker::definitions::{self, DEFINITIONS_JSON_BYTES_MAX};
use crate::broker::policy::{PolicyDef, POLICY_DEFINITION_BYTES_MAX};
use crate::broker::Broker;
use crate::error::{BrokerError, ReplyCode};
use crate::native::{Method, PolicySpec};

/// Reason given to a connection closed without one (`close connection ID` without
/// `--reason`), after `CONNECTION_FORCED - `; RabbitMQ's management plugin says "Closed
/// via management plugin".
pub const CLOSE_REASON_DEFAULT: &str = "Closed by an administrator";

/// Closes connection `id` (native or AMQP) with 320 CONNECTION_FORCED and `reason`, as
/// `rabbitmqctl close_connection` does; logged with the administrator's name.
///
/// # Errors
/// 404 NOT_FOUND for an id no open connection has.
pub fn close_connection(
    broker: &Broker,
    by: &str,
    id: u64,
    reason: &str,
) -> Result<(), BrokerError> {
    let Some(c) = broker.connections().into_iter().find(|c| c.id == id) else {
        return Err(BrokerError::not_found(format!("no connection {id}")));
    };
    let reason = if reason.is_empty() {
        CLOSE_REASON_DEFAULT
    } else {
        reason
    };
    log::info!(
        "connection {id} ({}, user '{}') closed by administrator '{by}': {reason}",
        c.peer,
        c.user
    );
    c.sink.force_close(ReplyCode::ConnectionForced, reason);
    Ok(())
}

/// `text` for a log line: control characters escaped (`\n` → `\\n`) so that a name
/// cannot forge a line; everything else, regular-expression backslashes included, as
/// written.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Pretty JSON text within [`DEFINITIONS_JSON_BYTES_MAX`].
fn definitions_text(v: &serde_json::Value) -> Result<String, BrokerError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| BrokerError::new(ReplyCode::InternalError, format!("JSON: {e}")))?;
    if text.len() > DEFINITIONS_JSON_BYTES_MAX {
        return Err(BrokerError::precondition(format!(
            "definitions of {} bytes exceed the limit of {DEFINITIONS_JSON_BYTES_MAX} bytes",
            text.len()
        )));
    }
    Ok(text)
}

/// Runs the admin request `method` for `user` and returns the reply. Each change is
/// logged at info naming the administrator (`... by 'guest'`); the broker
/// operations themselves do not log them.
///
/// # Errors
/// 403 ACCESS_REFUSED for a user without the tag the request needs (`administrator`;
/// `policymaker` for policies and parameters, with permissions in the vhost for those of a
/// vhost); the operation's own errors (404 unknown user, vhost, policy or parameter, 406
/// bad name, tag, password, pattern, limit or value with the management API's text); 503
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
            | Method::ConnectionCloseAdmin { .. }
            | Method::DefinitionsExport
            | Method::DefinitionsImport { .. }
            | Method::VhostLimitSet { .. }
            | Method::VhostLimitClear { .. }
            | Method::UserLimitSet { .. }
            | Method::UserLimitClear { .. }
            | Method::ParameterSet { .. }
            | Method::ParameterClear { .. }
            | Method::GlobalParameterSet { .. }
            | Method::GlobalParameterClear { .. }
            | Method::OperatorPolicySet(_)
            | Method::OperatorPolicyClear { .. }
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
        Method::ParameterSet { vhost, .. } | Method::ParameterClear { vhost, .. } => {
            broker.require_policymaker(user, vhost, name)?
        }
        Method::GlobalParameterSet { .. } | Method::GlobalParameterClear { .. } => {
            broker.require_tag(user, &[TAG_POLICYMAKER, TAG_ADMINISTRATOR], name)?
        }
        _ => broker.require_administrator(user, name)?,
    }
    let by = printable(user);
    match method {
        Method::PolicySet(p) => {
            let def = policy_def(*p)?;
            let (policy, vhost) = (def.name.clone(), def.vhost.clone());
            broker.set_policy(def)?;
            log::info!(
                "policy '{}' in vhost '{}' set by '{by}'",
                printable(&policy),
                printable(&vhost)
            );
        }
        Method::PolicyClear { vhost, name } => {
            broker.clear_policy(&vhost, &name)?;
            log::info!(
                "policy '{}' in vhost '{}' cleared by '{by}'",
                printable(&name),
                printable(&vhost)
            );
        }
        Method::VhostLimitSet { vhost, name, value } => {
            broker.vhost_limits(&vhost)?;
            let v = json_value(&value)?;
            broker.set_vhost_limit(&vhost, &name, Some(&v))?;
            log::info!(
                "limit '{}' of vhost '{}' set to {} by '{by}'",
                printable(&name),
                printable(&vhost),
                printable(&v.to_string())
            );
        }
        Method::VhostLimitClear { vhost, name } => {
            broker.set_vhost_limit(&vhost, &name, None)?;
            log::info!(
                "limit '{}' of vhost '{}' cleared by '{by}'",
                printable(&name),
                printable(&vhost)
            );
        }
        Method::UserLimitSet {
            user: u,
            name,
            value,
        } => {
            broker.user_limits(&u)?;
            let v = json_value(&value)?;
            broker.set_user_limit(&u, &name, Some(&v))?;
            log::info!(
                "limit '{}' of user '{}' set to {} by '{by}'",
                printable(&name),
                printable(&u),
                printable(&v.to_string())
            );
        }
        Method::UserLimitClear { user: u, name } => {
            broker.set_user_limit(&u, &name, None)?;
            log::info!(
                "limit '{}' of user '{}' cleared by '{by}'",
                printable(&name),
                printable(&u)
            );
        }
        Method::ParameterSet {
            component,
            vhost,
            name,
            value,
        } => {
            if broker.vhost(&vhost).is_none() {
                return Err(BrokerError::not_found(format!("no vhost '{vhost}'")));
            }
            broker.set_parameter_as(user, &vhost, &component, &name, json_value(&value)?)?;
            log::info!(
                "runtime parameter '{}' of component '{}' in vhost '{}' set by '{by}'",
                printable(&name),
                printable(&component),
                printable(&vhost)
            );
        }
        Method::ParameterClear {
            component,
            vhost,
            name,
        } => {
            broker.clear_parameter(&vhost, &component, &name)?;
            log::info!(
                "runtime parameter '{}' of component '{}' in vhost '{}' cleared by '{by}'",
                printable(&name),
                printable(&component),
                printable(&vhost)
            );
        }
        Method::GlobalParameterSet { name, value } => {
            broker.set_global_parameter(&name, json_value(&value)?)?;
            log::info!("global parameter '{}' set by '{by}'", printable(&name));
        }
        Method::GlobalParameterClear { name } => {
            broker.clear_global_parameter(&name)?;
            log::info!("global parameter '{}' cleared by '{by}'", printable(&name));
        }
        Method::OperatorPolicySet(p) => {
            let def = policy_def(*p)?;
            let (policy, vhost) = (def.name.clone(), def.vhost.clone());
            broker.set_operator_policy(def)?;
            log::info!(
                "operator policy '{}' in vhost '{}' set by '{by}'",
                printable(&policy),
                printable(&vhost)
            );
        }
        Method::OperatorPolicyClear { vhost, name } => {
            broker.clear_operator_policy(&vhost, &name)?;
            log::info!(
                "operator policy '{}' in vhost '{}' cleared by '{by}'",
                printable(&name),
                printable(&vhost)
            );
        }
        // The creator of a new vhost gets full access to it.
        Method::VhostDeclare { name } if broker.vhost(&name).is_none() => {
            broker.declare_vhost(&name)?;
            log::info!("vhost '{}' created by '{by}'", printable(&name));
            if broker.grant_creator(user, &name)? {
                log::info!(
                    "permissions of user '{by}' in vhost '{}' set by '{by}' (full access, as its creator)",
                    printable(&name)
                );
            }
        }
        Method::VhostDeclare { .. } => {}
        Method::VhostDelete { name } => {
            let gone = broker.delete_vhost(&name)?;
            log::info!(
                "vhost '{}' deleted by '{by}': {} queues with {} messages deleted, {} connections closed",
                printable(&name),
                gone.queues,
                gone.messages,
                gone.connections
            );
        }
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
            let tags = parse_tags(&tags)?;
            let shown = tags.join(", ");
            broker.add_user(&name, &credential, tags)?;
            log::info!(
                "user '{}' created by '{by}' (tags [{}])",
                printable(&name),
                printable(&shown)
            );
        }
        Method::UserDelete { name } => {
            broker.delete_user(&name)?;
            log::info!(
                "user '{}' deleted by '{by}'; its connections are closed",
                printable(&name)
            );
        }
        Method::UserPasswd { name, password } => {
            broker.change_password(&name, &password)?;
            log::info!("password of user '{}' changed by '{by}'", printable(&name));
        }
        Method::UserTags { name, tags } => {
            let tags = parse_tags(&tags)?;
            let shown = tags.join(", ");
            broker.set_user_tags(&name, tags)?;
            log::info!(
                "tags of user '{}' set to [{}] by '{by}'",
                printable(&name),
                printable(&shown)
            );
        }
        Method::PermissionSet(p) => {
            let def = PermissionDef {
                configure: p.configure,
                write: p.write,
                read: p.read,
            };
            let shown = format!(
                "configure '{}', write '{}', read '{}'",
                printable(&def.configure),
                printable(&def.write),
                printable(&def.read)
            );
            broker.set_permission(&p.user, &p.vhost, def)?;
            log::info!(
                "permissions of user '{}' in vhost '{}' set by '{by}' ({shown})",
                printable(&p.user),
                printable(&p.vhost)
            );
        }
        Method::PermissionClear { user: u, vhost } => {
            broker.clear_permission(&u, &vhost)?;
            log::info!(
                "permissions of user '{}' in vhost '{}' cleared by '{by}'",
                printable(&u),
                printable(&vhost)
            );
        }
        // Resource alarm settings (docs/security.md §6), like rabbitmqctl's.
        Method::MemoryHighWatermarkSet { watermark } => {
            broker
                .alarms()
                .set_memory_high_watermark(watermark)
                .map_err(|e| BrokerError::precondition(e.message))?;
            log::info!("memory high watermark set to {watermark} by '{by}'");
        }
        Method::DiskFreeLimitSet { bytes } => {
            broker.alarms().set_disk_free_limit(bytes);
            log::info!(
                "disk free limit set to {} by '{by}'",
                crate::types::size::format_size(bytes)
            );
        }
        Method::ConnectionCloseAdmin {
            connection_id,
            reason,
        } => close_connection(broker, user, connection_id, &reason)?,
        Method::DefinitionsExport => {
            let json = definitions_text(&definitions::export(broker))?;
            log::info!("definitions exported by '{user}' ({} bytes)", json.len());
            return Ok(Method::DefinitionsExportOk { json });
        }
        Method::DefinitionsImport { json } => {
            log::info!("definitions import by '{user}' ({} bytes)", json.len());
            let summary = definitions::import(broker, &json, user)?;
            return Ok(Method::DefinitionsExportOk {
                json: definitions_text(&summary.to_json())?,
            });
        }
        _ => {}
    }
    Ok(Method::Ok)
}

/// The JSON value a `vhost-limit.set`, `user-limit.set`, `parameter.set` or
/// `global-parameter.set` request carries as text: any JSON value, as the `value` of the
/// management API's `PUT` bodies.
///
/// # Errors
/// 406 PRECONDITION_FAILED `not_json`, the management API's refusal of a body that is not
/// JSON (`rabbit_mgmt_util:decode/1`).
pub fn json_value(text: &str) -> Result<serde_json::Value, BrokerError> {
    serde_json::from_str(text).map_err(|_| BrokerError::precondition("not_json"))
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
