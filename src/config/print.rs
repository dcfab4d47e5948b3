//! `relaymq-server --print-config`: the effective value of every setting as TOML that can
//! be pasted into a `--config` file, each line ending with its source (`# default`,
//! `# file`, `# env RELAYMQ_SERVER_…`, `# flag --…`). Secrets show as `"<hidden>"` on a
//! commented-out line, so pasting the output never sets a password to that text.

use crate::config::layers::{Layered, Origin};
use crate::config::table::{Setting, ValueKind, SETTINGS};

/// What `--print-config` shows instead of a secret's value.
pub const HIDDEN: &str = "<hidden>";

/// Settings that only matter with TLS on; while it is off their defaults are printed as
/// comments (set without `tls-cert`/`tls-key` they would stop the start-up).
const TLS_ONLY: [&str; 4] = [
    "tls-listen",
    "amqp-tls-listen",
    "https-listen",
    "tls-client-auth",
];

/// Settings whose default is read off the machine (`workers`: the number of CPUs); while
/// they are at their default they are printed as comments, so a pasted copy does not pin
/// this machine's value on another.
const MACHINE_DEFAULTS: [&str; 1] = ["workers"];

/// A setting's value as a TOML value: integers bare, everything else a quoted string
/// (a relative memory watermark bare as a float).
fn toml_value(setting: &Setting, text: &str) -> String {
    let bare = match setting.kind {
        ValueKind::Integer => true,
        ValueKind::Size => text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty(),
        ValueKind::Watermark => text.contains('.') && text.parse::<f64>().is_ok(),
        ValueKind::Text => false,
    };
    if bare {
        text.to_string()
    } else {
        toml::Value::String(text.to_string()).to_string()
    }
}

/// The value text shown for `setting` in `layered`: `None` when not set, [`HIDDEN`] for a
/// secret.
pub fn shown_value(setting: &Setting, layered: &Layered) -> Option<String> {
    let text = (setting.get)(&layered.settings)?;
    Some(if setting.secret {
        HIDDEN.to_string()
    } else {
        text
    })
}

/// The source comment of an origin: `default`, `file`, `env NAME`, `flag --NAME`.
fn source_comment(origin: &Origin) -> String {
    match origin {
        Origin::Default | Origin::File(_) => origin.kind().to_string(),
        Origin::Env(var) => format!("env {var}"),
        Origin::Flag(flag) => format!("flag {flag}"),
    }
}

/// The whole `--print-config` text: a header naming the config file, then one line per
/// setting in [`SETTINGS`] order.
pub fn render(layered: &Layered) -> String {
    let mut out = String::from("# relaymq-server effective configuration (--print-config)\n");
    match &layered.config_file {
        Some(p) => out.push_str(&format!("# config file: {}\n", p.display())),
        None => out.push_str("# config file: none (no --config)\n"),
    }
    let tls_on = layered.settings.tls.cert.is_some();
    for (setting, origin) in SETTINGS.iter().zip(&layered.origins) {
        let source = source_comment(origin);
        match shown_value(setting, layered) {
            None => out.push_str(&format!("# {} = (not set)  # {source}\n", setting.name)),
            Some(text) => {
                let value = toml_value(setting, &text);
                let commented =
                    !tls_on && TLS_ONLY.contains(&setting.name) && *origin == Origin::Default;
                let machine_default =
                    MACHINE_DEFAULTS.contains(&setting.name) && *origin == Origin::Default;
                if machine_default {
                    out.push_str(&format!(
                        "# {} = {value}  # {source} (depends on this machine)\n",
                        setting.name
                    ));
                } else if setting.secret {
                    out.push_str(&format!(
                        "# {} = {value}  # {source} (hidden: set it yourself)\n",
                        setting.name
                    ));
                } else if commented {
                    out.push_str(&format!(
                        "# {} = {value}  # {source} (used only with tls-cert and tls-key)\n",
                        setting.name
                    ));
                } else {
                    out.push_str(&format!("{} = {value}  # {source}\n", setting.name));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::layers::{load, Inputs};

    #[test]
    fn the_output_is_toml_that_reads_back_the_same_values() {
        let inputs = Inputs {
            config_file: None,
            flags: vec![
                ("max-connections".into(), "77".into()),
                ("default-pass".into(), "s3cret".into()),
                ("memory-high-watermark".into(), "0.25".into()),
                ("amqp-listen".into(), "off".into()),
            ],
        };
        let layered = load(&inputs, Vec::new()).unwrap();
        let text = render(&layered);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.contains("default-pass = \"<hidden>\"  # flag --default-pass"),
            "{text}"
        );
        assert!(
            text.contains("max-connections = 77  # flag --max-connections"),
            "{text}"
        );
        assert!(text.contains("frame-max = \"128KiB\"  # default"), "{text}");
        let table: toml::Table = text.parse().unwrap();
        assert_eq!(table["max-connections"].as_integer(), Some(77));
        assert_eq!(table["memory-high-watermark"].as_float(), Some(0.25));
        assert_eq!(table["amqp-listen"].as_str(), Some("off"));
        assert!(!table.contains_key("tls-listen"));
        assert!(!table.contains_key("ready-file"));
        // The secret is on a comment line: pasting the output never sets it to "<hidden>".
        assert!(!table.contains_key("default-pass"), "{text}");
        assert!(
            !table.contains_key("workers"),
            "the CPU count is not pinned: {text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        // Pasted into a file (secret aside), it loads to the same settings.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pasted.toml");
        std::fs::write(&path, &text).unwrap();
        let again = load(
            &Inputs {
                config_file: Some(path),
                flags: vec![],
            },
            Vec::new(),
        )
        .unwrap();
        again.server_config().unwrap();
        for s in SETTINGS.iter().filter(|s| !s.secret) {
            assert_eq!(
                (s.get)(&again.settings),
                (s.get)(&layered.settings),
                "{}",
                s.name
            );
        }
    }
}
