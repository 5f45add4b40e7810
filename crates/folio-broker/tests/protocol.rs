//! The broker on the wire, with a raw client: version negotiation, produce validation,
//! pipelining order, acks=0, topic ids, retention configs, and malformed requests.

// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

use crate::common;

use bytes::Bytes;
use common::*;
use folio_broker::errors;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rand::{Rng, SeedableRng};

#[tokio::test]
async fn api_versions_answers_unknown_versions_in_v0_with_unsupported_version() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    // A future ApiVersions version: the v0 answer, error 35, the ApiVersions range inside.
    let mut frame = Vec::new();
    frame.extend_from_slice(&18i16.to_be_bytes());
    frame.extend_from_slice(&99i16.to_be_bytes());
    frame.extend_from_slice(&7i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    c.send_raw(&frame).await;
    let (corr, r) = c.recv::<ApiVersionsResponse>(ApiKey::ApiVersions, 0).await;
    assert_eq!(corr, 7);
    assert_eq!(r.error_code, errors::UNSUPPORTED_VERSION);
    assert!(
        r.api_keys.iter().any(|k| k.api_key == ApiKey::ApiVersions as i16 && k.max_version >= 3)
    );
    // v3 (flexible body) still has a v0 answer header; every advertised range is there.
    let r: ApiVersionsResponse =
        c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
    assert_eq!(r.error_code, 0);
    for (key, lo, hi) in folio_broker::api::SUPPORTED {
        let k = r.api_keys.iter().find(|k| k.api_key == *key as i16).expect("advertised");
        assert_eq!((k.min_version, k.max_version), (*lo, *hi), "{key:?}");
        // Never above Kafka 4.1's minimums (librdkafka 2.0.2 and aiokafka need the low ones).
        assert!(*lo <= key.valid_versions().min.max(0), "{key:?} minimum {lo}");
    }
}

#[tokio::test]
async fn versions_not_advertised_get_unsupported_version_on_an_open_connection() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&["t"])).await;
    // Produce v13 (topic ids) decodes but is above what is advertised (12).
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 13, &produce_req("t", 0, batch(1, 1), -1)).await;
    assert_eq!(produced(&r).0, errors::UNSUPPORTED_VERSION);
    let r: MetadataResponse = c.call(ApiKey::Metadata, 13, &metadata_req(&["t"])).await;
    assert_eq!(r.topics[0].error_code, errors::UNSUPPORTED_VERSION);
    // The connection is still good.
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("t", 0, batch(1, 1), -1)).await;
    assert_eq!(produced(&r), (0, 0));
    assert!(s.broker.metrics().requests(ApiKey::Produce as i16, errors::UNSUPPORTED_VERSION) >= 1);
}

#[tokio::test]
async fn produce_refuses_bad_batches_with_kafka_error_codes() {
    let s = start(1, |c| c.topic_defaults.max_message_bytes = 2000).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["t"])).await;
    let mut corrupt = batch(3, 1);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    let mut mismatch = batch(3, 1);
    mismatch[57..61].copy_from_slice(&5i32.to_be_bytes());
    let crc = crc32c::crc32c(&mismatch[21..]);
    mismatch[17..21].copy_from_slice(&crc.to_be_bytes());
    let mut v1 = batch(1, 1);
    v1[16] = 1;
    // #44 item 5: headers that lie about their records, each with a valid CRC.
    let forge = |b: &[u8], count: i32, keep: usize| {
        let mut info = folio_broker::batch::parse(b).unwrap();
        info.records_count = count;
        info.last_offset_delta = count - 1;
        let records = &b[folio_broker::batch::HEADER_BYTES..keep];
        folio_broker::batch::encode(0, &info, records)
    };
    let one = batch(1, 1);
    let two_to_the_31 = forge(&one, i32::MAX, one.len()); // one real record
    let no_records = forge(&one, 5, folio_broker::batch::HEADER_BYTES); // 61 bytes
    let mut based = batch(2, 1);
    based[..8].copy_from_slice(&7i64.to_be_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let two_hours_ahead = batch(2, now.as_millis() as i64 + 7_200_000);
    let cases: Vec<(&str, ProduceRequest, i16, i16)> = vec![
        ("crc", produce_req("t", 0, corrupt, -1), 9, errors::CORRUPT_MESSAGE),
        ("magic 1", produce_req("t", 0, v1, -1), 9, errors::CORRUPT_MESSAGE),
        (
            "truncated",
            produce_req("t", 0, batch(2, 1)[..40].to_vec(), -1),
            9,
            errors::CORRUPT_MESSAGE,
        ),
        ("count", produce_req("t", 0, mismatch, -1), 9, errors::INVALID_RECORD),
        ("count 2^31-1", produce_req("t", 0, two_to_the_31, -1), 9, errors::INVALID_RECORD),
        ("no records", produce_req("t", 0, no_records, -1), 9, errors::INVALID_RECORD),
        ("base offset", produce_req("t", 0, based, -1), 9, errors::INVALID_RECORD),
        ("future", produce_req("t", 0, two_hours_ahead, -1), 9, errors::INVALID_TIMESTAMP),
        (
            "plain records under zstd",
            produce_req("t", 0, batch_with(1, 1, 4), -1),
            9,
            errors::CORRUPT_MESSAGE,
        ),
        ("too large", produce_req("t", 0, batch(200, 1), -1), 9, errors::MESSAGE_TOO_LARGE),
        (
            "zstd below v7",
            produce_req("t", 0, batch_with(1, 1, 4), -1),
            6,
            errors::UNSUPPORTED_COMPRESSION_TYPE,
        ),
        (
            "transactional",
            produce_req("t", 0, batch_with(1, 1, 1 << 4), -1),
            9,
            errors::INVALID_RECORD,
        ),
        ("partition", produce_req("t", 5, batch(1, 1), -1), 9, errors::UNKNOWN_TOPIC_OR_PARTITION),
        ("topic", produce_req("nope", 0, batch(1, 1), -1), 9, errors::UNKNOWN_TOPIC_OR_PARTITION),
        ("acks", produce_req("t", 0, batch(1, 1), 2), 9, errors::INVALID_REQUIRED_ACKS),
    ];
    for (what, req, version, code) in cases {
        let r: ProduceResponse = c.call(ApiKey::Produce, version, &req).await;
        assert_eq!(produced(&r).0, code, "{what}");
    }
    // Nothing of the refused batches was stored: the next batch gets offset 0.
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("t", 0, batch(2, 1), -1)).await;
    assert_eq!(produced(&r), (0, 0));
    // zstd from v7 on is fine (the broker walks its records within its decompression budget).
    let zstd = folio_broker::records::with_codec(&batch(1, 1), folio_broker::batch::Codec::Zstd);
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 7, &produce_req("t", 0, zstd.unwrap(), -1)).await;
    assert_eq!(produced(&r), (0, 2));
    // Each record at fault is named (Produce v8+): here the second's timestamp.
    let mut late = batch(2, 1);
    let mut info = folio_broker::batch::parse(&late).unwrap();
    let ahead = now.as_millis() as i64 + 7_200_000;
    let mut records = Vec::new();
    for (i, ts) in [(0i64, 0i64), (1, ahead - 1)] {
        let r = folio_broker::batch::Record {
            offset_delta: i,
            timestamp_delta: ts,
            value: Some(b"v"),
            ..Default::default()
        };
        folio_broker::batch::put_record(&mut records, &r);
    }
    info.max_timestamp = ahead;
    late = folio_broker::batch::encode(0, &info, &records);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &produce_req("t", 0, late, -1)).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, errors::INVALID_TIMESTAMP);
    assert_eq!(p.record_errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(), vec![1]);
}

#[tokio::test]
async fn pipelined_produces_to_one_partition_keep_their_order() {
    let s = start(3, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["p"])).await;
    let n = 300;
    let mut sent = Vec::new();
    for i in 0..n {
        sent.push(
            c.send(ApiKey::Produce, 9, &produce_req("p", 0, batch(1 + i % 3, i as i64), -1)).await,
        );
    }
    let mut expect_base = 0i64;
    for (i, corr) in sent.into_iter().enumerate() {
        let (got, r) = c.recv::<ProduceResponse>(ApiKey::Produce, 9).await;
        assert_eq!(got, corr, "answer {i} out of order");
        assert_eq!(produced(&r), (0, expect_base), "request {i}");
        expect_base += 1 + (i as i64 % 3);
    }
    // Fetch returns the batches with their offsets patched in, in order.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_req("p", uuid::Uuid::nil(), 0)).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.high_watermark, expect_base);
    let bases = base_offsets(p.records.as_ref().unwrap());
    assert_eq!(bases.len(), n as usize);
    assert!(bases.windows(2).all(|w| w[0] < w[1]), "{bases:?}");
    // A fetch from inside a batch returns that whole batch.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_req("p", uuid::Uuid::nil(), 2)).await;
    assert_eq!(base_offsets(r.responses[0].partitions[0].records.as_ref().unwrap())[0], 1);
    // Metrics count it all, per broker and per topic.
    let m = s.broker.metrics();
    assert_eq!(m.requests(ApiKey::Produce as i16, 0), n as u64);
    assert_eq!(m.produce_latency.count(), n as u64);
    let t = m.topic("p");
    assert_eq!(t.records_in.load(std::sync::atomic::Ordering::Relaxed), expect_base as u64);
    assert_eq!(t.batches_in.load(std::sync::atomic::Ordering::Relaxed), n as u64);
    let text = s.broker.render_metrics();
    assert!(
        text.contains(&format!("folio_kafka_requests_total{{api=\"Produce\",error=\"NONE\"}} {n}")),
        "{text}"
    );
    assert!(text.contains("folio_kafka_topic_bytes_out_total{topic=\"p\"}"), "{text}");
    assert!(text.contains("folio_kafka_fetch_latency_seconds_count{} 2"), "{text}");
}

#[tokio::test]
async fn acks_0_gets_no_answer_and_a_failure_closes_the_connection() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["z"])).await;
    c.send(ApiKey::Produce, 9, &produce_req("z", 0, batch(1, 1), 0)).await;
    // The next answer is the Metadata one: the produce got none.
    let corr = c.send(ApiKey::Metadata, 9, &metadata_req(&["z"])).await;
    let (got, _) = c.recv::<MetadataResponse>(ApiKey::Metadata, 9).await;
    assert_eq!(got, corr);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &list_offsets_req("z", -1)).await;
    assert_eq!(r.topics[0].partitions[0].offset, 1, "the acks=0 batch was stored");
    // acks=0 to a topic that does not exist: the broker closes the connection.
    c.send(ApiKey::Produce, 9, &produce_req("missing", 0, batch(1, 1), 0)).await;
    assert!(c.recv_raw().await.is_none(), "connection closed");
}

#[tokio::test]
async fn topic_ids_from_metadata_address_fetch_v13() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let md: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&["ids"])).await;
    let id = md.topics[0].topic_id;
    assert!(!id.is_nil(), "Metadata v10+ carries the topic id");
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("ids", 0, batch(4, 1), -1)).await;
    assert_eq!(produced(&r), (0, 0));
    let r: FetchResponse = c.call(ApiKey::Fetch, 16, &fetch_req("", id, 0)).await;
    assert_eq!(r.responses[0].topic_id, id);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert_eq!(base_offsets(r.responses[0].partitions[0].records.as_ref().unwrap()), vec![0]);
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 16, &fetch_req("", uuid::Uuid::from_u128(42), 0)).await;
    assert_eq!(r.responses[0].partitions[0].error_code, errors::UNKNOWN_TOPIC_ID);
    // Metadata by id, known and unknown.
    let by_id = |id| {
        MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(None).with_topic_id(id),
        ]))
    };
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &by_id(id)).await;
    assert_eq!(r.topics[0].name.as_ref().map(|n| n.as_str()), Some("ids"));
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &by_id(uuid::Uuid::from_u128(42))).await;
    assert_eq!(r.topics[0].error_code, errors::UNKNOWN_TOPIC_ID);
    // Fetch beyond the end: OFFSET_OUT_OF_RANGE with the watermarks.
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 12, &fetch_req("ids", uuid::Uuid::nil(), 99)).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.high_watermark, p.log_start_offset),
        (errors::OFFSET_OUT_OF_RANGE, 4, 0)
    );
}

#[tokio::test]
async fn retention_configs_trim_partition_logs() {
    let s = start(1, |c| {
        c.log.rollover_entries = 5;
    })
    .await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["r"])).await;
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as i64;
    for i in 0..30 {
        let r: ProduceResponse =
            c.call(ApiKey::Produce, 9, &produce_req("r", 0, batch(2, now + i), -1)).await;
        assert_eq!(produced(&r).0, 0);
    }
    let earliest = |r: &ListOffsetsResponse| r.topics[0].partitions[0].offset;
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &list_offsets_req("r", -2)).await;
    assert_eq!(earliest(&r), 0, "7-day retention keeps everything");
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("r"))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.bytes"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("0"))),
            ]),
    ]);
    let r: IncrementalAlterConfigsResponse =
        c.call(ApiKey::IncrementalAlterConfigs, 1, &alter).await;
    assert_eq!(r.responses[0].error_code, 0);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &list_offsets_req("r", -2)).await;
    assert!(
        earliest(&r) >= 50,
        "retention.bytes=0 trims every closed ledger: start {}",
        earliest(&r)
    );
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &list_offsets_req("r", -1)).await;
    assert_eq!(earliest(&r), 60, "the end stays");
}

/// Mutated valid requests, random frames and huge counts: every one gets an answer or a
/// closed connection, and the broker keeps serving (the decoder fuzz target in-process
/// and over the network).
#[tokio::test]
async fn malformed_requests_get_an_error_or_a_closed_connection_never_a_crash() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["f"])).await;
    // Valid frames of several APIs and versions, captured by encoding them.
    let valid: Vec<Vec<u8>> = {
        use kafka_protocol::protocol::Encodable;
        let mut v = Vec::new();
        let mut put = |key: ApiKey, version: i16, body: &dyn Fn(&mut bytes::BytesMut)| {
            let mut b = bytes::BytesMut::new();
            RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(version)
                .with_correlation_id(1)
                .encode(&mut b, key.request_header_version(version))
                .unwrap();
            body(&mut b);
            v.push(b.to_vec());
        };
        for version in [3, 7, 9, 11] {
            put(ApiKey::Produce, version, &|b| {
                produce_req("f", 0, batch(3, 1), -1).encode(b, version).unwrap()
            });
        }
        for version in [4, 11, 12, 13, 16] {
            put(ApiKey::Fetch, version, &|b| {
                fetch_req("f", uuid::Uuid::nil(), 0).encode(b, version).unwrap()
            });
        }
        for version in [0, 4, 9, 12] {
            put(ApiKey::Metadata, version, &|b| metadata_req(&["f"]).encode(b, version).unwrap());
        }
        for version in [1, 5, 7] {
            put(ApiKey::ListOffsets, version, &|b| {
                list_offsets_req("f", -1).encode(b, version).unwrap()
            });
        }
        put(ApiKey::ApiVersions, 3, &|b| ApiVersionsRequest::default().encode(b, 3).unwrap());
        v
    };
    for seed in folio_testkit::seeds("FOLIO_FUZZ_SEEDS", 0..4) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        // In-process: the decoder alone, many cases.
        for _ in 0..20_000 {
            let mut f = valid[rng.random_range(0..valid.len())].clone();
            mutate(&mut rng, &mut f);
            let _ = folio_broker::api::decode_request(Bytes::from(f));
        }
        // Over the network: fewer, each on a fresh connection when the last one closed.
        for i in 0..300 {
            let mut f = valid[rng.random_range(0..valid.len())].clone();
            mutate(&mut rng, &mut f);
            c.send_raw(&f).await;
            match tokio::time::timeout(std::time::Duration::from_secs(5), c.recv_raw()).await {
                Ok(Some(_)) => {}
                Ok(None) => c = Conn::open(s.broker.addr()).await,
                Err(_) => {
                    // Only a long poll (Fetch, max_wait_ms mutated) or an acks=0 Produce may
                    // legitimately stay unanswered.
                    assert!(
                        f[..2] == [0, 1] || f[..2] == [0, 0],
                        "seed {seed}: no answer to {:?}",
                        &f[..8]
                    );
                    c = Conn::open(s.broker.addr()).await;
                }
            }
            if i % 50 == 0 {
                // Still serving.
                let r: ApiVersionsResponse =
                    c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
                assert_eq!(r.error_code, 0, "seed {seed}");
            }
        }
    }
    // Frames too large or too small for a header close the connection; nothing else dies.
    let mut raw = Conn::open(s.broker.addr()).await;
    tokio::io::AsyncWriteExt::write_all(raw.stream(), &i32::MAX.to_be_bytes()).await.unwrap();
    assert!(raw.recv_raw().await.is_none());
    let mut raw = Conn::open(s.broker.addr()).await;
    raw.send_raw(&[0, 3]).await;
    assert!(raw.recv_raw().await.is_none());
    let mut c = Conn::open(s.broker.addr()).await;
    let r: ApiVersionsResponse =
        c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
    assert_eq!(r.error_code, 0);
}

/// Flips, truncates, inserts, or plants a huge count in a frame (after its API key, so the
/// API stays a known one more often than not).
fn mutate(rng: &mut impl Rng, f: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..4) {
        if f.len() < 9 {
            f.extend_from_slice(&[0xff; 8]);
        }
        let at = rng.random_range(2..f.len());
        match rng.random_range(0..5) {
            0 => f[at] ^= 1 << rng.random_range(0..8),
            1 => f.truncate(at),
            2 => f.insert(at, rng.random()),
            3 => {
                let end = (at + 4).min(f.len());
                f[at..end].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff][..end - at]);
            }
            _ => {
                let end = (at + 5).min(f.len());
                f[at..end].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f][..end - at]);
            }
        }
    }
}

#[test]
fn decode_request_survives_adversarial_counts() {
    // Metadata v0 with a topic count of 2^31-1 and nothing after it.
    let mut f = vec![0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
    f.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
    assert!(folio_broker::api::decode_request(Bytes::from(f)).is_err());
    // A compact (flexible) array count of 2^32-1 in Metadata v9.
    let mut f = vec![0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0];
    f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(folio_broker::api::decode_request(Bytes::from(f)).is_err());
    // A produce whose records length says 2 GiB.
    let mut f = vec![0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0, 0];
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0x27, 0x10, 2, 2, b'f', 2, 0, 0, 0, 0]);
    f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
    assert!(folio_broker::api::decode_request(Bytes::from(f)).is_err());
}

/// The group coordinator on the wire: join, sync, heartbeat, commit and fetch offsets,
/// errors for stale generations and unknown members, and the group metrics (state,
/// members, lag).
#[tokio::test]
async fn a_group_joins_syncs_commits_and_reports_lag() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    let s = start(1, |c| c.groups.initial_rebalance_delay = std::time::Duration::ZERO).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["gt"])).await;
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("gt", 0, batch(5, 1), -1)).await;
    assert_eq!(produced(&r), (0, 0));
    let g = || GroupId(StrBytes::from_static_str("g1"));
    let r: FindCoordinatorResponse = c
        .call(
            ApiKey::FindCoordinator,
            2,
            &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g1")),
        )
        .await;
    assert_eq!((r.error_code, r.node_id.0), (0, 1));
    let join = |member: &str, session_ms: i32| {
        JoinGroupRequest::default()
            .with_group_id(g())
            .with_session_timeout_ms(session_ms)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(StrBytes::from_string(member.into()))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(Bytes::from_static(b"meta")),
            ])
    };
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join("", 1000)).await;
    assert_eq!(r.error_code, errors::INVALID_SESSION_TIMEOUT, "below group.min.session.timeout.ms");
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join("", 10_000)).await;
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    let me = r.member_id.clone();
    assert_eq!(r.leader, me, "the only member leads");
    assert_eq!(r.members.len(), 1);
    let sync = |generation: i32| {
        SyncGroupRequest::default()
            .with_group_id(g())
            .with_generation_id(generation)
            .with_member_id(me.clone())
            .with_assignments(vec![
                SyncGroupRequestAssignment::default()
                    .with_member_id(me.clone())
                    .with_assignment(Bytes::from_static(b"all of it")),
            ])
    };
    let r: SyncGroupResponse = c.call(ApiKey::SyncGroup, 3, &sync(7)).await;
    assert_eq!(r.error_code, errors::ILLEGAL_GENERATION);
    let r: SyncGroupResponse = c.call(ApiKey::SyncGroup, 3, &sync(1)).await;
    assert_eq!((r.error_code, &r.assignment[..]), (0, &b"all of it"[..]));
    let hb = |member: StrBytes, generation: i32| {
        HeartbeatRequest::default()
            .with_group_id(g())
            .with_generation_id(generation)
            .with_member_id(member)
    };
    let r: HeartbeatResponse = c.call(ApiKey::Heartbeat, 3, &hb(me.clone(), 1)).await;
    assert_eq!(r.error_code, 0);
    let r: HeartbeatResponse =
        c.call(ApiKey::Heartbeat, 3, &hb(StrBytes::from_static_str("stranger"), 1)).await;
    assert_eq!(r.error_code, errors::UNKNOWN_MEMBER_ID);
    let commit = OffsetCommitRequest::default()
        .with_group_id(g())
        .with_generation_id_or_member_epoch(1)
        .with_member_id(me.clone())
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("gt")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(2)
                        .with_committed_metadata(Some(StrBytes::from_static_str("m"))),
                ]),
        ]);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let fetch = OffsetFetchRequest::default().with_group_id(g()).with_topics(Some(vec![
        OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("gt")))
            .with_partition_indexes(vec![0, 1]),
    ]));
    let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 6, &fetch).await;
    let parts = &r.topics[0].partitions;
    assert_eq!(
        (parts[0].committed_offset, parts[0].metadata.as_ref().map(|m| m.as_str())),
        (2, Some("m"))
    );
    assert_eq!(parts[1].committed_offset, -1, "nothing committed");
    let text = s.broker.render_metrics();
    assert!(text.contains("folio_kafka_group_members{group=\"g1\",state=\"Stable\"} 1"), "{text}");
    assert!(
        text.contains("folio_kafka_group_lag{group=\"g1\",topic=\"gt\",partition=\"0\"} 3"),
        "{text}"
    );
    // A group with members cannot be deleted; after the member leaves it can.
    let del = DeleteGroupsRequest::default().with_groups_names(vec![g()]);
    let r: DeleteGroupsResponse = c.call(ApiKey::DeleteGroups, 1, &del).await;
    assert_eq!(r.results[0].error_code, errors::NON_EMPTY_GROUP);
    let r: LeaveGroupResponse = c
        .call(
            ApiKey::LeaveGroup,
            1,
            &LeaveGroupRequest::default().with_group_id(g()).with_member_id(me.clone()),
        )
        .await;
    assert_eq!(r.error_code, 0);
    let r: DeleteGroupsResponse = c.call(ApiKey::DeleteGroups, 1, &del).await;
    assert_eq!(r.results[0].error_code, 0);
    let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 6, &fetch).await;
    assert_eq!(r.topics[0].partitions[0].committed_offset, -1, "deleted with the group");
}

/// A group's coordinator dies: after its lease expires another broker coordinates the
/// group, the committed offsets are there (they live in the metadata store), and members
/// join it; before the move the other broker answers NOT_COORDINATOR.
#[tokio::test]
async fn committed_offsets_survive_the_coordinator_moving() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let tune = |id: i32| {
        move |c: &mut folio_broker::BrokerConfig| {
            c.node_id = id;
            c.lease_ttl = std::time::Duration::from_secs(1);
            c.membership_poll = std::time::Duration::from_millis(50);
            c.groups.initial_rebalance_delay = std::time::Duration::ZERO;
        }
    };
    let s = start(1, tune(1)).await;
    let b2 = broker_on(&s.cluster, tune(2)).await;
    let brokers = [&s.broker, &b2];
    common::eventually(std::time::Duration::from_secs(30), "both brokers see each other", || {
        brokers.iter().all(|b| b.live_brokers().len() == 2)
    })
    .await;
    let mut c1 = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = c1.call(ApiKey::Metadata, 9, &metadata_req(&["mv"])).await;
    // A group coordinated by broker 1.
    let mut group = String::new();
    for i in 0.. {
        let name = format!("group-{i}");
        let r: FindCoordinatorResponse = c1
            .call(
                ApiKey::FindCoordinator,
                2,
                &FindCoordinatorRequest::default().with_key(StrBytes::from_string(name.clone())),
            )
            .await;
        if r.node_id.0 == 1 {
            group = name;
            break;
        }
    }
    let g = || GroupId(StrBytes::from_string(group.clone()));
    let commit = offset_commit_req(g().0.to_string(), "mv", 42);
    let r: OffsetCommitResponse = c1.call(ApiKey::OffsetCommit, 7, &commit).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let mut c2 = Conn::open(b2.addr()).await;
    let r: OffsetCommitResponse = c2.call(ApiKey::OffsetCommit, 7, &commit).await;
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        errors::NOT_COORDINATOR,
        "broker 2 does not coordinate it yet"
    );
    s.broker.abort();
    common::eventually(std::time::Duration::from_secs(30), "broker 2 sees broker 1 gone", || {
        b2.live_brokers() == vec![2]
    })
    .await;
    let r: FindCoordinatorResponse = c2
        .call(
            ApiKey::FindCoordinator,
            2,
            &FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.clone())),
        )
        .await;
    assert_eq!(r.node_id.0, 2, "the group moved");
    let fetch = OffsetFetchRequest::default().with_group_id(g()).with_topics(Some(vec![
        OffsetFetchRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("mv")))
            .with_partition_indexes(vec![0]),
    ]));
    let r: OffsetFetchResponse = c2.call(ApiKey::OffsetFetch, 6, &fetch).await;
    assert_eq!(
        r.topics[0].partitions[0].committed_offset, 42,
        "committed offsets moved with the group"
    );
    let join = JoinGroupRequest::default()
        .with_group_id(g())
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(StrBytes::default())
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range")),
        ]);
    let r: JoinGroupResponse = c2.call(ApiKey::JoinGroup, 5, &join).await;
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    // And the partition moved too: broker 2 appends to it.
    let r: ProduceResponse =
        c2.call(ApiKey::Produce, 9, &produce_req("mv", 0, batch(1, 1), -1)).await;
    assert_eq!(produced(&r).0, 0);
    assert!(b2.render_metrics().contains("folio_kafka_partitions_opened_total 1"));
}

/// Topic changes made through one broker reach the others: partitions added and configs
/// altered on broker 1 show in broker 2's Metadata and DescribeConfigs.
#[tokio::test]
async fn topic_changes_on_one_broker_reach_the_others() {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let tune = |id: i32| move |c: &mut folio_broker::BrokerConfig| c.node_id = id;
    let s = start(1, tune(1)).await;
    let b2 = broker_on(&s.cluster, tune(2)).await;
    let mut c1 = Conn::open(s.broker.addr()).await;
    let mut c2 = Conn::open(b2.addr()).await;
    let _: MetadataResponse = c1.call(ApiKey::Metadata, 9, &metadata_req(&["shared"])).await;
    let r: MetadataResponse = c2.call(ApiKey::Metadata, 9, &metadata_req(&["shared"])).await;
    assert_eq!(r.topics[0].partitions.len(), 1, "broker 2 reads the topic broker 1 created");
    let grow = CreatePartitionsRequest::default().with_timeout_ms(5000).with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("shared")))
            .with_count(3)
            .with_assignments(None),
    ]);
    let r: CreatePartitionsResponse = c1.call(ApiKey::CreatePartitions, 1, &grow).await;
    assert_eq!(r.results[0].error_code, 0);
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("shared"))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("1234"))),
            ]),
    ]);
    let r: IncrementalAlterConfigsResponse =
        c1.call(ApiKey::IncrementalAlterConfigs, 1, &alter).await;
    assert_eq!(r.responses[0].error_code, 0);
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("shared"))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("retention.ms")])),
    ]);
    // Broker 2 re-reads topics every second.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let md: MetadataResponse = c2.call(ApiKey::Metadata, 9, &metadata_req(&["shared"])).await;
        let dc: DescribeConfigsResponse = c2.call(ApiKey::DescribeConfigs, 2, &describe).await;
        let value = dc.results[0]
            .configs
            .first()
            .and_then(|c| c.value.as_ref())
            .map(|v| v.as_str().to_string());
        if md.topics[0].partitions.len() == 3 && value.as_deref() == Some("1234") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker 2 never saw the change: {} partitions, retention.ms {value:?}",
            md.topics[0].partitions.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// #22: a long-polling Fetch answers once `min_bytes` are there (not at `max_wait_ms`),
/// with what arrived; a partition's limit takes no batch past it, except a first batch
/// larger than it (KIP-74).
#[tokio::test]
async fn a_long_poll_answers_once_min_bytes_are_there_and_limits_take_no_batch_past_them() {
    let s = start(1, |_| {}).await;
    let mut fetcher = Conn::open(s.broker.addr()).await;
    let mut producer = Conn::open(s.broker.addr()).await;
    let _: MetadataResponse = producer.call(ApiKey::Metadata, 9, &metadata_req(&["w"])).await;
    let b = batch_sized(1, 1000);
    let r: ProduceResponse =
        producer.call(ApiKey::Produce, 9, &produce_req("w", 0, b.clone(), -1)).await;
    assert_eq!(produced(&r), (0, 0));
    // One batch is there, min_bytes asks for more than one: the fetch waits.
    let mut req = fetch_req("w", uuid::Uuid::nil(), 0);
    req.max_wait_ms = 60_000;
    req.min_bytes = (b.len() * 3 / 2) as i32;
    fetcher.send(ApiKey::Fetch, 12, &req).await;
    let early =
        tokio::time::timeout(std::time::Duration::from_millis(300), fetcher.recv_raw()).await;
    assert!(early.is_err(), "answered before min_bytes were there");
    // The second batch makes min_bytes: the answer comes now, not after 60 s.
    let r: ProduceResponse =
        producer.call(ApiKey::Produce, 9, &produce_req("w", 0, b.clone(), -1)).await;
    assert_eq!(produced(&r), (0, 1));
    let (_, r): (i32, FetchResponse) =
        tokio::time::timeout(std::time::Duration::from_secs(30), fetcher.recv(ApiKey::Fetch, 12))
            .await
            .expect("min_bytes met: answered long before max_wait_ms");
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 2);
    assert_eq!(base_offsets(p.records.as_ref().unwrap()), vec![0, 1]);
    // A partition limit one batch wide: one batch, not two.
    let mut req = fetch_req("w", uuid::Uuid::nil(), 0);
    req.topics[0].partitions[0].partition_max_bytes = (b.len() + 10) as i32;
    let r: FetchResponse = fetcher.call(ApiKey::Fetch, 12, &req).await;
    let records = r.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(base_offsets(&records), vec![0]);
    assert_eq!(records.len(), b.len());
    // A limit below one batch still gets the first batch whole (KIP-74), and only it.
    let mut req = fetch_req("w", uuid::Uuid::nil(), 1);
    req.max_bytes = 1;
    let r: FetchResponse = fetcher.call(ApiKey::Fetch, 12, &req).await;
    assert_eq!(base_offsets(r.responses[0].partitions[0].records.as_ref().unwrap()), vec![1]);
}

/// #25 item 1: CreateTopics with explicit replica assignments is accepted, the partition
/// count and replication factor taken from them; bad assignments get Kafka's codes.
#[tokio::test]
async fn create_topics_takes_explicit_replica_assignments() {
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic,
    };
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let topic = |name: &'static str, assignment: Vec<(i32, Vec<i32>)>, partitions: i32| {
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(name)))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_assignments(
                assignment
                    .into_iter()
                    .map(|(p, b)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(p)
                            .with_broker_ids(b.into_iter().map(BrokerId).collect())
                    })
                    .collect(),
            )
    };
    let req = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        topic("assigned", vec![(0, vec![1]), (1, vec![1]), (2, vec![1])], -1),
        topic("gap", vec![(0, vec![1]), (2, vec![1])], -1),
        topic("both", vec![(0, vec![1])], 1),
    ]);
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 5, &req).await;
    let by_name = |n: &str| r.topics.iter().find(|t| t.name.as_str() == n).unwrap();
    let ok = by_name("assigned");
    assert_eq!((ok.error_code, ok.num_partitions, ok.replication_factor), (0, 3, 1));
    assert_eq!(by_name("gap").error_code, errors::INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(by_name("both").error_code, errors::INVALID_REQUEST);
    let m: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["assigned"])).await;
    assert_eq!(m.topics[0].partitions.len(), 3);
}
