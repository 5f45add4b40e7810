//! Overload benchmark: producers offering more than the broker and its bookies take.
//!
//! A broker on three in-process bookies (RF 3, the default storage mode, embedded metadata),
//! fresh for each phase.
//! Producers are librdkafka (python3 + confluent-kafka, `latency_driver.py` without a
//! consumer) at its default settings (acks=all, `linger.ms` 5, a client queue of 100 000
//! records, `message.timeout.ms` 300 s): a record not delivered in time fails the run, so
//! `producers_failed=0` says no producer timed out.
//! - `peak`: one producer as fast as it goes (`peak_records_per_s`);
//! - `overload`: `--producers` producers (4) as fast as they go, each on its own topic:
//!   `overloaded_records_per_s` and `ratio_vs_peak` (target >= 0.9), the slowest
//!   producer's p99;
//! - `twice`: two open-loop producers each at the peak rate (2x what the broker took):
//!   their produce p99 (from the intended send time: the backlog a producer builds
//!   counts).
//!
//! `broker_cpu_cores` is this process's CPU per second in the phase (broker and bookies):
//! on a two-core machine the Python producers have what is left, so a phase whose producers
//! take more CPU leaves the broker less.
//!
//! During each phase the process's resident memory (broker and bookies) is sampled every
//! `RSS_SAMPLE_MS`; `rss_max_mb` is compared with the memory budget: the listener's
//! `process_bytes_max` and `answer_bytes_max`, the bookies' write and read caches, and
//! `BASE_MB` for the runtime (`rss_within_budget`).

use std::time::Duration;

use super::MIB;
use super::kafka_driver::{drive_with, figure};

const DRIVER: &str = include_str!("latency_driver.py");
const REPLICATION: usize = 3;
const RECORD_BYTES: usize = 1024;
const RSS_SAMPLE_MS: u64 = 100;
/// The runtime, binary and libraries in the memory budget.
const BASE_MB: f64 = 256.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Producers of the overload phase.
    #[arg(long, default_value_t = 4)]
    producers: usize,
    /// Storage mode of the bookies (`single-write` or `two-write`); the default mode if
    /// not given.
    #[arg(long)]
    mode: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    super::kafka::require_confluent_kafka()?;
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-overload-")?;
    let driver = tmp.path().join("latency_driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| format!("writing {}: {e}", driver.display()))?;
    let mode = super::storage_mode(args.mode.as_deref())?;
    let secs: u32 = if args.run.quick { 10 } else { 30 };
    let storage = folio_bookie::StorageConfig::new(tmp.path());
    let caches_bytes = REPLICATION * (storage.write_cache_bytes + storage.read_cache_bytes);
    let limits = super::FreshKafka::config(REPLICATION).limits;
    let budget_mb =
        (limits.process_bytes_max + limits.answer_bytes_max + caches_bytes) as f64 / MIB + BASE_MB;
    println!(
        "bench=overload quick={} mode={} replication={REPLICATION} record_bytes={RECORD_BYTES} seconds={secs} producers={} budget_mb={budget_mb:.0}",
        args.run.quick,
        mode.name(),
        args.producers
    );
    let run = |name: &'static str, rates: Vec<f64>| {
        let dir = tmp.path().join(name);
        let driver = driver.clone();
        async move {
            // Fresh bookies per phase (a phase writes gigabytes), removed after it.
            let kafka = super::FreshKafka::start(&dir, REPLICATION, mode).await?;
            let measured =
                phase(&driver, &kafka.broker.addr().to_string(), name, &rates, secs).await;
            kafka.stop().await?;
            measured
        }
    };
    let peak = run("peak", vec![0.0]).await?;
    let peak_rate = peak.records_per_s;
    peak.print("peak", budget_mb, None);
    let over = run("overload", vec![0.0; args.producers]).await?;
    over.print("overload", budget_mb, Some(peak_rate));
    let twice = run("twice", vec![peak_rate, peak_rate]).await?;
    twice.print("twice", budget_mb, Some(peak_rate));
    let failed = peak.failed + over.failed + twice.failed;
    if failed > 0 {
        return Err(format!("{failed} producers failed (see the phase lines)"));
    }
    Ok(())
}

/// What one phase measured.
struct Phase {
    records_per_s: f64,
    p99_ms_max: f64,
    failed: usize,
    rss_max_mb: f64,
    /// CPU seconds of this process (broker and bookies) per second: the clients have the
    /// rest of the machine's two cores.
    cpu_share: f64,
}

impl Phase {
    fn print(&self, name: &str, budget_mb: f64, peak: Option<f64>) {
        let ratio = peak.map_or(String::new(), |p| {
            format!(" ratio_vs_peak={:.2}", self.records_per_s / p.max(1.0))
        });
        println!(
            "phase={name} records_per_s={:.0} mb_per_s={:.1}{ratio} produce_p99_ms_max={:.1} producers_failed={} broker_cpu_cores={:.2} rss_max_mb={:.0} budget_mb={budget_mb:.0} rss_within_budget={}",
            self.records_per_s,
            self.records_per_s * RECORD_BYTES as f64 / MIB,
            self.p99_ms_max,
            self.failed,
            self.cpu_share,
            self.rss_max_mb,
            self.rss_max_mb <= budget_mb
        );
    }
}

/// Runs one producer per rate (0: as fast as it goes), each on its own topic, while
/// sampling the process's RSS.
async fn phase(
    driver: &std::path::Path,
    bootstrap: &str,
    name: &str,
    rates: &[f64],
    secs: u32,
) -> Result<Phase, String> {
    let mut producers = tokio::task::JoinSet::new();
    for (i, rate) in rates.iter().enumerate() {
        let args = vec![
            secs.to_string(),
            RECORD_BYTES.to_string(),
            "5".into(),
            "1".into(),
            REPLICATION.to_string(),
            format!("{rate:.0}"),
            "no-consumer".into(),
        ];
        let (driver, bootstrap, topic) =
            (driver.to_path_buf(), bootstrap.to_string(), format!("{name}-{i}"));
        producers
            .spawn(async move { drive_with(&driver, "run", bootstrap, topic, args, None).await });
    }
    let mut rss_max_mb: f64 = 0.0;
    let mut lines = Vec::new();
    let mut failed = 0;
    let (started, cpu0) = (std::time::Instant::now(), super::process_cpu_ms());
    loop {
        tokio::select! {
            done = producers.join_next() => match done {
                None => break,
                Some(Ok(Ok(line))) => lines.push(line),
                Some(Ok(Err(e))) => {
                    failed += 1;
                    println!("phase={name} producer_failed={}", e.lines().next().unwrap_or(""));
                }
                Some(Err(e)) => return Err(e.to_string()),
            },
            () = tokio::time::sleep(Duration::from_millis(RSS_SAMPLE_MS)) => {
                rss_max_mb = rss_max_mb.max(super::rss_now_mb());
            }
        }
    }
    let cpu_share = (super::process_cpu_ms() - cpu0) / 1000.0 / started.elapsed().as_secs_f64();
    // Each producer's own rate (its `secs` plus its final flush), summed.
    let mut records_per_s = 0.0;
    let mut p99_ms_max: f64 = 0.0;
    for line in &lines {
        records_per_s += figure(line, "records_per_s")?;
        p99_ms_max = p99_ms_max.max(figure(line, "produce_p99_ms")?);
    }
    Ok(Phase { records_per_s, p99_ms_max, failed, rss_max_mb, cpu_share })
}
