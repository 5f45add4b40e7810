//! Folio's managed log: a partition's data as a chain of ledgers.
//!
//! - [`ManagedLog`] (`log/`): ownership by fencing, appends with dense offsets,
//!   rollover, reads by offset and time (`read.rs`), tailing, durable cursors
//!   (`cursors.rs`), retention trimming; the actor that owns the chain (`actor.rs`).
//! - [`LogEnv`] (`env.rs`): what the logs of a process share, and the ledger operations
//!   the log and the trash both do (so neither imports the other's internals).
//! - [`trash`]: the second phase of two-phase deletion, and whole-log deletion.
//! - [`records`]: the log, cursor and trash records and their formats.
//! - [`entry`]: the header each batch carries inside its ledger entry.
//!
//! **Architecture invariant:** this crate talks to bookies only through `folio-client`
//! and to metadata only through `folio-meta`; it knows nothing of Kafka. Every change of
//! a chain is one compare-and-set transaction, and memory follows only a commit.

pub mod config;
pub mod entry;
mod env;
mod epochs;
mod error;
pub mod limits;
mod log;
pub mod records;
pub mod trash;

pub use config::LogConfig;
pub use entry::LogEntry;
pub use env::{LogEnv, OWNER_TAG};
pub use epochs::{EPOCH_MAX, EPOCHS_MAX, EpochStart, Epochs};
pub use error::{LogError, Result};
pub use folio_proto::clock::WallClock;
pub use log::{
    BATCH_BYTES_MAX, COMPACTION_ADDS_IN_FLIGHT_MAX, COMPACTION_CLEAN_END, COMPACTION_OUTPUT,
    Compaction, CompactionReport, LogInfo, LogState, LogStats, LogStatus, ManagedLog,
    PendingAppend, TrimReport, prefetched_bytes,
};
pub use trash::{Trash, TrashConfig, TrashHandle, TrashPass, TrashStatus};
