//! The Folio storage node ("bookie"): journal, entry logs, index and ledger storage.
//!
//! Entry point: [`Storage`]. It accepts entries (durable once acknowledged: the journal's
//! fsync, or the write-cache flush in journal-less mode), answers reads, keeps per-ledger
//! state (master key, fence, explicit LAC, limbo) and recovers all of it after a crash.
//!
//! **Architecture invariant:** the storage modules (`fs`, `journal`, `entry_log`, `index`,
//! caches, `storage`) never talk to the metadata store or the network; `server` and `bookie`
//! do. Storage is plain blocking code with callbacks, so it runs the same under any runtime
//! and under simulation.

pub mod bookie;
pub mod config;
pub mod entry_log;
pub mod error;
mod frame;
pub mod fs;
pub mod gc;
pub mod index;
pub mod integrity;
pub mod journal;
pub mod limits;
mod read_cache;
pub mod server;
pub mod storage;
mod write_cache;

pub use config::{JournalConfig, StorageConfig};
pub use error::{Poison, Result, StorageError};
pub use storage::{AddCallback, Storage};
