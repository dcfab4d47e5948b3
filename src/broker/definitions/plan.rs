//! A definitions document once validated: one typed item per element to apply, each
//! keeping its [`Element`] so errors while applying name it.

use super::model::Element;
use crate::auth::permission::PermissionDef;
use crate::broker::policy::PolicyDef;
use crate::broker::router::Destination;
use crate::broker::{ExchangeSpec, QueueSpec};
use crate::types::FieldTable;

/// A validated `vhosts` element.
pub(super) struct VhostDef {
    pub(super) name: String,
}

/// A validated `users` element.
pub(super) struct UserDef<'a> {
    pub(super) at: Element<'a>,
    pub(super) name: String,
    pub(super) algorithm: String,
    pub(super) hash: String,
    pub(super) tags: Vec<String>,
}

/// A validated `permissions` element.
pub(super) struct PermissionItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) user: String,
    pub(super) vhost: String,
    pub(super) def: PermissionDef,
}

/// A validated `policies` element.
pub(super) struct PolicyItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) def: PolicyDef,
}

/// A validated `exchanges` element.
pub(super) struct ExchangeItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) spec: ExchangeSpec,
}

/// A validated `queues` element.
pub(super) struct QueueItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) spec: QueueSpec,
}

/// A validated `bindings` element.
pub(super) struct BindingItem<'a> {
    pub(super) at: Element<'a>,
    pub(super) vhost: String,
    pub(super) source: String,
    pub(super) destination: Destination,
    pub(super) key: String,
    pub(super) arguments: FieldTable,
}

/// The whole document, validated.
pub(super) struct Plan<'a> {
    pub(super) vhosts: Vec<VhostDef>,
    pub(super) users: Vec<UserDef<'a>>,
    pub(super) permissions: Vec<PermissionItem<'a>>,
    pub(super) policies: Vec<PolicyItem<'a>>,
    pub(super) exchanges: Vec<ExchangeItem<'a>>,
    pub(super) queues: Vec<QueueItem<'a>>,
    pub(super) bindings: Vec<BindingItem<'a>>,
}
