//! What a validated document changes on a broker, decided before anything is applied:
//! each element is new (to create), different (users, permissions and policies are
//! replaced, RabbitMQ's rule) or already there, and every check a declaration would make
//! against what exists is made here — vhosts of every element, equivalence of existing
//! exchanges and queues (RabbitMQ's `inequivalent arg`), `--max-queues-per-vhost`,
//! `--max-exchanges-per-vhost`, `--max-name-bytes`, the policies per vhost, the ends of
//! every binding and its arguments against its source's type. So applying [`Changes`]
//! cannot be refused half-way (docs/operations.md, "How an import runs").
//!
//! Bindings whose source or destination is neither in the document nor on the server, or
//! is an object the document names but that is not imported (a server-named `amq.*` queue,
//! a stream), are left out and reported: RabbitMQ exports the bindings of exclusive queues
//! but not the queues, and refuses the whole file there.

use super::plan::{
    BindingItem, ExchangeItem, ObjectKind, ParameterItem, PermissionItem, Plan, PolicyItem,
    QueueItem, UserDef,
};
use super::summary::SectionCount;
use crate::auth::users::UserRegistry;
use crate::broker::exchange::{Binding, Destination, ExchangeKind, Router};
use crate::broker::exchange::{Exchange, STANDARD_EXCHANGES};
use crate::broker::limits::{LimitMap, VhostMetadata};
use crate::broker::parameters::PARAMETERS_PER_VHOST_MAX;
use crate::broker::policy::operator::OPERATOR_POLICIES_PER_VHOST_MAX;
use crate::broker::policy::POLICIES_PER_VHOST_MAX;
use crate::broker::queue::Queue;
use crate::broker::vhost::{
    check_exchange_spec, check_name_bytes, default_exchange_refused, exchange_equivalence,
    exchange_limit_reached, queue_equivalence, queue_limit_reached, VirtualHost,
};
use crate::error::BrokerError;
use crate::limits::LiveLimits;
use crate::storage::meta::encode_arguments;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Connection id the import declares and binds as: no client connection has it, and the
/// import never creates exclusive queues.
pub(super) const IMPORT_CONNECTION_ID: u64 = 0;

/// A binding to create, and whether it is stored (its source a durable exchange, its
/// destination a durable queue or exchange; docs/architecture.md §14).
pub(super) struct NewBinding<'p> {
    pub(super) item: &'p BindingItem<'p>,
    pub(super) stored: bool,
}

/// What importing a document changes, in RabbitMQ's order of sections.
pub(super) struct Changes<'p> {
    /// Vhosts to create.
    pub(super) vhosts: Vec<&'p str>,
    /// Users to store, each the last of its name in the document: created or replaced.
    pub(super) users: Vec<&'p UserDef>,
    /// Permissions to set (last of each user and vhost).
    pub(super) permissions: Vec<&'p PermissionItem<'p>>,
    /// Policies to set (last of each vhost and name).
    pub(super) policies: Vec<&'p PolicyItem<'p>>,
    /// Exchanges to create.
    pub(super) exchanges: Vec<&'p ExchangeItem<'p>>,
    /// Queues to create.
    pub(super) queues: Vec<&'p QueueItem<'p>>,
    /// Bindings to create.
    pub(super) bindings: Vec<NewBinding<'p>>,
    /// Vhost metadata to set (each differs from the vhost's, or the vhost is new).
    pub(super) vhost_metadata: Vec<(&'p str, VhostMetadata)>,
    /// Vhost limits to set, each replacing the vhost's.
    pub(super) vhost_limits: Vec<(&'p str, LimitMap)>,
    /// User limits to set, each the user's merged with the file's.
    pub(super) user_limits: Vec<(&'p str, LimitMap)>,
    /// Operator policies to set (each replaces one of its vhost and name).
    pub(super) operator_policies: Vec<&'p PolicyItem<'p>>,
    /// Stored runtime parameters to set (each replaces one of its key).
    pub(super) parameters: Vec<&'p ParameterItem<'p>>,
    /// Global parameters to set.
    pub(super) global_parameters: Vec<(&'p str, &'p serde_json::Value)>,
    /// Section name → counts, in the order applied.
    pub(super) counts: Vec<(&'static str, SectionCount)>,
    /// What the operator should know (the importing user replaced).
    pub(super) warnings: Vec<String>,
    /// Bindings left out, one line each.
    pub(super) not_honoured: Vec<String>,
}

/// What the decision reads of the broker: its vhosts (a snapshot, or the map locked for
/// the commit), its users and its limits.
pub(super) struct Current<'b> {
    pub(super) vhosts: &'b HashMap<String, Arc<VirtualHost>>,
    pub(super) users: &'b UserRegistry,
    pub(super) limits: &'b LiveLimits,
}

impl Current<'_> {
    fn vhost(&self, name: &str) -> Option<&Arc<VirtualHost>> {
        self.vhosts.get(name)
    }
}

/// Decides what `plan` changes on the broker `now`, for the administrator `importer`.
///
/// # Errors
/// Naming the element: 404 for a vhost or user neither in the document nor on the broker;
/// 406 for an existing exchange or queue with other properties, a limit the document would
/// pass, a name too long, binding arguments its source's type refuses; 405 for a binding to
/// another connection's exclusive queue; 403 for a binding to the default exchange.
pub(super) fn decide<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    importer: &str,
) -> Result<Changes<'p>, BrokerError> {
    let mut changes = Changes {
        vhosts: Vec::new(),
        users: Vec::new(),
        permissions: Vec::new(),
        policies: Vec::new(),
        exchanges: Vec::new(),
        queues: Vec::new(),
        bindings: Vec::new(),
        vhost_metadata: Vec::new(),
        vhost_limits: Vec::new(),
        user_limits: Vec::new(),
        operator_policies: Vec::new(),
        parameters: Vec::new(),
        global_parameters: Vec::new(),
        counts: Vec::new(),
        warnings: Vec::new(),
        not_honoured: Vec::new(),
    };
    let c = vhosts(now, plan, &mut changes);
    changes.counts.push(("vhosts", c));
    let new_vhosts: HashSet<&str> = changes.vhosts.iter().copied().collect();
    let vhost_known = |at: &super::model::Element<'_>, name: &str| {
        if now.vhost(name).is_some() || new_vhosts.contains(name) {
            Ok(())
        } else {
            Err(at.wrap(BrokerError::not_found(format!("no vhost '{name}'"))))
        }
    };
    let c = users(now, plan, importer, &mut changes);
    changes.counts.push(("users", c));
    let c = permissions(now, plan, &vhost_known, &mut changes)?;
    changes.counts.push(("permissions", c));
    limits_and_metadata(now, plan, &vhost_known, &mut changes)?;
    let c = policies(now, plan, &vhost_known, &mut changes)?;
    changes.counts.push(("policies", c));
    parameters(now, plan, &vhost_known, &mut changes)?;
    let c = exchanges(now, plan, &vhost_known, &mut changes)?;
    changes.counts.push(("exchanges", c));
    let c = queues(now, plan, &vhost_known, &mut changes)?;
    changes.counts.push(("queues", c));
    let c = bindings(now, plan, &mut changes)?;
    changes.counts.push(("bindings", c));
    Ok(changes)
}

fn vhosts<'p>(now: &Current<'_>, plan: &'p Plan<'p>, changes: &mut Changes<'p>) -> SectionCount {
    let mut c = SectionCount::default();
    for v in &plan.vhosts {
        if now.vhost(&v.name).is_some() || changes.vhosts.contains(&v.name.as_str()) {
            c.unchanged += 1;
        } else {
            changes.vhosts.push(&v.name);
            c.created += 1;
        }
    }
    c
}

/// Counts an element against what is there: the document's earlier element with the same
/// key when there is one (it replaces it in `chosen`), else the broker's (`current`).
fn count_change<'p, T, K: std::hash::Hash + Eq>(
    c: &mut SectionCount,
    chosen: &mut Vec<&'p T>,
    earlier: &mut HashMap<K, usize>,
    key: K,
    item: &'p T,
    same: impl Fn(&T) -> bool,
    current: Option<bool>,
) {
    match earlier.get(&key) {
        Some(&at) => {
            if same(chosen[at]) {
                c.unchanged += 1;
            } else {
                chosen[at] = item;
                c.replaced += 1;
            }
        }
        None => match current {
            Some(true) => c.unchanged += 1,
            Some(false) => {
                earlier.insert(key, chosen.len());
                chosen.push(item);
                c.replaced += 1;
            }
            None => {
                earlier.insert(key, chosen.len());
                chosen.push(item);
                c.created += 1;
            }
        },
    }
}

fn users<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    importer: &str,
    changes: &mut Changes<'p>,
) -> SectionCount {
    let mut c = SectionCount::default();
    let mut earlier = HashMap::new();
    for u in &plan.users {
        let existing = now.users.user(&u.name);
        let current = existing
            .as_ref()
            .map(|e| e.hash == u.hash && e.tags == u.tags);
        count_change(
            &mut c,
            &mut changes.users,
            &mut earlier,
            u.name.as_str(),
            u,
            |other| other.hash == u.hash && other.tags == u.tags,
            current,
        );
    }
    // The file replaces users that exist (RabbitMQ's rule), the importing one included:
    // say so, since its next login needs the file's password.
    if let (Some(u), Some(existing)) = (
        changes.users.iter().find(|u| u.name == importer),
        now.users.user(importer),
    ) {
        if existing.hash != u.hash {
            changes.warnings.push(format!(
                "user '{importer}' (you) was replaced by the file's: log in with the password \
                 it had where the file was exported"
            ));
        }
    }
    c
}

fn permissions<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    vhost_known: &impl Fn(&super::model::Element<'_>, &str) -> Result<(), BrokerError>,
    changes: &mut Changes<'p>,
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let current: HashMap<(String, String), _> = now
        .users
        .all_permissions()
        .into_iter()
        .map(|(u, v, def)| ((u, v), def))
        .collect();
    let imported_users: HashSet<&str> = plan.users.iter().map(|u| u.name.as_str()).collect();
    let mut earlier = HashMap::new();
    for p in &plan.permissions {
        if !imported_users.contains(p.user.as_str()) && now.users.user(&p.user).is_none() {
            return Err(p
                .at
                .wrap(BrokerError::not_found(format!("no user '{}'", p.user))));
        }
        vhost_known(&p.at, &p.vhost)?;
        let existing = current.get(&(p.user.clone(), p.vhost.clone()));
        count_change(
            &mut c,
            &mut changes.permissions,
            &mut earlier,
            (p.user.as_str(), p.vhost.as_str()),
            p,
            |other| other.def == p.def,
            existing.map(|d| *d == p.def),
        );
    }
    Ok(c)
}

fn policies<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    vhost_known: &impl Fn(&super::model::Element<'_>, &str) -> Result<(), BrokerError>,
    changes: &mut Changes<'p>,
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let mut earlier = HashMap::new();
    // Policy names per vhost once the import is applied, for POLICIES_PER_VHOST_MAX.
    let mut names: HashMap<&str, HashSet<String>> = HashMap::new();
    for p in &plan.policies {
        let def = &p.policy.def;
        vhost_known(&p.at, &def.vhost)?;
        let existing = now.vhost(&def.vhost).and_then(|vh| {
            vh.policies()
                .into_iter()
                .find(|cur| cur.def.name == def.name)
        });
        let in_vhost = names.entry(def.vhost.as_str()).or_insert_with(|| {
            now.vhost(&def.vhost)
                .map(|vh| vh.policies().iter().map(|p| p.def.name.clone()).collect())
                .unwrap_or_default()
        });
        if in_vhost.insert(def.name.clone()) && in_vhost.len() > POLICIES_PER_VHOST_MAX {
            return Err(p.at.wrap(BrokerError::precondition(format!(
                "vhost '{}' would have more than {POLICIES_PER_VHOST_MAX} policies, the most \
                 allowed",
                def.vhost
            ))));
        }
        count_change(
            &mut c,
            &mut changes.policies,
            &mut earlier,
            (def.vhost.as_str(), def.name.as_str()),
            p,
            |other| other.policy.def == *def,
            existing.map(|cur| cur.def == *def),
        );
    }
    Ok(c)
}

/// Operator policies, stored runtime parameters and global parameters: each replaces what
/// it names (as RabbitMQ's `set_parameter`); the bounds per vhost are checked. Not counted
/// in the summary's sections.
fn parameters<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    vhost_known: &impl Fn(&super::model::Element<'_>, &str) -> Result<(), BrokerError>,
    changes: &mut Changes<'p>,
) -> Result<(), BrokerError> {
    let mut op_names: HashMap<&str, HashSet<String>> = HashMap::new();
    for p in &plan.operator_policies {
        let def = &p.policy.def;
        vhost_known(&p.at, &def.vhost)?;
        let in_vhost = op_names.entry(def.vhost.as_str()).or_insert_with(|| {
            now.vhost(&def.vhost)
                .map(|vh| {
                    vh.operator_policies()
                        .iter()
                        .map(|p| p.def.name.clone())
                        .collect()
                })
                .unwrap_or_default()
        });
        if in_vhost.insert(def.name.clone()) && in_vhost.len() > OPERATOR_POLICIES_PER_VHOST_MAX {
            return Err(p.at.wrap(BrokerError::precondition(format!(
                "vhost '{}' would have more than {OPERATOR_POLICIES_PER_VHOST_MAX} operator \
                 policies, the most allowed",
                def.vhost
            ))));
        }
        changes.operator_policies.push(p);
    }
    let mut added: HashMap<&str, HashSet<(&str, &str)>> = HashMap::new();
    for p in &plan.parameters {
        vhost_known(&p.at, &p.vhost)?;
        let current = now.vhost(&p.vhost);
        let is_new = current
            .as_ref()
            .is_none_or(|vh| !vh.has_stored_parameter(&p.component, &p.name));
        let new_here = added.entry(p.vhost.as_str()).or_default();
        if is_new {
            new_here.insert((p.component.as_str(), p.name.as_str()));
        }
        let total = current.map_or(0, |vh| vh.stored_parameter_count()) + new_here.len();
        if total > PARAMETERS_PER_VHOST_MAX {
            return Err(p.at.wrap(BrokerError::precondition(format!(
                "vhost '{}' would have more than {PARAMETERS_PER_VHOST_MAX} runtime \
                 parameters, the most allowed",
                p.vhost
            ))));
        }
        changes.parameters.push(p);
    }
    changes.global_parameters = plan
        .global_parameters
        .iter()
        .map(|(n, v)| (n.as_str(), v))
        .collect();
    Ok(())
}

/// Vhost metadata, vhost limits (a `vhosts` element's, replaced by a `vhost-limits`
/// parameter's) and user limits (merged into the user's), each kept only when it changes
/// something. Not counted in the summary's sections.
fn limits_and_metadata<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    vhost_known: &impl Fn(&super::model::Element<'_>, &str) -> Result<(), BrokerError>,
    changes: &mut Changes<'p>,
) -> Result<(), BrokerError> {
    let mut vhost_limits: Vec<(&'p str, LimitMap)> = Vec::new();
    let mut set_vhost_limits = |vhost: &'p str, limits: &LimitMap| match vhost_limits
        .iter_mut()
        .find(|(v, _)| *v == vhost)
    {
        Some(entry) => entry.1 = limits.clone(),
        None => vhost_limits.push((vhost, limits.clone())),
    };
    for v in &plan.vhosts {
        let current = now.vhost(&v.name);
        if let Some(m) = &v.metadata {
            if current.is_none_or(|vh| vh.metadata() != *m) {
                changes.vhost_metadata.retain(|(name, _)| *name != v.name);
                changes.vhost_metadata.push((&v.name, m.clone()));
            }
        }
        if let Some(limits) = &v.limits {
            set_vhost_limits(&v.name, limits);
        }
    }
    for l in &plan.vhost_limits {
        vhost_known(&l.at, &l.vhost)?;
        set_vhost_limits(&l.vhost, &l.limits);
    }
    changes.vhost_limits = vhost_limits
        .into_iter()
        .filter(|(v, limits)| now.vhost(v).is_none_or(|vh| vh.own_limits() != *limits))
        .collect();
    for u in &plan.users {
        if u.limits.is_empty() {
            continue;
        }
        let base = match changes.user_limits.iter().position(|(n, _)| *n == u.name) {
            Some(at) => changes.user_limits.remove(at).1,
            None => now.users.limits(&u.name),
        };
        let mut merged = base.clone();
        merged.extend(u.limits.iter().map(|(k, v)| (k.clone(), *v)));
        if merged != now.users.limits(&u.name) || now.users.user(&u.name).is_none() {
            changes.user_limits.push((&u.name, merged));
        }
    }
    Ok(())
}

/// Counts new objects per vhost against a per-vhost limit.
struct Tally<'p> {
    added: HashMap<&'p str, usize>,
}

impl<'p> Tally<'p> {
    fn new() -> Tally<'p> {
        Tally {
            added: HashMap::new(),
        }
    }

    /// One more in `vhost`; whether `have` (what the vhost has now) plus the new ones stay
    /// within `max`.
    fn add(&mut self, vhost: &'p str, have: usize, max: usize) -> bool {
        let n = self.added.entry(vhost).or_insert(0);
        *n += 1;
        have.saturating_add(*n) <= max
    }
}

fn exchanges<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    vhost_known: &impl Fn(&super::model::Element<'_>, &str) -> Result<(), BrokerError>,
    changes: &mut Changes<'p>,
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let mut planned: HashMap<(&str, &str), &ExchangeItem<'p>> = HashMap::new();
    let mut tally = Tally::new();
    let max = now.limits.exchanges_per_vhost_max();
    for x in &plan.exchanges {
        vhost_known(&x.at, &x.vhost)?;
        check_exchange_spec(&x.spec, &x.vhost, now.limits.name_bytes_max())
            .map_err(|e| x.at.wrap(e))?;
        let existing = now.vhost(&x.vhost).and_then(|vh| vh.exchange(&x.spec.name));
        if let Some(existing) = existing {
            exchange_equivalence(&existing, &x.spec, &x.vhost).map_err(|e| x.at.wrap(e))?;
            c.unchanged += 1;
            continue;
        }
        let key = (x.vhost.as_str(), x.spec.name.as_str());
        if let Some(first) = planned.get(&key) {
            // A second declaration in the same file: equivalent to the first, or refused.
            let first = exchange_of(first);
            exchange_equivalence(&first, &x.spec, &x.vhost).map_err(|e| x.at.wrap(e))?;
            c.unchanged += 1;
            continue;
        }
        let have = now
            .vhost(&x.vhost)
            .map_or(0, |vh| vh.declared_exchange_count());
        if !tally.add(&x.vhost, have, max) {
            return Err(x
                .at
                .wrap(exchange_limit_reached(&x.spec.name, &x.vhost, max)));
        }
        planned.insert(key, x);
        changes.exchanges.push(x);
        c.created += 1;
    }
    Ok(c)
}

/// The exchange a validated element declares (created by the import, or compared with a
/// second declaration of it).
pub(super) fn exchange_of(x: &ExchangeItem<'_>) -> Exchange {
    Exchange::new(
        Arc::from(x.spec.name.as_str()),
        x.kind,
        x.spec.durable,
        x.spec.auto_delete,
        x.spec.internal,
        x.spec.arguments.clone(),
    )
}

fn queues<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    vhost_known: &impl Fn(&super::model::Element<'_>, &str) -> Result<(), BrokerError>,
    changes: &mut Changes<'p>,
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let mut planned: HashMap<(&str, &str), &QueueItem<'p>> = HashMap::new();
    let mut tally = Tally::new();
    let global_max = now.limits.queues_per_vhost_max();
    for q in &plan.queues {
        // The vhost's own `max-queues` as it is now (RabbitMQ checks the limits in force
        // before the file's are applied).
        let max = now.vhost(&q.vhost).map_or(global_max, |vh| vh.queues_max());
        vhost_known(&q.at, &q.vhost)?;
        check_name_bytes("queue name", &q.spec.name, now.limits.name_bytes_max())
            .map_err(|e| q.at.wrap(e))?;
        let existing = now.vhost(&q.vhost).and_then(|vh| vh.queue(&q.spec.name));
        if let Some(existing) = existing {
            queue_equivalence(&existing, &q.spec, &q.vhost).map_err(|e| q.at.wrap(e))?;
            c.unchanged += 1;
            continue;
        }
        let key = (q.vhost.as_str(), q.spec.name.as_str());
        if let Some(first) = planned.get(&key) {
            let first = Queue::new(
                Arc::from(first.spec.name.as_str()),
                first.spec.durable,
                false,
                first.spec.auto_delete,
                None,
                first.spec.arguments.clone(),
            );
            queue_equivalence(&first, &q.spec, &q.vhost).map_err(|e| q.at.wrap(e))?;
            c.unchanged += 1;
            continue;
        }
        let have = now.vhost(&q.vhost).map_or(0, |vh| vh.queue_count());
        if !tally.add(&q.vhost, have, max) {
            return Err(q.at.wrap(queue_limit_reached(&q.spec.name, &q.vhost, max)));
        }
        planned.insert(key, q);
        changes.queues.push(q);
        c.created += 1;
    }
    Ok(c)
}

/// What a binding's end is once the import is applied.
enum End {
    /// An exchange: its type and whether it is durable.
    Exchange(ExchangeKind, bool),
    /// A queue: whether it is stored (a new durable one, or one with a store, as
    /// `VirtualHost::bind` decides), and the existing queue when there is one (to check it
    /// is not another connection's exclusive queue).
    Queue(bool, Option<Arc<Queue>>),
}

fn bindings<'p>(
    now: &Current<'_>,
    plan: &'p Plan<'p>,
    changes: &mut Changes<'p>,
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let new_exchanges: HashMap<(&str, &str), &ExchangeItem<'p>> = changes
        .exchanges
        .iter()
        .map(|x| ((x.vhost.as_str(), x.spec.name.as_str()), *x))
        .collect();
    let new_queues: HashMap<(&str, &str), &QueueItem<'p>> = changes
        .queues
        .iter()
        .map(|q| ((q.vhost.as_str(), q.spec.name.as_str()), *q))
        .collect();
    let new_vhosts: HashSet<&str> = changes.vhosts.iter().copied().collect();
    let exchange_end = |vhost: &str, name: &str| -> Option<End> {
        if let Some(x) = new_exchanges.get(&(vhost, name)) {
            return Some(End::Exchange(x.kind, x.spec.durable));
        }
        if new_vhosts.contains(vhost) {
            // A new vhost comes with the built-in exchanges.
            return built_in_exchange(name).map(|kind| End::Exchange(kind, true));
        }
        let x = now.vhost(vhost)?.exchange(name)?;
        Some(End::Exchange(x.kind, x.durable))
    };
    let queue_end = |vhost: &str, name: &str| -> Option<End> {
        if let Some(q) = new_queues.get(&(vhost, name)) {
            return Some(End::Queue(q.spec.durable, None));
        }
        let q = now.vhost(vhost)?.queue(name)?;
        Some(End::Queue(q.storage_id.is_some(), Some(q)))
    };
    // Bindings the document adds, by identity (the same binding twice is one).
    let mut planned: HashSet<(&str, &str, &Destination, &str, Vec<u8>)> = HashSet::new();
    for b in &plan.bindings {
        let source = exchange_end(&b.vhost, &b.source);
        let destination = match &b.destination {
            Destination::Queue(q) => {
                // A binding to a queue the document names but leaves out goes with it.
                if plan.skipped.why(ObjectKind::Queue, &b.vhost, q).is_some() {
                    None
                } else {
                    queue_end(&b.vhost, q)
                }
            }
            Destination::Exchange(x) if x.is_empty() => {
                return Err(b.at.wrap(default_exchange_refused()))
            }
            Destination::Exchange(x) => exchange_end(&b.vhost, x),
        };
        let (Some(End::Exchange(kind, source_durable)), Some(destination_end)) =
            (source, destination)
        else {
            changes.not_honoured.push(missing_end(plan, b, now));
            continue;
        };
        Router::new(kind)
            .validate(&b.key, &b.arguments)
            .map_err(|e| b.at.invalid(e))?;
        let destination_stored = match destination_end {
            End::Exchange(_, durable) => durable,
            End::Queue(stored, existing) => {
                if let Some(q) = existing {
                    q.check_access(IMPORT_CONNECTION_ID, &b.vhost)
                        .map_err(|e| b.at.wrap(e))?;
                }
                stored
            }
        };
        let binding = Binding {
            destination: b.destination.clone(),
            binding_key: b.key.clone(),
            arguments: b.arguments.clone(),
        };
        let exists = now
            .vhost(&b.vhost)
            .and_then(|vh| vh.exchange(&b.source))
            .is_some_and(|x| x.router().contains(&binding));
        let identity = (
            b.vhost.as_str(),
            b.source.as_str(),
            &b.destination,
            b.key.as_str(),
            encode_arguments(&b.arguments),
        );
        if exists || !planned.insert(identity) {
            c.unchanged += 1;
            continue;
        }
        changes.bindings.push(NewBinding {
            item: b,
            stored: source_durable && destination_stored,
        });
        c.created += 1;
    }
    Ok(c)
}

/// The type of a built-in `amq.*` exchange every vhost has ([`STANDARD_EXCHANGES`]).
fn built_in_exchange(name: &str) -> Option<ExchangeKind> {
    STANDARD_EXCHANGES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, kind)| *kind)
}

/// The line reporting a binding left out because an end is missing: not imported from
/// the document (and why), or neither in the document nor on the server.
fn missing_end(plan: &Plan<'_>, b: &BindingItem<'_>, now: &Current<'_>) -> String {
    let on_server = |kind: ObjectKind, name: &str| match now.vhost(&b.vhost) {
        Some(vh) => match kind {
            ObjectKind::Queue => vh.queue(name).is_some(),
            ObjectKind::Exchange => vh.exchange(name).is_some(),
        },
        // A vhost the import creates has the built-in exchanges.
        None => kind == ObjectKind::Exchange && built_in_exchange(name).is_some(),
    };
    let in_document = |kind: ObjectKind, name: &str| match kind {
        ObjectKind::Queue => plan
            .queues
            .iter()
            .any(|q| q.vhost == b.vhost && q.spec.name == name),
        ObjectKind::Exchange => plan
            .exchanges
            .iter()
            .any(|x| x.vhost == b.vhost && x.spec.name == name),
    };
    let (role, kind, name) = {
        let source_missing = !in_document(ObjectKind::Exchange, &b.source)
            && !on_server(ObjectKind::Exchange, &b.source);
        match &b.destination {
            _ if source_missing => ("source", ObjectKind::Exchange, b.source.as_str()),
            Destination::Queue(q) => ("destination", ObjectKind::Queue, &**q),
            Destination::Exchange(x) => ("destination", ObjectKind::Exchange, &**x),
        }
    };
    let what = format!("its {role} {} '{name}'", kind.word());
    match (plan.skipped.why(kind, &b.vhost, name), kind) {
        (Some(why), _) => format!(
            "{}: not imported: {what} {why} and is not imported",
            b.at.label()
        ),
        (None, ObjectKind::Queue) => format!(
            "{}: not imported: {what} is neither in the definitions nor on the server \
             (RabbitMQ exports the bindings of exclusive queues, not the queues)",
            b.at.label()
        ),
        (None, ObjectKind::Exchange) => format!(
            "{}: not imported: {what} is neither in the definitions nor on the server \
             (RabbitMQ does not export internal exchanges)",
            b.at.label()
        ),
    }
}
