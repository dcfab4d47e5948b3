//! `relaymq-cli migrate --from amqp://USER:PASS@HOST[:PORT]`: moves a running RabbitMQ
//! (or any broker with RabbitMQ's management API) into this RelayMQ, as
//! docs/operations.md "Migrating from RabbitMQ" describes.
//!
//! 1. Reads the source's definitions: `GET /api/definitions` of its management API
//!    (`--from-api`, default `http://HOST:15672`, the `--from` credentials), or
//!    `--definitions FILE` (an export) when the API is not reachable.
//! 2. Imports them here (as `import definitions`).
//! 3. Sets one shovel per queue holding messages (per `GET /api/queues`; every queue of
//!    the definitions when only a file is given): named `migrate-QUEUE` in the queue's
//!    vhost, source the RabbitMQ queue (`src-predeclared`), destination the imported
//!    queue here (a local end), `ack-mode` `on-confirm`, `src-delete-after`
//!    `queue-length`: each moves what its queue held when it started, then deletes
//!    itself.
//! 4. Reports progress every [`PROGRESS_INTERVAL`] until every `migrate-` shovel is gone
//!    (`--no-wait`: returns once they are set).

use super::CliError;
use relaymq::amqp_client::uri::{percent_encode, redact, AmqpUri};
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

/// Prefix of the shovels `migrate` sets.
pub const SHOVEL_PREFIX: &str = "migrate-";

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
    /// Messages in it at the source, when the API said.
    messages: Option<u64>,
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
    let mut h: u32 = 0x811c_9dc5;
    for b in queue.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
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
    let (definitions, counts) = match &a.definitions {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Input(format!("cannot read {path}: {e}")))?;
            (text, None)
        }
        None => {
            let defs = http_get(&format!("{api}/api/definitions"), &uri.user, &uri.password)
                .map_err(|e| {
                    CliError::Input(format!(
                        "cannot read the source's definitions from {api}/api/definitions ({e}); \
                         give --from-api URL, or --definitions FILE (rabbitmqctl \
                         export_definitions FILE)"
                    ))
                })?;
            let queues = http_get(
                &format!("{api}/api/queues?columns=name,vhost,messages"),
                &uri.user,
                &uri.password,
            )
            .map_err(|e| CliError::Input(format!("cannot list the source's queues: {e}")))?;
            (defs, Some(queues))
        }
    };
    let doc: Value = serde_json::from_str(&definitions)
        .map_err(|e| CliError::Input(format!("the source's definitions are not JSON: {e}")))?;
    writeln!(out, "importing the definitions of {}", redact(&a.from))?;
    let summary = conn.import_definitions(&definitions)?;
    out.write_all(super::output::import_summary(&summary).as_bytes())?;
    let counts: Option<BTreeMap<(String, String), u64>> = match counts {
        None => None,
        Some(text) => {
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                CliError::Input(format!("the source's queue list is not JSON: {e}"))
            })?;
            Some(
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|q| {
                        Some((
                            (
                                q["vhost"].as_str()?.to_string(),
                                q["name"].as_str()?.to_string(),
                            ),
                            q["messages"].as_u64().unwrap_or(0),
                        ))
                    })
                    .collect(),
            )
        }
    };
    let mut moves = Vec::new();
    for q in doc["queues"].as_array().into_iter().flatten() {
        let (Some(vhost), Some(queue)) = (q["vhost"].as_str(), q["name"].as_str()) else {
            continue;
        };
        if queue.starts_with("amq.") {
            // Server-named and reserved queues are not imported.
            continue;
        }
        let messages = match &counts {
            Some(c) => match c.get(&(vhost.to_string(), queue.to_string())) {
                Some(0) | None => continue,
                Some(n) => Some(*n),
            },
            None => None,
        };
        moves.push(Move {
            vhost: vhost.to_string(),
            queue: queue.to_string(),
            messages,
            shovel: shovel_name(queue),
        });
    }
    let total: u64 = moves.iter().filter_map(|m| m.messages).sum();
    for m in &moves {
        let value = json!({
            "src-uri": with_vhost(&a.from, &m.vhost),
            "src-queue": m.queue,
            "src-predeclared": true,
            "dest-uri": format!("amqp:///{}", percent_encode(&m.vhost)),
            "dest-queue": m.queue,
            "dest-predeclared": true,
            "src-delete-after": "queue-length",
            "ack-mode": "on-confirm",
        });
        conn.set_parameter("shovel", &m.vhost, &m.shovel, &value.to_string())?;
        match m.messages {
            Some(n) => writeln!(
                out,
                "moving {n} messages of queue '{}' in vhost '{}'",
                m.queue, m.vhost
            )?,
            None => writeln!(out, "moving queue '{}' in vhost '{}'", m.queue, m.vhost)?,
        }
    }
    if moves.is_empty() {
        writeln!(out, "no queue holds messages: nothing to move")?;
        return Ok(());
    }
    if !a.wait {
        writeln!(
            out,
            "{} shovels set; 'relaymq-cli shovel list' shows them until each has drained its queue",
            moves.len()
        )?;
        return Ok(());
    }
    wait(conn, &moves, total, out)
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

/// Waits until every `migrate-` shovel of `moves` is gone, reporting progress.
fn wait(
    conn: &Connection,
    moves: &[Move],
    total: u64,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let started = Instant::now();
    let mut last_reasons: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let rows: Vec<FieldTable> = conn
            .list_shovels()?
            .into_iter()
            .filter(|r| {
                let (name, vhost) = (text(r, "name"), text(r, "vhost"));
                moves.iter().any(|m| m.shovel == name && m.vhost == vhost)
            })
            .collect();
        let left: u64 = rows
            .iter()
            .filter_map(|r| r.get("remaining").and_then(|v| v.as_i64()))
            .map(|n| n.max(0) as u64)
            .sum();
        for r in &rows {
            if text(r, "state") == "terminated" {
                let key = format!("{}/{}", text(r, "vhost"), text(r, "name"));
                let why = text(r, "reason");
                if last_reasons.get(&key) != Some(&why) {
                    writeln!(out, "shovel '{key}' is retrying: {why}")?;
                    last_reasons.insert(key, why);
                }
            }
        }
        let secs = started.elapsed().as_secs_f64().max(0.001);
        if rows.is_empty() {
            writeln!(
                out,
                "done: {} queues drained ({total} messages) in {secs:.1} s",
                moves.len()
            )?;
            return Ok(());
        }
        let moved = total.saturating_sub(left);
        writeln!(
            out,
            "{} of {} queues drained; {moved} of {total} messages moved ({:.0}/s)",
            moves.len() - rows.len(),
            moves.len(),
            moved as f64 / secs
        )?;
        out.flush()?;
        std::thread::sleep(PROGRESS_INTERVAL);
    }
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
