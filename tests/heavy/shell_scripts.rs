//! Runs the shell tests of `scripts/` against the binaries cargo just built, so the
//! README's test command covers what an operator does from a shell: `smoke.sh` (the CLI
//! end to end), `install-smoke.sh` (install into a prefix, the systemd unit checked with
//! `systemd-analyze verify` where it exists, the sample config against `--help`),
//! `config-smoke.sh` (configuration precedence, SIGHUP reload), `metrics-smoke.sh` (a
//! scrape) and `definitions-smoke.sh` (export → wipe → import). Each script prints
//! `N passed, M failed` and exits non-zero on a failure; none needs root or systemd.

use std::process::Command;

/// Runs `scripts/NAME` with the built binaries and no client settings from the caller's
/// environment; panics with its output unless it passed every check. Its stdout is
/// printed (shown with `--nocapture`: what was measured or skipped here).
fn run_script(name: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/{name}"))
        .env("RELAYMQ_BIN_SERVER", env!("CARGO_BIN_EXE_relaymq-server"))
        .env("RELAYMQ_BIN_CLI", env!("CARGO_BIN_EXE_relaymq-cli"))
        .env_remove("RELAYMQ_ADDR")
        .env_remove("RELAYMQ_VHOST")
        .env_remove("RELAYMQ_USER")
        .env_remove("RELAYMQ_PASSWORD")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(", 0 failed"), "{stdout}");
}

#[test]
fn smoke_script_passes_against_the_real_binaries() {
    run_script("smoke.sh");
}

#[test]
fn install_script_installs_into_a_prefix_and_the_unit_verifies() {
    run_script("install-smoke.sh");
}

#[test]
fn config_script_shows_precedence_and_sighup_reload() {
    run_script("config-smoke.sh");
}

#[test]
fn metrics_script_scrapes_the_endpoint() {
    run_script("metrics-smoke.sh");
}

#[test]
fn definitions_script_round_trips_export_wipe_import() {
    run_script("definitions-smoke.sh");
}
