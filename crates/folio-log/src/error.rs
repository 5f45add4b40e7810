//! Errors of the managed log.

use std::sync::Arc;

use folio_client::LedgerError;
use folio_meta::MetaError;

/// Why a managed-log operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    #[error("log {0} does not exist")]
    NoSuchLog(String),
    #[error("log {0} already exists")]
    Exists(String),
    #[error("log {log} not created: {why}")]
    CreateRefused { log: String, why: String },
    #[error("log {0} is fenced: another owner opened it")]
    Fenced(String),
    #[error("log {0} is being deleted")]
    Deleted(String),
    #[error("log {0} is closed")]
    Closed(String),
    #[error("offset {offset} is out of range: the log holds [{start}, {end})")]
    OffsetOutOfRange { offset: u64, start: u64, end: u64 },
    #[error("no cursor {cursor} on log {log}")]
    NoSuchCursor { log: String, cursor: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A ledger operation failed; the ledger client's error, shared (errors are cloned to
    /// every waiting append).
    #[error("ledger: {0}")]
    Ledger(Arc<LedgerError>),
    /// The log's ledgers cannot be written or recovered (after retries), or a read of them
    /// ended without an answer.
    #[error("ledgers unavailable: {why}")]
    LedgersUnavailable {
        /// What could not be done (with its source's message, when it has one).
        why: String,
        /// What ended it, when something said so (a read task's `JoinError`); shared, as the
        /// error is cloned to every waiter.
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    #[error("metadata: {0}")]
    Meta(Arc<MetaError>),
    #[error("log entry {ledger_id}:{entry_id} is not in the log-entry format")]
    CorruptEntry { ledger_id: u64, entry_id: i64 },
}

impl From<LedgerError> for LogError {
    fn from(e: LedgerError) -> LogError {
        LogError::Ledger(Arc::new(e))
    }
}

impl From<MetaError> for LogError {
    fn from(e: MetaError) -> LogError {
        LogError::Meta(Arc::new(e))
    }
}

/// A managed-log operation's result.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
