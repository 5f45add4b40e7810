//! Why a metadata operation failed: [`MetaError`], the one error type of every store.
//! (Revisions are `u64` and lease ids `i64`, as `store::Revision` and `store::LeaseId`; this
//! module depends on nothing, so every module may use it.)

/// Why a metadata operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// A compare-and-set or transaction precondition failed.
    #[error("conflict on {key}: it changed since it was read")]
    Conflict { key: String },
    /// The watch start (or a watcher that fell behind) is older than the history kept.
    #[error(
        "watch from revision {requested} is compacted (history starts after {compacted}); re-list and watch again"
    )]
    Compacted { requested: u64, compacted: u64 },
    /// The backend cannot be reached (etcd down, connection refused, timeout).
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    #[error("lease {0} not found (expired or revoked)")]
    LeaseNotFound(i64),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("metadata record at {key} is corrupt: {detail}")]
    Corrupt { key: String, detail: String },
    #[error("metadata store I/O error: {0}")]
    Io(String),
    #[error("metadata store is closed")]
    Closed,
}
