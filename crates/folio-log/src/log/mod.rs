//! The managed log: one owner appends batches to a chain of ledgers, readers find them by
//! offset or time, durable cursors record consumption, and retention trims whole ledgers
//! into the trash.
//!
//! ## Ownership
//! The log record is written only by its owner, always by compare-and-set on its version.
//! `ManagedLog::open` recovers (fences) the last ledger of the chain, then adds a new ledger
//! in one CAS: a previous owner's adds fail on the fenced ledger and its next CAS fails, so
//! it turns `Fenced` and never appends again (D3 at the log level).
//!
//! ## A new ledger's id is durable before the ledger exists
//! Rolling over allocates the next ledger id, writes the chain with it (one CAS that also
//! records the closed ledger's final size), and only then creates the ledger. A crash
//! between the two leaves an id in the chain with no ledger; whoever opens the log next
//! creates and closes that ledger itself (so a slow previous owner cannot create it later
//! and append to it), finds it empty and trashes it. No crash leaves a ledger that no
//! chain and no trash names (L1).
//!
//! ## The append pipeline
//! One task (the actor) owns the chain. Appends get dense offsets in arrival order and
//! are added to the current ledger in that order, many in flight; they are acknowledged in
//! order. When the ledger fails (bookies lost, fenced), the actor closes it at its
//! last-add-confirmed, acknowledges what made it in, and re-sends the rest, in order, to a
//! new ledger: producers see no error and no offset moves.
//!
//! ## Trimming
//! A contiguous prefix of closed ledgers that retention (time, size), `delete_records` and
//! (with `require_consumed`) the slowest durable cursor release is removed from the chain
//! and written to the trash in one transaction; memory changes only after it commits.

mod actor;
mod compaction;
pub use compaction::{
    COMPACTION_ADDS_IN_FLIGHT_MAX, COMPACTION_CLEAN_END, COMPACTION_OUTPUT, Compaction,
    CompactionReport,
};
mod cursors;
mod index;
mod read;
mod stream;
pub use stream::prefetched_bytes;
mod tail;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::BytesMut;
use folio_client::{LedgerReader, LedgerWriter};
use folio_meta::Compare;
use folio_meta::records::Record;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::LogConfig;
use crate::entry::{self};
use crate::env::LogEnv;
use crate::epochs::Epochs;
use crate::error::{LogError, Result};
use crate::limits::OPEN_ATTEMPTS_MAX;
pub use crate::limits::{BATCH_BYTES_MAX, LOG_NAME_BYTES_MAX};
use crate::records::{LedgerInfo, LogRecord, LogRecordState};
use actor::Actor;
use cursors::load_cursors;

/// Where a log is in its life: appending, rolling over, retrying a failed rollover, closed, fenced
/// or deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogState {
    /// Appending to the current ledger.
    Open,
    /// Closing the current ledger and adding the next; appends queue.
    Rolling,
    /// No ledger could be created (or sealed): appends queue while the actor retries with
    /// backoff, and fail once the oldest waited `append_timeout`.
    Failed,
    /// Closed by its owner.
    Closed,
    /// Another owner opened the log; everything fails.
    Fenced,
    /// Deleted (or being deleted); everything fails.
    Deleted,
}

impl LogState {
    /// A state the log never leaves for a live one: closed, fenced or deleted.
    pub fn is_final(self) -> bool {
        matches!(self, LogState::Closed | LogState::Fenced | LogState::Deleted)
    }
}

/// What readers wait on: the end offset and the state, published by the actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStatus {
    pub start_offset: u64,
    pub end_offset: u64,
    pub state: LogState,
    /// The ledger appends go to (the last of the chain).
    pub current_ledger: u64,
    /// The owner epoch this owner's appends are in (`Epochs::current`): begun by its
    /// take-over, Kafka's partition leader epoch.
    pub epoch: u32,
}

/// A snapshot of a log for admin views.
#[derive(Debug, Clone)]
pub struct LogInfo {
    pub name: String,
    pub status: LogStatus,
    pub ledgers: Vec<LedgerInfo>,
    pub bytes: u64,
    pub cursors: BTreeMap<String, u64>,
}

/// Counters of one log, for metrics.
#[derive(Debug, Default)]
pub struct LogStats {
    pub appends: std::sync::atomic::AtomicU64,
    pub append_bytes: std::sync::atomic::AtomicU64,
    pub rollovers: std::sync::atomic::AtomicU64,
    pub ledger_failures: std::sync::atomic::AtomicU64,
    pub ledgers_trashed: std::sync::atomic::AtomicU64,
    /// Reads whose first entry the offset index knew exactly (no entry read to find it).
    pub locate_exact: std::sync::atomic::AtomicU64,
    /// Reads that searched entry headers to find their first entry.
    pub locate_searches: std::sync::atomic::AtomicU64,
    /// Closed ledgers' persisted offset indexes loaded (once per ledger and process).
    pub offset_indexes_loaded: std::sync::atomic::AtomicU64,
    /// Offset indexes learned whole from reads and persisted (ledgers that had none).
    pub offset_indexes_rebuilt: std::sync::atomic::AtomicU64,
    /// Reads that continued a read stream an earlier read left at their offset.
    pub reads_continued: std::sync::atomic::AtomicU64,
    /// Reads served from the tail cache (no bookie round trip).
    pub reads_from_tail: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CursorState {
    offset: u64,
    persisted: Option<u64>,
}

/// What readers see: the committed chain (shared, replaced only when the record changes)
/// and the open ledger's confirmed counters (memory only, updated on every confirm), so a
/// confirm or a read costs O(1), not a copy of the chain.
#[derive(Debug, Clone)]
struct View {
    chain: Arc<Vec<LedgerInfo>>,
    /// The chain's last ledger with its confirmed counters, while a writer has it.
    live: Option<LedgerInfo>,
    current: Option<Arc<LedgerWriter>>,
    /// The owner epochs as this owner's take-over committed them.
    epochs: Arc<Epochs>,
}

impl View {
    fn len(&self) -> usize {
        self.chain.len()
    }

    fn get(&self, i: usize) -> Option<LedgerInfo> {
        match self.live {
            Some(l) if i + 1 == self.chain.len() => Some(l),
            _ => self.chain.get(i).copied(),
        }
    }

    /// The index of the ledger holding `offset`, which must be below the end of the log:
    /// the last non-empty ledger starting at or before it (ledgers are contiguous).
    fn find(&self, offset: u64) -> Option<usize> {
        let n = self.chain.partition_point(|l| l.first_offset <= offset);
        (0..n).rev().find(|&i| self.get(i).is_some_and(|l| l.entries > 0))
    }

    fn ledgers(&self) -> Vec<LedgerInfo> {
        (0..self.len()).filter_map(|i| self.get(i)).collect()
    }
}

#[derive(Debug)]
struct Shared {
    name: String,
    env: LogEnv,
    config: LogConfig,
    /// Retention by time and size: set from `config` at open, changed by `set_retention`.
    retention: Mutex<Retention>,
    view: RwLock<View>,
    status: watch::Sender<LogStatus>,
    readers: Mutex<BTreeMap<u64, Arc<LedgerReader>>>,
    /// Per ledger: which entry holds which offset (`index.rs`).
    index: Mutex<index::OffsetIndex>,
    /// Readers' positions with their entries in flight (`stream.rs`).
    streams: Mutex<stream::Streams>,
    /// The newest confirmed entries (`tail.rs`).
    tail: Mutex<tail::TailCache>,
    cursors: Mutex<BTreeMap<String, CursorState>>,
    stats: LogStats,
    /// The offset below which the chain was compacted (`COMPACTION_CLEAN_END`).
    clean_end: std::sync::atomic::AtomicU64,
}

/// The result of one trimming pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Ledgers moved from the chain to the trash.
    pub trashed: Vec<u64>,
    pub start_offset: u64,
}

type Reply<T> = oneshot::Sender<Result<T>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retention {
    time: Option<Duration>,
    bytes: Option<u64>,
}

/// An append queued by `ManagedLog::append_enqueue`.
#[derive(Debug)]
pub struct PendingAppend {
    rx: oneshot::Receiver<Result<u64>>,
    log: ManagedLog,
}

impl PendingAppend {
    /// Waits until the batch is durable; returns the offset of its first record.
    pub async fn wait(self) -> Result<u64> {
        self.rx.await.map_err(|_| self.log.gone())?
    }
}

#[derive(Debug)]
enum Command {
    /// `data`: the batch behind room for the entry header (`entry::with_header_room`).
    Append {
        data: BytesMut,
        records: u32,
        timestamp: i64,
        reply: Reply<u64>,
    },
    Roll {
        reply: Reply<()>,
    },
    Trim {
        reply: Reply<TrimReport>,
    },
    DeleteRecords {
        offset: u64,
        reply: Reply<u64>,
    },
    FlushCursors {
        reply: Reply<()>,
    },
    Close {
        reply: Reply<()>,
    },
    Delete {
        reason: String,
        reply: Reply<()>,
    },
    CompactBegin {
        ids: Vec<u64>,
        reply: Reply<compaction::Granted>,
    },
    CompactSwap {
        output: LedgerInfo,
        replaced: Vec<LedgerInfo>,
        index: Option<crate::records::OffsetIndexRecord>,
        reply: Reply<CompactionReport>,
    },
    CompactAbandon {
        output: u64,
        reply: Reply<()>,
    },
}

/// Log names are 1..=`LOG_NAME_BYTES_MAX` bytes.
fn check_log_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > LOG_NAME_BYTES_MAX {
        return Err(LogError::Invalid(format!(
            "log name must be 1..={LOG_NAME_BYTES_MAX} bytes: {name:?}"
        )));
    }
    Ok(())
}

/// A handle on an owned managed log. Clones share the log; the actor stops (closing the
/// current ledger) when every handle is gone or `close` is called.
#[derive(Debug, Clone)]
pub struct ManagedLog {
    shared: Arc<Shared>,
    cmd: mpsc::Sender<Command>,
}

impl ManagedLog {
    /// Creates the log `name` (its record, no ledgers yet), in one transaction that also
    /// checks every `guard` (for a Kafka partition: the topic record it belongs to still
    /// exists at the version the creator read). A log is created at most once: its key must
    /// be absent. `Exists` if it is there; `CreateRefused` if a guard failed, so storage of
    /// something deleted in the meantime (whatever a caller's caches say) is never
    /// re-created. Opening never creates.
    pub async fn create(
        env: &LogEnv,
        name: &str,
        config: &LogConfig,
        guard: Vec<Compare>,
    ) -> Result<()> {
        check_log_name(name)?;
        let key = env.keys.log(name);
        let mut r = LogRecord::new(&env.owner);
        put_config(&mut r, config);
        match folio_meta::create_guarded(env.meta.as_ref(), &key, r.encode(), guard).await? {
            folio_meta::Created::Now(_) => {
                tracing::info!(log = name, "log created");
                Ok(())
            }
            folio_meta::Created::Exists => Err(LogError::Exists(name.into())),
            folio_meta::Created::GuardFailed => Err(LogError::CreateRefused {
                log: name.into(),
                why: "what it belongs to changed or is gone (a guard of its creation failed)"
                    .into(),
            }),
        }
    }

    /// Opens `name`, creating it first (with no guard) if it does not exist: for logs that
    /// belong to nothing else (`folio log create`, benchmarks, tests). A Kafka partition's
    /// log is created with a guard on its topic ([`ManagedLog::create`]).
    pub async fn open_or_create(env: LogEnv, name: &str, config: LogConfig) -> Result<ManagedLog> {
        match ManagedLog::create(&env, name, &config, Vec::new()).await {
            Ok(()) | Err(LogError::Exists(_)) => {}
            Err(e) => return Err(e),
        }
        ManagedLog::open(env, name, config).await
    }

    /// Opens the existing log `name` and becomes its owner (fencing the last one).
    /// `NoSuchLog` if it was never created or has been deleted.
    pub async fn open(env: LogEnv, name: &str, config: LogConfig) -> Result<ManagedLog> {
        check_log_name(name)?;
        let key = env.keys.log(name);
        let mut last_err = None;
        for _ in 0..OPEN_ATTEMPTS_MAX {
            let (record, version) = match env.meta.get(&key).await? {
                Some(v) => (LogRecord::decode(&key, &v.value)?, v.version),
                None => return Err(LogError::NoSuchLog(name.into())),
            };
            if record.state == LogRecordState::Deleting {
                return Err(LogError::Deleted(name.into()));
            }
            let cursors = load_cursors(&env, name).await?;
            let start = record.log_start_offset();
            let shared = Arc::new(Shared {
                name: name.into(),
                env: env.clone(),
                config: config.clone(),
                retention: Mutex::new(Retention {
                    time: config.retention_time,
                    bytes: config.retention_bytes,
                }),
                view: RwLock::new(View {
                    chain: Arc::new(record.ledgers.clone()),
                    live: None,
                    current: None,
                    epochs: Arc::new(record.epochs.clone()),
                }),
                status: watch::channel(LogStatus {
                    start_offset: start,
                    end_offset: start,
                    state: LogState::Rolling,
                    current_ledger: 0,
                    epoch: record.epochs.current(),
                })
                .0,
                readers: Mutex::new(BTreeMap::new()),
                index: Mutex::new(index::OffsetIndex::default()),
                streams: Mutex::new(stream::Streams::default()),
                tail: Mutex::new(tail::TailCache::default()),
                cursors: Mutex::new(cursors),
                stats: LogStats::default(),
                clean_end: std::sync::atomic::AtomicU64::new(
                    record
                        .properties
                        .get(COMPACTION_CLEAN_END)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                ),
            });
            let (cmd_tx, cmd_rx) = mpsc::channel(1024);
            let mut actor = Actor::new(shared.clone(), record, version, cmd_rx);
            match actor.take_over(&config).await {
                Ok(()) => {}
                Err(LogError::Fenced(_)) => {
                    last_err = Some(LogError::Fenced(name.into()));
                    continue;
                }
                Err(e) => return Err(e),
            }
            tokio::spawn(actor.run());
            return Ok(ManagedLog { shared, cmd: cmd_tx });
        }
        Err(last_err.unwrap_or_else(|| LogError::Fenced(name.into())))
    }

    /// Read streams kept for readers' next reads (see `stream.rs`).
    pub fn read_streams(&self) -> usize {
        self.shared.streams.lock().expect("streams lock").len()
    }

    /// The log's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The settings the log was opened with.
    pub fn config(&self) -> &LogConfig {
        &self.shared.config
    }

    /// Offsets and state as of now.
    pub fn status(&self) -> LogStatus {
        *self.shared.status.borrow()
    }

    /// The owner epochs (`crate::epochs`): which epoch each offset was appended in, and
    /// where each ends. Fixed from the take-over on: only a take-over begins an epoch.
    pub fn epochs(&self) -> Arc<Epochs> {
        self.shared.view.read().expect("view lock").epochs.clone()
    }

    /// Changes of the status (end offset, state), for waiting on them.
    pub fn subscribe(&self) -> watch::Receiver<LogStatus> {
        self.shared.status.subscribe()
    }

    /// The first offset still readable (retention and DeleteRecords move it up).
    pub fn start_offset(&self) -> u64 {
        self.status().start_offset
    }

    /// The offset the next append gets: every offset below it is readable.
    pub fn end_offset(&self) -> u64 {
        self.status().end_offset
    }

    /// The log's counters (appends, bytes, rollovers, trims).
    pub fn stats(&self) -> &LogStats {
        &self.shared.stats
    }

    /// A snapshot of what readers see (cheap: an `Arc` and a few counters).
    fn view(&self) -> View {
        self.shared.view.read().expect("view lock").clone()
    }

    /// A snapshot of the log's ledgers and cursors, for status pages and admin answers.
    pub fn info(&self) -> LogInfo {
        let ledgers = self.view().ledgers();
        let cursors = self
            .shared
            .cursors
            .lock()
            .expect("cursor lock")
            .iter()
            .map(|(k, c)| (k.clone(), c.offset))
            .collect();
        LogInfo {
            name: self.shared.name.clone(),
            status: self.status(),
            bytes: ledgers.iter().map(|l| l.bytes).sum(),
            ledgers,
            cursors,
        }
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.cmd.send(make(tx)).await.map_err(|_| self.gone())?;
        rx.await.map_err(|_| self.gone())?
    }

    /// Whether appends and reads can still succeed: not fenced, closed or deleted.
    pub fn is_usable(&self) -> bool {
        matches!(self.status().state, LogState::Open | LogState::Rolling | LogState::Failed)
    }

    /// Why the log is not usable (see `is_usable`).
    pub fn unusable_error(&self) -> LogError {
        self.gone()
    }

    fn gone(&self) -> LogError {
        match self.status().state {
            LogState::Fenced => LogError::Fenced(self.shared.name.clone()),
            LogState::Deleted => LogError::Deleted(self.shared.name.clone()),
            _ => LogError::Closed(self.shared.name.clone()),
        }
    }

    /// Appends one batch of `records` records whose newest timestamp is `timestamp` (ms);
    /// returns the offset of its first record once it is durable (acknowledged by the ack
    /// quorum of the current ledger's bookies).
    pub async fn append(&self, batch: &[u8], records: u32, timestamp: i64) -> Result<u64> {
        self.append_enqueue(batch, records, timestamp).await?.wait().await
    }

    /// Queues one batch like `append` and returns once it is queued, before it is durable:
    /// batches queued one after another get increasing offsets in that order, so a caller
    /// can pipeline (queue the next before the previous is acknowledged).
    pub async fn append_enqueue(
        &self,
        batch: &[u8],
        records: u32,
        timestamp: i64,
    ) -> Result<PendingAppend> {
        if records == 0 {
            return Err(LogError::Invalid("a batch holds at least one record".into()));
        }
        if batch.len() > BATCH_BYTES_MAX {
            return Err(LogError::Invalid(format!(
                "batch of {} bytes is above the {BATCH_BYTES_MAX}-byte limit",
                batch.len()
            )));
        }
        let data = entry::with_header_room(batch);
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::Append { data, records, timestamp, reply })
            .await
            .map_err(|_| self.gone())?;
        Ok(PendingAppend { rx, log: self.clone() })
    }

    /// Changes retention by time and size (`None`: unlimited); the next trimming pass
    /// (on its timer, after a rollover, or `trim`) applies it.
    pub fn set_retention(&self, time: Option<Duration>, bytes: Option<u64>) {
        *self.shared.retention.lock().expect("retention lock") = Retention { time, bytes };
    }

    /// Retention by time and size in force.
    pub fn retention(&self) -> (Option<Duration>, Option<u64>) {
        let r = *self.shared.retention.lock().expect("retention lock");
        (r.time, r.bytes)
    }

    /// Closes the current ledger and starts a new one now.
    pub async fn roll(&self) -> Result<()> {
        self.call(|reply| Command::Roll { reply }).await
    }

    /// Runs one trimming pass now (it also runs on a timer and after every rollover).
    pub async fn trim(&self) -> Result<TrimReport> {
        self.call(|reply| Command::Trim { reply }).await
    }

    /// Moves the log start offset to `offset` (Kafka's DeleteRecords) and trims the
    /// ledgers wholly below it; returns the new start offset.
    pub async fn delete_records(&self, offset: u64) -> Result<u64> {
        self.call(|reply| Command::DeleteRecords { offset, reply }).await
    }

    /// Closes the log: waits for pending appends, writes cursor positions, closes the
    /// current ledger. The next `open` (here or elsewhere) continues where it stopped.
    pub async fn close(&self) -> Result<()> {
        self.call(|reply| Command::Close { reply }).await
    }

    /// Deletes the log: fails pending appends, then moves every ledger and cursor to the
    /// trash through `trash::delete_log`.
    pub async fn delete(&self, reason: &str) -> Result<()> {
        let reason = reason.to_string();
        self.call(|reply| Command::Delete { reason, reply }).await
    }

    /// Waits until the log holds an offset at or above `offset` (or its state leaves
    /// open/rolling, or `timeout` passes); returns the status then.
    pub async fn wait_for(&self, offset: u64, timeout: Duration) -> LogStatus {
        let mut rx = self.shared.status.subscribe();
        let waited = tokio::time::timeout(
            timeout,
            rx.wait_for(|s| {
                s.end_offset > offset
                    || !matches!(s.state, LogState::Open | LogState::Rolling | LogState::Failed)
            }),
        )
        .await;
        match waited {
            Ok(Ok(s)) => *s,
            _ => self.status(),
        }
    }
}

/// Records the retention settings in the log's properties, so offline tools can say why a
/// ledger is kept.
fn put_config(r: &mut LogRecord, c: &LogConfig) {
    let p = &mut r.properties;
    let ms = c.retention_time.map_or(-1, |t| t.as_millis() as i64);
    p.insert("retention.ms".into(), ms.to_string());
    p.insert("retention.bytes".into(), c.retention_bytes.map_or(-1, |b| b as i64).to_string());
    p.insert("retention.require_consumed".into(), c.require_consumed.to_string());
}
