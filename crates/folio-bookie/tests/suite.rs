//! The bookie's integration tests: its server over TCP, authentication and GC.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

// The storage tests' helpers, shared rather than copied (the bookie re-exports the engine):
// the suite runs in `FOLIO_STORAGE_MODE`'s mode.
#[path = "../../folio-storage/tests/common/mod.rs"]
mod common;
#[path = "../../folio-testkit/src/poll.rs"]
mod poll;

mod auth;
mod gc;
mod server;
