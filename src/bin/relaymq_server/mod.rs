//! The parts of `relaymq-server`: `allocator` (jemalloc, returning freed memory to the
//! operating system), `args` (the command line), `help` (the help text),
//! `notify` (systemd readiness notifications) and `signals` (SIGINT/SIGTERM shutdown,
//! SIGHUP reload).

pub mod allocator;
pub mod args;
pub mod help;
pub mod notify;
pub mod signals;
