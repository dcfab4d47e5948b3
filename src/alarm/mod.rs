//! Resource alarms (RabbitMQ's alarms.html): a memory high-water mark and a free-disk
//! low-water mark. While either alarm is set, connections that publish are blocked — the
//! I/O thread stops reading them after telling them (`connection.blocked`) — and consumers
//! keep draining ([`crate::server::publish_gate`]).
//!
//! [`ResourceAlarms`] is the broker-wide state: the settings in force, the last readings
//! and the alarm bits. The publish path reads the bits with one relaxed atomic load
//! ([`ResourceAlarms::is_alarmed`]). The [`monitor`] thread measures the process's
//! resident memory every [`MEMORY_CHECK_INTERVAL_MS`] and the data directory's free space
//! every [`DISK_CHECK_INTERVAL_MS`], sets and clears the bits, logs each change and wakes
//! the I/O thread. An administrator changes the settings at run time
//! (`relaymq-cli set memory-high-watermark` / `set disk-free-limit`, like `rabbitmqctl
//! set_vm_memory_high_watermark` / `set_disk_free_limit`); the change is checked at once.
//!
//! Layout: `watermark` (the memory mark's default, parsing and range; its value type,
//! [`MemoryWatermark`], is [`crate::types::watermark`]'s), `probe` (reading `/proc`,
//! `/sys/fs/cgroup` and `statvfs`), `monitor` (the thread).

pub mod monitor;
pub mod probe;
pub mod watermark;

pub use watermark::MemoryWatermark;

use crate::types::FieldValue;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Time between two memory checks, in ms (RabbitMQ's `memory_monitor_interval` default).
pub const MEMORY_CHECK_INTERVAL_MS: u64 = 500;

/// Time between two free-disk checks, in ms (RabbitMQ adapts its interval between 100 ms
/// and 10 s; one fixed second is close to its pace near the limit).
pub const DISK_CHECK_INTERVAL_MS: u64 = 1_000;

/// Default free-disk low-water mark, in bytes (1 GiB; RabbitMQ's `disk_free_limit`
/// default is 50 MB, too little for a broker whose queues write segments of 8 MiB).
pub const DISK_FREE_LIMIT_BYTES_DEFAULT: u64 = 1 << 30;

/// Alarm bit: resident memory is above the memory high-water mark.
pub const MEMORY_ALARM: u8 = 1;

/// Alarm bit: free space of the data directory's filesystem is below the low-water mark.
pub const DISK_ALARM: u8 = 2;

/// Alarm settings given at start (`--memory-high-watermark`, `--disk-free-limit`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlarmConfig {
    /// Where the memory alarm goes off.
    pub memory_high_watermark: MemoryWatermark,
    /// Free bytes below which the disk alarm goes off.
    pub disk_free_limit_bytes: u64,
}

impl Default for AlarmConfig {
    fn default() -> AlarmConfig {
        AlarmConfig {
            memory_high_watermark: MemoryWatermark::default(),
            disk_free_limit_bytes: DISK_FREE_LIMIT_BYTES_DEFAULT,
        }
    }
}

/// The reason text of `connection.blocked` for a set of alarm bits (RabbitMQ's wording).
pub fn blocked_reason(bits: u8) -> &'static str {
    match (bits & MEMORY_ALARM != 0, bits & DISK_ALARM != 0) {
        (true, true) => "low on memory and disk",
        (true, false) => "low on memory",
        (false, true) => "low on disk",
        (false, false) => "",
    }
}

/// What the monitor measures with: the data directory and how to wake the I/O thread.
struct Probe {
    /// Directory whose filesystem's free space is watched.
    data_dir: PathBuf,
    /// Called after the alarm bits change (wakes the I/O thread).
    wake: Box<dyn Fn() + Send + Sync>,
}

/// The settings and the last readings, behind one lock (taken by checks and `status`,
/// never on the publish path).
#[derive(Default)]
struct Readings {
    config: AlarmConfig,
    /// Resident memory at the last check, bytes.
    mem_used_bytes: Option<u64>,
    /// Memory available at the last check (RAM or cgroup limit), bytes.
    mem_available_bytes: Option<u64>,
    /// Free disk at the last check, bytes.
    disk_free_bytes: Option<u64>,
    /// The last free-space reading failed (logged once until it works again).
    disk_error_logged: bool,
}

/// The last readings and the limits in force, in bytes (`None`: not measured yet, or
/// no monitor attached), for the metrics endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlarmReadings {
    /// Resident memory at the last check.
    pub mem_used_bytes: Option<u64>,
    /// Resident memory above which the memory alarm sets (the high-water mark applied to
    /// the memory available at the last check).
    pub mem_limit_bytes: Option<u64>,
    /// Free space of the data directory's filesystem at the last check.
    pub disk_free_bytes: Option<u64>,
    /// Free space below which the disk alarm sets.
    pub disk_free_limit_bytes: u64,
}

/// Broker-wide resource alarm state.
pub struct ResourceAlarms {
    /// [`MEMORY_ALARM`] | [`DISK_ALARM`]; read on every publish.
    bits: AtomicU8,
    /// Connections blocked now (a publish held), for `status`.
    blocked_connections: AtomicUsize,
    readings: Mutex<Readings>,
    /// Set when a monitor is attached ([`monitor::AlarmMonitor::start`]); without it (an
    /// in-memory broker) nothing is measured and no alarm ever sets.
    probe: Mutex<Option<Probe>>,
}

impl ResourceAlarms {
    /// Alarm state with `config` in force, every alarm clear, nothing measured yet.
    pub fn new(config: AlarmConfig) -> ResourceAlarms {
        ResourceAlarms {
            bits: AtomicU8::new(0),
            blocked_connections: AtomicUsize::new(0),
            readings: Mutex::new(Readings {
                config,
                ..Readings::default()
            }),
            probe: Mutex::new(None),
        }
    }

    /// Whether any alarm is set: the publish path's check, one relaxed load (a publish
    /// read a moment before an alarm sets is accepted, as in RabbitMQ).
    #[inline]
    pub fn is_alarmed(&self) -> bool {
        self.bits.load(Ordering::Relaxed) != 0
    }

    /// The alarm bits ([`MEMORY_ALARM`], [`DISK_ALARM`]).
    pub fn bits(&self) -> u8 {
        self.bits.load(Ordering::Acquire)
    }

    /// The settings in force.
    pub fn config(&self) -> AlarmConfig {
        self.lock_readings().config
    }

    /// Sets the memory high-water mark and checks memory at once.
    ///
    /// # Errors
    /// The watermark's range error ([`MemoryWatermark::validate`]); nothing changes then.
    pub fn set_memory_high_watermark(
        &self,
        watermark: MemoryWatermark,
    ) -> Result<(), watermark::WatermarkError> {
        watermark.validate()?;
        self.lock_readings().config.memory_high_watermark = watermark;
        self.check(true, false);
        Ok(())
    }

    /// Sets the free-disk low-water mark, in bytes, and checks the disk at once.
    pub fn set_disk_free_limit(&self, bytes: u64) {
        self.lock_readings().config.disk_free_limit_bytes = bytes;
        self.check(false, true);
    }

    /// Attaches the data directory and the I/O thread's wake-up (done once by the
    /// monitor before its first check).
    fn attach(&self, data_dir: PathBuf, wake: Box<dyn Fn() + Send + Sync>) {
        *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = Some(Probe { data_dir, wake });
    }

    /// Measures memory and/or disk now, sets or clears the alarms, logs each change and
    /// wakes the I/O thread when the bits changed. Does nothing without a monitor.
    pub fn check(&self, memory: bool, disk: bool) {
        let probe = self.probe.lock().unwrap_or_else(|e| e.into_inner());
        let Some(probe) = probe.as_ref() else {
            return;
        };
        let before = self.bits.load(Ordering::Acquire);
        let mut bits = before;
        let mut r = self.lock_readings();
        if memory {
            r.mem_used_bytes = probe::process_rss_bytes();
            r.mem_available_bytes = probe::memory_available_bytes();
            if let (Some(used), Some(available)) = (r.mem_used_bytes, r.mem_available_bytes) {
                let limit = r.config.memory_high_watermark.limit_bytes(available);
                let on = used > limit;
                if on != (bits & MEMORY_ALARM != 0) {
                    bits ^= MEMORY_ALARM;
                    log_change("memory", on, used, limit, "used", "allowed");
                }
            }
        }
        if disk {
            match probe::disk_free_bytes(&probe.data_dir) {
                Ok(free) => {
                    r.disk_free_bytes = Some(free);
                    r.disk_error_logged = false;
                    let limit = r.config.disk_free_limit_bytes;
                    let on = free < limit;
                    if on != (bits & DISK_ALARM != 0) {
                        bits ^= DISK_ALARM;
                        log_change("disk", on, free, limit, "free", "limit");
                    }
                }
                Err(e) => {
                    // Unknown free space leaves the alarm as it was (RabbitMQ does the same).
                    r.disk_free_bytes = None;
                    if !r.disk_error_logged {
                        r.disk_error_logged = true;
                        log::error!(
                            "cannot read the free space of {}: {e}; the disk alarm keeps its state",
                            probe.data_dir.display()
                        );
                    }
                }
            }
        }
        drop(r);
        if bits != before {
            self.bits.store(bits, Ordering::Release);
            if bits == 0 {
                log::info!("all resource alarms cleared: publishers are unblocked");
            }
            (probe.wake)();
        }
    }

    /// Connections blocked now (holding a publish).
    pub fn blocked_count(&self) -> usize {
        self.blocked_connections.load(Ordering::Relaxed)
    }

    /// Counts a connection that became blocked (+1) or was unblocked or closed (-1).
    pub fn count_blocked(&self, blocked: bool) {
        if blocked {
            self.blocked_connections.fetch_add(1, Ordering::Relaxed);
        } else {
            self.blocked_connections.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The fields `status` shows, with RabbitMQ's management names: `mem_used`,
    /// `mem_limit`, `mem_alarm`, `disk_free`, `disk_free_limit`, `disk_free_alarm` (bytes
    /// and booleans; a reading not available is left out), plus
    /// `mem_high_watermark` (the setting as written) and `connections_blocked`.
    pub fn status_fields(&self) -> Vec<(&'static str, FieldValue)> {
        let bits = self.bits();
        let r = self.lock_readings();
        let n = |v: u64| FieldValue::I64(i64::try_from(v).unwrap_or(i64::MAX));
        let mut fields = Vec::new();
        if let Some(used) = r.mem_used_bytes {
            fields.push(("mem_used", n(used)));
        }
        if let Some(available) = r.mem_available_bytes {
            let limit = r.config.memory_high_watermark.limit_bytes(available);
            fields.push(("mem_limit", n(limit)));
        }
        fields.push(("mem_alarm", FieldValue::Bool(bits & MEMORY_ALARM != 0)));
        fields.push((
            "mem_high_watermark",
            FieldValue::string(r.config.memory_high_watermark.to_string()),
        ));
        if let Some(free) = r.disk_free_bytes {
            fields.push(("disk_free", n(free)));
        }
        fields.push(("disk_free_limit", n(r.config.disk_free_limit_bytes)));
        fields.push(("disk_free_alarm", FieldValue::Bool(bits & DISK_ALARM != 0)));
        fields.push(("connections_blocked", n(self.blocked_count() as u64)));
        fields
    }

    /// The last readings and the limits in force.
    pub fn readings(&self) -> AlarmReadings {
        let r = self.lock_readings();
        AlarmReadings {
            mem_used_bytes: r.mem_used_bytes,
            mem_limit_bytes: r
                .mem_available_bytes
                .map(|a| r.config.memory_high_watermark.limit_bytes(a)),
            disk_free_bytes: r.disk_free_bytes,
            disk_free_limit_bytes: r.config.disk_free_limit_bytes,
        }
    }

    fn lock_readings(&self) -> MutexGuard<'_, Readings> {
        self.readings.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for ResourceAlarms {
    fn default() -> ResourceAlarms {
        ResourceAlarms::new(AlarmConfig::default())
    }
}

impl std::fmt::Debug for ResourceAlarms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceAlarms")
            .field("bits", &self.bits())
            .field("config", &self.config())
            .finish()
    }
}

/// Logs an alarm that set (warn) or cleared (info), as RabbitMQ's log says it.
fn log_change(
    resource: &str,
    on: bool,
    value: u64,
    limit: u64,
    value_name: &str,
    limit_name: &str,
) {
    if on {
        log::warn!(
            "{resource} resource limit alarm set: {value_name} {value} bytes, {limit_name} \
             {limit} bytes. Publishers will be blocked until this alarm clears"
        );
    } else {
        log::info!(
            "{resource} resource limit alarm cleared: {value_name} {value} bytes, \
             {limit_name} {limit} bytes"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn attached(config: AlarmConfig) -> (Arc<ResourceAlarms>, Arc<AtomicUsize>) {
        let alarms = Arc::new(ResourceAlarms::new(config));
        let wakes = Arc::new(AtomicUsize::new(0));
        let w = Arc::clone(&wakes);
        alarms.attach(
            std::env::temp_dir(),
            Box::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            }),
        );
        (alarms, wakes)
    }

    #[test]
    fn nothing_is_measured_without_a_monitor() {
        let alarms = ResourceAlarms::new(AlarmConfig {
            memory_high_watermark: MemoryWatermark::Absolute(0),
            disk_free_limit_bytes: u64::MAX,
        });
        alarms.check(true, true);
        assert!(!alarms.is_alarmed());
    }

    #[test]
    fn alarms_set_and_clear_with_the_settings() {
        let (alarms, wakes) = attached(AlarmConfig {
            memory_high_watermark: MemoryWatermark::Absolute(1),
            disk_free_limit_bytes: 0,
        });
        alarms.check(true, true);
        assert_eq!(alarms.bits(), MEMORY_ALARM);
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        alarms.set_disk_free_limit(u64::MAX / 2);
        assert_eq!(alarms.bits(), MEMORY_ALARM | DISK_ALARM);
        assert_eq!(blocked_reason(alarms.bits()), "low on memory and disk");
        alarms
            .set_memory_high_watermark(MemoryWatermark::Relative(1.0))
            .unwrap();
        assert_eq!(alarms.bits(), DISK_ALARM);
        alarms.set_disk_free_limit(0);
        assert!(!alarms.is_alarmed());
        assert_eq!(wakes.load(Ordering::Relaxed), 4);
        assert!(alarms
            .set_memory_high_watermark(MemoryWatermark::Relative(2.0))
            .is_err());
        let fields = alarms.status_fields();
        let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("mem_alarm"), Some(FieldValue::Bool(false)));
        assert_eq!(get("disk_free_limit"), Some(FieldValue::I64(0)));
        assert_eq!(get("mem_high_watermark"), Some(FieldValue::string("1.0")));
        assert!(get("mem_used").is_some() || !cfg!(target_os = "linux"));
    }
}
