//! SIGHUP: read the file and the environment again (flags still win), apply what can change
//! while the server runs, warn about the rest.
//!
//! Live: `log-level` (`log::set_max_level`), `memory-high-watermark` and
//! `disk-free-limit` (checked at once), and every limit through
//! [`crate::limits::LiveLimits::store`]: counts, names, message size and the handshake
//! deadline at their next check; `frame-max`, `heartbeat`, `max-channels` and
//! `max-outbound-bytes` for connections opened after the reload (an open connection keeps
//! what it negotiated or was given at accept). Everything else needs a restart: a reload
//! logs a warning naming it and keeps the running value. A file that does not load changes
//! nothing.

use crate::broker::Broker;
use crate::config::layers::{load, ConfigError, Inputs, Layered};
use crate::config::print::HIDDEN;
use crate::config::table::{Reload, SETTINGS};
use std::ffi::OsString;

/// One setting whose value differs between the running configuration and the file and
/// environment just read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The setting's name.
    pub name: &'static str,
    /// The running value (`<hidden>` for a secret, `(not set)` when unset).
    pub old: String,
    /// The value read (same conventions).
    pub new: String,
    /// What a reload does with it.
    pub reload: Reload,
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Changes now in force (live or for new connections).
    pub applied: Vec<Change>,
    /// Changes that need a restart; the running values were kept.
    pub restart_needed: Vec<Change>,
}

/// What a change's value looks like in a log line.
fn shown(secret: bool, value: Option<String>) -> String {
    match (secret, value) {
        (true, _) => HIDDEN.to_string(),
        (false, Some(v)) => v,
        (false, None) => "(not set)".to_string(),
    }
}

/// Takes the origin of setting `index` from `new` into `merged`.
fn copy_origin(merged: &mut Layered, new: &Layered, index: usize) {
    if let (Some(to), Some(from)) = (merged.origins.get_mut(index), new.origins.get(index)) {
        *to = from.clone();
    }
}

/// Merges the live changes of `new` into a copy of `running` and returns it with what
/// changed; `running` itself is not touched.
///
/// # Errors
/// `new` does not pass its cross-checks ([`Layered::server_config`]), or the merged result
/// does not (a combination of a new and a kept value).
pub fn merge(running: &Layered, new: &Layered) -> Result<(Layered, ReloadOutcome), ConfigError> {
    new.server_config()?;
    let mut merged = running.clone();
    let mut outcome = ReloadOutcome::default();
    for (index, setting) in SETTINGS.iter().enumerate() {
        let old_text = (setting.get)(&running.settings);
        let new_text = (setting.get)(&new.settings);
        if old_text == new_text {
            copy_origin(&mut merged, new, index);
            continue;
        }
        let change = Change {
            name: setting.name,
            old: shown(setting.secret, old_text),
            new: shown(setting.secret, new_text.clone()),
            reload: setting.reload,
        };
        if setting.reload == Reload::Restart {
            outcome.restart_needed.push(change);
            continue;
        }
        // Live settings are never optional: `get` always has a value.
        if let Some(text) = new_text {
            (setting.set)(&mut merged.settings, &text).map_err(|e| ConfigError {
                message: format!("{}: {e}", setting.name),
            })?;
            copy_origin(&mut merged, new, index);
            outcome.applied.push(change);
        }
    }
    merged.server_config()?;
    Ok((merged, outcome))
}

/// Puts the live values of `settings` in force in `broker`: the limits, and the alarm
/// watermarks that `outcome` says changed in the configuration (each checked at once; a
/// watermark set at run time with `relaymq-cli set` stays until the configured value
/// changes). The log level is the caller's (`log::set_max_level`, after logging).
///
/// # Errors
/// A limit out of range ([`crate::limits::LiveLimits::store`]; nothing changed then).
pub fn apply(
    settings: &crate::config::Settings,
    outcome: &ReloadOutcome,
    broker: &Broker,
) -> Result<(), ConfigError> {
    let limits = &settings.server.broker.limits;
    broker.limits().store(limits).map_err(|e| ConfigError {
        message: e.to_string(),
    })?;
    let changed = |name: &str| outcome.applied.iter().any(|c| c.name == name);
    let alarms = broker.alarms();
    let wanted = settings.server.broker.alarms;
    if changed("memory-high-watermark") {
        alarms
            .set_memory_high_watermark(wanted.memory_high_watermark)
            .map_err(|e| ConfigError {
                message: format!("memory-high-watermark: {e}"),
            })?;
    }
    if changed("disk-free-limit") {
        alarms.set_disk_free_limit(wanted.disk_free_limit_bytes);
    }
    Ok(())
}

/// The whole reload: loads `inputs` with `env` (normally `std::env::vars_os()`), merges
/// ([`merge`]), applies ([`apply`]), replaces `running`, logs one line per applied change
/// (`config reload: max-connections 1000 -> 2000`) and a warning per change that needs a
/// restart, then sets the log level. On an error nothing changes and the error is returned (the caller logs it).
///
/// # Errors
/// As [`load`] and [`merge`]; [`apply`] cannot fail after a successful merge.
pub fn reload(
    running: &mut Layered,
    inputs: &Inputs,
    env: impl IntoIterator<Item = (OsString, OsString)>,
    broker: &Broker,
) -> Result<ReloadOutcome, ConfigError> {
    let new = load(inputs, env)?;
    let (merged, outcome) = merge(running, &new)?;
    // The watermarks in force, which `relaymq-cli set` may have changed since the last
    // configuration: the log says so rather than show only the configured value.
    let in_force = broker.alarms().config();
    apply(&merged.settings, &outcome, broker)?;
    *running = merged;
    // The lines below are written at the more verbose of the old and the new level, so a
    // reload from `error` back to `info` still says what it changed.
    log::set_max_level(log::max_level().max(running.settings.log_level));
    for c in &outcome.applied {
        let scope = match c.reload {
            Reload::NewConnections => " (for connections opened from now on)".to_string(),
            _ => {
                let before = match c.name {
                    "memory-high-watermark" => Some(in_force.memory_high_watermark.to_string()),
                    "disk-free-limit" => Some(crate::types::size::format_size(
                        in_force.disk_free_limit_bytes,
                    )),
                    _ => None,
                };
                match before {
                    Some(b) if b != c.old => format!(" (in force until now: {b}, set at run time)"),
                    _ => String::new(),
                }
            }
        };
        log::info!("config reload: {} {} -> {}{scope}", c.name, c.old, c.new);
    }
    for c in &outcome.restart_needed {
        log::warn!(
            "config reload: {} changed ({} -> {}) but needs a restart; keeping {}",
            c.name,
            c.old,
            c.new,
            c.old
        );
    }
    if outcome.applied.is_empty() && outcome.restart_needed.is_empty() {
        log::info!("config reload: nothing changed");
    }
    // Last, so that the lines above are logged at the level they were reloaded under.
    log::set_max_level(running.settings.log_level);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layered(flags: &[(&str, &str)]) -> Layered {
        let inputs = Inputs {
            config_file: None,
            flags: flags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        load(&inputs, Vec::new()).unwrap()
    }

    #[test]
    fn live_changes_are_merged_and_restart_ones_kept() {
        let running = layered(&[("max-connections", "5"), ("workers", "2")]);
        let new = layered(&[
            ("max-connections", "9"),
            ("workers", "4"),
            ("frame-max", "8192"),
            ("default-pass", "new-secret"),
        ]);
        let (merged, outcome) = merge(&running, &new).unwrap();
        assert_eq!(merged.settings.server.broker.limits.connections_max, 9);
        assert_eq!(merged.settings.server.broker.limits.frame_bytes_max, 8192);
        assert_eq!(merged.settings.server.workers, 2);
        let applied: Vec<_> = outcome.applied.iter().map(|c| c.name).collect();
        assert_eq!(applied, ["max-connections", "frame-max"]);
        assert_eq!(outcome.applied[0].old, "5");
        assert_eq!(outcome.applied[0].new, "9");
        let restart: Vec<_> = outcome.restart_needed.iter().map(|c| c.name).collect();
        assert_eq!(restart, ["workers", "default-pass"]);
        assert_eq!(outcome.restart_needed[1].new, HIDDEN);
        assert_eq!(merged.settings.server.broker.default_pass, "guest");
    }

    #[test]
    fn a_reload_puts_changed_values_in_force_and_leaves_runtime_alarm_changes() {
        use crate::alarm::MemoryWatermark;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relaymq.toml");
        std::fs::write(&path, "max-connections = 1\n").unwrap();
        let inputs = Inputs {
            config_file: Some(path.clone()),
            flags: vec![("heartbeat".into(), "30".into())],
        };
        let mut running = load(&inputs, Vec::new()).unwrap();
        let broker = Broker::new(running.server_config().unwrap().broker);
        assert_eq!(broker.limits().connections_max(), 1);
        // An operator's run-time change (relaymq-cli set memory-high-watermark).
        let by_hand = MemoryWatermark::Absolute(1 << 40);
        broker.alarms().set_memory_high_watermark(by_hand).unwrap();
        std::fs::write(&path, "max-connections = 2\nheartbeat = 5\nworkers = 9\n").unwrap();
        let outcome = reload(&mut running, &inputs, Vec::new(), &broker).unwrap();
        assert_eq!(broker.limits().connections_max(), 2);
        assert_eq!(broker.limits().heartbeat_s(), 30, "the flag still wins");
        assert_eq!(broker.alarms().config().memory_high_watermark, by_hand);
        assert_eq!(outcome.restart_needed[0].name, "workers");
        std::fs::write(&path, "max-connections = 2\ndisk-free-limit = \"5GiB\"\n").unwrap();
        reload(&mut running, &inputs, Vec::new(), &broker).unwrap();
        assert_eq!(broker.alarms().config().disk_free_limit_bytes, 5 << 30);
        std::fs::write(&path, "max-connections = 3\nbogus = 1\n").unwrap();
        assert!(reload(&mut running, &inputs, Vec::new(), &broker).is_err());
        assert_eq!(
            broker.limits().connections_max(),
            2,
            "a bad file changes nothing"
        );
    }

    #[test]
    fn a_bad_new_configuration_changes_nothing() {
        let running = layered(&[]);
        let bad = layered(&[("tls-cert", "/c.pem")]);
        assert!(merge(&running, &bad).is_err());
    }
}
