//! Why a metadata operation failed: [`MetaError`], the one error type of every store.
//! (Revisions are `u64` and lease ids `i64`, as `store::Revision` and `store::LeaseId`; this
//! module depends on nothing, so every module may use it.)

/// Why a metadata operation failed.
#[derive(Debug, Clone, thiserror::Error)]
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
    #[error("metadata store unavailable: {why}")]
    Unavailable {
        /// What could not be reached, or why (`etcd at 127.0.0.1:2379`).
        why: String,
        /// The transport's or server's error, when there is one (shared, as `Io`'s).
        #[source]
        source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
    },
    #[error("lease {0} not found (expired or revoked)")]
    LeaseNotFound(i64),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("metadata record at {key} is corrupt: {detail}")]
    Corrupt { key: String, detail: String },
    /// The store's files, thread or server failed while `doing` something.
    #[error("metadata store: {doing}: {source}")]
    Io {
        /// What the store was doing (`opening /data/meta`, `syncing a group of 3 writes`).
        doing: String,
        /// What failed (shared: one failed sync fails every write of its group).
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
    #[error("metadata store is closed")]
    Closed,
}

impl MetaError {
    /// A [`MetaError::Unavailable`] with no error behind it (a timeout, a store closing).
    pub fn unavailable(why: impl Into<String>) -> MetaError {
        MetaError::Unavailable { why: why.into(), source: None }
    }

    /// A [`MetaError::Unavailable`] caused by `source` (the transport's or server's error),
    /// named in the message too (as every error here names its source).
    pub fn unavailable_because(
        why: impl std::fmt::Display,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> MetaError {
        let why = format!("{why}: {source}");
        MetaError::Unavailable { why, source: Some(std::sync::Arc::new(source)) }
    }

    /// A [`MetaError::Io`] failure of `doing`.
    pub fn io(
        doing: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> MetaError {
        MetaError::Io { doing: doing.into(), source: std::sync::Arc::new(source) }
    }
}
