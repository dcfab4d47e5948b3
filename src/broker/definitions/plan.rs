//! A definitions document once validated: one typed item per element to apply, each
//! keeping its [`Element`] so later errors name it, and the queues and exchanges the
//! document names but that are not imported (so bindings to them are left out too).

use super::model::Element;
use crate::auth::password::StoredHash;
use crate::auth::permission::PermissionDef;
use crate::broker::exchange::{Destination, ExchangeKind};
use crate::broker::limits::{LimitMap, VhostMetadata};
use crate::broker::policy::Policy;
use crate::broker::{ExchangeSpec, QueueSpec};
use crate::types::FieldTable;
use std::collections::{BTreeSet, HashMap};

/// A validated `vhosts` element.
pub(super) struct VhostDef {
    pub(super) name: String,
    /// Its description, tags and default queue type, when the element has any.
    pub(super) metadata: Option<VhostMetadata>,
    /// Its `limits`, when not empty (RabbitMQ 4.x writes them here and as a
    /// `vhost-limits` parameter; the parameter wins).
    pub(super) limits: Option<LimitMap>,
}

/// A validated `parameters` element of component `vhost-limits`: the vhost's limits,
/// replacing the ones it has (`rabbit_vhost_limit:set/3`).
pub(super) struct VhostLimitsItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) limits: LimitMap,
}

/// A validated `users` element, its hash checked.
pub(super) struct UserDef {
    pub(super) name: String,
    pub(super) hash: StoredHash,
    pub(super) tags: Vec<String>,
    /// Its `limits`, merged into the user's (`rabbit_auth_backend_internal:put_user/3`).
    pub(super) limits: LimitMap,
}

/// A validated `permissions` element, its patterns checked.
pub(super) struct PermissionItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) user: String,
    pub(super) vhost: String,
    pub(super) def: PermissionDef,
}

/// A validated `policies` element, compiled.
pub(super) struct PolicyItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) policy: Policy,
}

/// A validated `exchanges` element, its type checked.
pub(super) struct ExchangeItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) kind: ExchangeKind,
    pub(super) spec: ExchangeSpec,
}

/// A validated `queues` element, its arguments checked.
pub(super) struct QueueItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) spec: QueueSpec,
}

/// A validated `bindings` element (its arguments are checked against its source's type
/// once the source is known, document or server: `changes`).
pub(super) struct BindingItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) source: String,
    pub(super) destination: Destination,
    pub(super) key: String,
    pub(super) arguments: FieldTable,
}

/// What a skipped object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum ObjectKind {
    /// A queue.
    Queue,
    /// An exchange.
    Exchange,
}

impl ObjectKind {
    /// The word for it in messages.
    pub(super) fn word(self) -> &'static str {
        match self {
            ObjectKind::Queue => "queue",
            ObjectKind::Exchange => "exchange",
        }
    }
}

/// Queues and exchanges the document names but that are not imported, by (kind, vhost,
/// name), each with why (for the line reporting a binding left out because of it).
#[derive(Default)]
pub(super) struct Skipped {
    why: HashMap<(ObjectKind, String, String), &'static str>,
}

impl Skipped {
    /// Records that an object is not imported, and why (`"is a stream"`).
    pub(super) fn insert(&mut self, kind: ObjectKind, vhost: &str, name: &str, why: &'static str) {
        self.why
            .insert((kind, vhost.to_string(), name.to_string()), why);
    }

    /// Why the object is not imported, when it is not.
    pub(super) fn why(&self, kind: ObjectKind, vhost: &str, name: &str) -> Option<&'static str> {
        self.why
            .get(&(kind, vhost.to_string(), name.to_string()))
            .copied()
    }
}

/// A validated `parameters` element of a component RelayMQ stores but does not act on
/// (`crate::broker::parameters::STORED_COMPONENTS`).
pub(super) struct ParameterItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) component: String,
    pub(super) name: String,
    pub(super) value: serde_json::Value,
}

/// The whole document, validated.
pub(super) struct Plan<'a> {
    pub(super) vhosts: Vec<VhostDef>,
    pub(super) users: Vec<UserDef>,
    pub(super) permissions: Vec<PermissionItem<'a>>,
    pub(super) vhost_limits: Vec<VhostLimitsItem<'a>>,
    pub(super) policies: Vec<PolicyItem<'a>>,
    /// `parameters` elements of component `operator_policy`, compiled.
    pub(super) operator_policies: Vec<PolicyItem<'a>>,
    /// Other stored `parameters` elements.
    pub(super) parameters: Vec<ParameterItem<'a>>,
    /// `global_parameters` elements other than RabbitMQ's internal ones, (name, value).
    pub(super) global_parameters: Vec<(String, serde_json::Value)>,
    pub(super) exchanges: Vec<ExchangeItem<'a>>,
    pub(super) queues: Vec<QueueItem<'a>>,
    pub(super) bindings: Vec<BindingItem<'a>>,
    pub(super) skipped: Skipped,
}

impl Plan<'_> {
    /// Every vhost the document creates or puts something in, sorted (the order in which
    /// their changes locks are taken).
    pub(super) fn vhost_names(&self) -> BTreeSet<&str> {
        let mut all = BTreeSet::new();
        all.extend(self.vhosts.iter().map(|v| v.name.as_str()));
        all.extend(self.permissions.iter().map(|p| p.vhost.as_str()));
        all.extend(self.vhost_limits.iter().map(|l| l.vhost.as_str()));
        all.extend(self.policies.iter().map(|p| p.policy.def.vhost.as_str()));
        all.extend(
            self.operator_policies
                .iter()
                .map(|p| p.policy.def.vhost.as_str()),
        );
        all.extend(self.parameters.iter().map(|p| p.vhost.as_str()));
        all.extend(self.exchanges.iter().map(|x| x.vhost.as_str()));
        all.extend(self.queues.iter().map(|q| q.vhost.as_str()));
        all.extend(self.bindings.iter().map(|b| b.vhost.as_str()));
        all
    }
}
