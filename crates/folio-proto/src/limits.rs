//! Limits shared by every component that handles entries. One place, checked at compile time.

/// The largest encoded entry (header plus payload) a bookie accepts.
/// Matches BookKeeper's 5 MiB frame limit minus room for the request header.
pub const ENTRY_BYTES_MAX: usize = 5 * 1024 * 1024 - 512;

/// A master key is the fixed-size secret that binds a ledger to its writer.
pub const MASTER_KEY_BYTES: usize = 20;

const _: () = assert!(ENTRY_BYTES_MAX <= u32::MAX as usize);

/// The shortest cluster secret accepted: 16 bytes (128 bits of a random secret).
pub const CLUSTER_SECRET_BYTES_MIN: usize = 16;

/// The longest cluster secret accepted.
pub const CLUSTER_SECRET_BYTES_MAX: usize = 4096;

/// The most ledgers a LIST_LEDGERS answer carries (a larger `limit` is cut to it).
pub const LEDGERS_PAGE_MAX: usize = 10_000;

/// The largest frame body: an ADD of the largest entry, plus headers.
pub const FRAME_BYTES_MAX: usize = ENTRY_BYTES_MAX + 256;

/// The most entry ranges a LIST_ENTRIES answer carries: what fits a frame after its
/// 12-byte header and the answer's own 12 bytes, at 12 bytes a range.
pub const ENTRY_RANGES_MAX: usize = (FRAME_BYTES_MAX - 24) / 12;
