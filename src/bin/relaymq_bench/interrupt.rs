//! Ctrl-C (SIGINT) and SIGTERM: the first one asks the run to stop early — producers stop,
//! the consumers stop without waiting for the drain, the queues and exchanges are deleted
//! and what was measured so far is printed, the run failing (exit 1) with the reason; a
//! second one ends the process at once (exit 130).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Exit code after a second interruption (the shell's 128 + SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Set by the first SIGINT or SIGTERM.
static INTERRUPTED: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

/// Installs the handlers (once per process).
///
/// # Errors
/// The handlers could not be registered (reported, the run goes on without them).
pub fn install() -> std::io::Result<()> {
    let flag = Arc::clone(INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false))));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Checked before the flag is set: only a second signal ends the process.
        signal_hook::flag::register_conditional_shutdown(
            signal,
            EXIT_INTERRUPTED,
            Arc::clone(&flag),
        )?;
        signal_hook::flag::register(signal, Arc::clone(&flag))?;
    }
    Ok(())
}

/// Whether the run was interrupted.
pub fn interrupted() -> bool {
    INTERRUPTED.get().is_some_and(|f| f.load(Ordering::Relaxed))
}
