//! `relaymq-bench`: a measuring instrument in the spirit of RabbitMQ's PerfTest.
//!
//! Producers and consumers on their own connections and threads (blocking client, no async
//! runtime) move messages through `relaymq-bench.q.N` queues; bodies carry their send time,
//! so consumers measure end-to-end latency. Prints throughput and latency every second and
//! at the end (or one JSON object with `--json`), plus the local server's RSS. A lost or
//! duplicated message fails the run (exit 1); a usage error exits 2. `--uri` is
//! `relaymq://` (native protocol) or `amqp://` (AMQP 0-9-1); `compare URI URI…` runs the
//! same workload against each and prints one table.

mod relaymq_bench;

use relaymq_bench::args::{self, Invocation, Options, Target};
use relaymq_bench::{
    compare, delayed, http_api, idle, interrupt, null_relay, recovery, run, BenchError,
};
use std::io::Write;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    if let Err(e) = interrupt::install() {
        eprintln!("warning: Ctrl-C will not clean up: {e}");
    }
    let mut argv = std::env::args_os().skip(1).peekable();
    match argv.peek().and_then(|a| a.to_str()) {
        Some(idle::SUBCOMMAND) => std::process::exit(idle::main(argv.skip(1))),
        Some(recovery::SUBCOMMAND) => std::process::exit(recovery::main(argv.skip(1))),
        Some(http_api::SUBCOMMAND) => std::process::exit(http_api::main(argv.skip(1))),
        Some(delayed::SUBCOMMAND) => std::process::exit(delayed::main(argv.skip(1))),
        _ => {}
    }
    let mut opts = match args::parse(argv) {
        Ok(Invocation::Run(opts)) => *opts,
        Ok(Invocation::Compare(opts, targets)) => run_compare(&opts, &targets),
        Ok(Invocation::Help) => {
            // A closed pipe (`--help | head -1`) is not worth a panic.
            let _ = write!(std::io::stdout(), "{}", args::USAGE);
            std::process::exit(0);
        }
        Ok(Invocation::Version) => {
            let _ = writeln!(
                std::io::stdout(),
                "relaymq-bench {}",
                env!("CARGO_PKG_VERSION")
            );
            std::process::exit(0);
        }
        Err(e) => exit_with(&e),
    };
    let json = opts.json;
    let relay = null_relay::attach(&mut opts).unwrap_or_else(|e| exit_with(&e));
    let (summary, failure) = match run::run(opts) {
        Ok(s) => (Some(s), None),
        Err((why, s)) => (s, Some(why)),
    };
    if let Some(s) = &summary {
        let out = if json {
            let mut v = s.to_json();
            null_relay::mark_json(relay.as_ref(), &mut v);
            v.to_string()
        } else {
            null_relay::mark_text(relay.as_ref(), s.to_text())
        };
        let _ = writeln!(std::io::stdout(), "{out}");
    }
    match failure {
        None => std::process::exit(0),
        Some(why) => exit_with(&BenchError::Run(format!("the run failed: {why}"))),
    }
}

/// `compare`: every run, then the table or JSON; exit 1 when a run failed.
fn run_compare(opts: &Options, targets: &[Target]) -> ! {
    let outcomes = compare::run_all(opts, targets);
    let out = if opts.json {
        compare::to_json(&outcomes).to_string()
    } else {
        compare::to_table(opts, &outcomes)
    };
    let _ = writeln!(std::io::stdout(), "{out}");
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.error.is_some())
        .map(|o| o.uri.as_str())
        .collect();
    if failed.is_empty() {
        std::process::exit(0);
    }
    exit_with(&BenchError::Run(format!(
        "{} of {} runs failed: {}",
        failed.len(),
        outcomes.len(),
        failed.join(", ")
    )))
}

fn exit_with(e: &BenchError) -> ! {
    eprintln!("error: {}", e.message());
    if matches!(e, BenchError::Usage(_)) {
        eprintln!("usage: relaymq-bench [OPTIONS] (try --help)");
    }
    std::process::exit(e.exit_code())
}
