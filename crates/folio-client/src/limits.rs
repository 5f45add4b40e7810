//! Every limit of the ledger client, in one place, with their relations checked at
//! compile time. (Entry sizes are `folio_proto::limits`.)

/// Adds in flight per writer before `add` waits (backpressure).
pub const OUTSTANDING_ADDS_MAX: usize = 10_000;

// Entry ids of outstanding adds are contiguous; the writer's window must be positive.
const _: () = assert!(OUTSTANDING_ADDS_MAX > 0);

/// Requests in flight on one connection to one bookie.
pub const BOOKIE_INFLIGHT_MAX: usize = 4096;
