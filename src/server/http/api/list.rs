//! RabbitMQ's list conventions (`rabbit_mgmt_util:reply_list_or_paginate/3` and
//! friends): `sort` (a dotted field, then the endpoint's default keys), `sort_reverse`,
//! `columns=a,b.c`, and pagination `page`, `page_size` (default
//! [`PAGE_SIZE_DEFAULT`], at most [`PAGE_SIZE_MAX`]), `name` (a case-insensitive
//! substring, or a case-insensitive regex with `use_regex=true`) with the paged shape
//! `{total_count, item_count, filtered_count, page, page_size, page_count, items}`.
//!
//! Cheap by construction: items are sorted and filtered on the fields they give without
//! rendering ([`ListSpec::cheap`]: names, vhosts) and only the page is rendered; an
//! unpaginated list is streamed item by item, so its memory does not grow with its
//! length. Sorting on a statistic renders every item first, as it must.

use super::{ApiError, JSON};
use crate::server::http::request::Request;
use crate::server::http::response::Response;
use serde_json::Value;
use std::cmp::Ordering;
use std::io::Write;
use std::sync::Arc;

/// Items per page when `page` is given without `page_size` (RabbitMQ's
/// `?DEFAULT_PAGE_SIZE`).
pub const PAGE_SIZE_DEFAULT: usize = 100;

/// Largest `page_size` (RabbitMQ's `?MAX_PAGE_SIZE`).
pub const PAGE_SIZE_MAX: usize = 500;

/// Longest `name` filter regex, in characters (RabbitMQ's `?MAX_FILTER_LENGTH`).
pub const NAME_FILTER_REGEX_CHARS_MAX: usize = 1000;

/// Renders one item as its JSON object.
pub type Render<T> = Arc<dyn Fn(&T) -> Value + Send + Sync>;

/// How an endpoint's items are sorted, filtered and rendered.
pub struct ListSpec<T> {
    /// Sort keys applied after the requested one (RabbitMQ: `["vhost", "name"]` for
    /// most lists).
    pub default_sort: &'static [&'static str],
    /// A field's value without rendering the item, for the fields that are cheap
    /// (`None` for the others); must give `name` when the items have names.
    pub cheap: fn(&T, &str) -> Option<Value>,
    /// The item's whole JSON object.
    pub render: Render<T>,
}

struct Pagination {
    page: usize,
    page_size: usize,
    name: Option<String>,
    use_regex: bool,
}

fn int_param(request: &Request, name: &str) -> Result<Option<i64>, ApiError> {
    match request.query(name) {
        None => Ok(None),
        Some(v) => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request("Pagination parameters are invalid")),
    }
}

fn pagination(request: &Request) -> Result<Option<Pagination>, ApiError> {
    if request.query("pagination") == Some("false") {
        return Ok(None);
    }
    let page = int_param(request, "page")?;
    let page_size = int_param(request, "page_size")?;
    let use_regex = request.query("use_regex") == Some("true");
    let name = request.query("name").map(str::to_string);
    if use_regex
        && name
            .as_ref()
            .is_some_and(|n| n.chars().count() > NAME_FILTER_REGEX_CHARS_MAX)
    {
        return Err(ApiError::new(
            400,
            "invalid_pagination_parameters",
            "name filter regex is too long",
        ));
    }
    let show = |v: Option<i64>| v.map_or("undefined".to_string(), |n| n.to_string());
    match (page, page_size) {
        (None, _) => Ok(None),
        (Some(p), size) if p > 0 && size.is_none_or(|s| s > 0 && s <= PAGE_SIZE_MAX as i64) => {
            Ok(Some(Pagination {
                page: usize::try_from(p).unwrap_or(usize::MAX),
                page_size: size.map_or(PAGE_SIZE_DEFAULT, |s| s as usize),
                name,
                use_regex,
            }))
        }
        (p, s) => Err(ApiError::new(
            400,
            "invalid_pagination_parameters",
            format!(
                "Invalid pagination parameters: page number {}, page size {}",
                show(p),
                show(s)
            ),
        )),
    }
}

/// The requested columns: each a dotted path.
fn columns(request: &Request) -> Option<Vec<Vec<String>>> {
    request.query("columns").map(|c| {
        c.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.split('.').map(str::to_string).collect())
            .collect()
    })
}

/// `v` with only the fields `cols` names (RabbitMQ's `extract_column_items`).
pub fn keep_columns(v: Value, cols: &[Vec<String>]) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter_map(|(k, v)| {
                    let sub: Vec<Vec<String>> = cols
                        .iter()
                        .filter(|c| c.first() == Some(&k))
                        .map(|c| c[1..].to_vec())
                        .collect();
                    if sub.is_empty() {
                        None
                    } else if sub.iter().any(Vec::is_empty) {
                        Some((k, v))
                    } else {
                        Some((k, keep_columns(v, &sub)))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|i| keep_columns(i, cols)).collect())
        }
        other => other,
    }
}

/// The value at a dotted path (`message_stats.publish`); missing is `0`, as RabbitMQ's
/// sort puts "nothing" first.
fn dotted(v: &Value, path: &str) -> Value {
    let mut cur = v;
    for key in path.split('.') {
        match cur.get(key) {
            Some(next) => cur = next,
            None => return Value::from(0),
        }
    }
    cur.clone()
}

/// Erlang's term order over JSON values: numbers, then atoms (`false`, `null`, `true`
/// alphabetically), objects, arrays, strings.
pub fn term_order(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> (u8, u8) {
        match v {
            Value::Number(_) => (0, 0),
            Value::Bool(false) => (1, 0),
            Value::Null => (1, 1),
            Value::Bool(true) => (1, 2),
            Value::Object(_) => (2, 0),
            Value::Array(_) => (3, 0),
            Value::String(_) => (4, 0),
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (i, j) in x.iter().zip(y) {
                let o = term_order(i, j);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// A name filter: substring or regex, both case-insensitive.
enum NameFilter {
    Substring(String),
    Regex(Box<fancy_regex::Regex>),
}

impl NameFilter {
    fn new(p: &Pagination) -> Result<Option<NameFilter>, ApiError> {
        let Some(name) = p.name.as_ref().filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        if p.use_regex {
            fancy_regex::RegexBuilder::new(name)
                .case_insensitive(true)
                .build()
                .map(|r| Some(NameFilter::Regex(Box::new(r))))
                .map_err(|e| ApiError::bad_request(format!("invalid name filter regex: {e}")))
        } else {
            Ok(Some(NameFilter::Substring(name.to_lowercase())))
        }
    }

    fn matches(&self, name: &Value) -> bool {
        let Some(name) = name.as_str() else {
            return false;
        };
        match self {
            NameFilter::Substring(s) => name.to_lowercase().contains(s.as_str()),
            NameFilter::Regex(r) => r.is_match(name).unwrap_or(false),
        }
    }
}

/// An item with its sort key, rendered already or not.
struct Entry<T> {
    item: T,
    key: Vec<Value>,
    rendered: Option<Value>,
}

/// Answers a list request for `items` under RabbitMQ's conventions.
///
/// # Errors
/// 400 `invalid_pagination_parameters` for a bad page or page size, 400
/// `page_out_of_range` for a page past the end, 400 for a bad name regex.
pub fn reply<T: Send + 'static>(
    request: &Request,
    items: Vec<T>,
    spec: ListSpec<T>,
) -> Result<Response, ApiError> {
    let pagination = pagination(request)?;
    let columns = columns(request);
    let sort = request.query("sort").map(str::to_string);
    let reverse = request.query("sort_reverse") == Some("true");
    let do_sort = sort.as_deref() != Some("");
    let mut keys: Vec<String> = sort.iter().filter(|s| !s.is_empty()).cloned().collect();
    for k in spec.default_sort {
        if !keys.iter().any(|x| x == k) {
            keys.push((*k).to_string());
        }
    }
    let cheap = spec.cheap;
    let all_cheap = items.first().is_none_or(|first| {
        keys.iter()
            .all(|k| !k.contains('.') && cheap(first, k).is_some())
    });
    let render = spec.render;
    let mut entries: Vec<Entry<T>> = items
        .into_iter()
        .map(|item| {
            let (key, rendered) = if !do_sort {
                (Vec::new(), None)
            } else if all_cheap {
                let key = keys
                    .iter()
                    .map(|k| cheap(&item, k).unwrap_or(Value::from(0)))
                    .collect();
                (key, None)
            } else {
                let v = render(&item);
                (keys.iter().map(|k| dotted(&v, k)).collect(), Some(v))
            };
            Entry {
                item,
                key,
                rendered,
            }
        })
        .collect();
    if do_sort {
        entries.sort_by(|a, b| {
            a.key
                .iter()
                .zip(&b.key)
                .map(|(x, y)| term_order(x, y))
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        });
        if reverse {
            entries.reverse();
        }
    }
    let finish = move |e: Entry<T>, render: &Render<T>| -> Value {
        let v = e.rendered.unwrap_or_else(|| render(&e.item));
        match &columns {
            Some(c) => keep_columns(v, c),
            None => v,
        }
    };
    let Some(p) = pagination else {
        return Ok(Response::stream(
            200,
            JSON,
            Box::new(move |w: &mut dyn Write| {
                w.write_all(b"[")?;
                for (i, e) in entries.into_iter().enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                    }
                    serde_json::to_writer(&mut *w, &finish(e, &render))?;
                }
                w.write_all(b"]")
            }),
        ));
    };
    let total = entries.len();
    if let Some(filter) = NameFilter::new(&p)? {
        entries.retain(|e| {
            let name = cheap(&e.item, "name")
                .or_else(|| e.rendered.as_ref().and_then(|v| v.get("name").cloned()))
                .unwrap_or(Value::Null);
            filter.matches(&name)
        });
    }
    let filtered = entries.len();
    let offset = (p.page - 1).saturating_mul(p.page_size);
    if offset > filtered {
        return Err(ApiError::new(
            400,
            "page_out_of_range",
            format!(
                "Page out of range, page: {} page size: {}, len: {}",
                p.page, p.page_size, filtered
            ),
        ));
    }
    let page: Vec<Value> = entries
        .into_iter()
        .skip(offset)
        .take(p.page_size)
        .map(|e| finish(e, &render))
        .collect();
    let body = serde_json::json!({
        "total_count": total,
        "item_count": page.len(),
        "filtered_count": filtered,
        "page": p.page,
        "page_size": p.page_size,
        "page_count": filtered.div_ceil(p.page_size),
        "items": page,
    });
    Ok(super::json_reply(200, &body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(query: &str) -> Request {
        let head = format!("GET /api/x?{query} HTTP/1.1\r\n\r\n");
        Request::parse(head.as_bytes(), ([127, 0, 0, 1], 1).into())
            .expect("parses")
            .0
    }

    fn spec() -> ListSpec<(String, i64)> {
        ListSpec {
            default_sort: &["name"],
            cheap: |item, field| (field == "name").then(|| Value::from(item.0.clone())),
            render: Arc::new(
                |item| json!({"name": item.0, "messages": item.1, "s": {"a": 1, "b": 2}}),
            ),
        }
    }

    fn items() -> Vec<(String, i64)> {
        vec![("b".into(), 1), ("A".into(), 3), ("c".into(), 2)]
    }

    fn answer(query: &str) -> Result<Value, ApiError> {
        let r = reply(&request(query), items(), spec())?;
        let mut out = Vec::new();
        r.write_to(&mut out, false, false, 1).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        let (_, body) = text.split_once("\r\n\r\n").expect("head");
        // Undo the chunked encoding of a streamed list.
        let body = if text.contains("transfer-encoding: chunked") {
            let mut rest = body;
            let mut joined = String::new();
            loop {
                let (size, after) = rest.split_once("\r\n").expect("size line");
                let size = usize::from_str_radix(size, 16).expect("hex");
                if size == 0 {
                    break;
                }
                joined.push_str(&after[..size]);
                rest = &after[size + 2..];
            }
            joined
        } else {
            body.to_string()
        };
        Ok(serde_json::from_str(&body).expect("json"))
    }

    #[test]
    fn lists_sort_by_default_or_by_a_field_and_keep_columns() {
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .expect("array")
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&answer("").unwrap()), ["A", "b", "c"]);
        assert_eq!(names(&answer("sort=messages").unwrap()), ["b", "c", "A"]);
        assert_eq!(
            names(&answer("sort=messages&sort_reverse=true").unwrap()),
            ["A", "c", "b"]
        );
        assert_eq!(names(&answer("sort=").unwrap()), ["b", "A", "c"]);
        assert_eq!(
            answer("columns=name,s.b").unwrap()[0],
            json!({"name": "A", "s": {"b": 2}})
        );
    }

    #[test]
    fn pages_have_rabbitmqs_shape_and_errors() {
        let v = answer("page=2&page_size=2").unwrap();
        assert_eq!(
            v,
            json!({"total_count": 3, "item_count": 1, "filtered_count": 3, "page": 2,
                   "page_size": 2, "page_count": 2,
                   "items": [{"name": "c", "messages": 2, "s": {"a": 1, "b": 2}}]})
        );
        let v = answer("page=1&name=B").unwrap();
        assert_eq!(
            (v["filtered_count"].clone(), v["page_size"].clone()),
            (json!(1), json!(100))
        );
        let v = answer("page=1&name=%5E%5Bab%5D&use_regex=true").unwrap();
        assert_eq!(v["filtered_count"], json!(2));
        let e = answer("page=0").unwrap_err();
        assert_eq!(
            (e.status, e.error.as_str(), e.reason.as_str()),
            (
                400,
                "invalid_pagination_parameters",
                "Invalid pagination parameters: page number 0, page size undefined"
            )
        );
        assert_eq!(answer("page=1&page_size=501").unwrap_err().status, 400);
        assert_eq!(
            answer("page=3&page_size=2").unwrap_err().error,
            "page_out_of_range"
        );
        assert_eq!(answer("page=x").unwrap_err().status, 400);
        assert!(answer("page=1&pagination=false").unwrap().is_array());
    }
}
