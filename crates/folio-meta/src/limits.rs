//! Every limit of the metadata store, in one place, with their relations checked at
//! compile time.

/// Largest value the store accepts (etcd's default request limit is 1.5 MiB).
pub const VALUE_BYTES_MAX: usize = 1024 * 1024;

/// Longest key (or prefix) the store accepts. fjall refuses keys of 64 KiB and more by
/// panicking; Folio's own keys are far below this (names are bounded by their layers).
pub const KEY_BYTES_MAX: usize = 4096;

/// Largest page a list returns.
pub const LIST_LIMIT_MAX: usize = 10_000;

/// etcd's default `--max-txn-ops`: compares plus operations in one transaction.
pub const ETCD_TXN_OPS_MAX: usize = 128;

/// Compares plus operations in one transaction of the embedded store, at most.
pub const EMBEDDED_TXN_OPS_MAX: usize = 16 * 1024;

/// Upper bound on compare-and-set retries before giving up with `Conflict`.
pub const UPDATE_ATTEMPTS_MAX: usize = 1000;

// fjall panics on keys of 64 KiB and more.
const _: () = assert!(KEY_BYTES_MAX < u16::MAX as usize);
// etcd takes requests up to 1.5 MiB: a value and its key must fit one.
const _: () = assert!(VALUE_BYTES_MAX + KEY_BYTES_MAX < 3 * 1024 * 1024 / 2);
// Code that batches by `txn_ops_max` on etcd must also fit the embedded store.
const _: () = assert!(ETCD_TXN_OPS_MAX <= EMBEDDED_TXN_OPS_MAX);
const _: () = assert!(LIST_LIMIT_MAX >= ETCD_TXN_OPS_MAX);

/// Transactions of the embedded store committed together under one fsync (group commit);
/// more wait for the next group.
pub const GROUP_TXNS_MAX: usize = 256;
