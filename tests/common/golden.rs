//! RabbitMQ's recorded management API replies (`tests/fixtures/management/NAME.json`, made
//! by `tests/fixtures/make-rabbitmq-3.10-management.sh`) and the comparison of a reply's
//! shape with one of them: the HTTP API tests check that RelayMQ's replies carry every
//! field RabbitMQ's do, with the same JSON types, whatever the values.
//!
//! Each fixture is `{"request": "METHOD PATH", "status": N, "headers": {...}, "body": ...}`.
//!
//! The shape rules ([`shape_problems`]), for the fixture's value `expected` at a path:
//! - `null` matches anything (RabbitMQ sent no value to learn a type from);
//! - a number matches any number (integer or float), a string a string, a bool a bool;
//! - an object matches an object with at least its keys, each matching in turn (extra
//!   keys are fine);
//! - an empty array matches any array; a non-empty one matches an array whose every
//!   element matches the fixture's *first* element, and which is not empty unless
//!   [`Shape::empty_arrays_ok`];
//! - a path [`Shape::opaque`] names must hold a value of the same type, but what is in it
//!   is not compared (user data such as `arguments`, or Erlang internals);
//! - a path [`Shape::optional`] names may be missing or `null`; otherwise it is compared.
//!
//! A path is written as in the problems listed: keys joined by `.`, array elements as
//! `[i]` (`items[0].message_stats.publish_details.rate`). [`Shape`]'s lists hold path
//! *suffixes* with every index written `[]`: `arguments` names every `arguments` field at
//! any depth, `listeners[].socket_opts` only those of `listeners`' elements.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The directory of the recorded replies.
pub const FIXTURES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/management");

/// Fields of RabbitMQ's replies whose contents are data, not API: the user's arguments
/// and policy definitions, a client's properties, a message's properties, and the Erlang
/// queue's internals. [`Shape::default`]'s opaque paths.
pub const USER_DATA: &[&str] = &[
    "arguments",
    "effective_policy_definition",
    "definition",
    "client_properties",
    "properties",
    "backing_queue_status",
    "garbage_collection",
];

/// At most this many problems are printed by a failing [`assert_same_shape`]; the rest are
/// counted.
pub const PROBLEMS_PRINTED_MAX: usize = 200;

/// What a shape comparison leaves out. `Shape::default()`: [`USER_DATA`] opaque, nothing
/// optional, empty arrays fail.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'a> {
    /// Path suffixes whose value must have the fixture's type, its contents not compared.
    pub opaque: &'a [&'a str],
    /// Path suffixes that may be missing or `null` (RabbitMQ leaves `message_stats` out of
    /// an object no message went through); when present, compared as usual.
    pub optional: &'a [&'a str],
    /// Whether an empty array passes where the fixture's is not empty (an empty list
    /// reply, a queue without consumers).
    pub empty_arrays_ok: bool,
}

impl Default for Shape<'_> {
    fn default() -> Self {
        Shape {
            opaque: USER_DATA,
            optional: &[],
            empty_arrays_ok: false,
        }
    }
}

/// The path of the fixture `name` (`queues` → `tests/fixtures/management/queues.json`).
pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(FIXTURES_DIR).join(format!("{name}.json"))
}

/// The whole recorded fixture `name`: `request`, `status`, `headers` and `body`. Panics,
/// listing the fixtures there are, when there is no such file or it is not JSON.
pub fn fixture(name: &str) -> Value {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the fixture {}: {e}; the fixtures are: {}",
            path.display(),
            fixture_names().join(", ")
        )
    });
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the fixture {} is not JSON: {e}", path.display()))
}

/// The names of every fixture (file names without `.json`), sorted.
pub fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(FIXTURES_DIR)
        .expect("tests/fixtures/management is readable")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".json")?.to_string())
        })
        .collect();
    names.sort();
    names
}

/// Asserts that `actual` (a reply's body) has the shape of the body of the fixture
/// `fixture_name`, with [`Shape::default`]; panics listing every problem.
pub fn assert_same_shape(fixture_name: &str, actual: &Value) {
    assert_same_shape_with(fixture_name, actual, &Shape::default());
}

/// As [`assert_same_shape`], with what the comparison leaves out given by `shape`.
pub fn assert_same_shape_with(fixture_name: &str, actual: &Value, shape: &Shape) {
    let recorded = fixture(fixture_name);
    let Some(expected) = recorded.get("body") else {
        panic!("the fixture {fixture_name} has no body");
    };
    let problems = shape_problems(expected, actual, shape);
    if problems.is_empty() {
        return;
    }
    let mut listed: Vec<&str> = problems
        .iter()
        .take(PROBLEMS_PRINTED_MAX)
        .map(String::as_str)
        .collect();
    let more = problems.len().saturating_sub(PROBLEMS_PRINTED_MAX);
    let more_line = format!("… and {more} more");
    if more > 0 {
        listed.push(&more_line);
    }
    panic!(
        "the reply does not have the shape of RabbitMQ's to {} ({}): {} problem(s):\n  {}\n\
         the reply was: {}",
        recorded["request"].as_str().unwrap_or("?"),
        fixture_path(fixture_name).display(),
        problems.len(),
        listed.join("\n  "),
        excerpt(actual, 2000),
    );
}

/// Every way `actual` differs in shape from `expected` (see the module's rules), as
/// `PATH: what is wrong` (`items[0].message_stats.publish_details.rate: missing`), in the
/// order of `expected`'s keys. The root is called `body`. Empty when the shapes agree.
pub fn shape_problems(expected: &Value, actual: &Value, shape: &Shape) -> Vec<String> {
    let mut problems = Vec::new();
    compare(expected, actual, &mut Vec::new(), shape, &mut problems);
    problems
}

/// One step of a path: an object's key or an array's index.
enum Step<'v> {
    Key(&'v str),
    Index(usize),
}

fn compare<'v>(
    expected: &'v Value,
    actual: &Value,
    path: &mut Vec<Step<'v>>,
    shape: &Shape,
    problems: &mut Vec<String>,
) {
    if expected.is_null() {
        return;
    }
    let pattern = pattern(path);
    if actual.is_null() && is_named(&pattern, shape.optional) {
        return;
    }
    if type_name(expected) != type_name(actual) {
        let found = match actual {
            Value::Null => "null".to_string(),
            _ => format!("{} {}", type_name(actual), excerpt(actual, 60)),
        };
        problems.push(format!(
            "{}: expected {}, found {found}",
            display(path),
            type_name(expected),
        ));
        return;
    }
    if is_named(&pattern, shape.opaque) {
        return;
    }
    match (expected, actual) {
        (Value::Object(fields), Value::Object(present)) => {
            for (key, value) in fields {
                path.push(Step::Key(key));
                match present.get(key) {
                    Some(found) => compare(value, found, path, shape, problems),
                    None if is_named(&pattern_of_key(&pattern, key), shape.optional) => {}
                    None => problems.push(format!("{}: missing", display(path))),
                }
                path.pop();
            }
        }
        (Value::Array(elements), Value::Array(found)) => {
            let Some(first) = elements.first() else {
                return;
            };
            if found.is_empty() && !shape.empty_arrays_ok {
                problems.push(format!(
                    "{}: empty array, RabbitMQ's has {} element(s)",
                    display(path),
                    elements.len()
                ));
            }
            for (i, element) in found.iter().enumerate() {
                path.push(Step::Index(i));
                compare(first, element, path, shape, problems);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Whether the path `pattern` (indices written `[]`) ends with one of `suffixes` at a step
/// boundary.
fn is_named(pattern: &str, suffixes: &[&str]) -> bool {
    suffixes.iter().any(|suffix| {
        pattern == *suffix
            || pattern.strip_suffix(suffix).is_some_and(|before| {
                before.ends_with('.') || (suffix.starts_with('[') && !before.is_empty())
            })
    })
}

/// The path as shown in problems: `items[0].name`, the root as `body`.
fn display(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() {
        out.push_str("body");
    }
    out
}

/// The path as [`Shape`]'s suffixes are written: every index `[]`, the root empty.
fn pattern(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) => out = pattern_of_key(&out, key),
            Step::Index(_) => out.push_str("[]"),
        }
    }
    out
}

fn pattern_of_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `value` as JSON, cut to about `chars_max` characters.
fn excerpt(value: &Value, chars_max: usize) -> String {
    let text = value.to_string();
    match text.char_indices().nth(chars_max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
