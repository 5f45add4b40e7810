//! The broker's integration tests: a broker on in-process bookies, spoken to over Kafka's wire.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

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
