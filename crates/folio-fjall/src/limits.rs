//! The limits of the version-file check, in one place.

/// The largest version file read for the check (they hold one line per table file).
pub const VERSION_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
