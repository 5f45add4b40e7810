//! Ending transactions: every broker writes the markers of the ending transactions'
//! partitions it owns, and applies (commit) or drops (abort) the transactional offsets of
//! the groups it coordinates; the coordinator's transactions open past their timeout are
//! aborted, and its ids idle past `transactional_id_expiration` forgotten. The state
//! machine and the records are `domain::txn`'s.
//!
//! The work is found in the metadata store (`transactions-ending/`), so a broker that
//! takes over a partition or a group (or restarts) finishes what its last owner left. It
//! runs when this broker begins to end a transaction (`Inner::txns_ending`) and every
//! [`SCAN_INTERVAL`] for the others' (and for timeouts, every [`EXPIRY_INTERVAL`]).
//!
//! A marker is written at most once per (partition, producer, epoch) in practice, but may
//! be written twice when an owner dies between the marker and the record's update: the
//! second finds no open transaction and changes nothing for readers.

use crate::errors::BrokerError;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_meta::records::{Reader, Record, corrupt, put_string};
use folio_meta::{Compare, Txn};

use crate::domain::cluster::{group_key, partition_key, txn_key};
use crate::domain::group::OffsetRecord;
use crate::domain::txn::{TxnState, marker};
use crate::state::Inner;

/// How often every broker looks for ending transactions it has work in.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(500);
/// How often the coordinator looks for transactions open past their timeout (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`).
pub const EXPIRY_INTERVAL: Duration = Duration::from_secs(10);

/// Runs until the broker stops.
pub(crate) async fn run(inner: Arc<Inner>) {
    let mut stop = inner.shutdown.subscribe();
    let mut last_expiry = tokio::time::Instant::now();
    loop {
        if let Err(e) = end_once(&inner).await {
            tracing::warn!(error = %e, "writing transaction markers failed; retrying");
        }
        if last_expiry.elapsed() >= EXPIRY_INTERVAL {
            last_expiry = tokio::time::Instant::now();
            if let Err(e) = abort_expired(&inner).await {
                tracing::warn!(error = %e, "aborting timed-out transactions failed; retrying");
            }
        }
        tokio::select! {
            () = inner.txns_ending.notified() => {}
            () = tokio::time::sleep(SCAN_INTERVAL) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// One pass over the ending transactions: this broker's part of each.
pub(crate) async fn end_once(inner: &Arc<Inner>) -> Result<(), BrokerError> {
    let ids = inner.txns.ending().await?;
    for id in ids {
        let Some((r, _)) = inner.txns.load(&id).await? else {
            continue;
        };
        if !r.state.is_prepare() {
            continue;
        }
        let commit = r.state == TxnState::PrepareCommit;
        let (mut partitions, mut groups) = (Vec::new(), Vec::new());
        for (name, p) in &r.partitions {
            let topic = match inner.topics.get(name).await {
                Ok(Some(t)) => t,
                Ok(None) => {
                    partitions.push((name.clone(), *p)); // deleted: nothing left to mark
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if *p < 0 || *p >= topic.record.partitions as i32 {
                partitions.push((name.clone(), *p));
                continue;
            }
            if !inner.membership.owns(&partition_key(topic.record.id, *p)) {
                continue;
            }
            let m = (r.producer_id, r.epoch, commit, r.coordinator_epoch);
            match write_marker(inner, &id, &topic, *p, m).await {
                Ok(()) => partitions.push((name.clone(), *p)),
                Err(e) => {
                    tracing::warn!(transactional_id = %id, topic = %name, partition = p, error = %e, "writing a transaction marker failed; retrying")
                }
            }
        }
        for g in &r.groups {
            if !inner.membership.owns(&group_key(g)) {
                continue;
            }
            match finish_offsets(inner, g, r.producer_id, commit).await {
                Ok(()) => groups.push(g.clone()),
                Err(e) => {
                    tracing::warn!(transactional_id = %id, group = %g, error = %e, "ending a transaction's offsets failed; retrying")
                }
            }
        }
        if partitions.is_empty() && groups.is_empty() {
            continue;
        }
        let now = inner.env.now_ms();
        if let Err(e) =
            inner.txns.marked(&id, (r.producer_id, r.epoch), &partitions, &groups, now).await
        {
            tracing::info!(transactional_id = %id, error = %e.why, "recording written markers lost a race; the next pass looks again");
        }
    }
    Ok(())
}

/// Writes the marker `(producer id, epoch, commit, coordinator epoch)` of transaction `id`
/// to `topic`'s partition `p` (owned here) and closes the transaction there, unless the
/// transaction's record, read again in the partition's order, no longer waits for it.
async fn write_marker(
    inner: &Inner,
    id: &str,
    topic: &crate::domain::topics::Topic,
    p: i32,
    (producer_id, epoch, commit, coordinator_epoch): (i64, i16, bool, i32),
) -> Result<(), BrokerError> {
    let part = inner.partition(topic, p).await?;
    let now = inner.now_ms();
    let b = marker::encode(producer_id, epoch, commit, coordinator_epoch, now);
    let queued = {
        // No batch of an epoch this marker fences is queued behind it.
        let _order = part.txn_order.lock().await;
        // A pass that read the record long ago (a slow partition open) must not write a
        // marker the transaction already has: by now the producer's next transaction may
        // be open here (at this very epoch under version 2), and the marker would close
        // it, its records visible before it commits, or kept when it aborts (found by
        // the simulator). Its first batch was verified against a record that had ended
        // this transaction, so reading the record again here tells.
        let waits = inner.txns.load(id).await?.is_some_and(|(r, _)| {
            let prepare = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
            (r.state, r.producer_id, r.epoch) == (prepare, producer_id, epoch)
                && r.partitions.iter().any(|(n, q)| *n == topic.name && *q == p)
        });
        if !waits {
            return Ok(());
        }
        {
            let mut txns = part.txns.lock().expect("txns lock");
            if !txns.admits(producer_id, epoch) {
                return Ok(()); // a newer epoch's marker is there already
            }
            txns.fence(producer_id, epoch);
        }
        part.log.append_enqueue(&b, 1, now).await?
    };
    let offset = queued.wait().await?;
    let stale =
        part.txns.lock().expect("txns lock").marker(producer_id, epoch, commit, offset as i64);
    if let Err(e) = stale {
        tracing::warn!(log = part.log.name(), error = %e, "a marker raced a newer one");
    }
    inner.metrics.txn_markers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The offsets a transaction committed for one group (TxnOffsetCommit), until it ends.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsets {
    /// (topic, partition, offset, leader epoch, metadata)
    pub offsets: Vec<(String, i32, i64, i32, String)>,
}

const OFFSETS_MAGIC: &[u8; 3] = b"FTO";

impl Record for TxnOffsets {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(8 + self.offsets.len() * 48);
        v.extend_from_slice(OFFSETS_MAGIC);
        v.push(1);
        v.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        for (t, p, o, e, m) in &self.offsets {
            put_string(&mut v, t);
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&o.to_le_bytes());
            v.extend_from_slice(&e.to_le_bytes());
            put_string(&mut v, m);
        }
        v.into()
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(3)? != OFFSETS_MAGIC || r.u8()? != 1 {
            return Err(corrupt(key, "not a transactional offsets record"));
        }
        let n = r.u32()? as usize;
        if n > crate::limits::TXN_PARTITIONS_MAX {
            return Err(corrupt(key, format!("{n} transactional offsets")));
        }
        let mut offsets = Vec::with_capacity(n);
        for _ in 0..n {
            let t = r.string()?;
            let p = r.u32()? as i32;
            let o = r.u64()? as i64;
            let e = r.u32()? as i32;
            offsets.push((t, p, o, e, r.string()?));
        }
        r.done()?;
        Ok(TxnOffsets { offsets })
    }
}

/// Adds `offsets` to what producer `producer_id` committed for `group` in its open
/// transaction (a later offset of a partition replaces an earlier one), in one write that
/// also compares `record` (the transaction's record as checked): `false` when either moved.
pub(crate) async fn stage_offsets(
    inner: &Inner,
    group: &str,
    producer_id: i64,
    offsets: &[(String, i32, i64, i32, String)],
    record: Compare,
) -> Result<bool, BrokerError> {
    let key = inner.env.keys.transaction_offsets(&crate::domain::group::escape(group), producer_id);
    let read = inner.env.meta.get(&key).await?;
    let (mut staged, guard) = match &read {
        Some(v) => (TxnOffsets::decode(&key, &v.value)?, Compare::Version(key.clone(), v.version)),
        None => (TxnOffsets::default(), Compare::Absent(key.clone())),
    };
    for o in offsets {
        staged.offsets.retain(|x| (&x.0, x.1) != (&o.0, o.1));
        staged.offsets.push(o.clone());
    }
    if staged.offsets.len() > crate::limits::TXN_PARTITIONS_MAX {
        return Err(BrokerError::Storage(format!(
            "a transaction commits offsets of at most {} partitions per group",
            crate::limits::TXN_PARTITIONS_MAX
        )));
    }
    let txn = Txn::new().compare(record).compare(guard).put(key.clone(), staged.encode());
    Ok(inner.env.meta.txn(txn).await?.succeeded)
}

/// The partitions (topic, partition) whose offsets an open transaction has staged for
/// `group`.
pub(crate) async fn staged_partitions(
    inner: &Inner,
    group: &str,
) -> Result<std::collections::HashSet<(String, i32)>, BrokerError> {
    let prefix = inner.env.keys.transaction_offsets_of(&crate::domain::group::escape(group));
    let all = folio_meta::list_all(inner.env.meta.as_ref(), &prefix).await?;
    let mut out = std::collections::HashSet::new();
    for v in all {
        let staged = TxnOffsets::decode(&v.key, &v.value)?;
        out.extend(staged.offsets.into_iter().map(|(t, p, ..)| (t, p)));
    }
    Ok(out)
}

/// Applies (commit) or drops (abort) what producer `producer_id` staged for `group`.
async fn finish_offsets(
    inner: &Inner,
    group: &str,
    producer_id: i64,
    commit: bool,
) -> Result<(), BrokerError> {
    let key = inner.env.keys.transaction_offsets(&crate::domain::group::escape(group), producer_id);
    let Some(v) = inner.env.meta.get(&key).await? else {
        return Ok(());
    };
    if commit {
        let staged = TxnOffsets::decode(&key, &v.value)?;
        let now = inner.env.now_ms();
        let mut writes = Vec::with_capacity(staged.offsets.len());
        for (name, p, offset, leader_epoch, metadata) in staged.offsets {
            let Some(t) = inner.topics.get(&name).await? else {
                continue; // deleted since
            };
            let r =
                OffsetRecord { offset, leader_epoch, commit_ms: now, metadata, expire_ms: None };
            writes.push((name, t.record.id, t.version, p, r));
        }
        let tenure = (inner.groups.tenure(), inner.groups.claim_version(group));
        let refused = inner.groups.commit(group, -1, tenure, &writes).await.map_err(|e| {
            BrokerError::background(format!("committing group {group}'s offsets"), e)
        })?;
        if !refused.is_empty() {
            let changed = format!("{} offsets' topics changed; retrying", refused.len());
            return Err(BrokerError::Storage(changed));
        }
    }
    let txn = Txn::new().compare(Compare::Version(key.clone(), v.version)).delete(key);
    inner.env.meta.txn(txn).await?;
    Ok(())
}

/// Aborts the transactions coordinated here that are open past their timeout, and forgets
/// the ids idle past `transactional_id_expiration`.
async fn abort_expired(inner: &Arc<Inner>) -> Result<(), BrokerError> {
    let now = inner.env.now_ms();
    let expiration = inner.config.transactional_id_expiration.as_millis() as u64;
    let mut aborted = false;
    for (id, r) in inner.txns.all().await? {
        if r.state.is_idle()
            && r.updated_ms.saturating_add(expiration) < now
            && inner.membership.owns(&txn_key(&id))
        {
            if let Err(e) = inner.txns.expire(&id, now.saturating_sub(expiration)).await {
                tracing::info!(transactional_id = %id, error = %e.why, "expiring a transactional id failed; retrying");
            }
            continue;
        }
        if r.state != TxnState::Ongoing
            || r.started_ms + u64::from(r.timeout_ms) > now
            || !inner.membership.owns(&txn_key(&id))
        {
            continue;
        }
        match inner.txns.abort_if_expired(&id, now).await {
            Ok(a) => aborted |= a,
            Err(e) => {
                tracing::info!(transactional_id = %id, error = %e.why, "a timed-out transaction was not aborted; retrying")
            }
        }
    }
    if aborted {
        inner.txns_ending.notify_one();
    }
    Ok(())
}
