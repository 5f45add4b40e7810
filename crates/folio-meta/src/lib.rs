//! Folio's metadata store: every shared fact (ledger metadata, bookie liveness, cookies,
//! managed logs, cursors, the trash, topics and groups) lives here, and every lifecycle
//! promise rests on its compare-and-set and transactions.
//!
//! - [`MetadataStore`]: the one trait. Versioned get, conditional put/delete, paged prefix
//!   listing, ordered watches that resume from a revision, atomic multi-key transactions,
//!   leases, and a unique id generator.
//! - [`embedded::EmbeddedStore`]: one process, persistent (fjall), fsync on commit.
//! - `etcd::EtcdStore` (feature `etcd`): the cluster backend on the etcd v3 API.
//! - [`records`] and [`keys`]: typed records and the key layout on top, and
//!   [`records::update`], the compare-and-set update loop.
//!
//! - [`fjall_files`] (the `folio-fjall` crate): the check of fjall's version files before
//!   fjall opens them (the embedded store's and the bookie index's).
//!
//! **Architecture invariant:** the trait and the records know nothing about any backend;
//! only `embedded.rs` (and `folio-fjall`, fjall's file format) knows fjall and only
//! `etcd.rs` knows etcd. This crate depends on no other Folio crate but `folio-fjall`.

/// The clock seam (lives in `folio-proto`, shared with the storage engine).
pub use folio_proto::clock;
pub mod embedded;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "testing")]
pub mod faulty;
pub use folio_fjall as fjall_files;
pub mod keys;
pub mod limits;
pub mod records;
mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use store::*;
