//! Runs `scripts/config-smoke.sh` (configuration precedence and SIGHUP reload from a shell,
//! issue 8 part 7) against the binaries cargo just built, so the README's test command
//! covers it.

use std::process::Command;

#[test]
fn config_smoke_script_passes_against_the_real_binaries() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/config-smoke.sh"))
        .env("RELAYMQ_BIN_SERVER", env!("CARGO_BIN_EXE_relaymq-server"))
        .env("RELAYMQ_BIN_CLI", env!("CARGO_BIN_EXE_relaymq-cli"))
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "config-smoke.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(", 0 failed"), "{stdout}");
}
