//! Why the integrity check or autorecovery failed a step: the layer below's error kept as
//! its source, with what was being done ([`During::during`]).

use folio_bookie::StorageError;
use folio_client::LedgerError;
use folio_meta::MetaError;

/// Why a step of the integrity check or of autorecovery failed.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The metadata store failed.
    #[error("metadata: {0}")]
    Meta(#[from] MetaError),
    /// Reading, recovering or copying through the ledger client failed.
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    /// This bookie's own storage failed (the integrity check).
    #[error("local storage: {0}")]
    Storage(#[from] StorageError),
    /// A step failed; `what` says which.
    #[error("{what}: {source}")]
    During { what: String, source: Box<RepairError> },
    /// A decommission names a bookie the cluster does not know.
    #[error("no bookie {0} in this cluster (no cookie, not registered)")]
    UnknownBookie(String),
    /// A decommission cannot finish while ledgers still name the bookie.
    #[error("{ledgers} ledgers still name bookie {bookie}: not drained yet")]
    NotDrained { bookie: String, ledgers: u64 },
    /// A copy, listed again after it was written, lacks entries; the target is marked for
    /// a refill.
    #[error(
        "ledger {ledger}: {target} lacks {missing} entries of fragment {fragment} after the \
         copy; marked for a refill"
    )]
    CopyIncomplete { ledger: u64, target: String, fragment: i64, missing: usize },
    /// The lease holding the claim was lost while copying: copying stopped, no swap.
    #[error("ledger {ledger}: lease lost while copying to {target}; stopped")]
    LeaseLost { ledger: u64, target: String },
    /// A copy task ended without a result (it panicked, its runtime stopped, or the storage
    /// dropped its add unanswered).
    #[error("copy task failed: {what}")]
    Task {
        /// Which task and, when it has one, its source's message (`copying an entry: task
        /// 12 panicked`).
        what: String,
        /// Why it ended, when something said so (a panic's or cancellation's `JoinError`).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// Names the step a result belongs to, keeping its error as the source.
pub trait During<T> {
    /// `Err(e)` becomes `RepairError::During { what, source: e }`.
    fn during(self, what: impl FnOnce() -> String) -> Result<T, RepairError>;
}

impl<T, E: Into<RepairError>> During<T> for Result<T, E> {
    fn during(self, what: impl FnOnce() -> String) -> Result<T, RepairError> {
        self.map_err(|e| RepairError::During { what: what(), source: Box::new(e.into()) })
    }
}
