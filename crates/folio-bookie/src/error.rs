//! Operating errors of the storage engine. Programmer errors panic instead.

use folio_meta::MetaError;
use folio_proto::{EntryError, EntryId, LedgerId, Status};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("no such ledger {0}")]
    NoLedger(LedgerId),
    #[error("no such entry {0}/{1}")]
    NoEntry(LedgerId, EntryId),
    /// The ledger is in limbo: this bookie may have lost data for it and cannot say "no".
    #[error("ledger {0} is in limbo: entry {1} is unknown here")]
    Unknown(LedgerId, EntryId),
    #[error("ledger {0} is fenced")]
    Fenced(LedgerId),
    #[error("master key mismatch for ledger {0}")]
    Unauthorized(LedgerId),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("bad entry: {0}")]
    BadEntry(#[from] EntryError),
    #[error("write cache full for {waited_ms} ms: storage is overloaded")]
    Overloaded { waited_ms: u64 },
    #[error("I/O error in {context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("corruption in {context}: {detail}")]
    Corruption { context: String, detail: String },
    /// An earlier write or fsync failed; data may be lost. Reopen (which recovers from the
    /// journal) to continue.
    #[error("storage is poisoned by an earlier I/O failure ({0}); restart the bookie")]
    Poisoned(String),
    #[error("storage is shut down")]
    ShutDown,
    #[error("index store: {0}")]
    Index(String),
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// The first failed write or fsync, shared by the journal and the rest of the storage: once
/// set it stays set, every later call fails, and nothing is retried (the kernel may have
/// dropped the data; a second fsync would report success over the hole). Observers (the
/// bookie's registration) learn of it at once through [`Poison::subscribe`].
#[derive(Debug, Clone)]
pub struct Poison(std::sync::Arc<tokio::sync::watch::Sender<Option<String>>>);

impl Default for Poison {
    fn default() -> Poison {
        Poison(std::sync::Arc::new(tokio::sync::watch::Sender::new(None)))
    }
}

impl Poison {
    /// Sets the reason unless one is set already; returns whether this call set it.
    pub fn set(&self, reason: String) -> bool {
        self.0.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            *r = Some(reason);
            true
        })
    }

    pub fn reason(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// A receiver that sees the reason once it is set.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.0.subscribe()
    }
}

impl StorageError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> StorageError {
        StorageError::Io { context: context.into(), source }
    }

    pub fn corruption(context: impl Into<String>, detail: impl Into<String>) -> StorageError {
        StorageError::Corruption { context: context.into(), detail: detail.into() }
    }

    /// The status a bookie answers with for this error.
    pub fn status(&self) -> Status {
        match self {
            StorageError::NoLedger(_) => Status::NoLedger,
            StorageError::NoEntry(..) => Status::NoEntry,
            StorageError::Unknown(..) => Status::Unknown,
            StorageError::Fenced(_) => Status::Fenced,
            StorageError::Unauthorized(_) => Status::Unauthorized,
            StorageError::BadRequest(_) | StorageError::BadEntry(_) => Status::BadRequest,
            StorageError::Overloaded { .. } => Status::TooManyRequests,
            StorageError::Io { .. }
            | StorageError::Corruption { .. }
            | StorageError::Poisoned(_)
            | StorageError::ShutDown
            | StorageError::Index(_) => Status::Io,
        }
    }
}

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
