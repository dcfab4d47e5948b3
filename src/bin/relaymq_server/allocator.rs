//! The server's memory allocator: jemalloc, configured to hand freed memory back to the
//! operating system.
//!
//! The memory alarm measures resident memory (RSS), as RabbitMQ's `rss` strategy does.
//! glibc's allocator keeps the pages of freed messages mapped (a server that queued 1 GB
//! and then deleted the queue stayed at 0.9 GB), so the alarm never cleared on an empty
//! broker. jemalloc's background thread purges dirty pages about `dirty_decay_ms`
//! (1000 ms) after they were freed, off the publish path; measured: RSS back within
//! 40 MiB of the empty server's within 1 s after 1 GiB of queued messages is deleted,
//! purged or drained (docs/security.md §6, "Resident memory and when it falls"). The
//! settings are compiled in from `JEMALLOC_SYS_WITH_MALLOC_CONF` in `.cargo/config.toml`;
//! `_RJEM_MALLOC_CONF` overrides them at run time.

/// The process's allocator (jemalloc, with its background purging thread enabled).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The compiled-in setting that makes freed memory go back within a second: its absence
/// means the build did not read `.cargo/config.toml` (cargo run from another directory).
const DECAY_SETTING: &str = "dirty_decay_ms:";

/// A warning for the start-up log when the build lacks the allocator settings of
/// `.cargo/config.toml`: jemalloc then returns freed memory after its default 10 s, so a
/// memory alarm clears ~10 s later than documented.
pub fn missing_settings_warning() -> Option<String> {
    let settings = tikv_jemalloc_ctl::config::malloc_conf::read().unwrap_or("");
    (!settings.contains(DECAY_SETTING)).then(|| {
        format!(
            "this relaymq-server was built without the allocator settings of the \
             repository's .cargo/config.toml (compiled-in: '{settings}'): freed memory goes \
             back to the system after jemalloc's default 10 s instead of 1 s; build it from \
             the repository's directory"
        )
    })
}

/// One line for the start-up log: the allocator, its version, its compiled-in settings
/// and whether the background purging thread runs (`jemalloc 5.3.0, background thread
/// on, settings background_thread:true,dirty_decay_ms:1000,...`).
pub fn describe() -> String {
    let version = tikv_jemalloc_ctl::version::read().unwrap_or("(unknown version)");
    let version = version.split('-').next().unwrap_or(version);
    let settings = tikv_jemalloc_ctl::config::malloc_conf::read().unwrap_or("");
    let background = match tikv_jemalloc_ctl::background_thread::read() {
        Ok(true) => "on",
        Ok(false) => "off (freed memory is returned only as threads allocate)",
        Err(_) => "unknown",
    };
    format!("jemalloc {version}, background thread {background}, settings {settings}")
}
