//! The Prometheus page (`GET /metrics`): per-queue, per-vhost, per-shovel and
//! broker-wide metrics in the text format ([`crate::metrics::text`]).
//!
//! Names follow RabbitMQ's `rabbitmq_prometheus` plugin with `relaymq_` for `rabbitmq_`
//! where it has the metric (`relaymq_queue_messages_ready`,
//! `relaymq_global_messages_confirmed_total`, ...), so dashboards port with a rename; the
//! full list is in `docs/operations.md`, "Metrics".
//!
//! Cost: no broker-wide lock is held while the page is written. The vhost map's read lock
//! is held while it is copied (a list of `Arc`s), each vhost's queue map's likewise, then
//! each queue's own lock (and its store's) only while its counters are read: a scrape of
//! 10,000 queues takes each queue lock once, for a few field copies.

use crate::broker::queue::QueueStats;
use crate::broker::Broker;
use crate::links::shovel::{ShovelState, ShovelStatus};
use crate::metrics::text::{Exposition, Kind};
use crate::metrics::{EventSnapshot, DEAD_LETTER_REASONS};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Bytes reserved per queue when sizing the page (nine samples of ~90 bytes).
const PAGE_BYTES_PER_QUEUE: usize = 1024;

/// Bytes reserved for the page's broker-wide and per-vhost part.
const PAGE_BYTES_FIXED: usize = 16 * 1024;

/// One queue's numbers, read under its lock.
struct QueueRow {
    vhost: Arc<str>,
    name: Arc<str>,
    stats: QueueStats,
    disk_bytes: u64,
    /// Paused by an operator (docs/lifecycle.md, "Pausing a queue").
    paused: bool,
}

/// One vhost's numbers.
struct VhostRow {
    name: Arc<str>,
    connections: u64,
    channels: u64,
    queues: u64,
    events: EventSnapshot,
}

/// A per-queue metric: name, type, help and how to read it from a row.
type QueueMetric = (&'static str, Kind, &'static str, fn(&QueueRow) -> u64);

const QUEUE_METRICS: [QueueMetric; 10] = [
    (
        "relaymq_queue_messages_ready",
        Kind::Gauge,
        "Messages ready to be delivered to consumers",
        |r| r.stats.ready as u64,
    ),
    (
        "relaymq_queue_messages_unacked",
        Kind::Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        |r| r.stats.unacked as u64,
    ),
    (
        "relaymq_queue_messages",
        Kind::Gauge,
        "Messages ready, unacknowledged and waiting for a delayed retry",
        |r| (r.stats.ready + r.stats.unacked + r.stats.delayed) as u64,
    ),
    (
        "relaymq_queue_consumers",
        Kind::Gauge,
        "Consumers on the queue",
        |r| r.stats.consumers as u64,
    ),
    (
        "relaymq_queue_messages_published_total",
        Kind::Counter,
        "Messages enqueued",
        |r| r.stats.published,
    ),
    (
        "relaymq_queue_messages_delivered_total",
        Kind::Counter,
        "Messages delivered to consumers or fetched with basic.get",
        |r| r.stats.delivered,
    ),
    (
        "relaymq_queue_messages_acked_total",
        Kind::Counter,
        "Messages acknowledged by consumers",
        |r| r.stats.acked,
    ),
    (
        "relaymq_queue_messages_redelivered_total",
        Kind::Counter,
        "Deliveries of messages delivered before (redelivered flag set)",
        |r| r.stats.redelivered,
    ),
    (
        "relaymq_queue_disk_bytes",
        Kind::Gauge,
        "Bytes of the queue's segment and ack-log files on disk",
        |r| r.disk_bytes,
    ),
    (
        "relaymq_queue_messages_delayed",
        Kind::Gauge,
        "Returned messages waiting for the quorum queue's delayed retry",
        |r| r.stats.delayed as u64,
    ),
];

/// One delayed-message exchange's numbers.
struct DelayedRow {
    vhost: Arc<str>,
    name: Arc<str>,
    waiting: u64,
    /// The earliest due time, ms since the Unix epoch.
    next_due_ms: Option<u64>,
}

/// A per-vhost gauge: name, help and how to read it from a row.
type VhostMetric = (&'static str, &'static str, fn(&VhostRow) -> u64);

/// A per-vhost event metric: name (with `relaymq_vhost_` / `relaymq_global_` prefix
/// added), help and how to read it.
type EventMetric = (&'static str, &'static str, fn(&EventSnapshot) -> u64);

const EVENT_METRICS: [EventMetric; 4] = [
    (
        "messages_confirmed_total",
        "Messages confirmed to publishers with basic.ack",
        |e| e.confirmed,
    ),
    (
        "messages_nacked_total",
        "Messages confirmed to publishers with basic.nack (not stored)",
        |e| e.nacked,
    ),
    (
        "messages_unroutable_returned_total",
        "Mandatory messages no queue took, returned with basic.return",
        |e| e.returned,
    ),
    (
        "messages_unroutable_dropped_total",
        "Messages no queue took that were not mandatory, dropped",
        |e| e.unroutable_dropped,
    ),
];

/// Builds the whole page.
pub fn render(broker: &Broker) -> String {
    let vhosts = broker.vhosts();
    let connections = broker.connections();
    let mut per_vhost: HashMap<&str, (u64, u64)> = HashMap::new();
    let mut channels_total = 0u64;
    for c in &connections {
        let ch = c.channels.load(Ordering::Relaxed) as u64;
        channels_total += ch;
        let e = per_vhost.entry(c.vhost.as_str()).or_default();
        e.0 += 1;
        e.1 += ch;
    }
    let mut queues: Vec<QueueRow> = Vec::new();
    let mut delayed: Vec<DelayedRow> = Vec::new();
    let mut vhost_rows: Vec<VhostRow> = Vec::with_capacity(vhosts.len());
    for vh in &vhosts {
        for e in vh.all_exchanges() {
            if let Some(d) = e.delayed() {
                delayed.push(DelayedRow {
                    vhost: Arc::clone(&vh.name),
                    name: Arc::clone(&e.name),
                    waiting: d.waiting() as u64,
                    next_due_ms: d.next_due_ms(),
                });
            }
        }
        let all = vh.all_queues();
        let (conns, chans) = per_vhost.get(&*vh.name).copied().unwrap_or_default();
        vhost_rows.push(VhostRow {
            name: Arc::clone(&vh.name),
            connections: conns,
            channels: chans,
            queues: all.len() as u64,
            events: vh.counters().snapshot(),
        });
        queues.reserve(all.len());
        for q in all {
            queues.push(QueueRow {
                vhost: Arc::clone(&vh.name),
                name: Arc::clone(&q.name),
                stats: q.stats(),
                disk_bytes: q.storage.as_ref().map_or(0, |s| s.stats().bytes_on_disk),
                paused: q.is_paused(),
            });
        }
    }
    vhost_rows.sort_by(|a, b| a.name.cmp(&b.name));
    queues.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));

    let mut page =
        Exposition::with_capacity(PAGE_BYTES_FIXED + queues.len() * PAGE_BYTES_PER_QUEUE);
    write_global(
        &mut page,
        broker,
        &queues,
        connections.len() as u64,
        channels_total,
    );
    write_vhosts(&mut page, &vhost_rows);
    for (name, kind, help, read) in QUEUE_METRICS {
        page.family(name, kind, help);
        for r in &queues {
            page.sample(name, &[("vhost", &r.vhost), ("queue", &r.name)], read(r));
        }
    }
    write_delayed(&mut page, &mut delayed);
    write_shovels(&mut page, broker);
    page.finish()
}

/// The delayed-message exchanges' metrics: messages waiting and the earliest due time (the
/// families are written without samples when there is no such exchange, as the queues').
fn write_delayed(page: &mut Exposition, rows: &mut [DelayedRow]) {
    rows.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let waiting = "relaymq_exchange_messages_delayed";
    page.family(
        waiting,
        Kind::Gauge,
        "Messages an x-delayed-message exchange holds until their due time",
    );
    for r in rows.iter() {
        page.sample(
            waiting,
            &[("vhost", &r.vhost), ("exchange", &r.name)],
            r.waiting,
        );
    }
    let next = "relaymq_exchange_next_delayed_at_seconds";
    page.family(
        next,
        Kind::Gauge,
        "Due time of the earliest message an x-delayed-message exchange holds, Unix seconds",
    );
    for r in rows.iter() {
        if let Some(ms) = r.next_due_ms {
            page.sample(
                next,
                &[("vhost", &r.vhost), ("exchange", &r.name)],
                ms / 1000,
            );
        }
    }
}

/// A per-shovel metric: name, type, help and how to read it from a status (`None`: no
/// sample for that shovel).
type ShovelMetric = (
    &'static str,
    Kind,
    &'static str,
    fn(&ShovelStatus) -> Option<u64>,
);

/// Whether the shovel moves messages now (RabbitMQ's `running` and `blocked` states).
fn shovel_running(s: &ShovelStatus) -> bool {
    s.state == ShovelState::Running
}

const SHOVEL_METRICS: [ShovelMetric; 5] = [
    (
        "relaymq_shovel_messages_forwarded_total",
        Kind::Counter,
        "Messages the shovel published to its destination since it was set",
        |s| Some(s.forwarded),
    ),
    (
        "relaymq_shovel_messages_pending",
        Kind::Gauge,
        "Messages the shovel forwarded and has not yet settled at its source (awaiting confirms)",
        |s| Some(s.pending),
    ),
    (
        "relaymq_shovel_source_messages",
        Kind::Gauge,
        "Ready messages in the source queue of a running shovel whose source is this broker",
        |s| s.backlog.filter(|_| shovel_running(s)),
    ),
    (
        "relaymq_shovel_running",
        Kind::Gauge,
        "1 while the shovel is running or blocked, else 0 (starting, terminated)",
        |s| Some(u64::from(shovel_running(s))),
    ),
    (
        "relaymq_shovel_blocked",
        Kind::Gauge,
        "1 while the shovel's destination blocks publishers, else 0",
        |s| Some(u64::from(shovel_running(s) && s.blocked)),
    ),
];

/// The dynamic shovels' metrics (labels `vhost`, `shovel`) and their number; the families
/// are written without samples when there is no shovel, as the queues'.
fn write_shovels(page: &mut Exposition, broker: &Broker) {
    let mut rows = crate::links::Links::of(broker).map_or_else(Vec::new, |l| l.shovels.statuses());
    rows.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    gauge(
        page,
        "relaymq_shovels",
        "Dynamic shovels set (shovel runtime parameters), all vhosts",
        rows.len() as u64,
    );
    for (name, kind, help, read) in SHOVEL_METRICS {
        page.family(name, kind, help);
        for r in &rows {
            if let Some(v) = read(r) {
                page.sample(name, &[("vhost", &r.vhost), ("shovel", &r.name)], v);
            }
        }
    }
}

/// Broker-wide metrics.
fn write_global(
    page: &mut Exposition,
    broker: &Broker,
    queues: &[QueueRow],
    connections: u64,
    channels: u64,
) {
    page.family(
        "relaymq_build_info",
        Kind::Gauge,
        "RelayMQ version (always 1)",
    );
    page.sample(
        "relaymq_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    gauge(
        page,
        "relaymq_uptime_seconds",
        "Time since the broker started, seconds",
        broker.uptime().as_secs(),
    );
    let alarms = broker.alarms();
    let readings = alarms.readings();
    if let Some(rss) = crate::alarm::probe::process_rss_bytes().or(readings.mem_used_bytes) {
        gauge(
            page,
            "relaymq_process_resident_memory_bytes",
            "Resident memory of the broker process, bytes",
            rss,
        );
    }
    if let Some(limit) = readings.mem_limit_bytes {
        gauge(
            page,
            "relaymq_resident_memory_limit_bytes",
            "Resident memory above which the memory alarm blocks publishers, bytes",
            limit,
        );
    }
    if let Some(free) = readings.disk_free_bytes {
        gauge(
            page,
            "relaymq_disk_space_available_bytes",
            "Free space of the data directory's filesystem, bytes",
            free,
        );
    }
    gauge(
        page,
        "relaymq_disk_space_available_limit_bytes",
        "Free space below which the disk alarm blocks publishers, bytes",
        readings.disk_free_limit_bytes,
    );
    let bits = alarms.bits();
    gauge(
        page,
        "relaymq_alarms_memory_used_watermark",
        "1 while the memory alarm is set (publishers blocked), else 0",
        u64::from(bits & crate::alarm::MEMORY_ALARM != 0),
    );
    gauge(
        page,
        "relaymq_alarms_free_disk_space_watermark",
        "1 while the free-disk alarm is set (publishers blocked), else 0",
        u64::from(bits & crate::alarm::DISK_ALARM != 0),
    );
    write_fds(page, broker);
    gauge(
        page,
        "relaymq_connections",
        "Open client connections (both protocols, past the handshake)",
        connections,
    );
    let (opened, closed) = broker.connection_totals();
    counter(
        page,
        "relaymq_connections_opened_total",
        "Client connections opened",
        opened,
    );
    counter(
        page,
        "relaymq_connections_closed_total",
        "Client connections closed",
        closed,
    );
    gauge(page, "relaymq_channels", "Open channels", channels);
    gauge(page, "relaymq_queues", "Queues", queues.len() as u64);
    gauge(
        page,
        "relaymq_queues_paused",
        "Queues whose deliveries an operator paused",
        queues.iter().filter(|q| q.paused).count() as u64,
    );
    gauge(
        page,
        "relaymq_consumers",
        "Consumers",
        queues.iter().map(|q| q.stats.consumers as u64).sum(),
    );
    let events = broker.counters().snapshot();
    for (suffix, help, read) in EVENT_METRICS {
        counter(
            page,
            &format!("relaymq_global_{suffix}"),
            help,
            read(&events),
        );
    }
    for (i, reason) in DEAD_LETTER_REASONS.iter().enumerate() {
        counter(
            page,
            &format!("relaymq_global_messages_dead_lettered_{reason}_total"),
            &format!("Messages dead-lettered for reason {reason}"),
            events.dead_lettered.get(i).copied().unwrap_or(0),
        );
    }
    if let Some(flusher) = broker.flusher() {
        page.histogram(
            "relaymq_io_sync_time_seconds",
            "Time each fsync of a queue's segment or ack-log file took, seconds",
            &flusher.fsync_seconds().snapshot(),
        );
    }
}

/// One unlabelled gauge sample with its family header.
fn gauge(page: &mut Exposition, name: &str, help: &str, v: u64) {
    page.family(name, Kind::Gauge, help);
    page.sample(name, &[], v);
}

/// One unlabelled counter sample with its family header.
fn counter(page: &mut Exposition, name: &str, help: &str, v: u64) {
    page.family(name, Kind::Counter, help);
    page.sample(name, &[], v);
}

/// File descriptors: the process's (`rabbitmq_prometheus`'s `process_open_fds`,
/// `process_max_fds`, `process_open_tcp_sockets`, `process_max_tcp_sockets`) and the
/// message store's budget (its open files, limit, and what it did to stay within it).
fn write_fds(page: &mut Exposition, broker: &Broker) {
    if let Some(open) = crate::limits::fds::open_fds() {
        gauge(
            page,
            "relaymq_process_open_fds",
            "File descriptors the broker process has open",
            open as u64,
        );
    }
    if let Some(b) = broker.config.fd_budget {
        gauge(
            page,
            "relaymq_process_max_fds",
            "The open-files limit (RLIMIT_NOFILE) in force",
            b.limit,
        );
        gauge(
            page,
            "relaymq_process_open_tcp_sockets",
            "Client sockets open (both protocols, handshaking ones included)",
            broker.sockets_open() as u64,
        );
        gauge(
            page,
            "relaymq_process_max_tcp_sockets",
            "Client sockets the open-files limit leaves for connections",
            b.sockets as u64,
        );
    }
    if let Some(f) = broker.file_budget() {
        gauge(
            page,
            "relaymq_store_open_files",
            "Files the message store has open (segments, ack logs, directories being synced)",
            f.open as u64,
        );
        gauge(
            page,
            "relaymq_store_max_files",
            "Files the message store may have open at once (its part of the open-files limit)",
            f.limit as u64,
        );
        counter(
            page,
            "relaymq_store_file_evictions_total",
            "Unused store files closed to free a descriptor for another file",
            f.evictions,
        );
        counter(
            page,
            "relaymq_store_early_syncs_total",
            "Store files fsynced before the flusher's round so they could be closed",
            f.early_syncs,
        );
        counter(
            page,
            "relaymq_store_file_waits_total",
            "Store file opens that waited for a descriptor in use to be released",
            f.waits,
        );
        counter(
            page,
            "relaymq_store_files_exhausted_total",
            "Store file opens refused: every descriptor of the budget stayed in use",
            f.exhausted,
        );
    }
}

/// Per-vhost metrics (label `vhost`).
fn write_vhosts(page: &mut Exposition, rows: &[VhostRow]) {
    let families: [VhostMetric; 3] = [
        (
            "relaymq_vhost_connections",
            "Open client connections to the vhost",
            |r| r.connections,
        ),
        (
            "relaymq_vhost_channels",
            "Open channels of the vhost's connections",
            |r| r.channels,
        ),
        ("relaymq_vhost_queues", "Queues in the vhost", |r| r.queues),
    ];
    for (name, help, read) in families {
        page.family(name, Kind::Gauge, help);
        for r in rows {
            page.sample(name, &[("vhost", &r.name)], read(r));
        }
    }
    for (suffix, help, read) in EVENT_METRICS {
        let name = format!("relaymq_vhost_{suffix}");
        page.family(&name, Kind::Counter, help);
        for r in rows {
            page.sample(&name, &[("vhost", &r.name)], read(&r.events));
        }
    }
    let name = "relaymq_vhost_messages_dead_lettered_total";
    page.family(
        name,
        Kind::Counter,
        "Messages dead-lettered in the vhost, by reason",
    );
    for r in rows {
        for (i, reason) in DEAD_LETTER_REASONS.iter().enumerate() {
            let n = r.events.dead_lettered.get(i).copied().unwrap_or(0);
            page.sample(name, &[("vhost", &r.name), ("reason", reason)], n);
        }
    }
}
