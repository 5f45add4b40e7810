//! Typed errors of the ledger client, mapped from wire statuses where they come from bookies.

use folio_meta::MetaError;
use folio_proto::{EntryId, LedgerId, Status};

use crate::ConnectionError;

/// Why a ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("need {need} writable bookies, only {have} registered")]
    NotEnoughBookies { need: usize, have: usize },
    #[error("invalid quorums: {0}")]
    InvalidQuorum(String),
    #[error("no such ledger {0}")]
    NoSuchLedger(LedgerId),
    #[error("ledger {0} not created: its owner's record changed or is gone")]
    CreateRefused(LedgerId),
    #[error("ledger {0} is closed")]
    Closed(LedgerId),
    #[error("ledger {0} is fenced: another client recovered it")]
    Fenced(LedgerId),
    #[error("master key rejected for ledger {0}")]
    Unauthorized(LedgerId),
    #[error("entry {entry_id} of ledger {ledger_id} did not reach the ack quorum: {detail}")]
    NotEnoughAcks { ledger_id: LedgerId, entry_id: EntryId, detail: String },
    #[error("no bookie served entry {entry_id} of ledger {ledger_id}: {detail}")]
    ReadFailed { ledger_id: LedgerId, entry_id: EntryId, detail: String },
    #[error("entry {entry_id} of ledger {ledger_id} is past its last entry {last}")]
    PastEnd { ledger_id: LedgerId, entry_id: EntryId, last: EntryId },
    #[error("the writer of ledger {0} failed earlier and accepts no more adds: {1}")]
    WriterFailed(LedgerId, WriterFailure),
    #[error("ledger {0} has the maximum number of adds outstanding")]
    Busy(LedgerId),
    #[error("payload of {0} bytes is above the entry limit")]
    TooLarge(usize),
    #[error("bookie {bookie} answered {status} to {request}")]
    Refused { bookie: String, request: &'static str, status: &'static str },
    #[error("bookie {0} is not registered")]
    UnknownBookie(String),
    #[error("metadata: {0}")]
    Meta(#[from] MetaError),
    #[error("{0}")]
    Connection(#[from] ConnectionError),
}

/// Why a ledger writer stopped taking adds. Set once; no add succeeds after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriterFailure {
    /// A bookie answered that the ledger is fenced: another client recovered it.
    #[error("the ledger is fenced (bookie {bookie}): another client recovered it")]
    Fenced { bookie: String },
    #[error("bookie {bookie} rejected the master key")]
    Unauthorized { bookie: String },
    #[error("only {up} bookies of entry {entry_id}'s write set are up, fewer than the ack quorum")]
    WriteSetDown { entry_id: EntryId, up: usize },
    #[error("ensemble change after bookie {bookie} failed ({why}): {error}")]
    EnsembleChange { bookie: String, why: String, error: String },
    #[error(
        "bookie {bookie} failed ({why}), no replacement, and entry {entry_id} can no longer reach its ack quorum"
    )]
    NoReplacement { bookie: String, why: String, entry_id: EntryId },
    /// An add stayed unconfirmed for two stall bounds, the second after the bookies that
    /// had not acknowledged it were replaced (`ledger/stall.rs`).
    #[error(
        "entry {entry_id} was not confirmed within {waited_ms} ms, even after replacing the bookies that had not acknowledged it"
    )]
    AddStalled { entry_id: EntryId, waited_ms: u64 },
    /// The writer went away before the add was confirmed.
    #[error("the writer was dropped before the add was confirmed")]
    Dropped,
}

impl LedgerError {
    /// The error a bookie's status means for `ledger_id`, if it is one.
    pub fn from_status(
        ledger_id: LedgerId,
        entry_id: EntryId,
        bookie: &str,
        status: Status,
    ) -> LedgerError {
        match status {
            Status::Fenced => LedgerError::Fenced(ledger_id),
            Status::Unauthorized => LedgerError::Unauthorized(ledger_id),
            Status::NoLedger => LedgerError::NoSuchLedger(ledger_id),
            other => LedgerError::NotEnoughAcks {
                ledger_id,
                entry_id,
                detail: format!("bookie {bookie} answered {}", other.name()),
            },
        }
    }
}

/// A ledger operation's result.
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;
