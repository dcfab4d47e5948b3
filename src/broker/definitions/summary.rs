//! What an import did: per section, how many elements were created (or changed) and how
//! many were already there, and every element (or part of one) not honoured, each named.

use serde_json::{json, Map, Value};

/// Counts of one section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionCount {
    /// Elements created.
    pub created: usize,
    /// Elements that existed with other properties and were replaced by the file's (users,
    /// permissions, policies: RabbitMQ's rule).
    pub replaced: usize,
    /// Elements already present with the same properties.
    pub unchanged: usize,
}

/// The result of an import, sent back to the client as JSON ([`ImportSummary::to_json`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// Section name → counts, in the order applied.
    pub sections: Vec<(&'static str, SectionCount)>,
    /// What the operator should know about what was applied (the importing user's own
    /// password replaced, ...).
    pub warnings: Vec<String>,
    /// One line per element or argument not honoured:
    /// `exchanges[2] (vhost '/', name 'x'): argument 'alternate-exchange' not honoured (...)`.
    pub not_honoured: Vec<String>,
}

impl ImportSummary {
    /// Records the counts of `section`.
    pub fn count(&mut self, section: &'static str, count: SectionCount) {
        self.sections.push((section, count));
    }

    /// Records a warning.
    pub fn warn(&mut self, what: impl Into<String>) {
        self.warnings.push(what.into());
    }

    /// Records an element not honoured.
    pub fn skip(&mut self, what: impl Into<String>) {
        self.not_honoured.push(what.into());
    }

    /// `created vhosts 1, users 3 (+1 replaced), …` for the log: the sections where
    /// something was created or replaced, in the order applied (`nothing created` when
    /// everything was there).
    pub fn created_line(&self) -> String {
        let parts: Vec<String> = self
            .sections
            .iter()
            .filter(|(_, c)| c.created + c.replaced > 0)
            .map(|(name, c)| match c.replaced {
                0 => format!("{name} {}", c.created),
                r => format!("{name} {} (+{r} replaced)", c.created),
            })
            .collect();
        if parts.is_empty() {
            "nothing created".to_string()
        } else {
            format!("created {}", parts.join(", "))
        }
    }

    /// `{"created": {"vhosts": n, …}, "replaced": {…}, "unchanged": {…}, "warnings":
    /// ["…"], "not_honoured": ["…"]}`.
    pub fn to_json(&self) -> Value {
        let mut created = Map::new();
        let mut replaced = Map::new();
        let mut unchanged = Map::new();
        for (name, c) in &self.sections {
            created.insert(name.to_string(), json!(c.created));
            replaced.insert(name.to_string(), json!(c.replaced));
            unchanged.insert(name.to_string(), json!(c.unchanged));
        }
        json!({
            "created": created,
            "replaced": replaced,
            "unchanged": unchanged,
            "warnings": self.warnings,
            "not_honoured": self.not_honoured,
        })
    }
}
