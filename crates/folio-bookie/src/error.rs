//! Errors of the bookie node: config, cookies, registration, and its storage's.

use folio_meta::MetaError;
use folio_storage::StorageError;

/// Why a bookie (the node: config, cookies, registration, storage) failed to start or run.
#[derive(Debug, thiserror::Error)]
pub enum BookieError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cookie check failed for {dir}: {reason}")]
    Cookie { dir: String, reason: String },
    #[error("metadata store: {0}")]
    Meta(#[from] MetaError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}
