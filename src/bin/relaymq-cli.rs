//! `relaymq-cli`: declare, bind, publish, consume, get, list and inspect from a shell.
//!
//! Parses the command line, runs one command against the server with the blocking client
//! ([`relaymq::client`]), prints the result. Errors go to stderr as
//! `error: NAME (CODE): message`; the exit code says what kind of failure it was (see
//! `--help`).

mod relaymq_cli;

use relaymq_cli::args::{self, Invocation};
use relaymq_cli::{commands, CliError};

fn main() {
    // Errors only by default: what the client library warns about (a blocked connection)
    // the CLI says itself, in its own words (`note: …`); RUST_LOG=warn shows them too.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("error")).init();
    let code = match run() {
        Ok(()) => 0,
        // The reader of our output went away (`| head`): it has what it wanted.
        Err(e) if e.is_broken_pipe() => 0,
        Err(e) => {
            eprintln!("error: {}", e.message());
            if matches!(e, CliError::Usage(_)) {
                eprintln!("usage: relaymq-cli [GLOBAL OPTIONS] COMMAND ... (try --help)");
            }
            e.exit_code()
        }
    };
    std::process::exit(code);
}

use std::io::Write;

fn run() -> Result<(), CliError> {
    match args::parse(std::env::args_os().skip(1), |k| std::env::var(k).ok())? {
        // A closed pipe (`--help | head -1`) is not an error worth a panic.
        Invocation::Help => {
            let _ = writeln!(std::io::stdout(), "{}", args::USAGE);
            Ok(())
        }
        Invocation::Version => {
            let _ = writeln!(
                std::io::stdout(),
                "relaymq-cli {}",
                env!("CARGO_PKG_VERSION")
            );
            Ok(())
        }
        Invocation::Run(global, command) => commands::run(&global, command),
    }
}
