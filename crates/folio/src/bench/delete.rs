//! Topic deletion benchmark (#11): how long each layer takes to give a deleted topic back,
//! and what a large deletion costs topic creation.
//!
//! A broker on 3 bookies (embedded metadata, RF 3), a trash deleter and each bookie's GC
//! run as in `folio standalone`, with shorter intervals (printed) so the run is short. It
//! creates T topics × P partitions, writes 64 KiB batches to every partition, measures
//! CreateTopics latency with nothing else going on (idle), then deletes every topic in
//! one DeleteTopics request while another connection keeps creating topics, and reports:
//! - `metadata_gone_s`: DeleteTopics answered (names unbound, deletion markers durable);
//! - `logs_trashed_s`: the controller finished (every partition's log in the trash, every
//!   marker gone);
//! - `ledgers_gone_s`: the trash deleter removed every ledger of those topics;
//! - `disk_reclaimed_s`: the bookies' entry logs are within 10 % of the data written
//!   (+ their size before writing);
//! - `ratio_vs_idle_create`: CreateTopics p99 during the deletion (until the ledgers are
//!   gone) over the idle p99 (target ≤ 2, L4).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use folio_broker::config::ListenerConfig;
use folio_broker::{Broker, BrokerConfig};
use folio_kafka_client::{
    KafkaConn, create_topics_request, delete_topics_request, produce_request,
};
use folio_log::TrashConfig;
use folio_meta::list_all;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsResponse, DeleteTopicsResponse, ProduceResponse,
};

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Topics (default 1 000; 100 with --quick).
    #[arg(long)]
    topics: Option<usize>,
    /// Partitions per topic (default 4; 2 with --quick).
    #[arg(long)]
    partitions: Option<i32>,
}

/// Batches of 64 KiB written to each partition.
const BATCHES_PER_PARTITION: usize = 4;
const BATCH_VALUE_BYTES: usize = 8 * 1024;
const RECORDS_PER_BATCH: i32 = 8;
/// CreateTopics requests timed with nothing else going on.
const IDLE_CREATES: usize = 1000;

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

/// Times one CreateTopics of a single one-partition topic on `conn`.
async fn create_one(conn: &mut KafkaConn, name: String) -> Result<Duration, String> {
    let started = Instant::now();
    let r: CreateTopicsResponse = conn
        .call(ApiKey::CreateTopics, 7, &create_topics_request(std::slice::from_ref(&name), 1))
        .await?;
    match r.topics.first().map(|t| t.error_code) {
        Some(0) => Ok(started.elapsed()),
        code => Err(format!("creating {name}: error {code:?}")),
    }
}

/// The latency at fraction `p` of `v`, in ms (the benches' one percentile rule).
fn pct_ms(v: &[Duration], p: f64) -> f64 {
    let mut us: Vec<u64> = v.iter().map(|d| d.as_micros() as u64).collect();
    us.sort_unstable();
    super::pct(&us, p) as f64 / 1000.0
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-delete-")?;
    let topics = args.topics.unwrap_or(if args.run.quick { 100 } else { 1000 });
    let partitions = args.partitions.unwrap_or(if args.run.quick { 2 } else { 4 });
    if topics == 0 || partitions <= 0 {
        return Err("--topics and --partitions must be at least 1".into());
    }
    let (gc_interval, idle_rotation, trash_interval) =
        (Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(1));
    let (client, bookies, meta) =
        super::ledger::cluster_tuned(&tmp.path().join("cluster"), 3, |c| {
            c.storage.entry_log_bytes_max = 64 * 1024 * 1024;
            c.storage.entry_log_idle_rotation = idle_rotation;
            c.gc.interval = gc_interval;
        })
        .await?;
    let log_dirs: Vec<std::path::PathBuf> = (0..3)
        .map(|i| tmp.path().join("cluster").join(format!("bookie-{i}")).join("ledgers/entrylogs"))
        .collect();
    let entry_log_bytes = || log_dirs.iter().map(|d| super::files_bytes(d)).sum::<u64>();
    let env = super::log_env(meta.clone(), client);
    let config = BrokerConfig {
        // The broker (the controller) runs the trash deleter.
        trash: Some(TrashConfig { interval: trash_interval, ..TrashConfig::default() }),
        listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
        default_replication: 3,
        replication_max: 3,
        auto_create_topics: false,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config, env.clone()).await.map_err(|e| e.to_string())?;
    let addr = broker.addr();
    println!(
        "bench=delete quick={} topics={topics} partitions={partitions} batches_per_partition={BATCHES_PER_PARTITION} batch_bytes={} replication=3 flush_interval_s={} gc_interval_s={} idle_log_seal_s={} trash_interval_s={}",
        args.run.quick,
        BATCH_VALUE_BYTES * RECORDS_PER_BATCH as usize,
        folio_bookie::config::StorageConfig::new(".").flush_interval.as_secs(),
        gc_interval.as_secs(),
        idle_rotation.as_secs(),
        trash_interval.as_secs()
    );

    // Topics with data.
    let before = entry_log_bytes();
    let names: Vec<String> = (0..topics).map(|i| format!("doomed-{i}")).collect();
    let mut conn = KafkaConn::connect(addr).await?;
    for chunk in names.chunks(500) {
        let r: CreateTopicsResponse =
            conn.call(ApiKey::CreateTopics, 7, &create_topics_request(chunk, partitions)).await?;
        if let Some(t) = r.topics.iter().find(|t| t.error_code != 0) {
            return Err(format!("creating {}: error {}", t.name.as_str(), t.error_code));
        }
    }
    let batch = bytes::Bytes::from(folio_broker::batch::build(RECORDS_PER_BATCH, 1, 0, |i| {
        vec![b'a' + (i % 26) as u8; BATCH_VALUE_BYTES]
    }));
    // (Three copies of every batch on one disk saturate it: an add can wait for a
    // write-cache flush for seconds, so the produce timeout is generous.)
    let write_started = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for share in names.chunks(names.len().div_ceil(4)) {
        let (share, batch) = (share.to_vec(), batch.clone());
        writers.spawn(async move {
            let mut c = KafkaConn::connect(addr).await?;
            for name in &share {
                for p in 0..partitions {
                    for _ in 0..BATCHES_PER_PARTITION {
                        c.send(
                            ApiKey::Produce,
                            9,
                            &produce_request(name, p, batch.clone(), -1).with_timeout_ms(120_000),
                        )
                        .await?;
                    }
                }
                for p in 0..partitions {
                    for _ in 0..BATCHES_PER_PARTITION {
                        let (_, r): (i32, ProduceResponse) = c.recv(ApiKey::Produce, 9).await?;
                        let code = r.responses[0].partition_responses[0].error_code;
                        if code != 0 {
                            return Err(format!("producing to {name}-{p}: error {code}"));
                        }
                    }
                }
            }
            Ok::<_, String>(())
        });
    }
    while let Some(r) = writers.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    let written = (topics * partitions as usize * BATCHES_PER_PARTITION * batch.len()) as u64;
    // Wait for the flush to the entry logs (3 copies).
    let deadline = Instant::now() + Duration::from_secs(120);
    while entry_log_bytes() < before + 3 * written * 9 / 10 {
        if Instant::now() > deadline {
            return Err(format!("data never reached the entry logs: {} bytes", entry_log_bytes()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Then until the bookies are quiet (no growth over a flush interval), so the idle
    // baseline below is idle.
    let mut last = entry_log_bytes();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = entry_log_bytes();
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let on_disk = entry_log_bytes();
    println!(
        "written_mb={:.0} write_s={:.1} entry_logs_mb_before={:.0} entry_logs_mb_written={:.0}",
        written as f64 / MIB,
        write_started.elapsed().as_secs_f64(),
        before as f64 / MIB,
        on_disk as f64 / MIB
    );

    // Idle CreateTopics latency.
    let mut idle = Vec::with_capacity(IDLE_CREATES);
    for i in 0..IDLE_CREATES {
        idle.push(create_one(&mut conn, format!("idle-{i}")).await?);
    }

    // Delete every topic in one request while another connection keeps creating topics.
    let stop = Arc::new(AtomicBool::new(false));
    let creator = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut c = KafkaConn::connect(addr).await?;
            let mut during = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let took = create_one(&mut c, format!("during-{i}")).await?;
                during.push((Instant::now(), took));
                i += 1;
            }
            Ok::<_, String>(during)
        })
    };
    let started = Instant::now();
    let del = delete_topics_request(&names);
    let r: DeleteTopicsResponse = conn.call(ApiKey::DeleteTopics, 6, &del).await?;
    if let Some(t) = r.responses.iter().find(|t| t.error_code != 0) {
        return Err(format!("deleting: error {} ({:?})", t.error_code, t.error_message));
    }
    let metadata_gone = started.elapsed();
    let (mut logs_trashed, mut ledgers_gone, mut reclaimed) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(if args.run.quick { 90 } else { 600 });
    let target = before + written * 3 / 10;
    while reclaimed.is_none() || ledgers_gone.is_none() {
        if Instant::now() > deadline {
            break;
        }
        if logs_trashed.is_none()
            && list_all(meta.as_ref(), &env.keys.topic_deletions())
                .await
                .map_err(|e| e.to_string())?
                .is_empty()
        {
            logs_trashed = Some(started.elapsed());
        }
        // (Only the trash records' keys: the trash holds nothing else here.)
        if logs_trashed.is_some()
            && ledgers_gone.is_none()
            && list_all(meta.as_ref(), &env.keys.trash())
                .await
                .map_err(|e| e.to_string())?
                .is_empty()
        {
            ledgers_gone = Some(started.elapsed());
            stop.store(true, Ordering::Relaxed);
        }
        if reclaimed.is_none() && entry_log_bytes() <= target {
            reclaimed = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let during = creator.await.map_err(|e| e.to_string())??;
    // By phase: while the controller trashes logs, then while the trash deleter works.
    let split = logs_trashed.map_or(Instant::now(), |d| started + d);
    let controller_phase: Vec<Duration> =
        during.iter().filter(|(at, _)| *at <= split).map(|(_, d)| *d).collect();
    let trash_phase: Vec<Duration> =
        during.iter().filter(|(at, _)| *at > split).map(|(_, d)| *d).collect();
    let during: Vec<Duration> = during.into_iter().map(|(_, d)| d).collect();
    let show = |d: Option<Duration>| {
        d.map_or("not_reached".to_string(), |d| format!("{:.2}", d.as_secs_f64()))
    };
    println!(
        "metadata_gone_s={:.3} logs_trashed_s={} ledgers_gone_s={} disk_reclaimed_s={} entry_logs_mb_now={:.0}",
        metadata_gone.as_secs_f64(),
        show(logs_trashed),
        show(ledgers_gone),
        show(reclaimed),
        entry_log_bytes() as f64 / MIB
    );
    let (idle_p50, idle_p99) = (pct_ms(&idle, 0.50), pct_ms(&idle, 0.99));
    let (during_p50, during_p99) = (pct_ms(&during, 0.50), pct_ms(&during, 0.99));
    println!(
        "create_idle_p50_ms={idle_p50:.2} create_idle_p99_ms={idle_p99:.2} creates_during_deletion={} create_during_p50_ms={during_p50:.2} create_during_p99_ms={during_p99:.2}",
        during.len()
    );
    println!(
        "create_p99_ms_while_controller_trashes={:.2} create_p99_ms_while_trash_deletes={:.2}",
        pct_ms(&controller_phase, 0.99),
        pct_ms(&trash_phase, 0.99)
    );
    println!("ratio_vs_idle_create={:.2}", during_p99 / idle_p99);
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
