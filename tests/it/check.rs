//! `relaymq-server --check` on real data directories: exit 0 on a clean stopped one, 2 on
//! a running server's and on a missing one, 1 naming the file when a record is damaged.

use crate::common;

use common::{queue_dir, record_spans, run_check, segment_files, ServerProcess};
use relaymq::client::{Connection, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::time::Duration;

/// Declares the durable queue `name` and publishes `count` persistent messages to it,
/// confirmed.
fn fill(server: &ServerProcess, name: &str, count: usize) {
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name, durable).unwrap();
    ch.confirm_select().unwrap();
    let props = BasicProperties {
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    for i in 0..count {
        ch.basic_publish("", name, false, &props, format!("{name}-{i}").as_bytes())
            .unwrap();
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    conn.close().unwrap();
}

#[test]
fn a_clean_stopped_directory_exits_0_and_lists_its_queues() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    fill(&server, "c.q", 5);
    fill(&server, "c.empty", 0);
    assert!(server.terminate().success());

    let run = run_check(&data);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains("queue \"c.q\" in vhost \"/\" id ")
            && run.stdout.contains(": 5 valid messages"),
        "{run}"
    );
    assert!(run.stdout.contains("queue \"c.empty\""), "{run}");
    let summary = run.stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("summary: 2 queues, 5 valid messages,") && summary.ends_with(": ok"),
        "{run}"
    );
    // Checking twice gives the same answer: the first changed nothing.
    let again = run_check(&data);
    assert_eq!(again.stdout, run.stdout);
}

#[test]
fn a_running_servers_directory_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    fill(&server, "r.q", 1);
    let run = run_check(&data);
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("in use"), "{run}");
    assert!(run.stdout.is_empty(), "{run}");
    // The server is unaffected and stops cleanly; then the directory checks clean.
    fill(&server, "r.q", 1);
    assert!(server.terminate().success());
    assert_eq!(run_check(&data).code, 0);
}

#[test]
fn a_flipped_byte_in_a_record_exits_1_and_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let server = ServerProcess::start(&data, &[]);
    fill(&server, "f.q", 3);
    assert!(server.terminate().success());

    let segment = segment_files(&queue_dir(&data, "f.q"))
        .into_iter()
        .next()
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let spans = record_spans(&bytes);
    assert_eq!(spans.len(), 3);
    // A byte of the first record's body: the record is damaged, the next ones intact, so
    // this is damage in the middle of the file (not a torn tail).
    let at = spans[0].end - 6;
    bytes[at] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();

    let run = run_check(&data);
    assert_eq!(run.code, 1, "{run}");
    let problem = run
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("problem:"))
        .unwrap_or_else(|| panic!("no problem line\n{run}"));
    assert!(
        problem.contains(&segment.display().to_string()),
        "{problem}"
    );
    assert!(problem.contains("damaged bytes 0.."), "{problem}");
    assert!(run.stdout.contains(": 2 valid messages"), "{run}");
    assert!(run
        .stdout
        .lines()
        .last()
        .unwrap_or_default()
        .ends_with("PROBLEMS"));
    // Nothing was repaired by the check.
    assert_eq!(std::fs::read(&segment).unwrap(), bytes);
}

#[test]
fn a_missing_directory_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("absent");
    let run = run_check(&missing);
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("absent"), "{run}");
    assert!(!missing.exists(), "the check created the directory");

    // A directory that is not a data directory (no meta.db) cannot be checked either.
    let run = run_check(tmp.path());
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("meta.db"), "{run}");
}
