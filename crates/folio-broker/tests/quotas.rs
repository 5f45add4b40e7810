//! #25 item 5: client quotas. AlterClientQuotas / DescribeClientQuotas round trip with
//! Kafka's entity matching and refusals; a producer and a consumer above their byte rates
//! get `throttle_time_ms` (and their connection waits it out); a second broker picks the
//! quotas up through its watch.

use crate::common;

use common::{Conn, batch_sized, metadata_req};
use folio_broker::errors;
use folio_broker::quotas::Kind;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// A described entry: its `(entity type, name)` parts and `(key, value)` quotas.
type Described = (Vec<(String, Option<String>)>, Vec<(String, f64)>);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// An entry: `(entity type, name or default)` parts and `(key, value or removed)` ops.
fn entry(parts: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]) -> EntryData {
    let entity = parts
        .iter()
        .map(|(t, n)| EntityData::default().with_entity_type(s(t)).with_entity_name(n.map(s)));
    let ops = ops.iter().map(|(k, v)| {
        OpData::default().with_key(s(k)).with_value(v.unwrap_or(0.0)).with_remove(v.is_none())
    });
    EntryData::default().with_entity(entity.collect()).with_ops(ops.collect())
}

async fn alter(c: &mut Conn, entries: Vec<EntryData>, validate_only: bool) -> Vec<i16> {
    let req =
        AlterClientQuotasRequest::default().with_entries(entries).with_validate_only(validate_only);
    let r: AlterClientQuotasResponse = c.call(ApiKey::AlterClientQuotas, 1, &req).await;
    r.entries.iter().map(|e| e.error_code).collect()
}

/// Describe with `(entity type, match type, name)` components: `(entity, values)` sorted.
async fn describe(
    c: &mut Conn,
    components: &[(&str, i8, Option<&str>)],
    strict: bool,
) -> Vec<Described> {
    let components = components.iter().map(|(t, m, n)| {
        ComponentData::default().with_entity_type(s(t)).with_match_type(*m).with_match(n.map(s))
    });
    let req = DescribeClientQuotasRequest::default()
        .with_components(components.collect())
        .with_strict(strict);
    let r: DescribeClientQuotasResponse = c.call(ApiKey::DescribeClientQuotas, 1, &req).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let mut out: Vec<_> = r
        .entries
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let entity = e.entity.iter().map(|p| {
                (p.entity_type.to_string(), p.entity_name.as_ref().map(|n| n.to_string()))
            });
            let values = e.values.iter().map(|v| (v.key.to_string(), v.value));
            (entity.collect(), values.collect())
        })
        .collect();
    out.sort_by(|a: &Described, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
    out
}

fn p(entity: &[(&str, Option<&str>)], key: &str, v: f64) -> Described {
    let entity = entity.iter().map(|(t, n)| (t.to_string(), n.map(str::to_string)));
    (entity.collect(), vec![(key.to_string(), v)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_round_trip_and_throttle_producers_and_consumers_above_them() {
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["q"])).await;

    // Refused: keys Folio does not enforce, ip entities, a part named twice, no part, a
    // zero rate. validate_only stores nothing.
    let bad = vec![
        entry(&[("client-id", Some("a"))], &[("request_percentage", Some(10.0))]),
        entry(&[("ip", Some("10.0.0.1"))], &[("producer_byte_rate", Some(1.0))]),
        entry(&[("user", Some("a")), ("user", Some("b"))], &[("producer_byte_rate", Some(1.0))]),
        entry(&[], &[("producer_byte_rate", Some(1.0))]),
        entry(&[("user", None)], &[("consumer_byte_rate", Some(0.0))]),
    ];
    assert_eq!(alter(&mut c, bad, false).await, [errors::INVALID_REQUEST; 5]);
    let ok = entry(&[("client-id", Some("x"))], &[("producer_byte_rate", Some(1.0))]);
    assert_eq!(alter(&mut c, vec![ok], true).await, [0]);
    assert_eq!(describe(&mut c, &[], false).await, []);

    let quotas = vec![
        entry(&[("client-id", Some("folio"))], &[("producer_byte_rate", Some(100_000.0))]),
        entry(&[("client-id", None)], &[("producer_byte_rate", Some(1e12))]),
        entry(&[("user", Some("ANONYMOUS"))], &[("consumer_byte_rate", Some(50_000.0))]),
    ];
    assert_eq!(alter(&mut c, quotas, false).await, [0, 0, 0]);
    let all = describe(&mut c, &[], false).await;
    assert_eq!(
        all,
        [
            p(&[("client-id", None)], "producer_byte_rate", 1e12),
            p(&[("client-id", Some("folio"))], "producer_byte_rate", 100_000.0),
            p(&[("user", Some("ANONYMOUS"))], "consumer_byte_rate", 50_000.0),
        ]
    );
    // Specified client ids only; the default client id only; a user, strictly.
    let named = describe(&mut c, &[("client-id", 2, None)], false).await;
    assert_eq!(named, [all[1].clone()]);
    assert_eq!(describe(&mut c, &[("client-id", 1, None)], false).await, [all[0].clone()]);
    let user = describe(&mut c, &[("user", 0, Some("ANONYMOUS"))], true).await;
    assert_eq!(user, [all[2].clone()]);
    assert_eq!(setup.broker.client_quota_entities(), 3, "in the cache when answered");

    // About 400 kB a request against 100 kB/s, measured over at least 10 s: the first two
    // stay under it, the third is answered with a throttle.
    let mut throttles = Vec::new();
    for _ in 0..3 {
        let req = folio_testkit::kafka::produce_request("q", 0, batch_sized(400, 1000).into(), -1);
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        throttles.push(r.throttle_time_ms);
    }
    assert_eq!(throttles[..2], [0, 0]);
    assert!(throttles[2] > 0 && throttles[2] <= 11_000, "{throttles:?}");
    assert!(setup.broker.metrics().throttle_ms(Kind::Produce) >= throttles[2] as u64);

    // The consumer (user ANONYMOUS, 50 kB/s) reading the 1.2 MB at once is throttled; the
    // answer carries the records all the same, after the connection's mute.
    let mut fetch = common::fetch_req("q", uuid::Uuid::nil(), 0);
    fetch.topics[0].partitions[0].partition_max_bytes = 10 << 20;
    fetch.max_bytes = 10 << 20;
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch).await;
    let records = r.responses[0].partitions[0].records.as_ref().map_or(0, |b| b.len());
    let code = r.responses[0].partitions[0].error_code;
    assert!(records > 1_000_000, "{records} bytes, error {code}");
    assert!(r.throttle_time_ms > 0, "fetch throttle {}", r.throttle_time_ms);
    assert!(setup.broker.metrics().throttle_ms(Kind::Fetch) > 0);

    // Removing a key removes an entity without keys.
    let gone = entry(&[("client-id", None)], &[("producer_byte_rate", None)]);
    assert_eq!(alter(&mut c, vec![gone], false).await, [0]);
    assert_eq!(describe(&mut c, &[], false).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_altered_on_one_broker_reaches_the_others_through_their_watch() {
    let setup = common::start(1, |_| {}).await;
    let other = common::broker_on(&setup.cluster, |c| c.node_id = 2).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let q = entry(&[("user", Some("u"))], &[("producer_byte_rate", Some(5.0))]);
    assert_eq!(alter(&mut c, vec![q], false).await, [0]);
    common::eventually(std::time::Duration::from_secs(10), "the other broker's quotas", || {
        other.client_quota_entities() == 1
    })
    .await;
    let gone = entry(&[("user", Some("u"))], &[("producer_byte_rate", None)]);
    assert_eq!(alter(&mut c, vec![gone], false).await, [0]);
    common::eventually(std::time::Duration::from_secs(10), "removed on the other broker", || {
        other.client_quota_entities() == 0
    })
    .await;
}
