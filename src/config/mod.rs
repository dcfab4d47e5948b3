//! Server configuration: every `relaymq-server` setting in one table
//! ([`table::SETTINGS`]), merged from defaults, a TOML file (`--config`), `RELAYMQ_SERVER_*`
//! environment variables and flags, in that order of precedence (flags win), shown by
//! `--print-config` and partly reloaded on SIGHUP. docs/operations.md, "Configuration".
//!
//! Layout: `settings` (the values), `table` (name, parse, print and reload class of each),
//! `layers` (merging the sources, with the origin of each value), `print`
//! (`--print-config`), `reload` (SIGHUP).

pub mod layers;
pub mod print;
pub mod reload;
pub mod settings;
pub mod table;

pub use layers::{load, ConfigError, Inputs, Layered, Origin};
pub use settings::Settings;

/// Prefix of the environment variables that set a setting: `RELAYMQ_SERVER_` + the name
/// upper-cased with `-` → `_` (`RELAYMQ_SERVER_MAX_CONNECTIONS`). Any other variable with
/// this prefix stops the start-up (typo safety).
pub const ENV_PREFIX: &str = "RELAYMQ_SERVER_";
