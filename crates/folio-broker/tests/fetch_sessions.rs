//! #25 item 4: fetch sessions (KIP-227) on the raw protocol. A full fetch with epoch 0
//! opens a session; incremental fetches send only what changed and get only what changed;
//! wrong epochs, unknown ids and a switch between topic names and ids are refused; the
//! session cache keeps its limits (slots, partitions) and evicts by Kafka's rules.

use crate::common;

use common::{Conn, batch, metadata_req};
use folio_broker::errors;
use folio_broker::limits::Limit;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "sessions";

fn part(partition: i32, offset: i64) -> FetchPartition {
    FetchPartition::default()
        .with_partition(partition)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1 << 20)
}

/// A fetch in session `(id, epoch)` of `parts` of TOPIC (by name; by id from v13).
fn fetch(id: i32, epoch: i32, topic_id: uuid::Uuid, parts: Vec<FetchPartition>) -> FetchRequest {
    let topics = if parts.is_empty() {
        vec![]
    } else {
        vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_topic_id(topic_id)
                .with_partitions(parts),
        ]
    };
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_id(id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

fn forget(mut req: FetchRequest, partitions: Vec<i32>) -> FetchRequest {
    req.forgotten_topics_data = vec![
        ForgottenTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(partitions),
    ];
    req
}

/// The partitions an answer holds, with whether each carries records.
fn answered(r: &FetchResponse) -> Vec<(i32, bool)> {
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.records.as_ref().is_some_and(|b| !b.is_empty())))
        .collect()
}

async fn produce(c: &mut Conn, partition: i32) {
    let req = folio_testkit::kafka::produce_request(TOPIC, partition, batch(1, 1).into(), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

async fn topic_id(c: &mut Conn) -> uuid::Uuid {
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[TOPIC])).await;
    assert_eq!(r.topics[0].error_code, 0);
    r.topics[0].topic_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetches_send_and_answer_only_what_changed() {
    let setup = common::start(1, |c| c.default_partitions = 4).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let id = topic_id(&mut c).await;
    produce(&mut c, 0).await;

    // A full fetch with epoch 0 opens a session and answers every partition.
    let all = (0..4).map(|p| part(p, 0)).collect();
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(0, 0, id, all)).await;
    assert_eq!(r.error_code, 0);
    let session = r.session_id;
    assert_ne!(session, 0, "a session is opened");
    assert_eq!(answered(&r), [(0, true), (1, false), (2, false), (3, false)]);
    assert_eq!(setup.broker.fetch_sessions(), 1);

    // The client moves partition 0 past its record: nothing changed anywhere, so the
    // answer holds no partition.
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 12, &fetch(session, 1, id, vec![part(0, 1)])).await;
    assert_eq!((r.error_code, r.session_id), (0, session));
    assert_eq!(answered(&r), []);

    // A record on partition 2: only partition 2 is answered, and again while the client
    // does not move its offset (records are news each time).
    produce(&mut c, 2).await;
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session, 2, id, vec![])).await;
    assert_eq!(answered(&r), [(2, true)]);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session, 3, id, vec![])).await;
    assert_eq!(answered(&r), [(2, true)]);
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 12, &fetch(session, 4, id, vec![part(2, 1)])).await;
    assert_eq!(answered(&r), []);

    // A repeated epoch, an unknown session, and topic ids in a session of names are
    // refused, answering no partition; the session goes on.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session, 4, id, vec![])).await;
    assert_eq!((r.error_code, answered(&r)), (errors::INVALID_FETCH_SESSION_EPOCH, vec![]));
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session ^ 1, 5, id, vec![])).await;
    assert_eq!(r.error_code, errors::FETCH_SESSION_ID_NOT_FOUND);
    let r: FetchResponse = c.call(ApiKey::Fetch, 13, &fetch(session, 5, id, vec![])).await;
    assert_eq!(r.error_code, errors::FETCH_SESSION_TOPIC_ID_ERROR);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session, 5, id, vec![])).await;
    assert_eq!((r.error_code, answered(&r)), (0, vec![]));

    // A forgotten partition is no longer fetched: its record is not news.
    let req = forget(fetch(session, 6, id, vec![]), vec![3]);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await;
    assert_eq!(answered(&r), []);
    produce(&mut c, 3).await;
    produce(&mut c, 1).await;
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session, 7, id, vec![])).await;
    assert_eq!(answered(&r), [(1, true)]);

    // Epoch -1 closes the session; the answer is a full one without a session.
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 12, &fetch(session, -1, id, vec![part(0, 0)])).await;
    assert_eq!((r.error_code, r.session_id, answered(&r)), (0, 0, vec![(0, true)]));
    assert_eq!(setup.broker.fetch_sessions(), 0);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(session, 8, id, vec![])).await;
    assert_eq!(r.error_code, errors::FETCH_SESSION_ID_NOT_FOUND);

    // Sessions by topic id work the same (Fetch v13+).
    let r: FetchResponse = c.call(ApiKey::Fetch, 13, &fetch(0, 0, id, vec![part(1, 0)])).await;
    let by_id = r.session_id;
    assert_ne!(by_id, 0);
    assert_eq!(r.responses[0].topic_id, id);
    produce(&mut c, 1).await;
    let r: FetchResponse = c.call(ApiKey::Fetch, 13, &fetch(by_id, 1, id, vec![part(1, 1)])).await;
    assert_eq!(answered(&r), [(1, true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_cache_keeps_its_limits_and_evicts_by_size() {
    let setup = common::start(1, |c| {
        c.default_partitions = 4;
        c.limits.fetch_sessions_max = 1;
        c.limits.fetch_session_partitions_max = 4;
    })
    .await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let id = topic_id(&mut c).await;
    let parts = |n: i32| (0..n).map(|p| part(p, 0)).collect::<Vec<_>>();
    let hits = || setup.broker.metrics().limit_hits(Limit::FetchSessions);

    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(0, 0, id, parts(2))).await;
    let two = r.session_id;
    assert_ne!(two, 0);
    // No free slot, and the one session is neither idle nor smaller: no session, a full
    // answer all the same, the limit counted.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(0, 0, id, parts(1))).await;
    assert_eq!((r.error_code, r.session_id, answered(&r).len()), (0, 0, 1));
    assert_eq!(hits(), 1);
    // A larger session evicts the smaller one.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(0, 0, id, parts(3))).await;
    let three = r.session_id;
    assert_ne!(three, 0);
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(two, 1, id, vec![])).await;
    assert_eq!(r.error_code, errors::FETCH_SESSION_ID_NOT_FOUND, "evicted");
    // Growing past fetch_session_partitions_max (a fifth partition) closes the session.
    let more = vec![part(3, 0), part(4, 0)];
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(three, 1, id, more)).await;
    assert_eq!(r.error_code, errors::FETCH_SESSION_ID_NOT_FOUND);
    assert_eq!((setup.broker.fetch_sessions(), hits()), (0, 2));
    // More partitions than all sessions may hold: answered in full, without a session.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(0, 0, id, parts(5))).await;
    assert_eq!((r.session_id, answered(&r).len()), (0, 5));
    assert_eq!(hits(), 3);
}
