//! Output formats: message bodies, JSON deliveries, aligned tables for `list`, and
//! `key: value` lines for `status`.

use base64::Engine;
use relaymq::client::ListKind;
use relaymq::types::field_table::table_to_json;
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use serde_json::{json, Value};
use std::io::{self, Write};

/// The parts of a delivery or `basic.get` result that are printed.
pub struct Printed<'a> {
    /// Exchange it was published to.
    pub exchange: &'a str,
    /// Routing key.
    pub routing_key: &'a str,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// Delivery tag.
    pub delivery_tag: u64,
    /// Properties.
    pub properties: &'a BasicProperties,
    /// Body bytes.
    pub body: &'a [u8],
}

/// A message as one JSON object: `exchange`, `routing_key`, `redelivered`,
/// `delivery_tag`, `properties`, and `body` (UTF-8 text) or `body_base64` (any other bytes,
/// standard alphabet with padding).
pub fn message_json(m: &Printed<'_>) -> Value {
    let mut v = json!({
        "exchange": m.exchange,
        "routing_key": m.routing_key,
        "redelivered": m.redelivered,
        "delivery_tag": m.delivery_tag,
        "properties": m.properties.to_json(),
    });
    match std::str::from_utf8(m.body) {
        Ok(text) => v["body"] = Value::String(text.to_string()),
        Err(_) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(m.body);
            v["body_base64"] = Value::String(b64);
        }
    }
    v
}

/// Writes a message (its body and a newline, or its JSON line) and flushes, so a reader
/// of the pipe sees each message as it arrives.
///
/// # Errors
/// The write error (e.g. a closed pipe).
pub fn write_message(out: &mut impl Write, m: &Printed<'_>, as_json: bool) -> io::Result<()> {
    if as_json {
        writeln!(out, "{}", message_json(m))?;
    } else {
        out.write_all(m.body)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// One column of a `list` table.
pub struct Column {
    /// Header text.
    pub header: &'static str,
    /// Fields to show, the first one a row has wins (none: the field named like the
    /// header). `a.b` is field `b` of the table in field `a`; `a:b` joins fields `a` and
    /// `b` with `:` (host and port).
    pub fields: &'static [&'static str],
}

const fn col(header: &'static str) -> Column {
    Column {
        header,
        fields: &[],
    }
}

/// The columns printed for each kind of `list` (field names of `docs/protocol.md` §12,
/// RabbitMQ's management API names).
pub fn columns(kind: ListKind) -> &'static [Column] {
    const VHOSTS: &[Column] = &[
        col("name"),
        col("publish_rate"),
        col("deliver_get_rate"),
        col("ack_rate"),
    ];
    const EXCHANGES: &[Column] = &[
        col("name"),
        col("type"),
        col("durable"),
        col("auto_delete"),
        col("internal"),
    ];
    const QUEUES: &[Column] = &[
        col("name"),
        col("type"),
        col("durable"),
        col("messages_ready"),
        col("messages_unacknowledged"),
        col("consumers"),
        col("messages_persistent"),
        col("disk_bytes"),
        col("publish_rate"),
        col("deliver_get_rate"),
        col("ack_rate"),
    ];
    const BINDINGS: &[Column] = &[
        col("source"),
        col("destination"),
        col("destination_type"),
        col("routing_key"),
        col("arguments"),
    ];
    const CONSUMERS: &[Column] = &[
        Column {
            header: "queue",
            fields: &["queue.name", "queue"],
        },
        col("consumer_tag"),
        Column {
            header: "connection",
            fields: &[
                "channel_details.connection_name",
                "channel_details.connection",
                "connection",
            ],
        },
        col("ack_required"),
        col("prefetch_count"),
    ];
    const CONNECTIONS: &[Column] = &[
        col("id"),
        Column {
            header: "name",
            fields: &["name", "id"],
        },
        Column {
            header: "peer",
            fields: &["peer", "peer_host:peer_port"],
        },
        col("user"),
        col("vhost"),
        col("channels"),
        col("protocol"),
    ];
    const USERS: &[Column] = &[col("name"), col("tags"), col("hashing_algorithm")];
    const PERMISSIONS: &[Column] = &[
        col("user"),
        col("vhost"),
        col("configure"),
        col("write"),
        col("read"),
    ];
    const POLICIES: &[Column] = &[
        col("vhost"),
        col("name"),
        col("pattern"),
        col("apply-to"),
        col("definition"),
        col("priority"),
    ];
    const VHOST_LIMITS: &[Column] = &[col("vhost"), col("value")];
    const USER_LIMITS: &[Column] = &[col("user"), col("value")];
    const PARAMETERS: &[Column] = &[col("vhost"), col("component"), col("name"), col("value")];
    const GLOBAL_PARAMETERS: &[Column] = &[col("name"), col("value")];
    const SHOVELS: &[Column] = &[
        col("vhost"),
        col("name"),
        col("state"),
        col("src_uri"),
        Column {
            header: "source",
            fields: &["src_queue", "src_exchange"],
        },
        col("dest_uri"),
        Column {
            header: "destination",
            fields: &["dest_queue", "dest_exchange"],
        },
        col("forwarded"),
        col("pending"),
        col("remaining"),
        col("reason"),
    ];
    const FEDERATION_LINKS: &[Column] = &[
        col("vhost"),
        col("exchange"),
        col("upstream"),
        col("upstream_exchange"),
        col("status"),
        col("uri"),
        col("messages_forwarded"),
        col("error"),
    ];
    match kind {
        ListKind::FederationLinks => FEDERATION_LINKS,
        ListKind::Policies | ListKind::OperatorPolicies => POLICIES,
        ListKind::VhostLimits => VHOST_LIMITS,
        ListKind::UserLimits => USER_LIMITS,
        ListKind::Parameters => PARAMETERS,
        ListKind::GlobalParameters => GLOBAL_PARAMETERS,
        ListKind::Shovels => SHOVELS,
        ListKind::Users => USERS,
        ListKind::Permissions => PERMISSIONS,
        ListKind::Vhosts => VHOSTS,
        ListKind::Exchanges => EXCHANGES,
        ListKind::Queues => QUEUES,
        ListKind::Bindings => BINDINGS,
        ListKind::Consumers => CONSUMERS,
        ListKind::Connections => CONNECTIONS,
    }
}

/// A field value as table text: strings as they are, numbers and booleans as JSON writes
/// them, void as nothing, tables and arrays as compact JSON.
pub fn cell(v: &FieldValue) -> String {
    match v {
        FieldValue::LongString(b) => String::from_utf8_lossy(b).into_owned(),
        FieldValue::Void => String::new(),
        other => match other.to_json() {
            Value::String(s) => s,
            Value::Null => String::new(),
            j => j.to_string(),
        },
    }
}

/// The text of one field path of a row (see [`Column::fields`]), if the row has it.
fn lookup(row: &FieldTable, path: &str) -> Option<String> {
    if path.contains(':') {
        let parts: Option<Vec<String>> = path.split(':').map(|p| lookup(row, p)).collect();
        return parts.map(|p| p.join(":"));
    }
    let mut names = path.split('.');
    let mut value = row.get(names.next()?)?;
    for name in names {
        match value {
            FieldValue::Table(t) => value = t.get(name)?,
            _ => return None,
        }
    }
    Some(cell(value))
}

/// An aligned table: a header line and one line per row, columns separated by two
/// spaces, no trailing spaces. Every line ends with a newline.
pub fn format_table(columns: &[Column], rows: &[FieldTable]) -> String {
    let header: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            columns
                .iter()
                .map(|c| {
                    let own = [c.header];
                    let fields = if c.fields.is_empty() {
                        &own[..]
                    } else {
                        c.fields
                    };
                    let v = fields.iter().find_map(|f| lookup(r, f)).unwrap_or_default();
                    // A name may hold any character: control characters are shown
                    // escaped so one row stays one line (`--json` has the exact text).
                    if v.chars().any(char::is_control) {
                        v.chars().flat_map(char::escape_default).collect()
                    } else {
                        v
                    }
                })
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for line in &body {
        for (w, v) in widths.iter_mut().zip(line) {
            *w = (*w).max(v.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&header).chain(&body) {
        let mut text = String::new();
        for (i, (v, w)) in line.iter().zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(&format!("{v:<w$}"));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// Rows as one JSON array of objects.
pub fn rows_json(rows: &[FieldTable]) -> Value {
    Value::Array(rows.iter().map(table_to_json).collect())
}

/// The output of a `list` of `kind`: one JSON array line with `json`, else the table of
/// [`columns`].
pub fn rows_text(kind: ListKind, rows: &[FieldTable], json: bool) -> String {
    if json {
        format!("{}\n", rows_json(rows))
    } else {
        format_table(columns(kind), rows)
    }
}

/// `key: value` lines, keys in order.
pub fn status_lines(info: &FieldTable) -> String {
    info.iter()
        .map(|(k, v)| format!("{k}: {}\n", cell(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fields: &[(&str, FieldValue)]) -> FieldTable {
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn utf8_body_is_text_and_binary_body_is_base64() {
        let props = BasicProperties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            ..Default::default()
        };
        let mut m = Printed {
            exchange: "x",
            routing_key: "k",
            redelivered: true,
            delivery_tag: 7,
            properties: &props,
            body: "héllo".as_bytes(),
        };
        assert_eq!(
            message_json(&m),
            json!({
                "exchange": "x", "routing_key": "k", "redelivered": true, "delivery_tag": 7,
                "properties": {"content_type": "text/plain", "delivery_mode": 2},
                "body": "héllo"
            })
        );
        m.body = &[0xff, 0x00, 0x01];
        let v = message_json(&m);
        assert_eq!(v["body_base64"], "/wAB");
        assert!(v.get("body").is_none());
    }

    #[test]
    fn message_lines_and_flush() {
        let props = BasicProperties::default();
        let m = Printed {
            exchange: "",
            routing_key: "q",
            redelivered: false,
            delivery_tag: 1,
            properties: &props,
            body: b"abc",
        };
        let mut out = Vec::new();
        write_message(&mut out, &m, false).unwrap();
        write_message(&mut out, &m, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("abc"));
        let j: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            (j["body"].as_str(), j["properties"].clone()),
            (Some("abc"), json!({}))
        );
    }

    #[test]
    fn table_is_aligned_with_missing_fields_empty() {
        let rows = vec![
            row(&[
                ("name", FieldValue::string("orders")),
                ("type", FieldValue::string("quorum")),
                ("durable", FieldValue::Bool(true)),
                ("messages_ready", FieldValue::I64(12)),
                ("consumers", FieldValue::U32(1)),
            ]),
            row(&[
                ("name", FieldValue::string("q")),
                ("type", FieldValue::string("classic")),
                ("durable", FieldValue::Bool(false)),
                ("messages_ready", FieldValue::I64(0)),
                ("messages_unacknowledged", FieldValue::I64(3)),
                ("consumers", FieldValue::U32(0)),
            ]),
        ];
        let text = format_table(columns(ListKind::Queues), &rows);
        assert_eq!(
            text,
            "name    type     durable  messages_ready  messages_unacknowledged  consumers  messages_persistent  disk_bytes  publish_rate  deliver_get_rate  ack_rate\n\
             orders  quorum   true     12                                       1\n\
             q       classic  false    0               3                        0\n"
        );
        assert_eq!(
            format_table(columns(ListKind::Vhosts), &[]),
            "name  publish_rate  deliver_get_rate  ack_rate\n"
        );
    }

    #[test]
    fn nested_joined_and_alternative_fields() {
        let mut queue = FieldTable::new();
        queue.insert("name".into(), FieldValue::string("jobs"));
        queue.insert("vhost".into(), FieldValue::string("/"));
        let mut chan = FieldTable::new();
        chan.insert("connection_name".into(), FieldValue::string("a -> b"));
        chan.insert("number".into(), FieldValue::I64(1));
        let consumers = vec![row(&[
            ("queue", FieldValue::Table(queue)),
            ("consumer_tag", FieldValue::string("ctag")),
            ("channel_details", FieldValue::Table(chan)),
            ("ack_required", FieldValue::Bool(true)),
            ("prefetch_count", FieldValue::I64(0)),
        ])];
        assert_eq!(
            format_table(columns(ListKind::Consumers), &consumers),
            "queue  consumer_tag  connection  ack_required  prefetch_count\n\
             jobs   ctag          a -> b      true          0\n"
        );
        let conns = vec![
            row(&[
                ("name", FieldValue::string("c1")),
                ("peer_host", FieldValue::string("127.0.0.1")),
                ("peer_port", FieldValue::I64(5000)),
            ]),
            row(&[
                ("id", FieldValue::I64(4)),
                ("user", FieldValue::string("guest")),
            ]),
        ];
        assert_eq!(
            format_table(columns(ListKind::Connections), &conns),
            concat!(
                "id  name  peer            user   vhost  channels  protocol\n",
                "    c1    127.0.0.1:5000\n",
                "4   4                     guest\n"
            )
        );
        let mut args = FieldTable::new();
        args.insert("x-match".into(), FieldValue::string("all"));
        assert_eq!(cell(&FieldValue::Table(args)), r#"{"x-match":"all"}"#);
        assert_eq!(cell(&FieldValue::Table(FieldTable::new())), "{}");
        assert_eq!(cell(&FieldValue::Void), "");
        assert_eq!(cell(&FieldValue::F64(0.5)), "0.5");
    }

    #[test]
    fn status_and_json_rows() {
        let info = row(&[
            ("version", FieldValue::string("0.1.0")),
            ("connections", FieldValue::I64(2)),
        ]);
        assert_eq!(status_lines(&info), "connections: 2\nversion: 0.1.0\n");
        assert_eq!(
            rows_json(&[info]),
            json!([{"connections": 2, "version": "0.1.0"}])
        );
    }
}

#[cfg(test)]
mod escape_tests {
    use super::*;
    use relaymq::client::ListKind;

    #[test]
    fn a_name_with_a_newline_stays_on_one_row() {
        let mut row = FieldTable::new();
        row.insert("name".into(), FieldValue::string("nl\nq"));
        let text = format_table(columns(ListKind::Vhosts), &[row]);
        assert_eq!(
            text,
            "name   publish_rate  deliver_get_rate  ack_rate\nnl\\nq\n"
        );
    }
}

/// The import summary the server sent (`{"created": {...}, "replaced": {...},
/// "unchanged": {...}, "warnings": [...], "not_honoured": [...]}`) as lines: counts per
/// section, warnings, then each element not honoured.
pub fn import_summary(json: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return format!("{json}\n");
    };
    let counts = |key: &str| -> String {
        v.get(key)
            .and_then(|m| m.as_object())
            .map(|m| {
                m.iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    let mut out = format!("created:   {}\n", counts("created"));
    if v.get("replaced").is_some() {
        out.push_str(&format!("replaced:  {}\n", counts("replaced")));
    }
    out.push_str(&format!("unchanged: {}\n", counts("unchanged")));
    let warnings = v
        .get("warnings")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str()).collect::<Vec<_>>())
        .unwrap_or_default();
    for w in warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    let skipped: Vec<&str> = v
        .get("not_honoured")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    if skipped.is_empty() {
        out.push_str("not honoured: none\n");
    } else {
        out.push_str(&format!("not honoured ({}):\n", skipped.len()));
        for s in skipped {
            out.push_str(&format!("  {s}\n"));
        }
    }
    out
}

/// A queue tool's answer as text: peek prints each payload on its line (as `get` does);
/// replay prints `moved N, skipped N, refused N` and a line per refusal; search prints
/// `POSITION: PAYLOAD` per match, then `scanned N of N ready; next offset P` (or `end`);
/// unacked prints `CONSUMER_TAG (or basic.get) CHANNEL tag T out N ms: PAYLOAD` per
/// delivery, oldest first.
pub fn queue_tool_text(tool: super::args::QueueTool, answer: &str) -> String {
    use super::args::QueueTool;
    let v: Value = serde_json::from_str(answer).unwrap_or(Value::Null);
    let payload = |m: &Value| m["payload"].as_str().unwrap_or_default().to_string();
    let mut out = String::new();
    match tool {
        QueueTool::Peek => {
            for m in v.as_array().into_iter().flatten() {
                out.push_str(&payload(m));
                out.push('\n');
            }
        }
        QueueTool::Replay => {
            let errors = v["errors"].as_array().cloned().unwrap_or_default();
            out.push_str(&format!(
                "moved {}, skipped {}, refused {}\n",
                v["moved"],
                v["skipped"],
                errors.len()
            ));
            for e in errors {
                out.push_str(&format!(
                    "position {}: {}\n",
                    e["position"],
                    e["reason"].as_str().unwrap_or_default()
                ));
            }
        }
        QueueTool::Unacked => {
            for d in v.as_array().into_iter().flatten() {
                let consumer = d["consumer_tag"].as_str().unwrap_or("basic.get");
                out.push_str(&format!(
                    "{consumer} {} tag {} out {} ms: {}\n",
                    d["channel_details"]["name"].as_str().unwrap_or_default(),
                    d["delivery_tag"],
                    d["out_for_ms"],
                    payload(d)
                ));
            }
        }
        QueueTool::Search => {
            for m in v["items"].as_array().into_iter().flatten() {
                out.push_str(&format!("{}: {}\n", m["position"], payload(m)));
            }
            let next = match &v["next_offset"] {
                Value::Null => "end".to_string(),
                n => format!("next offset {n}"),
            };
            out.push_str(&format!(
                "scanned {} of {} ready; {next}\n",
                v["scanned"], v["ready"]
            ));
        }
    }
    out
}
