//! Hostile clients over the real Kafka listener (issue #21), one test per attack: names far
//! above their limits, huge declared lengths, one byte at a time, more connections than
//! allowed, pipelining without reading, auto-create storms, unbounded fetches, metrics
//! label injection. Each asserts that the offender gets an error or a close (and the limit
//! is counted), that a well-behaved client on another connection keeps being served, and
//! that the bytes held come back.

// Kafka's wire format is big-endian (the shared test helpers build batches).
#![allow(clippy::big_endian_bytes)]

use crate::common;

use common::*;
use kafka_protocol::messages::*;
use std::time::Duration;

use folio_broker::limits::Limit;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for what it polls.
const WITHIN: Duration = Duration::from_secs(20);

/// Waits for the broker to close `s` (reads until end of stream or a reset).
async fn closed_by_broker(s: &mut TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    let wait = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    wait.await.expect("the broker closes the connection");
}

/// A well-behaved client is served: ApiVersions and Metadata answer on a new connection.
async fn still_served(addr: std::net::SocketAddr) {
    let mut c = Conn::open(addr).await;
    let r: ApiVersionsResponse =
        c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
    assert_eq!(r.error_code, 0);
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &MetadataRequest::default()).await;
    assert_eq!(r.error_code, 0);
}

async fn create(c: &mut Conn, name: &str) {
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            7,
            &folio_testkit::kafka::create_topics_request(&[name.into()], 1),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0);
}

async fn produce(c: &mut Conn, topic: &str, records: Vec<u8>) {
    let req = folio_testkit::kafka::produce_request(topic, 0, records.into(), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

/// A request that declares 90 MiB and sends a few bytes, then one byte at a time, holds
/// only one read step of memory (not 90 MiB), and is closed by `request_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_declared_length_trickled_in_holds_one_step_and_is_closed() {
    let s = start(1, |c| c.limits.request_read_timeout = Duration::from_millis(500)).await;
    let addr = s.broker.addr();
    let mut attacker = TcpStream::connect(addr).await.unwrap();
    attacker.write_all(&(90i32 << 20).to_be_bytes()).await.unwrap();
    attacker.write_all(&[0u8; 100]).await.unwrap();
    eventually(WITHIN, "the broker reserves the first step", || s.broker.bytes_held() > 0).await;
    assert!(s.broker.bytes_held() <= 64 * 1024, "held {}", s.broker.bytes_held());
    still_served(addr).await;
    for _ in 0..3 {
        if attacker.write_all(&[1]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // the attack: one byte at a time
    }
    closed_by_broker(&mut attacker).await;
    assert_eq!(s.broker.metrics().limit_hits(Limit::RequestReadTimeout), 1);
    eventually(WITHIN, "the held bytes come back", || s.broker.bytes_held() == 0).await;
    // Above request_bytes_max: closed at once, nothing reserved.
    let mut attacker = TcpStream::connect(addr).await.unwrap();
    attacker.write_all(&i32::MAX.to_be_bytes()).await.unwrap();
    closed_by_broker(&mut attacker).await;
    assert_eq!(s.broker.metrics().limit_hits(Limit::RequestBytes), 1);
    still_served(addr).await;
}

/// Connections above the per-address limit, and above the listener's limit, are closed at
/// once; a slot freed by a closed connection is taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_above_the_limits_are_closed_and_counted() {
    let s = start(1, |c| c.limits.connections_per_address_max = 3).await;
    let addr = s.broker.addr();
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut c = Conn::open(addr).await;
        let r: ApiVersionsResponse =
            c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
        assert_eq!(r.error_code, 0);
        open.push(c);
    }
    let mut fourth = TcpStream::connect(addr).await.unwrap();
    closed_by_broker(&mut fourth).await;
    assert_eq!(s.broker.metrics().limit_hits(Limit::ConnectionsPerAddress), 1);
    drop(open.pop());
    // The slot comes back once the broker has seen the close.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = Conn::open(addr).await;
        if c.0
            .call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
            .await
            .is_ok()
        {
            break;
        }
        assert!(tokio::time::Instant::now() < give_up, "the freed slot never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let other = broker_on(&s.cluster, |c| {
        c.node_id = 2;
        c.limits.connections_max = 2;
    })
    .await;
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut c = Conn::open(other.addr()).await;
        let _: ApiVersionsResponse =
            c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
        kept.push(c);
    }
    let mut third = TcpStream::connect(other.addr()).await.unwrap();
    closed_by_broker(&mut third).await;
    assert_eq!(other.metrics().limit_hits(Limit::Connections), 1);
    still_served(addr).await;
}

/// A client that pipelines fetches and never reads their answers: its answers' bytes are
/// reserved from its connection's budget (so what it pins is bounded), and the connection is
/// closed once an answer waits `reply_write_timeout`. Everything it held comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_without_reading_is_bounded_and_closed() {
    let s = start(1, |c| {
        c.limits.request_bytes_max = 512 * 1024;
        c.limits.connection_bytes_max = 1024 * 1024;
        c.limits.process_bytes_max = 2 * 1024 * 1024;
        c.limits.fetch_bytes_max = 256 * 1024;
        c.limits.reply_write_timeout = Duration::from_millis(300);
    })
    .await;
    let addr = s.broker.addr();
    let mut c = Conn::open(addr).await;
    create(&mut c, "p").await;
    for _ in 0..4 {
        produce(&mut c, "p", batch_sized(50, 4000)).await;
    }
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let attacker = socket.connect(addr).await.unwrap();
    let mut frames = Vec::new();
    for i in 0..50 {
        let req = fetch_req("p", uuid::Uuid::nil(), 0);
        frames.extend(folio_testkit::kafka::encode_request(ApiKey::Fetch, 12, i, &req).unwrap());
    }
    let (mut rd, mut wr) = attacker.into_split();
    // Fetches until the answers fill the socket buffers and one waits too long.
    let flood = tokio::spawn(async move { while wr.write_all(&frames).await.is_ok() {} });
    let budget = 2 * 1024 * 1024;
    eventually(WITHIN, "the reply write timeout closes the attacker", || {
        assert!(s.broker.bytes_held() <= budget);
        s.broker.metrics().limit_hits(Limit::ReplyWriteTimeout) == 1
    })
    .await;
    flood.abort();
    // A well-behaved consumer reads everything meanwhile.
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_req("p", uuid::Uuid::nil(), 0)).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert!(!base_offsets(p.records.as_deref().unwrap_or_default()).is_empty());
    let mut sink = vec![0u8; 1 << 16];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(20), rd.read(&mut sink)).await {
        if n == 0 {
            break;
        }
    }
    eventually(WITHIN, "the held bytes come back", || s.broker.bytes_held() == 0).await;
}

/// Fetch `max_bytes` of 0 (read as "no limit" before) or far above the cap gets at most
/// `fetch_bytes_max` (plus the first batch, KIP-74).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_sizes_are_capped_by_the_broker() {
    let cap = 64 * 1024;
    let s = start(1, |c| c.limits.fetch_bytes_max = cap).await;
    let mut c = Conn::open(s.broker.addr()).await;
    create(&mut c, "f").await;
    for _ in 0..8 {
        produce(&mut c, "f", batch_sized(4, 4000)).await; // about 16 KiB each
    }
    for max in [0, i32::MAX] {
        let mut req = fetch_req("f", uuid::Uuid::nil(), 0).with_max_bytes(max);
        req.topics[0].partitions[0].partition_max_bytes = i32::MAX;
        let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await;
        let records = r.responses[0].partitions[0].records.clone().unwrap_or_default();
        assert!(!records.is_empty() && records.len() <= cap, "{max}: {} bytes", records.len());
    }
    assert_eq!(s.broker.metrics().limit_hits(Limit::FetchBytes), 2);
}

/// A Metadata request naming many unknown topics creates at most
/// `auto_create_per_request_max` of them, and all requests together at most
/// `auto_create_per_minute_max` a minute; the rest are UNKNOWN_TOPIC_OR_PARTITION.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_create_storms_are_limited_per_request_and_per_minute() {
    let s = start(1, |c| {
        c.limits.auto_create_per_request_max = 3;
        c.limits.auto_create_per_minute_max = 5;
    })
    .await;
    let mut c = Conn::open(s.broker.addr()).await;
    let mut created = Vec::new();
    for round in 0..3 {
        let names: Vec<String> = (0..10).map(|i| format!("storm-{round}-{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&refs)).await;
        created.push(r.topics.iter().filter(|t| t.error_code == 0).count());
        assert!(r.topics.iter().all(|t| t.error_code == 0
            || t.error_code == folio_broker::errors::UNKNOWN_TOPIC_OR_PARTITION));
    }
    assert_eq!(created, [3, 2, 0]);
    let m = s.broker.metrics();
    assert_eq!(m.limit_hits(Limit::AutoCreatePerRequest), 7);
    assert_eq!(m.limit_hits(Limit::AutoCreatePerMinute), 8 + 10);
    still_served(s.broker.addr()).await;
}

/// A client id above `client_id_bytes_max` closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_id_above_the_limit_closes_the_connection() {
    let s = start(1, |_| {}).await;
    let mut frame = Vec::new();
    frame.extend(3i16.to_be_bytes()); // Metadata
    frame.extend(1i16.to_be_bytes()); // v1: header v1
    frame.extend(7i32.to_be_bytes());
    frame.extend(2000i16.to_be_bytes());
    frame.extend(vec![b'c'; 2000]);
    frame.extend((-1i32).to_be_bytes()); // all topics
    let mut attacker = TcpStream::connect(s.broker.addr()).await.unwrap();
    attacker.write_all(&(frame.len() as i32).to_be_bytes()).await.unwrap();
    attacker.write_all(&frame).await.unwrap();
    closed_by_broker(&mut attacker).await;
    assert_eq!(s.broker.metrics().limit_hits(Limit::ClientId), 1);
    still_served(s.broker.addr()).await;
}

/// A group id made to end a label and start a sample of its own is escaped in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_id_cannot_forge_metrics_samples() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    create(&mut c, "m").await;
    produce(&mut c, "m", batch(3, 1)).await;
    let evil = "g\",topic=\"x\",partition=\"0\"} 1\nfolio_injected{a=\"b";
    let req = offset_commit_req(evil.to_string(), "m", 1);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &req).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let text = s.broker.render_metrics();
    assert!(text.contains("folio_kafka_group_lag{group=\"g\\\""), "{text}");
    assert!(text.lines().all(|l| !l.starts_with("folio_injected")), "{text}");
}

/// librdkafka sends an OffsetCommit whose group id is 30 000 '/' without complaint. It once
/// panicked the embedded metadata store (fjall refuses 64 KiB keys) while its state lock
/// was held, and every later metadata write failed until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_commit_with_a_huge_group_id_is_refused_and_the_store_keeps_working() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            7,
            &folio_testkit::kafka::create_topics_request(&["t".into()], 1),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0);
    let commit = |group: String| offset_commit_req(group, "t", 1);
    let r: OffsetCommitResponse =
        c.call(ApiKey::OffsetCommit, 7, &commit("/".repeat(30_000))).await;
    assert_eq!(r.topics[0].partitions[0].error_code, folio_broker::errors::INVALID_GROUP_ID);
    assert_eq!(s.broker.metrics().limit_hits(Limit::Names), 1);
    // The store takes writes: a new topic, an ordinary commit, a group id at the limit.
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            7,
            &folio_testkit::kafka::create_topics_request(&["u".into()], 1),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0, "metadata writes still work");
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit("g".into())).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let limit = folio_broker::group::GROUP_ID_BYTES_MAX;
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit("/".repeat(limit))).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "a group id of {limit} '/' is fine");
}

/// Produces `b` to `partition` of `topic`, returning its base offset.
async fn produce_to(c: &mut Conn, topic: &str, partition: i32, b: Vec<u8>) -> i64 {
    let req = folio_testkit::kafka::produce_request(topic, partition, b.into(), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce to {topic}/{partition}");
    p.base_offset
}

/// The base offsets of the batches in `partition` of `topic`, from offset 0.
async fn fetch_offsets(c: &mut Conn, topic: &str, partition: i32) -> Vec<i64> {
    let mut req = fetch_req(topic, uuid::Uuid::nil(), 0);
    req.topics[0].partitions[0].partition = partition;
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "fetch from {topic}/{partition}");
    base_offsets(&p.records.clone().unwrap_or_default())
}

/// A client touching more partitions than `partitions_open_max` cannot make the broker
/// keep them all open: opening one more closes the least recently used, which reopens
/// on its next use with nothing lost (D1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_partitions_are_limited_and_the_least_recently_used_closes_d1() {
    let s = start(1, |c| c.limits.partitions_open_max = 2).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            7,
            &folio_testkit::kafka::create_topics_request(&["p".into()], 3),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0);
    for p in 0..3 {
        assert_eq!(produce_to(&mut c, "p", p, batch(2, 1)).await, 0);
        assert!(s.broker.partitions_open() <= 2);
    }
    // Partition 0 was the least recently used when 2 opened: closed, then reopened here.
    assert_eq!(s.broker.metrics().limit_hits(Limit::PartitionsOpen), 1);
    assert_eq!(produce_to(&mut c, "p", 0, batch(2, 1)).await, 2);
    assert_eq!(fetch_offsets(&mut c, "p", 0).await, [0, 2]);
    for p in 1..3 {
        assert_eq!(fetch_offsets(&mut c, "p", p).await, [0]);
    }
    assert_eq!(s.broker.partitions_open(), 2);
    assert!(s.broker.metrics().limit_hits(Limit::PartitionsOpen) >= 3);
    assert!(s.broker.render_metrics().contains("folio_kafka_partitions_open 2"));
}

/// Partitions nobody uses for `partition_idle_timeout` are closed; their next use
/// reopens them with nothing lost (D1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partitions_are_closed_and_reopen_on_use_d1() {
    let s = start(1, |c| c.limits.partition_idle_timeout = Duration::from_millis(300)).await;
    let mut c = Conn::open(s.broker.addr()).await;
    create(&mut c, "idle").await;
    produce(&mut c, "idle", batch(3, 1)).await;
    let broker = &s.broker;
    // The counter moves once the close has finished (after the partition left the
    // open set), so it is the event to wait for.
    let closed_idle =
        || broker.metrics().partitions_closed_idle.load(std::sync::atomic::Ordering::Relaxed);
    eventually(WITHIN, "the idle partition closes", || closed_idle() >= 1).await;
    assert_eq!(closed_idle(), 1);
    assert_eq!(broker.partitions_open(), 0);
    assert_eq!(produce_to(&mut c, "idle", 0, batch(1, 1)).await, 3);
    assert_eq!(fetch_offsets(&mut c, "idle", 0).await, [0, 3]);
}

/// A `group.instance.id` above GROUP_INSTANCE_ID_BYTES_MAX (Kafka's clients allow 249
/// characters) gets INVALID_REQUEST and joins nothing; one at the limit joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_with_a_huge_group_instance_id_is_refused() {
    let s = start(1, |c| c.groups.initial_rebalance_delay = std::time::Duration::ZERO).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let join = |instance: String| {
        join_req("g")
            .with_group_instance_id(Some(kafka_protocol::protocol::StrBytes::from_string(instance)))
    };
    let limit = folio_broker::limits::GROUP_INSTANCE_ID_BYTES_MAX;
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join("i".repeat(limit + 1))).await;
    assert_eq!(r.error_code, folio_broker::errors::INVALID_REQUEST);
    assert_eq!(s.broker.metrics().limit_hits(Limit::Names), 1);
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join("i".repeat(limit))).await;
    assert_eq!(r.error_code, 0, "an instance id of {limit} bytes joins");
}

/// #44 item 3: commits under fresh group ids cannot fill the store or the broker's memory.
/// A client creates at most `new_groups_per_client_per_minute_max` groups by committing, a
/// coordinator keeps at most `groups_max` groups (a join of one more is refused too), both
/// POLICY_VIOLATION and counted; and the offsets of groups without members expire
/// (`offsets.retention.minutes`): the group, its offsets and its claim leave the store,
/// while an offset committed earlier with its own retention (OffsetCommit v2) stays; a group
/// that only rebalanced goes with its claim once its members are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_limited_per_client_and_per_broker_and_their_offsets_expire() {
    let s = start(1, |c| {
        c.groups.initial_rebalance_delay = Duration::ZERO;
        c.groups.groups_max = 6;
        c.groups.new_groups_per_client_per_minute_max = 4;
        c.groups.offsets_retention = Duration::from_millis(500);
        c.groups.offsets_retention_check_interval = Duration::from_millis(50);
    })
    .await;
    let mut c = Conn::open(s.broker.addr()).await;
    create(&mut c, "t").await;
    // First, one committed with a retention of its own (v2): an hour.
    let mut long = offset_commit_req("g-long".into(), "t", 1);
    long.retention_time_ms = 3_600_000;
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 2, &long).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let commit = async |c: &mut Conn, group: &str| -> i16 {
        let r: OffsetCommitResponse =
            c.call(ApiKey::OffsetCommit, 7, &offset_commit_req(group.into(), "t", 1)).await;
        r.topics[0].partitions[0].error_code
    };
    for g in ["g0", "g1", "g2"] {
        assert_eq!(commit(&mut c, g).await, 0, "{g}");
    }
    assert_eq!(commit(&mut c, "g3").await, folio_broker::errors::POLICY_VIOLATION);
    assert_eq!(s.broker.metrics().limit_hits(Limit::NewGroupsPerClient), 1);
    assert_eq!(commit(&mut c, "g0").await, 0, "a group it holds is not new");
    let join = |group: &str| join_req(group);
    for g in ["j0", "j1"] {
        let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join(g)).await;
        assert_eq!(r.error_code, 0, "{g}");
    }
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join("j2")).await;
    assert_eq!(r.error_code, folio_broker::errors::POLICY_VIOLATION, "a seventh group");
    assert_eq!(s.broker.metrics().limit_hits(Limit::Groups), 1);

    // The committed groups have no members: their offsets expire, and they are gone; the
    // one with its own retention, committed before them, stays.
    let meta = s.cluster.meta.clone();
    let keys = folio_meta::keys::Keys::default();
    let stored = async |prefix: String| {
        let all = folio_meta::list_all(meta.as_ref(), &prefix).await.unwrap();
        let mut groups: Vec<String> = all
            .iter()
            .map(|v| v.key[prefix.len()..].split('/').next().unwrap_or_default().to_string())
            .collect();
        groups.dedup();
        groups
    };
    let deadline = tokio::time::Instant::now() + WITHIN;
    while stored(keys.groups()).await.len() > 1 || stored(keys.group_claims()).await.len() > 1 {
        assert!(tokio::time::Instant::now() < deadline, "offsets did not expire");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stored(keys.groups()).await, ["g-long"]);
    assert_eq!(stored(keys.group_claims()).await, ["g-long"]);
    // The joined groups too: their members' sessions ended, they never committed, and
    // their claims (written by their rebalances) aged past the retention. The listing
    // follows the store's deletions.
    loop {
        let r: ListGroupsResponse =
            c.call(ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await;
        let mut listed: Vec<String> = r.groups.iter().map(|g| g.group_id.to_string()).collect();
        listed.sort();
        if listed == ["g-long"] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "expired groups still listed: {listed:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Room again for another group.
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join("j2")).await;
    assert_eq!(r.error_code, 0);
}

/// Overload pushback (`connection_read_ahead_bytes`): a connection's next request is read
/// only once its earlier ones hold no more than the read-ahead. With 0 (one request at a
/// time, as Kafka serves a connection) a produce pipelined behind a long-polling fetch of
/// the same partition is read only after the fetch answered, empty, at its `max_wait`;
/// with the default read-ahead it is read at once and the fetch answers with its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_read_only_while_it_holds_no_more_than_its_read_ahead() {
    for (read_ahead, max_wait_ms, fetched) in [(0, 1000, 0), (8 << 20, 20_000, 1)] {
        let s = start(1, |c| c.limits.connection_read_ahead_bytes = read_ahead).await;
        let mut c = Conn::open(s.broker.addr()).await;
        create(&mut c, "ahead").await;
        let fetch = fetch_req("ahead", uuid::Uuid::nil(), 0).with_max_wait_ms(max_wait_ms);
        c.send(ApiKey::Fetch, 12, &fetch).await;
        let produce = folio_testkit::kafka::produce_request("ahead", 0, batch(1, 0).into(), -1);
        c.send(ApiKey::Produce, 9, &produce).await;
        let (_, f): (_, FetchResponse) = c.recv(ApiKey::Fetch, 12).await;
        let records = f.responses[0].partitions[0].records.clone().unwrap_or_default();
        assert_eq!(base_offsets(&records).len(), fetched, "read-ahead {read_ahead}");
        let (_, p): (_, ProduceResponse) = c.recv(ApiKey::Produce, 9).await;
        assert_eq!(produced(&p), (0, 0), "read-ahead {read_ahead}");
    }
}
