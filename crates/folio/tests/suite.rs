//! The `folio` binary's integration tests: processes, real Kafka clients, etcd, netns.
//!
//! One test binary for every file in `tests/` (`autotests = false` in Cargo.toml): each file
//! is a module here, so the shared helpers and the dependencies' generic code are compiled
//! once, not once per file. nextest still runs every test in its own process. A file not
//! listed here would never run; tidy's `every_test_file_is_in_its_suite` checks the list.

mod autorecovery_etcd;
mod bookie_check;
mod cluster_etcd;
mod cluster_lifecycle;
mod common;
mod etcd_access;
mod hostile_etcd;
mod kafka_clients;
mod kafka_security;
mod kill;
mod kill_bookie;
mod kill_meta;
mod log_cli;
mod monitoring;
mod partition_netns;
mod secured_cluster_etcd;
