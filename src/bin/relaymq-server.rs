//! `relaymq-server`: the RelayMQ broker daemon. Merges its configuration (flags >
//! `RELAYMQ_SERVER_*` environment > `--config` file > defaults, `relaymq::config`),
//! installs signal handling and runs the server until SIGINT or SIGTERM; SIGHUP reloads
//! what can change live. With `--check` it verifies a stopped data directory instead,
//! prints a report and exits 0 (clean), 1 (problems) or 2 (could not check); with
//! `--print-config` it prints the effective configuration and exits 0.

mod relaymq_server;

use anyhow::{Context, Result};
use relaymq::config::{self, Layered};
use relaymq::server::{self, ServerConfig};
use relaymq_server::args::{self, Action};
use relaymq_server::help::usage;
use relaymq_server::{allocator, notify, signals};
use std::io::Write;
use std::sync::Arc;

/// Exit code of `--check` when problems were found.
const CHECK_EXIT_PROBLEMS: i32 = 1;

/// Exit code of `--check` when the directory could not be checked.
const CHECK_EXIT_CANNOT_CHECK: i32 = 2;

/// Exit code of a command line or configuration that cannot be used.
const EXIT_USAGE: i32 = 2;

fn main() {
    let args = match args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e:#}\n\n{}", usage());
            std::process::exit(EXIT_USAGE);
        }
    };
    let merged = config::load(&args.inputs, std::env::vars_os())
        .and_then(|layered| layered.server_config().map(|c| (layered, c)));
    let (layered, server_config) = match merged {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}\n(relaymq-server --help lists the settings)");
            std::process::exit(EXIT_USAGE);
        }
    };
    match args.action {
        Action::Check => std::process::exit(check(&server_config.data_dir)),
        Action::PrintConfig => {
            // A closed pipe (`--print-config | head`) is not worth a panic.
            let _ = write!(std::io::stdout(), "{}", config::print::render(&layered));
            std::process::exit(0);
        }
        Action::Serve => {}
    }
    if let Err(e) = run(server_config, layered, args.inputs) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// `--check`: prints the report of `data_dir` on stdout (or why it could not be checked
/// on stderr) and returns the exit code.
fn check(data_dir: &std::path::Path) -> i32 {
    match relaymq::storage::check::check_data_dir(data_dir) {
        Ok(report) => {
            println!("{report}");
            if report.is_ok() {
                0
            } else {
                CHECK_EXIT_PROBLEMS
            }
        }
        Err(e) => {
            eprintln!("error: cannot check {}: {e}", data_dir.display());
            CHECK_EXIT_CANNOT_CHECK
        }
    }
}

/// Serves until SIGINT/SIGTERM. The logger lets every level through and
/// `log::set_max_level` is the live level, so a SIGHUP can change it.
fn run(server_config: ServerConfig, layered: Layered, inputs: config::Inputs) -> Result<()> {
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Trace)
        .format_timestamp_millis()
        .init();
    log::set_max_level(layered.settings.log_level);
    log::info!("memory allocator: {}", allocator::describe());
    if let Some(warning) = allocator::missing_settings_warning() {
        log::warn!("{warning}");
    }
    let signals = signals::install().context("cannot install signal handlers")?;
    let handle = server::start(server_config).context("cannot start the server")?;
    let status = format!("serving on {} (native protocol)", handle.local_addr());
    let reloader = signals::Reloader {
        running: layered,
        inputs,
        broker: Arc::clone(handle.broker()),
        status: status.clone(),
    };
    signals::start(signals, reloader, handle.shutdown_trigger())
        .context("cannot install signal handlers")?;
    // `server::start` returns once recovery is done and every listener is bound.
    notify::ready(&status);
    handle.join().context("server failed")?;
    Ok(())
}
