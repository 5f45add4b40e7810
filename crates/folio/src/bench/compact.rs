//! Compaction benchmark (#25 item 3): a broker on three in-process bookies (E=3 Qw=2 Qa=2)
//! with a compacted topic filled with 1 KiB records over a key space ten times smaller than
//! the record count (so about 90 % of the records are superseded), compacted once by the
//! broker's compactor with its default pacing (`busy_fraction` 0.5).
//!
//! Meanwhile a producer (4 connections, 100-record batches of 1 KiB records, acks=all)
//! writes to another topic. Its rate is measured before, during and after the compaction;
//! `ratio_vs_idle` compares the rate during compaction to the mean of before and after (the
//! two baselines bracket it, since a run's later phases are slower on this VM).
//!
//! Printed: the compaction's input MB/s (`compaction_mb_per_s`), bytes in and out, and what
//! the process read from and wrote to storage per byte compacted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use folio_broker::{Broker, BrokerConfig};
use folio_kafka_client::{KafkaConn, create_topic_request, produce_request};
use kafka_protocol::messages::*;

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Records in the compacted topic (default 1 000 000; 200 000 with --quick).
    #[arg(long)]
    records: Option<u64>,
}

const RECORD_BYTES: usize = 1024;
const BATCH_RECORDS: i32 = 100;
const PRODUCERS: usize = 4;

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn create(conn: &mut KafkaConn, name: &str, configs: &[(&str, &str)]) -> Result<(), String> {
    let req = create_topic_request(name, 1, configs);
    let r: CreateTopicsResponse = conn.call(ApiKey::CreateTopics, 5, &req).await?;
    match r.topics[0].error_code {
        0 => Ok(()),
        code => Err(format!("creating {name}: error {code}")),
    }
}

/// One keyed batch: `BATCH_RECORDS` records of `RECORD_BYTES`, keys `first..` modulo `keys`.
fn keyed_batch(first: u64, keys: u64) -> Vec<u8> {
    folio_broker::batch::build_keyed(BATCH_RECORDS, 1_700_000_000_000, 0, |i| {
        let n = first + i as u64;
        let key = format!("key-{}", n % keys).into_bytes();
        (Some(key), Some(vec![b'a' + (n % 26) as u8; RECORD_BYTES]))
    })
}

async fn produce(conn: &mut KafkaConn, topic: &str, batch: Vec<u8>) -> Result<(), String> {
    let r: ProduceResponse =
        conn.call(ApiKey::Produce, 9, &produce_request(topic, 0, batch.into(), -1)).await?;
    match r.responses[0].partition_responses[0].error_code {
        0 => Ok(()),
        code => Err(format!("produce to {topic}: error {code}")),
    }
}

/// Produces to `topic` from `PRODUCERS` connections until `stop`; returns the bytes sent.
async fn load(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> Result<u64, String> {
    let bytes = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..PRODUCERS {
        let (stop, bytes) = (stop.clone(), bytes.clone());
        tasks.spawn(async move {
            let mut conn = KafkaConn::connect(addr).await?;
            let batch =
                folio_broker::batch::build(BATCH_RECORDS, 1, 0, |_| vec![b'l'; RECORD_BYTES]);
            while !stop.load(Relaxed) {
                produce(&mut conn, "load", batch.clone()).await?;
                bytes.fetch_add(batch.len() as u64, Relaxed);
            }
            Ok::<_, String>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok(bytes.load(Relaxed))
}

/// The producer's MB/s over `d`.
async fn load_for(addr: std::net::SocketAddr, d: Duration) -> Result<f64, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let task = tokio::spawn(load(addr, stop.clone()));
    tokio::time::sleep(d).await;
    stop.store(true, Relaxed);
    let bytes = task.await.map_err(|e| e.to_string())??;
    Ok(bytes as f64 / MIB / t0.elapsed().as_secs_f64())
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-compact-")?;
    let records = args.records.unwrap_or(if args.run.quick { 200_000 } else { 1_000_000 });
    let keys = (records / 10).max(1);
    let phase = Duration::from_secs(if args.run.quick { 6 } else { 15 });
    let (client, bookies, meta) = super::ledger::cluster(&tmp.path().join("cluster"), 3).await?;
    let env = super::log_env(meta, client);
    let mut config = BrokerConfig {
        listeners: vec![folio_broker::config::ListenerConfig::plaintext(
            "127.0.0.1:0".parse().expect("address"),
        )],
        default_replication: 3,
        replication_max: 3,
        ..BrokerConfig::default()
    };
    // Ledgers of about 20 MB, so the compacted topic spans several; the compactor runs
    // only when asked.
    config.log.rollover_bytes = 20 << 20;
    config.compaction.check_interval = Duration::from_secs(1 << 30);
    let busy_fraction = config.compaction.busy_fraction;
    let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
    let addr = broker.addr();
    let mut conn = KafkaConn::connect(addr).await?;
    create(&mut conn, "kv", &[("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0")])
        .await?;
    create(&mut conn, "load", &[]).await?;
    println!(
        "bench=compact quick={} records={records} keys={keys} record_bytes={RECORD_BYTES} phase_s={} busy_fraction={busy_fraction}",
        args.run.quick,
        phase.as_secs()
    );
    let t0 = Instant::now();
    let mut n = 0;
    while n < records {
        produce(&mut conn, "kv", keyed_batch(n, keys)).await?;
        n += BATCH_RECORDS as u64;
    }
    // Close the open ledger so that everything is compactable.
    broker.roll_partition("kv", 0).await.map_err(|e| e.to_string())?;
    let fill = broker.partition_info("kv", 0).await.map_err(|e| e.to_string())?;
    println!(
        "fill records={n} mb={:.1} ledgers={} fill_s={:.1}",
        fill.bytes as f64 / MIB,
        fill.ledgers.len(),
        t0.elapsed().as_secs_f64()
    );

    let before = load_for(addr, phase).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let producing = tokio::spawn(load(addr, stop.clone()));
    let (read0, written0) = (super::process_io("read_bytes"), super::process_io("write_bytes"));
    let t1 = Instant::now();
    let report = broker
        .compact_now("kv", 0)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no compaction was due")?;
    let compact_s = t1.elapsed().as_secs_f64();
    stop.store(true, Relaxed);
    let during_bytes = producing.await.map_err(|e| e.to_string())??;
    let during = during_bytes as f64 / MIB / t1.elapsed().as_secs_f64();
    let io = |after: Option<u64>, before: Option<u64>| after.zip(before).map(|(a, b)| a - b);
    let read = io(super::process_io("read_bytes"), read0);
    let written = io(super::process_io("write_bytes"), written0);
    let after = load_for(addr, phase).await?;
    let baseline = (before + after) / 2.0;
    let per_byte = |b: Option<u64>| {
        b.map_or("unknown".to_string(), |b| format!("{:.2}", b as f64 / report.bytes_in as f64))
    };
    println!(
        "compaction bytes_in={} bytes_out={} ledgers_replaced={} compact_s={compact_s:.1} compaction_mb_per_s={:.1} kept_fraction={:.3}",
        report.bytes_in,
        report.bytes_out,
        report.replaced.len(),
        report.bytes_in as f64 / MIB / compact_s,
        report.bytes_out as f64 / report.bytes_in as f64
    );
    println!(
        "read_per_byte_compacted={} written_per_byte_compacted={} (process storage I/O during the pass, producer included)",
        per_byte(read),
        per_byte(written)
    );
    println!(
        "produce_mb_per_s_before={before:.1} produce_mb_per_s_during={during:.1} produce_mb_per_s_after={after:.1}"
    );
    println!("ratio_vs_idle={:.2}", during / baseline);
    drop(conn);
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
