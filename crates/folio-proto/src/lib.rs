//! Folio's shared formats: the ledger entry as a client packages it, and the bookie wire
//! protocol (`wire`) with its cluster-secret handshake (`auth`); and the clock seam every
//! component reads time through (`clock`).
//!
//! **Architecture invariant:** this crate knows nothing about storage, metadata or networking.
//! It owns bytes and their meaning; everything that goes to disk or on the wire and is shared
//! between the bookie and the client is encoded and decoded here, and only here.
//!
//! All multi-byte integers are little-endian.

pub mod auth;
pub mod clock;
pub mod entry;
pub mod error;
pub mod limits;
pub mod status;
pub mod wire;

pub use entry::{ENTRY_HEADER_BYTES, Entry, EntryError, EntryHeader};
pub use error::{InvalidConfig, InvalidRecord, SecretError};
pub use status::Status;

/// A ledger's identity, unique in a cluster and never reused.
pub type LedgerId = u64;

/// An entry's position in its ledger: `0, 1, 2, …`. Negative values are sentinels
/// (`INVALID_ENTRY_ID`, "last entry" in reads), never stored entries.
pub type EntryId = i64;

/// "No entry": an empty ledger's last-add-confirmed, and "read the last entry" in a read.
pub const INVALID_ENTRY_ID: EntryId = -1;
