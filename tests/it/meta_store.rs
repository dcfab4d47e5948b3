//! The definitions store (`meta.db`): round trips through close and reopen, cascading
//! deletes, vhost isolation, schema versions, damaged rows.

use relaymq::storage::meta::{
    is_valid_queue_id, new_queue_id, BindingDef, Definitions, ExchangeDef, MetaStore, QueueDef,
    SCHEMA_VERSION,
};
use relaymq::storage::StorageError;
use relaymq::types::{FieldTable, FieldValue};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Names that break naive SQL, paths or encodings.
fn tricky_names() -> Vec<String> {
    vec![
        "../../x".to_string(),
        "a/b".to_string(),
        "队列".to_string(),
        "it's \"quoted\"".to_string(),
        "x'); DROP TABLE queues; --".to_string(),
        "".to_string(),
        "q".repeat(255),
        "é".repeat(127), // 254 bytes
    ]
}

fn nested_arguments() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("depth".into(), FieldValue::I32(2));
    inner.insert("bytes".into(), FieldValue::Bytes(vec![0, 1, 255]));
    let mut t = FieldTable::new();
    t.insert("x-max-length".into(), FieldValue::I64(1000));
    t.insert("x-match".into(), FieldValue::string("all"));
    t.insert("nested".into(), FieldValue::Table(inner.clone()));
    t.insert(
        "list".into(),
        FieldValue::Array(vec![
            FieldValue::Bool(true),
            FieldValue::Table(inner),
            FieldValue::Void,
            FieldValue::F64(-0.5),
            FieldValue::Decimal(2, 314),
            FieldValue::Timestamp(1_700_000_000),
        ]),
    );
    t.insert("名前".into(), FieldValue::string("值"));
    t
}

fn exchange(vhost: &str, name: &str) -> ExchangeDef {
    ExchangeDef {
        vhost: vhost.into(),
        name: name.into(),
        kind: "topic".into(),
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
    }
}

fn queue(vhost: &str, name: &str) -> QueueDef {
    QueueDef {
        vhost: vhost.into(),
        name: name.into(),
        id: new_queue_id(),
        auto_delete: false,
        arguments: FieldTable::new(),
        paused: false,
    }
}

fn binding(vhost: &str, source: &str, destination: &str, to_exchange: bool) -> BindingDef {
    BindingDef {
        vhost: vhost.into(),
        source: source.into(),
        destination: destination.into(),
        destination_is_exchange: to_exchange,
        routing_key: "k".into(),
        arguments: FieldTable::new(),
    }
}

fn open(dir: &Path) -> MetaStore {
    MetaStore::open(&db_path(dir)).unwrap()
}

fn db_path(dir: &Path) -> PathBuf {
    dir.join("meta.db")
}

/// A store with vhost `vh` holding exchanges `e1`, `e2`, queue `q` and bindings
/// e1→q, e1→e2, e2→q, e2→e1.
fn small_store(dir: &Path, vh: &str) -> (MetaStore, QueueDef) {
    let store = open(dir);
    store.put_vhost(vh).unwrap();
    store.put_exchange(&exchange(vh, "e1")).unwrap();
    store.put_exchange(&exchange(vh, "e2")).unwrap();
    let q = queue(vh, "q");
    store.put_queue(&q).unwrap();
    for b in [
        binding(vh, "e1", "q", false),
        binding(vh, "e1", "e2", true),
        binding(vh, "e2", "q", false),
        binding(vh, "e2", "e1", true),
    ] {
        store.put_binding(&b).unwrap();
    }
    (store, q)
}

fn pairs(bindings: &[BindingDef]) -> Vec<(String, String, bool)> {
    bindings
        .iter()
        .map(|b| {
            (
                b.source.clone(),
                b.destination.clone(),
                b.destination_is_exchange,
            )
        })
        .collect()
}

#[test]
fn every_kind_round_trips_through_reopen_with_tricky_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mut expected = Definitions::default();
    {
        let store = open(tmp.path());
        for vh in ["/", "vh/2", "../../x"] {
            store.put_vhost(vh).unwrap();
            expected.vhosts.push(vh.to_string());
        }
        for vh in ["/", "vh/2"] {
            for (i, name) in tricky_names().into_iter().enumerate() {
                let x = ExchangeDef {
                    vhost: vh.into(),
                    name: name.clone(),
                    kind: ["direct", "fanout", "topic", "headers"][i % 4].into(),
                    auto_delete: i % 2 == 0,
                    internal: i % 3 == 0,
                    arguments: nested_arguments(),
                };
                store.put_exchange(&x).unwrap();
                expected.exchanges.push(x);
                let q = QueueDef {
                    vhost: vh.into(),
                    name: name.clone(),
                    id: new_queue_id(),
                    auto_delete: i % 2 == 1,
                    arguments: nested_arguments(),
                    paused: i % 3 == 1,
                };
                store.put_queue(&q).unwrap();
                expected.queues.push(q);
                for to_exchange in [false, true] {
                    let b = BindingDef {
                        vhost: vh.into(),
                        source: "amq.topic".into(), // a built-in source is not stored
                        destination: name.clone(),
                        destination_is_exchange: to_exchange,
                        routing_key: format!("{name}.#"),
                        arguments: nested_arguments(),
                    };
                    store.put_binding(&b).unwrap();
                    expected.bindings.push(b);
                }
            }
        }
    }
    expected.vhosts.sort();
    expected
        .exchanges
        .sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    expected
        .queues
        .sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    expected.bindings.sort_by(|a, b| {
        (
            &a.vhost,
            &a.source,
            a.destination_is_exchange,
            &a.destination,
        )
            .cmp(&(
                &b.vhost,
                &b.source,
                b.destination_is_exchange,
                &b.destination,
            ))
    });

    let store = open(tmp.path());
    let loaded = store.load().unwrap();
    assert_eq!(loaded, expected);
    let mut ids: Vec<String> = expected.queues.iter().map(|q| q.id.clone()).collect();
    ids.sort();
    assert_eq!(store.queue_ids().unwrap(), ids);
    // No name became a path: the data directory holds only the database files.
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(name.starts_with("meta.db"), "unexpected file {name}");
    }
}

#[test]
fn puts_are_idempotent_and_replace() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    store.put_vhost("/").unwrap();
    store.put_vhost("/").unwrap();
    let mut x = exchange("/", "x");
    store.put_exchange(&x).unwrap();
    store.put_exchange(&x).unwrap();
    x.kind = "fanout".into();
    x.arguments = nested_arguments();
    store.put_exchange(&x).unwrap();
    let mut q = queue("/", "q");
    store.put_queue(&q).unwrap();
    store.put_queue(&q).unwrap();
    q.auto_delete = true;
    store.put_queue(&q).unwrap();
    let mut b = binding("/", "x", "q", false);
    b.arguments = nested_arguments();
    store.put_binding(&b).unwrap();
    store.put_binding(&b).unwrap();
    // Another key or other arguments make another binding.
    let mut other_key = b.clone();
    other_key.routing_key = "other".into();
    store.put_binding(&other_key).unwrap();
    let mut other_args = b.clone();
    other_args.arguments = FieldTable::new();
    store.put_binding(&other_args).unwrap();

    let d = store.load().unwrap();
    assert_eq!(d.vhosts, ["/"]);
    assert_eq!(d.exchanges, [x]);
    assert_eq!(d.queues, [q]);
    assert_eq!(d.bindings.len(), 3);
    assert!(d.bindings.contains(&b));

    store.delete_binding(&b).unwrap();
    store.delete_binding(&b).unwrap();
    let d = store.load().unwrap();
    assert_eq!(d.bindings.len(), 2);
    assert!(!d.bindings.contains(&b));
}

#[test]
fn delete_exchange_removes_bindings_from_and_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = small_store(tmp.path(), "/");
    store.delete_exchange("/", "e1").unwrap();
    let d = store.load().unwrap();
    assert_eq!(d.exchanges, [exchange("/", "e2")]);
    assert_eq!(pairs(&d.bindings), [("e2".into(), "q".into(), false)]);
    // Absent: still succeeds.
    store.delete_exchange("/", "e1").unwrap();
    store.delete_exchange("nope", "e1").unwrap();
}

#[test]
fn delete_queue_removes_bindings_to_it_and_returns_its_id() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, q) = small_store(tmp.path(), "/");
    // An exchange named like the queue keeps its bindings.
    store.put_exchange(&exchange("/", "q")).unwrap();
    store.put_binding(&binding("/", "e1", "q", true)).unwrap();

    assert_eq!(store.delete_queue("/", "q").unwrap(), Some(q.id.clone()));
    let d = store.load().unwrap();
    assert!(d.queues.is_empty());
    assert_eq!(
        pairs(&d.bindings),
        [
            ("e1".into(), "e2".into(), true),
            ("e1".into(), "q".into(), true),
            ("e2".into(), "e1".into(), true),
        ]
    );
    assert_eq!(store.delete_queue("/", "q").unwrap(), None);
    assert!(store.queue_ids().unwrap().is_empty());
}

#[test]
fn delete_vhost_cascades_and_returns_queue_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, q) = small_store(tmp.path(), "doomed");
    let q2 = queue("doomed", "队列");
    store.put_queue(&q2).unwrap();
    store.put_vhost("kept").unwrap();
    let kept = queue("kept", "q");
    store.put_queue(&kept).unwrap();

    let mut ids = store.delete_vhost("doomed").unwrap();
    ids.sort();
    let mut expected = vec![q.id, q2.id];
    expected.sort();
    assert_eq!(ids, expected);

    drop(store);
    let store = open(tmp.path());
    let d = store.load().unwrap();
    assert_eq!(d.vhosts, ["kept"]);
    assert!(d.exchanges.is_empty());
    assert_eq!(d.queues, std::slice::from_ref(&kept));
    assert!(d.bindings.is_empty());
    assert_eq!(store.queue_ids().unwrap(), [kept.id]);
    assert_eq!(store.delete_vhost("doomed").unwrap(), Vec::<String>::new());
    assert_eq!(store.integrity_check().unwrap(), ["ok"]);
}

#[test]
fn vhosts_are_isolated() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, q_a) = small_store(tmp.path(), "a");
    let q_b = queue("b", "q");
    store.put_vhost("b").unwrap();
    store.put_exchange(&exchange("b", "e1")).unwrap();
    store.put_queue(&q_b).unwrap();
    store.put_binding(&binding("b", "e1", "q", false)).unwrap();
    assert_ne!(q_a.id, q_b.id);

    store.delete_exchange("a", "e1").unwrap();
    assert_eq!(store.delete_queue("a", "q").unwrap(), Some(q_a.id));
    let d = store.load().unwrap();
    assert_eq!(
        d.exchanges,
        [exchange("a", "e2"), exchange("b", "e1")],
        "only vhost a's e1 is gone"
    );
    assert_eq!(d.queues, [q_b]);
    assert_eq!(d.bindings, [binding("b", "e1", "q", false)]);
}

#[test]
fn definitions_in_an_unstored_vhost_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    for err in [
        store.put_exchange(&exchange("ghost", "x")).unwrap_err(),
        store.put_queue(&queue("ghost", "q")).unwrap_err(),
        store
            .put_binding(&binding("ghost", "x", "q", false))
            .unwrap_err(),
    ] {
        assert!(matches!(err, StorageError::Meta(_)), "{err:?}");
        assert!(err.to_string().contains("\"ghost\""), "{err}");
    }
    assert_eq!(store.load().unwrap(), Definitions::default());
}

#[test]
fn a_malformed_queue_id_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    store.put_vhost("/").unwrap();
    let mut q = queue("/", "q");
    q.id = "../../etc".into();
    assert!(matches!(store.put_queue(&q), Err(StorageError::Meta(_))));
    let mut dup = queue("/", "q2");
    store.put_queue(&dup).unwrap();
    dup.name = "q3".into();
    assert!(
        matches!(store.put_queue(&dup), Err(StorageError::Meta(_))),
        "two queues cannot share an id"
    );
}

#[test]
fn a_newer_schema_version_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open(tmp.path()));
    let conn = rusqlite::Connection::open(db_path(tmp.path())).unwrap();
    conn.execute(
        "UPDATE schema_version SET version = ?1",
        [SCHEMA_VERSION + 1],
    )
    .unwrap();
    drop(conn);
    let err = MetaStore::open(&db_path(tmp.path())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StorageError::Meta(_)), "{err:?}");
    assert!(
        msg.contains(&format!(
            "has schema version {}, this relaymq-server supports up to {SCHEMA_VERSION}",
            SCHEMA_VERSION + 1
        )),
        "{msg}"
    );
}

#[test]
fn a_foreign_sqlite_file_is_refused_and_an_empty_one_is_initialised() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("other.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let err = MetaStore::open(&path).unwrap_err();
    assert!(err.to_string().contains("not a RelayMQ"), "{err}");

    let empty = tmp.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let store = MetaStore::open(&empty).unwrap();
    assert_eq!(store.load().unwrap(), Definitions::default());
    let conn = rusqlite::Connection::open(&empty).unwrap();
    let version: u32 = conn
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn a_corrupt_arguments_blob_is_reported_naming_its_row() {
    let cases: [(&str, &str, &[u8]); 4] = [
        (
            "queues",
            "UPDATE queues SET arguments = ?1",
            &[0, 0, 0, 9, 1],
        ),
        (
            "exchanges",
            "UPDATE exchanges SET arguments = ?1 WHERE name = 'e1'",
            // one entry "k" with the unknown type tag 'Z'
            &[0, 0, 0, 3, 1, b'k', b'Z'],
        ),
        ("bindings", "UPDATE bindings SET arguments = ?1", &[]),
        (
            "exchanges",
            "UPDATE exchanges SET arguments = ?1 WHERE name = 'e2'",
            &[0, 0, 0, 0, 7], // a valid empty table and a trailing byte
        ),
    ];
    for (table, sql, blob) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let (store, _) = small_store(tmp.path(), "/");
        drop(store);
        let conn = rusqlite::Connection::open(db_path(tmp.path())).unwrap();
        assert!(conn.execute(sql, [blob]).unwrap() > 0);
        drop(conn);

        let store = open(tmp.path());
        match store.load() {
            Err(StorageError::Corrupt { path, reason }) => {
                assert_eq!(path, db_path(tmp.path()));
                assert!(reason.contains(table), "{reason}");
                assert!(reason.contains("arguments"), "{reason}");
            }
            other => panic!("expected Corrupt for {table}, got {other:?}"),
        }
        // The rest of the store still works (a broker can report and refuse to start).
        assert_eq!(store.integrity_check().unwrap(), ["ok"]);
        assert_eq!(store.queue_ids().unwrap().len(), 1);
    }
}

#[test]
fn a_queue_row_with_a_path_for_an_id_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    drop(small_store(tmp.path(), "/"));
    let conn = rusqlite::Connection::open(db_path(tmp.path())).unwrap();
    // Only possible by bypassing the CHECK constraint, as a hand edit could.
    conn.execute_batch(
        "PRAGMA ignore_check_constraints = ON; UPDATE queues SET id = '../../../../tmp/x';",
    )
    .unwrap();
    drop(conn);
    match open(tmp.path()).load() {
        Err(StorageError::Corrupt { reason, .. }) => {
            assert!(
                reason.contains("queues") && reason.contains("\"q\""),
                "{reason}"
            )
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn integrity_check_is_ok_on_a_sound_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = small_store(tmp.path(), "/");
    assert_eq!(store.integrity_check().unwrap(), ["ok"]);
}

#[test]
fn integrity_check_reports_orphan_rows() {
    let tmp = tempfile::tempdir().unwrap();
    drop(small_store(tmp.path(), "/"));
    let conn = rusqlite::Connection::open(db_path(tmp.path())).unwrap();
    // A careless hand edit with foreign keys off.
    conn.execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM vhosts;")
        .unwrap();
    drop(conn);
    let lines = open(tmp.path()).integrity_check().unwrap();
    assert!(!lines.contains(&"ok".to_string()), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("queues")), "{lines:?}");
}

#[test]
fn queue_ids_are_unique_32_lowercase_hex() {
    let ids: HashSet<String> = (0..10_000).map(|_| new_queue_id()).collect();
    assert_eq!(ids.len(), 10_000);
    for id in &ids {
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(is_valid_queue_id(id));
    }
}

/// Set in the child of `every_acknowledged_write_survives_a_crash`: the data directory.
const CRASH_CHILD_DIR_ENV: &str = "RELAYMQ_TEST_META_CRASH_DIR";
/// Writes the crash child makes before it aborts.
const CRASH_CHILD_WRITES: usize = 200;

/// Not a test on its own: the child half of `every_acknowledged_write_survives_a_crash`.
/// Stores queues, printing each name once `put_queue` returned, then aborts (no
/// destructors, no orderly close of the database).
#[test]
fn crash_child_writes_then_aborts() {
    let Some(dir) = std::env::var_os(CRASH_CHILD_DIR_ENV) else {
        return;
    };
    let store = open(Path::new(&dir));
    store.put_vhost("/").unwrap();
    for i in 0..CRASH_CHILD_WRITES {
        let name = format!("q{i}");
        store.put_queue(&queue("/", &name)).unwrap();
        println!("STORED {name}");
        std::io::stdout().flush().unwrap();
    }
    std::process::abort();
}

#[test]
fn every_acknowledged_write_survives_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            // Its name in the `it` binary: module path, then function.
            "meta_store::crash_child_writes_then_aborts",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_CHILD_DIR_ENV, tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let acknowledged: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // The harness's "test … ... " precedes the first line.
        .filter_map(|l| l.split_once("STORED ").map(|(_, name)| name.to_string()))
        .collect();
    assert!(!child.wait().unwrap().success(), "the child should abort");
    assert_eq!(acknowledged.len(), CRASH_CHILD_WRITES);

    let store = open(tmp.path());
    let names: HashSet<String> = store
        .load()
        .unwrap()
        .queues
        .into_iter()
        .map(|q| q.name)
        .collect();
    for name in &acknowledged {
        assert!(names.contains(name), "{name} was acknowledged but is lost");
    }
    assert_eq!(store.integrity_check().unwrap(), ["ok"]);
}
