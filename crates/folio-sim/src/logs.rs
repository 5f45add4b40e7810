//! The managed-log workload, through `folio-log` as the broker runs it: an owner that opens
//! the log (fencing the previous owner's ledger), pipelines appends, rolls ledgers over
//! (every few entries), trims by retention and `delete_records`; then hands the log to a
//! new owner on another node, by a clean close, by a crash (the old node cut off from
//! every bookie), or leaving the old owner appending as a zombie. A consumer reads the log
//! from its start as it grows.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use folio_log::{LogConfig, LogEnv, LogError, ManagedLog};
use folio_meta::MetadataStore;
use folio_meta::keys::Keys;
use folio_rt::sim::{Link, SimNet};
use rand::Rng;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::clock::SimClock;
use crate::ledgers::{pause, payload};
use crate::model::{Batch, Model, crc};
use crate::trace::Trace;
use crate::world::client_ip;

/// What the log workloads share.
#[derive(Clone)]
pub struct LogShared {
    pub model: Model,
    pub trace: Trace,
    pub stop: watch::Receiver<bool>,
    pub meta: Arc<dyn MetadataStore>,
    pub keys: Keys,
    pub clock: Arc<SimClock>,
    pub net: SimNet,
    pub bookies: Vec<IpAddr>,
    pub config: LogConfig,
    /// Client node indices this workload may take (one per owner incarnation).
    pub nodes: std::ops::Range<usize>,
}

impl std::fmt::Debug for LogShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogShared").finish_non_exhaustive()
    }
}

impl LogShared {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// The environment of a process on client node `node`.
    pub fn env(&self, node: usize) -> LogEnv {
        let client = crate::world::client_at(self.meta.clone(), &self.keys, client_ip(node));
        LogEnv {
            meta: self.meta.clone(),
            client,
            keys: self.keys.clone(),
            clock: self.clock.clone(),
            owner: format!("node-{}", client_ip(node)),
        }
    }
}

fn rand_range(lo: u64, hi: u64) -> u64 {
    folio_rt::with_rng(|r| r.random_range(lo..=hi))
}

/// How an owner gives the log up.
#[derive(Debug, Clone, Copy)]
enum Handover {
    Close,
    Crash,
    Zombie,
}

/// Owns `name` until stopped, one owner incarnation after another; `current` is the owner
/// the consumer reads through.
pub async fn owner(s: LogShared, name: String, current: watch::Sender<Option<ManagedLog>>) {
    let mut nodes = s.nodes.clone();
    let mut zombies = JoinSet::new();
    while !s.stopped() {
        let Some(node) = nodes.next() else { break };
        let who = format!("{name}@{}", client_ip(node));
        let Some(log) = open(&s, &name, node, &who).await else { continue };
        current.send_replace(Some(log.clone()));
        let until = tokio::time::Instant::now() + Duration::from_millis(rand_range(1000, 6000));
        let mut appends = JoinSet::new();
        produce(&s, &log, &who, &mut appends, until).await;
        let handover = match rand_range(0, 9) {
            0..=3 => Handover::Close,
            4..=6 => Handover::Crash,
            _ => Handover::Zombie,
        };
        if s.stopped() {
            while appends.join_next().await.is_some() {}
            close(&s, &log, &who).await;
            break;
        }
        s.trace.event(format!("{who}: hands the log over ({handover:?})"));
        match handover {
            Handover::Close => {
                while appends.join_next().await.is_some() {}
                close(&s, &log, &who).await;
            }
            Handover::Crash => {
                for b in &s.bookies {
                    s.net.set_link(client_ip(node), *b, Link::Down);
                }
                // The process is gone: its appends end as they may (they fail, or an
                // acknowledgement already on its way arrives and counts).
                appends.detach_all();
                drop(log);
            }
            Handover::Zombie => {
                let (z, zw) = (s.clone(), who.clone());
                zombies.spawn(async move {
                    let mut appends = JoinSet::new();
                    let until =
                        tokio::time::Instant::now() + Duration::from_millis(rand_range(500, 3000));
                    produce(&z, &log, &format!("{zw} (zombie)"), &mut appends, until).await;
                    while appends.join_next().await.is_some() {}
                });
                appends.detach_all();
            }
        }
    }
    while zombies.join_next().await.is_some() {}
}

async fn open(s: &LogShared, name: &str, node: usize, who: &str) -> Option<ManagedLog> {
    for _ in 0..20 {
        if s.stopped() {
            return None;
        }
        let op = s.model.begin(format!("{who}: open"));
        match ManagedLog::open_or_create(s.env(node), name, s.config.clone()).await {
            Ok(log) => {
                s.model.end(op, "log open ok");
                s.trace.event(format!(
                    "{who}: opened at {}..{}",
                    log.start_offset(),
                    log.end_offset()
                ));
                return Some(log);
            }
            Err(e) => {
                s.model.end(op, "log open failed");
                s.trace.event(format!("{who}: open failed: {e}"));
                pause(200, 1500).await;
            }
        }
    }
    None
}

async fn close(s: &LogShared, log: &ManagedLog, who: &str) {
    let op = s.model.begin(format!("{who}: close"));
    match log.close().await {
        Ok(()) => s.model.end(op, "log close ok"),
        Err(e) => {
            s.model.end(op, "log close failed");
            s.trace.event(format!("{who}: close failed: {e}"));
        }
    }
}

/// Appends (pipelined) until `until`, with rolls, trims and record deletions among them.
async fn produce(
    s: &LogShared,
    log: &ManagedLog,
    who: &str,
    appends: &mut JoinSet<()>,
    until: tokio::time::Instant,
) {
    let inflight = rand_range(1, 8) as usize;
    while !s.stopped() && tokio::time::Instant::now() < until && log.is_usable() {
        while appends.len() >= inflight {
            appends.join_next().await;
        }
        match rand_range(0, 99) {
            0..=2 => admin(s, log, who, "roll", log.roll().await.map(|()| String::new())).await,
            3..=5 => {
                let r = log
                    .trim()
                    .await
                    .map(|t| format!("{} trashed, start {}", t.trashed.len(), t.start_offset));
                admin(s, log, who, "trim", r).await
            }
            6 => {
                let to = rand_range(log.start_offset(), log.end_offset());
                let r = log.delete_records(to).await.map(|start| format!("start {start}"));
                admin(s, log, who, "delete_records", r).await
            }
            _ => {}
        }
        let bytes = payload(1024);
        let batch = Batch { records: rand_range(1, 4) as u32, crc: crc(&bytes) };
        let now = s.clock.as_ref();
        let ts = folio_proto::clock::Clock::now_ms(now) as i64;
        let op = s.model.begin(format!("{who}: append"));
        // The epoch this handle's take-over began (fixed for the handle's life).
        let epoch = log.status().epoch;
        match log.append_enqueue(&bytes, batch.records, ts).await {
            Ok(pending) => {
                let (m, t, who, name) =
                    (s.model.clone(), s.trace.clone(), who.to_string(), log.name().to_string());
                appends.spawn(async move {
                    match pending.wait().await {
                        Ok(offset) => {
                            m.log_acked(&name, offset, batch, epoch);
                            m.end(op, "append ok");
                        }
                        Err(e) => {
                            m.end(op, "append failed");
                            t.event(format!("{who}: append failed: {e}"));
                        }
                    }
                });
            }
            Err(e) => {
                s.model.end(op, "append refused");
                s.trace.event(format!("{who}: append refused: {e}"));
                pause(50, 500).await;
            }
        }
        pause(0, 20).await;
    }
}

async fn admin(
    s: &LogShared,
    _log: &ManagedLog,
    who: &str,
    what: &str,
    r: folio_log::Result<String>,
) {
    match r {
        Ok(detail) => s.trace.event(format!("{who}: {what} {detail}")),
        Err(e) => s.trace.event(format!("{who}: {what} failed: {e}")),
    }
}

/// Reads the log from its start through whichever owner is current, checking every batch
/// against what was acknowledged.
pub async fn consumer(
    s: LogShared,
    name: String,
    mut current: watch::Receiver<Option<ManagedLog>>,
) {
    let mut offset = 0;
    while !s.stopped() {
        let Some(log) = current.borrow_and_update().clone() else {
            let _ = tokio::time::timeout(Duration::from_secs(1), current.changed()).await;
            continue;
        };
        let op = s.model.begin(format!("{name} consumer: read at {offset}"));
        match log.read(offset, 16 * 1024, 16).await {
            Ok(entries) if entries.is_empty() => {
                s.model.end(op, "log read ok");
                if log.is_usable() {
                    log.wait_for(offset, Duration::from_millis(500)).await;
                } else {
                    // A fenced or closed owner: wait for the next one.
                    let _ =
                        tokio::time::timeout(Duration::from_millis(500), current.changed()).await;
                }
            }
            Ok(entries) => {
                s.model.end(op, "log read ok");
                for e in entries {
                    let batch = Batch { records: e.record_count, crc: crc(&e.payload) };
                    s.model.log_read(&name, e.base_offset, batch);
                    offset = e.next_offset();
                }
            }
            Err(LogError::OffsetOutOfRange { .. }) => {
                s.model.end(op, "log read out of range");
                offset = offset.clamp(log.start_offset(), log.end_offset());
            }
            Err(e) => {
                s.model.end(op, "log read failed");
                s.trace.event(format!("{name} consumer: read at {offset} failed: {e}"));
                pause(100, 500).await;
            }
        }
    }
}
