//! Every limit of the managed log, in one place, with their relations checked at compile
//! time.

use folio_meta::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};
use folio_proto::ENTRY_HEADER_BYTES;
use folio_proto::limits::ENTRY_BYTES_MAX;

use crate::entry::LOG_ENTRY_HEADER_BYTES;

/// The largest batch an append takes.
pub const BATCH_BYTES_MAX: usize = ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES - LOG_ENTRY_HEADER_BYTES;

/// The longest log name.
pub const LOG_NAME_BYTES_MAX: usize = 512;

/// Attempts to open a log while other owners race for it.
pub const OPEN_ATTEMPTS_MAX: usize = 10;

/// Entry reads one read stream keeps in flight, at most (whatever their bytes).
pub const STREAM_ENTRIES_MAX: usize = 64;

/// Read streams kept per log (one per reader position; the least recently used goes).
pub const STREAMS_MAX: usize = 8;

/// A read stream's window, at most, whatever `read_window_bytes` and the read ask.
pub const STREAM_WINDOW_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes read ahead by every read stream of the process together, beyond what the reads
/// in progress asked for; past it streams read only what is asked.
pub const PREFETCH_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Entries' base offsets the offset index keeps densely per log (8 bytes each: 2 MiB).
/// Beyond it the oldest ledgers keep every 16th; a read there searches entry headers.
pub const INDEX_ENTRIES_MAX: usize = 256 * 1024;

/// Bytes of one ledger's persisted offset index (about 32 Ki entries at 2 bytes each;
/// beyond that every 2nd, 4th, ... entry is kept, and a read there searches that gap).
pub const OFFSET_INDEX_RECORD_BYTES_MAX: usize = 64 * 1024;

/// Closed-ledger readers kept open per log.
pub const READERS_MAX: usize = 64;

/// Strings in records are cut to this many bytes (error texts can be long).
pub const TEXT_BYTES_MAX: usize = 1000;

// A batch plus both headers is one ledger entry.
const _: () =
    assert!(BATCH_BYTES_MAX + LOG_ENTRY_HEADER_BYTES + ENTRY_HEADER_BYTES <= ENTRY_BYTES_MAX);
// A log's name goes into its metadata keys (the log record, its cursors) with room for
// the root and a cursor name.
const _: () = assert!(2 * LOG_NAME_BYTES_MAX < KEY_BYTES_MAX);
const _: () = assert!(STREAM_ENTRIES_MAX > 0 && STREAMS_MAX > 0 && READERS_MAX > 0);
const _: () = assert!(OPEN_ATTEMPTS_MAX > 0 && STREAM_WINDOW_BYTES_MAX <= PREFETCH_BYTES_MAX);
const _: () = assert!(INDEX_ENTRIES_MAX >= 1024);
// An offset index record is one metadata value.
const _: () = assert!(OFFSET_INDEX_RECORD_BYTES_MAX <= VALUE_BYTES_MAX);

/// Adds one compaction keeps in flight to its output ledger.
pub const COMPACTION_ADDS_IN_FLIGHT_MAX: usize = 256;

/// Epochs a log's history keeps, at most (12 bytes each in the log record).
pub const EPOCHS_MAX: usize = 128;

/// The highest epoch: Kafka's leader epochs are `i32`.
pub const EPOCH_MAX: u32 = i32::MAX as u32;
