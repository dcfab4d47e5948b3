//! The documentation (README.md and docs/*.md) against the product it describes. Cheap
//! checks, each printing every finding as `FILE:LINE: what is wrong`:
//!
//! - **Flags.** Every `--flag` in a code span or a fenced code block exists. A flag
//!   belongs to the program named before it in the same code span or command line
//!   (`relaymq-server`, `relaymq-cli`, `relaymq-bench`, also as a path or after `cargo
//!   run --bin NAME --`; `&&` and `;` end a command): it must be in that binary's `--help`
//!   (for `relaymq-bench`, with its `idle`, `recovery`, `http-api` and `delayed`
//!   subcommands), or in the `--help` of a script ([`SCRIPTS_WITH_HELP`]; another
//!   `scripts/*.sh`: in its text). A flag after another tool (`cargo`, `rabbitmqctl`, …,
//!   [`FOREIGN_PROGRAMS`]) is that tool's and is not checked. A flag with no program
//!   before it must be in one of those `--help` texts, unless [`OTHER_TOOLS_FLAGS`]
//!   lists it.
//! - **Metrics.** Every `relaymq_…` metric name in the docs is served by `/metrics` of the
//!   real server binary, after a durable queue stored, confirmed and delivered a message
//!   (a histogram's `_bucket`, `_sum` and `_count` count as served with it).
//! - **Paths.** Every `src/…`, `tests/…`, `scripts/…`, `fuzz/…` and `docs/…` path exists
//!   (globs such as `scripts/*smoke*.sh` match at least one file; a `<placeholder>` ends
//!   the path), as do every module path relative to `src/` (`server/native/admin.rs`,
//!   `broker/exchange/`), every relative Markdown link and every `NAME.md` named alone (a
//!   doc of docs/ or a file at the root: nothing outside the repository), unless
//!   [`PATHS_MADE_AT_RUN_TIME`] lists it.
//! - **Work items.** No doc (nor a shipped script in `scripts/`) refers to an internal
//!   work item ("issue 8"): they describe the product.

use crate::common;

use common::ServerProcess;
use fancy_regex::Regex;
use relaymq::client::{Connection, ConsumeOptions, ConsumerEvent, QueueDeclareOptions};
use relaymq::types::BasicProperties;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The RelayMQ binaries whose flags the docs name, with their paths.
const BINARIES: [(&str, &str); 3] = [
    ("relaymq-server", env!("CARGO_BIN_EXE_relaymq-server")),
    ("relaymq-cli", env!("CARGO_BIN_EXE_relaymq-cli")),
    ("relaymq-bench", env!("CARGO_BIN_EXE_relaymq-bench")),
];

/// The scripts of `scripts/` that take flags and print them with `--help`: a flag named
/// alone (no program before it) may be one of theirs.
const SCRIPTS_WITH_HELP: [&str; 2] = ["scripts/bench.sh", "scripts/install.sh"];

/// Other programs the docs show with flags of their own; a flag after one of them is that
/// program's and is not checked (until `&&`, `;` or a RelayMQ binary). Each is here for
/// the commands named beside it.
const FOREIGN_PROGRAMS: &[&str] = &[
    // Debian's amqp-tools in the README's quickstart (`amqp-publish --url …`).
    "amqp-publish",
    // Building and running from the checkout (`cargo run --release --bin relaymq-server`),
    // and running one test (`cargo test --release --test NAME -- --nocapture`).
    "cargo",
    // The systemd unit (`systemctl enable --now relaymq`).
    "systemctl",
    // The web UI's browser scenario and its timing mode (`python3 tests/ui/browser.py
    // --http-port … --time-queues N`; its flags are argparse's, checked by running it).
    "python3",
];

/// Flags of other tools that the docs name on their own (no program before them in the
/// code span), each with the tool it belongs to. Empty today: every other tool's flag in
/// the docs follows the tool's name ([`FOREIGN_PROGRAMS`]). Add one here only with its
/// tool, for a flag a sentence names alone (`--nocapture` of `cargo test`, say).
const OTHER_TOOLS_FLAGS: &[(&str, &str)] = &[];

/// Paths the docs name that exist only once something has run, with why.
const PATHS_MADE_AT_RUN_TIME: &[(&str, &str)] = &[
    (
        "fuzz/artifacts/",
        "made by cargo fuzz when a target crashes; ignored by git",
    ),
    (
        "fuzz/regressions/",
        "made for the first input that ever crashed a target (none so far); \
         tests/it/fuzz_corpus.rs replays it when present",
    ),
];

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One document: its path relative to the repository and its text.
struct Doc {
    name: String,
    text: String,
}

/// README.md and every docs/*.md, in name order.
fn docs() -> Vec<Doc> {
    let mut names = vec!["README.md".to_string()];
    let mut more: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is readable")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    more.sort();
    names.extend(more);
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(root().join(&name))
                .unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
            Doc { name, text }
        })
        .collect()
}

/// Code in a document: an inline code span, or one command of a fenced code block
/// (lines ending in `\` joined), with the line where it starts.
struct Code {
    line: usize,
    text: String,
}

/// The code spans and code-block commands of `doc`.
fn code_of(doc: &Doc) -> Vec<Code> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    let mut prose = String::new();
    let mut prose_start = 1;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in doc.text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.trim_end() == marker {
                fence = None;
                if let Some((start, text)) = pending.take() {
                    out.push(Code { line: start, text });
                }
                continue;
            }
            let (start, mut text) = pending.take().unwrap_or((n, String::new()));
            match line.trim_end().strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push(' ');
                    pending = Some((start, text));
                }
                None => {
                    text.push_str(line);
                    out.push(Code { line: start, text });
                }
            }
            continue;
        }
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        if let Some(marker) = marker {
            code_spans(&prose, prose_start, &mut out);
            prose.clear();
            fence = Some(marker);
            continue;
        }
        if prose.is_empty() {
            prose_start = n;
        }
        prose.push_str(line);
        prose.push('\n');
    }
    code_spans(&prose, prose_start, &mut out);
    out
}

/// Appends the inline code spans of `prose` (which starts at line `first_line`): text
/// between two runs of the same number of backticks, possibly across lines.
fn code_spans(prose: &str, first_line: usize, out: &mut Vec<Code>) {
    let bytes = prose.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let open = i;
        while i < bytes.len() && bytes[i] == b'`' {
            i += 1;
        }
        let run = i - open;
        let mut j = i;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] != b'`' {
                j += 1;
                continue;
            }
            let k = j;
            while j < bytes.len() && bytes[j] == b'`' {
                j += 1;
            }
            if j - k == run {
                close = Some(k);
                break;
            }
        }
        let Some(close) = close else {
            continue;
        };
        let line = first_line + prose[..open].matches('\n').count();
        out.push(Code {
            line,
            text: prose[i..close].replace('\n', " "),
        });
        i = close + run;
    }
}

/// Who a flag in the docs belongs to.
#[derive(Clone, Debug, PartialEq)]
enum Owner {
    /// No program before it in its code span or command.
    Unknown,
    /// One of [`BINARIES`].
    Binary(&'static str),
    /// A script of the repository (`scripts/NAME.sh`).
    Script(String),
    /// One of [`FOREIGN_PROGRAMS`].
    Foreign,
}

/// A word of a command, as a program name: its last path component, without quotes and
/// brackets around it.
fn program_of(word: &str) -> Owner {
    let bare = word.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || "-_./*".contains(c)));
    let base = bare.rsplit('/').next().unwrap_or(bare);
    if let Some((name, _)) = BINARIES.iter().find(|(name, _)| *name == base) {
        return Owner::Binary(name);
    }
    if bare.starts_with("scripts/") && bare.ends_with(".sh") {
        return Owner::Script(bare.to_string());
    }
    if FOREIGN_PROGRAMS.contains(&base) {
        return Owner::Foreign;
    }
    Owner::Unknown
}

/// The flags of one piece of code with their owners, in order. A program name right
/// after a flag is that flag's value (`--server target/release/relaymq-server`), not a
/// command, except after cargo's `--bin`.
fn flags_in(code: &str, flag: &Regex) -> Vec<(Owner, String)> {
    let mut out = Vec::new();
    let mut owner = Owner::Unknown;
    let mut after_flag: Option<String> = None;
    for word in code.split(|c: char| c.is_whitespace() || "='\"".contains(c)) {
        if word.is_empty() {
            continue;
        }
        if word == "&&" || word == ";" || word == "||" || word.ends_with(';') {
            owner = Owner::Unknown;
            after_flag = None;
            continue;
        }
        let found: Vec<String> = flag
            .captures_iter(word)
            .filter_map(|c| c.ok())
            .filter_map(|c| c.get(1).map(|m| m.as_str().to_string()))
            .collect();
        if found.is_empty() {
            let program = program_of(word);
            let is_value = after_flag.as_deref().is_some_and(|f| f != "--bin");
            if program != Owner::Unknown && !is_value {
                owner = program;
            }
            after_flag = None;
            continue;
        }
        after_flag = found.last().cloned();
        for f in found {
            out.push((owner.clone(), f));
        }
    }
    out
}

/// `--flag` tokens (a trailing `-*`, as in `--tls-*`, is kept: a prefix).
fn flag_regex() -> Regex {
    Regex::new(r"(?<![A-Za-z0-9_-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?:-\*)?)").expect("regex")
}

/// The flags `program --help` (and, for `relaymq-bench`, its subcommands' help) shows.
fn help_flags(name: &str, path: &str, flag: &Regex) -> BTreeSet<String> {
    let mut runs: Vec<Vec<&str>> = vec![vec!["--help"]];
    if name == "relaymq-bench" {
        runs.push(vec!["idle", "--help"]);
        runs.push(vec!["recovery", "--help"]);
        runs.push(vec!["http-api", "--help"]);
        runs.push(vec!["delayed", "--help"]);
    }
    let mut flags = BTreeSet::new();
    for args in runs {
        let out = Command::new(path)
            .env_remove("RELAYMQ_BIN_SERVER")
            .env_remove("RELAYMQ_BIN_BENCH")
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("{name} {args:?}: {e}"));
        assert!(out.status.success(), "{name} {args:?} failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        for c in flag.captures_iter(text.as_str()).filter_map(|c| c.ok()) {
            if let Some(m) = c.get(1) {
                flags.insert(m.as_str().to_string());
            }
        }
    }
    flags
}

/// Whether `flag` (or, for a `--prefix-*` flag, one that starts so) is in `known`.
fn flag_known(flag: &str, known: &BTreeSet<String>) -> bool {
    match flag.strip_suffix('*') {
        Some(prefix) => known.iter().any(|k| k.starts_with(prefix)),
        None => known.contains(flag),
    }
}

#[test]
fn every_flag_the_docs_name_exists() {
    let flag = flag_regex();
    let helps: Vec<(&str, BTreeSet<String>)> = BINARIES
        .iter()
        .map(|(name, path)| (*name, help_flags(name, path, &flag)))
        .collect();
    let script_helps: Vec<(&str, BTreeSet<String>)> = SCRIPTS_WITH_HELP
        .iter()
        .map(|script| {
            let path = root().join(script);
            (*script, help_flags(script, &path.to_string_lossy(), &flag))
        })
        .collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        for code in code_of(&doc) {
            for (owner, f) in flags_in(&code.text, &flag) {
                checked += 1;
                let at = format!("{}:{}", doc.name, code.line);
                match owner {
                    Owner::Foreign => {}
                    Owner::Binary(name) => {
                        let known = &helps.iter().find(|(n, _)| *n == name).expect("binary").1;
                        if !flag_known(&f, known) {
                            wrong.push(format!(
                                "{at}: `{f}` is not a flag of {name} (not in `{name} --help`), in `{}`",
                                code.text.trim()
                            ));
                        }
                    }
                    Owner::Script(script) => {
                        let known = script_helps.iter().find(|(s, _)| *s == script);
                        let text = std::fs::read_to_string(root().join(&script));
                        let ok = match (known, text) {
                            (Some((_, known)), _) => flag_known(&f, known),
                            (None, Ok(text)) => text.contains(f.trim_end_matches('*')),
                            (None, Err(_)) => false,
                        };
                        if !ok {
                            wrong.push(format!(
                                "{at}: `{f}` is not a flag of {script} (not in its --help, or \
                                 it does not exist)"
                            ));
                        }
                    }
                    Owner::Unknown => {
                        let anywhere = helps
                            .iter()
                            .chain(script_helps.iter())
                            .any(|(_, known)| flag_known(&f, known));
                        let other = OTHER_TOOLS_FLAGS.iter().any(|(o, _)| *o == f);
                        if !anywhere && !other {
                            wrong.push(format!(
                                "{at}: `{f}` is in the --help of none of relaymq-server, \
                                 relaymq-cli, relaymq-bench, {} (nor a flag of another tool \
                                 listed in tests/it/docs.rs), in `{}`",
                                SCRIPTS_WITH_HELP.join(", "),
                                code.text.trim()
                            ));
                        }
                    }
                }
            }
        }
    }
    println!("{checked} flags named in the docs checked");
    assert!(
        checked > 100,
        "only {checked} flags found in the docs: is the scan broken?"
    );
    assert!(
        wrong.is_empty(),
        "{} flag(s) named in the docs do not exist:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

// ---- metrics --------------------------------------------------------------------------

/// The body of `GET /metrics` from `addr`.
fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .expect("send the request");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a whole HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// Every metric name the page serves: sample names and `# TYPE` names.
fn served_names(page: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in page.lines() {
        let name = match line.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        };
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            names.insert(n.to_string());
        }
    }
    names
}

#[test]
fn every_metric_the_docs_name_is_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        &dir.path().join("data"),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let metrics: SocketAddr = server.ready["metrics_listen"]
        .as_str()
        .expect("metrics_listen in the ready file")
        .parse()
        .expect("an address");

    // The store at work: a durable queue, a persistent message stored, fsynced, confirmed,
    // delivered and acked.
    let conn = Connection::connect(&server.addr_string()).expect("connect");
    let ch = conn.open_channel().expect("channel");
    ch.queue_declare(
        "docs-check",
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
    )
    .expect("declare");
    ch.confirm_select().expect("confirm.select");
    let persistent = BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    ch.basic_publish("", "docs-check", false, &persistent, b"stored")
        .expect("publish");
    assert!(ch
        .wait_for_confirms(Duration::from_secs(10))
        .expect("confirms"));
    let consumer = ch
        .basic_consume("docs-check", ConsumeOptions::default())
        .expect("consume");
    match consumer.recv_timeout(Duration::from_secs(10)) {
        Ok(ConsumerEvent::Delivery(d)) => ch.basic_ack(d.delivery_tag, false).expect("ack"),
        other => panic!("expected the delivery, got {other:?}"),
    }
    conn.status().expect("a round trip after the ack");
    let served = served_names(&scrape(metrics));

    let name = Regex::new(r"(?<![A-Za-z0-9_/:])relaymq_[a-z0-9_]*[a-z0-9](?![A-Za-z0-9_/:])")
        .expect("regex");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        for (i, line) in doc.text.lines().enumerate() {
            for m in name.find_iter(line).filter_map(|m| m.ok()) {
                checked += 1;
                if !served.contains(m.as_str()) {
                    wrong.push(format!(
                        "{}:{}: `{}` is not served by /metrics",
                        doc.name,
                        i + 1,
                        m.as_str()
                    ));
                }
            }
        }
    }
    let _ = conn.close();
    server.terminate();
    println!(
        "{checked} metric names in the docs checked against {} served",
        served.len()
    );
    assert!(
        checked > 50,
        "only {checked} metric names found: is the scan broken?"
    );
    assert!(
        wrong.is_empty(),
        "{} metric name(s) in the docs are not served (served: {}):\n{}",
        wrong.len(),
        served.iter().cloned().collect::<Vec<_>>().join(" "),
        wrong.join("\n")
    );
}

// ---- paths ------------------------------------------------------------------------------

/// Whether `pattern` (`*` matches within one path component) names an existing file or
/// directory under the repository.
fn path_exists(pattern: &str) -> bool {
    let mut here = vec![root().to_path_buf()];
    for part in pattern.trim_end_matches('/').split('/') {
        let mut next = Vec::new();
        for dir in &here {
            if !part.contains('*') {
                let p = dir.join(part);
                if p.exists() {
                    next.push(p);
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.filter_map(|e| e.ok()) {
                if wildcard(part, &e.file_name().to_string_lossy()) {
                    next.push(e.path());
                }
            }
        }
        here = next;
    }
    !here.is_empty()
}

/// `*`-only glob matching of one path component.
fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The top-level module directories and files of `src/` (`server`, `lib.rs`, …): a doc
/// path starting with one of them is relative to `src/`.
fn src_modules() -> BTreeSet<String> {
    std::fs::read_dir(root().join("src"))
        .expect("src/ is readable")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .map(|n| n.trim_end_matches(".rs").to_string())
        .collect()
}

#[test]
fn every_path_the_docs_name_exists() {
    // Repository paths anywhere in the text.
    let repo_path =
        Regex::new(r"(?<![A-Za-z0-9_./-])((?:src|tests|scripts|fuzz|docs)/[A-Za-z0-9_.*/<-]*)")
            .expect("regex");
    // A bare Markdown file name (`semantics.md`, `ARCHITECTURE.md`): one of the docs.
    let md_name = Regex::new(r"(?<![A-Za-z0-9_./-])([A-Za-z0-9_-]+\.md)\b").expect("regex");
    // An absolute path to a Markdown file: outside the repository, whatever it is.
    let md_outside = Regex::new(r"(?<![A-Za-z0-9_.-])(/[A-Za-z0-9_./-]+\.md)\b").expect("regex");
    // Module paths relative to src/, as code spans: `server/native/admin.rs`, `broker/exchange/`.
    let module_path = Regex::new(r"^([a-z_]+(?:/[a-z_0-9]+)*(?:\.rs|/))$").expect("regex");
    // Relative Markdown links.
    let link = Regex::new(r"\]\(([^)#\s]+)(?:#[^)]*)?\)").expect("regex");
    let modules = src_modules();
    let made_later = |p: &str| PATHS_MADE_AT_RUN_TIME.iter().any(|(m, _)| p.starts_with(m));

    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        for (i, line) in doc.text.lines().enumerate() {
            let at = format!("{}:{}", doc.name, i + 1);
            for c in repo_path.captures_iter(line).filter_map(|c| c.ok()) {
                let Some(m) = c.get(1) else { continue };
                // A placeholder (`<target>`) ends the path; sentence punctuation is not
                // part of it.
                let p = m.as_str().split('<').next().unwrap_or("");
                let p = p.trim_end_matches(['.', ',', ':', ')']);
                if p.ends_with("/…") || p.is_empty() || made_later(p) {
                    continue;
                }
                checked += 1;
                if !path_exists(p) {
                    wrong.push(format!("{at}: `{p}` does not exist"));
                }
            }
            for c in md_name.captures_iter(line).filter_map(|c| c.ok()) {
                let Some(m) = c.get(1) else { continue };
                checked += 1;
                let name = m.as_str();
                if !root().join(name).exists() && !root().join("docs").join(name).exists() {
                    wrong.push(format!(
                        "{at}: `{name}` is neither a doc of docs/ nor a file at the \
                         repository's root (a reader cannot follow it)"
                    ));
                }
            }
            for c in md_outside.captures_iter(line).filter_map(|c| c.ok()) {
                let Some(m) = c.get(1) else { continue };
                checked += 1;
                wrong.push(format!(
                    "{at}: `{}` is outside the repository (a reader cannot follow it)",
                    m.as_str()
                ));
            }
            for c in link.captures_iter(line).filter_map(|c| c.ok()) {
                let Some(m) = c.get(1) else { continue };
                let target = m.as_str();
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let base = Path::new(&doc.name).parent().unwrap_or(Path::new(""));
                if !root().join(base).join(target).exists() {
                    wrong.push(format!("{at}: the link target `{target}` does not exist"));
                }
            }
        }
        for code in code_of(&doc) {
            let text = code.text.trim();
            let Ok(Some(c)) = module_path.captures(text) else {
                continue;
            };
            let Some(m) = c.get(1) else { continue };
            let p = m.as_str();
            let first = p.split('/').next().unwrap_or("");
            let first = first.trim_end_matches(".rs");
            if !p.contains('/') || !modules.contains(first) {
                continue;
            }
            checked += 1;
            if !path_exists(&format!("src/{p}")) {
                wrong.push(format!(
                    "{}:{}: `{p}` (src/{p}) does not exist",
                    doc.name, code.line
                ));
            }
        }
    }
    println!("{checked} paths named in the docs checked");
    assert!(
        checked > 50,
        "only {checked} paths found: is the scan broken?"
    );
    assert!(
        wrong.is_empty(),
        "{} path(s) named in the docs do not exist:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

// ---- work items -------------------------------------------------------------------------

#[test]
fn the_docs_describe_the_product_not_work_items() {
    let work_item = Regex::new(r"(?i)\bissues?\s+#?\d").expect("regex");
    let mut files: Vec<(String, String)> = docs().into_iter().map(|d| (d.name, d.text)).collect();
    let scripts: Vec<PathBuf> = std::fs::read_dir(root().join("scripts"))
        .expect("scripts/ is readable")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    for path in scripts {
        let name = format!(
            "scripts/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        if let Ok(text) = std::fs::read_to_string(&path) {
            files.push((name, text));
        }
    }
    let mut wrong = Vec::new();
    for (name, text) in &files {
        for (i, line) in text.lines().enumerate() {
            if let Ok(Some(m)) = work_item.find(line) {
                wrong.push(format!(
                    "{name}:{}: names a work item (`{}`): say what the product does instead",
                    i + 1,
                    m.as_str()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} reference(s) to work items:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

// ---- the checks themselves ----------------------------------------------------------------

#[test]
fn the_checks_attribute_flags_and_resolve_paths_as_documented() {
    let flag = flag_regex();
    let owners = |code: &str| -> Vec<(Owner, String)> { flags_in(code, &flag) };
    assert_eq!(
        owners("relaymq-bench recovery --server target/release/relaymq-server --count 5"),
        [
            (Owner::Binary("relaymq-bench"), "--server".to_string()),
            (Owner::Binary("relaymq-bench"), "--count".to_string()),
        ]
    );
    assert_eq!(
        owners("cargo run -q --release --bin relaymq-cli -- --vhost v && systemctl --x"),
        [
            (Owner::Foreign, "--release".to_string()),
            (Owner::Foreign, "--bin".to_string()),
            (Owner::Binary("relaymq-cli"), "--vhost".to_string()),
            (Owner::Foreign, "--x".to_string()),
        ]
    );
    assert_eq!(
        owners("--tls-* and sudo scripts/install.sh --prefix DIR"),
        [
            (Owner::Unknown, "--tls-*".to_string()),
            (
                Owner::Script("scripts/install.sh".into()),
                "--prefix".to_string()
            ),
        ]
    );
    let mut known = BTreeSet::new();
    known.insert("--tls-cert".to_string());
    assert!(flag_known("--tls-*", &known) && !flag_known("--tls", &known));

    let doc = Doc {
        name: "x.md".into(),
        text: "a `--one` and ``two ` x``\nb `split\nspan`\n```sh\nrun \\\n  --cont\n```\n".into(),
    };
    let code: Vec<(usize, String)> = code_of(&doc)
        .into_iter()
        .map(|c| (c.line, c.text))
        .collect();
    assert_eq!(
        code,
        [
            (1, "--one".to_string()),
            (1, "two ` x".to_string()),
            (2, "split span".to_string()),
            (5, "run    --cont".to_string()),
        ]
    );

    assert!(path_exists("scripts/*smoke*.sh") && path_exists("src/server/"));
    assert!(!path_exists("src/no_such_file.rs") && !path_exists("scripts/*nothing*.sh"));
    assert!(wildcard("a*b*c", "axxbyyc") && !wildcard("a*b", "ab-c"));
}
