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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use folio_client::{CreateOptions, LedgerClient, LedgerError, LedgerReader, LedgerWriter};
use folio_meta::keys::Keys;
use folio_meta::records::Record;
use folio_meta::{Clock, Compare, Expect, MetaError, MetadataStore, Txn, Version, list_all};
use folio_proto::limits::ENTRY_BYTES_MAX;
use folio_proto::{ENTRY_HEADER_BYTES, EntryId};
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::LogConfig;
use crate::entry::{self, EntryHeader, LOG_ENTRY_HEADER_BYTES, LogEntry};
use crate::error::{LogError, Result};
use crate::records::{CursorRecord, LedgerInfo, LogRecord, LogRecordState, TrashRecord};

/// Custom-metadata key naming the log that owns a ledger (the deleter checks it).
pub const OWNER_TAG: &str = "folio.log";
/// Every this-many entries of a ledger go into its sparse offset index.
const INDEX_EVERY: i64 = 16;
/// Entries one `read` asks for at once, at most.
const READ_AHEAD_MAX: usize = 16;
/// Closed-ledger readers kept open per log.
const READERS_MAX: usize = 64;
/// Attempts to open a log while other owners race for it.
const OPEN_ATTEMPTS_MAX: usize = 10;
/// The largest batch an append takes.
pub const BATCH_BYTES_MAX: usize = ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES - LOG_ENTRY_HEADER_BYTES;

/// What every log of a process shares.
#[derive(Debug, Clone)]
pub struct LogEnv {
    pub meta: Arc<dyn MetadataStore>,
    pub client: LedgerClient,
    pub keys: Keys,
    /// Wall-clock milliseconds since the Unix epoch (persisted in records).
    pub clock: Arc<dyn Clock>,
    /// Who opens logs here (a broker or process id), recorded in the log record.
    pub owner: String,
}

impl LogEnv {
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms().max(1)
    }
}

/// The wall clock: milliseconds since the Unix epoch.
#[derive(Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64)
    }
}

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

/// What readers wait on: the end offset and the state, published by the actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStatus {
    pub start_offset: u64,
    pub end_offset: u64,
    pub state: LogState,
    /// The ledger appends go to (the last of the chain).
    pub current_ledger: u64,
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
    readers: Mutex<HashMap<u64, Arc<LedgerReader>>>,
    /// Per ledger: base offset → entry id, for some entries (sparse).
    index: Mutex<HashMap<u64, BTreeMap<u64, EntryId>>>,
    cursors: Mutex<BTreeMap<String, CursorState>>,
    stats: LogStats,
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

/// The longest log name.
pub const LOG_NAME_BYTES_MAX: usize = 512;

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
                }),
                status: watch::channel(LogStatus {
                    start_offset: start,
                    end_offset: start,
                    state: LogState::Rolling,
                    current_ledger: 0,
                })
                .0,
                readers: Mutex::new(HashMap::new()),
                index: Mutex::new(HashMap::new()),
                cursors: Mutex::new(cursors),
                stats: LogStats::default(),
            });
            let (cmd_tx, cmd_rx) = mpsc::channel(1024);
            let mut actor = Actor {
                sh: shared.clone(),
                chain: Arc::new(record.ledgers.clone()),
                record,
                version,
                writer: None,
                cur: Current::default(),
                next_offset: 0,
                max_ts: -1,
                queue: VecDeque::new(),
                queue_bytes: 0,
                inflight: 0,
                lac_rx: None,
                cmd_rx,
                state: LogState::Rolling,
                next_trim_ms: 0,
                next_flush_ms: 0,
                retry_ms: 0,
                retry_backoff_ms: RETRY_BACKOFF_MIN_MS,
                uncreated: None,
                failures_in_row: 0,
                last_append_ms: 0,
            };
            // Written with the chain by the first commit below.
            put_config(&mut actor.record, &config);
            actor.record.owner = env.owner.clone();
            match actor.seal_and_extend(None).await {
                Ok(()) => {}
                Err(LogError::Fenced(_)) => {
                    last_err = Some(LogError::Fenced(name.into()));
                    continue;
                }
                Err(e) => return Err(e),
            }
            let now = env.now_ms();
            actor.next_trim_ms = now + config.trim_interval.as_millis() as u64;
            actor.next_flush_ms = now + config.cursor_flush_interval.as_millis() as u64;
            tracing::info!(
                log = name,
                start = actor.start(),
                end = actor.next_offset,
                ledgers = actor.record.ledgers.len(),
                "log opened"
            );
            tokio::spawn(actor.run());
            return Ok(ManagedLog { shared, cmd: cmd_tx });
        }
        Err(last_err.unwrap_or_else(|| LogError::Fenced(name.into())))
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn config(&self) -> &LogConfig {
        &self.shared.config
    }

    pub fn status(&self) -> LogStatus {
        *self.shared.status.borrow()
    }

    /// Changes of the status (end offset, state), for waiting on them.
    pub fn subscribe(&self) -> watch::Receiver<LogStatus> {
        self.shared.status.subscribe()
    }

    pub fn start_offset(&self) -> u64 {
        self.status().start_offset
    }

    /// The offset the next append gets: every offset below it is readable.
    pub fn end_offset(&self) -> u64 {
        self.status().end_offset
    }

    pub fn stats(&self) -> &LogStats {
        &self.shared.stats
    }

    /// A snapshot of what readers see (cheap: an `Arc` and a few counters).
    fn view(&self) -> View {
        self.shared.view.read().expect("view lock").clone()
    }

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

    /// Reads batches from the one holding `offset` on, up to `max_bytes` of payload (at
    /// least one batch) and `max_entries` batches. An empty result means `offset` is the
    /// end of the log.
    pub async fn read(
        &self,
        offset: u64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Result<Vec<LogEntry>> {
        let status = self.status();
        if matches!(status.state, LogState::Deleted) {
            return Err(LogError::Deleted(self.shared.name.clone()));
        }
        if offset < status.start_offset || offset > status.end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: status.start_offset,
                end: status.end_offset,
            });
        }
        let mut out: Vec<LogEntry> = Vec::new();
        if offset == status.end_offset || max_entries == 0 {
            return Ok(out);
        }
        let view = self.view();
        let current = view.current.clone();
        let Some(mut li) = view.find(offset) else {
            return Ok(out);
        };
        let first = view.get(li).expect("found ledger exists");
        let mut entry_id = self.locate(&first, current.as_deref(), offset).await?;
        let mut bytes = 0usize;
        while out.len() < max_entries && (out.is_empty() || bytes < max_bytes) {
            let info = view.get(li).expect("ledger index in range");
            if entry_id >= info.entries as i64 {
                li += 1;
                entry_id = 0;
                match view.get(li) {
                    Some(l) if l.entries > 0 => continue,
                    _ => break,
                }
            }
            // Read ahead: as many entries at once as the bytes left probably hold (by the
            // average size so far), within this ledger and the limits.
            let window = if out.is_empty() {
                1
            } else {
                let average = (bytes / out.len()).max(1);
                (max_bytes.saturating_sub(bytes) / average)
                    .clamp(1, READ_AHEAD_MAX)
                    .min(max_entries - out.len())
                    .min((info.entries as i64 - entry_id) as usize)
            };
            let mut reads = Vec::with_capacity(window);
            for id in entry_id..entry_id + window as i64 {
                let (me, current) = (self.clone(), current.clone());
                reads.push(tokio::spawn(async move {
                    me.read_entry(&info, current.as_deref(), id).await
                }));
            }
            let mut done = false;
            for r in reads {
                let e = r.await.map_err(|e| LogError::Ledger(format!("read task: {e}")))??;
                if done || e.next_offset() > status.end_offset {
                    done = true;
                    continue;
                }
                bytes += e.payload.len();
                out.push(e);
                entry_id += 1;
            }
            if done {
                break;
            }
        }
        Ok(out)
    }

    /// The offset of the first batch whose timestamp (the log's running maximum) is at or
    /// after `timestamp`; `None` when every batch is older.
    pub async fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<u64>> {
        let start = self.start_offset();
        let view = self.view();
        let current = view.current.clone();
        let Some(info) = (0..view.len())
            .filter_map(|i| view.get(i))
            .find(|l| l.entries > 0 && l.max_publish_ms >= timestamp)
        else {
            return Ok(None);
        };
        let info = &info;
        // Binary search for the first entry with max_timestamp >= timestamp.
        let (mut lo, mut hi) = (0i64, info.entries as i64 - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.read_entry(info, current.as_deref(), mid).await?;
            if e.max_timestamp >= timestamp {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let e = self.read_entry(info, current.as_deref(), lo).await?;
        Ok(Some(e.base_offset.max(start)))
    }

    /// The entry of `info` that holds `offset`: the sparse index narrows the range, a
    /// binary search over entry headers finishes.
    async fn locate(
        &self,
        info: &LedgerInfo,
        current: Option<&LedgerWriter>,
        offset: u64,
    ) -> Result<EntryId> {
        let (mut lo, mut hi) = {
            let index = self.shared.index.lock().expect("index lock");
            let map = index.get(&info.ledger_id);
            let lo = map.and_then(|m| m.range(..=offset).next_back()).map_or(0, |(_, e)| *e);
            let hi = map
                .and_then(|m| m.range(offset + 1..).next())
                .map_or(info.entries as i64 - 1, |(_, e)| *e - 1);
            (lo, hi.max(lo))
        };
        // Invariant: the answer is in [lo, hi].
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            let e = self.read_entry(info, current, mid).await?;
            if e.base_offset <= offset {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(lo)
    }

    async fn read_entry(
        &self,
        info: &LedgerInfo,
        current: Option<&LedgerWriter>,
        entry_id: EntryId,
    ) -> Result<LogEntry> {
        let reader = match current {
            Some(w) if w.id() == info.ledger_id => Arc::new(w.reader()),
            _ => self.reader(info.ledger_id).await?,
        };
        let e = reader.read(entry_id).await?;
        let bytes = e.as_bytes().slice(ENTRY_HEADER_BYTES..);
        let (h, payload) = entry::decode(&bytes)
            .ok_or(LogError::CorruptEntry { ledger_id: info.ledger_id, entry_id })?;
        if entry_id % INDEX_EVERY == 0 {
            let mut index = self.shared.index.lock().expect("index lock");
            index.entry(info.ledger_id).or_default().insert(h.base_offset, entry_id);
        }
        Ok(LogEntry {
            base_offset: h.base_offset,
            record_count: h.record_count,
            max_timestamp: h.max_timestamp,
            ledger_id: info.ledger_id,
            entry_id,
            payload,
        })
    }

    async fn reader(&self, ledger_id: u64) -> Result<Arc<LedgerReader>> {
        if let Some(r) = self.shared.readers.lock().expect("readers lock").get(&ledger_id) {
            return Ok(r.clone());
        }
        let r = Arc::new(self.shared.env.client.open(ledger_id).await?);
        let mut readers = self.shared.readers.lock().expect("readers lock");
        if readers.len() >= READERS_MAX
            && let Some(k) = readers.keys().next().copied()
        {
            readers.remove(&k);
        }
        readers.insert(ledger_id, r.clone());
        Ok(r)
    }

    // ---- cursors ----

    /// Creates the durable cursor `name` at `offset` (clamped into the log) if it does not
    /// exist; returns its position.
    pub async fn cursor_open(&self, name: &str, offset: u64) -> Result<u64> {
        if name.is_empty() || name.contains('/') {
            return Err(LogError::Invalid(format!("cursor name {name:?}: non-empty, no '/'")));
        }
        if let Some(c) = self.shared.cursors.lock().expect("cursor lock").get(name) {
            return Ok(c.offset);
        }
        let s = self.status();
        let offset = offset.clamp(s.start_offset, s.end_offset);
        let env = &self.shared.env;
        let key = env.keys.cursor(&self.shared.name, name);
        let rec = CursorRecord { offset, updated_ms: env.now_ms() };
        env.meta.put(&key, rec.encode(), Expect::Any).await?;
        let mut cursors = self.shared.cursors.lock().expect("cursor lock");
        let c =
            cursors.entry(name.into()).or_insert(CursorState { offset, persisted: Some(offset) });
        Ok(c.offset)
    }

    /// Moves the cursor to `offset` (the next offset its consumer reads). Written to the
    /// metadata store in batches (`cursor_flush_interval`) or by `flush_cursors`.
    pub fn cursor_commit(&self, name: &str, offset: u64) -> Result<()> {
        let end = self.end_offset();
        if offset > end {
            return Err(LogError::OffsetOutOfRange { offset, start: self.start_offset(), end });
        }
        let mut cursors = self.shared.cursors.lock().expect("cursor lock");
        let c = cursors.get_mut(name).ok_or_else(|| LogError::NoSuchCursor {
            log: self.shared.name.clone(),
            cursor: name.into(),
        })?;
        c.offset = offset;
        Ok(())
    }

    pub fn cursor(&self, name: &str) -> Option<u64> {
        self.shared.cursors.lock().expect("cursor lock").get(name).map(|c| c.offset)
    }

    /// Deletes a durable cursor: it no longer holds back trimming.
    pub async fn cursor_delete(&self, name: &str) -> Result<bool> {
        let env = &self.shared.env;
        env.meta.delete(&env.keys.cursor(&self.shared.name, name), Expect::Any).await?;
        Ok(self.shared.cursors.lock().expect("cursor lock").remove(name).is_some())
    }

    /// Writes every moved cursor position now.
    pub async fn flush_cursors(&self) -> Result<()> {
        self.call(|reply| Command::FlushCursors { reply }).await
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

async fn load_cursors(env: &LogEnv, log: &str) -> Result<BTreeMap<String, CursorState>> {
    let prefix = env.keys.cursors(log);
    let mut out = BTreeMap::new();
    for v in list_all(env.meta.as_ref(), &prefix).await? {
        let name = v.key[prefix.len()..].to_string();
        let c = CursorRecord::decode(&v.key, &v.value)?;
        out.insert(name, CursorState { offset: c.offset, persisted: Some(c.offset) });
    }
    Ok(out)
}

/// The current ledger, as the actor knows it.
#[derive(Debug, Default, Clone, Copy)]
struct Current {
    created_ms: u64,
    /// Max age for this ledger, jittered.
    max_age_ms: u64,
    sent_entries: u64,
    sent_bytes: u64,
    entries: u64,
    bytes: u64,
    records: u64,
    first_ts: i64,
    max_ts: i64,
}

#[derive(Debug)]
struct Pending {
    base_offset: u64,
    records: u32,
    max_ts: i64,
    /// The encoded log entry.
    data: Bytes,
    /// (ledger, entry) once sent to a ledger.
    sent: Option<(u64, EntryId)>,
    enqueued_ms: u64,
    reply: Option<Reply<u64>>,
}

#[derive(Debug)]
struct Actor {
    sh: Arc<Shared>,
    /// The log record as last committed, and its version.
    record: LogRecord,
    version: Version,
    /// `record.ledgers`, shared with readers; replaced on every commit.
    chain: Arc<Vec<LedgerInfo>>,
    writer: Option<Arc<LedgerWriter>>,
    cur: Current,
    /// The offset the next append gets.
    next_offset: u64,
    /// The running maximum timestamp over every append.
    max_ts: i64,
    queue: VecDeque<Pending>,
    /// Bytes of the entries in `queue` (bounded by `pending_bytes_max`).
    queue_bytes: usize,
    /// Entries sent to the current writer and not yet confirmed.
    inflight: usize,
    /// The current writer's LAC (and failure) as it changes.
    lac_rx: Option<watch::Receiver<EntryId>>,
    cmd_rx: mpsc::Receiver<Command>,
    state: LogState,
    next_trim_ms: u64,
    next_flush_ms: u64,
    /// In `Failed`: when to try again, and the backoff after that.
    retry_ms: u64,
    retry_backoff_ms: u64,
    /// A ledger id committed to the chain whose creation failed (or was put off): tried
    /// again first.
    uncreated: Option<u64>,
    /// Ledgers that failed in a row without confirming an entry: from the second on, the
    /// next ledger waits for the backoff (so a dead bookie does not spin ledgers).
    failures_in_row: u32,
    /// When the last append was queued (wall clock ms; 0: none since open).
    last_append_ms: u64,
}

/// Backoff between attempts to get a ledger after a failure.
const RETRY_BACKOFF_MIN_MS: u64 = 100;
const RETRY_BACKOFF_MAX_MS: u64 = 5000;

impl Actor {
    fn env(&self) -> &LogEnv {
        &self.sh.env
    }

    fn name(&self) -> &str {
        &self.sh.name
    }

    fn start(&self) -> u64 {
        self.record.log_start_offset()
    }

    fn set_state(&mut self, state: LogState) {
        if self.state != state {
            tracing::debug!(log = self.name(), from = ?self.state, to = ?state, "log state");
        }
        self.state = state;
        self.publish();
    }

    /// Publishes the chain and status to readers.
    fn publish(&mut self) {
        let live = match (&self.writer, self.record.ledgers.last()) {
            (Some(_), Some(last)) => Some(LedgerInfo {
                entries: self.cur.entries,
                bytes: self.cur.bytes,
                records: self.cur.records,
                first_publish_ms: self.cur.first_ts,
                max_publish_ms: self.cur.max_ts,
                ..*last
            }),
            _ => None,
        };
        let last = live.or(self.record.ledgers.last().copied());
        let confirmed_end = last.map_or(self.start(), |l| l.end_offset());
        {
            let mut v = self.sh.view.write().expect("view lock");
            if !Arc::ptr_eq(&v.chain, &self.chain) {
                v.chain = self.chain.clone();
            }
            v.live = live;
            v.current = self.writer.clone();
        }
        let status = LogStatus {
            start_offset: self.start(),
            end_offset: confirmed_end.max(self.start()),
            state: self.state,
            current_ledger: self.record.ledgers.last().map_or(0, |l| l.ledger_id),
        };
        self.sh.status.send_if_modified(|s| {
            let changed = *s != status;
            *s = status;
            changed
        });
    }

    fn set_writer(&mut self, w: Option<Arc<LedgerWriter>>) {
        self.lac_rx = w.as_ref().map(|w| w.lac_watch());
        self.writer = w;
    }

    fn take_writer(&mut self) -> Option<Arc<LedgerWriter>> {
        self.lac_rx = None;
        self.writer.take()
    }

    fn error(&self) -> LogError {
        match self.state {
            LogState::Fenced => LogError::Fenced(self.name().into()),
            LogState::Deleted => LogError::Deleted(self.name().into()),
            _ => LogError::Closed(self.name().into()),
        }
    }

    async fn run(mut self) {
        loop {
            let deadline = self.next_deadline();
            let accepting = self.queue.len() < self.sh.config.pending_appends_max
                && self.queue_bytes < self.sh.config.pending_bytes_max;
            let clock = self.sh.env.clock.clone();
            tokio::select! {
                true = lac_changed(&mut self.lac_rx) => self.on_lac().await,
                cmd = self.cmd_rx.recv(), if accepting => match cmd {
                    None => {
                        let _ = self.close().await;
                        return;
                    }
                    Some(cmd) => {
                        if self.handle(cmd).await {
                            return;
                        }
                    }
                },
                () = sleep_until_ms(clock.as_ref(), deadline) => self.on_timer().await,
            }
            self.maybe_roll().await;
        }
    }

    fn next_deadline(&self) -> u64 {
        let mut d = self.next_trim_ms.min(self.next_flush_ms);
        if self.state == LogState::Failed {
            d = d.min(self.retry_ms);
        }
        if self.state == LogState::Open && self.cur.entries > 0 && self.inflight == 0 {
            // Full by size but younger than the minimum age: roll when it is old enough.
            let age = if self.full_by_size() { 0 } else { self.cur.max_age_ms };
            d = d.min(self.cur.created_ms + age.max(self.min_age_ms()));
        }
        d
    }

    fn min_age_ms(&self) -> u64 {
        self.sh.config.rollover_min_age.as_millis() as u64
    }

    async fn on_timer(&mut self) {
        let now = self.env().now_ms();
        if self.state == LogState::Failed && now >= self.retry_ms {
            self.retry().await;
        }
        if now >= self.next_flush_ms {
            if let Err(e) = self.flush_cursors().await {
                tracing::warn!(log = self.name(), error = %e, "cursor flush failed; retrying");
            }
            self.next_flush_ms = now + self.sh.config.cursor_flush_interval.as_millis() as u64;
        }
        if now >= self.next_trim_ms {
            if let Err(e) = self.trim().await {
                tracing::warn!(log = self.name(), error = %e, "trim failed; retrying");
            }
            self.next_trim_ms = now + self.sh.config.trim_interval.as_millis() as u64;
        }
    }

    /// Handles one command; true when the actor must stop.
    async fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Append { data, records, timestamp, reply } => {
                if !matches!(self.state, LogState::Open | LogState::Rolling | LogState::Failed) {
                    let _ = reply.send(Err(self.error()));
                    return false;
                }
                let now = self.env().now_ms();
                let idle = self.sh.config.idle_revalidation.as_millis() as u64;
                if now.saturating_sub(self.last_append_ms) >= idle && !self.still_ours().await {
                    self.fenced();
                    let _ = reply.send(Err(self.error()));
                    return false;
                }
                self.last_append_ms = now;
                self.max_ts = self.max_ts.max(timestamp);
                let h = EntryHeader {
                    base_offset: self.next_offset,
                    record_count: records,
                    max_timestamp: self.max_ts,
                };
                self.next_offset += u64::from(records);
                let mut data = data;
                entry::write_header(&mut data, h);
                self.queue_bytes += data.len();
                self.queue.push_back(Pending {
                    base_offset: h.base_offset,
                    records,
                    max_ts: self.max_ts,
                    data: data.freeze(),
                    sent: None,
                    enqueued_ms: self.sh.env.now_ms(),
                    reply: Some(reply),
                });
                self.send_unsent();
            }
            Command::Roll { reply } => {
                let r = self.drain_and_roll().await;
                let _ = reply.send(r);
            }
            Command::Trim { reply } => {
                let r = self.trim().await;
                let _ = reply.send(r);
            }
            Command::DeleteRecords { offset, reply } => {
                let r = self.delete_records(offset).await;
                let _ = reply.send(r);
            }
            Command::FlushCursors { reply } => {
                let r = self.flush_cursors().await;
                let _ = reply.send(r);
            }
            Command::Close { reply } => {
                let r = self.close().await;
                let _ = reply.send(r);
                return true;
            }
            Command::Delete { reason, reply } => {
                let r = self.delete(&reason).await;
                let _ = reply.send(r);
                return true;
            }
        }
        false
    }

    /// Sends queued appends to the current ledger, in order, while it is not full.
    fn send_unsent(&mut self) {
        if self.state != LogState::Open {
            return;
        }
        let Some(w) = self.writer.clone() else { return };
        for i in 0..self.queue.len() {
            if self.queue[i].sent.is_some() {
                continue;
            }
            // Full (by size, and old enough): the rest waits for the next ledger.
            if self.full() {
                break;
            }
            let p = &mut self.queue[i];
            match w.add_detached(&p.data) {
                Ok(entry_id) => {
                    p.sent = Some((w.id(), entry_id));
                    self.cur.sent_entries += 1;
                    self.cur.sent_bytes += p.data.len() as u64;
                    self.inflight += 1;
                }
                // The writer failed: the LAC watch reports it and the ledger is replaced.
                Err(_) => break,
            }
        }
    }

    fn full_by_size(&self) -> bool {
        let c = &self.sh.config;
        self.cur.sent_entries >= c.rollover_entries || self.cur.sent_bytes >= c.rollover_bytes
    }

    fn full(&self) -> bool {
        let now = self.env().now_ms();
        let age = now.saturating_sub(self.cur.created_ms);
        if age < self.min_age_ms() {
            return false;
        }
        self.full_by_size() || (self.cur.entries > 0 && age >= self.cur.max_age_ms)
    }

    async fn maybe_roll(&mut self) {
        if self.state == LogState::Open
            && self.inflight == 0
            && self.writer.is_some()
            && self.full()
            && let Err(e) = self.roll().await
        {
            tracing::warn!(log = self.name(), error = %e, "rollover failed");
        }
    }

    /// The current writer's LAC moved, or the writer failed.
    async fn on_lac(&mut self) {
        let (Some(w), Some(rx)) = (self.writer.clone(), self.lac_rx.as_mut()) else { return };
        let lac = *rx.borrow_and_update();
        self.confirm_through(w.id(), lac);
        if let Some(why) = w.failure() {
            self.failures_in_row += 1;
            self.sh.stats.ledger_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(log = self.name(), ledger = w.id(), error = %why, "ledger write failed; closing it and re-sending to a new ledger");
            if let Err(e) = self.roll().await {
                tracing::warn!(log = self.name(), error = %e, "could not replace the failed ledger");
            }
        }
    }

    /// Acknowledges the appends at the head of the queue that ledger `lid` holds at or
    /// below `lac`.
    fn confirm_through(&mut self, lid: u64, lac: EntryId) {
        let mut any = false;
        while self.queue.front().is_some_and(|p| p.sent.is_some_and(|(l, e)| l == lid && e <= lac))
        {
            let mut p = self.queue.pop_front().expect("front exists");
            self.queue_bytes -= p.data.len();
            let (lid, entry_id) = p.sent.expect("confirmed appends were sent");
            self.inflight -= 1;
            debug_assert_eq!(entry_id as u64, self.cur.entries, "confirmed out of order");
            self.cur.entries += 1;
            self.cur.bytes += p.data.len() as u64;
            self.cur.records += u64::from(p.records);
            if self.cur.first_ts < 0 {
                self.cur.first_ts = p.max_ts;
            }
            self.cur.max_ts = self.cur.max_ts.max(p.max_ts);
            if entry_id % INDEX_EVERY == 0 {
                let mut index = self.sh.index.lock().expect("index lock");
                index.entry(lid).or_default().insert(p.base_offset, entry_id);
            }
            self.sh.stats.appends.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.sh
                .stats
                .append_bytes
                .fetch_add(p.data.len() as u64, std::sync::atomic::Ordering::Relaxed);
            if let Some(reply) = p.reply.take() {
                let _ = reply.send(Ok(p.base_offset));
            }
            any = true;
        }
        if any {
            self.failures_in_row = 0;
            self.retry_backoff_ms = RETRY_BACKOFF_MIN_MS;
            self.publish();
        }
    }

    fn fail_pending(&mut self, e: LogError) {
        self.queue_bytes = 0;
        for mut p in self.queue.drain(..) {
            if let Some(reply) = p.reply.take() {
                let _ = reply.send(Err(e.clone()));
            }
        }
        self.next_offset = self.record.ledgers.last().map_or(self.start(), |l| {
            if self.writer.is_some() { l.first_offset + self.cur.records } else { l.end_offset() }
        });
    }

    /// Waits for the appends in flight, then rolls.
    async fn drain_and_roll(&mut self) -> Result<()> {
        self.drain().await;
        match self.state {
            LogState::Open | LogState::Failed | LogState::Rolling => self.roll().await,
            _ => Err(self.error()),
        }
    }

    /// Closes the current ledger (at its LAC), acknowledges what it holds, and moves on to
    /// a new ledger, re-sending the rest.
    async fn roll(&mut self) -> Result<()> {
        self.set_state(LogState::Rolling);
        let known = match self.take_writer() {
            None => None,
            Some(w) => {
                let closed = w.close().await;
                match closed {
                    Ok(lac) => {
                        self.confirm_through(w.id(), lac);
                        Some(self.cur)
                    }
                    Err(LedgerError::Fenced(_)) => {
                        self.fenced();
                        return Err(self.error());
                    }
                    Err(e) => {
                        tracing::warn!(log = self.name(), ledger = w.id(), error = %e, "closing the ledger failed; recovering it");
                        None
                    }
                }
            }
        };
        self.inflight = 0;
        for p in &mut self.queue {
            p.sent = None;
        }
        self.sh.stats.rollovers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A ledger that failed before confirming anything: wait before creating the next.
        let back_off = self.failures_in_row > 1;
        match self.seal_and_extend_then(known, !back_off).await {
            Ok(()) if back_off => {
                tracing::warn!(
                    log = self.name(),
                    failures = self.failures_in_row,
                    backoff_ms = self.retry_backoff_ms,
                    "ledgers keep failing; backing off"
                );
                self.failed(&LogError::Ledger("ledgers keep failing".into()));
                Ok(())
            }
            Ok(()) => {
                self.send_unsent();
                // Trim after every rollover (a closed ledger may be releasable now).
                if let Err(e) = self.trim().await {
                    tracing::warn!(log = self.name(), error = %e, "trim after rollover failed");
                }
                Ok(())
            }
            Err(e) => {
                self.failed(&e);
                Err(e)
            }
        }
    }

    /// After a failed attempt to get a ledger: retry later, keeping the queue (unless it
    /// waited too long).
    fn failed(&mut self, e: &LogError) {
        if matches!(e, LogError::Fenced(_) | LogError::Deleted(_)) {
            return;
        }
        self.set_state(LogState::Failed);
        let now = self.env().now_ms();
        self.retry_ms = now + self.retry_backoff_ms;
        self.retry_backoff_ms = (self.retry_backoff_ms * 2).min(RETRY_BACKOFF_MAX_MS);
        let timeout = self.sh.config.append_timeout.as_millis() as u64;
        if self.queue.front().is_some_and(|p| p.enqueued_ms + timeout <= now) {
            tracing::warn!(log = self.name(), error = %e, "appends waited too long for a ledger; failing them");
            self.fail_pending(e.clone());
        }
    }

    /// In `Failed`: try to get a ledger again.
    async fn retry(&mut self) {
        let r = match self.uncreated {
            Some(id) => match self.env().client.clone().create(self.create_options(id)).await {
                Ok(w) => {
                    self.uncreated = None;
                    self.set_writer(Some(Arc::new(w)));
                    self.set_state(LogState::Open);
                    Ok(())
                }
                Err(LedgerError::Meta(MetaError::Conflict { .. })) => {
                    // Half-created earlier: seal it like any other.
                    self.uncreated = None;
                    self.seal_and_extend(None).await
                }
                Err(e) => Err(e.into()),
            },
            None => self.seal_and_extend(None).await,
        };
        match r {
            Ok(()) => {
                tracing::info!(log = self.name(), "log writable again");
                self.retry_backoff_ms = RETRY_BACKOFF_MIN_MS;
                self.send_unsent();
            }
            Err(e) => self.failed(&e),
        }
    }

    /// Waits until the appends in flight are confirmed (or the writer fails and the
    /// ledger is replaced).
    async fn drain(&mut self) {
        while self.inflight > 0 && self.writer.is_some() {
            if !lac_changed(&mut self.lac_rx).await {
                break;
            }
            self.on_lac().await;
        }
    }

    /// Whether the log record is still the one this actor committed last (a read error
    /// counts as yes: the writes that follow are fenced or compared anyway).
    async fn still_ours(&self) -> bool {
        let key = self.env().keys.log(self.name());
        match self.env().meta.get(&key).await {
            Ok(Some(v)) => v.version == self.version,
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(log = self.name(), error = %e, "re-reading the log record failed");
                true
            }
        }
    }

    fn fenced(&mut self) {
        tracing::warn!(log = self.name(), "fenced: another owner opened this log");
        self.set_writer(None);
        self.set_state(LogState::Fenced);
        self.fail_pending(LogError::Fenced(self.name().into()));
    }

    /// Seals the chain's last ledger (with what this owner knows of it, or by recovering
    /// it), then commits the chain with a new ledger id and creates that ledger.
    async fn seal_and_extend(&mut self, known: Option<Current>) -> Result<()> {
        self.seal_and_extend_then(known, true).await
    }

    /// `seal_and_extend`, creating the new ledger only if `create` (else it is left to
    /// `retry`, as `uncreated`).
    async fn seal_and_extend_then(&mut self, known: Option<Current>, create: bool) -> Result<()> {
        let env = self.env().clone();
        let now = env.now_ms();
        let mut record = self.record.clone();
        let mut trash = Vec::new();
        if let Some(last) = record.ledgers.last().copied()
            && !last.is_closed()
        {
            let sealed = match known {
                Some(c) => LedgerInfo {
                    entries: c.entries,
                    bytes: c.bytes,
                    records: c.records,
                    first_publish_ms: c.first_ts,
                    max_publish_ms: c.max_ts,
                    close_ms: now,
                    ..last
                },
                None => self.recover_ledger(last, now).await?,
            };
            record.ledgers.pop();
            if sealed.entries == 0 {
                trash.push(TrashRecord::new(sealed.ledger_id, self.name(), "empty", now));
            } else {
                record.ledgers.push(sealed);
            }
        }
        let end = record.ledgers.last().map_or(record.start_offset, |l| l.end_offset());
        let end = end.max(record.start_offset);
        if let Some(l) = record.ledgers.iter().rev().find(|l| l.entries > 0) {
            self.max_ts = self.max_ts.max(l.max_publish_ms);
        }
        let id = env.client.allocate_id().await?;
        record.ledgers.push(LedgerInfo::open(id, end));
        self.commit(record, &trash).await?;
        self.sh
            .stats
            .ledgers_trashed
            .fetch_add(trash.len() as u64, std::sync::atomic::Ordering::Relaxed);
        // Appends still queued keep their offsets: they start this ledger.
        self.next_offset = end + self.queue.iter().map(|p| u64::from(p.records)).sum::<u64>();
        debug_assert!(self.queue.front().is_none_or(|p| p.base_offset == end));
        let c = &self.sh.config;
        let jitter = rand::random::<f64>() * 0.05;
        self.cur = Current {
            created_ms: now,
            max_age_ms: (c.rollover_max_age.as_millis() as f64 * (1.0 + jitter)) as u64,
            first_ts: -1,
            max_ts: -1,
            ..Current::default()
        };
        if !create {
            self.uncreated = Some(id);
            return Ok(());
        }
        match env.client.create(self.create_options(id)).await {
            Ok(w) => {
                self.set_writer(Some(Arc::new(w)));
                tracing::debug!(log = self.name(), ledger = id, first_offset = end, "ledger added");
                self.set_state(LogState::Open);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(log = self.name(), ledger = id, error = %e, "creating a ledger failed; retrying");
                self.uncreated = Some(id);
                Err(e.into())
            }
        }
    }

    /// Ledger `id` is created only while the log's record is still the one this actor
    /// committed (listing the id): after the log was deleted, and its ledgers with it, a
    /// slow owner can never create the id again and acknowledge appends into it (L1, D1).
    fn create_options(&self, id: u64) -> CreateOptions {
        let c = &self.sh.config;
        let mut o =
            ledger_options(self.name(), id, (c.ensemble_size, c.write_quorum, c.ack_quorum));
        o.guard.push(Compare::Version(self.env().keys.log(self.name()), self.version));
        o
    }

    /// Fences and recovers a ledger that the chain lists as open; a ledger that was never
    /// created is created and closed here, so nobody can create it later.
    async fn recover_ledger(&mut self, last: LedgerInfo, now: u64) -> Result<LedgerInfo> {
        let client = self.env().client.clone();
        let id = last.ledger_id;
        let reader = fence_ledger(&client, id, || self.create_options(id)).await?;
        let last_entry = reader.last_entry_id().unwrap_or(-1);
        let mut info =
            LedgerInfo { entries: (last_entry + 1) as u64, bytes: 0, close_ms: now, ..last };
        if last_entry >= 0 {
            let read = |e: EntryId| {
                let reader = &reader;
                async move {
                    let entry = reader.read(e).await?;
                    let bytes = entry.as_bytes().slice(ENTRY_HEADER_BYTES..);
                    entry::decode(&bytes)
                        .map(|(h, _)| h)
                        .ok_or(LogError::CorruptEntry { ledger_id: id, entry_id: e })
                }
            };
            let first = read(0).await?;
            let lastly = read(last_entry).await?;
            info.bytes = reader.metadata().length;
            info.records = lastly.base_offset + u64::from(lastly.record_count) - last.first_offset;
            info.first_publish_ms = first.max_timestamp;
            info.max_publish_ms = lastly.max_timestamp;
        }
        tracing::info!(
            log = self.name(),
            ledger = id,
            entries = info.entries,
            "recovered the last ledger"
        );
        Ok(info)
    }

    /// Commits `record` (CAS on the version) with `trash` records, in one transaction;
    /// memory follows only a commit.
    async fn commit(&mut self, record: LogRecord, trash: &[TrashRecord]) -> Result<()> {
        let env = self.env().clone();
        let key = env.keys.log(self.name());
        let mut txn = Txn::new()
            .compare(Compare::Version(key.clone(), self.version))
            .put(key.clone(), record.encode());
        for t in trash {
            txn = txn.put(env.keys.trash_ledger(t.ledger_id), t.encode());
        }
        let out = env.meta.txn(txn).await?;
        if !out.succeeded {
            self.fenced();
            return Err(LogError::Fenced(self.name().into()));
        }
        self.version = out.revision;
        self.chain = Arc::new(record.ledgers.clone());
        self.record = record;
        let gone: Vec<u64> = trash.iter().map(|t| t.ledger_id).collect();
        if !gone.is_empty() {
            let mut index = self.sh.index.lock().expect("index lock");
            let mut readers = self.sh.readers.lock().expect("readers lock");
            for id in &gone {
                index.remove(id);
                readers.remove(id);
            }
        }
        self.publish();
        Ok(())
    }

    /// The closed ledgers at the head of the chain that may go, with why.
    fn trim_candidates(&self, now: u64) -> Vec<(LedgerInfo, &'static str)> {
        let c = &self.sh.config;
        let retention = *self.sh.retention.lock().expect("retention lock");
        let ledgers = &self.record.ledgers;
        let total: u64 = ledgers.iter().map(|l| l.bytes).sum::<u64>() + self.cur.bytes;
        let slowest = if c.require_consumed {
            let cursors = self.sh.cursors.lock().expect("cursor lock");
            cursors.values().map(|c| c.persisted.unwrap_or(0)).min().unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
        let mut out = Vec::new();
        let mut removed = 0u64;
        for l in ledgers.iter().take(ledgers.len().saturating_sub(1)) {
            if !l.is_closed() || l.end_offset() > slowest || out.len() >= c.trash_batch_max {
                break;
            }
            let reason = if l.end_offset() <= self.record.start_offset {
                "delete-records"
            } else if retention.time.is_some_and(|t| {
                // A ledger without timestamps ages from its close.
                let newest =
                    if l.max_publish_ms >= 0 { l.max_publish_ms } else { l.close_ms as i64 };
                (now as i64).saturating_sub(newest) > t.as_millis() as i64
            }) {
                "retention-time"
            } else if retention.bytes.is_some_and(|b| total - removed - l.bytes >= b) {
                "retention-size"
            } else {
                break;
            };
            removed += l.bytes;
            out.push((*l, reason));
        }
        out
    }

    async fn trim(&mut self) -> Result<TrimReport> {
        let mut report = TrimReport::default();
        if !matches!(self.state, LogState::Open | LogState::Rolling | LogState::Failed) {
            return Err(self.error());
        }
        loop {
            let now = self.env().now_ms();
            let cands = self.trim_candidates(now);
            if cands.is_empty() {
                break;
            }
            let mut record = self.record.clone();
            record.ledgers.drain(..cands.len());
            let trash: Vec<TrashRecord> = cands
                .iter()
                .map(|(l, why)| TrashRecord::new(l.ledger_id, self.name(), why, now))
                .collect();
            self.commit(record, &trash).await?;
            self.sh
                .stats
                .ledgers_trashed
                .fetch_add(trash.len() as u64, std::sync::atomic::Ordering::Relaxed);
            for (l, why) in &cands {
                tracing::info!(
                    log = self.name(),
                    ledger = l.ledger_id,
                    reason = why,
                    "ledger trimmed to the trash"
                );
                report.trashed.push(l.ledger_id);
            }
        }
        report.start_offset = self.start();
        Ok(report)
    }

    async fn delete_records(&mut self, offset: u64) -> Result<u64> {
        let end = self.record.ledgers.last().map_or(0, |l| l.first_offset) + self.cur.records;
        let start = self.start();
        if offset > end {
            return Err(LogError::OffsetOutOfRange { offset, start, end });
        }
        if offset > self.record.start_offset {
            let mut record = self.record.clone();
            record.start_offset = offset;
            self.commit(record, &[]).await?;
        }
        self.trim().await?;
        Ok(self.start())
    }

    async fn flush_cursors(&mut self) -> Result<()> {
        let dirty: Vec<(String, u64)> = {
            let cursors = self.sh.cursors.lock().expect("cursor lock");
            cursors
                .iter()
                .filter(|(_, c)| c.persisted != Some(c.offset))
                .map(|(k, c)| (k.clone(), c.offset))
                .collect()
        };
        if dirty.is_empty() {
            return Ok(());
        }
        let env = self.env().clone();
        let now = env.now_ms();
        for chunk in dirty.chunks(self.sh.config.trash_batch_max.max(1)) {
            let mut txn = Txn::new();
            for (name, offset) in chunk {
                let rec = CursorRecord { offset: *offset, updated_ms: now };
                txn = txn.put(env.keys.cursor(self.name(), name), rec.encode());
            }
            env.meta.txn(txn).await?;
            let mut cursors = self.sh.cursors.lock().expect("cursor lock");
            for (name, offset) in chunk {
                if let Some(c) = cursors.get_mut(name) {
                    c.persisted = Some(*offset);
                }
            }
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        self.drain().await;
        let flushed = self.flush_cursors().await;
        if let Some(w) = self.take_writer() {
            match w.close().await {
                Ok(lac) => self.confirm_through(w.id(), lac),
                Err(e) => {
                    tracing::warn!(log = self.name(), error = %e, "closing the ledger failed")
                }
            }
        }
        if matches!(self.state, LogState::Open | LogState::Rolling | LogState::Failed) {
            self.set_state(LogState::Closed);
        }
        self.fail_pending(self.error());
        tracing::info!(log = self.name(), "log closed");
        flushed
    }

    async fn delete(&mut self, reason: &str) -> Result<()> {
        self.set_state(LogState::Deleted);
        self.fail_pending(LogError::Deleted(self.name().into()));
        if let Some(w) = self.take_writer() {
            let _ = w.close().await;
        }
        self.publish();
        crate::trash::delete_log(self.env(), self.name(), reason).await
    }
}

/// Waits for the LAC watch to change; `false` if it is gone, never if there is none.
/// Options to create ledger `id` of log `name` with (ensemble, write, ack) quorums: the
/// owner tag names the log (the trash deletes only ledgers whose tag names their log).
pub(crate) fn ledger_options(name: &str, id: u64, (e, w, a): (u16, u16, u16)) -> CreateOptions {
    let mut o = CreateOptions::new(e, w, a);
    o.ledger_id = Some(id);
    o.custom.insert(OWNER_TAG.into(), Bytes::from(name.to_string()));
    o
}

/// Fences ledger `id` for good: recovers it (its writer can add nothing more) or, if a
/// chain lists it but it was never created (an owner commits its chain, then creates the
/// ledger), creates it closed with `options`, so that the owner's create fails. Returns a
/// reader of the closed ledger.
pub(crate) async fn fence_ledger(
    client: &LedgerClient,
    id: u64,
    options: impl Fn() -> CreateOptions,
) -> Result<LedgerReader> {
    for _ in 0..3 {
        match client.recover(id).await {
            Ok(r) => return Ok(r),
            Err(LedgerError::NoSuchLedger(_)) => match client.create(options()).await {
                Ok(w) => w.close().await.map(|_| ())?,
                Err(LedgerError::Meta(MetaError::Conflict { .. })) => {}
                // The chain that listed it changed meanwhile: whoever changed it owns it now.
                Err(LedgerError::CreateRefused(_)) => {
                    return Err(LogError::Fenced(format!("ledger {id}: its log changed")));
                }
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(LogError::Ledger(format!("ledger {id} could not be recovered")))
}

async fn lac_changed(rx: &mut Option<watch::Receiver<EntryId>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Sleeps until the clock reads `deadline_ms` (re-checking at least every 50 ms, so a
/// manual test clock that jumps is noticed).
async fn sleep_until_ms(clock: &dyn Clock, deadline_ms: u64) {
    loop {
        let now = clock.now_ms();
        if now >= deadline_ms {
            // Never complete without yielding: a due timer must not starve the runtime.
            tokio::task::yield_now().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis((deadline_ms - now).min(50))).await;
    }
}
