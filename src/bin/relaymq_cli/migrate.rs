//! `relaymq-cli migrate --from amqp://USER:PASS@HOST[:PORT]`: moves a running RabbitMQ
//! (or any broker with RabbitMQ's management API) into this RelayMQ, as
//! docs/operations.md "Migrating from RabbitMQ" describes.
//!
//! 1. Reads the source's definitions: `GET /api/definitions` of its management API
//!    (`--from-api`, default `http://HOST:15672`, the `--from` credentials), or
//!    `--definitions FILE` (an export) when the API is not reachable.
//! 2. Imports them here (as `import definitions`).
//! 3. Asks the source (AMQP, a passive `queue.declare` per queue of the definitions)
//!    what each queue holds, and sets one shovel per queue holding messages, at most
//!    [`SHOVELS_AT_ONCE`] at a time: named `migrate-QUEUE` in the queue's vhost, source
//!    the source's queue (`src-predeclared`), destination the imported queue here (a
//!    local end), `ack-mode` `on-confirm`, `src-delete-after` `queue-length`: each moves
//!    what its queue held when it started, then deletes itself.
//! 4. Reports progress every [`PROGRESS_INTERVAL`] until every shovel is gone
//!    (`--no-wait`: returns once the shovels are set, when they fit in one go).

use super::CliError;
use relaymq::amqp_client::uri::{percent_encode, redact, AmqpUri};
use relaymq::amqp_client::Connection as AmqpConnection;
use relaymq::client::Connection;
use relaymq::types::FieldTable;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// Port of RabbitMQ's management API over HTTP.
pub const MANAGEMENT_PORT_DEFAULT: u16 = 15672;

/// Time allowed to each request to the source's management API.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// How often progress is reported while waiting.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(2);

/// How often the shovels are looked at (a finished one's place goes to the next queue).
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Prefix of the shovels `migrate` sets.
pub const SHOVEL_PREFIX: &str = "migrate-";

/// Shovels `migrate` runs at once (each a thread and a connection to the source); the
/// next queue's is set when one finishes.
pub const SHOVELS_AT_ONCE: usize = 16;

/// Longest shovel name (an AMQP short string), bytes.
const NAME_BYTES_MAX: usize = 255;

/// What `migrate` was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrateArgs {
    /// `--from`: the source's AMQP URI (with credentials).
    pub from: String,
    /// `--from-api`: the source's management API base URL.
    pub api: Option<String>,
    /// `--definitions`: the source's definitions file, instead of its API.
    pub definitions: Option<String>,
    /// Wait until every queue is drained (not `--no-wait`).
    pub wait: bool,
}

/// One queue to move.
struct Move {
    vhost: String,
    queue: String,
    /// Messages in it at the source when the migration started.
    messages: u64,
    shovel: String,
}

/// GETs `url` with basic authentication; the body.
fn http_get(url: &str, user: &str, password: &str) -> Result<String, String> {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    match ureq::get(url)
        .set("authorization", &format!("Basic {auth}"))
        .timeout(HTTP_TIMEOUT)
        .call()
    {
        Ok(r) => r.into_string().map_err(|e| e.to_string()),
        Err(ureq::Error::Status(code, r)) => Err(format!(
            "HTTP {code}: {}",
            r.into_string().unwrap_or_default().trim()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The shovel name for `queue`: `migrate-QUEUE`, shortened with a hash past 255 bytes.
fn shovel_name(queue: &str) -> String {
    let name = format!("{SHOVEL_PREFIX}{queue}");
    if name.len() <= NAME_BYTES_MAX {
        return name;
    }
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    queue.hash(&mut hasher);
    let h = hasher.finish() as u32;
    let mut cut = NAME_BYTES_MAX - 9;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{h:08x}", &name[..cut])
}

/// Runs `migrate` against the RelayMQ of `conn`, writing progress to `out`.
///
/// # Errors
/// A usage error for a bad `--from`; the source's definitions unreadable; the import or a
/// shovel refused; a connection failure.
pub fn migrate(conn: &Connection, a: MigrateArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let uri = AmqpUri::parse(&a.from)
        .map_err(|e| CliError::Usage(format!("--from {}: {e}", redact(&a.from))))?;
    let Some(host) = uri.host.clone() else {
        return Err(CliError::Usage(
            "--from must name the source broker's host (amqp://USER:PASS@HOST:5672)".into(),
        ));
    };
    let api = a
        .api
        .clone()
        .unwrap_or_else(|| format!("http://{host}:{MANAGEMENT_PORT_DEFAULT}"));
    let api = api.trim_end_matches('/').to_string();
    let definitions = match &a.definitions {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Input(format!("cannot read {path}: {e}")))?,
        None => {
            http_get(&format!("{api}/api/definitions"), &uri.user, &uri.password).map_err(|e| {
                CliError::Unreachable(format!(
                    "cannot read the source's definitions from {api}/api/definitions ({e}); \
                     give --from-api URL, or --definitions FILE (rabbitmqctl \
                     export_definitions FILE)"
                ))
            })?
        }
    };
    let doc: Value = serde_json::from_str(&definitions)
        .map_err(|e| CliError::Input(format!("the source's definitions are not JSON: {e}")))?;
    // What each queue holds now, asked of the source itself (a passive declare; its
    // management API's counts lag by seconds).
    let mut by_vhost: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for q in doc["queues"].as_array().into_iter().flatten() {
        if let (Some(vhost), Some(queue)) = (q["vhost"].as_str(), q["name"].as_str()) {
            // Server-named and reserved queues are not imported; a federation link's
            // queue holds what is on its way to another broker.
            let federation = q["arguments"]["x-internal-purpose"] == "federation";
            if !queue.starts_with("amq.") && !federation {
                by_vhost.entry(vhost.into()).or_default().push(queue.into());
            }
        }
    }
    let mut moves = Vec::new();
    for (vhost, queues) in &by_vhost {
        for (queue, n) in source_counts(&uri, vhost, queues)? {
            if n > 0 {
                moves.push(Move {
                    vhost: vhost.clone(),
                    shovel: shovel_name(&queue),
                    queue,
                    messages: n,
                });
            }
        }
    }
    // Imported only once the source answered: a wrong URI or password changes nothing here.
    writeln!(out, "importing the definitions of {}", redact(&a.from))?;
    let summary = conn.import_definitions(&definitions)?;
    out.write_all(super::output::import_summary(&summary).as_bytes())?;
    if moves.is_empty() {
        writeln!(out, "no queue holds messages: nothing to move")?;
        return Ok(());
    }
    let total: u64 = moves.iter().map(|m| m.messages).sum();
    writeln!(out, "moving {total} messages of {} queues", moves.len())?;
    let started = Instant::now();
    let mut waiting: std::collections::VecDeque<&Move> = moves.iter().collect();
    let mut active: Vec<&Move> = Vec::new();
    let mut last_reasons: BTreeMap<String, String> = BTreeMap::new();
    let mut printed = Instant::now();
    loop {
        while active.len() < SHOVELS_AT_ONCE {
            let Some(m) = waiting.pop_front() else { break };
            set_shovel(conn, &a.from, m)?;
            writeln!(
                out,
                "moving {} messages of queue '{}' in vhost '{}'",
                m.messages, m.queue, m.vhost
            )?;
            active.push(m);
        }
        if !a.wait && waiting.is_empty() {
            writeln!(
                out,
                "{} shovels set; 'relaymq-cli shovel list' shows them until each has drained \
                 its queue",
                moves.len()
            )?;
            return Ok(());
        }
        let rows: Vec<FieldTable> = conn.list_shovels()?;
        let row = |m: &Move| {
            rows.iter()
                .find(|r| text(r, "name") == m.shovel && text(r, "vhost") == m.vhost)
        };
        let mut left = 0u64;
        active.retain(|m| match row(m) {
            Some(r) => {
                left += r
                    .get("remaining")
                    .and_then(|v| v.as_i64())
                    .map_or(m.messages, |n| n.max(0) as u64);
                true
            }
            None => false,
        });
        for m in &active {
            if let Some(r) = row(m).filter(|r| text(r, "state") == "terminated") {
                let why = text(r, "reason");
                if last_reasons.get(&m.shovel) != Some(&why) {
                    writeln!(
                        out,
                        "shovel '{}' in vhost '{}' is retrying: {why}",
                        m.shovel, m.vhost
                    )?;
                    last_reasons.insert(m.shovel.clone(), why);
                }
            }
        }
        left += waiting.iter().map(|m| m.messages).sum::<u64>();
        let secs = started.elapsed().as_secs_f64().max(0.001);
        let moved = total.saturating_sub(left);
        if active.is_empty() && waiting.is_empty() {
            writeln!(
                out,
                "done: {} queues drained ({total} messages) in {secs:.1} s ({:.0} messages/s)",
                moves.len(),
                total as f64 / secs
            )?;
            return Ok(());
        }
        if printed.elapsed() >= PROGRESS_INTERVAL {
            writeln!(
                out,
                "{} of {} queues drained; {moved} of {total} messages moved ({:.0}/s)",
                moves.len() - active.len() - waiting.len(),
                moves.len(),
                moved as f64 / secs
            )?;
            out.flush()?;
            printed = Instant::now();
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Sets the shovel that moves `m` from the source `from` into the same queue here.
fn set_shovel(conn: &Connection, from: &str, m: &Move) -> Result<(), CliError> {
    let value = json!({
        "src-uri": with_vhost(from, &m.vhost),
        "src-queue": m.queue,
        "src-predeclared": true,
        "dest-uri": format!("amqp:///{}", percent_encode(&m.vhost)),
        "dest-queue": m.queue,
        "dest-predeclared": true,
        "src-delete-after": "queue-length",
        "ack-mode": "on-confirm",
    });
    conn.set_parameter("shovel", &m.vhost, &m.shovel, &value.to_string())?;
    Ok(())
}

/// The messages each of `queues` of `vhost` holds at the source (passive declares over
/// AMQP 0-9-1); a queue the source does not have is left out.
///
/// # Errors
/// The source cannot be reached or refuses the login.
fn source_counts(
    uri: &AmqpUri,
    vhost: &str,
    queues: &[String],
) -> Result<Vec<(String, u64)>, CliError> {
    let mut at = uri.clone();
    at.vhost = vhost.to_string();
    let opts = at
        .connect_options("relaymq-cli migrate", None)
        .map_err(CliError::Usage)?;
    let fail = |e: relaymq::amqp_client::AmqpClientError| {
        CliError::Unreachable(format!("the source {}: {e}", redact(&at_text(&at))))
    };
    let mut c = AmqpConnection::connect(&opts).map_err(fail)?;
    let mut out = Vec::new();
    for q in queues {
        let passive = relaymq::client::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        match c.queue_declare(q, passive) {
            Ok(ok) => out.push((q.clone(), u64::from(ok.message_count))),
            Err(e) if e.reply_code() == Some(404) => {
                c.open_channel().map_err(fail)?;
            }
            Err(e) => return Err(fail(e)),
        }
    }
    let _ = c.close();
    Ok(out)
}

/// An AMQP URI's text without credentials, for messages.
fn at_text(u: &AmqpUri) -> String {
    format!("amqp://{}/{}", u.addr(), percent_encode(&u.vhost))
}

/// `uri` (the `--from` text, credentials kept) with its vhost path replaced by `vhost`.
fn with_vhost(uri: &str, vhost: &str) -> String {
    let (scheme, rest) = uri.split_once("://").unwrap_or(("amqp", uri));
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let authority = rest.split_once('/').map_or(rest, |(a, _)| a);
    let mut s = format!("{scheme}://{authority}/{}", percent_encode(vhost));
    if let Some(q) = query {
        s.push('?');
        s.push_str(q);
    }
    s
}

/// A text column of a row ("" when absent).
fn text(r: &FieldTable, k: &str) -> String {
    r.get(k)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_uris() {
        assert_eq!(shovel_name("q"), "migrate-q");
        let long = "x".repeat(300);
        let n = shovel_name(&long);
        assert!(n.len() <= 255 && n.starts_with("migrate-xxx"), "{n}");
        assert_ne!(shovel_name(&long), shovel_name(&"x".repeat(301)));
        assert_eq!(
            with_vhost("amqp://u:p@h:5672", "/"),
            "amqp://u:p@h:5672/%2F"
        );
        assert_eq!(
            with_vhost("amqp://u:p@h/old?heartbeat=5", "v"),
            "amqp://u:p@h/v?heartbeat=5"
        );
    }
}
