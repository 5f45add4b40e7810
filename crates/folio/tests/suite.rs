//! The `folio` binary's integration tests: processes, real Kafka clients, etcd, netns.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

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
