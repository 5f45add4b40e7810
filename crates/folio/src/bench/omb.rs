//! OpenMessaging-Benchmark-shaped workloads, so Folio's figures can be set beside published
//! OMB results for Kafka.
//!
//! Each workload runs on fresh bookies (three, in process; RF 3, the default storage mode)
//! and a fresh broker, with embedded metadata. The clients are librdkafka (python3 +
//! confluent-kafka, `omb_driver.py`) with OMB's Kafka driver settings (`driver-kafka/kafka.yaml`:
//! acks=all, linger.ms=1, batch.size=131072; consumers from the earliest offset, no auto
//! commit). The workloads keep OMB's topic, partition, producer and consumer counts, message
//! size and rate:
//! - `1-topic-16-partitions-1kb`: 16 partitions, 1 producer, 1 consumer, 50 000 msg/s;
//! - `1-topic-100-partitions-1kb`: 100 partitions, 1 producer, 1 consumer, 50 000 msg/s;
//! - `1-topic-100-partitions-1kb-4p-4c-backlog`: OMB's catch-up workload (4 producers,
//!   4 consumers, 100 partitions): the consumers start `BACKLOG_S` after the producers, then
//!   catch up while the producers go on. OMB runs it at 200 000 msg/s ("discover the
//!   max-sustainable rate") with a 512 GB backlog; here the rate is `--backlog-rate`
//!   (10 000 by default: on a two-core machine the eight client processes beside the broker
//!   take most of the CPU) and the backlog what builds in 10 s (60 s without `--quick`).
//!
//! What it prints per workload, named as OMB reports them: publish rate (msg/s, MB/s),
//! publish latency and end-to-end latency (avg, p50, p99, p99.9, p99.99, max, in ms;
//! without coordinated omission: from each record's intended send time), and for the
//! backlog workload `backlog_drain_s` (until every consumer receives records less than 1 s
//! old) and `catch_up_msg_s`. The baseline measured first in the same run is the disk's
//! 4 KiB append + fdatasync p99: `ratio_pub_p99_vs_fdatasync_p99`. `folio_cpu_cores` is
//! this process's CPU (broker and bookies) per second of the workload: OMB runs its clients
//! on other machines, here they share the cores, and what Folio did not use they did
//! (librdkafka's Python consumer alone takes most of a core at 10 000 msg/s over 100
//! partitions).
//!
//! Durations: 20 s per workload with `--quick` (the backlog one 30 s), OMB's usual 15
//! minutes scaled to 5 without.

use std::time::Duration;

use super::kafka_driver::{drive_with, figure};

const DRIVER: &str = include_str!("omb_driver.py");
const REPLICATION: usize = 3;
const MESSAGE_BYTES: usize = 1024;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Only this workload (see `folio bench omb --help`'s list); all by default.
    #[arg(long)]
    workload: Option<String>,
    /// Messages per second of the backlog workload (OMB's own file says 200 000).
    #[arg(long, default_value_t = 10_000.0)]
    backlog_rate: f64,
    /// Storage mode of the bookies (`single-write` or `two-write`); the default mode if
    /// not given.
    #[arg(long)]
    mode: Option<String>,
}

/// One OMB workload.
struct Workload {
    name: &'static str,
    partitions: usize,
    producers: usize,
    consumers: usize,
    rate: f64,
    /// Seconds the consumers wait before starting (0: from the start, tailing).
    backlog_s: u32,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    super::kafka::require_confluent_kafka()?;
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-omb-")?;
    let driver = tmp.path().join("omb_driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| format!("writing {}: {e}", driver.display()))?;
    let mode = super::storage_mode(args.mode.as_deref())?;
    let quick = args.run.quick;
    let (secs, backlog_s) = if quick { (20u32, 10u32) } else { (300, 60) };
    let workloads = [
        Workload {
            name: "1-topic-16-partitions-1kb",
            partitions: 16,
            producers: 1,
            consumers: 1,
            rate: 50_000.0,
            backlog_s: 0,
        },
        Workload {
            name: "1-topic-100-partitions-1kb",
            partitions: 100,
            producers: 1,
            consumers: 1,
            rate: 50_000.0,
            backlog_s: 0,
        },
        Workload {
            name: "1-topic-100-partitions-1kb-4p-4c-backlog",
            partitions: 100,
            producers: 4,
            consumers: 4,
            rate: args.backlog_rate,
            backlog_s,
        },
    ];
    if let Some(only) = &args.workload
        && !workloads.iter().any(|w| w.name == only)
    {
        let names: Vec<&str> = workloads.iter().map(|w| w.name).collect();
        return Err(format!("no workload {only:?}; the workloads: {}", names.join(", ")));
    }
    let (_, _, _, sync_p99_us) = super::bookie::append_sync_latency(
        &tmp.path().join("fdatasync-baseline"),
        4096,
        Duration::from_secs(2),
    )?;
    let sync_p99_ms = sync_p99_us as f64 / 1000.0;
    println!(
        "bench=omb quick={quick} mode={} replication={REPLICATION} message_bytes={MESSAGE_BYTES} acks=all linger_ms=1 batch_bytes=131072 fdatasync_p99_ms={sync_p99_ms:.3}",
        mode.name()
    );
    for w in workloads.iter().filter(|w| args.workload.as_deref().is_none_or(|o| o == w.name)) {
        // The backlog workload runs its backlog time longer, so it catches up within the run.
        let secs = secs + w.backlog_s;
        let dir = tmp.path().join(w.name);
        let kafka = super::FreshKafka::start(&dir, REPLICATION, mode).await?;
        let driver_args = vec![
            secs.to_string(),
            MESSAGE_BYTES.to_string(),
            w.partitions.to_string(),
            REPLICATION.to_string(),
            format!("{:.0}", w.rate),
            w.producers.to_string(),
            w.consumers.to_string(),
            w.backlog_s.to_string(),
        ];
        let (started, cpu0) = (std::time::Instant::now(), super::process_cpu_ms());
        let line =
            drive_with(&driver, "run", kafka.broker.addr().to_string(), "omb", driver_args, None)
                .await;
        let cpu_cores =
            (super::process_cpu_ms() - cpu0) / 1000.0 / started.elapsed().as_secs_f64().max(0.001);
        kafka.stop().await?;
        let line = line?;
        let ratio = figure(&line, "pub_latency_p99_ms")? / sync_p99_ms.max(0.001);
        println!(
            "workload={} topics=1 partitions={} producers={} consumers={} seconds={secs} {line} folio_cpu_cores={cpu_cores:.2} ratio_pub_p99_vs_fdatasync_p99={ratio:.1}",
            w.name, w.partitions, w.producers, w.consumers
        );
    }
    Ok(())
}
