//! Reading a definitions document: its sections as lists of JSON objects, each element
//! named in errors the way an operator finds it in the file (`queues[3] (vhost '/', name
//! 'q')`), and typed field getters that say which field is wrong.

use crate::error::BrokerError;
use crate::types::{FieldTable, FieldValue};
use serde_json::{Map, Value};

/// The top-level object of a definitions document.
pub type Document = Map<String, Value>;

/// Parses a whole document.
///
/// # Errors
/// 406 PRECONDITION_FAILED for text over [`super::DEFINITIONS_JSON_BYTES_MAX`] bytes, text
/// that is not JSON (with line and column) or JSON that is not an object.
pub fn parse(json: &str) -> Result<Document, BrokerError> {
    parse_within(json, super::DEFINITIONS_JSON_BYTES_MAX)
}

/// The start of the error text of a document that is not JSON, or not a JSON object.
pub const NOT_JSON: &str = "definitions are not valid JSON";

/// Parses a whole document of at most `bytes_max` bytes.
///
/// # Errors
/// As [`parse`], with `bytes_max` for the limit.
pub fn parse_within(json: &str, bytes_max: usize) -> Result<Document, BrokerError> {
    if json.len() > bytes_max {
        return Err(BrokerError::precondition(format!(
            "definitions of {} bytes exceed the limit of {bytes_max} bytes",
            json.len(),
        )));
    }
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(BrokerError::precondition(format!(
            "{NOT_JSON}: they must be a JSON object (as rabbitmqctl export_definitions writes)"
        ))),
        Err(e) => Err(BrokerError::precondition(format!("{NOT_JSON}: {e}"))),
    }
}

/// One element of a section: an object at `section[index]`.
#[derive(Debug, Clone, Copy)]
pub struct Element<'a> {
    /// Section name (`queues`).
    pub section: &'static str,
    /// Position in the section, from 0.
    pub index: usize,
    /// The element's fields.
    pub fields: &'a Map<String, Value>,
}

/// The elements of `section`; an absent or null section is empty.
///
/// # Errors
/// 406 when the section is not an array or one of its elements is not an object.
pub fn elements<'a>(
    doc: &'a Document,
    section: &'static str,
) -> Result<Vec<Element<'a>>, BrokerError> {
    let items = match doc.get(section) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(BrokerError::precondition(format!(
                "'{section}' must be an array"
            )))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(index, v)| match v {
            Value::Object(fields) => Ok(Element {
                section,
                index,
                fields,
            }),
            _ => Err(BrokerError::precondition(format!(
                "{section}[{index}] must be an object"
            ))),
        })
        .collect()
}

/// The fields that name an element of each section, in the order they are shown.
fn identity(section: &str) -> &'static [&'static str] {
    match section {
        "users" | "global_parameters" => &["name"],
        "vhosts" => &["name"],
        "permissions" => &["user", "vhost"],
        "topic_permissions" => &["user", "vhost", "exchange"],
        "parameters" => &["vhost", "component", "name"],
        "bindings" => &["vhost", "source", "destination"],
        _ => &["vhost", "name"],
    }
}

impl<'a> Element<'a> {
    /// How errors and the import summary name the element:
    /// `queues[3] (vhost '/', name 'q')`.
    pub fn label(&self) -> String {
        let parts: Vec<String> = identity(self.section)
            .iter()
            .filter_map(|k| match self.fields.get(*k) {
                Some(Value::String(s)) => Some(format!("{k} '{s}'")),
                _ => None,
            })
            .collect();
        if parts.is_empty() {
            format!("{}[{}]", self.section, self.index)
        } else {
            format!("{}[{}] ({})", self.section, self.index, parts.join(", "))
        }
    }

    /// A 406 error naming the element: `label: message`.
    pub fn error(&self, message: impl std::fmt::Display) -> BrokerError {
        BrokerError::precondition(format!("{}: {message}", self.label()))
    }

    /// `error` keeping the code of `e` and prefixing its text with the label.
    pub fn wrap(&self, e: BrokerError) -> BrokerError {
        BrokerError::new(e.code, format!("{}: {}", self.label(), e.text))
    }

    /// A 406 naming the element with the text of `e` (validation: a document that is not
    /// valid is a precondition failure whatever code the check itself uses).
    pub fn invalid(&self, e: BrokerError) -> BrokerError {
        self.error(e.text)
    }

    /// A required string field.
    ///
    /// # Errors
    /// 406 when absent or not a string.
    pub fn str(&self, key: &str) -> Result<&'a str, BrokerError> {
        match self.fields.get(key) {
            Some(Value::String(s)) => Ok(s),
            None | Some(Value::Null) => Err(self.error(format!("'{key}' is missing"))),
            Some(_) => Err(self.error(format!("'{key}' must be a string"))),
        }
    }

    /// An optional string field (`default` when absent or null).
    ///
    /// # Errors
    /// 406 when present and not a string.
    pub fn str_or(&self, key: &str, default: &'a str) -> Result<&'a str, BrokerError> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(default),
            _ => self.str(key),
        }
    }

    /// An optional boolean field (`default` when absent); RabbitMQ 3.x also writes the
    /// strings `"true"`/`"false"` in old files.
    ///
    /// # Errors
    /// 406 for another value.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, BrokerError> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if s == "true" => Ok(true),
            Some(Value::String(s)) if s == "false" => Ok(false),
            Some(_) => Err(self.error(format!("'{key}' must be true or false"))),
        }
    }

    /// The `arguments` object as a field table (empty when absent).
    ///
    /// # Errors
    /// 406 when it is not an object, or nests deeper than a field table may
    /// ([`crate::types::field_table::check_nesting`]).
    pub fn arguments(&self) -> Result<FieldTable, BrokerError> {
        match self.fields.get("arguments") {
            None | Some(Value::Null) => Ok(FieldTable::new()),
            Some(Value::Object(map)) => {
                let table: FieldTable = map
                    .iter()
                    .map(|(k, v)| (k.clone(), FieldValue::from_json(v)))
                    .collect();
                crate::types::field_table::check_nesting(&table, "'arguments'")
                    .map_err(|e| self.error(&e))?;
                Ok(table)
            }
            Some(_) => Err(self.error("'arguments' must be an object")),
        }
    }

    /// Whether the field is absent or an empty object, array, string or null (RabbitMQ
    /// writes `"limits": {}` / `[]` for "no limits").
    pub fn is_empty_field(&self, key: &str) -> bool {
        match self.fields.get(key) {
            None | Some(Value::Null) => true,
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::String(s)) => s.is_empty(),
            Some(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_element() {
        let doc =
            parse(r#"{"queues":[{"name":"a","vhost":"/"},{"name":"q","vhost":"v"}]}"#).unwrap();
        let q = elements(&doc, "queues").unwrap();
        assert_eq!(q[1].label(), "queues[1] (vhost 'v', name 'q')");
        assert_eq!(
            q[0].str("durable").unwrap_err().text,
            "queues[0] (vhost '/', name 'a'): 'durable' is missing"
        );
        assert!(elements(&doc, "bindings").unwrap().is_empty());
    }

    #[test]
    fn bad_documents_are_refused() {
        assert!(parse("[1]").unwrap_err().text.contains("JSON object"));
        assert!(parse("[1]").unwrap_err().text.starts_with(NOT_JSON));
        assert!(parse("{").unwrap_err().text.contains("not valid JSON"));
        let doc = parse(r#"{"users":{"a":1},"vhosts":[1]}"#).unwrap();
        assert_eq!(
            elements(&doc, "users").unwrap_err().text,
            "'users' must be an array"
        );
        assert_eq!(
            elements(&doc, "vhosts").unwrap_err().text,
            "vhosts[0] must be an object"
        );
    }
}
