//! The alarm monitor thread (`relaymq-alarms`): checks memory every
//! [`MEMORY_CHECK_INTERVAL_MS`] and free disk every [`DISK_CHECK_INTERVAL_MS`]
//! ([`ResourceAlarms::check`]), like RabbitMQ's `vm_memory_monitor` and
//! `rabbit_disk_monitor`.

use super::{ResourceAlarms, DISK_CHECK_INTERVAL_MS, MEMORY_CHECK_INTERVAL_MS};
use crate::stoppable_thread::StoppableThread;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The running monitor; stops when dropped or [`AlarmMonitor::stop`]ped.
pub struct AlarmMonitor {
    thread: StoppableThread,
}

impl AlarmMonitor {
    /// Attaches `data_dir` (whose filesystem's free space is watched) and `wake` (called
    /// when the alarm bits change) to `alarms`, checks memory and disk once before
    /// returning — so a server that starts above a watermark blocks its first publisher —
    /// then starts the thread.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(
        alarms: Arc<ResourceAlarms>,
        data_dir: PathBuf,
        wake: Box<dyn Fn() + Send + Sync>,
    ) -> io::Result<AlarmMonitor> {
        alarms.attach(data_dir.clone(), wake);
        alarms.check(true, true);
        log_limits(&alarms, &data_dir);
        let thread = StoppableThread::spawn("relaymq-alarms", move |rx| run(&alarms, &rx))?;
        Ok(AlarmMonitor { thread })
    }

    /// Stops the thread and waits for it.
    pub fn stop(&mut self) {
        self.thread.stop();
    }
}

/// Bytes per MiB, for the start-up line.
const MIB_BYTES: u64 = 1 << 20;

/// Logs the limits in force once the first check ran, as RabbitMQ's start-up log does
/// (`Memory high watermark set to 14422 MiB (15122663014 bytes) of 24036 MiB …`).
fn log_limits(alarms: &ResourceAlarms, data_dir: &std::path::Path) {
    let config = alarms.config();
    let r = alarms.readings();
    match (r.mem_limit_bytes, super::probe::memory_available_bytes()) {
        (Some(limit), Some(available)) => log::info!(
            "memory high watermark {}: {} MiB ({limit} bytes) of {} MiB ({available} bytes) available",
            config.memory_high_watermark,
            limit / MIB_BYTES,
            available / MIB_BYTES
        ),
        _ => log::info!(
            "memory high watermark {}: the memory available cannot be read here, the memory alarm is off",
            config.memory_high_watermark
        ),
    }
    let free = r
        .disk_free_bytes
        .map_or("unknown".to_string(), |f| format!("{} MiB", f / MIB_BYTES));
    log::info!(
        "free disk limit {}: publishers are blocked below it ({free} free now in {})",
        crate::types::size::format_size(r.disk_free_limit_bytes),
        data_dir.display()
    );
}

fn run(alarms: &ResourceAlarms, stop: &Receiver<()>) {
    let interval = Duration::from_millis(MEMORY_CHECK_INTERVAL_MS);
    let disk_interval = Duration::from_millis(DISK_CHECK_INTERVAL_MS);
    let mut last_disk = Instant::now();
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let disk = last_disk.elapsed() >= disk_interval;
        if disk {
            last_disk = Instant::now();
        }
        alarms.check(true, disk);
    }
}
