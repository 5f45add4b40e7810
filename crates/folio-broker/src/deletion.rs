//! Topic deletion, in two phases.
//!
//! 1. DeleteTopics commits, per request, transactions that remove each topic's record (the
//!    name → id binding, compared on its version) and write a deletion marker keyed by the
//!    topic id; it answers once they are durable. From then on the name is free (a new
//!    topic of that name gets a new id, so new log names: it starts empty) and produce and
//!    fetch answer UNKNOWN_TOPIC_OR_PARTITION (by name) or UNKNOWN_TOPIC_ID (by id).
//! 2. The controller (the live broker with the lowest node id) works through the markers
//!    topic by topic, partition by partition: each partition's managed log is deleted
//!    through the trash (`folio_log::trash::delete_log` fences its last ledger first, so an
//!    owner that still appends is stopped: nothing more is acknowledged in it), then the
//!    topic's committed group offsets are removed, then the marker. A controller that dies
//!    leaves the markers; the next one resumes them.
//!
//! ```text
//! DeletionMarker  "FTD" 1 | name str | partitions u32 | requested_ms u64
//!                 at <root>/topic-deletions/<topic id hex>
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_meta::records::{Reader, Record, corrupt, put_string};
use folio_meta::{MetaError, Txn, list_all};
use uuid::Uuid;

use crate::broker::Inner;
use crate::topics::{Topic, log_name};

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

/// Topics per transaction (a compare, a delete and a put each; etcd allows 128 operations).
const TOPICS_PER_TXN: usize = 40;

/// Phase 1: unbinds the topics' names and writes their markers. A topic changed since it
/// was read fails with `Conflict` (the caller answers with an error; nothing is deleted).
pub(crate) async fn unbind(inner: &Inner, topics: &[Arc<Topic>]) -> Result<(), MetaError> {
    let now = inner.now_ms() as u64;
    for chunk in topics.chunks(TOPICS_PER_TXN) {
        let mut txn = Txn::new();
        for t in chunk {
            let key = inner.env.keys.topic(&t.name);
            let marker = DeletionMarker {
                name: t.name.clone(),
                partitions: t.record.partitions,
                requested_ms: now,
            };
            txn =
                txn.compare(folio_meta::Compare::Version(key.clone(), t.version)).delete(key).put(
                    inner.env.keys.topic_deletion(&t.record.id.simple().to_string()),
                    marker.encode(),
                );
        }
        let out = inner.env.meta.txn(txn).await?;
        if !out.succeeded {
            return Err(MetaError::Conflict { key: "a topic changed while being deleted".into() });
        }
        for t in chunk {
            inner.topics.forget(&t.name);
            tracing::info!(topic = %t.name, id = %t.record.id, partitions = t.record.partitions, "topic deleted (name unbound; data deletion queued)");
        }
    }
    inner.deletions.notify_one();
    Ok(())
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
            tracing::warn!(error = %e, "topic deletion pass failed; retrying");
        }
    }
}

/// One pass over every marker: each topic's partitions, then its group offsets, then the
/// marker. Returns how many topics were finished.
pub(crate) async fn pass(inner: &Arc<Inner>) -> Result<usize, String> {
    let prefix = inner.env.keys.topic_deletions();
    let markers = list_all(inner.env.meta.as_ref(), &prefix).await.map_err(|e| e.to_string())?;
    let mut done = 0;
    for v in markers {
        let Ok(id) = Uuid::try_parse(&v.key[prefix.len()..]) else { continue };
        let marker = DeletionMarker::decode(&v.key, &v.value).map_err(|e| e.to_string())?;
        inner
            .metrics
            .partitions_being_deleted
            .store(u64::from(marker.partitions), std::sync::atomic::Ordering::Relaxed);
        for p in 0..marker.partitions as i32 {
            inner.forget_partition(id, p).await;
            let reason = format!("topic {} ({id}) deleted", marker.name);
            folio_log::trash::delete_log(&inner.env, &log_name(id, p), &reason)
                .await
                .map_err(|e| format!("deleting partition {p} of {}: {e}", marker.name))?;
            inner
                .metrics
                .partitions_being_deleted
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            // Let other work run between partitions.
            tokio::task::yield_now().await;
        }
        inner.groups.forget_topic(id).await.map_err(|e| e.to_string())?;
        inner.env.meta.delete(&v.key, folio_meta::Expect::Any).await.map_err(|e| e.to_string())?;
        inner.metrics.topics_deleted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(topic = %marker.name, %id, partitions = marker.partitions, "topic data deleted (ledgers in the trash)");
        done += 1;
    }
    Ok(done)
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
