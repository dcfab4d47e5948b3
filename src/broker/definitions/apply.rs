//! Applying decided [`Changes`] in three steps, each undone by dropping what it made until
//! the second is committed (docs/operations.md, "How an import runs"):
//!
//! 1. [`Stores`]: the files of every new durable queue (the only step that can run out of
//!    a resource part-way: disk space, open files); on failure the ones made are removed.
//! 2. [`batch`]: every durable definition in one `meta.db` transaction (`MetaBatch`),
//!    committed or not at all.
//! 3. Memory: [`apply_access`] and [`apply_to_vhost`], which cannot fail — every check a
//!    declaration would make was made by `changes::decide`.

use super::changes::{exchange_of, Changes, NewBinding};
use super::plan::QueueItem;
use crate::auth::users::User;
use crate::broker::exchange::Destination;
use crate::broker::limits::to_pairs;
use crate::broker::policy::Policy;
use crate::broker::queue::storage::QueueStorage;
use crate::broker::queue::{Leaving, Queue};
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::storage::durability::Durability;
use crate::storage::meta::{BindingDef, ExchangeDef, QueueDef};
use crate::storage::meta_batch::MetaBatch;
use crate::storage::meta_parameters::{GlobalParameterRow, ParameterRow};
use crate::storage::meta_policies::PolicyRow;
use crate::storage::meta_users::{PermissionRow, UserDef as UserRow};
use std::collections::HashMap;
use std::sync::Arc;

/// The stores of the new durable queues of an import, by (vhost, queue name): created
/// before the commit, handed to their queues after it, removed if the import fails.
pub(super) struct Stores {
    durability: Option<Arc<Durability>>,
    by_queue: HashMap<(String, String), (String, QueueStorage)>,
}

impl Stores {
    /// No store yet, for a broker with `durability` (none: an in-memory broker, whose
    /// queues have no store).
    pub(super) fn new(durability: Option<Arc<Durability>>) -> Stores {
        Stores {
            durability,
            by_queue: HashMap::new(),
        }
    }

    /// Creates the store of every new durable queue of `changes` that has none here yet.
    ///
    /// # Errors
    /// 541 naming the queue's element when a store cannot be created (a full disk, too
    /// many open files); the stores created until then stay here, for [`Stores::discard`].
    pub(super) fn create_missing(&mut self, changes: &Changes<'_>) -> Result<(), BrokerError> {
        let Some(d) = self.durability.clone() else {
            return Ok(());
        };
        for q in changes.queues.iter().filter(|q| q.spec.durable) {
            let key = (q.vhost.clone(), q.spec.name.clone());
            if self.by_queue.contains_key(&key) {
                continue;
            }
            let store = QueueStorage::create(&d, &q.spec.name).map_err(|e| q.at.wrap(e))?;
            self.by_queue.insert(key, store);
        }
        Ok(())
    }

    /// The id of the store of `q`.
    fn id(&self, q: &QueueItem<'_>) -> Option<&str> {
        self.by_queue
            .get(&(q.vhost.clone(), q.spec.name.clone()))
            .map(|(id, _)| id.as_str())
    }

    /// Takes the store of `q` (for the queue being created).
    fn take(&mut self, q: &QueueItem<'_>) -> Option<(String, QueueStorage)> {
        self.by_queue
            .remove(&(q.vhost.clone(), q.spec.name.clone()))
    }

    /// Closes and removes every store still here: all of them when the import failed,
    /// those its queues did not need (another client created one meanwhile) when it
    /// succeeded.
    pub(super) fn discard(self) {
        let Some(d) = self.durability else { return };
        for (_, (id, storage)) in self.by_queue {
            storage.discard(&d, &id);
        }
    }
}

/// The durable definitions of `changes` as one `meta.db` batch: vhosts, users,
/// permissions and policies, durable exchanges, durable queues with the ids of their
/// `stores`, and bindings between durable ends.
pub(super) fn batch(changes: &Changes<'_>, stores: &Stores) -> MetaBatch {
    MetaBatch {
        vhosts: changes.vhosts.iter().map(|v| v.to_string()).collect(),
        users: changes
            .users
            .iter()
            .map(|u| UserRow {
                name: u.name.clone(),
                hash_algorithm: u.hash.algorithm.clone(),
                password_hash: u.hash.hash.clone(),
                tags: u.tags.clone(),
            })
            .collect(),
        permissions: changes
            .permissions
            .iter()
            .map(|p| PermissionRow {
                user: p.user.clone(),
                vhost: p.vhost.clone(),
                configure: p.def.configure.clone(),
                write: p.def.write.clone(),
                read: p.def.read.clone(),
            })
            .collect(),
        policies: changes
            .policies
            .iter()
            .map(|p| p.policy.def.to_row())
            .collect::<Vec<PolicyRow>>(),
        exchanges: changes
            .exchanges
            .iter()
            .filter(|x| x.spec.durable)
            .map(|x| ExchangeDef {
                vhost: x.vhost.clone(),
                name: x.spec.name.clone(),
                kind: x.kind.as_str().to_string(),
                auto_delete: x.spec.auto_delete,
                internal: x.spec.internal,
                arguments: x.spec.arguments.clone(),
            })
            .collect(),
        queues: changes
            .queues
            .iter()
            .filter_map(|q| {
                Some(QueueDef {
                    vhost: q.vhost.clone(),
                    name: q.spec.name.clone(),
                    id: stores.id(q)?.to_string(),
                    auto_delete: q.spec.auto_delete,
                    arguments: q.spec.arguments.clone(),
                    paused: false,
                })
            })
            .collect(),
        bindings: changes
            .bindings
            .iter()
            .filter(|b| b.stored)
            .map(|b| {
                let (destination, destination_is_exchange) = match &b.item.destination {
                    Destination::Queue(q) => (q.to_string(), false),
                    Destination::Exchange(x) => (x.to_string(), true),
                };
                BindingDef {
                    vhost: b.item.vhost.clone(),
                    source: b.item.source.clone(),
                    destination,
                    destination_is_exchange,
                    routing_key: b.item.key.clone(),
                    arguments: b.item.arguments.clone(),
                }
            })
            .collect(),
        vhost_metadata: changes
            .vhost_metadata
            .iter()
            .map(|(v, m)| m.to_row(v))
            .collect(),
        vhost_limits: changes
            .vhost_limits
            .iter()
            .map(|(v, l)| (v.to_string(), to_pairs(l)))
            .collect(),
        user_limits: changes
            .user_limits
            .iter()
            .map(|(u, l)| (u.to_string(), to_pairs(l)))
            .collect(),
        parameters: changes
            .parameters
            .iter()
            .map(|p| ParameterRow {
                vhost: p.vhost.clone(),
                component: p.component.clone(),
                name: p.name.clone(),
                value: p.value.to_string(),
            })
            .collect(),
        global_parameters: changes
            .global_parameters
            .iter()
            .map(|(n, v)| GlobalParameterRow {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        operator_policies: changes
            .operator_policies
            .iter()
            .map(|p| p.policy.def.to_row())
            .collect(),
    }
}

/// Puts the users and permissions of `changes` in the broker's registry (after their
/// commit), logging each.
pub(super) fn apply_access(broker: &Broker, changes: &Changes<'_>) {
    for u in &changes.users {
        let replaced = broker.users().user(&u.name).is_some();
        broker.users().put_user(User {
            name: u.name.clone(),
            hash: u.hash.clone(),
            tags: u.tags.clone(),
        });
        let how = if replaced { "replaced" } else { "created" };
        log::info!("user '{}' {how} from imported definitions", u.name);
    }
    if !changes.global_parameters.is_empty() {
        broker.install_global_parameters(
            changes
                .global_parameters
                .iter()
                .map(|(n, v)| (n.to_string(), (*v).clone()))
                .collect(),
        );
        for (n, _) in &changes.global_parameters {
            log::info!("global parameter '{n}' set from imported definitions");
        }
    }
    for (u, limits) in &changes.user_limits {
        broker.users().put_limits(u, limits.clone());
        log::info!("limits of user '{u}' set from imported definitions");
    }
    for p in &changes.permissions {
        // The patterns were compiled when the document was validated: this cannot fail.
        match broker
            .users()
            .put_permission(&p.user, &p.vhost, p.def.clone())
        {
            Ok(()) => log::info!(
                "permissions of user '{}' in vhost '{}' set from imported definitions",
                p.user,
                p.vhost
            ),
            Err(e) => log::error!(
                "permissions of user '{}' in vhost '{}' not set in memory: {}",
                p.user,
                p.vhost,
                e.text
            ),
        }
    }
}

/// Applies the part of `changes` in `vh` to memory: policies first (so the new queues get
/// theirs), exchanges, queues with their `stores`, bindings. The caller holds `vh`'s
/// changes lock, or `vh` is a new vhost no one else sees yet. Returns what lowered length
/// limits dropped, for [`VirtualHost::dead_letter_dropped`] once the lock is released.
pub(super) fn apply_to_vhost(
    vh: &VirtualHost,
    changes: &Changes<'_>,
    stores: &mut Stores,
) -> Vec<(Arc<Queue>, Vec<Leaving>)> {
    let name = &*vh.name;
    if let Some((_, m)) = changes.vhost_metadata.iter().find(|(v, _)| *v == name) {
        vh.put_metadata(m.clone());
    }
    if let Some((_, limits)) = changes.vhost_limits.iter().find(|(v, _)| *v == name) {
        vh.put_own_limits(limits.clone());
        log::info!("limits of vhost '{name}' set from imported definitions");
    }
    let policies: Vec<Policy> = changes
        .policies
        .iter()
        .filter(|p| p.policy.def.vhost == name)
        .map(|p| {
            log::info!(
                "policy '{}' in vhost '{name}' set from imported definitions",
                p.policy.def.name
            );
            p.policy.clone()
        })
        .collect();
    let mut dropped = vh.install_policies(policies);
    let operator_policies: Vec<Policy> = changes
        .operator_policies
        .iter()
        .filter(|p| p.policy.def.vhost == name)
        .map(|p| {
            log::info!(
                "operator policy '{}' in vhost '{name}' set from imported definitions",
                p.policy.def.name
            );
            p.policy.clone()
        })
        .collect();
    dropped.extend(vh.install_operator_policies(operator_policies));
    vh.install_parameters(
        changes
            .parameters
            .iter()
            .filter(|p| p.vhost == name)
            .map(|p| {
                if p.component != crate::broker::shovel_definition::SHOVEL_COMPONENT {
                    log::warn!(
                        "runtime parameter '{}' of component '{}' in vhost '{name}' \
                         imported: stored but not acted on by RelayMQ",
                        p.name,
                        p.component
                    );
                }
                (p.component.clone(), p.name.clone(), p.value.clone())
            })
            .collect(),
    );
    for x in changes.exchanges.iter().filter(|x| x.vhost == name) {
        vh.insert_exchange(vh.with_delayed_store_or_memory(exchange_of(x), true));
    }
    for q in changes.queues.iter().filter(|q| q.vhost == name) {
        let stored = stores.take(q);
        let queue = vh.new_queue(&q.spec.name, &q.spec, None, stored);
        vh.apply_policies(&queue);
        vh.insert_queue(queue);
    }
    for NewBinding { item: b, .. } in changes.bindings.iter().filter(|b| b.item.vhost == name) {
        let added = vh.restore_binding(
            &b.source,
            b.destination.clone(),
            b.key.clone(),
            b.arguments.clone(),
        );
        if !added {
            // Both ends were checked under the vhost's changes lock: not expected.
            log::error!("{}: an end vanished while it was imported", b.at.label());
        }
    }
    dropped
}
