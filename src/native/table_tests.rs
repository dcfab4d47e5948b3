//! Checks of the method table itself ([`super::method`]) against what documents it.
//!
//! Round trips cannot see a table mistake that both directions share: two fields of one
//! type swapped, an `sstr` written where the protocol has an `lstr`, an id or name typed
//! wrong. So every entry is compared with the two descriptions people read: its own doc
//! comment and the method table of `docs/protocol.md` §7.

use super::method::{method_name, record_fields, Method};
use std::collections::BTreeMap;

/// The protocol document, read at compile time.
const DOC: &str = include_str!("../../docs/protocol.md");

/// The method ids of the table, ascending.
fn table_ids() -> Vec<u16> {
    (0..=u16::MAX)
        .filter(|&id| Method::layout_of(id).is_some())
        .collect()
}

/// `(id, name)` of every row of the method table in `docs/protocol.md` §7, with the row's
/// "fields, in order" cell.
fn document_rows() -> BTreeMap<u16, (String, String)> {
    let mut rows = BTreeMap::new();
    for line in DOC.lines().filter(|l| l.starts_with("| 0x")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let hex = &cells[0]["| 0x".len()..];
        let id = u16::from_str_radix(hex, 16)
            .unwrap_or_else(|_| panic!("docs/protocol.md: bad id in {line:?}"));
        let name = cells[1].trim_matches('`').to_string();
        let fields = cells[4].to_string();
        assert!(
            rows.insert(id, (name, fields)).is_none(),
            "0x{id:04X} twice in docs/protocol.md"
        );
    }
    rows
}

/// Text with every run of whitespace (line breaks of a doc comment included) as one space.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `(wire, name)` pairs a field stands for in the documents, in wire order: one for a
/// field of a simple wire type (`sstr user`), the record's own fields for a record or a
/// counted list of records, none for the composite encodings documented on their wire type
/// (`Watermark`, a counted list of tables).
fn documented_fields(name: &str, rust_type: &str, wire: &str) -> Vec<(String, String)> {
    let simple = [
        "Sstr", "Lstr", "U8", "U16", "U32", "U64", "Bool", "Table", "Props",
    ];
    if simple.contains(&wire) {
        return vec![(wire.to_lowercase(), name.to_string())];
    }
    let wire_squeezed = wire.replace(' ', "");
    if wire_squeezed == "Record" || wire_squeezed.starts_with("Counted<Record,") {
        let record = rust_type
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .find_map(record_fields)
            .unwrap_or_else(|| panic!("{name}: no record in {rust_type}"));
        return record
            .into_iter()
            .flat_map(|(n, t, w)| documented_fields(n, t, w))
            .collect();
    }
    Vec::new()
}

/// Where `word` starts in `text` at or after `from`, as whole words (not a prefix of a
/// longer name such as `message_count` for `message`).
fn find_word(text: &str, word: &str, from: usize) -> Option<usize> {
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    let mut at = from;
    while let Some(i) = text[at..].find(word) {
        let start = at + i;
        let end = start + word.len();
        let before_ok = !text[..start].ends_with(is_name);
        let after_ok = !text[end..].starts_with(is_name);
        if before_ok && after_ok {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

/// Checks that `text` names each field as `wire name`, in order.
fn assert_fields_in_order(what: &str, text: &str, fields: &[(String, String)]) {
    let mut from = 0;
    for (wire, name) in fields {
        let wanted = format!("{wire} {name}");
        match find_word(text, &wanted, from) {
            Some(at) => from = at + wanted.len(),
            None => panic!("{what}: `{wanted}` missing or out of order in {text:?}"),
        }
    }
}

#[test]
fn table_ids_and_names_are_the_documents() {
    let table: BTreeMap<u16, String> = table_ids()
        .into_iter()
        .map(|id| (id, method_name(id).to_string()))
        .collect();
    let document: BTreeMap<u16, String> = document_rows()
        .into_iter()
        .map(|(id, (name, _))| (id, name))
        .collect();
    assert_eq!(
        table, document,
        "docs/protocol.md §7 and the method table differ"
    );
    let names: std::collections::BTreeSet<&String> = table.values().collect();
    assert_eq!(names.len(), table.len(), "two methods share a name");
    for id in table_ids() {
        let layout = Method::layout_of(id).unwrap();
        assert!(
            layout.doc.trim_start().starts_with(&format!("0x{id:04X}")),
            "{}: its doc does not start with its id 0x{id:04X}",
            layout.variant
        );
    }
}

#[test]
fn fields_are_in_the_documented_wire_order() {
    let rows = document_rows();
    for id in table_ids() {
        let layout = Method::layout_of(id).unwrap();
        let fields: Vec<(String, String)> = layout
            .fields
            .iter()
            .flat_map(|&(name, rust_type, wire)| documented_fields(name, rust_type, wire))
            .collect();
        assert_fields_in_order(layout.variant, &squeeze(layout.doc), &fields);
        let (name, cell) = &rows[&id];
        assert_fields_in_order(name, cell, &fields);
    }
}
