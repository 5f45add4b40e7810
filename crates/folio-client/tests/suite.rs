//! The ledger client's integration tests: ensembles of in-process bookies, faults, stalls.
//!
//! One binary, a module per file in `tests/` (why: `TEST_FILES_PER_BINARY_MAX` in tidy).

mod check;
mod faults;
mod ledger;
mod placement;
mod stall;
