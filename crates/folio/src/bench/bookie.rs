//! Bookie benchmark: one bookie over loopback, journal sync on, adds of 1 KiB, 16 KiB and
//! 256 KiB entries with many in flight.
//!
//! For each size it prints entries/s, MB/s and add latency p50/p99/p99.9 at full load, then
//! the p99 at half that rate. In the same run it measures the disk on the same file system:
//! O_DIRECT append + fdatasync at the batch size the journal actually achieved (its commit
//! rate, MB/s and fdatasync p99) and plain sequential write bandwidth, and prints
//! `ratio_vs_disk` (bookie MB/s over the append+fdatasync baseline) and
//! `ratio_p99_half_load_vs_fdatasync_p99`. Peak RSS is compared with the configured caches.
//!
//! It also prints what the process wrote to the disk during the full-load phase (journal,
//! entry logs and index, from `/proc/self/io`) per entry byte, and that write rate against
//! the same baseline (`ratio_disk_writes_vs_disk`).
//!
//! It runs once per storage mode (`--mode` picks one), each on a fresh bookie, every line
//! prefixed with `mode=`: in two-write mode every entry is written twice on one disk, so
//! `ratio_vs_disk` cannot exceed about half of what the disk persists; single-write writes
//! it once. At the end `ratio_single_write_vs_two_write` compares their MB/s per size.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use folio_bookie::StorageMode;
use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_bookie::fs::{AlignedBuf, FileSystem, OpenOptions, RealFs};
use folio_client::BookieConnection;
use folio_proto::wire::Request;
use folio_proto::{Entry, EntryHeader, Status};

use super::{MIB, pct};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Write cache size in MiB (both halves together).
    #[arg(long, default_value_t = 64)]
    write_cache_mb: usize,
    /// Flushes fdatasync their entry log every this many MiB (0 = once per flush).
    #[arg(long, default_value_t = 0)]
    entry_log_sync_mb: u64,
    /// Client connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Only this storage mode (`single-write` or `two-write`); both by default.
    #[arg(long)]
    mode: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

struct Phase {
    entries_per_s: f64,
    mb_per_s: f64,
    latencies_us: Vec<u64>,
}

/// Adds entries for `d` with `inflight` workers spread over the connections (each worker
/// keeps one add outstanding), or paced to `rate` entries/s in total when given.
async fn phase(
    conns: &[Arc<BookieConnection>],
    entry_bytes: usize,
    inflight: usize,
    d: Duration,
    rate: Option<f64>,
    next: &mut i64,
) -> Result<Phase, String> {
    let payload = Arc::new(vec![0x5au8; entry_bytes - folio_proto::ENTRY_HEADER_BYTES]);
    let start = Instant::now();
    let base = *next;
    let per_worker_rate = rate.map(|r| r / inflight as f64);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..inflight {
        let conn = conns[w % conns.len()].clone();
        let payload = payload.clone();
        workers.spawn(async move {
            // Worker w owns ledger (w % 64) + 1 and entry ids base + k * (inflight / 64 + 1) + ...
            let ledger = (w % 64) as u64 + 1;
            let lane = (w / 64) as i64;
            let lanes = (inflight / 64 + 1) as i64;
            let mut latencies = Vec::new();
            let mut k = 0i64;
            // Paced workers are staggered over one period, so the adds arrive evenly
            // rather than in bursts of `inflight` at once.
            let phase_offset = w as f64 / inflight as f64;
            while start.elapsed() < d {
                if let Some(r) = per_worker_rate {
                    tokio::time::sleep_until(
                        (start + Duration::from_secs_f64((k as f64 + phase_offset) / r)).into(),
                    )
                    .await;
                }
                let entry_id = base + k * lanes + lane;
                let h = EntryHeader {
                    ledger_id: ledger,
                    entry_id,
                    last_add_confirmed: entry_id - 1,
                    length: 0,
                };
                let e = Entry::encode(h, &payload).into_bytes();
                let t0 = Instant::now();
                match conn
                    .request(Request::Add { master_key: [1; 20], recovery: false, entry: e })
                    .await
                {
                    Ok(r) if r.status == Status::Ok => {
                        latencies.push(t0.elapsed().as_micros() as u64)
                    }
                    Ok(r) => return Err(format!("add answered {}", r.status.name())),
                    Err(e) => return Err(e.to_string()),
                }
                k += 1;
            }
            Ok((latencies, k))
        });
    }
    let mut latencies_us = Vec::new();
    let mut ks = 0i64;
    while let Some(r) = workers.join_next().await {
        let (l, k) = r.map_err(|e| e.to_string())??;
        latencies_us.extend(l);
        ks = ks.max(k);
    }
    let secs = start.elapsed().as_secs_f64();
    *next = base + (ks + 1) * (inflight / 64 + 1) as i64;
    let n = latencies_us.len() as f64;
    latencies_us.sort_unstable();
    Ok(Phase {
        entries_per_s: n / secs,
        mb_per_s: n * entry_bytes as f64 / MIB / secs,
        latencies_us,
    })
}

/// O_DIRECT append + fdatasync of `batch` bytes: MB/s, commits/s, fdatasync p99 (µs).
pub(crate) fn append_sync_baseline(
    path: &std::path::Path,
    batch: usize,
    d: Duration,
) -> Result<(f64, f64, u64), String> {
    let (mb, commits, _, p99) = append_sync_latency(path, batch, d)?;
    Ok((mb, commits, p99))
}

/// O_DIRECT append + fdatasync of `batch` bytes: MB/s, commits/s, fdatasync p50 and p99 (µs).
pub(crate) fn append_sync_latency(
    path: &std::path::Path,
    batch: usize,
    d: Duration,
) -> Result<(f64, f64, u64, u64), String> {
    let f = RealFs
        .open(path, OpenOptions { direct: true, ..OpenOptions::CREATE_NEW })
        .map_err(|e| e.to_string())?;
    let batch = batch.next_multiple_of(4096).max(4096);
    let mut buf = AlignedBuf::with_capacity(batch);
    buf.extend_from_slice(&vec![0xa5; batch]);
    let (start, mut off, mut syncs) = (Instant::now(), 0u64, Vec::new());
    while start.elapsed() < d {
        f.write_all_at(buf.as_slice(), off).map_err(|e| e.to_string())?;
        let t = Instant::now();
        f.sync_data().map_err(|e| e.to_string())?;
        syncs.push(t.elapsed().as_micros() as u64);
        off += batch as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(path);
    syncs.sort_unstable();
    Ok((off as f64 / MIB / secs, syncs.len() as f64 / secs, pct(&syncs, 0.5), pct(&syncs, 0.99)))
}

/// O_DIRECT sequential 1 MiB writes, one fdatasync at the end: MB/s.
fn sequential_baseline(path: &std::path::Path, d: Duration) -> Result<f64, String> {
    let f = RealFs
        .open(path, OpenOptions { direct: true, ..OpenOptions::CREATE_NEW })
        .map_err(|e| e.to_string())?;
    let mut buf = AlignedBuf::with_capacity(1 << 20);
    buf.extend_from_slice(&vec![0x3c; 1 << 20]);
    let (start, mut off) = (Instant::now(), 0u64);
    while start.elapsed() < d {
        f.write_all_at(buf.as_slice(), off).map_err(|e| e.to_string())?;
        off += 1 << 20;
    }
    f.sync_data().map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(path);
    Ok(off as f64 / MIB / secs)
}

async fn run_async(args: Args) -> Result<(), String> {
    let modes = super::storage_modes(args.mode.as_deref())?;
    let d = Duration::from_secs(if args.run.quick { 3 } else { 15 });
    println!(
        "bench=bookie quick={} seconds_per_phase={} connections={} modes={}",
        args.run.quick,
        d.as_secs(),
        args.connections,
        modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")
    );
    let mut results = Vec::new();
    for mode in modes {
        results.push((mode, run_mode(&args, mode, d).await?));
    }
    super::print_mode_ratios(&results);
    Ok(())
}

/// One mode on a fresh bookie: MB/s per entry size.
async fn run_mode(
    args: &Args,
    mode: StorageMode,
    d: Duration,
) -> Result<Vec<(usize, f64)>, String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-bookie-")?;
    let meta = Arc::new(
        folio_meta::embedded::EmbeddedStore::open(&tmp.path().join("meta"))
            .map_err(|e| e.to_string())?,
    );
    let mut config = BookieConfig::new(
        tmp.path().join("bookie"),
        "127.0.0.1:0".parse::<SocketAddr>().expect("addr"),
    );
    config.storage.mode = mode;
    config.storage.write_cache_bytes = args.write_cache_mb * 1024 * 1024;
    config.storage.entry_log_sync_bytes = args.entry_log_sync_mb * 1024 * 1024;
    let budget_mb =
        (config.storage.write_cache_bytes + config.storage.read_cache_bytes) as f64 / MIB;
    let bookie = Bookie::start(config, meta).await.map_err(|e| e.to_string())?;
    let result = measure(&bookie, args, mode, &tmp, d, budget_mb).await;
    // Shut the bookie down on every path, before its temporary dir goes away.
    let shutdown = bookie.shutdown().await.map_err(|e| e.to_string());
    result.and_then(|r| shutdown.map(|()| r))
}

async fn measure(
    bookie: &Bookie,
    args: &Args,
    mode: StorageMode,
    tmp: &tempfile::TempDir,
    d: Duration,
    budget_mb: f64,
) -> Result<Vec<(usize, f64)>, String> {
    let m = mode.name();
    let mut out = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..args.connections {
        conns.push(Arc::new(
            BookieConnection::connect(bookie.addr(), 10_000).await.map_err(|e| e.to_string())?,
        ));
    }
    let seq = sequential_baseline(&tmp.path().join("seq"), d)?;
    println!("mode={m} disk_sequential_write_mb_per_s={seq:.1}");
    let mut next = 0i64;
    for (entry_bytes, inflight) in [(1024usize, 2048usize), (16 * 1024, 512), (256 * 1024, 64)] {
        let stats = bookie.storage().journal_stats();
        let (c0, b0) = (
            stats.n_commits.load(Ordering::Relaxed),
            stats.bytes_committed.load(Ordering::Relaxed),
        );
        let written0 = super::process_disk_write_bytes();
        let phase_start = Instant::now();
        let full = phase(&conns, entry_bytes, inflight, d, None, &mut next).await?;
        let disk_write_mb_per_s = super::process_disk_write_bytes()
            .zip(written0)
            .map(|(b, a)| b.saturating_sub(a) as f64 / MIB / phase_start.elapsed().as_secs_f64());
        let commits = stats.n_commits.load(Ordering::Relaxed) - c0;
        let batch =
            ((stats.bytes_committed.load(Ordering::Relaxed) - b0) / commits.max(1)) as usize;
        let half =
            phase(&conns, entry_bytes, inflight, d, Some(full.entries_per_s / 2.0), &mut next)
                .await?;
        let (disk_mb, disk_commits, sync_p99) =
            append_sync_baseline(&tmp.path().join("raw"), batch, d)?;
        let l = &full.latencies_us;
        println!(
            "mode={m} entry_bytes={entry_bytes} inflight={inflight} entries_per_s={:.0} mb_per_s={:.1} add_latency_p50_us={} add_latency_p99_us={} add_latency_p999_us={} journal_batch_bytes={batch} journal_commits_per_s={:.0}",
            full.entries_per_s,
            full.mb_per_s,
            pct(l, 0.5),
            pct(l, 0.99),
            pct(l, 0.999),
            commits as f64 / d.as_secs_f64()
        );
        let half_p99 = pct(&half.latencies_us, 0.99);
        println!(
            "mode={m} entry_bytes={entry_bytes} half_load_entries_per_s={:.0} half_load_add_latency_p99_us={half_p99} disk_append_fdatasync_mb_per_s={disk_mb:.1} disk_commits_per_s={disk_commits:.0} disk_fdatasync_p99_us={sync_p99} ratio_vs_disk={:.2} ratio_p99_half_load_vs_fdatasync_p99={:.2}",
            half.entries_per_s,
            full.mb_per_s / disk_mb,
            half_p99 as f64 / sync_p99.max(1) as f64
        );
        out.push((entry_bytes, full.mb_per_s));
        // Each entry is written once or twice (mode), plus its index entry: how hard the
        // bookie drives the disk, against the same baseline.
        if let Some(w) = disk_write_mb_per_s {
            println!(
                "mode={m} entry_bytes={entry_bytes} bookie_disk_writes_mb_per_s={w:.1} disk_bytes_per_entry_byte={:.2} ratio_disk_writes_vs_disk={:.2}",
                w / full.mb_per_s,
                w / disk_mb
            );
        }
    }
    let rss = super::rss_peak_mb();
    println!(
        "mode={m} rss_peak_mb={rss:.0} configured_caches_mb={budget_mb:.0} rss_within_caches_plus_100mb={}",
        rss <= budget_mb + 100.0
    );
    Ok(out)
}
