//! Idempotent producers on the wire, with a raw client: retries stored once and answered
//! with the original offset, gaps and old epochs refused, and the producers' state on the
//! next broker after a clean stop or a crash, however far the log moved on (#44 item 4).

// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

use crate::common;

use common::*;
use folio_broker::errors;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// Idempotent producers: a retried batch is answered with its first offset and stored
/// once, a gap or an older epoch is refused, and a new broker on the same partition
/// (restart or move) rebuilds the state from the log and still recognises the retry.
#[tokio::test]
async fn idempotent_retries_are_stored_once_even_across_a_new_broker() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["idem"])).await;
    let init = |pid: i64, epoch: i16| {
        InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
    };
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &init(-1, -1)).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 0));
    let pid = r.producer_id.0;
    assert!(pid >= 0);
    let send = |seq: i32, count: i32, epoch: i16| {
        produce_req("idem", 0, idempotent(batch(count, 1), pid, epoch, seq), -1)
    };
    let end = async |c: &mut Conn| {
        let r: ListOffsetsResponse =
            c.call(ApiKey::ListOffsets, 5, &list_offsets_req("idem", -1)).await;
        r.topics[0].partitions[0].offset
    };
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(0, 3, 0)).await;
    assert_eq!(produced(&r), (0, 0));
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(0, 3, 0)).await;
    assert_eq!(produced(&r), (0, 0), "a retry gets the original offset");
    assert_eq!(end(&mut c).await, 3, "and is not stored again");
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(3, 2, 0)).await;
    assert_eq!(produced(&r), (0, 3));
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(9, 1, 0)).await;
    assert_eq!(produced(&r).0, errors::OUT_OF_ORDER_SEQUENCE_NUMBER);
    // Without a transactional id, naming an id gets a new one (Kafka's rule, #44 item 4):
    // no client takes over another's producer id.
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &init(pid, 0)).await;
    assert_eq!(r.error_code, 0);
    assert!(r.producer_id.0 != pid && r.producer_epoch == 0, "{r:?}");
    // A bumped epoch starts over; the old epoch is refused.
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(0, 1, 1)).await;
    assert_eq!(produced(&r), (0, 5));
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(5, 1, 0)).await;
    assert_eq!(produced(&r).0, errors::INVALID_PRODUCER_EPOCH);
    assert_eq!(end(&mut c).await, 6);
    assert_eq!(
        s.broker
            .metrics()
            .topic("idem")
            .duplicate_batches
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // Another broker takes the partition over (fencing this one) and rebuilds the state.
    s.broker.shutdown().await;
    let b2 = broker_on(&s.cluster, |_| {}).await;
    let mut c = Conn::open(b2.addr()).await;
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(0, 1, 1)).await;
    assert_eq!(produced(&r), (0, 5), "the new broker recognises the retry");
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &send(1, 1, 1)).await;
    assert_eq!(produced(&r), (0, 6));
    assert_eq!(end(&mut c).await, 7);
    // #49: a transactional id gets a producer id of its own, and each InitProducerId for it
    // the next epoch (fencing the last); a timeout above the maximum is refused.
    let tx = |timeout_ms| {
        init(-1, -1)
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
            .with_transaction_timeout_ms(timeout_ms)
    };
    let first: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &tx(60_000)).await;
    assert_eq!((first.error_code, first.producer_epoch), (errors::NONE, 0));
    let again: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &tx(60_000)).await;
    assert_eq!((again.producer_id, again.producer_epoch), (first.producer_id, 1));
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &tx(900_001)).await;
    assert_eq!(r.error_code, errors::INVALID_TRANSACTION_TIMEOUT);
}

/// #44 item 4: a producer whose last batch lies more than `REBUILD_OFFSETS` offsets back
/// is still known to the next broker (from the snapshot written beside the log, on a
/// clean stop and periodically before a crash), so its retry is a duplicate, not a second
/// copy.
#[tokio::test]
async fn idempotence_survives_ownership_changes_however_far_the_log_moved_on() {
    let quick = |c: &mut folio_broker::BrokerConfig| {
        c.producer_snapshot_interval = std::time::Duration::from_millis(50);
        // A crashed broker's registration goes with its lease before the next one starts.
        c.lease_ttl = std::time::Duration::from_secs(1);
    };
    let s = start(1, quick).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["far"])).await;
    let end = async |c: &mut Conn| {
        let r: ListOffsetsResponse =
            c.call(ApiKey::ListOffsets, 5, &list_offsets_req("far", -1)).await;
        r.topics[0].partitions[0].offset
    };
    let retry = |pid: i64| produce_req("far", 0, idempotent(batch(2, 1), pid, 0, 0), -1);
    let far = folio_broker::producers::REBUILD_OFFSETS as i32 + 1;
    let mut expected_end = 0;
    let mut broker = s.broker.clone();
    for (round, crash) in [(0i64, false), (1, true)] {
        let pid = 1000 + round;
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &retry(pid)).await;
        assert_eq!(produced(&r), (0, expected_end));
        let first = expected_end;
        // Others write more than REBUILD_OFFSETS offsets after it.
        let r: ProduceResponse =
            c.call(ApiKey::Produce, 9, &produce_req("far", 0, batch(far, 1), -1)).await;
        assert_eq!(produced(&r).0, 0);
        expected_end += 2 + i64::from(far);
        if crash {
            // A crash: only a periodic snapshot is there, one that reaches past pid's batch
            // (read from the store itself).
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            while snapshot_upto(&s, &mut c).await < first as u64 + 2 {
                assert!(tokio::time::Instant::now() < deadline, "no periodic snapshot");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            broker.abort();
        } else {
            broker.shutdown().await;
        }
        broker = broker_on(&s.cluster, quick).await;
        c = Conn::open(broker.addr()).await;
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &retry(pid)).await;
        assert_eq!(produced(&r), (0, first), "round {round}: the retry is a duplicate");
        assert_eq!(end(&mut c).await, expected_end, "round {round}: stored once");
    }
}

/// How far the producer snapshot of partition 0 of `far` reaches, as stored (0: none yet).
async fn snapshot_upto(s: &Setup, c: &mut Conn) -> u64 {
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&["far"])).await;
    let log = folio_broker::topics::log_name(r.topics[0].topic_id, 0);
    let key = folio_meta::keys::Keys::default().log_state(&log, "producers");
    match s.cluster.meta.get(&key).await.unwrap() {
        Some(v) => folio_broker::producers::Producers::from_snapshot(&v.value).unwrap().1,
        None => 0,
    }
}
