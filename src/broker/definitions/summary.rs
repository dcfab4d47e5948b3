//! What an import did: per section, how many elements were created (or changed) and how
//! many were already there, and every element (or part of one) not honoured, each named.

use serde_json::{json, Map, Value};

/// Counts of one section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionCount {
    /// Elements created or changed.
    pub created: usize,
    /// Elements already present with the same properties.
    pub unchanged: usize,
}

/// The result of an import, sent back to the client as JSON ([`ImportSummary::to_json`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// Section name → counts, in the order applied.
    pub sections: Vec<(&'static str, SectionCount)>,
    /// One line per element or argument not honoured:
    /// `exchanges[2] (vhost '/', name 'x'): argument 'alternate-exchange' not honoured (...)`.
    pub not_honoured: Vec<String>,
}

impl ImportSummary {
    /// Records the counts of `section`.
    pub fn count(&mut self, section: &'static str, count: SectionCount) {
        self.sections.push((section, count));
    }

    /// Records an element not honoured.
    pub fn skip(&mut self, what: impl Into<String>) {
        self.not_honoured.push(what.into());
    }

    /// `{"created": {"vhosts": n, …}, "unchanged": {…}, "not_honoured": ["…"]}`.
    pub fn to_json(&self) -> Value {
        let mut created = Map::new();
        let mut unchanged = Map::new();
        for (name, c) in &self.sections {
            created.insert(name.to_string(), json!(c.created));
            unchanged.insert(name.to_string(), json!(c.unchanged));
        }
        json!({
            "created": created,
            "unchanged": unchanged,
            "not_honoured": self.not_honoured,
        })
    }
}
