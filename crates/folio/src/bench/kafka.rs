//! Kafka benchmark: a real client (librdkafka through confluent-kafka) produces 1 KiB
//! records with acks=all and batching to a broker on 3 bookies, then reads them back; the
//! baseline is raw ledger adds of 1 KiB entries on the same bookies with the same quorums
//! (E=3 Qw=3 Qa=2, as a topic with replication factor 3 gets), measured in the same run.
//! `ratio_vs_ledger` compares bytes per second (target >= 0.6).
//!
//! Then, with 4 partitions: one broker against two on the same bookies
//! (`ratio_vs_one_broker`), and the time for partitions to move when broker 1 dies (its
//! lease expires, broker 2 sees it, opens the partitions: fences and recovers their
//! ledgers).
//!
//! Then the backlog phase (`--phase backlog` alone): for each storage mode (`--mode` picks
//! one; lines say `mode=`), for 1 and 3 bookies and for 1 KiB and 100 B records (1 KiB only
//! with `--quick`), produce N records (1 M with `--quick`, 4 M without) to one partition,
//! then a fresh consumer reads them from offset 0: `backlog_consume_mb_per_s`,
//! `ratio_vs_produce` (against the produce rate of the same run), the time to the first
//! record from offset 0 (`first_record_ms_from_backlog`), the middle and the newest ledger
//! (`first_record_ms_from_backlog_middle`, `_newest_ledger`; also after the broker is
//! restarted: `first_record_ms_after_restart_*`), and what the process read per
//! byte served: `read_amplification` (entry-log file bytes the bookies read) and
//! `rchar_per_byte_served` (`rchar` of `/proc/self/io`: every read() of the process, which
//! runs the bookies and the broker; socket receives are recv() calls and not counted). The
//! consumer is tuned for throughput (10 MiB partition fetches; librdkafka's queue threshold
//! raised: by default 100 000 queued records postpone its next fetch by a second, which
//! with 100 B records measures the client's backoff); the first-record probes use
//! librdkafka's defaults. `consumer_cpu_share` near or above 1 says the client was the
//! bottleneck; `fetches` and `fetch_ms_mean` are the broker's side.
//!
//! The move phase (`--phase move`, also in `all`): partition open time on the next owner
//! with 1 and 1 000 partitions moving at once, after a clean stop and after a crash (see
//! `kafka_move`).
//!
//! The validation phase (`--phase validation`, also in `all`): what Kafka's log validator
//! (`records::validate`, every record walked on produce) costs. In memory, validating
//! batches of 64 records of 1 KiB, uncompressed and lz4, against reading their headers only
//! (`ratio_vs_header_only`); then librdkafka producing to a broker with validation on and to
//! one with it off, on the same bookies, one after the other (off, on, on, off), for no
//! codec and lz4:
//! `ratio_vs_validation_off` of the produce rates, and the process's CPU per MiB produced
//! and consumed back (`cpu_ms_per_mb`: bookies, broker and all, so the difference is
//! validation's).
//!
//! The client driver is `kafka_driver.py`, embedded in the binary and run with python3
//! (needs `pip install confluent-kafka`).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use folio_broker::config::ListenerConfig;
use folio_broker::{Broker, BrokerConfig};
use folio_client::CreateOptions;
use folio_log::{LogConfig, LogEnv};

use super::kafka_driver::{drive_with, figure};
use super::ledger::{cluster, measure};

const DRIVER: &str = include_str!("kafka_driver.py");

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Which phases: `all`, `produce` (ledger baseline, produce and consume, brokers),
    /// `validation` (produce with record validation on against off), or
    /// `backlog` (catching up on a backlog, 1 and 3 bookies, 1 KiB and 100 B records), or
    /// `move` (partition open time on the next owner, 1 and 1 000 partitions, after a clean
    /// stop and a crash).
    #[arg(long, default_value = "all", value_parser = ["all", "produce", "validation", "backlog", "move"])]
    phase: String,
    /// Instead: produce and consume over SASL_SSL (SCRAM-SHA-512) against PLAINTEXT in the
    /// same run (`ratio_vs_plaintext`).
    #[arg(long)]
    tls: bool,
    /// Instead: transactional produce (a commit every 1 000 and every 100 records) against
    /// idempotent produce, and read_committed consume against read_uncommitted, in the same
    /// run (`ratio_vs_idempotent`, `ratio_vs_read_uncommitted`).
    #[arg(long, conflicts_with = "tls")]
    transactions: bool,
    /// The backlog phase in this storage mode only (`single-write` or `two-write`); both
    /// by default.
    #[arg(long)]
    mode: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    require_confluent_kafka()?;
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-kafka-")?;
    let driver = tmp.path().join("kafka_driver.py");
    std::fs::write(&driver, DRIVER).map_err(|e| format!("writing {}: {e}", driver.display()))?;
    if args.tls {
        return super::kafka_tls::run(args.run.quick, tmp.path(), &driver).await;
    }
    if args.transactions {
        return super::kafka_txn::run(args.run.quick, tmp.path(), &driver).await;
    }
    if matches!(args.phase.as_str(), "all" | "produce") {
        produce_phases(&args, tmp.path(), &driver).await?;
    }
    if matches!(args.phase.as_str(), "all" | "validation") {
        validation_phase(args.run.quick, tmp.path(), &driver).await?;
    }
    if matches!(args.phase.as_str(), "all" | "move") {
        super::kafka_move::run(tmp.path()).await?;
    }
    if matches!(args.phase.as_str(), "all" | "backlog") {
        let records = if args.run.quick { 1_000_000 } else { 4_000_000 };
        let setups: &[(usize, usize)] = if args.run.quick {
            &[(1, 1024), (3, 1024)]
        } else {
            &[(1, 1024), (3, 1024), (1, 100), (3, 100)]
        };
        for mode in super::storage_modes(args.mode.as_deref())? {
            for (bookies, record_bytes) in setups.iter().copied() {
                let dir =
                    tmp.path().join(format!("backlog-{}-{bookies}-{record_bytes}", mode.name()));
                backlog(&driver, &dir, mode, bookies, records, record_bytes).await?;
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| format!("removing {}: {e}", dir.display()))?;
            }
        }
    }
    Ok(())
}

async fn produce_phases(args: &Args, tmp: &Path, driver: &Path) -> Result<(), String> {
    let secs = if args.run.quick { 10 } else { 30 };
    let (record_bytes, inflight) = (1024usize, 256usize);
    println!(
        "bench=kafka quick={} seconds_per_run={secs} record_bytes={record_bytes}",
        args.run.quick
    );
    let (client, bookies, meta) = cluster(&tmp.join("cluster"), 3).await?;

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
    let env = super::log_env(meta, client);
    let lease_ttl = Duration::from_secs(5);
    let config = |node_id| BrokerConfig {
        node_id,
        listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
        default_replication: 3,
        replication_max: 3,
        default_partitions: PARTITIONS as u32,
        lease_ttl,
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config(1), env.clone()).await.map_err(|e| e.to_string())?;
    let run = |bootstrap: String, topic: &'static str, partitions: usize| {
        let args = [secs.to_string(), record_bytes.to_string(), partitions.to_string()];
        drive(driver, "run", bootstrap, topic, args.to_vec())
    };
    let line = run(broker.addr().to_string(), "bench", 1).await?;
    println!(
        "setup=kafka client=librdkafka-{} acks=all partitions=1 replication=3 {line}",
        librdkafka_version()
    );
    let mb = mb_per_s(&line)?;
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

    // Two brokers against one, 4 partitions each time, same bookies.
    let line = run(broker.addr().to_string(), "spread-one", PARTITIONS).await?;
    let one = mb_per_s(&line)?;
    println!("setup=kafka_brokers_1 partitions={PARTITIONS} {line}");
    let env2 = LogEnv { owner: "bench-2".into(), ..env };
    let broker2 = Broker::start(config(2), env2).await.map_err(|e| e.to_string())?;
    let seen = tokio::time::Instant::now();
    while broker.live_brokers().len() < 2 || broker2.live_brokers().len() < 2 {
        if seen.elapsed() > Duration::from_secs(10) {
            return Err("the two brokers did not see each other within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line =
        run(format!("{},{}", broker.addr(), broker2.addr()), "spread-two", PARTITIONS).await?;
    let two = mb_per_s(&line)?;
    println!("setup=kafka_brokers_2 partitions={PARTITIONS} {line}");
    println!("ratio_vs_one_broker={:.2}", two / one);

    // Broker 1 dies: how long until broker 2 serves its partitions.
    let id = broker.topic_id("spread-two").await.ok_or("no topic spread-two")?;
    let moving: Vec<i32> =
        (0..PARTITIONS as i32).filter(|p| broker.owns_partition(id, *p)).collect();
    if moving.is_empty() {
        println!("move skipped: broker 1 owned none of the {PARTITIONS} partitions");
    } else {
        broker.abort();
        let t0 = tokio::time::Instant::now();
        while !moving.iter().all(|p| broker2.owns_partition(id, *p)) {
            if t0.elapsed() > 3 * lease_ttl {
                return Err("broker 2 did not take the partitions over within 3 lease TTLs".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let detect = t0.elapsed();
        for p in &moving {
            broker2.open_partition("spread-two", *p).await.map_err(|e| e.to_string())?;
        }
        let moved = t0.elapsed();
        println!(
            "move partitions={} lease_ttl_s={:.1} detect_s={:.2} fence_and_open_s={:.2} move_s={:.2}",
            moving.len(),
            lease_ttl.as_secs_f64(),
            detect.as_secs_f64(),
            (moved - detect).as_secs_f64(),
            moved.as_secs_f64()
        );
    }
    broker2.shutdown().await;
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The validation phase (see the module doc).
async fn validation_phase(quick: bool, tmp: &Path, driver: &Path) -> Result<(), String> {
    validate_in_memory(quick)?;
    // End to end: librdkafka against a broker with validation on and one with it off.
    let secs = if quick { 4 } else { 20 };
    let (_client, bookies, meta) = cluster(&tmp.join("validation"), 3).await?;
    let env = super::log_env(meta, _client);
    let mut node_id = 10;
    for codec in ["none", "lz4"] {
        // Off, on, on, off: a drift over the runs (the journal and entry logs filling)
        // weighs on both sides alike.
        let (mut on, mut off) = (0.0, 0.0);
        for (run, validate) in [false, true, true, false].into_iter().enumerate() {
            node_id += 1;
            let config = BrokerConfig {
                node_id,
                listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
                default_replication: 3,
                replication_max: 3,
                validate_records: validate,
                ..BrokerConfig::default()
            };
            let broker = Broker::start(config, env.clone()).await.map_err(|e| e.to_string())?;
            let none = [
                "validation-none-1",
                "validation-none-2",
                "validation-none-3",
                "validation-none-4",
            ];
            let lz4 =
                ["validation-lz4-1", "validation-lz4-2", "validation-lz4-3", "validation-lz4-4"];
            let topic: &'static str = if codec == "none" { none[run] } else { lz4[run] };
            let conf = format!("{{\"compression.codec\": \"{codec}\"}}");
            let cpu0 = super::process_cpu_ms();
            let args = vec![secs.to_string(), "1024".to_string(), "1".to_string()];
            let line =
                drive_with(driver, "run", broker.addr().to_string(), topic, args, Some(conf))
                    .await?;
            let cpu = super::process_cpu_ms() - cpu0;
            let mb = mb_per_s(&line)?;
            let produced_mb = figure(&line, "records")? * 1024.0 / (1 << 20) as f64;
            println!(
                "setup=kafka_validation codec={codec} validate_records={validate} {line} cpu_ms_per_mb={:.1}",
                cpu / produced_mb.max(1e-9)
            );
            if validate {
                on += mb
            } else {
                off += mb
            }
            broker.shutdown().await;
        }
        println!(
            "validation codec={codec} mb_per_s_on={:.1} mb_per_s_off={:.1} ratio_vs_validation_off={:.2} rss_peak_mb={:.0}",
            on / 2.0,
            off / 2.0,
            on / off,
            super::rss_peak_mb()
        );
    }
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The validation phase's in-memory part: the validator against header-only parsing.
fn validate_in_memory(quick: bool) -> Result<(), String> {
    use folio_broker::batch::{self, Codec};
    // In memory: the validator against header-only parsing, on the same batches.
    // JSON-like records with a hex payload from a fixed LCG: lz4 halves them, about.
    let plain = batch::build(64, 1_700_000_000_000, 0, |i| {
        let mut x = u64::from(i as u32).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let hex: String = (0..1000)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                char::from(b"0123456789abcdef"[(x >> 60) as usize])
            })
            .collect();
        format!("{{\"id\":{i},\"payload\":\"{hex}\"}}").into_bytes()
    });
    let rounds = if quick { 2_000 } else { 10_000 };
    for codec in [Codec::None, Codec::Lz4] {
        let b = if codec == Codec::None {
            plain.clone()
        } else {
            folio_broker::records::with_codec(&plain, codec).map_err(|e| e.to_string())?
        };
        let rules = folio_broker::records::Rules {
            now_ms: 1_700_000_000_000,
            create_time: true,
            before_max_ms: i64::MAX,
            after_max_ms: 3_600_000,
            keys_required: false,
        };
        let time = |f: &dyn Fn() -> Result<(), String>| -> Result<f64, String> {
            let t0 = std::time::Instant::now();
            for _ in 0..rounds {
                f()?;
            }
            Ok((plain.len() * rounds) as f64 / t0.elapsed().as_secs_f64() / (1 << 20) as f64)
        };
        let header = time(&|| batch::parse(&b).map(drop).map_err(|e| e.to_string()))?;
        let validated = time(&|| {
            let h = batch::parse(&b).map_err(|e| e.to_string())?;
            folio_broker::records::validate(&b, &h, &rules).map_err(|e| format!("{e:?}"))
        })?;
        println!(
            "setup=validate_in_memory codec={codec:?} batch_records=64 record_bytes=1024 header_only_mb_per_s={header:.0} validate_mb_per_s={validated:.0} ratio_vs_header_only={:.3}",
            validated / header
        );
    }
    Ok(())
}

/// Partitions of the two-broker phase.
const PARTITIONS: usize = 4;

/// The backlog phase for one configuration (see the module doc).
async fn backlog(
    driver: &Path,
    dir: &Path,
    mode: folio_bookie::StorageMode,
    n_bookies: usize,
    records: u64,
    record_bytes: usize,
) -> Result<(), String> {
    let topic = "backlog";
    let (client, bookies, meta) =
        super::ledger::cluster_tuned(dir, n_bookies, |c| c.storage.mode = mode).await?;
    let env = super::log_env(meta, client);
    // About eight ledgers of backlog, so reads cross ledger boundaries.
    let backlog_bytes = records * record_bytes as u64;
    let config = BrokerConfig {
        listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
        default_replication: n_bookies as u16,
        replication_max: n_bookies as u16,
        default_partitions: 1,
        log: LogConfig { rollover_bytes: backlog_bytes / 8, ..LogConfig::default() },
        ..BrokerConfig::default()
    };
    let restart = (config.clone(), env.clone());
    let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
    let bootstrap = broker.addr().to_string();
    let args = vec![records.to_string(), record_bytes.to_string()];
    let produced = drive(driver, "produce", bootstrap.clone(), topic, args).await?;
    let produce_mb = mb_per_s(&produced)?;

    let info = broker.partition_info(topic, 0).await.map_err(|e| e.to_string())?;
    let newest = info.ledgers.iter().rev().find(|l| l.entries > 0 || l.records > 0);
    let newest = newest.map_or(0, |l| l.first_offset);
    let bookie_reads = || bookies.iter().map(|b| b.storage().entry_log_bytes_read()).sum::<u64>();
    let served = || broker.metrics().bytes_out.load(Relaxed);
    let fetches = || {
        let h = &broker.metrics().fetch_latency;
        (h.count(), h.sum())
    };
    let (rchar0, disk0, served0) = (super::process_io("rchar"), bookie_reads(), served());
    let fetches0 = fetches();
    let consumed =
        drive(driver, "consume", bootstrap.clone(), topic, vec![records.to_string()]).await?;
    let (rchar1, disk1, served1) = (super::process_io("rchar"), bookie_reads(), served());
    let fetches1 = fetches();
    let n_fetches = (fetches1.0 - fetches0.0).max(1);
    let fetch_ms = (fetches1.1 - fetches0.1).as_secs_f64() * 1000.0 / n_fetches as f64;
    let t = broker.metrics().topic(topic);
    let batch_bytes = t.bytes_in.load(Relaxed) / t.batches_in.load(Relaxed).max(1);
    let served_bytes = (served1 - served0).max(1) as f64;
    let consume_mb = figure(&consumed, "consume_mb_per_s")?;
    let client_cpu = figure(&consumed, "client_cpu_share")?;
    let offsets = [0, records / 2, newest + 1];
    let args: Vec<String> = offsets.iter().map(|o| o.to_string()).collect();
    let firsts = drive(driver, "first", bootstrap, topic, args.clone()).await?;
    let first_at = |o: u64| figure(&firsts, &format!("offset_{o}_ms"));
    // A restarted broker knows the closed ledgers only from their persisted offset
    // indexes (its first probe also opens the partition: fences and seals it).
    broker.shutdown().await;
    let broker = Broker::start(restart.0, restart.1).await.map_err(|e| e.to_string())?;
    let restarted = drive(driver, "first", broker.addr().to_string(), topic, args).await?;
    let restarted_at = |o: u64| figure(&restarted, &format!("offset_{o}_ms"));
    let rchar = match (rchar0, rchar1) {
        (Some(a), Some(b)) => format!("{:.2}", (b - a) as f64 / served_bytes),
        _ => "unknown".into(),
    };
    println!(
        "setup=backlog mode={} bookies={n_bookies} replication={n_bookies} record_bytes={record_bytes} records={records} ledgers={} produce_mb_per_s={produce_mb:.1} backlog_consume_mb_per_s={consume_mb:.1} ratio_vs_produce={:.2} first_record_ms_from_backlog={:.1} first_record_ms_from_backlog_middle={:.1} first_record_ms_from_backlog_newest_ledger={:.1} first_record_ms_after_restart_start={:.1} first_record_ms_after_restart_middle={:.1} first_record_ms_after_restart_newest_ledger={:.1} served_mb={:.1} read_amplification={:.2} rchar_per_byte_served={rchar} consumer_cpu_share={client_cpu:.2} batch_bytes_avg={batch_bytes} fetches={n_fetches} fetch_ms_mean={fetch_ms:.1}",
        mode.name(),
        info.ledgers.len(),
        consume_mb / produce_mb,
        first_at(offsets[0])?,
        first_at(offsets[1])?,
        first_at(offsets[2])?,
        restarted_at(offsets[0])?,
        restarted_at(offsets[1])?,
        restarted_at(offsets[2])?,
        served_bytes / super::MIB,
        (disk1 - disk0) as f64 / served_bytes,
    );
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// An error unless python3 can import confluent_kafka (the benches' Kafka client).
pub(super) fn require_confluent_kafka() -> Result<(), String> {
    let ok = Command::new("python3")
        .args(["-c", "import confluent_kafka"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Ok(());
    }
    Err("the Kafka benches drive librdkafka through python3 + confluent-kafka: pip install confluent-kafka".into())
}

/// Runs the client driver in `mode` with `args` after bootstrap and topic; returns its
/// figures line.
async fn drive(
    driver: &Path,
    mode: &'static str,
    bootstrap: String,
    topic: &'static str,
    args: Vec<String>,
) -> Result<String, String> {
    drive_with(driver, mode, bootstrap, topic, args, None).await
}

fn mb_per_s(line: &str) -> Result<f64, String> {
    figure(line, "mb_per_s")
}

fn librdkafka_version() -> String {
    Command::new("python3")
        .args(["-c", "import confluent_kafka; print(confluent_kafka.libversion()[0])"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}
