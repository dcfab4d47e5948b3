//! A user's permissions in one vhost: RabbitMQ's three regular expressions, configure,
//! write and read, matched against resource names (RabbitMQ docs, "Authentication,
//! Authorisation, Access Control", "How Permissions Work").
//!
//! As in RabbitMQ, a pattern matches anywhere in the name unless anchored (`re:run`
//! semantics), the empty pattern means "nothing" (RabbitMQ reads it as `^$`), and the
//! default exchange is checked under the name `amq.default`. Patterns are compiled with
//! `fancy-regex`, which accepts the PCRE constructs RabbitMQ users write (lookarounds
//! included). `.*` and the empty pattern are recognised and never run a regex.

use crate::error::{BrokerError, ReplyCode};
use fancy_regex::Regex;
use std::fmt;

/// Longest permission pattern accepted, in bytes.
pub const PATTERN_BYTES_MAX: usize = 4096;

/// Size limit for a compiled pattern, in bytes (bounds what a pattern can cost).
pub(crate) const REGEX_COMPILED_BYTES_MAX: usize = 1024 * 1024;

/// Backtracking steps allowed per match for patterns with lookarounds or backreferences.
pub(crate) const REGEX_BACKTRACK_STEPS_MAX: usize = 100_000;

/// The three kinds of access (AMQP operations map onto them as in RabbitMQ's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Create or delete a resource (declare, delete).
    Configure,
    /// Put messages in (publish to an exchange, bind to a queue or exchange destination).
    Write,
    /// Take messages out (consume, get, purge, bind from an exchange source).
    Read,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Configure => "configure",
            Access::Write => "write",
            Access::Read => "read",
        })
    }
}

/// The kind of resource an access is to, for the refusal text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Exchange => "exchange",
            Resource::Queue => "queue",
        })
    }
}

/// One compiled permission pattern.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// `.*`: every name.
    Any,
    /// The empty pattern: no name.
    Nothing,
    /// Any other expression.
    Regex(Box<Regex>),
}

impl Pattern {
    /// Compiles `source`.
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED for a pattern longer than [`PATTERN_BYTES_MAX`] or one that
    /// does not compile, naming the pattern and the reason.
    pub fn compile(source: &str) -> Result<Pattern, BrokerError> {
        match source {
            ".*" => return Ok(Pattern::Any),
            "" | "^$" => return Ok(Pattern::Nothing),
            _ => {}
        }
        if source.len() > PATTERN_BYTES_MAX {
            return Err(BrokerError::precondition(format!(
                "permission pattern is longer than {PATTERN_BYTES_MAX} bytes"
            )));
        }
        fancy_regex::RegexBuilder::new(source)
            .delegate_size_limit(REGEX_COMPILED_BYTES_MAX)
            .backtrack_limit(REGEX_BACKTRACK_STEPS_MAX)
            .build()
            .map(|re| Pattern::Regex(Box::new(re)))
            .map_err(|e| {
                BrokerError::precondition(format!("invalid permission pattern '{source}': {e}"))
            })
    }

    /// Whether `name` matches anywhere. A match that exceeds the backtracking limit
    /// counts as no match (refusing is the safe answer).
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            // "" is RabbitMQ's `^$`: only the empty name (which never reaches a check:
            // the default exchange is checked as `amq.default`).
            Pattern::Nothing => name.is_empty(),
            Pattern::Regex(re) => re.is_match(name).unwrap_or(false),
        }
    }
}

/// The three patterns as the operator wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDef {
    /// Configure pattern.
    pub configure: String,
    /// Write pattern.
    pub write: String,
    /// Read pattern.
    pub read: String,
}

/// A user's compiled permissions in one vhost.
#[derive(Debug, Clone)]
pub struct Permissions {
    configure: Pattern,
    write: Pattern,
    read: Pattern,
}

impl Permissions {
    /// Compiles the three patterns.
    ///
    /// # Errors
    /// As [`Pattern::compile`], naming which of the three failed.
    pub fn compile(def: &PermissionDef) -> Result<Permissions, BrokerError> {
        let one = |what: &str, source: &str| {
            Pattern::compile(source)
                .map_err(|e| BrokerError::precondition(format!("{what} pattern: {}", e.text)))
        };
        Ok(Permissions {
            configure: one("configure", &def.configure)?,
            write: one("write", &def.write)?,
            read: one("read", &def.read)?,
        })
    }

    /// Full access: `.*` for all three (the default user's on `/`).
    pub fn all() -> Permissions {
        Permissions {
            configure: Pattern::Any,
            write: Pattern::Any,
            read: Pattern::Any,
        }
    }

    /// Whether `access` to the resource `name` is allowed. The default exchange (`""`) is
    /// checked as `amq.default`, as RabbitMQ does.
    pub fn allows(&self, access: Access, resource: Resource, name: &str) -> bool {
        let name = if resource == Resource::Exchange && name.is_empty() {
            "amq.default"
        } else {
            name
        };
        match access {
            Access::Configure => self.configure.matches(name),
            Access::Write => self.write.matches(name),
            Access::Read => self.read.matches(name),
        }
    }
}

/// RabbitMQ's refusal: 403 ACCESS_REFUSED "access to queue 'q' in vhost '/' refused for
/// user 'u'" (a channel error).
pub fn refused(resource: Resource, name: &str, vhost: &str, user: &str) -> BrokerError {
    let name = if resource == Resource::Exchange && name.is_empty() {
        "amq.default"
    } else {
        name
    };
    BrokerError::new(
        ReplyCode::AccessRefused,
        format!("access to {resource} '{name}' in vhost '{vhost}' refused for user '{user}'"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(c: &str, w: &str, r: &str) -> Permissions {
        Permissions::compile(&PermissionDef {
            configure: c.into(),
            write: w.into(),
            read: r.into(),
        })
        .unwrap()
    }

    #[test]
    fn patterns_match_anywhere_unless_anchored_like_rabbitmq() {
        let p = perms("^app-", "log", ".*");
        assert!(p.allows(Access::Configure, Resource::Queue, "app-1"));
        assert!(!p.allows(Access::Configure, Resource::Queue, "my-app-1"));
        assert!(p.allows(Access::Write, Resource::Exchange, "audit.log.x"));
        assert!(!p.allows(Access::Write, Resource::Exchange, "audit"));
        assert!(p.allows(Access::Read, Resource::Queue, "anything"));
    }

    #[test]
    fn the_empty_pattern_allows_nothing_and_the_default_exchange_is_amq_default() {
        let p = perms("", "^amq\\.default$", "");
        assert!(!p.allows(Access::Configure, Resource::Queue, "q"));
        assert!(!p.allows(Access::Read, Resource::Queue, "q"));
        assert!(p.allows(Access::Write, Resource::Exchange, ""));
        assert!(!p.allows(Access::Write, Resource::Exchange, "amq.direct"));
        let e = refused(Resource::Exchange, "", "/", "bob");
        assert_eq!(e.code, ReplyCode::AccessRefused);
        assert_eq!(
            e.text,
            "access to exchange 'amq.default' in vhost '/' refused for user 'bob'"
        );
    }

    #[test]
    fn lookarounds_work_as_in_pcre() {
        let p = perms("^(?!amq\\.).*", ".*", ".*");
        assert!(p.allows(Access::Configure, Resource::Exchange, "orders"));
        assert!(!p.allows(Access::Configure, Resource::Exchange, "amq.topic"));
    }

    #[test]
    fn a_bad_pattern_names_which_one_failed() {
        let e = Permissions::compile(&PermissionDef {
            configure: ".*".into(),
            write: "(".into(),
            read: ".*".into(),
        })
        .unwrap_err();
        assert_eq!(e.code, ReplyCode::PreconditionFailed);
        assert!(e
            .text
            .starts_with("write pattern: invalid permission pattern '('"));
        let long = "a".repeat(PATTERN_BYTES_MAX + 1);
        assert!(Pattern::compile(&long).is_err());
    }
}
