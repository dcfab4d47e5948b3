//! Definitions (RabbitMQ 4.x, administrators only, `rabbit_mgmt_wm_definitions`):
//! `GET /api/definitions` and `/api/definitions/{vhost}` export (`?download=NAME` adds
//! `Content-Disposition: attachment; filename=NAME`); `POST` to the same paths imports a
//! JSON body, or the `file` part of a `multipart/form-data` upload (the web UI's form; a
//! `redirect` part answers 303 to it), all or nothing (`crate::broker::definitions`):
//! 204 when imported, 400 with the import's reason when not. `/api/all-configuration` is
//! RabbitMQ's old name for `/api/definitions`.
//!
//! An upload is read whole into memory, at most [`DEFINITIONS_BODY_BYTES_MAX`] bytes (413
//! from its `Content-Length` before anything is read), then parsed. One upload is read and
//! imported at a time ([`UPLOADS`]), so the memory it takes is bounded by one body and its
//! parsed document (docs/http-api.md, "Definitions").

use super::auth::{require, Need};
use super::{method_not_allowed, read_body, ApiError, Ctx, JSON};
use crate::broker::definitions;
use crate::broker::definitions::model::NOT_JSON;
use crate::error::ReplyCode;
use crate::server::http::request::Body;
use crate::server::http::response::Response;
use serde_json::{json, Map, Value};
use std::sync::Mutex;

/// Largest definitions upload, in bytes (64 MiB): a `POST /api/definitions` body, JSON or
/// multipart. RabbitMQ's default (`management.http.max_body_size`) is 20 MB; exports of
/// 100,000 queues with their bindings are about 50 MB.
pub const DEFINITIONS_BODY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Longest `boundary` of a `multipart/form-data` body, in bytes (RFC 2046 §5.1.1: 70).
pub const MULTIPART_BOUNDARY_BYTES_MAX: usize = 70;

/// Most parts of a `multipart/form-data` upload.
pub const MULTIPART_PARTS_MAX: usize = 16;

/// Longest head of one multipart part (its headers), in bytes.
pub const MULTIPART_PART_HEAD_BYTES_MAX: usize = 8 * 1024;

/// Held while an upload is read and imported: one at a time, so at most one body of
/// [`DEFINITIONS_BODY_BYTES_MAX`] and its parsed document are in memory.
static UPLOADS: Mutex<()> = Mutex::new(());

/// The broker's whole export with the fields RabbitMQ 4.x's API adds to it.
fn cluster_export(ctx: &Ctx<'_>) -> Value {
    let mut doc = definitions::export(ctx.broker());
    let cluster = ctx.api.cluster_name();
    doc["rabbitmq_definition_format"] = json!("cluster");
    doc["explanation"] = json!(format!("Definitions of cluster '{cluster}'"));
    doc["original_cluster_name"] = json!(cluster);
    doc
}

/// The items of `section` of `doc` in `vhost`, without their `vhost` field.
fn of_vhost(doc: &Value, section: &str, vhost: &str) -> Vec<Value> {
    doc[section]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| i["vhost"] == vhost)
                .map(|i| {
                    let mut i = i.clone();
                    if let Some(m) = i.as_object_mut() {
                        m.remove("vhost");
                    }
                    i
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One vhost's definitions, in RabbitMQ's per-vhost shape (`rabbitmq_definition_format`
/// `single_virtual_host`: no users, vhosts or permissions; items without `vhost`).
fn vhost_export(ctx: &Ctx<'_>, vhost: &str) -> Result<Value, ApiError> {
    let broker = ctx.broker();
    let vh = broker
        .vhost(vhost)
        .ok_or_else(|| ApiError::bad_request("vhost_not_found"))?;
    let all = definitions::export(broker);
    let meta = vh.metadata();
    let mut out = Map::new();
    for key in [
        "rabbit_version",
        "rabbitmq_version",
        "product_name",
        "product_version",
    ] {
        out.insert(key.into(), all[key].clone());
    }
    out.insert(
        "rabbitmq_definition_format".into(),
        json!("single_virtual_host"),
    );
    out.insert("original_vhost_name".into(), json!(vhost));
    out.insert(
        "explanation".into(),
        json!(format!("Definitions of virtual host '{vhost}'")),
    );
    out.insert(
        "metadata".into(),
        json!({"description": meta.description, "tags": meta.tags,
               "default_queue_type": meta.default_queue_type}),
    );
    out.insert("description".into(), json!(meta.description));
    out.insert(
        "limits".into(),
        crate::broker::limits::to_json(&vh.own_limits()),
    );
    let parameters: Vec<Value> = vh
        .runtime_parameters()
        .iter()
        .map(|p| {
            let mut p = p.to_json();
            if let Some(m) = p.as_object_mut() {
                m.remove("vhost");
            }
            p
        })
        .collect();
    out.insert("parameters".into(), Value::Array(parameters));
    for section in ["policies", "queues", "exchanges", "bindings"] {
        out.insert(section.into(), Value::Array(of_vhost(&all, section, vhost)));
    }
    Ok(Value::Object(out))
}

/// The export as an answer, streamed as it is written; with `?download=NAME`, RabbitMQ's
/// `Content-Disposition` header.
///
/// # Errors
/// 400 for a `download` name that is not an HTTP token (cowboy's constraint).
fn export_reply(ctx: &Ctx<'_>, doc: Value) -> Result<Response, ApiError> {
    let mut r = Response::stream(
        200,
        JSON,
        Box::new(move |out| serde_json::to_writer(out, &doc).map_err(std::io::Error::other)),
    )
    .with_header("cache-control", "no-cache");
    if let Some(name) = ctx.request.query("download") {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(ApiError::bad_request(
                "download must be a file name of letters, digits and !#$%&'*+-.^_`|~",
            ));
        }
        r = r.with_header(
            "content-disposition",
            format!("attachment; filename={name}"),
        );
    }
    Ok(r)
}

/// What the upload holds: the document and the `redirect` part, if any.
struct Upload {
    json: Vec<u8>,
    redirect: Option<String>,
}

/// The `boundary` parameter of a `multipart/form-data` content type, or `None` for
/// another content type.
///
/// # Errors
/// 400 for a multipart type without a usable boundary.
fn multipart_boundary(content_type: &str) -> Result<Option<String>, ApiError> {
    let mut params = content_type.split(';');
    let kind = params.next().unwrap_or("").trim();
    if !kind.eq_ignore_ascii_case("multipart/form-data") {
        return Ok(None);
    }
    for p in params {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        if k.trim().eq_ignore_ascii_case("boundary") {
            let v = v.trim().trim_matches('"');
            if v.is_empty() || v.len() > MULTIPART_BOUNDARY_BYTES_MAX {
                break;
            }
            return Ok(Some(v.to_string()));
        }
    }
    Err(ApiError::bad_request(
        "multipart/form-data without a valid boundary",
    ))
}

/// Where `needle` first occurs in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = from;
    while at + needle.len() <= hay.len() {
        let i = hay[at..=hay.len() - needle.len()]
            .iter()
            .position(|b| *b == first)?;
        at += i;
        if hay[at..].starts_with(needle) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// The `name` of a part from its `Content-Disposition: form-data; name="..."` header.
fn part_name(head: &str) -> Option<String> {
    head.split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.trim().eq_ignore_ascii_case("content-disposition"))
        .flat_map(|(_, v)| v.split(';').skip(1))
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("name"))
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
}

/// Splits a `multipart/form-data` body (RFC 7578, RFC 2046 §5.1) into (name, data)
/// parts, each data a slice of `body`.
///
/// # Errors
/// 400 for a body that is not multipart with `boundary`, a part without a head end, more
/// than [`MULTIPART_PARTS_MAX`] parts.
fn multipart_parts<'b>(
    body: &'b [u8],
    boundary: &str,
) -> Result<Vec<(String, &'b [u8])>, ApiError> {
    let bad =
        |why: &str| ApiError::bad_request(format!("malformed multipart/form-data body: {why}"));
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    let mut at = find(body, delimiter, 0).ok_or_else(|| bad("no boundary"))?;
    let mut parts = Vec::new();
    loop {
        at += delimiter.len();
        if body[at..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[at..].starts_with(b"\r\n") {
            return Err(bad("a boundary not followed by CRLF"));
        }
        at += 2;
        if parts.len() == MULTIPART_PARTS_MAX {
            return Err(bad("too many parts"));
        }
        let (head, data_start) = if body[at..].starts_with(b"\r\n") {
            (String::new(), at + 2)
        } else {
            let end = find(body, b"\r\n\r\n", at)
                .filter(|e| e - at <= MULTIPART_PART_HEAD_BYTES_MAX)
                .ok_or_else(|| bad("a part without the end of its headers"))?;
            (
                String::from_utf8_lossy(&body[at..end]).into_owned(),
                end + 4,
            )
        };
        let mut close = Vec::with_capacity(delimiter.len() + 2);
        close.extend_from_slice(b"\r\n");
        close.extend_from_slice(delimiter);
        let data_end = find(body, &close, data_start).ok_or_else(|| bad("a part not closed"))?;
        let name = part_name(&head).unwrap_or_default();
        parts.push((name, &body[data_start..data_end]));
        at = data_end + 2;
    }
}

/// Reads the upload: a JSON body, or the `file` part of a multipart one.
///
/// # Errors
/// 413 past [`DEFINITIONS_BODY_BYTES_MAX`]; 400 for a malformed multipart body or one
/// without a `file` part.
fn read_upload(ctx: &Ctx<'_>, body: &mut Body<'_>) -> Result<Upload, ApiError> {
    let boundary = match ctx.request.header("content-type") {
        Some(t) => multipart_boundary(t)?,
        None => None,
    };
    let bytes = read_body(body, DEFINITIONS_BODY_BYTES_MAX)?;
    let Some(boundary) = boundary else {
        return Ok(Upload {
            json: bytes,
            redirect: None,
        });
    };
    let parts = multipart_parts(&bytes, &boundary)?;
    let redirect = parts
        .iter()
        .find(|(n, _)| n == "redirect")
        .map(|(_, d)| String::from_utf8_lossy(d).into_owned());
    let file = parts
        .iter()
        .position(|(n, _)| n == "file")
        .ok_or_else(|| ApiError::bad_request("the upload has no 'file' part"))?;
    let (start, len) = {
        let data = parts[file].1;
        (data.as_ptr() as usize - bytes.as_ptr() as usize, data.len())
    };
    drop(parts);
    // The file part in place: the body less what surrounds it, without a copy.
    let mut json = bytes;
    json.truncate(start + len);
    json.drain(..start);
    Ok(Upload { json, redirect })
}

/// Restricts a per-vhost document to the sections RabbitMQ imports into one vhost
/// (`rabbit_definitions:apply_defs/4`: exchanges, parameters, policies, queues,
/// bindings), every item put in `vhost`.
fn into_vhost(doc: Map<String, Value>, vhost: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for (section, items) in doc {
        if !["exchanges", "parameters", "policies", "queues", "bindings"]
            .contains(&section.as_str())
        {
            continue;
        }
        let items = match items {
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .map(|mut i| {
                        if let Some(m) = i.as_object_mut() {
                            m.insert("vhost".into(), json!(vhost));
                        }
                        i
                    })
                    .collect(),
            ),
            other => other,
        };
        out.insert(section, items);
    }
    out
}

/// An import's refusal: 400 with its reason (`failed_to_parse_json` for a document that is
/// not a JSON object, as RabbitMQ), 500 for a failure of the server.
fn import_error(e: crate::error::BrokerError) -> ApiError {
    if e.text.starts_with(NOT_JSON) {
        return ApiError::bad_request("failed_to_parse_json");
    }
    match e.code {
        ReplyCode::InternalError => ApiError::new(500, "internal_server_error", e.text),
        _ => ApiError::bad_request(e.text),
    }
}

/// `POST /api/definitions[/{vhost}]`.
fn import(ctx: &Ctx<'_>, vhost: Option<&str>, body: &mut Body<'_>) -> Result<Response, ApiError> {
    if let Some(v) = vhost {
        if ctx.broker().vhost(v).is_none() {
            return Err(ApiError::new(404, "not_found", "vhost_not_found"));
        }
    }
    let _one_at_a_time = UPLOADS.lock().unwrap_or_else(|e| e.into_inner());
    let upload = read_upload(ctx, body)?;
    let text = std::str::from_utf8(&upload.json)
        .map_err(|_| ApiError::bad_request("failed_to_parse_json"))?;
    let text = text.trim_start_matches('\u{feff}');
    let by = &ctx.caller.name;
    log::info!(
        "definitions import over HTTP by '{}' ({} bytes{})",
        by.escape_debug(),
        text.len(),
        vhost.map_or(String::new(), |v| format!(
            ", into vhost '{}'",
            v.escape_debug()
        ))
    );
    let summary = if text.trim().is_empty() {
        // RabbitMQ takes an empty body for an empty document.
        None
    } else if let Some(v) = vhost {
        let doc = definitions::model::parse_within(text, DEFINITIONS_BODY_BYTES_MAX)
            .map_err(import_error)?;
        let doc = Value::Object(into_vhost(doc, v)).to_string();
        Some(definitions::import_within(
            ctx.broker(),
            &doc,
            by,
            2 * DEFINITIONS_BODY_BYTES_MAX,
        ))
    } else {
        Some(definitions::import_within(
            ctx.broker(),
            text,
            by,
            DEFINITIONS_BODY_BYTES_MAX,
        ))
    };
    if let Some(summary) = summary {
        summary.map_err(import_error)?;
    }
    Ok(match upload.redirect {
        Some(to) if !to.is_empty() => Response::empty(303).with_header("location", to),
        _ => Response::empty(204),
    })
}

/// Answers `/api/definitions...` and `/api/all-configuration`.
///
/// # Errors
/// As RabbitMQ: 401 for a non-administrator, 400, 404, 405, 413.
pub(super) fn route(
    ctx: &Ctx<'_>,
    method: &str,
    path: &[&str],
    body: &mut Body<'_>,
) -> Result<Response, ApiError> {
    require(&ctx.caller, Need::Administrator)?;
    match (method, path) {
        ("GET", [_]) => export_reply(ctx, cluster_export(ctx)),
        ("GET", ["definitions", vhost]) => {
            let doc = vhost_export(ctx, vhost)?;
            export_reply(ctx, doc)
        }
        ("POST", [_]) => import(ctx, None, body),
        ("POST", ["definitions", vhost]) => import(ctx, Some(vhost), body),
        (_, [_]) | (_, ["definitions", _]) => Err(method_not_allowed()),
        _ => Err(ApiError::not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_bodies_split_into_named_parts() {
        let body = b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; \
            filename=\"defs.json\"\r\nContent-Type: application/json\r\n\r\n{\"a\":\"--Xy\r\n\"}\
            \r\n--XyZ\r\nContent-Disposition: form-data; name=\"redirect\"\r\n\r\n../#/\r\n--XyZ--\r\n";
        let parts = multipart_parts(body, "XyZ").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, "file");
        assert_eq!(parts[0].1, b"{\"a\":\"--Xy\r\n\"}");
        assert_eq!(parts[1], ("redirect".to_string(), &b"../#/"[..]));
        assert_eq!(
            multipart_boundary("multipart/form-data; boundary=\"a b\"").unwrap(),
            Some("a b".to_string())
        );
        assert_eq!(multipart_boundary("application/json").unwrap(), None);
        assert!(multipart_boundary("multipart/form-data").is_err());
        assert!(multipart_parts(b"--XyZ\r\nno end", "XyZ").is_err());
        assert!(multipart_parts(b"nothing", "XyZ").is_err());
        let empty = multipart_parts(b"--XyZ\r\n\r\n\r\n--XyZ--", "XyZ").unwrap();
        assert_eq!(empty, vec![(String::new(), &b""[..])]);
    }
}
