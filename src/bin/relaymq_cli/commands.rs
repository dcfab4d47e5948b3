//! Running a parsed command against the server.

use super::args::{
    Command, ConsumeArgs, GetArgs, Global, PermissionCommand, PolicyCommand, PublishArgs,
    QueueTool, UserCommand, ValueCommand,
};
use super::output::{self, Printed};
use super::{code_name, CliError};
use relaymq::client::{
    BlockedStatus, Channel, ClientError, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent,
    ListKind, PublishMessage, ReturnedMessage,
};
use relaymq::types::field_table::table_to_json;
use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time to wait for publisher confirms after the last publish.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Messages `publish --lines` hands to one `publish_batch` call.
const LINES_BATCH_MESSAGES: usize = 1000;

/// Body bytes `publish --lines` hands to one `publish_batch` call.
const LINES_BATCH_BYTES: usize = 256 * 1024;

/// How often `consume` looks at the signal flag while it waits, milliseconds.
const SIGNAL_POLL_MS: u64 = 200;

/// How long `import definitions` waits for the server's summary (a large file takes about
/// 1 ms per durable queue, exchange or binding).
const IMPORT_TIMEOUT: Duration = Duration::from_secs(600);

/// Reason `close connection` gives without `--reason`, after `CONNECTION_FORCED - `
/// (RabbitMQ's management plugin says "Closed via management plugin").
const CLOSE_REASON_DEFAULT: &str = "Closed via relaymq-cli";

/// The text of a definitions file (`-`: standard input).
fn read_definitions(path: &str) -> Result<String, CliError> {
    let mut text = String::new();
    let read = if path == "-" {
        io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| CliError::Input(format!("cannot read definitions from '{path}': {e}")))?;
    Ok(text)
}

/// Connects, runs the command, closes the connection.
///
/// # Errors
/// [`CliError`] with the exit code the failure calls for.
pub fn run(global: &Global, command: Command) -> Result<(), CliError> {
    let options = ConnectOptions {
        user: global.user.clone(),
        password: global.password.clone(),
        vhost: global.vhost.clone(),
        client_name: "relaymq-cli".into(),
        tls: global.tls.clone(),
        ..ConnectOptions::new(global.addr.clone())
    };
    // An import declares durable objects one commit at a time (about 1 ms each).
    let options = match command {
        Command::ImportDefinitions(_) | Command::Migrate(_) => ConnectOptions {
            timeout: IMPORT_TIMEOUT,
            ..options
        },
        _ => options,
    };
    let conn = Connection::connect_with(options).map_err(|e| match e {
        ClientError::Usage(m) => CliError::Usage(m),
        e => CliError::Connect(e),
    })?;
    // Deleting the vhost or the user this connection uses succeeds, then the server
    // closes the connection with 320: the expected end, not a failure.
    let deletes_own_vhost = matches!(&command, Command::DeleteVhost(name) if *name == global.vhost)
        || matches!(&command, Command::User(UserCommand::Delete(name)) if *name == global.user);
    execute(&conn, command, &global.vhost)?;
    match conn.close() {
        // Deleting the vhost this connection uses succeeded; the server then closes the
        // connection with 320, which is the expected end, not a failure.
        Err(ClientError::ConnectionClosed { code: 320, .. }) if deletes_own_vhost => Ok(()),
        other => other.map_err(CliError::from),
    }
}

fn user(conn: &Connection, command: UserCommand) -> Result<(), CliError> {
    match command {
        UserCommand::Add {
            name,
            secret,
            hashing_algorithm,
            tags,
        } => {
            let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
            match hashing_algorithm {
                Some(algorithm) => conn.add_user_with_hash(&name, &algorithm, &secret, &tags)?,
                None => conn.add_user(&name, &secret, &tags)?,
            }
        }
        UserCommand::Delete(name) => conn.delete_user(&name)?,
        UserCommand::Passwd(name, password) => conn.change_password(&name, &password)?,
        UserCommand::Tags(name, tags) => {
            let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
            conn.set_user_tags(&name, &tags)?
        }
    }
    Ok(())
}

fn execute(conn: &Connection, command: Command, vhost: &str) -> Result<(), CliError> {
    let stdout = io::stdout();
    match command {
        Command::DeclareVhost(name) => conn.declare_vhost(&name)?,
        Command::DeleteVhost(name) => conn.delete_vhost(&name)?,
        Command::User(c) => user(conn, c)?,
        Command::Permission(PermissionCommand::Set {
            user,
            configure,
            write,
            read,
        }) => conn.set_permissions(&user, vhost, &configure, &write, &read)?,
        Command::Permission(PermissionCommand::Clear(user)) => {
            conn.clear_permissions(&user, vhost)?
        }
        Command::Policy(PolicyCommand::Set {
            name,
            pattern,
            definition,
            priority,
            apply_to,
        }) => {
            conn.set_policy(vhost, &name, &pattern, &definition, priority, &apply_to)?;
            // The server keeps keys RabbitMQ knows but RelayMQ does not act on; say which.
            if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&definition) {
                let ignored: Vec<&str> = map
                    .keys()
                    .map(String::as_str)
                    .filter(|k| relaymq::broker::policy::NOT_HONOURED_KEYS.contains(k))
                    .collect();
                if !ignored.is_empty() {
                    eprintln!(
                        "warning: policy '{name}': {} stored but not acted on by RelayMQ",
                        ignored.join(", ")
                    );
                }
            }
        }
        Command::Policy(PolicyCommand::Clear(name)) => conn.clear_policy(vhost, &name)?,
        Command::OperatorPolicy(PolicyCommand::Set {
            name,
            pattern,
            definition,
            priority,
            apply_to,
        }) => conn.set_operator_policy(vhost, &name, &pattern, &definition, priority, &apply_to)?,
        Command::OperatorPolicy(PolicyCommand::Clear(name)) => {
            conn.clear_operator_policy(vhost, &name)?
        }
        Command::VhostLimit(ValueCommand::Set { name, value }) => {
            conn.set_vhost_limit(vhost, &name, &value)?
        }
        Command::VhostLimit(ValueCommand::Clear(name)) => conn.clear_vhost_limit(vhost, &name)?,
        Command::UserLimit {
            user,
            command: ValueCommand::Set { name, value },
        } => conn.set_user_limit(&user, &name, &value)?,
        Command::UserLimit {
            user,
            command: ValueCommand::Clear(name),
        } => conn.clear_user_limit(&user, &name)?,
        Command::Parameter {
            component,
            command: ValueCommand::Set { name, value },
        } => conn.set_parameter(&component, vhost, &name, &value)?,
        Command::Parameter {
            component,
            command: ValueCommand::Clear(name),
        } => conn.clear_parameter(&component, vhost, &name)?,
        Command::GlobalParameter(ValueCommand::Set { name, value }) => {
            conn.set_global_parameter(&name, &value)?
        }
        Command::GlobalParameter(ValueCommand::Clear(name)) => {
            conn.clear_global_parameter(&name)?
        }
        Command::SetClusterName(name) => conn.set_cluster_name(&name)?,
        Command::List { kind, json } => {
            let rows = conn.list(kind)?;
            stdout
                .lock()
                .write_all(output::rows_text(kind, &rows, json).as_bytes())?;
        }
        Command::ListShovels { vhost, json } => {
            let mut rows = conn.list_shovels()?;
            if let Some(v) = vhost {
                rows.retain(|r| r.get("vhost").and_then(|f| f.as_str()) == Some(v.as_str()));
            }
            let text = output::rows_text(ListKind::Shovels, &rows, json);
            stdout.lock().write_all(text.as_bytes())?;
        }
        Command::Status { json } => {
            let info = conn.status()?;
            let text = if json {
                format!("{}\n", table_to_json(&info))
            } else {
                output::status_lines(&info)
            };
            stdout.lock().write_all(text.as_bytes())?;
        }
        Command::SetMemoryHighWatermark(w) => conn.set_memory_high_watermark(w)?,
        Command::SetDiskFreeLimit(bytes) => conn.set_disk_free_limit(bytes)?,
        Command::CloseConnection { id, reason } => {
            let reason = if reason.is_empty() {
                CLOSE_REASON_DEFAULT.to_string()
            } else {
                reason
            };
            conn.close_connection(id, &reason)?
        }
        Command::ExportDefinitions(file) => {
            let mut json = conn.export_definitions()?;
            json.push('\n');
            match file {
                Some(path) => write_private(&path, json.as_bytes())
                    .map_err(|e| CliError::Other(anyhow::anyhow!("cannot write '{path}': {e}")))?,
                None => stdout.lock().write_all(json.as_bytes())?,
            }
        }
        Command::ImportDefinitions(path) => {
            let json = read_definitions(&path)?;
            let summary = conn.import_definitions(&json)?;
            stdout
                .lock()
                .write_all(output::import_summary(&summary).as_bytes())?;
        }
        Command::Migrate(a) => super::migrate::migrate(conn, a, &mut stdout.lock())?,
        Command::Publish(a) => publish(conn, a)?,
        Command::Consume(a) => consume(conn, a)?,
        Command::Get(a) => get(conn, a)?,
        Command::PauseQueue { queue, paused } => {
            let ch = conn.open_channel()?;
            if paused {
                ch.queue_pause(&queue)?;
            } else {
                ch.queue_resume(&queue)?;
            }
            ch.close()?;
        }
        Command::QueueTool {
            tool,
            queue,
            request,
            json,
        } => {
            let ch = conn.open_channel()?;
            let request = request.to_string();
            let answer = match tool {
                QueueTool::Peek => ch.queue_peek(&queue, &request)?,
                QueueTool::Replay => ch.queue_replay(&queue, &request)?,
                QueueTool::Search => ch.queue_search(&queue, &request)?,
                QueueTool::Unacked => ch.queue_unacked(&queue, &request)?,
            };
            ch.close()?;
            let text = if json {
                format!("{answer}\n")
            } else {
                output::queue_tool_text(tool, &answer)
            };
            stdout.lock().write_all(text.as_bytes())?;
        }
        other => {
            let ch = conn.open_channel()?;
            definition(&ch, other)?;
            ch.close()?;
        }
    }
    Ok(())
}

/// Declarations, deletions, purges and bindings: one request on a channel.
fn definition(ch: &Channel, command: Command) -> Result<(), CliError> {
    match command {
        Command::DeclareExchange {
            name,
            kind,
            options,
        } => ch.exchange_declare(&name, &kind, options)?,
        Command::DeclareQueue { name, options } => {
            let ok = ch.queue_declare(&name, options)?;
            writeln!(io::stdout().lock(), "{}", ok.queue)?;
        }
        Command::DeleteExchange { name, if_unused } => ch.exchange_delete(&name, if_unused)?,
        Command::DeleteQueue {
            name,
            if_unused,
            if_empty,
        } => {
            ch.queue_delete(&name, if_unused, if_empty)?;
        }
        Command::PurgeQueue(name) => {
            let n = ch.queue_purge(&name)?;
            writeln!(io::stdout().lock(), "{n}")?;
        }
        Command::Binding {
            exchange_to_exchange,
            bind,
            destination,
            source,
            key,
            arguments,
        } => match (exchange_to_exchange, bind) {
            (false, true) => ch.queue_bind(&destination, &source, &key, arguments)?,
            (false, false) => ch.queue_unbind(&destination, &source, &key, arguments)?,
            (true, true) => ch.exchange_bind(&destination, &source, &key, arguments)?,
            (true, false) => ch.exchange_unbind(&destination, &source, &key, arguments)?,
        },
        other => unreachable!("not a definition command: {other:?}"),
    }
    Ok(())
}

/// `publish`: one message (argument or all of stdin) or one per stdin line, batched.
/// With `--mandatory` the channel is put in confirm mode too: the confirm of a returned
/// message follows its return, so waiting for confirms means every return has arrived.
fn publish(conn: &Connection, a: Box<PublishArgs>) -> Result<(), CliError> {
    let _note = BlockedNote::start(conn.blocked_status());
    let ch = conn.open_channel()?;
    let track = a.confirm || a.mandatory;
    if track {
        ch.confirm_select()?;
    }
    let returns = ch.returns();
    let message = |body: Vec<u8>| PublishMessage {
        exchange: a.exchange.clone(),
        routing_key: a.routing_key.clone(),
        mandatory: a.mandatory,
        properties: a.properties.clone(),
        body,
    };
    if a.lines {
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut input = io::stdin().lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            if line.last() == Some(&b'\n') {
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
            }
            bytes += line.len();
            batch.push(message(line.clone()));
            if batch.len() >= LINES_BATCH_MESSAGES || bytes >= LINES_BATCH_BYTES {
                ch.publish_batch(&batch)?;
                batch.clear();
                bytes = 0;
            }
        }
        ch.publish_batch(&batch)?;
    } else {
        let body = match a.body {
            Some(b) => b.into_bytes(),
            None => {
                let mut b = Vec::new();
                io::stdin().lock().read_to_end(&mut b)?;
                b
            }
        };
        let m = message(body);
        ch.basic_publish(
            &m.exchange,
            &m.routing_key,
            m.mandatory,
            &m.properties,
            &m.body,
        )?;
    }
    let all_acked = if track {
        ch.wait_for_confirms(CONFIRM_TIMEOUT).map_err(|e| match e {
            ClientError::Timeout => CliError::Timeout(format!(
                "no publisher confirm within {} s",
                CONFIRM_TIMEOUT.as_secs()
            )),
            e => CliError::Client(e),
        })?
    } else {
        true
    };
    // The close round trip also reports a publish the server refused (e.g. 404 exchange).
    ch.close()?;
    let returned: Vec<ReturnedMessage> = returns.try_iter().collect();
    if let Some(first) = returned.first() {
        return Err(CliError::Rejected(returned_message(first, returned.len())));
    }
    if !all_acked {
        return Err(CliError::Rejected(
            "the server nacked a published message".into(),
        ));
    }
    Ok(())
}

/// Prints a note on stderr when the server blocks publishing (a resource alarm: the
/// command then waits) and when it unblocks it; stops when dropped.
struct BlockedNote {
    /// Dropping it ends the thread's wait at once.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BlockedNote {
    fn start(status: BlockedStatus) -> BlockedNote {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let poll = Duration::from_millis(SIGNAL_POLL_MS);
        let thread = std::thread::Builder::new()
            .name("blocked-note".into())
            .spawn(move || {
                let mut seen = None;
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(poll)
                {
                    let now = status.reason();
                    if now != seen {
                        match &now {
                            Some(reason) => eprintln!(
                                "note: the server blocks publishing ({reason}); waiting until \
                                 its resource alarm clears"
                            ),
                            None => eprintln!("note: the server unblocked publishing"),
                        }
                        seen = now;
                    }
                }
            })
            .ok();
        BlockedNote {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for BlockedNote {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `NO_ROUTE (312): text (exchange 'x', routing key 'k')`, with the count when several
/// came back.
fn returned_message(first: &ReturnedMessage, count: usize) -> String {
    let code = code_name(first.reply_code);
    // RabbitMQ's reply text is just the code's name; do not say it twice.
    let text = if code.starts_with(first.reply_text.as_str()) {
        "message returned".to_string()
    } else {
        first.reply_text.clone()
    };
    let mut m = format!(
        "{code}: {text} (exchange '{}', routing key '{}')",
        first.exchange, first.routing_key
    );
    if count > 1 {
        m.push_str(&format!("; {count} messages returned"));
    }
    m
}

/// How a `consume` run ended.
enum Ended {
    /// `--count` messages printed.
    Count,
    /// `--timeout` passed.
    TimedOut,
    /// SIGINT or SIGTERM.
    Interrupted,
    /// The server cancelled the consumer (queue deleted).
    ServerCancelled,
    /// Printing failed (e.g. the reader of the pipe went away).
    Output(io::Error),
}

/// `consume`: prints deliveries until `--count`, `--timeout` or a signal. With `--count`
/// the acks of the last messages are sent after the consumer is cancelled (one `multiple`
/// ack, see [`defer_ack`]), so the prefetch window never opens for a message that would
/// only be requeued. `--no-ack` with
/// `--count` consumes in ack mode the same way: a real `no_ack` consumer is not limited by
/// the prefetch count, so the server would push (and the tool drop) more than N messages.
fn consume(conn: &Connection, a: ConsumeArgs) -> Result<(), CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let ch = conn.open_channel()?;
    let prefetch = a
        .prefetch
        .or(a.count.map(|n| n.min(u16::MAX as u64) as u16));
    if let Some(p) = prefetch {
        ch.basic_qos(p, false)?;
    }
    let no_ack = a.no_ack && a.count.is_none();
    let options = ConsumeOptions {
        no_ack,
        ..ConsumeOptions::default()
    };
    let consumer = ch.basic_consume(&a.queue, options)?;
    let deadline = a.timeout.map(|t| Instant::now() + t);
    let mut printed = 0u64;
    let mut last_unacked = None;
    let mut out = io::stdout().lock();
    let ended = loop {
        if a.count.is_some_and(|n| printed >= n) {
            break Ended::Count;
        }
        if stop.load(Ordering::Relaxed) {
            break Ended::Interrupted;
        }
        let mut wait = Duration::from_millis(SIGNAL_POLL_MS);
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Ended::TimedOut;
            }
            wait = wait.min(left);
        }
        let d = match consumer.recv_timeout(wait) {
            Ok(ConsumerEvent::Delivery(d)) => d,
            Ok(ConsumerEvent::Cancelled) => break Ended::ServerCancelled,
            Err(ClientError::Timeout) => continue,
            Err(e) => return Err(e.into()),
        };
        let shown = Printed {
            exchange: &d.exchange,
            routing_key: &d.routing_key,
            redelivered: d.redelivered,
            delivery_tag: d.delivery_tag,
            properties: &d.properties,
            body: &d.body,
        };
        if let Err(e) = output::write_message(&mut out, &shown, a.json) {
            break Ended::Output(e);
        }
        printed += 1;
        if !no_ack {
            if defer_ack(a.count, prefetch.unwrap_or(0), printed) {
                last_unacked = Some(d.delivery_tag);
            } else {
                ch.basic_ack(d.delivery_tag, false)?;
            }
        }
    };
    if !matches!(ended, Ended::ServerCancelled) {
        consumer.cancel()?;
    }
    if let Some(tag) = last_unacked {
        ch.basic_ack(tag, true)?;
    }
    ch.close()?;
    match ended {
        Ended::Count | Ended::Interrupted => Ok(()),
        Ended::TimedOut => match a.count {
            Some(n) => Err(CliError::Timeout(format!(
                "timed out with {printed} of {n} messages"
            ))),
            None => Ok(()),
        },
        Ended::ServerCancelled => Err(CliError::Other(anyhow::anyhow!(
            "consumer {} was cancelled by the server (queue deleted, or a delivery not acked within the consumer timeout)",
            consumer.tag()
        ))),
        Ended::Output(e) => Err(CliError::Other(
            anyhow::Error::new(e).context("cannot write to standard output"),
        )),
    }
}

/// Whether the ack of the `printed`-th message waits until the consumer is cancelled.
/// After an ack the server may have `prefetch` more deliveries in flight, so a message is
/// acked at once only while `printed + prefetch <= count`: no delivery beyond `count` is
/// then ever sent. Acking earlier ones keeps a count above the prefetch (at most 65 535)
/// from stalling. Without a count or a prefetch limit every ack is sent at once.
fn defer_ack(count: Option<u64>, prefetch: u16, printed: u64) -> bool {
    match count {
        Some(n) if prefetch > 0 => n.saturating_sub(printed) < prefetch as u64,
        _ => false,
    }
}

/// `get`: up to `--count` `basic.get`s; acks each message after printing it, or with
/// `--requeue` nacks them all (requeue) at the end, so the same message is not fetched
/// twice, or with `--reject` rejects each without requeue.
fn get(conn: &Connection, a: GetArgs) -> Result<(), CliError> {
    let ch = conn.open_channel()?;
    let mut out = io::stdout().lock();
    let mut last_held = None;
    for _ in 0..a.count {
        let Some(m) = ch.basic_get(&a.queue, false)? else {
            break;
        };
        let shown = Printed {
            exchange: &m.exchange,
            routing_key: &m.routing_key,
            redelivered: m.redelivered,
            delivery_tag: m.delivery_tag,
            properties: &m.properties,
            body: &m.body,
        };
        if let Err(e) = output::write_message(&mut out, &shown, a.json) {
            // Put back this message and any held ones: nobody saw them.
            ch.basic_nack(m.delivery_tag, true, true)?;
            return Err(CliError::Other(
                anyhow::Error::new(e).context("cannot write to standard output"),
            ));
        }
        if a.requeue {
            last_held = Some(m.delivery_tag);
        } else if a.reject {
            ch.basic_reject(m.delivery_tag, false)?;
        } else {
            ch.basic_ack(m.delivery_tag, false)?;
        }
    }
    if let Some(tag) = last_held {
        ch.basic_nack(tag, true, true)?;
    }
    ch.close()?;
    Ok(())
}

/// Writes `bytes` to `path`, created (or truncated) readable and writable by its owner only
/// (0600): definitions hold password hashes. An existing file's mode is set to 0600 too.
fn write_private(path: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_deferred_only_for_the_last_prefetch_window() {
        // count 3, prefetch 3: all three wait for the cancel.
        assert!((1..=3).all(|i| defer_ack(Some(3), 3, i)));
        // Regression: count 200 000 with the prefetch capped at 65 535 must not stall.
        assert!(!defer_ack(Some(200_000), 65_535, 1));
        assert!(!defer_ack(Some(200_000), 65_535, 134_465));
        assert!(defer_ack(Some(200_000), 65_535, 134_466));
        assert!(!defer_ack(None, 10, 5));
        assert!(!defer_ack(Some(5), 0, 5));
    }

    #[test]
    fn returned_message_names_the_code_and_counts() {
        let r = ReturnedMessage {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            properties: Default::default(),
            body: Vec::new(),
        };
        assert_eq!(
            returned_message(&r, 1),
            "NO_ROUTE (312): message returned (exchange 'x', routing key 'k')"
        );
        assert!(returned_message(&r, 3).ends_with("; 3 messages returned"));
    }
}
