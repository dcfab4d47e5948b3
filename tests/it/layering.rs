//! The layers stay layered: a module never imports from a layer above it, so the core
//! never sees the server, and the codecs, the store and the users never see the core
//! (docs/architecture.md, "Layers and modules").
//!
//! Each rule names folders (or files) under `src/` and the crate paths their code must not
//! name. Comments are skipped (a doc link to a higher layer explains, it does not
//! depend); every other line counts, `use` or not.

use std::path::{Path, PathBuf};

/// Layers from the bottom: what each may not import.
const RULES: &[(&[&str], &[&str])] = &[
    // Values, bounds and small utilities: below everything.
    (
        &[
            "types",
            "limits",
            "error.rs",
            "stoppable_thread.rs",
            "tls.rs",
        ],
        &[
            "native",
            "amqp",
            "client",
            "amqp_client",
            "storage",
            "auth",
            "alarm",
            "metrics",
            "broker",
            "server",
            "config",
        ],
    ),
    // The pure codecs.
    (
        &["native", "amqp"],
        &[
            "client",
            "amqp_client",
            "storage",
            "auth",
            "alarm",
            "metrics",
            "broker",
            "server",
            "config",
        ],
    ),
    // The client libraries: the codecs and the values, never the broker's insides.
    (
        &["client", "amqp_client"],
        &[
            "storage", "auth", "alarm", "metrics", "broker", "server", "config",
        ],
    ),
    // The store, the users, metrics and alarms: used by the core, never using it.
    (
        &["storage", "auth", "metrics", "alarm"],
        &["broker", "server", "client", "amqp_client", "config"],
    ),
    // The core: never the adapters, the clients or the configuration files.
    (
        &["broker"],
        &["server", "client", "amqp_client", "config", "links"],
    ),
    // Links to other brokers (shovels, federation): the core and the clients, never the
    // adapters or the configuration files.
    (&["links"], &["server", "config"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for e in entries {
            rust_files(&e, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// Every `crate::<module>` the code (not the comments) of `text` names, with its line.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split(" //").next().unwrap_or(code);
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let ident = |s: &str| -> String {
                s.trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            };
            match after.strip_prefix('{') {
                // `crate::{a::X, b}` names `a` and `b` (one line; nested groups are
                // below the first level and do not matter).
                Some(group) => {
                    let group = group.split('}').next().unwrap_or(group);
                    found.extend(group.split(',').map(|g| (n + 1, ident(g))));
                }
                None => found.push((n + 1, ident(after))),
            }
            rest = after;
        }
    }
    found
}

fn violations() -> Vec<String> {
    let root = src();
    let mut bad = Vec::new();
    for (parts, forbidden) in RULES {
        for part in *parts {
            let mut files = Vec::new();
            rust_files(&root.join(part), &mut files);
            assert!(!files.is_empty(), "src/{part} holds no Rust file");
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                for (line, module) in crate_paths(&text) {
                    if forbidden.contains(&module.as_str()) {
                        let rel = file.strip_prefix(&root).unwrap().display().to_string();
                        bad.push(format!("src/{rel}:{line}: `crate::{module}` from {part}"));
                    }
                }
            }
        }
    }
    bad
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let bad = violations();
    assert!(
        bad.is_empty(),
        "{} upward import(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_scan_sees_code_and_skips_comments() {
    let text = "use crate::broker::Broker;\n/// [`crate::server`]\n    let x = crate::config::load(); // crate::client\nuse crate::{types::X, alarm};\n";
    let names: Vec<String> = crate_paths(text).into_iter().map(|(_, m)| m).collect();
    assert_eq!(names, ["broker", "config", "types", "alarm"]);
}
