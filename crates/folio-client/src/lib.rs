//! The ledger client: [`BookieConnection`] (one pipelined connection to one bookie),
//! [`LedgerClient`] (create, open, delete, list), [`LedgerWriter`] and [`LedgerReader`].
//!
//! **Architecture invariant:** the client speaks to bookies only through `folio_proto::wire`;
//! it never links the bookie's storage code (its tests run bookies in-process, that is all).

mod connection;
mod error;
pub mod ledger;
pub mod limits;
pub mod placement;
mod pool;

pub use connection::{BookieConnection, ConnectionError};
pub use error::{LedgerError, Result, WriterFailure};
pub use ledger::{
    BookieListing, CreateOptions, LEDGER_PASSWORD_BYTES, LedgerClient, LedgerReader, LedgerWriter,
    adds_stalled_total, master_key,
};
pub use pool::BookiePool;
