//! Every limit of the repair crate (the integrity check and autorecovery), in one place.

/// Entry copies in flight at once: within one ledger for the integrity check, per worker
/// for autorecovery.
pub const COPIES_IN_FLIGHT_MAX: usize = 64;

/// Fragments one under-replication mark lists at most (further fragments of a bookie
/// already named are found again from the metadata by the worker).
pub const MARK_FRAGMENTS_MAX: usize = 1024;

/// Marks a worker lists per round at most (it works through them one ledger at a time).
pub const MARKS_PER_ROUND_MAX: usize = 1000;
