//! The repair crate's integration tests: autorecovery and the integrity check.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

mod autorecovery;
mod integrity;
