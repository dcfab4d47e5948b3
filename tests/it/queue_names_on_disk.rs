//! Queue names never reach the file system: durable queues named like paths (`../../x`,
//! `a/b`), in CJK, and 255 bytes long keep their persistent messages across a restart,
//! while every file the server creates stays inside the data directory under names of its
//! own (`queues/<32 hex>/queue_data.N`, …), none of which contains a queue name.

use crate::common;

use common::{run_check, ServerProcess};
use relaymq::client::{Connection, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A name of exactly 255 bytes of 1-, 2- and 3-byte UTF-8 characters.
fn long_name() -> String {
    let name = format!("ü{}x", "队".repeat(84));
    assert_eq!(name.len(), 255);
    name
}

fn names() -> Vec<String> {
    vec![
        "../../x".to_string(),
        "a/b".to_string(),
        "队列".to_string(),
        long_name(),
    ]
}

const MESSAGES: usize = 3;

fn message(queue: &str, i: usize) -> Vec<u8> {
    format!("{queue} #{i}").into_bytes()
}

/// Every path under `root` (files and directories), recursively, symlinks not followed.
fn walk(root: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.insert(path);
        }
    }
    out
}

/// Whether `name` is one the server gives an entry of its data directory.
fn is_server_name(name: &str, depth: usize) -> bool {
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix).is_some_and(|n| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0')
        })
    };
    match depth {
        0 => matches!(
            name,
            "LOCK" | "meta.db" | "meta.db-wal" | "meta.db-shm" | "queues"
        ),
        1 => name.len() == 32 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        2 => name == "queue_stat" || numbered("queue_data.") || numbered("queue_acks."),
        _ => false,
    }
}

/// Asserts that everything under `root` is inside `data` (besides `root`'s own nesting
/// directories, created by the test), that every entry of `data` has a server-made name,
/// and that no path contains a queue name or a distinctive part of one.
fn assert_contained(root: &Path, data: &Path, nesting: &BTreeSet<PathBuf>) {
    for path in walk(root) {
        if nesting.contains(&path) || path == data {
            continue;
        }
        let inside = path
            .strip_prefix(data)
            .unwrap_or_else(|_| panic!("{} is outside the data directory", path.display()));
        let components: Vec<&str> = inside
            .iter()
            .map(|c| c.to_str().expect("UTF-8 path"))
            .collect();
        let depth = components.len() - 1;
        let last = components[depth];
        let parents_ok = depth == 0 || (components[0] == "queues" && depth <= 2);
        assert!(
            parents_ok && is_server_name(last, depth),
            "unexpected entry {} in the data directory",
            path.display()
        );
        let text = format!("/{}", inside.to_str().unwrap());
        for needle in ["队", "ü", "a/b", "/x"] {
            assert!(!text.contains(needle), "{text} contains {needle:?}");
        }
    }
}

#[test]
fn queue_names_stay_out_of_paths_and_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    // Nested deep enough that a name climbing out of `queues/` by `..` still lands inside
    // the walked temporary directory.
    let nest = tmp.path().join("n1").join("n2").join("n3");
    std::fs::create_dir_all(&nest).unwrap();
    let nesting: BTreeSet<PathBuf> = walk(tmp.path());
    let data = nest.join("data");

    let server = ServerProcess::start(&data, &["--log-level", "error"]);
    {
        let conn = Connection::connect(&server.addr_string()).unwrap();
        let ch = conn.open_channel().unwrap();
        ch.confirm_select().unwrap();
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..BasicProperties::default()
        };
        for name in names() {
            let durable = QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            };
            let ok = ch.queue_declare(&name, durable).unwrap();
            assert_eq!(ok.queue, name);
            for i in 0..MESSAGES {
                ch.basic_publish("", &name, false, &props, &message(&name, i))
                    .unwrap();
            }
        }
        assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
        conn.close().unwrap();
    }
    assert_contained(tmp.path(), &data, &nesting);
    assert!(server.terminate().success());

    let run = run_check(&data);
    assert_eq!(run.code, 0, "{run}");
    for name in names() {
        // Names are printed escaped and quoted.
        assert!(
            run.stdout
                .contains(&format!("queue {name:?} in vhost \"/\" id ")),
            "{run}"
        );
    }

    let server = ServerProcess::start(&data, &["--log-level", "error"]);
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    for name in names() {
        let mut got = Vec::new();
        while let Some(m) = ch.basic_get(&name, true).unwrap() {
            got.push(m.body);
            assert!(got.len() <= MESSAGES, "runaway queue");
        }
        let expected: Vec<Vec<u8>> = (0..MESSAGES).map(|i| message(&name, i)).collect();
        assert_eq!(got, expected, "queue {name:?}");
    }
    conn.close().unwrap();
    assert_contained(tmp.path(), &data, &nesting);
    assert!(server.terminate().success());
    assert_contained(tmp.path(), &data, &nesting);
}
