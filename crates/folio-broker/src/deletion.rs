//! Topic deletion, in two phases.
//!
//! 1. DeleteTopics (or `folio topics delete`) commits one transaction per request (several
//!    only if the store's `txn_ops_max` cannot hold it: etcd's 128 operations) that removes
//!    each topic's record (the name → id binding, compared on its version) and writes a
//!    deletion marker keyed by the topic id; it answers once that is durable. From then on
//!    the name is free (a new topic of that name gets a new id, so new log names: it starts
//!    empty) and produce and
//!    fetch answer UNKNOWN_TOPIC_OR_PARTITION (by name) or UNKNOWN_TOPIC_ID (by id).
//! 2. The controller (the live broker with the lowest node id) works through the markers
//!    topic by topic, partition by partition: each partition's managed log is deleted
//!    through the trash (`folio_log::trash::delete_log` fences its last ledger first, so an
//!    owner that still appends is stopped: nothing more is acknowledged in it), then the
//!    topic's committed group offsets are removed, then the marker. A controller that dies
//!    leaves the markers; the next one resumes them.
//!
//! Each partition passes through states anyone can read from the metadata store
//! ([`progress`]; `GET /admin/deletions`, `folio topics list`): `pending` (its log exists),
//! `moving-to-trash`, `in-trash` (ledgers wait for the trash deleter), `gone`; bookies'
//! GC then gives the disk back.
//!
//! ```text
//! DeletionMarker  "FTD" 1 | name str | partitions u32 | requested_ms u64
//!                 at <root>/topic-deletions/<topic id hex>
//! ```

use crate::errors::BrokerError;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::records::{Reader, Record, corrupt, put_string};
use folio_meta::{MetaError, MetadataStore, Txn, list_all};
use std::sync::atomic::Ordering;
use uuid::Uuid;

use crate::domain::topics::{Topic, log_name, parse_log_name};
use crate::state::Inner;

/// The marker of a deleted topic: what is left to delete, until its logs are in the trash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionMarker {
    pub name: String,
    pub partitions: u32,
    pub requested_ms: u64,
}

const MARKER_MAGIC: &[u8; 3] = b"FTD";

impl Record for DeletionMarker {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(32 + self.name.len());
        v.extend_from_slice(MARKER_MAGIC);
        v.push(1);
        put_string(&mut v, &self.name);
        v.extend_from_slice(&self.partitions.to_le_bytes());
        v.extend_from_slice(&self.requested_ms.to_le_bytes());
        v.into()
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(3)? != MARKER_MAGIC || r.u8()? != 1 {
            return Err(corrupt(key, "not a topic deletion marker"));
        }
        let name = r.string()?;
        let partitions = r.u32()?;
        let requested_ms = r.u64()?;
        r.done()?;
        Ok(DeletionMarker { name, partitions, requested_ms })
    }
}

/// Phase 1: unbinds the topics' names and writes their markers. A topic changed since it
/// was read fails with `Conflict` (the caller answers with an error; nothing is deleted).
pub(crate) async fn unbind(inner: &Inner, topics: &[Arc<Topic>]) -> Result<(), MetaError> {
    let now = inner.now_ms() as u64;
    let result = unbind_topics(inner.env.meta.as_ref(), &inner.env.keys, topics, now).await;
    for t in topics {
        // Whatever happened, the cache re-reads these names on next use.
        inner.topics.forget(&t.name);
    }
    result?;
    inner.metrics.topic_deletions_requested.fetch_add(topics.len() as u64, Ordering::Relaxed);
    inner.deletions.notify_one();
    Ok(())
}

/// Phase 1 on any metadata store (the broker's DeleteTopics and `folio topics delete`):
/// per transaction, each topic's record is compared on the version read and removed, and
/// its marker written. The markers are durable when this returns; a running controller
/// picks them up.
pub async fn unbind_topics(
    meta: &dyn MetadataStore,
    keys: &Keys,
    topics: &[Arc<Topic>],
    now_ms: u64,
) -> Result<(), MetaError> {
    // A compare, a delete and a put per topic: the whole request in one transaction when
    // the store takes it (embedded: up to 5 000 topics; etcd by default 42 per transaction).
    let per_txn = (meta.txn_ops_max() / 3).max(1);
    for chunk in topics.chunks(per_txn) {
        let mut txn = Txn::new();
        for t in chunk {
            let key = keys.topic(&t.name);
            let marker = DeletionMarker {
                name: t.name.clone(),
                partitions: t.record.partitions,
                requested_ms: now_ms,
            };
            txn = txn
                .compare(folio_meta::Compare::Version(key.clone(), t.version))
                .delete(key)
                .put(keys.topic_deletion(&t.record.id.simple().to_string()), marker.encode());
        }
        let out = meta.txn(txn).await?;
        if !out.succeeded {
            return Err(MetaError::Conflict { key: "a topic changed while being deleted".into() });
        }
        for t in chunk {
            tracing::info!(topic = %t.name, id = %t.record.id, partitions = t.record.partitions, "topic deleted (name unbound; data deletion queued)");
        }
    }
    Ok(())
}

/// Every deletion marker: its key, the topic id its key names, and the marker decoded.
async fn markers(
    env: &folio_log::LogEnv,
) -> Result<Vec<(String, Uuid, folio_meta::Result<DeletionMarker>)>, MetaError> {
    let prefix = env.keys.topic_deletions();
    Ok(list_all(env.meta.as_ref(), &prefix)
        .await?
        .into_iter()
        .filter_map(|v| {
            let id = Uuid::try_parse(&v.key[prefix.len()..]).ok()?;
            let m = DeletionMarker::decode(&v.key, &v.value);
            Some((v.key, id, m))
        })
        .collect())
}

/// Phase 2, on the controller: works through the markers until stopped.
pub(crate) async fn run(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            () = inner.deletions.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if inner.membership.controller() != inner.config.node_id {
            continue;
        }
        if let Err(e) = pass(&inner).await {
            inner.metrics.topic_deletion_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "topic deletion pass failed; retrying in a second");
        }
    }
}

/// One pass over every marker: each topic's partitions, then its group offsets, then the
/// marker. Returns how many topics were finished. Between partitions it yields, so the
/// requests this broker serves (CreateTopics among them) are never queued behind it.
pub(crate) async fn pass(inner: &Arc<Inner>) -> Result<usize, BrokerError> {
    let markers: Vec<(String, Uuid, DeletionMarker)> = markers(&inner.env)
        .await?
        .into_iter()
        .filter_map(|(key, id, m)| match m {
            Ok(m) => Some((key, id, m)),
            Err(e) => {
                tracing::error!(%key, error = %e, "skipping a corrupt topic deletion marker");
                None
            }
        })
        .collect();
    let m = &inner.metrics;
    m.topic_deletions_pending.store(markers.len() as u64, Ordering::Relaxed);
    let total: u64 = markers.iter().map(|(_, _, d)| u64::from(d.partitions)).sum();
    m.partitions_being_deleted.store(total, Ordering::Relaxed);
    let mut done = 0;
    for (key, id, marker) in markers {
        for p in 0..marker.partitions as i32 {
            let step = tokio::time::Instant::now();
            if *inner.shutdown.borrow() {
                // Stopping (or crashed, in tests): the next controller resumes the marker.
                return Err(BrokerError::Storage(format!(
                    "stopped while deleting {}",
                    marker.name
                )));
            }
            // If this broker serves the partition, stop now (waking its tailing fetches);
            // if another does, or a dead one did, `delete_log` fences the last ledger.
            inner.close_partitions(|i, q| i == id && q == p, "its topic was deleted").await;
            let reason = format!("topic {} ({id}) deleted", marker.name);
            folio_log::trash::delete_log(&inner.env, &log_name(id, p), &reason).await.map_err(
                |e| {
                    BrokerError::background(format!("deleting partition {p} of {}", marker.name), e)
                },
            )?;
            m.partitions_being_deleted.fetch_sub(1, Ordering::Relaxed);
            tracing::debug!(topic = %marker.name, %id, partition = p, "partition in the trash");
            // Leave the metadata store to other work part of the time: deletion is
            // background work and must not queue topic creation behind it (L4).
            folio_log::trash::pace(step.elapsed(), inner.config.deletion_busy_fraction).await;
            tokio::task::yield_now().await;
        }
        inner.groups.forget_topic(id).await?;
        inner.shares.forget_topic(id).await?;
        inner.env.meta.delete(&key, folio_meta::Expect::Any).await?;
        m.topics_deleted.fetch_add(1, Ordering::Relaxed);
        m.topic_deletions_pending.fetch_sub(1, Ordering::Relaxed);
        tracing::info!(topic = %marker.name, %id, partitions = marker.partitions, "topic data deleted (ledgers in the trash)");
        done += 1;
    }
    Ok(done)
}

/// Where one partition of a deleted topic is in its deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionDeletion {
    /// Its log still exists: the controller has not fenced and trashed it yet (a broker
    /// serving it stops at the latest when the fence lands).
    Pending,
    /// Its log is being moved to the trash in batches (too big for one transaction).
    Moving,
    /// Its log is gone; ledgers of it wait in the trash for the deleter.
    InTrash,
    /// Nothing of it is left in the metadata store (bookies' GC gives the disk back).
    Gone,
}

impl PartitionDeletion {
    /// The stage's name in status answers.
    pub fn name(self) -> &'static str {
        match self {
            PartitionDeletion::Pending => "pending",
            PartitionDeletion::Moving => "moving-to-trash",
            PartitionDeletion::InTrash => "in-trash",
            PartitionDeletion::Gone => "gone",
        }
    }
}

/// A topic deletion in progress, read from the metadata store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionProgress {
    /// Empty once the marker is gone (only trashed ledgers are left then).
    pub name: String,
    pub id: Uuid,
    /// Whether the controller still has the topic's marker.
    pub marker: bool,
    pub requested_ms: u64,
    /// Each partition known (from the marker, or from trashed ledgers).
    pub partitions: Vec<(i32, PartitionDeletion)>,
    /// Ledgers of the topic in the trash.
    pub ledgers_in_trash: u64,
    /// Bytes of the topic's ledgers not yet deleted (closed ledgers' lengths, in logs not
    /// yet trashed and in the trash).
    pub bytes_not_reclaimed: u64,
}

impl DeletionProgress {
    fn new(name: String, id: Uuid, marker: bool, requested_ms: u64) -> DeletionProgress {
        DeletionProgress {
            name,
            id,
            marker,
            requested_ms,
            partitions: Vec::new(),
            ledgers_in_trash: 0,
            bytes_not_reclaimed: 0,
        }
    }

    /// Partitions whose log is not in the trash yet.
    pub fn partitions_left(&self) -> usize {
        self.partitions
            .iter()
            .filter(|(_, s)| matches!(s, PartitionDeletion::Pending | PartitionDeletion::Moving))
            .count()
    }
}

/// Every topic deletion in progress: topics with a marker, and topics whose ledgers are
/// still in the trash. Reads only the metadata store.
pub async fn progress(
    env: &folio_log::LogEnv,
) -> Result<Vec<DeletionProgress>, crate::errors::BrokerError> {
    let mut out: std::collections::BTreeMap<Uuid, DeletionProgress> = Default::default();
    for (_, id, m) in markers(env).await? {
        let m = m?;
        let mut d = DeletionProgress::new(m.name, id, true, m.requested_ms);
        for p in 0..m.partitions as i32 {
            let key = env.keys.log(&log_name(id, p));
            let state = match env.meta.get(&key).await? {
                None => PartitionDeletion::Gone,
                Some(lv) => {
                    let r = folio_log::records::LogRecord::decode(&key, &lv.value)?;
                    d.bytes_not_reclaimed += r.ledgers.iter().map(|l| l.bytes).sum::<u64>();
                    if r.state == folio_log::records::LogRecordState::Deleting {
                        PartitionDeletion::Moving
                    } else {
                        PartitionDeletion::Pending
                    }
                }
            };
            d.partitions.push((p, state));
        }
        out.insert(id, d);
    }
    for t in folio_log::trash::list(env).await? {
        let Some((id, p)) = parse_log_name(&t.log) else { continue };
        // Retention also trashes ledgers of live topics: only deleted logs count.
        if t.reason != folio_log::trash::LOG_DELETED {
            continue;
        }
        let d = out
            .entry(id)
            .or_insert_with(|| DeletionProgress::new(String::new(), id, false, t.time_ms));
        d.ledgers_in_trash += 1;
        if let Ok(m) = env.client.metadata(t.ledger_id).await {
            d.bytes_not_reclaimed += m.length;
        }
        match d.partitions.iter_mut().find(|(q, _)| *q == p) {
            Some((_, s @ PartitionDeletion::Gone)) => *s = PartitionDeletion::InTrash,
            Some(_) => {}
            None => d.partitions.push((p, PartitionDeletion::InTrash)),
        }
    }
    for d in out.values_mut() {
        d.partitions.sort_unstable_by_key(|(p, _)| *p);
    }
    Ok(out.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_reject_damage() {
        let m = DeletionMarker { name: "orders".into(), partitions: 3, requested_ms: 9 };
        let b = m.encode();
        assert_eq!(DeletionMarker::decode("k", &b).unwrap(), m);
        for n in 0..b.len() {
            assert!(DeletionMarker::decode("k", &b[..n]).is_err());
        }
    }
}
