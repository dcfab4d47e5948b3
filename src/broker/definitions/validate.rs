//! Validation of a definitions document, section by section, before anything is applied:
//! a value that is not valid is a 406 naming the element; what RelayMQ cannot honour is
//! recorded in the summary and left out (docs/operations.md, "Definitions"), queues and
//! exchanges named `amq.*` among them, as RabbitMQ's `rabbit_definitions` skips them.
//! Nothing here looks at the broker: checks against what exists are `changes`.

use super::model::{self, Document, Element};
use super::plan::{
    BindingItem, ExchangeItem, ObjectKind, ParameterItem, PermissionItem, Plan, PolicyItem,
    QueueItem, Skipped, UserDef, VhostDef, VhostLimitsItem,
};
use super::summary::ImportSummary;
use crate::auth::password::StoredHash;
use crate::auth::permission::{PermissionDef, Permissions};
use crate::auth::users::{check_user_name, parse_tags};
use crate::broker::exchange::{Destination, ExchangeKind};
use crate::broker::limits::{
    self, LimitMap, VhostMetadata, USER_LIMITS, USER_LIMITS_TERM, VHOST_LIMITS,
    VHOST_LIMITS_COMPONENT, VHOST_LIMITS_TERM,
};
use crate::broker::names;
use crate::broker::parameters::{
    check_acted_on, check_operator_policy, operator_policy_from_value, ACTED_ON_COMPONENTS,
    CLUSTER_NAME, OPERATOR_POLICY_COMPONENT, PARAMETER_VALUE_BYTES_MAX, STORED_COMPONENTS,
};
use crate::broker::policy::{Policy, PolicyDef};
use crate::broker::queue::queue_type::DeclaredProperties;
use crate::broker::vhost::check_queue_arguments;
use crate::broker::{ExchangeSpec, QueueSpec};
use crate::error::BrokerError;
use crate::types::FieldValue;
use serde_json::Value;
use std::sync::Arc;

/// The prefix of RabbitMQ's internal global parameters (`internal_cluster_id`), which
/// are not imported and not reported (`rabbit_definitions:is_internal_parameter/1`).
const INTERNAL_GLOBAL_PARAMETER_PREFIX: &str = "internal";

/// Why a queue named `amq.*` is not imported (the server names such queues: a client's
/// `amq.gen-…` queue; RabbitMQ skips them with a warning too).
const RESERVED_QUEUE: &str = "is server-named ('amq.' names are reserved for the server)";

/// Why an exchange named `amq.*` (or the default one) is not imported.
const BUILT_IN_EXCHANGE: &str = "is built in (the default and amq.* exchanges)";

/// Why a stream is not imported.
const STREAM: &str = "is a stream (RelayMQ has no streams)";

/// Reads and checks every section; what cannot be honoured goes to `summary`.
pub(super) fn validate<'a>(
    doc: &'a Document,
    summary: &mut ImportSummary,
) -> Result<Plan<'a>, BrokerError> {
    let vhosts = vhosts(doc)?;
    let users = users(doc)?;
    let permissions = permissions(doc)?;
    let vhost_limits = vhost_limits(doc)?;
    unsupported_sections(doc, summary)?;
    let policies = policies(doc, summary)?;
    let (operator_policies, parameters) = parameters(doc, summary)?;
    let global_parameters = global_parameters(doc, summary)?;
    let mut skipped = Skipped::default();
    let exchanges = exchanges(doc, &mut skipped, summary)?;
    let queues = queues(doc, &mut skipped, summary)?;
    let bindings = bindings(doc)?;
    Ok(Plan {
        vhosts,
        users,
        permissions,
        vhost_limits,
        policies,
        operator_policies,
        parameters,
        global_parameters,
        exchanges,
        queues,
        bindings,
        skipped,
    })
}

fn vhosts(doc: &Document) -> Result<Vec<VhostDef>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "vhosts")? {
        let name = e.str("name")?;
        if name.is_empty() {
            return Err(e.error("'name' must not be empty"));
        }
        let limits = match e.fields.get("limits") {
            Some(Value::Object(m)) if !m.is_empty() => Some(
                limits::validate(VHOST_LIMITS_TERM, &VHOST_LIMITS, m)
                    .map_err(|err| e.invalid(err))?,
            ),
            _ if e.is_empty_field("limits") => None,
            Some(_) => return Err(e.error("'limits' must be an object")),
            None => None,
        };
        out.push(VhostDef {
            name: name.to_string(),
            metadata: vhost_metadata(&e)?,
            limits,
        });
    }
    Ok(out)
}

fn users(doc: &Document) -> Result<Vec<UserDef>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "users")? {
        let name = e.str("name")?;
        check_user_name(name).map_err(|err| e.invalid(err))?;
        let hash = e.str("password_hash")?;
        let algorithm = e.str_or("hashing_algorithm", "rabbit_password_hashing_sha256")?;
        let hash = StoredHash::import(algorithm, hash).map_err(|err| e.invalid(err))?;
        // RabbitMQ 3.10 writes a list; older releases a comma-separated string.
        let text = match e.fields.get("tags") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(items)) => {
                let mut tags = Vec::new();
                for t in items {
                    match t.as_str() {
                        Some(t) => tags.push(t),
                        None => return Err(e.error("'tags' must be strings")),
                    }
                }
                tags.join(",")
            }
            Some(_) => return Err(e.error("'tags' must be a list or a string")),
        };
        let tags = parse_tags(&text).map_err(|err| e.invalid(err))?;
        let limits = match e.fields.get("limits") {
            Some(Value::Object(m)) => {
                limits::validate(USER_LIMITS_TERM, &USER_LIMITS, m).map_err(|err| e.invalid(err))?
            }
            _ if e.is_empty_field("limits") => LimitMap::new(),
            Some(_) => return Err(e.error("'limits' must be an object")),
            None => LimitMap::new(),
        };
        out.push(UserDef {
            name: name.to_string(),
            hash,
            tags,
            limits,
        });
    }
    Ok(out)
}

fn permissions(doc: &Document) -> Result<Vec<PermissionItem<'_>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "permissions")? {
        let def = PermissionDef {
            configure: e.str("configure")?.to_string(),
            write: e.str("write")?.to_string(),
            read: e.str("read")?.to_string(),
        };
        Permissions::compile(&def).map_err(|err| e.invalid(err))?;
        out.push(PermissionItem {
            at: e,
            user: e.str("user")?.to_string(),
            vhost: e.str("vhost")?.to_string(),
            def,
        });
    }
    Ok(out)
}

/// The metadata of a `vhosts` element: RabbitMQ 4.x's `metadata` object, or 3.x's
/// `description` and `tags` fields (`rabbit_definitions:add_vhost/2`); `None` when it has
/// neither.
fn vhost_metadata(e: &Element<'_>) -> Result<Option<VhostMetadata>, BrokerError> {
    let meta = match e.fields.get("metadata") {
        Some(Value::Object(m)) => Some(m),
        None | Some(Value::Null) => None,
        Some(_) => return Err(e.error("'metadata' must be an object")),
    };
    let field = |key: &str| {
        e.fields
            .get(key)
            .filter(|v| !v.is_null())
            .or_else(|| meta.and_then(|m| m.get(key)).filter(|v| !v.is_null()))
    };
    if meta.is_none() && field("description").is_none() && field("tags").is_none() {
        return Ok(None);
    }
    let description = match field("description") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(e.error("'description' must be a string")),
    };
    let tags = match field("tags") {
        None => Vec::new(),
        Some(Value::String(s)) => crate::broker::limits::split_vhost_tags(s),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        Some(_) => return Err(e.error("'tags' must be a list or a string")),
    };
    let default_queue_type = match field("default_queue_type") {
        None => crate::broker::limits::DEFAULT_QUEUE_TYPE.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(e.error("'default_queue_type' must be a string")),
    };
    limits::check_queue_type(&default_queue_type).map_err(|err| e.invalid(err))?;
    Ok(Some(VhostMetadata {
        description,
        tags,
        default_queue_type,
    }))
}

/// `parameters` elements of component `vhost-limits` (name `limits`): a vhost's limits, as
/// RabbitMQ exports them.
fn vhost_limits(doc: &Document) -> Result<Vec<VhostLimitsItem<'_>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "parameters")? {
        if e.str_or("component", "")? != VHOST_LIMITS_COMPONENT {
            continue;
        }
        let limits = match e.fields.get("value") {
            Some(Value::Object(m)) => limits::validate(VHOST_LIMITS_TERM, &VHOST_LIMITS, m)
                .map_err(|err| e.invalid(err))?,
            _ => return Err(e.error("'value' must be an object")),
        };
        out.push(VhostLimitsItem {
            at: e,
            vhost: vhost_of(&e)?.to_string(),
            limits,
        });
    }
    Ok(out)
}

/// Sections RelayMQ has no equivalent for: each element is reported.
fn unsupported_sections(doc: &Document, summary: &mut ImportSummary) -> Result<(), BrokerError> {
    for e in model::elements(doc, "topic_permissions")? {
        summary.skip(format!(
            "{}: not imported (RelayMQ has no topic permissions)",
            e.label()
        ));
    }
    for e in model::elements(doc, "parameters")? {
        let component = e.str_or("component", "")?;
        if component == VHOST_LIMITS_COMPONENT
            || component == OPERATOR_POLICY_COMPONENT
            || STORED_COMPONENTS.contains(&component)
            || ACTED_ON_COMPONENTS.contains(&component)
        {
            continue;
        }
        summary.skip(format!(
            "{}: not imported (RelayMQ has no runtime parameter component '{component}')",
            e.label()
        ));
    }
    Ok(())
}

/// The `parameters` elements RelayMQ imports: operator policies, then stored ones.
type ParameterItems<'a> = (Vec<PolicyItem<'a>>, Vec<ParameterItem<'a>>);

/// `parameters` elements: operator policies (compiled as `PUT /api/operator-policies`
/// compiles them) and those of [`STORED_COMPONENTS`] (stored, reported as not acted on).
fn parameters<'a>(
    doc: &'a Document,
    summary: &mut ImportSummary,
) -> Result<ParameterItems<'a>, BrokerError> {
    let mut operator_policies = Vec::new();
    let mut stored = Vec::new();
    for e in model::elements(doc, "parameters")? {
        let component = e.str_or("component", "")?;
        let value = e.fields.get("value").cloned().unwrap_or(Value::Null);
        if component == OPERATOR_POLICY_COMPONENT {
            let def = operator_policy_from_value(vhost_of(&e)?, e.str("name")?, &value)
                .map_err(|err| e.invalid(err))?;
            let policy = check_operator_policy(def).map_err(|err| e.invalid(err))?;
            operator_policies.push(PolicyItem { at: e, policy });
        } else if STORED_COMPONENTS.contains(&component) || ACTED_ON_COMPONENTS.contains(&component)
        {
            if value.to_string().len() > PARAMETER_VALUE_BYTES_MAX {
                return Err(e.error(format!(
                    "'value' is longer than {PARAMETER_VALUE_BYTES_MAX} bytes"
                )));
            }
            match check_acted_on(component, e.str("name")?, &value) {
                Some(checked) => {
                    checked.map_err(|why| e.invalid(BrokerError::precondition(why)))?;
                }
                None => summary.skip(format!("{}: stored but not acted on by RelayMQ", e.label())),
            }
            stored.push(ParameterItem {
                at: e,
                vhost: vhost_of(&e)?.to_string(),
                component: component.to_string(),
                name: e.str("name")?.to_string(),
                value,
            });
        }
    }
    Ok((operator_policies, stored))
}

/// `global_parameters` elements other than RabbitMQ's internal ones: `cluster_name` sets
/// the cluster's name, as RabbitMQ's import does; any other is stored and reported as not
/// acted on.
fn global_parameters(
    doc: &Document,
    summary: &mut ImportSummary,
) -> Result<Vec<(String, Value)>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "global_parameters")? {
        let name = e.str("name")?;
        if name.starts_with(INTERNAL_GLOBAL_PARAMETER_PREFIX) {
            continue;
        }
        let value = e.fields.get("value").cloned().unwrap_or(Value::Null);
        if name == CLUSTER_NAME && value.as_str().is_none_or(str::is_empty) {
            return Err(e.error("'value' of cluster_name must be a non-empty string"));
        }
        if value.to_string().len() > PARAMETER_VALUE_BYTES_MAX {
            return Err(e.error(format!(
                "'value' is longer than {PARAMETER_VALUE_BYTES_MAX} bytes"
            )));
        }
        if name != CLUSTER_NAME {
            summary.skip(format!("{}: stored but not acted on", e.label()));
        }
        out.push((name.to_string(), value));
    }
    Ok(out)
}

/// Policies, checked as `relaymq-cli policy set` checks them (a bad pattern, apply-to or
/// definition key is a 406 naming the element); keys RabbitMQ knows that RelayMQ keeps but
/// does not act on (`ha-mode`, `queue-mode`, ...) are reported, and the policy imported
/// with them (docs/operations.md, "Policies").
fn policies<'a>(
    doc: &'a Document,
    summary: &mut ImportSummary,
) -> Result<Vec<PolicyItem<'a>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "policies")? {
        let mut fields = e.fields.clone();
        if !fields.contains_key("vhost") {
            fields.insert("vhost".into(), Value::from(crate::broker::DEFAULT_VHOST));
        }
        let def =
            PolicyDef::from_rabbitmq_json(&Value::Object(fields)).map_err(|err| e.invalid(err))?;
        let policy = Policy::compile(def).map_err(|err| e.invalid(err))?;
        if !policy.not_honoured.is_empty() {
            summary.skip(format!(
                "{}: definition key(s) {} kept but not acted on",
                e.label(),
                policy.not_honoured.join(", ")
            ));
        }
        out.push(PolicyItem { at: e, policy });
    }
    Ok(out)
}

/// Vhost of an element: `vhost`, `/` when absent (RabbitMQ's single-vhost exports).
fn vhost_of<'a>(e: &Element<'a>) -> Result<&'a str, BrokerError> {
    e.str_or("vhost", crate::broker::DEFAULT_VHOST)
}

fn exchanges<'a>(
    doc: &'a Document,
    skipped: &mut Skipped,
    summary: &mut ImportSummary,
) -> Result<Vec<ExchangeItem<'a>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "exchanges")? {
        let name = e.str("name")?;
        let kind = e.str("type")?;
        let parsed = ExchangeKind::parse(kind).map_err(|err| e.invalid(err))?;
        let vhost = vhost_of(&e)?;
        if name.is_empty() || names::is_reserved(name) {
            // RabbitMQ skips them too, with a warning.
            summary.skip(format!(
                "{}: not imported (the default and amq.* exchanges are built in)",
                e.label()
            ));
            skipped.insert(ObjectKind::Exchange, vhost, name, BUILT_IN_EXCHANGE);
            continue;
        }
        let arguments = e.arguments()?;
        out.push(ExchangeItem {
            at: e,
            vhost: vhost.to_string(),
            kind: parsed,
            spec: ExchangeSpec {
                name: name.to_string(),
                kind: kind.to_string(),
                passive: false,
                durable: e.bool_or("durable", true)?,
                auto_delete: e.bool_or("auto_delete", false)?,
                internal: e.bool_or("internal", false)?,
                arguments,
            },
        });
    }
    Ok(out)
}

fn queues<'a>(
    doc: &'a Document,
    skipped: &mut Skipped,
    summary: &mut ImportSummary,
) -> Result<Vec<QueueItem<'a>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "queues")? {
        let name = e.str("name")?;
        if name.is_empty() {
            return Err(e.error("'name' must not be empty"));
        }
        let vhost = vhost_of(&e)?;
        let mut arguments = e.arguments()?;
        let declared_type = arguments
            .get("x-queue-type")
            .and_then(FieldValue::as_str)
            .map(str::to_string);
        let kind = match (e.str_or("type", "")?, declared_type) {
            ("", Some(t)) => t,
            ("", None) => "classic".to_string(),
            (t, _) => t.to_string(),
        };
        if names::is_reserved(name) {
            // RabbitMQ skips them with a warning ("Skipping import of a queue whose name
            // begins with 'amq.'"): a client's server-named queue, exported while it ran.
            summary.skip(format!(
                "{}: not imported: queue names starting with 'amq.' are reserved for \
                 server-named queues (RabbitMQ skips them too)",
                e.label()
            ));
            skipped.insert(ObjectKind::Queue, vhost, name, RESERVED_QUEUE);
            continue;
        }
        match kind.as_str() {
            // An `x-queue-type: classic` argument is kept as given.
            "classic" => {}
            // The type lives in the argument, as a declaration gives it.
            "quorum" => {
                arguments.insert("x-queue-type".into(), FieldValue::string("quorum"));
            }
            "stream" => {
                summary.skip(format!(
                    "{}: not imported (RelayMQ has no streams)",
                    e.label()
                ));
                skipped.insert(ObjectKind::Queue, vhost, name, STREAM);
                continue;
            }
            other => return Err(e.error(format!("unknown queue type '{other}'"))),
        }
        let durable = e.bool_or("durable", true)?;
        let auto_delete = e.bool_or("auto_delete", false)?;
        let queue_type = check_queue_arguments(&arguments).map_err(|err| e.invalid(err))?;
        let properties = DeclaredProperties {
            durable,
            exclusive: false,
            auto_delete,
            generated: false,
        };
        queue_type
            .check_declaration(name, vhost, properties, &arguments)
            .map_err(|err| e.invalid(err))?;
        out.push(QueueItem {
            at: e,
            vhost: vhost.to_string(),
            spec: QueueSpec {
                name: name.to_string(),
                passive: false,
                durable,
                exclusive: false,
                auto_delete,
                arguments,
            },
        });
    }
    Ok(out)
}

/// Bindings, their fields checked; whether their ends exist and their arguments suit the
/// source's type is decided against the broker (`changes`).
fn bindings(doc: &Document) -> Result<Vec<BindingItem<'_>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "bindings")? {
        let vhost = vhost_of(&e)?;
        let source = e.str("source")?;
        let destination = e.str("destination")?;
        let key = e.str_or("routing_key", "")?;
        let arguments = e.arguments()?;
        let destination = match e.str_or("destination_type", "queue")? {
            "queue" => Destination::Queue(Arc::from(destination)),
            "exchange" => Destination::Exchange(Arc::from(destination)),
            other => {
                return Err(e.error(format!(
                    "'destination_type' must be queue or exchange, not '{other}'"
                )))
            }
        };
        if source.is_empty() {
            // The default exchange's bindings are implicit: nothing to import.
            continue;
        }
        out.push(BindingItem {
            at: e,
            vhost: vhost.to_string(),
            source: source.to_string(),
            destination,
            key: key.to_string(),
            arguments,
        });
    }
    Ok(out)
}
