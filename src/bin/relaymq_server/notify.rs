//! systemd readiness notifications (`Type=notify`, sd_notify(3)) through the `sd-notify`
//! crate: `READY=1` once recovery is done and every listener is bound, `RELOADING=1` …
//! `READY=1` around a SIGHUP reload, `STOPPING=1` when shutdown begins, with `STATUS=`
//! lines. Without `NOTIFY_SOCKET` (not started by systemd) each call does
//! nothing. A failed send is logged, never fatal.

use sd_notify::NotifyState;

/// Sends `states`, logging (at debug) a failure.
fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        log::debug!("sd_notify failed: {e}");
    }
}

/// `READY=1` with a `STATUS=` line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `RELOADING=1` with `MONOTONIC_USEC=` (systemd's `Type=notify-reload` wants it; plain
/// `Type=notify` ignores it) and a `STATUS=` line.
pub fn reloading() {
    let status = NotifyState::Status("reloading the configuration");
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now, status]),
        Err(_) => send(&[NotifyState::Reloading, status]),
    }
}

/// `STOPPING=1` with a `STATUS=` line.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("shutting down")]);
}
