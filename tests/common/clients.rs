//! External clients the interop tests run (Python's pika, pyrabbit2 and amqpstorm, Debian's
//! amqp-tools, rabbitmqadmin and nagios-plugins-rabbitmq): whether a test that needs one
//! runs, skips itself or fails.
//!
//! Under `scripts/test.sh` (which installs them all and sets [`REQUIRE_CLIENTS_ENV`]) a
//! missing client fails the test, so the README's test command never passes with
//! interop tests skipped. A plain `cargo test` on a machine without them skips those
//! tests, printing one line that names the test, what is missing and how to get it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Set (to anything but empty or `0`) by `scripts/test.sh`: a missing client is a failure.
pub const REQUIRE_CLIENTS_ENV: &str = "RELAYMQ_TEST_REQUIRE_CLIENTS";

/// Set by `scripts/test.sh` to the rabbitmqadmin (v1) script it took out of Debian's
/// `rabbitmq-server` package.
pub const RABBITMQADMIN_ENV: &str = "RELAYMQ_RABBITMQADMIN";

/// Set by `scripts/test.sh` to the directory of the `check_rabbitmq_*` scripts it took out
/// of Debian's `nagios-plugins-rabbitmq` package.
pub const NAGIOS_PLUGINS_DIR_ENV: &str = "RELAYMQ_NAGIOS_PLUGINS_DIR";

/// Where `scripts/test.sh` puts the tools it takes out of Debian packages; used when the
/// environment variables above are not set (a plain `cargo test` after one run of it).
const TEST_TOOLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/test-tools");

/// The checks of nagios-plugins-rabbitmq the tests run; [`nagios_plugins_dir`] has them
/// all.
pub const NAGIOS_CHECKS: [&str; 5] = [
    "check_rabbitmq_aliveness",
    "check_rabbitmq_overview",
    "check_rabbitmq_queue",
    "check_rabbitmq_connections",
    "check_rabbitmq_server",
];

/// Whether a missing external client must fail the test rather than skip it.
pub fn clients_required() -> bool {
    std::env::var_os(REQUIRE_CLIENTS_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether `python3` (the first on `PATH`) imports pika. When it does not: panics under
/// `scripts/test.sh`, else prints that `test` is skipped and returns false.
pub fn pika_available(test: &str) -> bool {
    python_module_available(test, "pika")
}

/// Whether `python3` (the first on `PATH`) imports `module` (`pika`, `pyrabbit2`,
/// `amqpstorm.management`: the packages of `tests/requirements.txt`). When it does not:
/// panics under `scripts/test.sh`, else prints that `test` is skipped and returns false.
pub fn python_module_available(test: &str, module: &str) -> bool {
    let probe = Command::new("python3")
        .arg("-c")
        .arg(format!("import {module}"))
        .stdin(Stdio::null())
        .output();
    let why = match probe {
        Ok(o) if o.status.success() => return true,
        Ok(o) => {
            // The traceback's last line says why (`ModuleNotFoundError: …`).
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            format!(
                "python3 cannot import {module} ({})",
                last.unwrap_or("no error text").trim()
            )
        }
        Err(e) => format!("python3 cannot be run ({e})"),
    };
    let package = module.split('.').next().unwrap_or(module);
    missing(
        test,
        &why,
        package,
        "scripts/test.sh installs it into target/test-venv (tests/requirements.txt) \
         and puts that venv's bin/ first on PATH",
    )
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
        Err(e) => missing(
            test,
            &format!("{tool} cannot be run ({e})"),
            "amqp-tools",
            "scripts/test.sh installs it with apt-get",
        ),
    }
}

/// The rabbitmqadmin (v1) script, when it runs: [`RABBITMQADMIN_ENV`], else
/// `target/test-tools/bin/rabbitmqadmin` if there. Run it as `python3 PATH ARGS…` (it
/// needs only Python's standard library) with `-H 127.0.0.1 -P PORT -u USER -p PASSWORD`.
/// When it is missing or does not run: panics under `scripts/test.sh`, else prints that
/// the calling test (named by its thread) is skipped and returns `None`.
pub fn rabbitmqadmin() -> Option<PathBuf> {
    let path = std::env::var_os(RABBITMQADMIN_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(TEST_TOOLS_DIR).join("bin/rabbitmqadmin"));
    let why = if path.is_file() {
        let probe = Command::new("python3")
            .arg(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output();
        match probe {
            Ok(o) if o.status.success() && o.stdout.starts_with(b"rabbitmqadmin ") => {
                return Some(path)
            }
            Ok(o) => format!(
                "python3 {} --version exited {} ({})",
                path.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("python3 cannot be run ({e})"),
        }
    } else {
        format!("{} is not there", path.display())
    };
    missing(
        &current_test(),
        &why,
        "rabbitmqadmin",
        "scripts/test.sh takes it out of Debian's rabbitmq-server package into \
         target/test-tools/bin/ and sets RELAYMQ_RABBITMQADMIN",
    );
    None
}

/// The directory holding nagios-plugins-rabbitmq's checks ([`NAGIOS_CHECKS`], each run as
/// `DIR/check_rabbitmq_… -H 127.0.0.1 --port PORT -u USER -p PASSWORD …`), when they
/// run: [`NAGIOS_PLUGINS_DIR_ENV`], else `target/test-tools/nagios-plugins-rabbitmq` if
/// there. When a check is missing or its Perl modules do not load: panics under
/// `scripts/test.sh`, else prints that the calling test (named by its thread) is skipped
/// and returns `None`.
pub fn nagios_plugins_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(NAGIOS_PLUGINS_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(TEST_TOOLS_DIR).join("nagios-plugins-rabbitmq"));
    let absent: Vec<&str> = NAGIOS_CHECKS
        .into_iter()
        .filter(|check| !dir.join(check).is_file())
        .collect();
    let why = if absent.is_empty() {
        // Monitoring::Plugin answers --help with the usage and exit code 3 (UNKNOWN); a
        // Perl module that does not load makes it exit 2.
        let check = dir.join(NAGIOS_CHECKS[0]);
        match Command::new(&check)
            .arg("--help")
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) if o.status.code() == Some(3) => return Some(dir),
            Ok(o) => format!(
                "{} --help exited {}, not 3 ({})",
                check.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("{} cannot be run ({e})", check.display()),
        }
    } else {
        format!("{} has no {}", dir.display(), absent.join(", "))
    };
    missing(
        &current_test(),
        &why,
        "nagios-plugins-rabbitmq",
        "scripts/test.sh takes it out of Debian's nagios-plugins-rabbitmq package into \
         target/test-tools/nagios-plugins-rabbitmq/, installs its Perl modules with \
         apt-get and sets RELAYMQ_NAGIOS_PLUGINS_DIR",
    );
    None
}

/// The running test's name: the test harness names each test's thread after it.
fn current_test() -> String {
    let thread = std::thread::current();
    match thread.name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "this test".to_string(),
    }
}

/// Fails or skips `test` because `why`; `what` names the missing client, `how` says how
/// to get it.
fn missing(test: &str, why: &str, what: &str, how: &str) -> bool {
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

/// What a finished child printed.
pub struct Output {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` with no stdin, capturing its output, killing it after `timeout`.
pub fn run_bounded_for(timeout: std::time::Duration, cmd: &mut Command) -> Output {
    use std::io::Read;
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = std::time::Instant::now();
    let (success, status) = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break (status.success(), format!("{what}: {status}"));
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            let text = format!("{what}: killed after {} s", timeout.as_secs());
            break (false, text);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        success,
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// Set to the Chromium binary the browser tests drive (default `/usr/bin/chromium`,
/// Debian's `chromium`).
pub const CHROMIUM_ENV: &str = "RELAYMQ_CHROMIUM";

/// Set to the ChromeDriver binary (default `/usr/bin/chromedriver`, Debian's
/// `chromium-driver`).
pub const CHROMEDRIVER_ENV: &str = "RELAYMQ_CHROMEDRIVER";

/// Whether the browser tests can run: Chromium and ChromeDriver are there and
/// `python3` imports selenium and pika. When not: panics under `scripts/test.sh`, else
/// prints that `test` is skipped and returns false.
pub fn browser_available(test: &str) -> bool {
    for (env, default, package) in [
        (CHROMIUM_ENV, "/usr/bin/chromium", "chromium"),
        (CHROMEDRIVER_ENV, "/usr/bin/chromedriver", "chromium-driver"),
    ] {
        let path = std::env::var_os(env)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(default));
        if !path.is_file() {
            return missing(
                test,
                &format!("{} is not there", path.display()),
                package,
                "scripts/test.sh installs Debian's chromium and chromium-driver with apt-get",
            );
        }
    }
    python_module_available(test, "selenium") && python_module_available(test, "pika")
}
