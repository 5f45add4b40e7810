//! The raw client's limits, in one place.

/// Answers larger than this are refused (a broken or hostile peer).
pub const ANSWER_BYTES_MAX: usize = 256 * 1024 * 1024;
