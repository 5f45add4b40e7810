//! The ledger client. Today: [`BookieConnection`], one pipelined connection to one bookie.
//! Replicated ledgers (write sets, quorums, recovery) build on it.
//!
//! **Architecture invariant:** the client speaks to bookies only through `folio_proto::wire`;
//! it never links the bookie's storage code.

mod connection;

pub use connection::{BookieConnection, ConnectionError};
