//! Errors of the managed log.

use folio_client::LedgerError;
use folio_meta::MetaError;

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
    #[error("ledger: {0}")]
    Ledger(String),
    #[error("metadata: {0}")]
    Meta(String),
    #[error("log entry {ledger_id}:{entry_id} is not in the log-entry format")]
    CorruptEntry { ledger_id: u64, entry_id: i64 },
}

impl From<LedgerError> for LogError {
    fn from(e: LedgerError) -> LogError {
        LogError::Ledger(e.to_string())
    }
}

impl From<MetaError> for LogError {
    fn from(e: MetaError) -> LogError {
        LogError::Meta(e.to_string())
    }
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;
