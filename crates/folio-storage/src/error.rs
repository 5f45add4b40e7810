//! Operating errors of the storage engine, and the poison that stops it after a failed
//! write or fsync. Programmer errors panic instead.

use folio_proto::{EntryError, EntryId, LedgerId, Status};

/// Why a storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("no such ledger {0}")]
    NoLedger(LedgerId),
    /// The ledger was deleted here: its id is tombstoned and never created again.
    #[error("ledger {0} was deleted on this bookie (tombstoned)")]
    Deleted(LedgerId),
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
    /// The storage's configuration is wrong.
    #[error("invalid storage configuration: {0}")]
    Config(#[from] folio_proto::InvalidConfig),
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
    Poisoned(PoisonReason),
    #[error("storage is shut down")]
    ShutDown,
    /// The index's key-value store (fjall) failed.
    #[error("index store: {doing}: {source}")]
    Index {
        /// What the index was doing (`opening /data/index`, `committing a batch`).
        doing: String,
        #[source]
        source: fjall::Error,
    },
    /// The index's fjall files failed their check before opening.
    #[error("index store: {0}")]
    IndexFiles(#[from] folio_fjall::FjallFilesError),
}

/// A storage operation's result.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Why a storage stopped taking writes: its first failed write or fsync.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoisonReason {
    #[error("journal file {file_id:016x}: write failed: {error}")]
    JournalWrite { file_id: u64, error: String },
    #[error("journal file {file_id:016x}: fdatasync failed: {error}")]
    JournalSync { file_id: u64, error: String },
    /// The journal's sync thread is gone (it panicked): nothing more becomes durable.
    #[error("the journal's sync thread stopped")]
    SyncerStopped,
    #[error("flush failed: {0}")]
    Flush(String),
    #[error("compaction of entry log {log_id} failed: {error}")]
    Compaction { log_id: u64, error: String },
}

/// A function told of the poison once it is set.
type PoisonWatcher = Box<dyn Fn(&PoisonReason) + Send + Sync>;

/// The first failed write or fsync, shared by the journal and the rest of the storage: once
/// set it stays set, every later call fails, and nothing is retried (the kernel may have
/// dropped the data; a second fsync would report success over the hole). Observers (the
/// bookie's registration) learn of it at once through [`Poison::on_set`].
#[derive(Clone, Default)]
pub struct Poison(std::sync::Arc<PoisonState>);

#[derive(Default)]
struct PoisonState {
    reason: std::sync::Mutex<Option<PoisonReason>>,
    watchers: std::sync::Mutex<Vec<PoisonWatcher>>,
}

impl std::fmt::Debug for Poison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Poison").field(&self.reason()).finish()
    }
}

impl Poison {
    /// Sets the reason unless one is set already; returns whether this call set it. The
    /// watchers run on this thread, after the reason is visible.
    pub fn set(&self, reason: PoisonReason) -> bool {
        {
            let mut r = self.0.reason.lock().expect("poison lock");
            if r.is_some() {
                return false;
            }
            *r = Some(reason.clone());
        }
        let watchers = std::mem::take(&mut *self.0.watchers.lock().expect("poison watchers lock"));
        for w in &watchers {
            w(&reason);
        }
        true
    }

    /// The reason, once set.
    pub fn reason(&self) -> Option<PoisonReason> {
        self.0.reason.lock().expect("poison lock").clone()
    }

    /// Runs `f` once the poison is set (at once if it is already): exactly once.
    pub fn on_set(&self, f: impl Fn(&PoisonReason) + Send + Sync + 'static) {
        let mut watchers = self.0.watchers.lock().expect("poison watchers lock");
        let set = self.0.reason.lock().expect("poison lock").clone();
        match set {
            Some(r) => {
                drop(watchers);
                f(&r);
            }
            None => watchers.push(Box::new(f)),
        }
    }
}

impl StorageError {
    /// An I/O error, with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> StorageError {
        StorageError::Io { context: context.into(), source }
    }

    /// Bytes on disk that do not decode, with where and what.
    pub fn corruption(context: impl Into<String>, detail: impl Into<String>) -> StorageError {
        StorageError::Corruption { context: context.into(), detail: detail.into() }
    }

    /// The status a bookie answers with for this error.
    pub fn status(&self) -> Status {
        match self {
            StorageError::NoLedger(_) | StorageError::Deleted(_) => Status::NoLedger,
            StorageError::NoEntry(..) => Status::NoEntry,
            StorageError::Unknown(..) => Status::Unknown,
            StorageError::Fenced(_) => Status::Fenced,
            StorageError::Unauthorized(_) => Status::Unauthorized,
            StorageError::BadRequest(_) | StorageError::BadEntry(_) | StorageError::Config(_) => {
                Status::BadRequest
            }
            StorageError::Overloaded { .. } => Status::TooManyRequests,
            StorageError::Io { .. }
            | StorageError::Corruption { .. }
            | StorageError::Poisoned(_)
            | StorageError::ShutDown
            | StorageError::Index { .. }
            | StorageError::IndexFiles(_) => Status::Io,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_first_reason_stays_and_every_watcher_hears_of_it_once() {
        let p = Poison::default();
        let heard = Arc::new(AtomicUsize::new(0));
        let h = heard.clone();
        p.on_set(move |r| {
            assert_eq!(*r, PoisonReason::Flush("disk full".into()));
            h.fetch_add(1, Ordering::SeqCst);
        });
        assert!(p.set(PoisonReason::Flush("disk full".into())));
        assert!(!p.set(PoisonReason::Flush("later".into())), "the first reason stays");
        assert_eq!(p.reason(), Some(PoisonReason::Flush("disk full".into())));
        let h = heard.clone();
        p.on_set(move |_| {
            h.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(heard.load(Ordering::SeqCst), 2, "a late watcher is told at once");
    }
}
