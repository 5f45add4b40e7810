//! Kafka benchmark: a real client (librdkafka through confluent-kafka) produces 1 KiB
//! records with acks=all and batching to a broker on 3 bookies, then reads them back; the
//! baseline is raw ledger adds of 1 KiB entries on the same bookies with the same quorums
//! (E=3 Qw=3 Qa=2, as a topic with replication factor 3 gets), measured in the same run.
//! `ratio_vs_ledger` compares bytes per second (target >= 0.6).
//!
//! The client driver is `kafka_driver.py`, embedded in the binary and run with python3
//! (needs `pip install confluent-kafka`).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use folio_broker::{Broker, BrokerConfig};
use folio_client::CreateOptions;
use folio_log::{LogEnv, WallClock};
use folio_meta::keys::Keys;

use super::ledger::{cluster, measure};

const DRIVER: &str = include_str!("kafka_driver.py");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Short run (well under two minutes).
    #[arg(long)]
    quick: bool,
    /// Directory on the disk to measure (a temporary directory is made inside it).
    #[arg(long, default_value = ".")]
    dir: std::path::PathBuf,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

/// `key=value` pairs of a line.
fn figures(line: &str) -> Vec<(String, String)> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

async fn run_async(args: Args) -> Result<(), String> {
    let ok = Command::new("python3")
        .args(["-c", "import confluent_kafka"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err("bench kafka drives librdkafka through python3 + confluent-kafka: pip install confluent-kafka".into());
    }
    let tmp = super::temp_dir(&args.dir, ".folio-bench-kafka-")?;
    let secs = if args.quick { 10 } else { 30 };
    let (record_bytes, inflight) = (1024usize, 256usize);
    println!("bench=kafka quick={} seconds_per_run={secs} record_bytes={record_bytes}", args.quick);
    let (client, bookies, meta) = cluster(&tmp.path().join("cluster"), 3).await?;

    // Baseline: raw ledger adds on the same bookies and quorums.
    let raw = measure(
        &client,
        CreateOptions::new(3, 3, 2),
        record_bytes,
        inflight,
        Duration::from_secs(secs),
    )
    .await?;
    println!(
        "setup=ledger ensemble=3 write_quorum=3 ack_quorum=2 entry_bytes={record_bytes} inflight={inflight} entries_per_s={:.0} mb_per_s={:.1} add_latency_p50_us={} add_latency_p99_us={}",
        raw.entries_per_s, raw.mb_per_s, raw.p50_us, raw.p99_us
    );

    let client2 = client.clone();
    let env = LogEnv {
        meta,
        client,
        keys: Keys::default(),
        clock: Arc::new(WallClock),
        owner: "bench".into(),
    };
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        default_replication: 3,
        replication_max: 3,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config, env).await?;
    let driver = tmp.path().join("kafka_driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| format!("writing {}: {e}", driver.display()))?;
    let bootstrap = broker.addr().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(&driver)
            .args([bootstrap.as_str(), "bench", &secs.to_string(), &record_bytes.to_string()])
            .output()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("running python3: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the Kafka client driver failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = stdout.lines().last().unwrap_or_default();
    println!(
        "setup=kafka client=librdkafka-{} acks=all partitions=1 replication=3 {line}",
        librdkafka_version()
    );
    let mb: f64 = figures(line)
        .into_iter()
        .find(|(k, _)| k == "mb_per_s")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| format!("no mb_per_s in the driver's output: {line}"))?;
    println!("ratio_vs_ledger={:.2}", mb / raw.mb_per_s);
    // The client batches: compare with ledger adds of the batches' size as well, at the
    // depth the partition log keeps in flight (32 MiB).
    let t = broker.metrics().topic("bench");
    let (bytes, batches) = (t.bytes_in.load(Relaxed), t.batches_in.load(Relaxed).max(1));
    let batch_bytes = (bytes / batches).max(1) as usize;
    let depth =
        (folio_log::LogConfig::default().pending_bytes_max / batch_bytes).clamp(1, inflight);
    let same = measure(
        &client2,
        CreateOptions::new(3, 3, 2),
        batch_bytes,
        depth,
        Duration::from_secs(secs),
    )
    .await?;
    println!(
        "setup=ledger_same_entry_bytes entry_bytes={batch_bytes} inflight={depth} entries_per_s={:.0} mb_per_s={:.1} batches_produced={batches}",
        same.entries_per_s, same.mb_per_s
    );
    println!("ratio_vs_ledger_same_entry_bytes={:.2}", mb / same.mb_per_s);
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn librdkafka_version() -> String {
    Command::new("python3")
        .args(["-c", "import confluent_kafka; print(confluent_kafka.libversion()[0])"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}
