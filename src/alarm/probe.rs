//! Reading the machine: the process's resident memory, the memory available to it (RAM,
//! or the cgroup limit when there is a lower one) and the free space of a filesystem.
//!
//! The parsers are pure functions over the text of the `/proc` and `/sys/fs/cgroup`
//! files, tested on their own; the readers around them only open the files. Linux only:
//! elsewhere the memory readings are `None` and the memory alarm never goes off.

use std::path::Path;

/// Largest cgroup memory limit taken as a real limit, in bytes (1 PiB). cgroup v1 writes
/// "no limit" as a huge page-aligned number (`9223372036854771712`); anything above this
/// is read as no limit.
pub const CGROUP_LIMIT_BYTES_MAX: u64 = 1 << 50;

/// Bytes per kB in `/proc` files (`kB` there means KiB).
const PROC_KB_BYTES: u64 = 1024;

/// `VmRSS` of `/proc/self/status`: the process's resident memory, in bytes.
pub fn parse_status_rss_bytes(status: &str) -> Option<u64> {
    kb_field(status, "VmRSS:")
}

/// `MemTotal` of `/proc/meminfo`: the machine's RAM, in bytes.
pub fn parse_meminfo_total_bytes(meminfo: &str) -> Option<u64> {
    kb_field(meminfo, "MemTotal:")
}

/// A `Name:   1234 kB` line's value in bytes.
fn kb_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let mut words = line[name.len()..].split_whitespace();
    let kb: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => kb.checked_mul(PROC_KB_BYTES),
        Some(_) => None,
    }
}

/// A cgroup memory limit file's value: cgroup v2 `memory.max` (`max` = none) or v1
/// `memory.limit_in_bytes` (a huge number = none). `None` for no limit, for an absurd
/// value (0, or above [`CGROUP_LIMIT_BYTES_MAX`]) and for text that is not a number.
pub fn parse_cgroup_limit_bytes(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v > 0 && v <= CGROUP_LIMIT_BYTES_MAX).then_some(v)
}

/// The cgroup paths of `/proc/self/cgroup`: the unified (v2) one, from the `0::/path`
/// line, and the v1 memory controller's, from the `N:...memory...:/path` line.
pub fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// The memory available to the process, in bytes: the RAM, or the cgroup limit when there
/// is one and it is lower (RabbitMQ's `total_memory_available`).
pub fn effective_total_bytes(ram_bytes: u64, cgroup_limit_bytes: Option<u64>) -> u64 {
    match cgroup_limit_bytes {
        Some(limit) => limit.min(ram_bytes),
        None => ram_bytes,
    }
}

/// The process's resident memory, in bytes (`/proc/self/status`), or `None` where it
/// cannot be read.
pub fn process_rss_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_rss_bytes(&text)
}

/// The machine's RAM, in bytes (`/proc/meminfo`), or `None` where it cannot be read.
pub fn ram_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_total_bytes(&text)
}

/// The memory limit of the process's cgroup, in bytes, or `None` when there is none (or
/// it cannot be read). cgroup v2: `memory.max` in the process's cgroup under
/// `/sys/fs/cgroup`, else at its root (inside a container, the namespace's root is the
/// container's cgroup); v1: `memory.limit_in_bytes` under `/sys/fs/cgroup/memory`.
pub fn cgroup_limit_bytes() -> Option<u64> {
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let (v2, v1) = parse_proc_cgroup(&proc_cgroup);
    let mut candidates = Vec::new();
    if let Some(p) = v2 {
        candidates.push(format!(
            "/sys/fs/cgroup{}/memory.max",
            p.trim_end_matches('/')
        ));
    }
    candidates.push("/sys/fs/cgroup/memory.max".to_string());
    if let Some(p) = v1 {
        candidates.push(format!(
            "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
            p.trim_end_matches('/')
        ));
    }
    candidates.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".to_string());
    candidates
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| parse_cgroup_limit_bytes(&text))
}

/// The memory available to the process, in bytes ([`effective_total_bytes`] of
/// [`ram_bytes`] and [`cgroup_limit_bytes`]), or `None` where RAM cannot be read.
pub fn memory_available_bytes() -> Option<u64> {
    Some(effective_total_bytes(ram_bytes()?, cgroup_limit_bytes()))
}

/// Free bytes of the filesystem holding `path` that an unprivileged process may use
/// (`statvfs`: `f_bavail × f_frsize`, what `df` shows as available).
///
/// # Errors
/// The `statvfs` error (e.g. the path does not exist).
pub fn disk_free_bytes(path: &Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(path)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_meminfo_fields() {
        let status = "Name:\trelaymq\nVmPeak:\t  200000 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n";
        assert_eq!(parse_status_rss_bytes(status), Some(12345 * 1024));
        assert_eq!(parse_status_rss_bytes("Name: x\n"), None);
        assert_eq!(parse_status_rss_bytes("VmRSS: lots kB\n"), None);
        assert_eq!(parse_status_rss_bytes("VmRSS: 10 MB\n"), None);
        let meminfo = "MemTotal:       24576000 kB\nMemFree:        1000 kB\n";
        assert_eq!(parse_meminfo_total_bytes(meminfo), Some(24_576_000 * 1024));
        assert_eq!(parse_meminfo_total_bytes(""), None);
        assert_eq!(
            parse_meminfo_total_bytes("MemTotal: 99999999999999999999 kB\n"),
            None
        );
    }

    #[test]
    fn cgroup_limits_ignore_max_and_absurd_values() {
        assert_eq!(parse_cgroup_limit_bytes("536870912\n"), Some(512 << 20));
        assert_eq!(parse_cgroup_limit_bytes("max\n"), None);
        assert_eq!(parse_cgroup_limit_bytes("9223372036854771712\n"), None);
        assert_eq!(parse_cgroup_limit_bytes("0\n"), None);
        assert_eq!(parse_cgroup_limit_bytes(""), None);
        assert_eq!(parse_cgroup_limit_bytes("-1"), None);
    }

    #[test]
    fn proc_cgroup_paths() {
        assert_eq!(
            parse_proc_cgroup("0::/system.slice/relaymq.service\n"),
            (Some("/system.slice/relaymq.service".into()), None)
        );
        let v1 = "12:cpu,cpuacct:/a\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n";
        assert_eq!(parse_proc_cgroup(v1), (None, Some("/docker/abc".into())));
        assert_eq!(parse_proc_cgroup("garbage\n"), (None, None));
        assert_eq!(parse_proc_cgroup("0::/\n"), (Some("/".into()), None));
    }

    #[test]
    fn the_lower_of_ram_and_cgroup_limit_is_available() {
        assert_eq!(effective_total_bytes(16 << 30, Some(2 << 30)), 2 << 30);
        assert_eq!(effective_total_bytes(1 << 30, Some(2 << 30)), 1 << 30);
        assert_eq!(effective_total_bytes(8 << 30, None), 8 << 30);
    }

    #[test]
    fn readings_of_this_machine_are_plausible() {
        if cfg!(target_os = "linux") {
            let rss = process_rss_bytes().expect("VmRSS");
            let available = memory_available_bytes().expect("MemTotal");
            assert!(rss > 0 && rss < available, "{rss} of {available}");
        }
        let free = disk_free_bytes(Path::new(".")).expect("statvfs");
        assert!(free > 0);
        assert!(disk_free_bytes(Path::new("/no/such/dir/at/all")).is_err());
    }
}
