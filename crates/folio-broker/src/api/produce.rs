//! Produce: check each partition's record batches (v2 header, CRC, size, codec), queue
//! them on the partition's managed log in request order, and answer once every batch is
//! durable (acks=1 and acks=all both wait for the ledger's ack quorum: a broker holds no
//! data of its own, so there is no weaker "leader has it" point). acks=0 gets no answer;
//! a failure then closes the connection, as Kafka does.
//!
//! Queuing happens on the connection's task before the next request is read, so
//! pipelined produces to one partition keep their order; waiting happens in a task of its
//! own.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use folio_log::PendingAppend;
use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};

use crate::api::{first_error, str_bytes};
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::batch::{self, BatchError, Codec};
use crate::domain::producers::{Check, Outcome};
use crate::domain::quotas::Kind;
use crate::domain::topics::TimestampType;
use crate::errors::{self, BrokerError};
use crate::metrics::TopicMetrics;
use crate::state::Inner;
use tokio::sync::watch;

/// One batch on its way: an append, or (idempotent producers) an outcome to wait for.
enum Queued {
    Append(PendingAppend),
    Outcome(watch::Receiver<Outcome>),
}

impl Queued {
    async fn wait(self) -> Result<u64, (i16, String)> {
        match self {
            Queued::Append(a) => a.wait().await.map_err(|e| {
                let e = BrokerError::Log(e);
                (e.code(), e.to_string())
            }),
            Queued::Outcome(mut rx) => match rx.wait_for(Option::is_some).await {
                Ok(o) => match (*o).expect("waited for an outcome") {
                    Ok(offset) => Ok(offset as u64),
                    Err(code) => Err((code, format!("the append failed ({})", errors::name(code)))),
                },
                Err(_) => {
                    let e = BrokerError::Storage("the append was abandoned".into());
                    Err((e.code(), e.to_string()))
                }
            },
        }
    }
}

/// One partition's part of the answer: settled now, or waiting for its appends.
enum Part {
    Done(PartitionProduceResponse),
    Queued {
        index: i32,
        appends: Vec<Queued>,
        log_append_time: i64,
        log: folio_log::ManagedLog,
        bytes: u64,
        records: u64,
        batches: u64,
        metrics: Arc<TopicMetrics>,
        queued: Instant,
    },
}

/// A partition's answer failed with `e` (its code and message, and the records at fault).
fn failed(index: i32, e: &BrokerError) -> Part {
    let record_errors = match e {
        BrokerError::InvalidRecords { records, .. }
        | BrokerError::InvalidTimestamp { records, .. } => records
            .iter()
            .map(|i| BatchIndexAndErrorMessage::default().with_batch_index(*i))
            .collect(),
        _ => Vec::new(),
    };
    Part::Done(
        PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(e.code())
            .with_base_offset(-1)
            .with_record_errors(record_errors)
            .with_error_message(Some(str_bytes(e.to_string()))),
    )
}

/// Produce: every partition's batches checked (sizes, codec, Kafka's log validator),
/// enqueued on its log in the connection's order (`start`), then answered once the log
/// acknowledged them (or the request's timeout passed). acks=0 is never answered; an
/// error closes the connection instead.
pub(crate) struct Produce;

impl super::Handler for Produce {
    type Request = ProduceRequest;
    type Response = ProduceResponse;
    const KEY: ApiKey = ApiKey::Produce;

    async fn handle(inner: Arc<Inner>, version: i16, req: ProduceRequest) -> ProduceResponse {
        Self::start(inner, version, req).await.await
    }

    fn error(_version: i16, req: &ProduceRequest, code: i16) -> ProduceResponse {
        let e = || {
            PartitionProduceResponse::default()
                .with_error_code(code)
                .with_base_offset(-1)
                .with_error_message(Some(str_bytes(errors::name(code))))
        };
        let topics = req.topic_data.iter().map(|t| {
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partition_responses(
                    t.partition_data.iter().map(|p| e().with_index(p.index)).collect(),
                )
        });
        ProduceResponse::default().with_responses(topics.collect())
    }

    fn error_code(resp: &ProduceResponse) -> i16 {
        first_error(partition_codes(resp))
    }

    fn answered(req: &ProduceRequest) -> bool {
        req.acks != 0
    }

    async fn start(
        inner: Arc<Inner>,
        version: i16,
        req: ProduceRequest,
    ) -> impl Future<Output = ProduceResponse> + Send + 'static {
        let bytes = super::REQUEST.try_with(|r| r.request_bytes).unwrap_or(0);
        let throttle = super::quotas::throttle(&inner, Kind::Produce, bytes);
        let received = Instant::now();
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms as u64));
        let topics = enqueue(&inner, version, req).await;
        async move {
            let resp = settle(&inner, topics, timeout).await.with_throttle_time_ms(throttle);
            inner.metrics.produce_latency.observe(received.elapsed());
            resp
        }
    }
}

/// The in-order part of a Produce: each partition's batches checked and enqueued on its
/// log (the ones refused answered at once).
async fn enqueue(
    inner: &Arc<Inner>,
    version: i16,
    req: ProduceRequest,
) -> Vec<(TopicProduceResponse, Vec<Part>)> {
    let acks = req.acks;
    let transactional = req.transactional_id.clone();
    let mut topics: Vec<(TopicProduceResponse, Vec<Part>)> = Vec::new();
    let refuse = if !matches!(acks, -1..=1) {
        Some(BrokerError::InvalidRequiredAcks(acks))
    } else if let Some(code) = req
        .transactional_id
        .as_ref()
        .and_then(|id| super::init_producer_denied(inner, Some(id.as_str())))
    {
        Some(BrokerError::TransactionalIdAuthorization(code))
    } else {
        inner.metrics.produce_acks(acks);
        None
    };
    for t in req.topic_data {
        let head =
            TopicProduceResponse::default().with_name(t.name.clone()).with_topic_id(t.topic_id);
        let mut parts = Vec::with_capacity(t.partition_data.len());
        if let Some(e) = &refuse {
            parts.extend(t.partition_data.iter().map(|p| failed(p.index, e)));
            topics.push((head, parts));
            continue;
        }
        if !super::allowed(inner, Operation::Write, ResourceType::Topic, &t.name) {
            let e = BrokerError::TopicAuthorization { op: "write", topic: t.name.to_string() };
            parts.extend(t.partition_data.iter().map(|p| failed(p.index, &e)));
            topics.push((head, parts));
            continue;
        }
        let topic = match inner.topics.get(t.name.as_str()).await {
            Ok(Some(topic)) => topic,
            other => {
                let unknown = || BrokerError::UnknownTopic(t.name.to_string());
                let e = other.err().map_or_else(unknown, BrokerError::Meta);
                parts.extend(t.partition_data.iter().map(|p| failed(p.index, &e)));
                topics.push((head, parts));
                continue;
            }
        };
        let config = inner.topic_config(&topic);
        let metrics = inner.metrics.topic(&topic.name);
        // Closed partitions open together, not one after another.
        let closed = t.partition_data.iter().map(|p| (&topic, p.index));
        let mut failed = inner.open_all(closed).await;
        for p in t.partition_data {
            let open_failed = failed.remove(&(topic.record.id, p.index));
            let part = enqueue_partition(
                inner,
                (version, transactional.as_ref().map(|t| t.as_str())),
                &topic,
                &config,
                &metrics,
                p,
                open_failed,
            );
            parts.push(part.await);
        }
        topics.push((head, parts));
    }
    topics
}

/// `topic`'s partition `index`, unless opening it failed already (`open_failed`, from
/// `Inner::open_all`).
async fn partition_of(
    inner: &Inner,
    topic: &crate::domain::topics::Topic,
    index: i32,
    open_failed: Option<folio_log::LogError>,
) -> Result<Arc<crate::state::Partition>, folio_log::LogError> {
    match open_failed {
        Some(e) => Err(e),
        None => inner.partition(topic, index).await,
    }
}

/// One partition's batches checked and enqueued on its log: `Part::Queued`, or the
/// partition's failure (`open_failed`: opening it failed already, in `Inner::open_all`).
async fn enqueue_partition(
    inner: &Arc<Inner>,
    (version, transactional_id): (i16, Option<&str>),
    topic: &crate::domain::topics::Topic,
    config: &crate::domain::topics::TopicConfig,
    metrics: &Arc<TopicMetrics>,
    p: PartitionProduceData,
    open_failed: Option<folio_log::LogError>,
) -> Part {
    let records = p.records.unwrap_or_default();
    let opened = prepare(
        inner,
        (version, transactional_id),
        topic,
        config,
        (&records, p.index),
        open_failed,
    );
    let (batches, partition) = match opened.await {
        Ok(b) => b,
        Err(e) => return failed(p.index, &e),
    };
    let log = partition.log.clone();
    let log_append_time = match config.timestamp_type {
        TimestampType::LogAppendTime => inner.now_ms(),
        TimestampType::CreateTime => -1,
    };
    let mut appends = Vec::with_capacity(batches.len());
    let (mut bytes, mut n) = (0u64, 0u64);
    let mut error = None;
    for (info, b) in &batches {
        // A transactional batch is checked and queued under the partition's order with
        // markers (`Partition::txn_order`).
        let _order =
            if info.is_transactional() { Some(partition.txn_order.lock().await) } else { None };
        // Idempotent producers: a retry is answered with the original's outcome,
        // a gap or an old epoch is refused.
        let publish = if info.is_idempotent() {
            match partition.check_batch(info, inner.now_ms()) {
                Check::Append(tx) => Some(tx),
                Check::Duplicate(rx) => {
                    metrics.duplicate_batches.fetch_add(1, Ordering::Relaxed);
                    appends.push(Queued::Outcome(rx));
                    continue;
                }
                Check::Refuse(e) => {
                    tracing::info!(topic = %topic.name, partition = p.index, error = %e, "idempotent batch refused");
                    error = Some(e);
                    break;
                }
            }
        } else {
            None
        };
        partition.transactional_queued(info, inner.env.now_ms());
        let queued = if log_append_time >= 0 {
            let mut owned = b.to_vec();
            batch::set_log_append_time(&mut owned, log_append_time);
            log.append_enqueue(&owned, info.offsets(), log_append_time).await
        } else {
            log.append_enqueue(b, info.offsets(), info.max_timestamp).await
        };
        match (queued, publish) {
            (Ok(a), None) => appends.push(Queued::Append(a)),
            (Ok(a), Some(tx)) => {
                appends.push(Queued::Outcome(publish_outcome(&partition, info, a, tx)))
            }
            (Err(e), publish) => {
                if publish.is_some() {
                    partition.forget_batch(info.producer_id, info.base_sequence);
                }
                error = Some(BrokerError::Log(e));
                break;
            }
        }
        bytes += info.size as u64;
        n += info.records_count as u64;
    }
    if let Some(e) = error {
        // Batches queued before the failure may still land; the client retries
        // the whole partition (as after any Kafka produce error).
        return failed(p.index, &e);
    }
    Part::Queued {
        index: p.index,
        appends,
        log_append_time,
        log,
        bytes,
        records: n,
        batches: batches.len() as u64,
        metrics: metrics.clone(),
        queued: Instant::now(),
    }
}

/// A partition that exists, its batches checked (`to_append`), the partition opened here
/// (unless that failed already: `open_failed`), and a transaction's first batch verified
/// (`verify`).
async fn prepare(
    inner: &Inner,
    (version, transactional_id): (i16, Option<&str>),
    topic: &crate::domain::topics::Topic,
    config: &crate::domain::topics::TopicConfig,
    (records, index): (&Bytes, i32),
    open_failed: Option<folio_log::LogError>,
) -> Result<(Vec<(batch::BatchInfo, Bytes)>, Arc<crate::state::Partition>), BrokerError> {
    if index < 0 || index >= topic.record.partitions as i32 {
        return Err(BrokerError::UnknownPartition {
            topic: topic.name.clone(),
            partition: index,
            partitions: topic.record.partitions,
        });
    }
    let batches = to_append(records, (version, transactional_id.is_some()), config, inner)?;
    if config.schema_validation() {
        check_schema_ids(inner, config, &batches).await?;
    }
    let partition =
        partition_of(inner, topic, index, open_failed).await.map_err(BrokerError::Log)?;
    if let Some(id) = transactional_id {
        verify(inner, (id, version), &partition, &batches, (&topic.name, index)).await?;
    }
    Ok((batches, partition))
}

/// A topic with schema validation: every checked key or value names a registered schema
/// (`domain::schema_ids`), else the batch is refused as INVALID_RECORD, the records at
/// fault named.
async fn check_schema_ids(
    inner: &Inner,
    config: &crate::domain::topics::TopicConfig,
    batches: &[(batch::BatchInfo, Bytes)],
) -> Result<(), BrokerError> {
    use crate::domain::schema_ids::{Named, named};
    let which = (config.key_schema_validation, config.value_schema_validation);
    let mut ids = std::collections::BTreeSet::new();
    for (info, b) in batches {
        match named(b, info, which).map_err(|e| BrokerError::CorruptMessage(e.0))? {
            Named::Ids(found) => ids.extend(found),
            Named::NotFramed(records) => {
                return Err(BrokerError::InvalidRecords {
                    message: format!(
                        "the topic validates schema ids: {} records lack the registry's framing \
                         (magic byte 0, a 4-byte schema id)",
                        records.len()
                    ),
                    records,
                });
            }
        }
    }
    let missing = inner
        .schema_ids
        .unregistered(&ids)
        .await
        .map_err(|e| BrokerError::background("looking up schema ids in the registry", e))?;
    if !missing.is_empty() {
        return Err(BrokerError::InvalidRecord(format!(
            "the topic validates schema ids: ids {missing:?} are not in the schema registry"
        )));
    }
    Ok(())
}

/// Kafka's transaction verification (3.6+): the first transactional batch of each of a
/// producer's transactions on a partition is appended only if the coordinator's record
/// has that transaction ongoing, at that producer id and epoch, with the partition in it.
/// So a client that skipped AddPartitionsToTxn (or a late batch of a transaction that
/// ended) cannot open a transaction no marker will ever end, holding the last stable
/// offset back for good. Later batches of the same transaction find it open here.
async fn verify(
    inner: &Inner,
    (id, version): (&str, i16),
    partition: &crate::state::Partition,
    batches: &[(batch::BatchInfo, Bytes)],
    (topic, index): (&str, i32),
) -> Result<(), BrokerError> {
    let code =
        if version >= 11 { errors::TRANSACTION_ABORTABLE } else { errors::INVALID_TXN_STATE };
    for (info, _) in batches {
        if partition.txns.lock().expect("txns lock").is_open(info.producer_id, info.producer_epoch)
        {
            continue;
        }
        if version >= 12 {
            // Transaction version 2: the partition joins the transaction here.
            let who = (info.producer_id, info.producer_epoch);
            implicit_add(inner, id, who, (topic, index)).await?;
            continue;
        }
        let record = inner.txns.load(id).await.map_err(BrokerError::Meta)?;
        if let Some((r, _)) = &record
            && r.producer_id == info.producer_id
            && r.epoch > info.producer_epoch
        {
            // A newer epoch fenced this producer (a zombie): Kafka's answer, fatal to the
            // client, not an abortable one (librdkafka's 0103 "produce after fence").
            return Err(BrokerError::Transaction(
                errors::INVALID_PRODUCER_EPOCH,
                format!(
                    "producer {} epoch {} of {id} is fenced by epoch {}",
                    info.producer_id, info.producer_epoch, r.epoch
                ),
            ));
        }
        let ok = record.is_some_and(|(r, _)| {
            r.state == crate::domain::txn::TxnState::Ongoing
                && (r.producer_id, r.epoch) == (info.producer_id, info.producer_epoch)
                && r.partitions.iter().any(|(t, p)| t == topic && *p == index)
        });
        if !ok {
            return Err(BrokerError::Transaction(
                code,
                format!(
                    "{topic} partition {index} is not in an ongoing transaction of {id} at producer {} epoch {} (AddPartitionsToTxn first)",
                    info.producer_id, info.producer_epoch
                ),
            ));
        }
    }
    Ok(())
}

/// Produce v12 (transaction version 2): adds the partition to `id`'s transaction at the
/// producer's id and epoch (opening it), retrying a transaction still ending for up to
/// `TXN_IMPLICIT_ADD_WAIT` as Kafka's `add.partitions.to.txn.max.timeout.ms`.
async fn implicit_add(
    inner: &Inner,
    id: &str,
    who: (i64, i16),
    (topic, index): (&str, i32),
) -> Result<(), BrokerError> {
    let deadline = tokio::time::Instant::now() + crate::limits::TXN_IMPLICIT_ADD_WAIT;
    let added = [(topic.to_string(), index)];
    loop {
        let r = match inner.txns.add(id, who, (&added, &[]), inner.env.now_ms(), true).await {
            Ok(()) => return Ok(()),
            Err(r) => r,
        };
        if r.code != errors::CONCURRENT_TRANSACTIONS || tokio::time::Instant::now() >= deadline {
            // A fenced epoch is a late batch of an ended transaction: Kafka's answer.
            let code = if r.code == errors::PRODUCER_FENCED {
                errors::INVALID_PRODUCER_EPOCH
            } else {
                r.code
            };
            return Err(BrokerError::Transaction(code, r.why));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Publishes an idempotent batch's outcome when its append `a` settles, whoever waits for
/// it (a retry too): its offset (a transactional batch's also moves its transaction's
/// start there), or the failure, after which the batch is forgotten so its retry is
/// appended.
fn publish_outcome(
    partition: &Arc<crate::state::Partition>,
    info: &batch::BatchInfo,
    a: PendingAppend,
    tx: watch::Sender<Outcome>,
) -> watch::Receiver<Outcome> {
    let (partition, pid, seq) = (partition.clone(), info.producer_id, info.base_sequence);
    let transactional = info.is_transactional();
    let rx = tx.subscribe();
    tokio::spawn(async move {
        let outcome = match a.wait().await {
            Ok(offset) => {
                if transactional {
                    partition.txns.lock().expect("txns lock").batch_landed(pid, offset as i64);
                }
                Ok(offset as i64)
            }
            Err(e) => {
                partition.forget_batch(pid, seq);
                Err(BrokerError::Log(e).code())
            }
        };
        tx.send_replace(Some(outcome));
    });
    rx
}

/// A partition's records as the batches to append: split, checked (`check`) and
/// recompressed as the topic says (`recompress`).
fn to_append(
    records: &Bytes,
    (version, transactional): (i16, bool),
    config: &crate::domain::topics::TopicConfig,
    inner: &Inner,
) -> Result<Vec<(batch::BatchInfo, Bytes)>, BrokerError> {
    let batches =
        batch::split(records, inner.config.batches_per_partition_max).map_err(|e| match e {
            BatchError::Corrupt(_) => BrokerError::CorruptMessage(e.to_string()),
            BatchError::Invalid(_) => BrokerError::InvalidRecord(e.to_string()),
        })?;
    if let Some(e) = check(&batches, (version, transactional), config, inner) {
        return Err(e);
    }
    recompress(batches, config.compression, version)
}

/// A topic's `compression.type` other than `producer`: each batch sent with another codec
/// is stored recompressed (its records, sequence and timestamps unchanged). As in Kafka, a
/// topic that stores zstd takes only Produce v7 or later.
fn recompress(
    batches: Vec<(batch::BatchInfo, Bytes)>,
    target: Option<Codec>,
    version: i16,
) -> Result<Vec<(batch::BatchInfo, Bytes)>, BrokerError> {
    let Some(target) = target else { return Ok(batches) };
    if target == Codec::Zstd && version < 7 {
        return Err(BrokerError::UnsupportedCompression(
            "the topic's compression.type=zstd needs Produce v7 or later".into(),
        ));
    }
    batches
        .into_iter()
        .map(|(info, b)| {
            if info.codec() == Ok(target) {
                return Ok((info, b));
            }
            let stored = crate::domain::records::recompressed(&b, target)
                .map_err(|e| BrokerError::CorruptMessage(e.to_string()))?;
            let attributes = (info.attributes & !7) | target.bits();
            Ok((batch::BatchInfo { attributes, size: stored.len(), ..info }, Bytes::from(stored)))
        })
        .collect()
}

/// Size, codec and kind checks of one partition's batches, then Kafka's log validator on
/// each (`records::validate`: every record walked, against the header and the topic's
/// timestamp and key rules). With `validate_records` off (benchmarks), only the header
/// checks and, on a compacted topic, the keys.
fn check(
    batches: &[(batch::BatchInfo, Bytes)],
    (version, transactional): (i16, bool),
    config: &crate::domain::topics::TopicConfig,
    inner: &Inner,
) -> Option<BrokerError> {
    let max_message_bytes = config.max_message_bytes;
    let validate_records = inner.config.validate_records;
    let rules = crate::domain::records::Rules {
        now_ms: inner.now_ms(),
        create_time: config.timestamp_type == TimestampType::CreateTime,
        before_max_ms: config.timestamp_before_max_ms,
        after_max_ms: config.timestamp_after_max_ms,
        keys_required: config.cleanup_compact,
    };
    for (info, b) in batches {
        if info.size > max_message_bytes as usize {
            return Some(BrokerError::MessageTooLarge(format!(
                "a batch of {} bytes is above max.message.bytes={max_message_bytes}",
                info.size
            )));
        }
        match info.codec() {
            Ok(Codec::Zstd) if version < 7 => {
                return Some(BrokerError::UnsupportedCompression(
                    "zstd needs Produce v7 or later".into(),
                ));
            }
            Ok(_) => {}
            Err(e) => return Some(BrokerError::CorruptMessage(e.to_string())),
        }
        if info.is_control() {
            return Some(BrokerError::InvalidRecord(
                "a control batch is written by the transaction coordinator, not produced".into(),
            ));
        }
        if info.is_transactional() != transactional {
            return Some(BrokerError::InvalidRecord(if transactional {
                "a produce with a transactional id carries transactional batches only".into()
            } else {
                "a transactional batch needs the producer's transactional id in the request".into()
            }));
        }
        if info.is_transactional() && !info.is_idempotent() {
            return Some(BrokerError::InvalidRecord(
                "a transactional batch carries its producer id".into(),
            ));
        }
        // The log assigns offsets: a client's batch starts at 0 (Kafka's rule).
        let base_offset = i64::from_be_bytes(b[..8].try_into().expect("a parsed batch"));
        if base_offset != 0 {
            return Some(BrokerError::InvalidRecord(format!(
                "a produced batch has base offset 0, not {base_offset}"
            )));
        }
        if info.is_idempotent() && info.base_sequence < 0 {
            return Some(BrokerError::InvalidRecord(format!(
                "producer {} sent base sequence {}; an idempotent batch numbers from 0",
                info.producer_id, info.base_sequence
            )));
        }
        if !validate_records {
            if config.cleanup_compact
                && let Some(e) = keyless(b, info)
            {
                return Some(e);
            }
            continue;
        }
        match crate::domain::records::validate(b, info, &rules) {
            Ok(()) => {}
            Err(crate::domain::records::Refusal::Corrupt(e)) => {
                return Some(BrokerError::CorruptMessage(e));
            }
            Err(crate::domain::records::Refusal::Records { message, records, timestamp: true }) => {
                return Some(BrokerError::InvalidTimestamp { message, records });
            }
            Err(crate::domain::records::Refusal::Records {
                message,
                records,
                timestamp: false,
            }) => {
                return Some(BrokerError::InvalidRecords { message, records });
            }
        }
    }
    None
}

/// The keyless records of a batch for a compacted topic, as an error (`None`: every record
/// has a key). Only with record validation off; `records::validate` checks keys itself.
fn keyless(b: &[u8], info: &batch::BatchInfo) -> Option<BrokerError> {
    let keyless = crate::domain::records::records_bytes(b).and_then(|(h, plain)| {
        let records = crate::domain::records::decode_records(&h, &plain)?;
        Ok(records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.key.is_none())
            .map(|(i, _)| i as i32)
            .collect::<Vec<i32>>())
    });
    match keyless {
        Ok(k) if k.is_empty() => None,
        Ok(records) => Some(BrokerError::InvalidRecords {
            message: format!(
                "compacted topic cannot accept a record without a key ({} of the batch's {})",
                records.len(),
                info.records_count
            ),
            records,
        }),
        Err(e) => Some(BrokerError::CorruptMessage(e.to_string())),
    }
}

/// Waits for every queued append and builds the answer.
async fn settle(
    inner: &Inner,
    topics: Vec<(TopicProduceResponse, Vec<Part>)>,
    timeout: Option<Duration>,
) -> ProduceResponse {
    let mut resp = ProduceResponse::default();
    for (mut head, parts) in topics {
        for part in parts {
            let r = match part {
                Part::Done(r) => r,
                Part::Queued {
                    index,
                    appends,
                    log_append_time,
                    log,
                    bytes,
                    records,
                    batches,
                    metrics,
                    queued,
                } => {
                    let wait = async {
                        let mut base = None;
                        for a in appends {
                            let offset = a.wait().await?;
                            base.get_or_insert(offset);
                        }
                        Ok::<_, (i16, String)>(base.unwrap_or(0))
                    };
                    let waited = match timeout {
                        Some(t) => tokio::time::timeout(t, wait).await.ok(),
                        None => Some(wait.await),
                    };
                    match waited {
                        None => PartitionProduceResponse::default()
                            .with_index(index)
                            .with_error_code(errors::REQUEST_TIMED_OUT)
                            .with_base_offset(-1)
                            .with_error_message(Some(str_bytes(
                                "not durable within the request timeout",
                            ))),
                        Some(Err((code, msg))) => {
                            tracing::warn!(log = log.name(), error = %msg, "produce failed");
                            PartitionProduceResponse::default()
                                .with_index(index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                                .with_error_message(Some(str_bytes(msg)))
                        }
                        Some(Ok(base)) => {
                            metrics.bytes_in.fetch_add(bytes, Ordering::Relaxed);
                            metrics.records_in.fetch_add(records, Ordering::Relaxed);
                            metrics.batches_in.fetch_add(batches, Ordering::Relaxed);
                            metrics.produce_latency.observe(queued.elapsed());
                            inner.metrics.bytes_in.fetch_add(bytes, Ordering::Relaxed);
                            PartitionProduceResponse::default()
                                .with_index(index)
                                .with_base_offset(base as i64)
                                .with_log_append_time_ms(log_append_time)
                                .with_log_start_offset(log.start_offset() as i64)
                        }
                    }
                }
            };
            head.partition_responses.push(r);
        }
        resp.responses.push(head);
    }
    resp
}

fn partition_codes(resp: &ProduceResponse) -> impl Iterator<Item = i16> + '_ {
    resp.responses.iter().flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
}

/// InitProducerId with a transactional id, at its coordinator (`domain::txn`): the id's
/// producer id and its next epoch, an open transaction aborted first.
async fn init_transactional(
    inner: &Arc<Inner>,
    version: i16,
    id: &str,
    req: &kafka_protocol::messages::InitProducerIdRequest,
) -> kafka_protocol::messages::InitProducerIdResponse {
    use kafka_protocol::messages::{InitProducerIdResponse, ProducerId};
    if let Some(code) = super::transactions::txn_elsewhere(inner, id) {
        return InitProducerIdResponse::default().with_error_code(code);
    }
    let expected = if version >= 3 { (req.producer_id.0, req.producer_epoch) } else { (-1, -1) };
    let now = inner.env.now_ms();
    let new_id = async || super::transactions::new_producer_id(inner).await;
    match inner.txns.init_producer(id, req.transaction_timeout_ms, expected, now, new_id).await {
        Ok((pid, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        Err(r) => {
            if r.code == errors::CONCURRENT_TRANSACTIONS {
                inner.txns_ending.notify_one();
            }
            tracing::info!(transactional_id = %id, code = errors::name(r.code), why = %r.why, "InitProducerId refused");
            let code = if r.code == errors::PRODUCER_FENCED && version < 4 {
                errors::INVALID_PRODUCER_EPOCH
            } else {
                r.code
            };
            InitProducerIdResponse::default().with_error_code(code)
        }
    }
}

/// InitProducerId: for idempotent producers a producer id unique in the cluster, epoch 0,
/// as Kafka issues them without a transactional id (an id and epoch in the request, v3+,
/// are not taken over); with a transactional id, the coordinator's (`init_transactional`).
pub(crate) struct InitProducerId;

impl crate::api::Handler for InitProducerId {
    type Request = kafka_protocol::messages::InitProducerIdRequest;
    type Response = kafka_protocol::messages::InitProducerIdResponse;
    const KEY: ApiKey = ApiKey::InitProducerId;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::init_producer_denied(inner, req.transactional_id.as_ref().map(|t| t.as_str()))
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: Self::Request) -> Self::Response {
        use kafka_protocol::messages::ProducerId;
        let resp = Self::Response::default();
        if let Some(id) = &req.transactional_id {
            return init_transactional(&inner, version, id.as_str(), &req).await;
        }
        // Kafka's rule without a transactional id: a new producer id, epoch 0, whatever id
        // and epoch the request names (v3+ lets a client ask to bump its own; honouring
        // that unchecked let any client take over any producer id's sequence).
        if req.producer_id.0 >= 0 {
            tracing::debug!(
                producer_id = req.producer_id.0,
                epoch = req.producer_epoch,
                "InitProducerId names an id: a new one is issued (no transactional id)"
            );
        }
        match super::transactions::new_producer_id(&inner).await {
            Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
            Err(r) => resp.with_error_code(r.code),
        }
    }

    error_answer_of!(top);

    error_code_of!(top);
}
