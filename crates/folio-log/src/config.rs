//! Settings of a managed log, with the defaults an operator of Kafka or Pulsar expects.

use std::time::Duration;

/// How a managed log rolls its ledgers over, replicates them and retains data.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Ensemble size, write quorum and ack quorum of the log's ledgers.
    pub ensemble_size: u16,
    pub write_quorum: u16,
    pub ack_quorum: u16,
    /// Roll to a new ledger after this many entries (Pulsar: 50 000)...
    pub rollover_entries: u64,
    /// ...or this many bytes (Pulsar's broker default: 2 GiB; here 1 GiB)...
    pub rollover_bytes: u64,
    /// ...or when the ledger is this old (4 h), stretched by a random 0–5 % so logs
    /// opened together do not roll together; empty ledgers never roll by age.
    pub rollover_max_age: Duration,
    /// No rollover (by any trigger) before a ledger is this old (0: none).
    pub rollover_min_age: Duration,
    /// Retention by time: a closed ledger whose newest record is older goes (`None`:
    /// keep for ever). Kafka's default: 7 days.
    pub retention_time: Option<Duration>,
    /// Retention by size: the oldest closed ledgers go while the rest still holds this
    /// many bytes (`None`: no limit; Kafka's default).
    pub retention_bytes: Option<u64>,
    /// Trim only what every durable cursor has consumed (Pulsar semantics). With `false`
    /// (Kafka semantics) retention alone decides.
    pub require_consumed: bool,
    /// Trimming runs this often, besides after every rollover.
    pub trim_interval: Duration,
    /// Cursor positions are written to the metadata store this often (batched).
    pub cursor_flush_interval: Duration,
    /// Appends accepted but not yet confirmed; beyond, `append` waits (backpressure).
    pub pending_appends_max: usize,
    /// ...and bytes of them (large batches fill the bookies' queues long before 4096 do).
    pub pending_bytes_max: usize,
    /// Ledgers moved to the trash per metadata transaction (etcd allows 128 operations).
    pub trash_batch_max: usize,
    /// While no ledger can be created, appends wait this long before they fail.
    pub append_timeout: Duration,
    /// The first append after the log was idle this long re-reads the log record before
    /// it is written: if someone else changed or deleted the log meanwhile, the append
    /// fails as fenced. A writer idle across a deletion would otherwise add to a ledger
    /// whose fence the bookies forgot when their GC dropped it, and be acknowledged.
    pub idle_revalidation: Duration,
    /// A reader catching up keeps up to this many bytes of entries in flight from the
    /// bookies beyond what its current read asks for (its read stream, `log/stream.rs`),
    /// so the next read finds them there.
    pub read_window_bytes: usize,
    /// The newest confirmed entries kept in memory, in bytes, so that tailing readers get
    /// them without a bookie round trip (`log/tail.rs`).
    pub tail_cache_bytes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            ensemble_size: 3,
            write_quorum: 2,
            ack_quorum: 2,
            rollover_entries: 50_000,
            rollover_bytes: 1 << 30,
            rollover_max_age: Duration::from_secs(4 * 3600),
            rollover_min_age: Duration::ZERO,
            retention_time: Some(Duration::from_secs(7 * 24 * 3600)),
            retention_bytes: None,
            require_consumed: false,
            trim_interval: Duration::from_secs(60),
            cursor_flush_interval: Duration::from_secs(1),
            pending_appends_max: 4096,
            pending_bytes_max: 32 * 1024 * 1024,
            trash_batch_max: 100,
            append_timeout: Duration::from_secs(30),
            idle_revalidation: Duration::from_secs(1),
            read_window_bytes: 8 * 1024 * 1024,
            tail_cache_bytes: 2 * 1024 * 1024,
        }
    }
}

impl LogConfig {
    /// Quorums for `n` bookies: E = Qw = min(n, 3), Qa = min(n, 2).
    pub fn for_bookies(n: usize) -> LogConfig {
        let e = n.clamp(1, 3) as u16;
        LogConfig {
            ensemble_size: e,
            write_quorum: e,
            ack_quorum: e.min(2),
            ..LogConfig::default()
        }
    }
}
