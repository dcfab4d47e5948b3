//! Runs `scripts/definitions-smoke.sh` (export → wipe → import round trip, issue 8 part 7)
//! against the binaries cargo just built, so the README's test command covers it.

use std::process::Command;

#[test]
fn definitions_round_trip_script_passes() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/definitions-smoke.sh"))
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
    assert!(
        out.status.success(),
        "definitions-smoke.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(", 0 failed"), "{stdout}");
}
