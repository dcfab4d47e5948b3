//! The modules of `relaymq-bench`: flags ([`args`]) and server URIs ([`uri`]), the run
//! itself ([`run`]) over protocol [`session`]s (native: [`native`]; AMQP 0-9-1:
//! [`amqp`], on the library's `relaymq::amqp_client`), the same run against several servers
//! ([`compare`]), the figures it prints ([`report`]), the local server's memory
//! ([`rss`]), the in-process [`null_relay`] baseline, and the `idle`, `recovery`,
//! `http-api` and `delayed` subcommands ([`idle`], [`recovery`], [`http_api`],
//! [`delayed`]).

pub mod amqp;
pub mod args;
pub mod compare;
pub mod delayed;
pub mod http_api;
pub mod idle;
pub mod interrupt;
pub mod native;
pub mod native_wire;
pub mod null_relay;
pub mod queued;
pub mod recovery;
pub mod report;
pub mod rss;
pub mod run;
pub mod session;
pub mod uri;

/// Exit code of a run that failed (connection refused, message lost or duplicated...).
pub const EXIT_RUN_FAILED: i32 = 1;

/// Exit code of a usage error (bad flag, unsupported URI).
pub const EXIT_USAGE: i32 = 2;

/// What can end `relaymq-bench` early.
#[derive(Debug)]
pub enum BenchError {
    /// The command line is wrong or asks for something not supported (exit 2).
    Usage(String),
    /// The run itself failed (exit 1).
    Run(String),
}

impl BenchError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            BenchError::Usage(_) => EXIT_USAGE,
            BenchError::Run(_) => EXIT_RUN_FAILED,
        }
    }

    /// The message printed after `error: `.
    pub fn message(&self) -> &str {
        match self {
            BenchError::Usage(m) | BenchError::Run(m) => m,
        }
    }
}
