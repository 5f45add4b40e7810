//! The storage engine's integration tests: crashes, disk damage, both storage modes.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

mod common;

mod crash;
mod damage;
mod single_write;
mod stepped;
mod storage;
mod tombstones;
