//! Import: all or nothing. The whole document is validated first (a bad value is a 406
//! naming the element, e.g. `queues[3] (vhost '/', name 'q'): ...x-max-length...`), then
//! checked against what exists (an existing exchange or queue with other properties is
//! RabbitMQ's 406 `inequivalent arg`; a vhost limit the file would pass is the 406 a
//! declaration gets), then applied in three steps (`apply`): the stores of the new durable
//! queues, one `meta.db` transaction holding every durable definition of the file, then
//! memory, which cannot fail. A failure before the commit — an invalid element, a limit,
//! a full disk, too many open files, the commit itself — leaves the broker as it was; a
//! crash (kill -9) before the commit leaves nothing of the import after the restart (the
//! new stores are orphans the start removes), after it all of it. Importing the same
//! document twice changes nothing.
//!
//! What RelayMQ cannot honour is reported by name in the [`ImportSummary`] and the rest is
//! imported: queues and exchanges named `amq.*` (server-named queues of clients, built-in
//! exchanges; RabbitMQ skips them too) and the bindings to them, bindings whose source or
//! destination is neither in the document nor on the server (RabbitMQ exports the bindings
//! of exclusive queues but not the queues, and no internal exchange), topic permissions,
//! runtime parameters (federation, shovel, ...) other than `vhost-limits`, global
//! parameters other than `cluster_name` and RabbitMQ's internal ones, policy definition
//! keys RelayMQ keeps but does not act on (`ha-mode`, ...) and streams (not imported, nor
//! their bindings); quorum queues are imported as quorum queues.
//! Vhost metadata (description, tags, default queue type), vhost limits (the
//! `vhost-limits` parameters, or a `vhosts` element's `limits`) and user limits (merged
//! into the user's, as RabbitMQ's `put_user`) are imported. Unknown fields are ignored, as
//! RabbitMQ ignores them.
//!
//! Locks: the slow part (creating stores) runs with none. Then the changes lock of every
//! vhost the document touches (by name), then the broker's vhost map for writing, the
//! decision is made again against the broker as it now is, committed and applied; the map
//! is released once the new vhosts are in it, the changes locks once the rest is applied
//! (docs/architecture.md §8's order: changes lock before the vhost map).

use super::apply::{apply_access, apply_to_vhost, batch, Stores};
use super::changes::{decide, Changes, Current};
use super::model;
use super::plan::Plan;
use super::summary::ImportSummary;
use super::validate::validate;
use crate::broker::queue::{Leaving, Queue};
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::error::{BrokerError, ReplyCode};
use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

/// How many times the import takes its locks when vhosts it touches are created or
/// deleted by others in between (each time it looks again); past that it gives up,
/// having applied nothing.
const LOCK_ATTEMPTS_MAX: usize = 3;

/// What is appended to the text of every error of an import: nothing of the file was
/// applied (docs/operations.md, "How an import runs").
const NOTHING_APPLIED: &str = "; nothing was imported";

/// Imports a definitions document (`relaymq-cli import definitions`) for the
/// administrator `importer`, all or nothing.
///
/// # Errors
/// Nothing is applied whatever the error, and its text ends with "; nothing was
/// imported": 406 PRECONDITION_FAILED for a document that is not valid (naming the element
/// and the field), an existing exchange or queue with other properties, a vhost limit the
/// file would pass; 404 for a permission, policy, exchange or queue in a vhost, or a
/// permission of a user, neither in the file nor on the broker; 405 for a binding to
/// another connection's exclusive queue; 541 INTERNAL_ERROR when a queue's store cannot
/// be created (disk full, too many open files) or `meta.db` refuses the commit.
pub fn import(broker: &Broker, json: &str, importer: &str) -> Result<ImportSummary, BrokerError> {
    import_within(broker, json, importer, super::DEFINITIONS_JSON_BYTES_MAX)
}

/// As [`import()`], for a document of at most `bytes_max` bytes (the management API's
/// uploads are larger than a native-protocol payload).
///
/// # Errors
/// As [`import()`].
pub fn import_within(
    broker: &Broker,
    json: &str,
    importer: &str,
    bytes_max: usize,
) -> Result<ImportSummary, BrokerError> {
    let started = Instant::now();
    let result = import_all_or_nothing(broker, json, importer, bytes_max);
    match &result {
        Ok(summary) => {
            for line in &summary.not_honoured {
                log::warn!("definitions import by '{importer}': {line}");
            }
            log::info!(
                "definitions imported by '{importer}' in {} ms: {}; {} not honoured",
                started.elapsed().as_millis(),
                summary.created_line(),
                summary.not_honoured.len()
            );
        }
        Err(e) => log::warn!(
            "definitions import by '{importer}' refused, nothing applied: {}",
            e.text
        ),
    }
    result.map_err(|e| BrokerError::new(e.code, format!("{}{NOTHING_APPLIED}", e.text)))
}

fn import_all_or_nothing(
    broker: &Broker,
    json: &str,
    importer: &str,
    bytes_max: usize,
) -> Result<ImportSummary, BrokerError> {
    let doc = model::parse_within(json, bytes_max)?;
    let mut summary = ImportSummary::default();
    let plan = validate(&doc, &mut summary)?;
    // A first decision without locks finds the new durable queues, whose stores (files,
    // the slow part) are created before any lock is taken.
    let snapshot: HashMap<String, Arc<VirtualHost>> = broker
        .vhosts()
        .into_iter()
        .map(|vh| (vh.name.to_string(), vh))
        .collect();
    let first = decide(&current(broker, &snapshot), &plan, importer)?;
    let mut stores = Stores::new(broker.durability().cloned());
    let created = stores.create_missing(&first);
    drop(first);
    let applied = created.and_then(|()| commit_and_apply(broker, &plan, importer, &mut stores));
    // Stores no queue took: all of them when the import failed.
    stores.discard();
    let (counts, warnings, not_honoured, dropped) = applied?;
    for (vh, leaving) in dropped {
        vh.dead_letter_dropped(leaving);
    }
    for (section, c) in counts {
        summary.count(section, c);
    }
    for w in warnings {
        summary.warn(w);
    }
    for line in not_honoured {
        summary.skip(line);
    }
    Ok(summary)
}

/// What the broker state the decision reads is made of.
fn current<'b>(broker: &'b Broker, vhosts: &'b HashMap<String, Arc<VirtualHost>>) -> Current<'b> {
    Current {
        vhosts,
        users: broker.users(),
        limits: broker.limits(),
    }
}

/// Messages a lowered length limit dropped in each vhost (dead-lettered once every lock
/// is released).
type Dropped = Vec<(Arc<VirtualHost>, Vec<(Arc<Queue>, Vec<Leaving>)>)>;

/// What an applied import reports: counts per section, warnings, bindings left out, and
/// what its policies dropped.
type Applied = (
    Vec<(&'static str, super::summary::SectionCount)>,
    Vec<String>,
    Vec<String>,
    Dropped,
);

/// Takes the locks, decides again against the broker as it now is, commits and applies.
fn commit_and_apply(
    broker: &Broker,
    plan: &Plan<'_>,
    importer: &str,
    stores: &mut Stores,
) -> Result<Applied, BrokerError> {
    let names = plan.vhost_names();
    for _ in 0..LOCK_ATTEMPTS_MAX {
        // Sorted by name: the order every import takes them in.
        let held: Vec<Arc<VirtualHost>> = names.iter().filter_map(|n| broker.vhost(n)).collect();
        let guards: Vec<MutexGuard<'_, ()>> = held.iter().map(|vh| vh.changes()).collect();
        let mut map = broker.vhosts_for_change();
        let unchanged =
            names.iter().all(
                |n| match (map.get(*n), held.iter().find(|vh| &*vh.name == *n)) {
                    (Some(now), Some(locked)) => Arc::ptr_eq(now, locked),
                    (None, None) => true,
                    _ => false,
                },
            );
        if !unchanged {
            // A vhost of the document was created or deleted meanwhile: look again.
            continue;
        }
        let changes = decide(&current(broker, &map), plan, importer)?;
        stores.create_missing(&changes)?;
        if let Some(d) = broker.durability() {
            let rows = batch(&changes, stores);
            if !rows.is_empty() {
                d.meta("the imported definitions", |m| m.write_batch(&rows))?;
            }
        }
        // Committed: from here on nothing fails.
        apply_access(broker, &changes);
        let mut dropped: Dropped = Vec::new();
        for name in &changes.vhosts {
            let vh = Arc::new(broker.new_vhost(name));
            let out = apply_to_vhost(&vh, &changes, stores);
            map.insert(name.to_string(), Arc::clone(&vh));
            log::info!("vhost '{name}' created from imported definitions");
            dropped.push((vh, out));
        }
        drop(map);
        for vh in &held {
            let out = apply_to_vhost(vh, &changes, stores);
            dropped.push((Arc::clone(vh), out));
        }
        drop(guards);
        if let Some(links) = broker.links() {
            for p in &changes.parameters {
                if p.component == crate::broker::shovel_definition::SHOVEL_COMPONENT {
                    links.shovel_set(&p.vhost, &p.name, &p.value);
                }
            }
        }
        let Changes {
            counts,
            warnings,
            not_honoured,
            ..
        } = changes;
        return Ok((counts, warnings, not_honoured, dropped));
    }
    Err(BrokerError::new(
        ReplyCode::InternalError,
        format!(
            "vhosts of the definitions were created or deleted by others {LOCK_ATTEMPTS_MAX} \
             times while the import ran"
        ),
    ))
}
