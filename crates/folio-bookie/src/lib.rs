//! The Folio storage node ("bookie"): the server that answers the bookie protocol, its
//! lifecycle (cookies, registration, read-only on disk trouble), the GC loop and the
//! integrity check, on top of the storage engine (`folio-storage`).
//!
//! **Architecture invariant:** everything that touches disks is in `folio-storage`, which
//! knows no network, metadata store or async runtime; this crate adds those. The storage
//! engine's modules are re-exported under their own names for the node's users.

pub mod auth;
pub mod bookie;
pub mod error;
pub mod gc;
pub mod integrity;
pub mod limits;
pub mod server;

pub use folio_storage::{
    AddCallback, JournalConfig, Poison, PoisonReason, Result, Storage, StorageConfig, StorageError,
    StorageMode, config, entry_log, fs, index, journal, storage,
};
