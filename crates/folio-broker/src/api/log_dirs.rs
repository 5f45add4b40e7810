//! DescribeLogDirs: a Folio broker has no log directories; a partition's data lives in the
//! ledger directories of the bookies its ledgers were placed on. So every broker answers
//! with one "log dir" per bookie (`<bookie id>:ledgers`: the writable bookies and any bookie
//! a listed ledger names), and under it each partition with a copy there: its size is the
//! bytes of its ledgers whose ensembles hold the bookie, times the share of entries each
//! ensemble member stores (write quorum / ensemble size). Offset lag is always 0 (no
//! follower catches up), there are no future replicas, and disk totals are unknown (-1).
//!
//! Each partition's chain is read from its log record (or the open log, whose last ledger's
//! bytes only its owner knows), each ledger's ensembles from its metadata: at most
//! [`LOG_DIRS_LEDGERS_MAX`] ledgers per request; the partitions beyond are left out (and
//! logged). DESCRIBE on the cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use folio_log::records::{LedgerInfo, LogRecord};
use folio_meta::records::Record;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName,
};

use crate::api::{Handler, str_bytes};
use crate::domain::acl::Operation;
use crate::domain::topics::log_name;
pub use crate::limits::LOG_DIRS_LEDGERS_MAX;
use crate::state::Inner;

pub(crate) struct DescribeLogDirs;

/// Bytes per bookie of one partition.
type Sizes = BTreeMap<String, i64>;

impl Handler for DescribeLogDirs {
    type Request = DescribeLogDirsRequest;
    type Response = DescribeLogDirsResponse;
    const KEY: ApiKey = ApiKey::DescribeLogDirs;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Describe)
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DescribeLogDirsRequest,
    ) -> DescribeLogDirsResponse {
        let wanted: Vec<(String, Option<Vec<i32>>)> = match &req.topics {
            Some(ts) => {
                ts.iter().map(|t| (t.topic.to_string(), Some(t.partitions.clone()))).collect()
            }
            None => match inner.topics.list().await {
                Ok(all) => all.iter().map(|t| (t.name.clone(), None)).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "DescribeLogDirs: listing topics failed");
                    return Self::error(0, &req, crate::errors::KAFKA_STORAGE_ERROR);
                }
            },
        };
        let mut bookies: BTreeMap<String, Vec<(String, i32, i64)>> = BTreeMap::new();
        for b in inner.env.client.writable_bookies().await.unwrap_or_default() {
            bookies.entry(b).or_default();
        }
        let mut budget = LOG_DIRS_LEDGERS_MAX;
        for (name, partitions) in wanted {
            let Ok(Some(topic)) = inner.topics.get(&name).await else { continue };
            let all: Vec<i32> = (0..topic.record.partitions as i32).collect();
            for p in partitions.unwrap_or(all) {
                if !(0..topic.record.partitions as i32).contains(&p) {
                    continue;
                }
                let Some(sizes) = partition_sizes(&inner, topic.record.id, p, &mut budget).await
                else {
                    tracing::warn!(topic = %name, partition = p, "DescribeLogDirs: more than LOG_DIRS_LEDGERS_MAX ledgers; the rest is left out");
                    return answer(bookies);
                };
                for (bookie, bytes) in sizes {
                    bookies.entry(bookie).or_default().push((name.clone(), p, bytes));
                }
            }
        }
        answer(bookies)
    }

    fn error(_version: i16, _req: &DescribeLogDirsRequest, code: i16) -> DescribeLogDirsResponse {
        DescribeLogDirsResponse::default().with_error_code(code)
    }

    error_code_of!(top, [results]);
}

/// The answer: one result per bookie with its partitions grouped by topic.
fn answer(bookies: BTreeMap<String, Vec<(String, i32, i64)>>) -> DescribeLogDirsResponse {
    let results = bookies.into_iter().map(|(bookie, parts)| {
        let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
        for (topic, p, bytes) in parts {
            topics.entry(topic).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(p)
                    .with_partition_size(bytes)
                    .with_offset_lag(0),
            );
        }
        let topics = topics.into_iter().map(|(name, partitions)| {
            DescribeLogDirsTopic::default()
                .with_name(TopicName(str_bytes(&name)))
                .with_partitions(partitions)
        });
        DescribeLogDirsResult::default()
            .with_log_dir(str_bytes(format!("{bookie}:ledgers")))
            .with_topics(topics.collect())
            .with_total_bytes(-1)
            .with_usable_bytes(-1)
    });
    DescribeLogDirsResponse::default().with_results(results.collect())
}

/// The bytes of partition `p` of topic `id` on each bookie; `None` past the ledger budget.
async fn partition_sizes(
    inner: &Inner,
    id: uuid::Uuid,
    p: i32,
    budget: &mut usize,
) -> Option<Sizes> {
    let ledgers: Vec<LedgerInfo> = match inner.open_log(id, p) {
        Some(log) => log.info().ledgers,
        None => {
            let key = inner.env.keys.log(&log_name(id, p));
            match inner.env.meta.get(&key).await {
                Ok(Some(v)) => {
                    LogRecord::decode(&key, &v.value).map(|r| r.ledgers).unwrap_or_default()
                }
                _ => Vec::new(),
            }
        }
    };
    let mut sizes = Sizes::new();
    for l in ledgers {
        *budget = budget.checked_sub(1)?;
        let Ok(m) = inner.env.client.metadata(l.ledger_id).await else { continue };
        let share = f64::from(m.write_quorum) / f64::from(m.ensemble_size.max(1));
        let members: std::collections::BTreeSet<&String> = m.ensembles.values().flatten().collect();
        for b in members {
            *sizes.entry(b.clone()).or_default() += (l.bytes as f64 * share) as i64;
        }
    }
    Some(sizes)
}
