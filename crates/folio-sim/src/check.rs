//! The checks at the end of a run, once every fault is mended and the workloads stopped:
//!
//! - **D1** every acknowledged entry of a raw ledger (and every entry a reader saw under a
//!   LAC) lies at or below the ledger's final last entry and reads back with the bytes sent;
//!   every acknowledged or read batch of a log at or above its start reads back, at its
//!   offset, with the same bytes, and offsets are dense.
//! - **D3** every end reported for a ledger (close, recoveries, the final recovery) is the
//!   same (checked as they come, in the model).
//! - **L1** once the deleter emptied the trash and every bookie ran GC: no ledger of a log
//!   is left outside its chain, no deleted ledger's metadata is left, and no bookie stores a
//!   ledger the metadata no longer has.
//! - **L2** no bookie keeps a sealed entry log whose ledgers are all gone.
//! - every bookie runs again after its faults (a refusal to start is a finding).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use folio_client::LedgerClient;
use folio_log::records::LogRecord;
use folio_log::{LogEnv, ManagedLog, OWNER_TAG, Trash, TrashConfig};
use folio_meta::list_all;
use folio_meta::records::{LedgerMetadata, Record};
use folio_proto::LedgerId;

use crate::ledgers::pause;
use crate::limits::ONCE_CHECK_BYTES_MIN;
use crate::model::{Batch, Model, crc};
use crate::world::World;

/// What the final checks found: broken promises, and counts for the report.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<String>,
    /// Ledger metadata nobody knows of (a create whose answer was lost), left for the audit.
    pub orphans: usize,
}

/// Recovers and checks every raw ledger of the model (D1, D3).
pub async fn ledgers(client: &LedgerClient, model: &Model, out: &mut Findings) {
    let ids: Vec<LedgerId> = model.lock().ledgers.keys().copied().collect();
    for id in ids {
        let facts = model.lock().ledgers[&id].clone();
        if facts.deleted {
            continue;
        }
        if facts.ends.is_empty() {
            let mut last_err = None;
            for _ in 0..10 {
                match client.recover(id).await {
                    Ok(r) => {
                        model.ended(id, r.last_entry_id().unwrap_or(-1), "the final recovery");
                        last_err = None;
                        break;
                    }
                    Err(e) => last_err = Some(e),
                }
                pause(500, 2000).await;
            }
            if let Some(e) = last_err {
                out.violations.push(format!("liveness: ledger {id} cannot be recovered: {e}"));
                continue;
            }
        }
        let facts = model.lock().ledgers[&id].clone();
        let meta = match client.metadata(id).await {
            Ok(m) => m,
            // A delete whose answer was lost applied after all.
            Err(folio_client::LedgerError::NoSuchLedger(_)) if facts.delete_tried => continue,
            Err(e) => {
                out.violations.push(format!("D1 ledger {id}: its metadata is gone: {e}"));
                continue;
            }
        };
        let last = meta.last_entry_id;
        if let Some((end, by)) = facts.ends.first()
            && *end != last
        {
            out.violations
                .push(format!("D3 ledger {id}: {by} ended it at {end}, its metadata says {last}"));
        }
        if let Some(max) = facts.acked.last().filter(|m| **m > last) {
            out.violations.push(format!(
                "D1 ledger {id}: entry {max} was acknowledged, the ledger ends at {last}"
            ));
        }
        if facts.lac_seen > last {
            out.violations.push(format!(
                "D1 ledger {id}: a reader saw LAC {}, the ledger ends at {last}",
                facts.lac_seen
            ));
        }
        read_whole(client, model, id, last, out).await;
    }
}

async fn read_whole(
    client: &LedgerClient,
    model: &Model,
    id: LedgerId,
    last: i64,
    out: &mut Findings,
) {
    let reader = match client.open(id).await {
        Ok(r) => r,
        Err(e) => {
            out.violations.push(format!("D1 ledger {id}: cannot be opened: {e}"));
            return;
        }
    };
    for entry in 0..=last {
        match reader.read(entry).await {
            Ok(e) => model.read_entry(id, entry, e.payload()),
            Err(e) => {
                out.violations.push(format!("D1 ledger {id} entry {entry} (of 0..={last}): {e}"));
                return;
            }
        }
    }
}

/// Takes every log over on the checker's node and reads it whole (D1 for logs: every
/// acknowledged batch at its offset, each append stored once).
pub async fn logs(env: &LogEnv, names: &[String], model: &Model, out: &mut Findings) {
    for name in names {
        let log = match ManagedLog::open(env.clone(), name, folio_log::LogConfig::default()).await {
            Ok(l) => l,
            Err(folio_log::LogError::NoSuchLog(_)) if !model.lock().logs.contains_key(name) => {
                continue;
            }
            Err(e) => {
                out.violations.push(format!("liveness: log {name} cannot be opened: {e}"));
                continue;
            }
        };
        let (start, end) = (log.start_offset(), log.end_offset());
        let mut seen: BTreeMap<u64, Batch> = BTreeMap::new();
        // Payload -> where it was first read: each append is stored once.
        let mut stored: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        let mut offset = start;
        while offset < end {
            match log.read(offset, 256 * 1024, 64).await {
                Ok(entries) if entries.is_empty() => break,
                Ok(entries) => {
                    for e in entries {
                        // The start may lie inside a batch (`delete_records`): the first
                        // batch read holds it.
                        let holds_start =
                            offset == start && e.base_offset < offset && e.next_offset() > offset;
                        if e.base_offset != offset && !holds_start {
                            out.violations.push(format!(
                                "D1 log {name}: a batch at {} where {offset} was next (offsets not dense)",
                                e.base_offset
                            ));
                        }
                        let batch = Batch { records: e.record_count, crc: crc(&e.payload) };
                        model.log_read(name, e.base_offset, batch);
                        // Payloads are random: only short ones may repeat by chance.
                        if e.payload.len() >= ONCE_CHECK_BYTES_MIN
                            && let Some(first) = stored.insert(e.payload.to_vec(), e.base_offset)
                        {
                            out.violations.push(format!(
                                "D1 log {name}: the batch at {first} is stored again at {} (an append sent twice)",
                                e.base_offset
                            ));
                        }
                        seen.insert(e.base_offset, batch);
                        offset = e.next_offset();
                    }
                }
                Err(e) => {
                    out.violations.push(format!("D1 log {name}: read at {offset} failed: {e}"));
                    break;
                }
            }
        }
        let facts = model.lock().logs.get(name).cloned().unwrap_or_default();
        for (kind, of) in [("acknowledged", &facts.acked), ("read", &facts.read)] {
            for (o, b) in of.range(start..) {
                // Present: a batch read starts at `o`, or holds it (the start lay inside).
                let present = seen.contains_key(o)
                    || seen
                        .range(..*o)
                        .next_back()
                        .is_some_and(|(s, x)| *s + u64::from(x.records) > *o);
                if !present {
                    out.violations.push(format!(
                        "D1 log {name}: {kind} batch at {o} ({b:?}) is missing (log {start}..{end})"
                    ));
                }
            }
        }
        epochs(name, &log, &facts, out);
        if let Err(e) = log.close().await {
            out.violations.push(format!("log {name}: the checker's close failed: {e}"));
        }
    }
}

/// Owner epochs (Kafka's leader epochs), after the checker's take-over: every acknowledged
/// offset still in the log is in the epoch of the owner that acknowledged it (at most it,
/// once the history was bounded by merging), and that epoch ends above it, so a consumer
/// that read it is never told of a truncation (D1 as Kafka clients check it, KIP-320).
fn epochs(name: &str, log: &ManagedLog, facts: &crate::model::LogFacts, out: &mut Findings) {
    let (history, end) = (log.epochs(), log.end_offset());
    let merged = history.entries().len() == folio_log::EPOCHS_MAX;
    for (o, acked) in facts.acked_epoch.range(log.start_offset()..) {
        let now = history.epoch_of(*o);
        let ends = history.end_of(*acked, end).map(|(_, e)| e);
        if now > *acked || (!merged && now != *acked) || ends.is_none_or(|e| e <= *o) {
            out.violations.push(format!(
                "D1 log {name}: offset {o} acknowledged in epoch {acked} is now in epoch {now}, \
                 which ends at {ends:?} ({history:?})"
            ));
        }
    }
}

/// Empties the trash, lets every bookie collect, and checks what is left (L1, L2).
pub async fn leaks(world: &mut World, env: &LogEnv, model: &Model, out: &mut Findings) {
    let trash = Trash::new(env.clone(), TrashConfig { busy_fraction: 1.0, ..Default::default() });
    for _ in 0..30 {
        match trash.run_once().await {
            Ok(_) if trash.list().await.is_ok_and(|l| l.is_empty()) => break,
            Ok(_) => {}
            Err(e) => world.trace.event(format!("check: trash pass failed: {e}")),
        }
        pause(1000, 3000).await;
    }
    match trash.list().await {
        Ok(left) if !left.is_empty() => out.violations.push(format!(
            "L1: {} ledgers still in the trash after 30 passes: {:?}",
            left.len(),
            left.iter().map(|t| (t.ledger_id, t.last_error.clone())).take(5).collect::<Vec<_>>()
        )),
        Ok(_) => {}
        Err(e) => out.violations.push(format!("L1: the trash cannot be listed: {e}")),
    }
    // Idle entry logs seal after 10 s; then two GC passes per bookie (one may have begun
    // before the last deletion).
    tokio::time::sleep(Duration::from_secs(15)).await;
    for b in world.bookies.iter().filter_map(|b| b.bookie.as_ref()) {
        for _ in 0..2 {
            if let Err(e) = b.gc_now().await {
                world.trace.event(format!("check: GC of {} failed: {e}", b.id()));
            }
        }
    }
    let meta = world.store();
    let keys = &world.keys;
    let mut chains: BTreeMap<String, BTreeSet<LedgerId>> = BTreeMap::new();
    match list_all(meta.as_ref(), &keys.logs()).await {
        Ok(all) => {
            for v in all {
                if let (Some(name), Ok(r)) =
                    (keys.parse_log(&v.key), LogRecord::decode(&v.key, &v.value))
                {
                    chains
                        .insert(name.to_string(), r.ledgers.iter().map(|l| l.ledger_id).collect());
                }
            }
        }
        Err(e) => out.violations.push(format!("L1: the logs cannot be listed: {e}")),
    }
    let ledgers = match list_all(meta.as_ref(), &keys.ledgers()).await {
        Ok(l) => l,
        Err(e) => {
            out.violations.push(format!("L1: the ledgers cannot be listed: {e}"));
            return;
        }
    };
    let facts = model.lock();
    let mut in_metadata = BTreeSet::new();
    for v in &ledgers {
        let Some(id) = keys.parse_ledger(&v.key) else { continue };
        in_metadata.insert(id);
        let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
        if let Some(owner) = m.custom.get(OWNER_TAG) {
            let owner = String::from_utf8_lossy(owner).into_owned();
            if !chains.get(&owner).is_some_and(|c| c.contains(&id)) {
                out.violations.push(format!(
                    "L1 ledger {id} of log {owner} is in no chain and not in the trash"
                ));
            }
        } else {
            match facts.ledgers.get(&id) {
                Some(l) if l.deleted => {
                    out.violations.push(format!("L1 ledger {id} was deleted; its metadata is left"))
                }
                Some(_) => {}
                None => out.orphans += 1,
            }
        }
    }
    drop(facts);
    for b in world.bookies.iter().filter_map(|b| b.bookie.as_ref()) {
        let storage = b.storage();
        let stray: Vec<LedgerId> =
            storage.ledger_ids().into_iter().filter(|l| !in_metadata.contains(l)).collect();
        if !stray.is_empty() {
            out.violations.push(format!(
                "L1 {} stores ledgers whose metadata is gone, after GC: {stray:?}",
                b.id()
            ));
        }
        if let Ok(states) = storage.entry_log_states() {
            for (log_id, st) in states {
                if st.sealed && st.ledgers.iter().all(|(l, _)| !storage.ledger_exists(*l)) {
                    out.violations.push(format!(
                        "L2 {} keeps sealed entry log {log_id} whose ledgers are all gone",
                        b.id()
                    ));
                }
            }
        }
    }
}
