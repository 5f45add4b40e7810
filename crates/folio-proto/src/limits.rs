//! Limits shared by every component that handles entries. One place, checked at compile time.

/// The largest encoded entry (header plus payload) a bookie accepts.
/// Matches BookKeeper's 5 MiB frame limit minus room for the request header.
pub const ENTRY_BYTES_MAX: usize = 5 * 1024 * 1024 - 512;

/// A master key is the fixed-size secret that binds a ledger to its writer.
pub const MASTER_KEY_BYTES: usize = 20;

const _: () = assert!(ENTRY_BYTES_MAX <= u32::MAX as usize);
