//! Transactions on the wire, with a raw client: what the coordinator and the partitions
//! refuse (a batch outside its transaction, a late EndTxn of a fenced epoch), and that the
//! state and the aborted transactions survive a new broker (#49).

// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

use crate::common;

use common::*;
use folio_broker::errors;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TXN_ID: &str = "wire-tx";

fn txn_id() -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(TXN_ID))
}

/// `b` as a transactional batch (attributes bit 4) of producer `pid` at `epoch`.
fn transactional(b: Vec<u8>, pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
    let mut b = b;
    b[21..23].copy_from_slice(&(1i16 << 4).to_be_bytes());
    idempotent(b, pid, epoch, seq)
}

async fn init(c: &mut Conn) -> InitProducerIdResponse {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id()))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    c.call(ApiKey::InitProducerId, 4, &req).await
}

/// InitProducerId until the previous transaction's markers are written.
async fn init_settled(c: &mut Conn) -> (i64, i16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = init(c).await;
        if r.error_code != errors::CONCURRENT_TRANSACTIONS {
            assert_eq!(r.error_code, errors::NONE, "{r:?}");
            return (r.producer_id.0, r.producer_epoch);
        }
        assert!(std::time::Instant::now() < deadline, "the last transaction never ended");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn add_partition(c: &mut Conn, topic: &str, (pid, epoch): (i64, i16)) -> i16 {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id())
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_partitions(vec![0]),
        ]);
    let r: AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 3, &req).await;
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

async fn end_txn(c: &mut Conn, version: i16, (pid, epoch): (i64, i16), commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id())
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = c.call(ApiKey::EndTxn, version, &req).await;
    r.error_code
}

fn txn_produce(topic: &str, records: Vec<u8>) -> ProduceRequest {
    produce_req(topic, 0, records, -1).with_transactional_id(Some(txn_id()))
}

/// The read_committed last stable offset of partition 0 of `topic`.
async fn lso(c: &mut Conn, topic: &str) -> i64 {
    let req = list_offsets_req(topic, -1).with_isolation_level(1);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req).await;
    r.topics[0].partitions[0].offset
}

/// DescribeProducers' `current_txn_start_offset` of producer `pid` on partition 0 of `topic`.
async fn txn_start(c: &mut Conn, topic: &str, pid: i64) -> i64 {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    let req = DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_indexes(vec![0]),
    ]);
    let r: DescribeProducersResponse = c.call(ApiKey::DescribeProducers, 0, &req).await;
    let p = &r.topics[0].partitions[0];
    p.active_producers
        .iter()
        .find(|s| s.producer_id.0 == pid)
        .expect("tracked")
        .current_txn_start_offset
}

/// A read_committed fetch of partition 0 of `topic` from 0: (base offsets of the records,
/// aborted transactions as (producer id, first offset), last stable offset).
async fn fetch_committed(
    c: &mut Conn,
    topic: &str,
    id: uuid::Uuid,
) -> (Vec<i64>, Vec<(i64, i64)>, i64) {
    let req = fetch_req(topic, id, 0).with_isolation_level(1);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await;
    let p = &r.responses[0].partitions[0];
    let aborted = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    (base_offsets(p.records.as_deref().unwrap_or_default()), aborted, p.last_stable_offset)
}

/// #49 items 1, 2 and 5: a transactional batch for a partition its transaction does not
/// hold is refused (Kafka's transaction verification: INVALID_TXN_STATE, and
/// TRANSACTION_ABORTABLE at Produce v11) and holds nothing back; one after
/// AddPartitionsToTxn holds the last stable offset until EndTxn's marker; a second
/// InitProducerId fences the producer, aborting its open transaction at the next epoch,
/// and the fenced producer's late EndTxn is refused (PRODUCER_FENCED; INVALID_PRODUCER_EPOCH
/// before EndTxn v2) and its late batch too; read_committed then reads around the aborted
/// transaction, which it is told of. A new broker finds the same state: the retried commit
/// of a finished transaction is answered as done, and the aborted transaction is still
/// reported.
#[tokio::test]
async fn the_coordinator_fences_late_requests_and_partitions_keep_the_aborted_index() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let topic = "wire-txn";
    let meta: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[topic])).await;
    let topic_id = meta.topics[0].topic_id;
    let (pid, epoch) = init_settled(&mut c).await;
    assert_eq!(epoch, 0);

    let b = |seq| transactional(batch(2, 1), pid, epoch, seq);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &txn_produce(topic, b(0))).await;
    assert_eq!(produced(&r).0, errors::INVALID_TXN_STATE, "no AddPartitionsToTxn yet");
    let r: ProduceResponse = c.call(ApiKey::Produce, 11, &txn_produce(topic, b(0))).await;
    assert_eq!(produced(&r).0, errors::TRANSACTION_ABORTABLE);
    let plain = produce_req(topic, 0, batch(1, 1), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &plain).await;
    assert_eq!(produced(&r), (errors::NONE, 0));
    assert_eq!(lso(&mut c, topic).await, 1, "the refused batches hold nothing back");

    // A committed transaction: offsets 1-2, its marker at 3.
    assert_eq!(add_partition(&mut c, topic, (pid, epoch)).await, errors::NONE);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &txn_produce(topic, b(0))).await;
    assert_eq!(produced(&r), (errors::NONE, 1));
    assert_eq!(lso(&mut c, topic).await, 1, "an open transaction holds the LSO");
    let m = s.broker.render_metrics();
    assert!(m.contains("folio_kafka_txn_open 1\n"), "{m}");
    assert_eq!(txn_start(&mut c, topic, pid).await, 1, "DescribeProducers finds it open");
    assert!(m.lines().any(|l| l.starts_with("folio_kafka_lso_lag{") && l.ends_with(" 2")), "{m}");
    assert_eq!(end_txn(&mut c, 3, (pid, epoch), true).await, errors::NONE);
    let (pid, epoch2) = init_settled(&mut c).await;
    assert_eq!(epoch2, 1, "the commit's markers are written before the next epoch");
    assert_eq!(lso(&mut c, topic).await, 4);
    assert!(s.broker.render_metrics().contains("folio_kafka_txn_open 0\n"));
    assert_eq!(txn_start(&mut c, topic, pid).await, -1);

    // An open transaction (offsets 4-5) fenced by the next InitProducerId: aborted at
    // epoch 2 (marker at 6), and the fenced producer's late requests are refused.
    assert_eq!(add_partition(&mut c, topic, (pid, epoch2)).await, errors::NONE);
    let b1 = |seq| transactional(batch(2, 1), pid, epoch2, seq);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &txn_produce(topic, b1(0))).await;
    assert_eq!(produced(&r), (errors::NONE, 4));
    let (_, epoch3) = init_settled(&mut c).await;
    assert_eq!(epoch3, 3, "fencing bumps the epoch for its abort, then for the new producer");
    assert_eq!(end_txn(&mut c, 3, (pid, epoch2), true).await, errors::PRODUCER_FENCED);
    assert_eq!(end_txn(&mut c, 1, (pid, epoch2), true).await, errors::INVALID_PRODUCER_EPOCH);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &txn_produce(topic, b1(2))).await;
    // Fenced, as Kafka answers a zombie (fatal to librdkafka, not abortable: 0103).
    assert_eq!(produced(&r).0, errors::INVALID_PRODUCER_EPOCH, "a fenced producer's late batch");
    let (batches, aborted, last_stable) = fetch_committed(&mut c, topic, topic_id).await;
    assert_eq!(last_stable, 7);
    assert_eq!(aborted, vec![(pid, 4)]);
    assert_eq!(
        batches,
        vec![0, 1, 3, 4, 6],
        "records, the commit marker, the aborted ones, the abort marker"
    );

    // A new broker: the same answers from the stored state and the log.
    s.broker.shutdown().await;
    let b2 = broker_on(&s.cluster, |_| {}).await;
    let mut c = Conn::open(b2.addr()).await;
    assert_eq!(end_txn(&mut c, 3, (pid, epoch3), false).await, errors::INVALID_TXN_STATE);
    let (batches, aborted, last_stable) = fetch_committed(&mut c, topic, topic_id).await;
    assert_eq!((batches.len(), aborted, last_stable), (5, vec![(pid, 4)], 7));
    let (_, epoch4) = init_settled(&mut c).await;
    assert_eq!(epoch4, 4);

    // DescribeTransactions and ListTransactions show the id's state.
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![
        txn_id(),
        TransactionalId(StrBytes::from_static_str("nobody")),
    ]);
    let r: DescribeTransactionsResponse = c.call(ApiKey::DescribeTransactions, 0, &req).await;
    let d = &r.transaction_states[0];
    assert_eq!((d.error_code, d.transaction_state.as_str()), (errors::NONE, "Empty"));
    assert_eq!((d.producer_id.0, d.producer_epoch, d.transaction_timeout_ms), (pid, 4, 60_000));
    assert_eq!(r.transaction_states[1].error_code, errors::TRANSACTIONAL_ID_NOT_FOUND);
    let req = ListTransactionsRequest::default()
        .with_state_filters(vec![
            StrBytes::from_static_str("Empty"),
            StrBytes::from_static_str("Bogus"),
        ])
        .with_duration_filter(-1);
    let r: ListTransactionsResponse = c.call(ApiKey::ListTransactions, 1, &req).await;
    let listed: Vec<_> = r.transaction_states.iter().map(|t| t.transactional_id.as_str()).collect();
    assert_eq!(listed, vec![TXN_ID]);
    assert_eq!(r.unknown_state_filters, vec![StrBytes::from_static_str("Bogus")]);
    let req = ListTransactionsRequest::default()
        .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
        .with_duration_filter(-1);
    let r: ListTransactionsResponse = c.call(ApiKey::ListTransactions, 1, &req).await;
    assert!(r.transaction_states.is_empty());
}

async fn end_txn_v5(c: &mut Conn, (pid, epoch): (i64, i16), commit: bool) -> (i16, i64, i16) {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("tv2")))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = c.call(ApiKey::EndTxn, 5, &req).await;
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// Until `f` answers `Some`, within 30 s.
async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(std::time::Instant::now() < deadline, "{what} within 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// #49 item 1: transaction version 2 (KIP-890), as Kafka 4 clients speak it. ApiVersions
/// finalizes `transaction.version` 2; Produce v12 adds its partition and TxnOffsetCommit v5
/// its group without AddPartitionsToTxn or AddOffsetsToTxn; every EndTxn v5 bumps the epoch
/// and answers the next one, so a late batch of the ended transaction is refused
/// (INVALID_PRODUCER_EPOCH) instead of joining the next, a retried EndTxn is answered as
/// done, a mismatched late one gets INVALID_TXN_STATE and an older one PRODUCER_FENCED;
/// the transactional offsets land with the commit.
#[tokio::test]
async fn transaction_version_2_bumps_the_epoch_per_transaction_and_fences_late_requests() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let topic = "wire-tv2";
    let meta: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[topic])).await;
    let topic_id = meta.topics[0].topic_id;
    let v: ApiVersionsResponse =
        c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
    let tv = v.finalized_features.iter().find(|f| f.name.as_str() == "transaction.version");
    assert_eq!(tv.map(|f| f.max_version_level), Some(2), "{v:?}");

    let tid = TransactionalId(StrBytes::from_static_str("tv2"));
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid.clone()))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 5, &req).await;
    let (pid, e0) = (r.producer_id.0, r.producer_epoch);
    assert_eq!((r.error_code, e0), (errors::NONE, 0));
    let produce = |epoch, seq| {
        produce_req(topic, 0, transactional(batch(2, 1), pid, epoch, seq), -1)
            .with_transactional_id(Some(tid.clone()))
    };

    // Transaction 1 (epoch 0): the partition joins implicitly; the commit bumps to 1.
    let r: ProduceResponse = c.call(ApiKey::Produce, 12, &produce(e0, 0)).await;
    assert_eq!(produced(&r), (errors::NONE, 0));
    assert_eq!(lso(&mut c, topic).await, 0);
    assert_eq!(end_txn_v5(&mut c, (pid, e0), true).await, (errors::NONE, pid, 1));
    until("the commit's marker", async || (lso(&mut c, topic).await == 3).then_some(())).await;
    // A late batch of transaction 1 does not join transaction 2: its epoch is fenced.
    let r: ProduceResponse = c.call(ApiKey::Produce, 12, &produce(e0, 2)).await;
    assert_eq!(produced(&r).0, errors::INVALID_PRODUCER_EPOCH);
    // A retried EndTxn of transaction 1 is answered as done, with the current epoch.
    assert_eq!(end_txn_v5(&mut c, (pid, e0), true).await, (errors::NONE, pid, 1));

    // Transaction 2 (epoch 1) with offsets for a group it never named in AddOffsetsToTxn,
    // aborted: bumps to 2; transaction 3 (epoch 2) commits offsets: bumps to 3.
    let r: ProduceResponse = c.call(ApiKey::Produce, 12, &produce(1, 0)).await;
    assert_eq!(produced(&r), (errors::NONE, 3));
    assert_eq!(end_txn_v5(&mut c, (pid, 1), false).await, (errors::NONE, pid, 2));
    assert_eq!(end_txn_v5(&mut c, (pid, 1), true).await.0, errors::INVALID_TXN_STATE);
    assert_eq!(end_txn_v5(&mut c, (pid, e0), false).await.0, errors::PRODUCER_FENCED);
    let commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(tid.clone())
        .with_group_id(GroupId(StrBytes::from_static_str("tv2-group")))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(2)
        .with_generation_id(-1)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(topic)))
                .with_partitions(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(5),
                ]),
        ]);
    let answer = until("the abort's markers", async || {
        let r: TxnOffsetCommitResponse = c.call(ApiKey::TxnOffsetCommit, 5, &commit).await;
        let code = r.topics[0].partitions[0].error_code;
        (code != errors::CONCURRENT_TRANSACTIONS).then_some(code)
    })
    .await;
    assert_eq!(answer, errors::NONE);
    assert_eq!(end_txn_v5(&mut c, (pid, 2), true).await, (errors::NONE, pid, 3));
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("tv2-group")))
        .with_topics(None);
    let offset = until("the transactional offset", async || {
        let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 6, &fetch).await;
        r.topics.first().map(|t| t.partitions[0].committed_offset).filter(|o| *o == 5)
    })
    .await;
    assert_eq!(offset, 5);
    let (_, aborted, last_stable) = fetch_committed(&mut c, topic, topic_id).await;
    assert_eq!((aborted, last_stable), (vec![(pid, 3)], 6));
}

/// #49, L1 for transaction state: a transactional id idle past
/// `transactional_id_expiration` is forgotten (its record deleted, DescribeTransactions
/// answers TRANSACTIONAL_ID_NOT_FOUND), and its next InitProducerId starts over with a new
/// producer id.
#[tokio::test]
async fn an_idle_transactional_id_is_forgotten() {
    let expiring = |c: &mut folio_broker::BrokerConfig| {
        c.transactional_id_expiration = std::time::Duration::from_millis(500);
    };
    let s = start(1, expiring).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let (pid, _) = init_settled(&mut c).await;
    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id()]);
    until("the id's expiry", async || {
        let r: DescribeTransactionsResponse =
            c.call(ApiKey::DescribeTransactions, 0, &describe).await;
        let code = r.transaction_states[0].error_code;
        (code == errors::TRANSACTIONAL_ID_NOT_FOUND).then_some(())
    })
    .await;
    let (again, epoch) = init_settled(&mut c).await;
    assert!(again != pid && epoch == 0, "{pid} -> {again}/{epoch}");
}

/// Every record of partition 0 of `topic` from offset 0 as `(key, value)`, read as a
/// read_uncommitted consumer would (markers are control batches: skipped, as clients do).
async fn records_of(c: &mut Conn, topic: &str, id: uuid::Uuid) -> Vec<(Vec<u8>, Vec<u8>)> {
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_req(topic, id, 0)).await;
    let mut data: &[u8] = r.responses[0].partitions[0].records.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    while data.len() >= 12 {
        let size = 12 + i32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
        let (b, rest) = data.split_at(size);
        data = rest;
        let (h, plain) = folio_broker::records::records_bytes(b).unwrap();
        if h.is_control() {
            continue;
        }
        for r in folio_broker::records::decode_records(&h, &plain).unwrap() {
            out.push((r.key.unwrap_or_default().to_vec(), r.value.unwrap_or_default().to_vec()));
        }
    }
    out
}

/// #49 with compacted topics (Kafka Streams' changelogs are both): compaction drops the
/// records of aborted transactions and the markers (never turning a marker into a record,
/// nor an aborted record into a plain one), keeps committed ones as plain records, and
/// stops at the last stable offset, so an open transaction's records keep their producer
/// and are still dropped for read_committed when it aborts.
#[tokio::test]
async fn compaction_drops_aborted_records_and_markers_and_stops_at_the_last_stable_offset() {
    let s = start(1, |c| {
        c.log.rollover_entries = 2;
        c.compaction.check_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut c = Conn::open(s.broker.addr()).await;
    let topic = "txn-kv";
    let configs = [("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0")];
    let req = folio_testkit::kafka::create_topic_request(topic, 1, &configs);
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 5, &req).await;
    assert_eq!(r.topics[0].error_code, 0);
    let meta: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[topic])).await;
    let topic_id = meta.topics[0].topic_id;
    let kv = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
    let keyed = |records: &[(&str, &str)], pid, epoch, seq| {
        let b = folio_broker::batch::build_keyed(records.len() as i32, 1_000, 0, |i| {
            let (k, v) = records[i as usize];
            (Some(k.as_bytes().to_vec()), Some(v.as_bytes().to_vec()))
        });
        txn_produce(topic, transactional(b, pid, epoch, seq))
    };
    let (pid, epoch) = init_settled(&mut c).await;
    // Committed: a=1 b=1 (0-1), marker 2. Aborted: a=2 (3), marker 4.
    let mut seq = 0;
    for (records, commit) in [(&[("a", "1"), ("b", "1")][..], true), (&[("a", "2")][..], false)] {
        assert_eq!(add_partition(&mut c, topic, (pid, epoch)).await, errors::NONE);
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &keyed(records, pid, epoch, seq)).await;
        assert_eq!(produced(&r).0, errors::NONE);
        seq += records.len() as i32;
        assert_eq!(end_txn(&mut c, 3, (pid, epoch), commit).await, errors::NONE);
        s.broker.roll_partition(topic, 0).await.unwrap();
    }
    let (pid, epoch) = init_settled(&mut c).await;
    // Open: c=1 (5), in a ledger of its own.
    assert_eq!(add_partition(&mut c, topic, (pid, epoch)).await, errors::NONE);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &keyed(&[("c", "1")], pid, epoch, 0)).await;
    assert_eq!(produced(&r), (errors::NONE, 5));
    s.broker.roll_partition(topic, 0).await.unwrap();
    s.broker.compact_now(topic, 0).await.unwrap().expect("a pass is due");
    assert_eq!(
        records_of(&mut c, topic, topic_id).await,
        vec![kv("a", "1"), kv("b", "1"), kv("c", "1")],
        "no marker became a record and the aborted a=2 is gone; the open c=1 is untouched"
    );
    assert_eq!(end_txn(&mut c, 3, (pid, epoch), false).await, errors::NONE);
    until("the abort's marker", async || (lso(&mut c, topic).await == 7).then_some(())).await;
    let (batches, aborted, _) = fetch_committed(&mut c, topic, topic_id).await;
    assert_eq!(aborted, vec![(pid, 5)], "c=1 is still its producer's, and aborted");
    assert!(batches.contains(&5), "{batches:?}");
}

/// #49 item 3, KIP-447: a transaction's offsets for a consumer group come from a current
/// member at its generation (a zombie whose partitions moved on cannot commit them:
/// UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION); a commit naming no member and no generation (a
/// producer sending offsets for the group alone) is not checked, as in Kafka.
#[tokio::test]
async fn transactional_offsets_come_from_a_current_member_of_the_group() {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    let s = start(1, |c| c.groups.initial_rebalance_delay = std::time::Duration::ZERO).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let meta: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&["kip447"])).await;
    assert_eq!(meta.topics[0].error_code, 0);
    let joined: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join_req("g447")).await;
    assert_eq!(joined.error_code, errors::NONE);
    let (member, generation) = (joined.member_id.to_string(), joined.generation_id);
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g447")))
        .with_generation_id(generation)
        .with_member_id(joined.member_id.clone());
    let synced: SyncGroupResponse = c.call(ApiKey::SyncGroup, 3, &sync).await;
    assert_eq!(synced.error_code, errors::NONE, "the group is stable");
    let (pid, epoch) = init_settled(&mut c).await;
    let add = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id())
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(StrBytes::from_static_str("g447")));
    let r: AddOffsetsToTxnResponse = c.call(ApiKey::AddOffsetsToTxn, 3, &add).await;
    assert_eq!(r.error_code, errors::NONE);
    let mut commit = async |member: &str, generation: i32| -> i16 {
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id())
            .with_group_id(GroupId(StrBytes::from_static_str("g447")))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member.into()))
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("kip447")))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(7),
                    ]),
            ]);
        let r: TxnOffsetCommitResponse = c.call(ApiKey::TxnOffsetCommit, 3, &req).await;
        r.topics[0].partitions[0].error_code
    };
    assert_eq!(commit("a-zombie", generation).await, errors::UNKNOWN_MEMBER_ID);
    assert_eq!(commit(&member, generation + 1).await, errors::ILLEGAL_GENERATION);
    assert_eq!(commit(&member, generation).await, errors::NONE);
    assert_eq!(commit("", -1).await, errors::NONE, "no member named: not checked");
}
