//! Signal handling: SIGHUP reloads the configuration (`relaymq::config::reload`), SIGINT
//! and SIGTERM start a graceful shutdown. Runs on its own thread; nothing on it panics: a
//! reload that fails is logged and changes nothing.

use super::notify;
use relaymq::broker::Broker;
use relaymq::config::{Inputs, Layered};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::Arc;

/// The log target of these lines (the binary's name, not its module path).
const LOG_TARGET: &str = "relaymq_server";

/// What the signal thread needs to reload: the running configuration, the sources to read
/// again and the broker to apply it to.
pub struct Reloader {
    /// The configuration in force (live changes are merged into it).
    pub running: Layered,
    /// `--config` and the flags, read again on each SIGHUP (flags still win).
    pub inputs: Inputs,
    /// The running broker.
    pub broker: Arc<Broker>,
    /// The `STATUS=` text after a reload.
    pub status: String,
}

impl Reloader {
    /// One SIGHUP: `RELOADING=1`, reload, `READY=1`.
    fn reload(&mut self) {
        notify::reloading();
        log::info!(target: LOG_TARGET, "received SIGHUP, reloading the configuration");
        match relaymq::config::reload::reload(
            &mut self.running,
            &self.inputs,
            std::env::vars_os(),
            &self.broker,
        ) {
            Ok(_) => notify::ready(&self.status),
            Err(e) => {
                log::error!(target: LOG_TARGET, "config reload failed, nothing changed: {e}");
                notify::ready(&format!("{}; last reload failed: {e}", self.status));
            }
        }
    }
}

/// Installs the SIGHUP handler (before the server starts, so an early SIGHUP is kept for
/// later instead of killing the process).
///
/// # Errors
/// The handler cannot be installed.
pub fn install() -> std::io::Result<Signals> {
    Signals::new([SIGHUP])
}

/// Adds SIGINT and SIGTERM to `signals` (once the server runs) and starts the thread that
/// serves them: SIGHUP reloads with `reloader`, SIGINT/SIGTERM send `STOPPING=1` and call
/// `shutdown`.
///
/// # Errors
/// A handler cannot be added or the thread cannot be started.
pub fn start(
    mut signals: Signals,
    mut reloader: Reloader,
    shutdown: impl Fn() + Send + 'static,
) -> std::io::Result<()> {
    signals.add_signal(SIGINT)?;
    signals.add_signal(SIGTERM)?;
    std::thread::Builder::new()
        .name("relaymq-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    reloader.reload();
                    continue;
                }
                notify::stopping();
                log::info!(target: LOG_TARGET, "received signal {sig}, shutting down");
                shutdown();
                break;
            }
        })?;
    Ok(())
}
