//! Groups benchmark: how fast a group settles, classic protocol against the consumer
//! protocol (KIP-848) in the same run, and what a share group (KIP-932) delivers.
//!
//! On a fresh broker (one in-process bookie, embedded metadata), with confluent-kafka
//! consumers as child processes of the driver (`groups_driver.py`, embedded):
//! - a 10-member group of a 32-partition topic settles; then a member joins (time until
//!   every partition has exactly one owner and the newcomer has some:
//!   `settle_after_join_ms`) and a member is SIGKILLed (time until its partitions have
//!   owners again: `settle_after_death_ms`, which a session timeout dominates: 6 s for both
//!   protocols here). Classic members use cooperative-sticky, heartbeat every 1 s; consumer
//!   protocol members the broker's uniform assignor, heartbeat every 1 s.
//! - a share group of 1 and then 4 members (implicit acknowledgement) reads a 4-partition
//!   topic of 100-byte records: `records_per_s` from the first record read to the last.
//!
//! `ratio_vs_classic` compares the consumer protocol's settle times with classic's;
//! `ratio_vs_one_member` the 4-member share group's rate with one member's.

use std::time::Duration;

use folio_broker::{Broker, BrokerConfig};
use folio_kafka_client::{KafkaConn, create_topic_request, produce_request};
use kafka_protocol::messages::*;

use super::kafka_driver::figure;

const DRIVER: &str = include_str!("groups_driver.py");
/// Members of the settling group (the last one joins during the measurement).
const MEMBERS: usize = 10;
const SETTLE_PARTITIONS: i32 = 32;
const SHARE_PARTITIONS: i32 = 4;
const RECORD_BYTES: usize = 100;
const BATCH_RECORDS: i32 = 500;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn create(conn: &mut KafkaConn, name: &str, partitions: i32) -> Result<(), String> {
    let req = create_topic_request(name, partitions, &[]);
    let r: CreateTopicsResponse = conn.call(ApiKey::CreateTopics, 5, &req).await?;
    match r.topics[0].error_code {
        0 => Ok(()),
        code => Err(format!("creating {name}: error {code}")),
    }
}

async fn fill(conn: &mut KafkaConn, topic: &str, records: usize) -> Result<(), String> {
    let batch = folio_broker::batch::build(BATCH_RECORDS, 1, 0, |_| vec![b's'; RECORD_BYTES]);
    let mut n = 0;
    let mut p = 0;
    while n < records {
        let req = produce_request(topic, p % SHARE_PARTITIONS, batch.clone().into(), -1);
        let r: ProduceResponse = conn.call(ApiKey::Produce, 9, &req).await?;
        if let code @ 1.. = r.responses[0].partition_responses[0].error_code {
            return Err(format!("produce to {topic}: error {code}"));
        }
        n += BATCH_RECORDS as usize;
        p += 1;
    }
    Ok(())
}

async fn drive(driver: &std::path::Path, args: Vec<String>) -> Result<String, String> {
    let driver = driver.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3").arg(&driver).args(args).output()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("running python3: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "the groups driver failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(stdout.lines().last().unwrap_or_default().to_string())
}

async fn run_async(args: Args) -> Result<(), String> {
    super::kafka::require_confluent_kafka()?;
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-groups-")?;
    let driver = tmp.path().join("groups_driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| format!("writing {}: {e}", driver.display()))?;
    let records = if args.run.quick { 100_000 } else { 500_000 };
    let (client, bookies, meta) = super::ledger::cluster(&tmp.path().join("cluster"), 1).await?;
    let mut config = BrokerConfig {
        listeners: vec![folio_broker::config::ListenerConfig::plaintext(
            "127.0.0.1:0".parse().expect("address"),
        )],
        default_replication: 1,
        replication_max: 1,
        ..BrokerConfig::default()
    };
    config.groups.consumer_session_timeout = Duration::from_secs(6);
    config.groups.consumer_heartbeat_interval = Duration::from_secs(1);
    config.groups.initial_rebalance_delay = Duration::ZERO;
    config.groups.shares.auto_offset_reset = folio_broker::domain::share::Reset::Earliest;
    let broker =
        Broker::start(config, super::log_env(meta, client)).await.map_err(|e| e.to_string())?;
    let addr = broker.addr().to_string();
    let mut conn = KafkaConn::connect(broker.addr()).await?;
    println!(
        "bench=groups quick={} members={MEMBERS} partitions={SETTLE_PARTITIONS} session_timeout_ms=6000 share_partitions={SHARE_PARTITIONS} share_records={records} record_bytes={RECORD_BYTES}",
        args.run.quick
    );
    let mut settle = Vec::new();
    for protocol in ["classic", "consumer"] {
        let topic = format!("settle-{protocol}");
        create(&mut conn, &topic, SETTLE_PARTITIONS).await?;
        let a = vec!["settle".into(), addr.clone(), topic, protocol.into(), MEMBERS.to_string()];
        let line = drive(&driver, a).await?;
        println!("setup=groups_settle {line}");
        settle.push((
            figure(&line, "settle_after_join_ms")?,
            figure(&line, "settle_after_death_ms")?,
        ));
    }
    println!(
        "ratio_vs_classic join={:.2} death={:.2}",
        settle[1].0 / settle[0].0.max(1e-9),
        settle[1].1 / settle[0].1.max(1e-9)
    );
    let mut rates = Vec::new();
    for members in [1usize, 4] {
        let topic = format!("share-{members}");
        create(&mut conn, &topic, SHARE_PARTITIONS).await?;
        fill(&mut conn, &topic, records).await?;
        let a = vec!["share".into(), addr.clone(), topic, members.to_string(), records.to_string()];
        let line = drive(&driver, a).await?;
        println!("setup=groups_share {line}");
        rates.push(figure(&line, "records_per_s")?);
    }
    println!("ratio_vs_one_member={:.2}", rates[1] / rates[0].max(1e-9));
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
