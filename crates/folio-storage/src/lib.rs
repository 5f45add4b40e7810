//! Folio's storage engine: what a bookie keeps on its disks. Journal, entry logs, index,
//! caches and [`Storage`], which ties them together.
//!
//! [`Storage`] accepts entries (durable once acknowledged: the journal's fsync, or the
//! write-cache flush in journal-less mode), answers reads, keeps per-ledger state (master
//! key, fence, explicit LAC, limbo) and recovers all of it after a crash.
//!
//! **Architecture invariant:** this crate has no network, no metadata store and no async
//! runtime: plain blocking code with callbacks, so it runs the same under any runtime and
//! under simulation. Every file it opens goes through [`fs::FileSystem`]; the bookie node
//! (`folio-bookie`: server, lifecycle, GC loop, integrity) is built on it.
//!
//! The public API is small: [`Storage`] and its config, errors and reports; the file layer
//! (`fs`) and index (`index`) for tests and inspection tools; `entry_log` and `journal`
//! for `folio bookie inspect`.

pub mod config;
pub mod entry_log;
mod error;
mod frame;
pub mod fs;
pub mod index;
pub mod journal;
pub mod limits;
mod read_cache;
pub mod storage;
mod write_cache;

pub use config::{Background, JournalConfig, StorageConfig, StorageMode, Wake};
pub use error::{Poison, PoisonReason, Result, StorageError};
pub use storage::{AddCallback, MasterKey, RecoveryReport, Stepper, Storage};
