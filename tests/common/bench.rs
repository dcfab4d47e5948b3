//! Running the `relaymq-bench` binary from tests: the process, its one JSON line, and
//! checks on what a run leaves on the server.

use super::TestServer;
use relaymq::client::{Connection, QueueDeclareOptions};
use std::process::{Command, Output};

/// The `relaymq-bench` binary built with the tests.
pub const BENCH: &str = env!("CARGO_BIN_EXE_relaymq-bench");

/// Runs `relaymq-bench` with `args` to completion.
pub fn bench(args: &[&str]) -> Output {
    Command::new(BENCH)
        .args(args)
        .output()
        .expect("relaymq-bench runs")
}

/// Runs `args` (plus `--json`), expects exit 0 and exactly one JSON line; returns it.
pub fn json_of(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = bench(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}\nstdout: {stdout}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: exactly one JSON line: {stdout}");
    serde_json::from_str(lines[0]).expect("JSON")
}

/// An unsigned count of the summary, which must be there.
pub fn count(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Asserts that no `relaymq-bench.q.N` queue (N < `queues`) is left.
pub fn assert_queues_gone(server: &TestServer, queues: usize) {
    let conn = Connection::connect(&server.addr_string()).expect("connect");
    for i in 0..queues {
        let ch = conn.open_channel().expect("channel");
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let r = ch.queue_declare(&format!("relaymq-bench.q.{i}"), passive);
        assert_eq!(
            r.err().and_then(|e| e.reply_code()),
            Some(404),
            "queue {i} was deleted"
        );
    }
    conn.close().expect("close");
}
