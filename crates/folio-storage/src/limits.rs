//! Every limit of the storage engine, in one place, with their relations checked at compile
//! time. (Entry sizes are `folio_proto::limits`; the write cache, journal queue and entry
//! log sizes are settings in `config`, validated at open.)

use folio_proto::limits::ENTRY_BYTES_MAX;

/// The largest record body: an entry of the largest size.
pub const RECORD_BODY_BYTES_MAX: usize = ENTRY_BYTES_MAX;

/// The largest entry-log frame body: an entry of the largest size.
pub const FRAME_BODY_BYTES_MAX: usize = ENTRY_BYTES_MAX;

/// Bytes buffered before the writer hands them to the file and starts their writeback.
pub const WRITE_BUFFER_BYTES: usize = 256 * 1024;

/// Replay reads journal files in chunks of at least this size.
pub const READ_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// How far past the end of the last file's records replay looks for proof of damage (a
/// SyncMark beyond it). Records after a damaged spot resume within one record of its end,
/// so only damage longer than this goes unnoticed; it bounds the start-up read.
pub const DAMAGE_SCAN_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Tombstone ranges a bookie keeps at most (`index::tombstones`: 16 bytes of key and value
/// each on disk; a run of consecutive deleted ledger ids is one range).
pub const TOMBSTONE_RANGES_MAX: usize = 100_000;

/// Index entries read per page when listing a ledger's locations or every ledger.
pub const INDEX_PAGE: usize = 10_000;

// A replay chunk holds the largest record (replay reads more when one needs it, but need
// not), and a damage scan covers at least one chunk.
const _: () = assert!(READ_CHUNK_BYTES > RECORD_BODY_BYTES_MAX + 64);
const _: () = assert!(DAMAGE_SCAN_BYTES_MAX >= READ_CHUNK_BYTES as u64);
// Frame lengths are u32 on disk.
const _: () = assert!(FRAME_BODY_BYTES_MAX < u32::MAX as usize);
const _: () = assert!(WRITE_BUFFER_BYTES > 0 && INDEX_PAGE > 0);

/// ... but never over more than this.
pub const FLUSH_PACE_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Pacing stops once the active half is this full: writers must not wait for a flush
/// that is sleeping.
pub const FLUSH_PACE_ACTIVE_FRACTION_MAX: f64 = 0.75;
