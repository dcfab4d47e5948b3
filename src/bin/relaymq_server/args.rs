//! The command line of `relaymq-server`: actions (`--help`, `--version`, `--check`,
//! `--print-config`), `--config FILE`, and setting flags, each of which names an entry of
//! `relaymq::config::table::SETTINGS` (parsed later, with the file and environment).

use super::help::usage;
use anyhow::{bail, Result};
use relaymq::config::table::find_flag;
use relaymq::config::Inputs;
use std::io::Write;
use std::path::PathBuf;

/// What to do once the configuration is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run the broker.
    Serve,
    /// `--check`: verify the stopped data directory and exit.
    Check,
    /// `--print-config`: print the effective configuration and exit.
    PrintConfig,
}

/// The parsed command line.
pub struct Args {
    /// `--config` and the setting flags in order.
    pub inputs: Inputs,
    /// What to do.
    pub action: Action,
}

/// Parses the process's arguments; `--help` and `--version` print and exit 0.
///
/// # Errors
/// An unknown option, a missing value, a value that is not UTF-8, or both `--check` and
/// `--print-config`.
pub fn parse() -> Result<Args> {
    use lexopt::prelude::*;
    let mut inputs = Inputs::default();
    let mut action = Action::Serve;
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("config") => inputs.config_file = Some(PathBuf::from(parser.value()?)),
            Long("check") | Long("print-config") => {
                let wanted = if arg == Long("check") {
                    Action::Check
                } else {
                    Action::PrintConfig
                };
                if action != Action::Serve && action != wanted {
                    bail!("--check and --print-config cannot be combined");
                }
                action = wanted;
            }
            Short('h') | Long("help") => {
                // A closed pipe (`--help | head -1`) is not worth a panic.
                let _ = write!(std::io::stdout(), "{}", usage());
                std::process::exit(0);
            }
            Short('V') | Long("version") => {
                let _ = writeln!(
                    std::io::stdout(),
                    "relaymq-server {}",
                    env!("CARGO_PKG_VERSION")
                );
                std::process::exit(0);
            }
            Long(flag) if find_flag(flag).is_some() => {
                let flag = flag.to_string();
                let value = parser.value()?.into_string().map_err(|v| {
                    anyhow::anyhow!("--{flag}: '{}' is not valid UTF-8", v.to_string_lossy())
                })?;
                inputs.flags.push((flag, value));
            }
            _ => return Err(arg.unexpected().into()),
        }
    }
    Ok(Args { inputs, action })
}
