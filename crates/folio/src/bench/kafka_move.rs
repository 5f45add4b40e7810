//! The move phase of `bench kafka` (`--phase move`, also in `all`): how long partitions
//! take to open on their next owner, with 1 and `MANY` partitions moving at once, after a
//! clean stop and after a crash of the broker that served them.
//!
//! Three in-process bookies (RF 3), embedded metadata. For each case a broker (node 1)
//! creates a topic, and every partition gets two 100-byte records (acks=all), so each has an
//! open ledger with data. Then that broker either shuts down (`previous_owner=clean`: its
//! ledgers are closed, each log's end is recorded) or is aborted (`previous_owner=crashed`:
//! nothing is closed, its ledgers are left open). A new broker with the same node id starts
//! on the same store (`store_exclusive`, as `folio standalone` restarts: the old
//! registration is replaced at once, so no lease is waited out) and one sessionless Fetch
//! asks for every partition: the broker opens them together (at most
//! `PARTITION_OPENS_CONCURRENT_MAX` at once), fencing and recovering the crashed owner's
//! ledgers.
//!
//! Prints per case: `open_all_ms` (that Fetch, every open included), and from the new
//! broker's `folio_kafka_partition_open_seconds` histogram the bucket bounds of the open
//! time's p50, p99 and max (`open_p99_ms_at_most`: at least 99 % opened within it; the
//! wait for a free open slot is not included), against the target of 50 ms
//! (`target_open_p99_ms`). Recovery of a crashed owner's ledger reads from its last
//! confirmed entry on, so its cost does not grow with the ledger.

use std::path::Path;
use std::time::Instant;

use folio_broker::config::ListenerConfig;
use folio_broker::{Broker, BrokerConfig};
use folio_kafka_client::create_topics_request;
use kafka_protocol::messages::{ApiKey, CreateTopicsResponse};

use super::partitions::{connect, fetch_all, produce_round};

/// Partitions moving at once in the larger case.
const MANY: usize = 1000;
/// The open time the issue sets for a partition with a clean previous owner.
const TARGET_OPEN_P99_MS: u64 = 50;

pub(super) async fn run(tmp: &Path) -> Result<(), String> {
    let (client, bookies, meta) = super::ledger::cluster(&tmp.join("move"), 3).await?;
    let env = super::log_env(meta, client);
    let config = BrokerConfig {
        node_id: 1,
        listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
        default_replication: 3,
        replication_max: 3,
        store_exclusive: true,
        ..BrokerConfig::default()
    };
    for n in [1, MANY] {
        for crashed in [false, true] {
            let how = if crashed { "crashed" } else { "clean" };
            let topic = format!("move-{how}-{n}");
            let first =
                Broker::start(config.clone(), env.clone()).await.map_err(|e| e.to_string())?;
            let mut conn = connect(&first).await?;
            let created: CreateTopicsResponse = conn
                .call(
                    ApiKey::CreateTopics,
                    5,
                    &create_topics_request(std::slice::from_ref(&topic), n as i32),
                )
                .await
                .map_err(|e| e.to_string())?;
            if let Some(t) = created.topics.iter().find(|t| t.error_code != 0) {
                return Err(format!(
                    "CreateTopics answered {} ({:?})",
                    t.error_code, t.error_message
                ));
            }
            drop(conn);
            for _ in 0..2 {
                produce_round(&first, &[(topic.as_str(), n)]).await?;
            }
            if crashed {
                first.abort();
            } else {
                first.shutdown().await;
            }
            let next =
                Broker::start(config.clone(), env.clone()).await.map_err(|e| e.to_string())?;
            let mut conn = connect(&next).await?;
            let t = Instant::now();
            fetch_all(&mut conn, &[(topic.as_str(), n)], 0, -1, 0).await?;
            let all_ms = t.elapsed().as_secs_f64() * 1000.0;
            let opens = &next.metrics().partition_open_latency;
            let ms = |q: f64| super::partitions::bound_ms(opens, q);
            println!(
                "move partitions={n} previous_owner={how} open_all_ms={all_ms:.1} open_ms_per_partition={:.2} opened={} open_p50_ms_at_most={} open_p99_ms_at_most={} open_max_ms_at_most={} open_mean_ms={:.2} target_open_p99_ms={TARGET_OPEN_P99_MS}",
                all_ms / n as f64,
                opens.count(),
                ms(0.5),
                ms(0.99),
                ms(1.0),
                opens.sum().as_secs_f64() * 1000.0 / opens.count().max(1) as f64,
            );
            drop(conn);
            next.shutdown().await;
        }
    }
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
