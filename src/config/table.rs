//! The one table of settings ([`SETTINGS`]): each setting's name (the long flag without
//! `--`, the file key, and with `RELAYMQ_SERVER_` the environment variable), the TOML types
//! it accepts, how it parses and prints, and whether a SIGHUP reload changes it.
//! Flags, environment, file, `--print-config` and the reload all go through it,
//! so they cannot drift.

use crate::alarm::MemoryWatermark;
use crate::config::settings::{log_level_name, parse_log_level, Settings};
use crate::server::tls::ClientAuth;
use crate::storage::flusher::FsyncMode;
use crate::types::size::{format_size, parse_size};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Smallest `segment-bytes`, bytes (tests use small segments).
pub const SEGMENT_BYTES_MIN: u64 = 4096;

/// Largest `segment-bytes`, bytes (1 GiB).
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;

/// Milliseconds per second, for `shutdown-timeout` (seconds) stored in milliseconds.
const MS_PER_S: u64 = 1000;

/// The TOML types a setting accepts in the `--config` file (flags and environment are
/// always text, parsed the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A TOML string (`listen = "127.0.0.1:5673"`).
    Text,
    /// A TOML integer (`max-connections = 5000`).
    Integer,
    /// A size: an integer of bytes or a string with a unit (`segment-bytes = "8MiB"`).
    Size,
    /// A fraction (float), or a size as integer or string (`memory-high-watermark = 0.4`).
    Watermark,
}

/// What a SIGHUP reload does with a changed setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Applied at once, to everything.
    Live,
    /// Applied at once to connections opened after the reload; open connections keep what
    /// they negotiated or were given at accept.
    NewConnections,
    /// Needs a restart; a reload warns and keeps the running value.
    Restart,
}

/// One setting of [`SETTINGS`].
pub struct Setting {
    /// The name: long flag without `--`, file key, environment suffix.
    pub name: &'static str,
    /// Other flag names accepted on the command line only (`channel-max`).
    pub flag_aliases: &'static [&'static str],
    /// The placeholder of the value in the help text (`N`, `ADDR|off`).
    pub value_name: &'static str,
    /// The TOML types the file accepts.
    pub kind: ValueKind,
    /// What a SIGHUP reload does with it.
    pub reload: Reload,
    /// A secret: `--print-config` and reload logs show `<hidden>`, never the value.
    pub secret: bool,
    /// Parses the text and stores it.
    ///
    /// # Errors
    /// A message (without the setting's name, which the caller adds with where the text
    /// came from).
    pub set: fn(&mut Settings, &str) -> Result<(), String>,
    /// The value in the form `set` reads back; `None` when not set (an optional file).
    pub get: fn(&Settings) -> Option<String>,
}

impl Setting {
    /// The environment variable: `RELAYMQ_SERVER_` + name upper-cased, `-` → `_`.
    pub fn env_name(&self) -> String {
        format!(
            "{}{}",
            crate::config::ENV_PREFIX,
            self.name.to_ascii_uppercase().replace('-', "_")
        )
    }
}

/// Parses a socket address, naming an example in the error.
fn addr(text: &str, example: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("'{text}' is not an address like {example}"))
}

/// Parses `ADDR|off`.
fn addr_or_off(text: &str, example: &str) -> Result<Option<SocketAddr>, String> {
    if text == "off" {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| format!("'{text}' is not an address like {example} or off"))
}

/// `ADDR` or `off`.
fn show_addr_or_off(a: Option<SocketAddr>) -> Option<String> {
    Some(a.map_or_else(|| "off".to_string(), |a| a.to_string()))
}

/// An unsigned integer type a setting is read as, with its largest value for messages.
trait Whole: std::str::FromStr {
    /// The type's largest value, as text.
    fn max_text() -> String;
}

macro_rules! whole {
    ($($t:ty),*) => {$(
        impl Whole for $t {
            fn max_text() -> String {
                <$t>::MAX.to_string()
            }
        }
    )*};
}
whole!(u16, u32, u64, usize);

/// Parses a whole number of the setting's type; the error gives the type's range (the
/// setting's own, narrower range is checked with the others after merging).
fn number<T: Whole>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("'{text}' is not a whole number from 0 to {}", T::max_text()))
}

/// Parses a size ([`parse_size`]: bytes, or with one of RabbitMQ's units) as a `usize`.
fn size_usize(text: &str) -> Result<usize, String> {
    sized(text)
}

/// Parses a size ([`parse_size`]) as the setting's integer type; the error gives the
/// type's range (the setting's own, narrower range is checked after merging).
fn sized<T: Whole + TryFrom<u64>>(text: &str) -> Result<T, String> {
    let bytes = parse_size(text).map_err(|e| e.message)?;
    T::try_from(bytes)
        .map_err(|_| format!("'{text}' is too large: at most {} bytes", T::max_text()))
}

/// A path, `None` when not set.
fn show_path(p: &Option<PathBuf>) -> Option<String> {
    p.as_deref().map(|p: &Path| p.display().to_string())
}

/// The `fsync` text of a mode (`always`, `never`, `interval:MS`).
fn show_fsync(mode: FsyncMode) -> String {
    match mode {
        FsyncMode::Always => "always".into(),
        FsyncMode::Never => "never".into(),
        FsyncMode::Interval(d) => format!("interval:{}", d.as_millis()),
    }
}

/// Shorthand for a limit entry: integer, reload class, field.
macro_rules! limit {
    ($name:literal, $aliases:expr, $reload:expr, $field:ident) => {
        Setting {
            name: $name,
            flag_aliases: $aliases,
            value_name: "N",
            kind: ValueKind::Integer,
            reload: $reload,
            secret: false,
            set: |s, v| {
                s.server.broker.limits.$field = number(v)?;
                Ok(())
            },
            get: |s| Some(s.server.broker.limits.$field.to_string()),
        }
    };
}

/// Shorthand for a limit in bytes: a size ([`parse_size`]: `16MiB`, `16777216`), reload
/// class, field; printed with the largest binary unit that divides it.
macro_rules! size_limit {
    ($name:literal, $reload:expr, $field:ident) => {
        Setting {
            name: $name,
            flag_aliases: &[],
            value_name: "SIZE",
            kind: ValueKind::Size,
            reload: $reload,
            secret: false,
            set: |s, v| {
                s.server.broker.limits.$field = sized(v)?;
                Ok(())
            },
            get: |s| Some(format_size(s.server.broker.limits.$field as u64)),
        }
    };
}

/// Most worker threads `workers` may ask for: far above any useful number (the I/O thread
/// feeds them; more workers than cores only add switches), low enough that a typo cannot
/// start thousands of threads.
pub const WORKERS_MAX: usize = 1024;

/// Every setting, in the order of `--help` and `--print-config`. The limits' ranges are
/// checked together after merging ([`crate::limits::Limits::validate`]); see
/// docs/operations.md, "Configuration", for what a reload changes.
pub static SETTINGS: &[Setting] = &[
    Setting {
        name: "listen",
        flag_aliases: &[],
        value_name: "ADDR",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.listen = addr(v, "127.0.0.1:5673")?;
            Ok(())
        },
        get: |s| Some(s.server.listen.to_string()),
    },
    Setting {
        name: "amqp-listen",
        flag_aliases: &[],
        value_name: "ADDR|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.amqp_listen = addr_or_off(v, "127.0.0.1:5672")?;
            Ok(())
        },
        get: |s| show_addr_or_off(s.server.amqp_listen),
    },
    Setting {
        name: "metrics-listen",
        flag_aliases: &[],
        value_name: "ADDR|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.metrics_listen = addr_or_off(v, "127.0.0.1:15692")?;
            Ok(())
        },
        get: |s| show_addr_or_off(s.server.metrics_listen),
    },
    Setting {
        name: "http-listen",
        flag_aliases: &[],
        value_name: "ADDR|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.http_listen = addr_or_off(v, "127.0.0.1:15672")?;
            Ok(())
        },
        get: |s| show_addr_or_off(s.server.http_listen),
    },
    Setting {
        name: "stats-collection",
        flag_aliases: &[],
        value_name: "on|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.stats_collection = match v {
                "on" => true,
                "off" => false,
                other => return Err(format!("'{other}' is not on or off")),
            };
            Ok(())
        },
        get: |s| {
            Some(
                if s.server.stats_collection {
                    "on"
                } else {
                    "off"
                }
                .to_string(),
            )
        },
    },
    Setting {
        name: "data-dir",
        flag_aliases: &[],
        value_name: "DIR",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            if v.is_empty() {
                return Err("must not be empty".into());
            }
            s.server.data_dir = PathBuf::from(v);
            Ok(())
        },
        get: |s| Some(s.server.data_dir.display().to_string()),
    },
    Setting {
        name: "workers",
        flag_aliases: &[],
        value_name: "N",
        kind: ValueKind::Integer,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            let n: usize = number(v)?;
            if !(1..=WORKERS_MAX).contains(&n) {
                return Err(format!("must be from 1 to {WORKERS_MAX}"));
            }
            s.server.workers = n;
            Ok(())
        },
        get: |s| Some(s.server.workers.to_string()),
    },
    Setting {
        name: "log-level",
        flag_aliases: &[],
        value_name: "LEVEL",
        kind: ValueKind::Text,
        reload: Reload::Live,
        secret: false,
        set: |s, v| {
            s.log_level = parse_log_level(v)?;
            Ok(())
        },
        get: |s| Some(log_level_name(s.log_level)),
    },
    Setting {
        name: "ready-file",
        flag_aliases: &[],
        value_name: "PATH",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.ready_file = Some(PathBuf::from(v));
            Ok(())
        },
        get: |s| show_path(&s.server.ready_file),
    },
    Setting {
        name: "tls-cert",
        flag_aliases: &[],
        value_name: "FILE",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.cert = Some(PathBuf::from(v));
            Ok(())
        },
        get: |s| show_path(&s.tls.cert),
    },
    Setting {
        name: "tls-key",
        flag_aliases: &[],
        value_name: "FILE",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.key = Some(PathBuf::from(v));
            Ok(())
        },
        get: |s| show_path(&s.tls.key),
    },
    Setting {
        name: "tls-listen",
        flag_aliases: &[],
        value_name: "ADDR|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.listen = addr_or_off(v, "127.0.0.1:5674")?;
            Ok(())
        },
        get: |s| show_addr_or_off(s.tls.listen),
    },
    Setting {
        name: "amqp-tls-listen",
        flag_aliases: &[],
        value_name: "ADDR|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.amqp_listen = addr_or_off(v, "0.0.0.0:5671")?;
            Ok(())
        },
        get: |s| show_addr_or_off(s.tls.amqp_listen),
    },
    Setting {
        name: "https-listen",
        flag_aliases: &[],
        value_name: "ADDR|off",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.https_listen = addr_or_off(v, "127.0.0.1:15671")?;
            Ok(())
        },
        get: |s| show_addr_or_off(s.tls.https_listen),
    },
    Setting {
        name: "tls-client-ca",
        flag_aliases: &[],
        value_name: "FILE",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.client_ca = Some(PathBuf::from(v));
            Ok(())
        },
        get: |s| show_path(&s.tls.client_ca),
    },
    Setting {
        name: "tls-client-auth",
        flag_aliases: &[],
        value_name: "MODE",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.tls.client_auth = match v {
                "required" => ClientAuth::Required,
                "optional" => ClientAuth::Optional,
                _ => return Err(format!("must be required or optional, not '{v}'")),
            };
            Ok(())
        },
        get: |s| {
            Some(match s.tls.client_auth {
                ClientAuth::Required => "required".into(),
                ClientAuth::Optional => "optional".into(),
            })
        },
    },
    Setting {
        name: "default-user",
        flag_aliases: &[],
        value_name: "NAME",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            crate::auth::users::check_user_name(v).map_err(|e| e.text)?;
            s.server.broker.default_user = v.to_string();
            Ok(())
        },
        get: |s| Some(s.server.broker.default_user.clone()),
    },
    Setting {
        name: "default-pass",
        flag_aliases: &[],
        value_name: "PASSWORD",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: true,
        set: |s, v| {
            use crate::auth::password::PASSWORD_BYTES_MAX;
            if v.is_empty() {
                return Err("must not be empty (RabbitMQ refuses blank passwords too)".into());
            }
            if v.len() > PASSWORD_BYTES_MAX {
                return Err(format!("is longer than {PASSWORD_BYTES_MAX} bytes"));
            }
            s.server.broker.default_pass = v.to_string();
            Ok(())
        },
        get: |s| Some(s.server.broker.default_pass.clone()),
    },
    Setting {
        name: "fsync",
        flag_aliases: &[],
        value_name: "MODE",
        kind: ValueKind::Text,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.fsync = FsyncMode::parse(v)?;
            Ok(())
        },
        get: |s| Some(show_fsync(s.server.fsync)),
    },
    Setting {
        name: "segment-bytes",
        flag_aliases: &[],
        value_name: "SIZE",
        kind: ValueKind::Size,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            let bytes = parse_size(v).map_err(|e| e.message)?;
            if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&bytes) {
                return Err(format!(
                    "must be between {SEGMENT_BYTES_MIN} and {SEGMENT_BYTES_MAX}"
                ));
            }
            s.server.segment_bytes = bytes;
            Ok(())
        },
        get: |s| Some(format_size(s.server.segment_bytes)),
    },
    Setting {
        name: "queue-memory-bytes",
        flag_aliases: &[],
        value_name: "SIZE",
        kind: ValueKind::Size,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.broker.queue_memory_bytes = size_usize(v)?;
            Ok(())
        },
        get: |s| Some(format_size(s.server.broker.queue_memory_bytes as u64)),
    },
    Setting {
        name: "consumer-timeout-ms",
        flag_aliases: &[],
        value_name: "MS",
        kind: ValueKind::Integer,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            s.server.broker.consumer_timeout_ms = v
                .parse()
                .map_err(|_| format!("'{v}' is not a number of milliseconds"))?;
            Ok(())
        },
        get: |s| Some(s.server.broker.consumer_timeout_ms.to_string()),
    },
    Setting {
        name: "shutdown-timeout",
        flag_aliases: &[],
        value_name: "SECONDS",
        kind: ValueKind::Integer,
        reload: Reload::Restart,
        secret: false,
        set: |s, v| {
            let secs: u64 = number(v)?;
            s.server.shutdown_flush_ms = secs.saturating_mul(MS_PER_S);
            Ok(())
        },
        get: |s| Some((s.server.shutdown_flush_ms / MS_PER_S).to_string()),
    },
    Setting {
        name: "memory-high-watermark",
        flag_aliases: &[],
        value_name: "V",
        kind: ValueKind::Watermark,
        reload: Reload::Live,
        secret: false,
        set: |s, v| {
            s.server.broker.alarms.memory_high_watermark =
                MemoryWatermark::parse(v).map_err(|e| e.message)?;
            Ok(())
        },
        get: |s| Some(s.server.broker.alarms.memory_high_watermark.to_string()),
    },
    Setting {
        name: "disk-free-limit",
        flag_aliases: &[],
        value_name: "SIZE",
        kind: ValueKind::Size,
        reload: Reload::Live,
        secret: false,
        set: |s, v| {
            s.server.broker.alarms.disk_free_limit_bytes = parse_size(v).map_err(|e| e.message)?;
            Ok(())
        },
        get: |s| Some(format_size(s.server.broker.alarms.disk_free_limit_bytes)),
    },
    limit!("max-connections", &[], Reload::Live, connections_max),
    limit!(
        "max-connections-per-user",
        &[],
        Reload::Live,
        connections_per_user_max
    ),
    limit!(
        "max-channels",
        &["channel-max"],
        Reload::NewConnections,
        channels_per_connection_max
    ),
    limit!(
        "max-queues-per-vhost",
        &[],
        Reload::Live,
        queues_per_vhost_max
    ),
    limit!(
        "max-exchanges-per-vhost",
        &[],
        Reload::Live,
        exchanges_per_vhost_max
    ),
    limit!(
        "max-consumers-per-channel",
        &[],
        Reload::Live,
        consumers_per_channel_max
    ),
    size_limit!("max-name-bytes", Reload::Live, name_bytes_max),
    size_limit!("max-message-bytes", Reload::Live, message_bytes_max),
    size_limit!("frame-max", Reload::NewConnections, frame_bytes_max),
    limit!("heartbeat", &[], Reload::NewConnections, heartbeat_s),
    limit!(
        "handshake-timeout-ms",
        &[],
        Reload::Live,
        handshake_timeout_ms
    ),
    Setting {
        name: "max-outbound-bytes",
        flag_aliases: &[],
        value_name: "SIZE",
        kind: ValueKind::Size,
        reload: Reload::NewConnections,
        secret: false,
        set: |s, v| {
            s.server.broker.limits.outbound_bytes_max = size_usize(v)?;
            Ok(())
        },
        get: |s| {
            Some(format_size(
                s.server.broker.limits.outbound_bytes_max as u64,
            ))
        },
    },
];

/// The index and entry of the setting a command-line flag (without `--`) names, aliases
/// included.
pub fn find_flag(flag: &str) -> Option<(usize, &'static Setting)> {
    SETTINGS
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == flag || s.flag_aliases.contains(&flag))
}

/// The index and entry of the setting a file key names (no aliases).
pub fn find(name: &str) -> Option<(usize, &'static Setting)> {
    SETTINGS.iter().enumerate().find(|(_, s)| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_setting_reads_back_what_it_prints() {
        let mut s = Settings::default();
        s.server.ready_file = Some("/tmp/ready.json".into());
        s.tls.cert = Some("/c.pem".into());
        s.tls.key = Some("/k.pem".into());
        s.tls.client_ca = Some("/ca.pem".into());
        s.server.fsync = FsyncMode::Interval(Duration::from_millis(250));
        for setting in SETTINGS {
            let Some(text) = (setting.get)(&s) else {
                panic!("{} is unset", setting.name)
            };
            let mut copy = Settings::default();
            (setting.set)(&mut copy, &text).unwrap_or_else(|e| panic!("{}: {e}", setting.name));
            assert_eq!((setting.get)(&copy), Some(text), "{}", setting.name);
        }
    }

    #[test]
    fn names_are_unique_and_env_names_follow_the_rule() {
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        let (_, s) = find("max-connections").unwrap();
        assert_eq!(s.env_name(), "RELAYMQ_SERVER_MAX_CONNECTIONS");
        assert_eq!(find_flag("channel-max").unwrap().1.name, "max-channels");
        assert!(find("channel-max").is_none());
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let mut s = Settings::default();
        let set = |s: &mut Settings, name: &str, v: &str| (find(name).unwrap().1.set)(s, v);
        assert!(set(&mut s, "workers", "0")
            .unwrap_err()
            .contains("from 1 to"));
        assert!(set(&mut s, "listen", "nowhere")
            .unwrap_err()
            .contains("nowhere"));
        assert!(set(&mut s, "log-level", "loud")
            .unwrap_err()
            .contains("debug"));
        assert!(set(&mut s, "segment-bytes", "1").is_err());
        assert!(set(&mut s, "max-connections", "-1").is_err());
        assert!(set(&mut s, "memory-high-watermark", "1.5").is_err());
        assert!(set(&mut s, "max-connections", "-1")
            .unwrap_err()
            .contains("is not a whole number from 0 to"));
        assert!(set(&mut s, "workers", "100000")
            .unwrap_err()
            .contains("1 to 1024"));
        // Caught before anything is touched (exit 2), not at the first start (exit 1).
        assert!(set(&mut s, "default-user", "").is_err());
        assert!(set(&mut s, "default-pass", "")
            .unwrap_err()
            .contains("must not be empty"));
    }
}
