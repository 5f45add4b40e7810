//! Errors of the bookie node: config, cookies, registration, and its storage's.

use folio_meta::MetaError;
use folio_storage::StorageError;

/// Why a bookie (the node: config, cookies, registration, storage) failed to start or run.
#[derive(Debug, thiserror::Error)]
pub enum BookieError {
    #[error("invalid configuration: {0}")]
    Config(#[from] folio_proto::InvalidConfig),
    /// `format` refused: ledgers still name this bookie, so formatting loses their copies.
    #[error(
        "bookie {bookie} is in the ensembles of {ledgers} ledgers (e.g. {examples:?}): formatting \
         it loses their copies here; decommission it first, or pass --decommissioned if its data \
         is gone for good"
    )]
    FormatRefused { bookie: String, ledgers: u64, examples: Vec<u64> },
    /// A request still held the storage this long after the stop.
    #[error(
        "storage still in use {waited:?} after the stop (a request that does not end); the \
         next start is unclean"
    )]
    StorageInUse { waited: std::time::Duration },
    /// Work run on a blocking thread ended without a result.
    #[error("{0}")]
    Blocking(#[from] folio_rt::BlockingFailed),
    #[error("cookie check failed for {dir}: {reason}")]
    Cookie { dir: String, reason: String },
    #[error("metadata store: {0}")]
    Meta(#[from] MetaError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}
