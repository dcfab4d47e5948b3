//! The heavy integration tests: kill -9 and crash rounds, multi-GiB backlogs, open-file
//! exhaustion, benchmark scenarios and the shell scripts. They load the machine (CPU,
//! memory, disk, descriptors), so they are a binary of their own, away from the parallel
//! `tests/it/` suite; helpers are shared with it from `tests/common/`.

#[path = "../common/mod.rs"]
mod common;

mod backlog;
mod bench_amqp;
mod bench_scenarios;
mod bench_tool;
mod crash;
mod crash_many_queues;
mod delayed_crash;
mod migrate_rabbitmq;
mod open_files;
mod persistent_throughput;
mod quorum_dead_letter_crash;
mod replay_crash;
mod shell_scripts;
mod shovel_crash;
mod store_power_loss;
mod throughput;
