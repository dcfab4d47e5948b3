//! External AMQP clients the interop tests run (Python's pika, Debian's amqp-tools):
//! whether a test that needs one runs, skips itself or fails.
//!
//! Under `scripts/test.sh` (which installs both and sets [`REQUIRE_CLIENTS_ENV`]) a
//! missing client fails the test, so the README's test command never passes with
//! interop tests skipped. A plain `cargo test` on a machine without them skips those
//! tests, printing one line that names the test, what is missing and how to get it.

use std::io::Write;
use std::process::{Command, Stdio};

/// Set (to anything but empty or `0`) by `scripts/test.sh`: a missing client is a failure.
pub const REQUIRE_CLIENTS_ENV: &str = "RELAYMQ_TEST_REQUIRE_CLIENTS";

/// Whether a missing external client must fail the test rather than skip it.
pub fn clients_required() -> bool {
    std::env::var_os(REQUIRE_CLIENTS_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether `python3` (the first on `PATH`) imports pika. When it does not: panics under
/// `scripts/test.sh`, else prints that `test` is skipped and returns false.
pub fn pika_available(test: &str) -> bool {
    let probe = Command::new("python3")
        .args(["-c", "import pika"])
        .stdin(Stdio::null())
        .output();
    let why = match probe {
        Ok(o) if o.status.success() => return true,
        Ok(o) => {
            // The traceback's last line says why (`ModuleNotFoundError: …`).
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            format!(
                "python3 cannot import pika ({})",
                last.unwrap_or("no error text").trim()
            )
        }
        Err(e) => format!("python3 cannot be run ({e})"),
    };
    missing(test, &why, "pika")
}

/// Whether Debian's amqp-tools (`tool` among them) can be run. When not: panics under
/// `scripts/test.sh`, else prints that `test` is skipped and returns false.
pub fn amqp_tools_available(test: &str, tool: &str) -> bool {
    let probe = Command::new(tool)
        .arg("--help")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match probe {
        Ok(_) => true,
        Err(e) => missing(test, &format!("{tool} cannot be run ({e})"), "amqp-tools"),
    }
}

/// Fails or skips `test` because `why`; `what` names the missing client.
fn missing(test: &str, why: &str, what: &str) -> bool {
    let how = "scripts/test.sh installs it (pika into target/test-venv, amqp-tools with apt-get)";
    if clients_required() {
        panic!("{test}: {why}: {what} is required under scripts/test.sh ({REQUIRE_CLIENTS_ENV} is set); {how}");
    }
    // Straight to the process's stderr: the test harness captures `eprintln!` of a test
    // that passes, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why}; {what} is not installed: {how}"
    );
    false
}
