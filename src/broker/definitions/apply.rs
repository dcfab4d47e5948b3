//! Applying a validated document, one section per function, in RabbitMQ's order: vhosts,
//! users, permissions, exchanges, queues, bindings. Each counts what it created and what
//! was already there, so importing twice changes nothing and says so.

use super::model::Element;
use super::plan::{
    BindingItem, ExchangeItem, PermissionItem, PolicyItem, QueueItem, UserDef, VhostDef,
};
use super::summary::SectionCount;
use crate::auth::permission::PermissionDef;
use crate::broker::access::Credential;
use crate::broker::Broker;
use crate::error::BrokerError;
use std::collections::HashMap;
use std::sync::Arc;

/// Connection id the import declares and binds as: no client connection has it, and the
/// import never creates exclusive queues.
const IMPORT_CONNECTION_ID: u64 = 0;

pub(super) fn apply_vhosts(
    broker: &Broker,
    vhosts: &[VhostDef],
) -> Result<SectionCount, BrokerError> {
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

pub(super) fn apply_users(
    broker: &Broker,
    users: &[UserDef<'_>],
) -> Result<SectionCount, BrokerError> {
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
                log::info!("user '{}' created from imported definitions", u.name);
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
                log::info!("user '{}' replaced from imported definitions", u.name);
                c.replaced += 1;
            }
        }
    }
    Ok(c)
}

pub(super) fn apply_permissions(
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
        let existing = current.get(&(p.user.clone(), p.vhost.clone()));
        if existing == Some(&p.def) {
            c.unchanged += 1;
            continue;
        }
        broker
            .set_permission(&p.user, &p.vhost, p.def.clone())
            .map_err(|e| p.at.wrap(e))?;
        log::info!(
            "permissions of user '{}' in vhost '{}' set from imported definitions",
            p.user,
            p.vhost
        );
        if existing.is_some() {
            c.replaced += 1;
        } else {
            c.created += 1;
        }
    }
    Ok(c)
}

/// Sets each policy that is not already there as written (RabbitMQ imports policies after
/// permissions and before queues, so the queues it declares get them at once).
pub(super) fn apply_policies(
    broker: &Broker,
    policies: &[PolicyItem<'_>],
) -> Result<SectionCount, BrokerError> {
    let mut c = SectionCount::default();
    let current = broker.policies();
    for p in policies {
        if current.contains(&p.def) {
            c.unchanged += 1;
            continue;
        }
        let existed = current
            .iter()
            .any(|d| d.vhost == p.def.vhost && d.name == p.def.name);
        broker.set_policy(p.def.clone()).map_err(|e| p.at.wrap(e))?;
        log::info!(
            "policy '{}' in vhost '{}' set from imported definitions",
            p.def.name,
            p.def.vhost
        );
        if existed {
            c.replaced += 1;
        } else {
            c.created += 1;
        }
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

pub(super) fn apply_exchanges(
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

pub(super) fn apply_queues(
    broker: &Broker,
    queues: &[QueueItem<'_>],
) -> Result<SectionCount, BrokerError> {
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

pub(super) fn apply_bindings(
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
