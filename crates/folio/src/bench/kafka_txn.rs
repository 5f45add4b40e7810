//! `folio bench kafka --transactions`: what transactions cost. A broker on one bookie in
//! this process; librdkafka (confluent-kafka) produces N records of 1 KiB to one partition
//! as an idempotent producer (the baseline), then as a transactional producer committing
//! every 1 000 and every 100 records, each to a topic of its own, and prints each rate with
//! `ratio_vs_idempotent`. Then fresh consumers read the topic committed every 100 records
//! read_committed and read_uncommitted, twice each in the order u, c, c, u (means;
//! `ratio_vs_read_uncommitted`): its markers and the last stable offset are what the first
//! pays for.

use std::path::Path;

use folio_broker::config::ListenerConfig;
use folio_broker::{Broker, BrokerConfig};

use super::kafka_driver::{drive_with, figure};

/// Records per run (`--quick`: fewer).
fn records(quick: bool) -> u64 {
    if quick { 100_000 } else { 500_000 }
}

pub(super) async fn run(quick: bool, tmp: &Path, driver: &Path) -> Result<(), String> {
    let (records, record_bytes) = (records(quick), 1024usize);
    println!(
        "bench=kafka_transactions quick={quick} records={records} record_bytes={record_bytes}"
    );
    let (client, bookies, meta) = super::ledger::cluster(&tmp.join("txn-cluster"), 1).await?;
    let env = super::log_env(meta, client);
    let config = BrokerConfig {
        listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
        default_replication: 1,
        replication_max: 1,
        default_partitions: 1,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
    let bootstrap = broker.addr().to_string();
    let produce = async |every: u64| {
        let topic = format!("txn-{every}");
        let args = vec![records.to_string(), record_bytes.to_string(), every.to_string()];
        let line = drive_with(driver, "txn_produce", bootstrap.clone(), topic, args, None).await?;
        figure(&line, "mb_per_s").map(|mb| (mb, figure(&line, "records_per_s").unwrap_or(0.0)))
    };
    let (base_mb, base_rps) = produce(0).await?;
    println!("producer=idempotent mb_per_s={base_mb:.1} records_per_s={base_rps:.0}");
    for every in [1000u64, 100] {
        let (mb, rps) = produce(every).await?;
        println!(
            "producer=transactional commit_every={every} mb_per_s={mb:.1} records_per_s={rps:.0} ratio_vs_idempotent={:.2}",
            mb / base_mb
        );
    }
    let consume = async |isolation: &str| {
        let conf = format!("{{\"isolation.level\": \"{isolation}\"}}");
        let args = vec![records.to_string()];
        let line =
            drive_with(driver, "consume", bootstrap.clone(), "txn-100", args, Some(conf)).await?;
        figure(&line, "consume_mb_per_s")
    };
    // In the order u, c, c, u, so neither isolation has the warmer caches on average.
    let uncommitted_1 = consume("read_uncommitted").await?;
    let committed = (consume("read_committed").await? + consume("read_committed").await?) / 2.0;
    let uncommitted = (uncommitted_1 + consume("read_uncommitted").await?) / 2.0;
    println!(
        "consumer=read_uncommitted commit_every=100 consume_mb_per_s={uncommitted:.1}\nconsumer=read_committed commit_every=100 consume_mb_per_s={committed:.1} ratio_vs_read_uncommitted={:.2}",
        committed / uncommitted
    );
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
