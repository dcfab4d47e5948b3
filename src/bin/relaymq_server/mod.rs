//! The parts of `relaymq-server`: `args` (the command line), `help` (the help text),
//! `notify` (systemd readiness notifications) and `signals` (SIGINT/SIGTERM shutdown,
//! SIGHUP reload).

pub mod args;
pub mod help;
pub mod notify;
pub mod signals;
