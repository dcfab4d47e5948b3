//! Import: validates a whole definitions document first (a bad value is a 406 naming the
//! element, e.g. `queues[3] (vhost '/', name 'q'): ...x-max-length...`), checks it against
//! what exists (an existing exchange or queue with other properties is RabbitMQ's 406
//! PRECONDITION_FAILED `inequivalent arg`), then applies it in RabbitMQ's order: vhosts,
//! users, permissions, exchanges, queues, bindings. Importing the same document twice
//! changes nothing.
//!
//! What RelayMQ cannot honour is reported by name in the [`ImportSummary`] and the rest is
//! imported: topic permissions, runtime parameters (federation, shovel, ...), global
//! parameters other than `cluster_name` and RabbitMQ's internal ones, user and vhost
//! limits, policies (for now: "policies: not imported (N)"), queue arguments RelayMQ does
//! not implement (`x-single-active-consumer` true: the queue is imported without it),
//! quorum queues (imported as classic queues) and streams (not imported, nor their
//! bindings). Vhost descriptions and tags are not kept, silently. Unknown fields are
//! ignored, as RabbitMQ ignores them.

use super::model::{self, Document, Element};
use super::summary::{ImportSummary, SectionCount};
use crate::auth::password::StoredHash;
use crate::auth::permission::{PermissionDef, Permissions};
use crate::auth::users::{check_user_name, parse_tags};
use crate::broker::access::Credential;
use crate::broker::names;
use crate::broker::router::{Destination, ExchangeKind, Router};
use crate::broker::vhost::{
    check_queue_arguments, exchange_equivalence, queue_equivalence, UNSUPPORTED_QUEUE_ARGUMENTS,
};
use crate::broker::{Broker, ExchangeSpec, QueueSpec};
use crate::error::BrokerError;
use crate::types::{FieldTable, FieldValue};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Connection id the import declares and binds as: no client connection has it, and the
/// import never creates exclusive queues.
const IMPORT_CONNECTION_ID: u64 = 0;

/// Global parameters RelayMQ ignores without reporting them: the cluster's name and
/// RabbitMQ's internal cluster id (RabbitMQ writes both in every export).
const IGNORED_GLOBAL_PARAMETERS: [&str; 2] = ["cluster_name", "internal_cluster_id"];

/// A validated `vhosts` element.
struct VhostDef {
    name: String,
}

/// A validated `users` element.
struct UserDef<'a> {
    at: Element<'a>,
    name: String,
    algorithm: String,
    hash: String,
    tags: Vec<String>,
}

/// A validated `permissions` element.
struct PermissionItem<'a> {
    at: Element<'a>,
    user: String,
    vhost: String,
    def: PermissionDef,
}

/// A validated `exchanges` element.
struct ExchangeItem<'a> {
    at: Element<'a>,
    vhost: String,
    spec: ExchangeSpec,
}

/// A validated `queues` element.
struct QueueItem<'a> {
    at: Element<'a>,
    vhost: String,
    spec: QueueSpec,
}

/// A validated `bindings` element.
struct BindingItem<'a> {
    at: Element<'a>,
    vhost: String,
    source: String,
    destination: Destination,
    key: String,
    arguments: FieldTable,
}

/// The whole document, validated.
struct Plan<'a> {
    vhosts: Vec<VhostDef>,
    users: Vec<UserDef<'a>>,
    permissions: Vec<PermissionItem<'a>>,
    exchanges: Vec<ExchangeItem<'a>>,
    queues: Vec<QueueItem<'a>>,
    bindings: Vec<BindingItem<'a>>,
}

/// Imports a definitions document (`relaymq-cli import definitions`).
///
/// # Errors
/// 406 PRECONDITION_FAILED for a document that is not valid (naming the element and the
/// field) or an existing exchange or queue with other properties (nothing is applied in
/// both cases); an error of the broker while applying (404, 541 when the store fails),
/// named after the element. Elements applied before such an error stay, as in RabbitMQ.
pub fn import(broker: &Broker, json: &str) -> Result<ImportSummary, BrokerError> {
    let doc = model::parse(json)?;
    let mut summary = ImportSummary::default();
    let mut plan = validate(&doc, &mut summary)?;
    check_equivalence(broker, &plan)?;
    drop_dangling_bindings(broker, &mut plan, &mut summary);
    summary.count("vhosts", apply_vhosts(broker, &plan.vhosts)?);
    summary.count("users", apply_users(broker, &plan.users)?);
    summary.count("permissions", apply_permissions(broker, &plan.permissions)?);
    summary.count("exchanges", apply_exchanges(broker, &plan.exchanges)?);
    summary.count("queues", apply_queues(broker, &plan.queues)?);
    summary.count("bindings", apply_bindings(broker, &plan.bindings)?);
    log::info!(
        "definitions imported: {} not honoured",
        summary.not_honoured.len()
    );
    Ok(summary)
}

/// Reads and checks every section; what cannot be honoured goes to `summary`.
fn validate<'a>(doc: &'a Document, summary: &mut ImportSummary) -> Result<Plan<'a>, BrokerError> {
    let vhosts = vhosts(doc, summary)?;
    let users = users(doc, summary)?;
    let permissions = permissions(doc)?;
    unsupported_sections(doc, summary)?;
    policies(doc, summary)?;
    let exchanges = exchanges(doc, summary)?;
    let (queues, streams) = queues(doc, summary)?;
    let bindings = bindings(doc, &exchanges, &streams, summary)?;
    Ok(Plan {
        vhosts,
        users,
        permissions,
        exchanges,
        queues,
        bindings,
    })
}

fn vhosts(doc: &Document, summary: &mut ImportSummary) -> Result<Vec<VhostDef>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "vhosts")? {
        let name = e.str("name")?;
        if name.is_empty() {
            return Err(e.error("'name' must not be empty"));
        }
        if !e.is_empty_field("limits") {
            summary.skip(format!("{}: vhost limits not honoured", e.label()));
        }
        out.push(VhostDef {
            name: name.to_string(),
        });
    }
    Ok(out)
}

fn users<'a>(
    doc: &'a Document,
    summary: &mut ImportSummary,
) -> Result<Vec<UserDef<'a>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "users")? {
        let name = e.str("name")?;
        check_user_name(name).map_err(|err| e.invalid(err))?;
        let hash = e.str("password_hash")?;
        let algorithm = e.str_or("hashing_algorithm", "rabbit_password_hashing_sha256")?;
        StoredHash::import(algorithm, hash).map_err(|err| e.invalid(err))?;
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
        if !e.is_empty_field("limits") {
            summary.skip(format!("{}: user limits not honoured", e.label()));
        }
        out.push(UserDef {
            at: e,
            name: name.to_string(),
            algorithm: algorithm.to_string(),
            hash: hash.to_string(),
            tags,
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

/// Sections RelayMQ has no equivalent for: each element is reported.
fn unsupported_sections(doc: &Document, summary: &mut ImportSummary) -> Result<(), BrokerError> {
    for e in model::elements(doc, "topic_permissions")? {
        summary.skip(format!(
            "{}: not imported (RelayMQ has no topic permissions)",
            e.label()
        ));
    }
    for e in model::elements(doc, "parameters")? {
        summary.skip(format!(
            "{}: not imported (RelayMQ has no runtime parameters such as federation or shovels)",
            e.label()
        ));
    }
    for e in model::elements(doc, "global_parameters")? {
        let name = e.str_or("name", "")?;
        if !IGNORED_GLOBAL_PARAMETERS.contains(&name) {
            summary.skip(format!("{}: not imported", e.label()));
        }
    }
    Ok(())
}

/// Policies: not imported yet; reported as one line with their number.
fn policies(doc: &Document, summary: &mut ImportSummary) -> Result<(), BrokerError> {
    let n = model::elements(doc, "policies")?.len();
    if n > 0 {
        summary.skip(format!("policies: not imported ({n})"));
    }
    Ok(())
}

/// Vhost of an element: `vhost`, `/` when absent (RabbitMQ's single-vhost exports).
fn vhost_of<'a>(e: &Element<'a>) -> Result<&'a str, BrokerError> {
    e.str_or("vhost", crate::broker::DEFAULT_VHOST)
}

fn exchanges<'a>(
    doc: &'a Document,
    summary: &mut ImportSummary,
) -> Result<Vec<ExchangeItem<'a>>, BrokerError> {
    let mut out = Vec::new();
    for e in model::elements(doc, "exchanges")? {
        let name = e.str("name")?;
        let kind = e.str("type")?;
        ExchangeKind::parse(kind).map_err(|err| e.invalid(err))?;
        if name.is_empty() || names::is_reserved(name) {
            // RabbitMQ skips them too, with a warning.
            summary.skip(format!(
                "{}: not imported (the default and amq.* exchanges are built in)",
                e.label()
            ));
            continue;
        }
        let arguments = e.arguments()?;
        out.push(ExchangeItem {
            at: e,
            vhost: vhost_of(&e)?.to_string(),
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

/// The validated queues, and the (vhost, name) of streams left out (their bindings are
/// left out too).
type QueuesAndStreams<'a> = (Vec<QueueItem<'a>>, HashSet<(String, String)>);

fn queues<'a>(
    doc: &'a Document,
    summary: &mut ImportSummary,
) -> Result<QueuesAndStreams<'a>, BrokerError> {
    let mut out = Vec::new();
    let mut streams = HashSet::new();
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
        // A quorum queue is imported as a classic one: its type argument goes.
        if kind != "classic" {
            arguments.remove("x-queue-type");
        }
        match kind.as_str() {
            "classic" => {}
            "quorum" => summary.skip(format!(
                "{}: queue type 'quorum' not honoured: imported as a durable classic queue",
                e.label()
            )),
            "stream" => {
                summary.skip(format!(
                    "{}: not imported (RelayMQ has no streams)",
                    e.label()
                ));
                streams.insert((vhost.to_string(), name.to_string()));
                continue;
            }
            other => return Err(e.error(format!("unknown queue type '{other}'"))),
        }
        for arg in UNSUPPORTED_QUEUE_ARGUMENTS {
            // `false` is what RelayMQ does anyway (RabbitMQ's default): kept.
            if arguments
                .get(arg)
                .is_some_and(|v| !matches!(v, FieldValue::Bool(false)))
            {
                arguments.remove(arg);
                summary.skip(format!(
                    "{}: argument '{arg}' not honoured (not implemented by RelayMQ); the \
                     queue is imported without it",
                    e.label()
                ));
            }
        }
        check_queue_arguments(&arguments).map_err(|err| e.invalid(err))?;
        out.push(QueueItem {
            at: e,
            vhost: vhost.to_string(),
            spec: QueueSpec {
                name: name.to_string(),
                passive: false,
                durable: e.bool_or("durable", true)?,
                exclusive: false,
                auto_delete: e.bool_or("auto_delete", false)?,
                arguments,
            },
        });
    }
    Ok((out, streams))
}

fn bindings<'a>(
    doc: &'a Document,
    exchanges: &[ExchangeItem<'a>],
    streams: &HashSet<(String, String)>,
    summary: &mut ImportSummary,
) -> Result<Vec<BindingItem<'a>>, BrokerError> {
    let kinds: HashMap<(&str, &str), &str> = exchanges
        .iter()
        .map(|x| {
            (
                (x.vhost.as_str(), x.spec.name.as_str()),
                x.spec.kind.as_str(),
            )
        })
        .collect();
    let mut out = Vec::new();
    for e in model::elements(doc, "bindings")? {
        let vhost = vhost_of(&e)?;
        let source = e.str("source")?;
        let destination = e.str("destination")?;
        let key = e.str_or("routing_key", "")?;
        let arguments = e.arguments()?;
        let destination = match e.str_or("destination_type", "queue")? {
            "queue" => {
                if streams.contains(&(vhost.to_string(), destination.to_string())) {
                    summary.skip(format!(
                        "{}: not imported (its destination is a stream)",
                        e.label()
                    ));
                    continue;
                }
                Destination::Queue(Arc::from(destination))
            }
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
        // Binding arguments are checked against the source's type when the document
        // declares it (headers exchanges need a valid x-match).
        if let Some(kind) = kinds.get(&(vhost, source)) {
            if let Ok(kind) = ExchangeKind::parse(kind) {
                Router::new(kind)
                    .validate(key, &arguments)
                    .map_err(|err| e.invalid(err))?;
            }
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

/// Refuses the import before anything is applied when an existing exchange or queue
/// differs from the document, with the text a declaration would get (RabbitMQ: 406
/// PRECONDITION_FAILED "inequivalent arg").
fn check_equivalence(broker: &Broker, plan: &Plan<'_>) -> Result<(), BrokerError> {
    for x in &plan.exchanges {
        if let Some(existing) = broker
            .vhost(&x.vhost)
            .and_then(|v| v.exchange(&x.spec.name))
        {
            exchange_equivalence(&existing, &x.spec, &x.vhost).map_err(|e| x.at.wrap(e))?;
        }
    }
    for q in &plan.queues {
        if let Some(existing) = broker.vhost(&q.vhost).and_then(|v| v.queue(&q.spec.name)) {
            queue_equivalence(&existing, &q.spec, &q.vhost).map_err(|e| q.at.wrap(e))?;
        }
    }
    Ok(())
}

/// Leaves out (and reports) bindings whose source or destination is neither in the
/// document nor on the server: RabbitMQ 3.x does not export internal exchanges but does
/// export the bindings to and from them.
fn drop_dangling_bindings(broker: &Broker, plan: &mut Plan<'_>, summary: &mut ImportSummary) {
    let exchanges: HashSet<(String, String)> = plan
        .exchanges
        .iter()
        .map(|x| (x.vhost.clone(), x.spec.name.clone()))
        .collect();
    let queues: HashSet<(String, String)> = plan
        .queues
        .iter()
        .map(|q| (q.vhost.clone(), q.spec.name.clone()))
        .collect();
    let key = |vhost: &str, name: &str| (vhost.to_string(), name.to_string());
    let exchange_known = |vhost: &str, name: &str| {
        exchanges.contains(&key(vhost, name))
            || broker
                .vhost(vhost)
                .is_some_and(|v| v.exchange(name).is_some())
    };
    let queue_known = |vhost: &str, name: &str| {
        queues.contains(&key(vhost, name))
            || broker.vhost(vhost).is_some_and(|v| v.queue(name).is_some())
    };
    let mut kept = Vec::new();
    for b in std::mem::take(&mut plan.bindings) {
        let missing = if !exchange_known(&b.vhost, &b.source) {
            Some(format!("source exchange '{}'", b.source))
        } else {
            match &b.destination {
                Destination::Exchange(x) if !exchange_known(&b.vhost, x) => {
                    Some(format!("destination exchange '{x}'"))
                }
                Destination::Queue(q) if !queue_known(&b.vhost, q) => {
                    Some(format!("destination queue '{q}'"))
                }
                _ => None,
            }
        };
        match missing {
            Some(what) => summary.skip(format!(
                "{}: not imported: its {what} is neither in the definitions nor on the server \
                 (RabbitMQ does not export internal exchanges)",
                b.at.label()
            )),
            None => kept.push(b),
        }
    }
    plan.bindings = kept;
}

fn apply_vhosts(broker: &Broker, vhosts: &[VhostDef]) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    for v in vhosts {
        if broker.vhost(&v.name).is_some() {
            c.unchanged += 1;
        } else {
            broker
                .declare_vhost(&v.name)
                .map_err(|e| BrokerError::new(e.code, format!("vhost '{}': {}", v.name, e.text)))?;
            log::info!("vhost '{}' created from imported definitions", v.name);
            c.created += 1;
        }
    }
    Ok(c)
}

fn apply_users(broker: &Broker, users: &[UserDef<'_>]) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    for u in users {
        match broker.users().user(&u.name) {
            None => {
                broker
                    .add_user(
                        &u.name,
                        &Credential::Hash(u.algorithm.clone(), u.hash.clone()),
                        u.tags.clone(),
                    )
                    .map_err(|e| u.at.wrap(e))?;
                c.created += 1;
            }
            Some(existing)
                if existing.hash.algorithm == u.algorithm
                    && existing.hash.hash == u.hash
                    && existing.tags == u.tags =>
            {
                c.unchanged += 1;
            }
            Some(_) => {
                broker
                    .replace_user(&u.name, &u.algorithm, &u.hash, u.tags.clone())
                    .map_err(|e| u.at.wrap(e))?;
                c.created += 1;
            }
        }
    }
    Ok(c)
}

fn apply_permissions(
    broker: &Broker,
    permissions: &[PermissionItem<'_>],
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let current: HashMap<(String, String), PermissionDef> = broker
        .users()
        .all_permissions()
        .into_iter()
        .map(|(u, v, def)| ((u, v), def))
        .collect();
    for p in permissions {
        if current.get(&(p.user.clone(), p.vhost.clone())) == Some(&p.def) {
            c.unchanged += 1;
            continue;
        }
        broker
            .set_permission(&p.user, &p.vhost, p.def.clone())
            .map_err(|e| p.at.wrap(e))?;
        c.created += 1;
    }
    Ok(c)
}

fn vhost_or_404(
    broker: &Broker,
    at: &Element<'_>,
    name: &str,
) -> Result<Arc<crate::broker::VirtualHost>, BrokerError> {
    broker
        .vhost(name)
        .ok_or_else(|| at.wrap(BrokerError::not_found(format!("no vhost '{name}'"))))
}

fn apply_exchanges(
    broker: &Broker,
    exchanges: &[ExchangeItem<'_>],
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    for x in exchanges {
        let vh = vhost_or_404(broker, &x.at, &x.vhost)?;
        let existed = vh.exchange(&x.spec.name).is_some();
        vh.declare_exchange(&x.spec).map_err(|e| x.at.wrap(e))?;
        if existed {
            c.unchanged += 1;
        } else {
            c.created += 1;
        }
    }
    Ok(c)
}

fn apply_queues(broker: &Broker, queues: &[QueueItem<'_>]) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    for q in queues {
        let vh = vhost_or_404(broker, &q.at, &q.vhost)?;
        let existed = vh.queue(&q.spec.name).is_some();
        vh.declare_queue(&q.spec, IMPORT_CONNECTION_ID)
            .map_err(|e| q.at.wrap(e))?;
        if existed {
            c.unchanged += 1;
        } else {
            c.created += 1;
        }
    }
    Ok(c)
}

fn apply_bindings(
    broker: &Broker,
    bindings: &[BindingItem<'_>],
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    for b in bindings {
        let vh = vhost_or_404(broker, &b.at, &b.vhost)?;
        // Binding twice is a no-op: the source's binding count tells what happened.
        let count = || vh.exchange(&b.source).map_or(0, |x| x.router().len());
        let before = count();
        vh.bind(
            &b.source,
            &b.destination,
            &b.key,
            &b.arguments,
            IMPORT_CONNECTION_ID,
        )
        .map_err(|e| b.at.wrap(e))?;
        if count() == before {
            c.unchanged += 1;
        } else {
            c.created += 1;
        }
    }
    Ok(c)
}
