//! The management HTTP API's real clients are there for its tests: rabbitmqadmin v1 and
//! nagios-plugins-rabbitmq's checks (taken out of Debian's packages by `scripts/test.sh`),
//! pyrabbit2 and amqpstorm (in its virtual environment). Each runs, without a server;
//! under `scripts/test.sh` a missing one fails here, whatever the HTTP API tests do.

use crate::common::clients::{self, NAGIOS_CHECKS};
use std::process::{Command, Stdio};

#[test]
fn rabbitmqadmin_v1_runs_with_python3() {
    let Some(rabbitmqadmin) = clients::rabbitmqadmin() else {
        return;
    };
    let out = Command::new("python3")
        .arg(&rabbitmqadmin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && version.starts_with("rabbitmqadmin 3."),
        "{}: {} {version}",
        rabbitmqadmin.display(),
        out.status
    );
}

#[test]
fn every_nagios_check_loads_its_perl_modules() {
    let Some(dir) = clients::nagios_plugins_dir() else {
        return;
    };
    for check in NAGIOS_CHECKS {
        let out = Command::new(dir.join(check))
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .expect("the check runs");
        let help = String::from_utf8_lossy(&out.stdout);
        // Monitoring::Plugin prints the usage and exits 3 (UNKNOWN) for --help.
        assert!(
            out.status.code() == Some(3) && help.contains("Usage:") && help.contains("--port"),
            "{check} --help: {}\n{help}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn pyrabbit2_and_amqpstorm_management_import() {
    for module in ["pyrabbit2.api", "amqpstorm.management"] {
        if !clients::python_module_available("management_clients python", module) {
            return;
        }
    }
}
