//! The ledger client's integration tests: ensembles of in-process bookies, faults, stalls.
//!
//! One test binary for every file in `tests/` (`autotests = false` in Cargo.toml): each file
//! is a module here, so the shared helpers and the dependencies' generic code are compiled
//! once, not once per file. nextest still runs every test in its own process. A file not
//! listed here would never run; tidy's `every_test_file_is_in_its_suite` checks the list.

mod check;
mod faults;
mod ledger;
mod placement;
mod stall;
