//! `folio bench <what>`: benchmarks of the release binary. Each prints `key=value` lines and
//! every comparison as `ratio_vs_<baseline>=<x>` with the baseline measured in the same run.

mod bookie;
mod codecs;
mod compact;
mod delete;
mod gc;
mod groups;
mod hostile;
mod kafka;
mod kafka_driver;
mod kafka_move;
mod kafka_tls;
mod kafka_txn;
mod latency;
mod ledger;
mod log;
mod meta;
mod omb;
mod overload;
mod partitions;
mod recovery;
mod storage;

#[derive(Debug, clap::Subcommand)]
pub enum Bench {
    /// The bookie storage engine alone: adds through journal + write cache with sync on,
    /// against raw O_DIRECT append + fdatasync on the same disk.
    Storage(storage::Args),
    /// The metadata store: compare-and-set updates per second and watch latency, embedded
    /// and (with `--etcd`) etcd.
    Meta(meta::Args),
    /// One bookie over loopback against the raw disk: entries/s, MB/s, latency.
    Bookie(bookie::Args),
    /// Replicated ledger writes (3 bookies, E=3 Qw=2 Qa=2) against one bookie and the disk.
    Ledger(ledger::Args),
    /// Reclaim time after deleting 90 % of the data, and the write rate while GC runs.
    Gc(gc::Args),
    /// Managed-log appends against raw ledger adds, and the time to trim and reclaim
    /// many ledgers.
    Log(log::Args),
    /// A real Kafka client (librdkafka via confluent-kafka) producing 1 KiB records with
    /// acks=all to a broker on 3 bookies, against raw ledger adds on the same bookies.
    Kafka(kafka::Args),
    /// Tail latency at fixed rates (25, 50, 75 % of the peak measured first): an open-loop
    /// librdkafka producer (acks=all, 1 KiB) and a tailing consumer, replication 1 and 3,
    /// linger.ms 0 and 5; p50/p99/p99.9/max against the disk's fdatasync p99.
    Latency(latency::Args),
    /// Many partitions (10 000; 2 000 with --quick, 100 000 with --full): create time,
    /// Metadata latency, memory and metadata per partition, fetch-session answer time, and
    /// the time to reopen them all after a broker restart.
    Partitions(partitions::Args),
    /// Producers offering more than the broker takes: throughput against one producer's
    /// peak (`ratio_vs_peak`), produce p99 at twice the peak, and RSS against the memory
    /// budget; no producer may time out at librdkafka's default settings.
    Overload(overload::Args),
    /// OpenMessaging Benchmark's Kafka workloads (1 topic x 16 and x 100 partitions at
    /// 50 000 msg/s of 1 KiB, and the 4-producer 4-consumer catch-up one) with OMB's Kafka
    /// driver settings: publish and end-to-end latency as OMB prints them, backlog drain time.
    Omb(omb::Args),
    /// Topic deletion: time until a deleted topic's metadata, logs, ledgers and disk are
    /// gone, and CreateTopics latency during a large deletion against idle.
    Delete(delete::Args),
    /// A well-behaved producer's rate while 1 000 adversarial connections attack the Kafka
    /// listener (trickled and huge frames, garbage, pipelining without reading, oversized
    /// names, auto-create and by-id storms, idle), against its rate alone; and peak RSS
    /// against the configured memory budget.
    Hostile(hostile::Args),
    /// Compaction: MB/s of a compaction pass over a compacted topic (90 % of its records
    /// superseded), and a producer's rate meanwhile against before and after.
    Compact(compact::Args),
    /// The record codecs (gzip, snappy, lz4, zstd; pure Rust): compress and decode MB/s of
    /// 1 KiB records in 64-record batches, each against decoding them uncompressed.
    Codecs(codecs::Args),
    /// Consumer groups: settle time after a member joins and after one dies, classic against
    /// the consumer protocol (KIP-848) in the same run; share-group records/s with 1 and 4
    /// members (KIP-932).
    Groups(groups::Args),
    /// Autorecovery: time until a killed bookie's copies are restored on four in-process
    /// bookies (MB/s against the disk), and a writer's rate meanwhile against without.
    Recovery(recovery::Args),
}

pub fn run(what: Bench) -> Result<(), String> {
    // The variant's name: `Kafka(Args { .. })` is `kafka`.
    let name = format!("{what:?}");
    let name = name.split(['(', ' ']).next().unwrap_or("").to_lowercase();
    let _ticker = crate::progress::Ticker::start(format!("bench {name}"));
    match what {
        Bench::Storage(args) => storage::run(args),
        Bench::Meta(args) => meta::run(args),
        Bench::Bookie(args) => bookie::run(args),
        Bench::Ledger(args) => ledger::run(args),
        Bench::Gc(args) => gc::run(args),
        Bench::Log(args) => log::run(args),
        Bench::Kafka(args) => kafka::run(args),
        Bench::Latency(args) => latency::run(args),
        Bench::Partitions(args) => partitions::run(args),
        Bench::Overload(args) => overload::run(args),
        Bench::Omb(args) => omb::run(args),
        Bench::Delete(args) => delete::run(args),
        Bench::Hostile(args) => hostile::run(args),
        Bench::Recovery(args) => recovery::run(args),
        Bench::Compact(args) => compact::run(args),
        Bench::Codecs(args) => codecs::run(args),
        Bench::Groups(args) => groups::run(args),
    }
}

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// CPU time this process has used (user and system), in ms (`/proc/self/stat`, at Linux's
/// USER_HZ of 100).
pub(crate) fn process_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: state is 3rd, utime 14th, stime 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) * 10.0
}

/// What every benchmark takes: how long to run and where.
#[derive(Debug, clap::Args)]
pub(crate) struct Run {
    /// Short run: under two minutes in all (each benchmark's doc says what it shortens).
    #[arg(long)]
    pub quick: bool,
    /// Directory on the disk to measure (a temporary directory is made inside it and
    /// removed at the end).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
}

/// Bytes of the files directly in `dir` (an entry-log directory); 0 if it is missing.
pub(crate) fn files_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map_or(0, |it| it.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum())
}

/// A counter of `/proc/self/io` (e.g. `read_bytes`, `write_bytes`: what this process
/// caused to be read from or written to storage), if known.
pub(crate) fn process_io(field: &str) -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Bytes this process has caused to be written to storage (journal, entry logs and
/// index, buffered or O_DIRECT), if known.
pub(crate) fn process_disk_write_bytes() -> Option<u64> {
    process_io("write_bytes")
}

/// The process's peak resident memory (`VmHWM`), in MiB.
pub(crate) fn rss_peak_mb() -> f64 {
    status_mb("VmHWM:")
}

/// The process's resident memory now (`VmRSS`), in MiB.
pub(crate) fn rss_now_mb() -> f64 {
    status_mb("VmRSS:")
}

/// A `kB` figure of `/proc/self/status` (`field` with its colon), in MiB; 0 if unknown.
fn status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The value at fraction `p` of an ascending list (0 for an empty one).
pub(crate) fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0)
}

/// Runs a benchmark on a two-worker runtime (the machine has two cores).
pub(crate) fn block_on(
    f: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(), String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting runtime: {e}"))?
        .block_on(f)
}

/// Runs `inflight` workers, each calling `op` in a loop for `d`; returns the seconds
/// taken and every call's latency in µs, sorted.
pub(crate) async fn closed_loop<F, Fut>(
    inflight: usize,
    d: std::time::Duration,
    op: F,
) -> Result<(f64, Vec<u64>), String>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let start = std::time::Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..inflight {
        let op = op.clone();
        workers.spawn(async move {
            let mut lat = Vec::new();
            while start.elapsed() < d {
                let t0 = std::time::Instant::now();
                op().await?;
                lat.push(t0.elapsed().as_micros() as u64);
            }
            Ok::<_, String>(lat)
        });
    }
    let mut lat = Vec::new();
    while let Some(r) = workers.join_next().await {
        lat.extend(r.map_err(|e| e.to_string())??);
    }
    lat.sort_unstable();
    Ok((start.elapsed().as_secs_f64(), lat))
}

/// The managed-log environment a benchmark's logs and brokers run in: `meta` and `client`,
/// default keys, the wall clock, owner "bench".
pub(crate) fn log_env(
    meta: std::sync::Arc<dyn folio_meta::MetadataStore>,
    client: folio_client::LedgerClient,
) -> folio_log::LogEnv {
    folio_log::LogEnv {
        meta,
        client,
        keys: folio_meta::keys::Keys::default(),
        clock: std::sync::Arc::new(folio_log::WallClock),
        owner: "bench".into(),
    }
}

/// A temporary directory inside `dir` (on the disk being measured), removed afterwards.
pub(crate) fn temp_dir(dir: &std::path::Path, prefix: &str) -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(dir)
        .map_err(|e| format!("creating a temp dir in {}: {e}", dir.display()))
}

/// The storage modes a bench runs: the one named, or both (single-write first).
pub(crate) fn storage_modes(only: Option<&str>) -> Result<Vec<folio_bookie::StorageMode>, String> {
    use folio_bookie::StorageMode;
    match only {
        Some(name) => Ok(vec![StorageMode::parse(name).map_err(|e| e.0)?]),
        None => Ok(vec![StorageMode::SingleWrite, StorageMode::TwoWrite]),
    }
}

/// The storage mode named, or the default mode.
pub(crate) fn storage_mode(name: Option<&str>) -> Result<folio_bookie::StorageMode, String> {
    name.map_or(Ok(folio_bookie::StorageMode::default()), |n| {
        folio_bookie::StorageMode::parse(n).map_err(|e| e.0)
    })
}

/// Prints `ratio_single_write_vs_two_write` per entry size when both modes ran.
pub(crate) fn print_mode_ratios(results: &[(folio_bookie::StorageMode, Vec<(usize, f64)>)]) {
    use folio_bookie::StorageMode;
    let of = |mode| results.iter().find(|(m, _)| *m == mode).map(|(_, r)| r);
    let (Some(single), Some(two)) = (of(StorageMode::SingleWrite), of(StorageMode::TwoWrite))
    else {
        return;
    };
    for ((size, s), (_, t)) in single.iter().zip(two) {
        println!("entry_bytes={size} ratio_single_write_vs_two_write={:.2}", s / t.max(1e-9));
    }
}

/// A fresh Kafka cluster for one benchmark run: a broker (PLAINTEXT on a free loopback port,
/// topics of `replication` by default and at most) on `replication` in-process bookies of
/// storage `mode` in `dir`, embedded metadata. A run writes gigabytes: `stop` removes `dir`.
pub(crate) struct FreshKafka {
    pub(crate) broker: folio_broker::Broker,
    bookies: Vec<folio_bookie::bookie::Bookie>,
    dir: std::path::PathBuf,
}

impl FreshKafka {
    /// The broker's configuration for `replication`.
    pub(crate) fn config(replication: usize) -> folio_broker::BrokerConfig {
        let listen = "127.0.0.1:0".parse().expect("address");
        folio_broker::BrokerConfig {
            listeners: vec![folio_broker::config::ListenerConfig::plaintext(listen)],
            default_replication: replication as u16,
            replication_max: replication as u16,
            ..folio_broker::BrokerConfig::default()
        }
    }

    pub(crate) async fn start(
        dir: &std::path::Path,
        replication: usize,
        mode: folio_bookie::StorageMode,
    ) -> Result<FreshKafka, String> {
        let (client, bookies, meta) =
            ledger::cluster_tuned(dir, replication, |c| c.storage.mode = mode).await?;
        let broker = folio_broker::Broker::start(Self::config(replication), log_env(meta, client))
            .await
            .map_err(|e| e.to_string())?;
        Ok(FreshKafka { broker, bookies, dir: dir.to_path_buf() })
    }

    /// Stops the broker and the bookies, and removes their directory.
    pub(crate) async fn stop(self) -> Result<(), String> {
        self.broker.shutdown().await;
        for b in self.bookies {
            b.shutdown().await.map_err(|e| e.to_string())?;
        }
        std::fs::remove_dir_all(&self.dir)
            .map_err(|e| format!("removing {}: {e}", self.dir.display()))
    }
}
