//! Import: validates a whole definitions document first (a bad value is a 406 naming the
//! element, e.g. `queues[3] (vhost '/', name 'q'): ...x-max-length...`), checks it against
//! what exists (an existing exchange or queue with other properties is RabbitMQ's 406
//! PRECONDITION_FAILED `inequivalent arg`), then applies it in RabbitMQ's order: vhosts,
//! users, permissions, policies, exchanges, queues, bindings. Importing the same document
//! twice changes nothing.
//!
//! What RelayMQ cannot honour is reported by name in the [`ImportSummary`] and the rest is
//! imported: topic permissions, runtime parameters (federation, shovel, ...), global
//! parameters other than `cluster_name` and RabbitMQ's internal ones, user and vhost
//! limits, policy definition keys RelayMQ keeps but does not act on (`ha-mode`, ...), queue arguments RelayMQ does
//! not implement (`x-single-active-consumer` true: the queue is imported without it),
//! quorum queues (imported as classic queues) and streams (not imported, nor their
//! bindings). Vhost descriptions and tags are not kept, silently. Unknown fields are
//! ignored, as RabbitMQ ignores them.

use super::apply::{
    apply_bindings, apply_exchanges, apply_permissions, apply_policies, apply_queues, apply_users,
    apply_vhosts,
};
use super::model;
use super::plan::Plan;
use super::summary::ImportSummary;
use super::validate::validate;
use crate::broker::router::Destination;
use crate::broker::vhost::{exchange_equivalence, queue_equivalence};
use crate::broker::Broker;
use crate::error::BrokerError;
use std::collections::HashSet;

/// Imports a definitions document (`relaymq-cli import definitions`) for the
/// administrator `importer`.
///
/// # Errors
/// 406 PRECONDITION_FAILED for a document that is not valid (naming the element and the
/// field) or an existing exchange or queue with other properties (nothing is applied in
/// both cases); an error of the broker while applying (404, 541 when the store fails),
/// named after the element. Elements applied before such an error stay, as in RabbitMQ.
pub fn import(broker: &Broker, json: &str, importer: &str) -> Result<ImportSummary, BrokerError> {
    let doc = model::parse(json)?;
    let mut summary = ImportSummary::default();
    let mut plan = validate(&doc, &mut summary)?;
    check_equivalence(broker, &plan)?;
    drop_dangling_bindings(broker, &mut plan, &mut summary);
    // The file replaces users that exist (RabbitMQ's rule), the importing one included:
    // say so, since its next login needs the file's password.
    if let (Some(u), Some(existing)) = (
        plan.users.iter().find(|u| u.name == importer),
        broker.users().user(importer),
    ) {
        if existing.hash.algorithm != u.algorithm || existing.hash.hash != u.hash {
            summary.warn(format!(
                "user '{importer}' (you) was replaced by the file's: log in with the password \
                 it had where the file was exported"
            ));
        }
    }
    summary.count("vhosts", apply_vhosts(broker, &plan.vhosts)?);
    summary.count("users", apply_users(broker, &plan.users)?);
    summary.count("permissions", apply_permissions(broker, &plan.permissions)?);
    summary.count("policies", apply_policies(broker, &plan.policies)?);
    summary.count("exchanges", apply_exchanges(broker, &plan.exchanges)?);
    summary.count("queues", apply_queues(broker, &plan.queues)?);
    summary.count("bindings", apply_bindings(broker, &plan.bindings)?);
    log::info!(
        "definitions imported: {} not honoured",
        summary.not_honoured.len()
    );
    Ok(summary)
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
