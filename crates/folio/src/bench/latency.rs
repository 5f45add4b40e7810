//! Latency benchmark: tail latency at fixed rates, measured the way the field measures it
//! (the OpenMessaging Benchmark's way): an open-loop producer, so a slow acknowledgement
//! delays no later send and every late record counts its wait (no coordinated omission).
//!
//! First the disk: O_DIRECT append + fdatasync of 4 KiB, its p50/p99 (`fdatasync_p99_ms`).
//! Then for replication 1 (one bookie) and 3 (three bookies), storage in the default mode
//! (`--mode` picks one), and for `linger.ms` 0 and 5, each run on fresh bookies and a fresh
//! broker on embedded metadata (a run writes gigabytes; its directory is removed after it):
//! - the peak: the same librdkafka producer (acks=all, 1 KiB records) and tailing consumer,
//!   the producer as fast as it goes (`peak_records_per_s`): what this machine takes with
//!   this client, which shares the two cores with the broker;
//! - at 25, 50 and 75 % of that peak, an open-loop producer on a fixed schedule and a
//!   tailing consumer in another process, on a fresh topic: produce latency (intended send
//!   time to delivery report) and end-to-end latency (intended send time to the consumer's
//!   receipt), p50/p99/p99.9/max/mean, and `ratio_p99_vs_fdatasync_p99`;
//! - with `linger.ms=0`, a light load (200 records/s), whose mean is librdkafka's 0055
//!   measure.
//!
//! `target` lines check the targets at 50 % load, replication 3: produce p99 within
//! 5 ms of the fdatasync p99 plus one group-commit interval (`journal.group_wait_max`), p99.9
//! below 3x p99; and at light load a mean below 1 ms.
//!
//! The driver is `latency_driver.py` (embedded, run with python3; needs confluent-kafka).
//! Each run's `schedule_behind_max_ms` says how far the Python producer itself fell behind
//! its schedule: large values mean the client, not the broker, set the latency.

use std::path::Path;
use std::time::Duration;

use folio_bookie::StorageMode;

use super::kafka_driver::{drive_with, figure};

const DRIVER: &str = include_str!("latency_driver.py");
/// The fractions of the peak the paced runs offer.
const LOADS: [f64; 3] = [0.25, 0.5, 0.75];
/// The light load of the `linger.ms=0` runs, records/s.
const LIGHT_RECORDS_PER_S: f64 = 200.0;
const RECORD_BYTES: usize = 1024;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Storage mode of the bookies (`single-write` or `two-write`); the default mode if
    /// not given.
    #[arg(long)]
    mode: Option<String>,
    /// Partitions of each topic.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Only this replication factor (1 or 3); both by default.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    replication: Option<u8>,
    /// Only this `linger.ms` (0 or 5 are the field's settings); both by default.
    #[arg(long)]
    linger_ms: Option<u32>,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

/// What one paced run measured, for the target lines.
struct Paced {
    replication: usize,
    linger_ms: u32,
    load: f64,
    p99_ms: f64,
    p999_ms: f64,
    mean_ms: f64,
}

async fn run_async(args: Args) -> Result<(), String> {
    super::kafka::require_confluent_kafka()?;
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-latency-")?;
    let driver = tmp.path().join("latency_driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| format!("writing {}: {e}", driver.display()))?;
    let mode = super::storage_mode(args.mode.as_deref())?;
    let (peak_s, paced_s) = if args.run.quick { (3, 5) } else { (10, 20) };
    let group_wait = folio_bookie::JournalConfig::default().group_wait_max;
    let (_, _, sync_p50_us, sync_p99_us) = super::bookie::append_sync_latency(
        &tmp.path().join("fdatasync-baseline"),
        4096,
        Duration::from_secs(2),
    )?;
    let sync_p99_ms = sync_p99_us as f64 / 1000.0;
    println!(
        "bench=latency quick={} mode={} record_bytes={RECORD_BYTES} partitions={} peak_s={peak_s} paced_s={paced_s} fdatasync_bytes=4096 fdatasync_p50_ms={:.3} fdatasync_p99_ms={sync_p99_ms:.3} group_commit_wait_ms={:.1}",
        args.run.quick,
        mode.name(),
        args.partitions,
        sync_p50_us as f64 / 1000.0,
        group_wait.as_secs_f64() * 1000.0
    );
    let mut results = Vec::new();
    let replications = args.replication.map_or(vec![1usize, 3], |r| vec![usize::from(r)]);
    let lingers = args.linger_ms.map_or(vec![0u32, 5], |l| vec![l]);
    for &replication in &replications {
        for &linger_ms in &lingers {
            let run = Run { tmp: tmp.path(), driver: &driver, mode, replication, linger_ms };
            let line = run.drive(args.partitions, peak_s, "peak", 0.0).await?;
            let peak = figure(&line, "records_per_s")?;
            println!(
                "setup=latency_peak replication={replication} linger_ms={linger_ms} peak_records_per_s={peak:.0} peak_mb_per_s={:.1} produce_p99_ms={:.2}",
                figure(&line, "mb_per_s")?,
                figure(&line, "produce_p99_ms")?
            );
            let mut loads: Vec<(String, f64)> =
                LOADS.iter().map(|f| (format!("{f:.2}"), f * peak)).collect();
            if linger_ms == 0 {
                loads.insert(0, ("light".into(), LIGHT_RECORDS_PER_S));
            }
            for (name, rate) in loads {
                let line = run.drive(args.partitions, paced_s, &name, rate).await?;
                let p99 = figure(&line, "produce_p99_ms")?;
                println!(
                    "setup=latency replication={replication} linger_ms={linger_ms} load={name} {line} ratio_p99_vs_fdatasync_p99={:.1}",
                    p99 / sync_p99_ms.max(1e-6)
                );
                results.push(Paced {
                    replication,
                    linger_ms,
                    load: name.parse().unwrap_or(0.0),
                    p99_ms: p99,
                    p999_ms: figure(&line, "produce_p999_ms")?,
                    mean_ms: figure(&line, "produce_mean_ms")?,
                });
            }
        }
    }
    print_targets(&results, sync_p99_ms, group_wait);
    println!("rss_peak_mb={:.0}", super::rss_peak_mb());
    Ok(())
}

/// One configuration: each run gets fresh bookies and a fresh broker (a run writes
/// gigabytes; its directory is removed after it).
struct Run<'a> {
    tmp: &'a Path,
    driver: &'a Path,
    mode: StorageMode,
    replication: usize,
    linger_ms: u32,
}

impl Run<'_> {
    /// Runs the driver for `secs` at `rate` records/s (0: as fast as it goes); its line.
    async fn drive(
        &self,
        partitions: u32,
        secs: u32,
        name: &str,
        rate: f64,
    ) -> Result<String, String> {
        let (replication, linger_ms) = (self.replication, self.linger_ms);
        let dir = self.tmp.join(format!("rf{replication}-linger{linger_ms}-{name}"));
        let kafka = super::FreshKafka::start(&dir, replication, self.mode).await?;
        let args = vec![
            secs.to_string(),
            RECORD_BYTES.to_string(),
            linger_ms.to_string(),
            partitions.to_string(),
            replication.to_string(),
            format!("{rate:.0}"),
        ];
        let bootstrap = kafka.broker.addr().to_string();
        let line = drive_with(self.driver, "run", bootstrap, "latency", args, None).await;
        kafka.stop().await?;
        line
    }
}

/// The targets, checked on replication 3 (see the module doc).
fn print_targets(results: &[Paced], sync_p99_ms: f64, group_wait: Duration) {
    let bound = sync_p99_ms + group_wait.as_secs_f64() * 1000.0 + 5.0;
    for r in results.iter().filter(|r| r.replication == 3) {
        if r.load == 0.5 {
            println!(
                "target=half_load replication=3 linger_ms={} produce_p99_ms={:.2} p99_bound_ms={bound:.2} p99_met={} produce_p999_ms={:.2} p999_bound_ms={:.2} p999_met={}",
                r.linger_ms,
                r.p99_ms,
                r.p99_ms <= bound,
                r.p999_ms,
                3.0 * r.p99_ms,
                r.p999_ms < 3.0 * r.p99_ms
            );
        } else if r.load == 0.0 {
            println!(
                "target=light_load replication=3 linger_ms={} produce_mean_ms={:.3} mean_bound_ms=1.0 mean_met={}",
                r.linger_ms,
                r.mean_ms,
                r.mean_ms < 1.0
            );
        }
    }
}
