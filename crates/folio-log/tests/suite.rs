//! The managed log's integration tests: ledgers chained into logs, trims, the trash, crashes.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

mod common;

mod compaction;
mod crash;
mod log;
mod model;
mod reads;
mod trash;
