//! The broker's integration tests: a broker on in-process bookies, spoken to over Kafka's wire.
//!
//! One test binary for every file in `tests/` (`autotests = false` in Cargo.toml): each file
//! is a module here, so the shared helpers and the dependencies' generic code are compiled
//! once, not once per file. nextest still runs every test in its own process. A file not
//! listed here would never run; tidy's `every_test_file_is_in_its_suite` checks the list.

mod acls;
mod admin_apis;
mod audit;
mod common;
mod compaction;
mod deletion;
mod fetch_sessions;
mod hostile;
mod idempotence;
mod protocol;
mod quotas;
mod security;
mod share_groups;
mod transactions;
