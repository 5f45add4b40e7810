//! Managed-log benchmark.
//!
//! 1. Appends of 1 KiB batches through a managed log against raw ledger adds, same
//!    cluster (3 bookies, E=3 Qw=2 Qa=2), same number in flight, same run:
//!    `ratio_vs_ledger` (target >= 0.9).
//! 2. Trim and reclaim: a log of N one-entry ledgers (10 000; 1 000 with `--quick`) is
//!    trimmed by `delete_records`, the trash is emptied by the deleter, and the bookie's
//!    GC gives the disk back; each phase is timed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use folio_client::CreateOptions;
use folio_log::{LogConfig, ManagedLog, Trash, TrashConfig};

use super::ledger::{cluster, measure};
use super::{MIB, pct};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Ledgers to trim and reclaim (default 10 000, or 1 000 with --quick).
    #[arg(long)]
    ledgers: Option<u64>,
}

/// Appends from `inflight` tasks for `d`: (appends, seconds, latencies in µs).
async fn appends(
    log: &ManagedLog,
    entry_bytes: usize,
    inflight: usize,
    d: Duration,
) -> Result<(f64, f64, Vec<u64>), String> {
    let payload = Arc::new(vec![0x42u8; entry_bytes]);
    let log = log.clone();
    let (secs, lat) = super::closed_loop(inflight, d, move || {
        let (log, payload) = (log.clone(), payload.clone());
        async move { log.append(&payload, 1, 0).await.map(|_| ()).map_err(|e| e.to_string()) }
    })
    .await?;
    Ok((lat.len() as f64, secs, lat))
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-log-")?;
    let d = Duration::from_secs(if args.run.quick { 5 } else { 15 });
    let n_ledgers = args.ledgers.unwrap_or(if args.run.quick { 1000 } else { 10_000 });
    println!(
        "bench=log quick={} seconds_per_run={} ledgers={n_ledgers}",
        args.run.quick,
        d.as_secs()
    );
    let e = |e: folio_log::LogError| e.to_string();

    // 1. Throughput.
    let (client, bookies, meta) = cluster(&tmp.path().join("three"), 3).await?;
    let (entry_bytes, inflight) = (1024usize, 256usize);
    let env = super::log_env(meta, client.clone());
    let log = ManagedLog::open_or_create(env.clone(), "bench/0", LogConfig::default())
        .await
        .map_err(e)?;
    // Alternate the two, so drift of the disk or the bookies affects both alike.
    let rounds = 3;
    let slice = d / rounds;
    let (mut raw_n, mut raw_s) = (0.0, 0.0);
    let (mut log_n, mut log_s, mut log_lat) = (0.0, 0.0, Vec::new());
    for _ in 0..rounds {
        let r = measure(&client, CreateOptions::new(3, 2, 2), entry_bytes, inflight, slice).await?;
        raw_n += r.entries_per_s * slice.as_secs_f64();
        raw_s += slice.as_secs_f64();
        let (n, secs, lat) = appends(&log, entry_bytes, inflight, slice).await?;
        log_n += n;
        log_s += secs;
        log_lat.extend(lat);
    }
    log_lat.sort_unstable();
    let (raw_eps, log_eps) = (raw_n / raw_s, log_n / log_s);
    println!(
        "setup=ledger entry_bytes={entry_bytes} entries_per_s={raw_eps:.0} mb_per_s={:.1}",
        raw_eps * entry_bytes as f64 / MIB
    );
    println!(
        "setup=managed_log entry_bytes={entry_bytes} appends_per_s={log_eps:.0} mb_per_s={:.1} append_latency_p50_us={} append_latency_p99_us={} ledgers={}",
        log_eps * entry_bytes as f64 / MIB,
        pct(&log_lat, 0.5),
        pct(&log_lat, 0.99),
        log.info().ledgers.len()
    );
    println!("ratio_vs_ledger={:.2}", log_eps / raw_eps);
    log.close().await.map_err(e)?;
    drop(env);
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }

    // 2. Trim and reclaim N ledgers (one bookie: the metadata work is what is measured).
    let (client, bookies, meta) = cluster(&tmp.path().join("one"), 1).await?;
    let env = super::log_env(meta, client);
    let config =
        LogConfig { rollover_entries: 1, retention_time: None, ..LogConfig::for_bookies(1) };
    let log = ManagedLog::open_or_create(env.clone(), "reclaim/0", config).await.map_err(e)?;
    let t0 = Instant::now();
    let chunk = vec![0x17u8; 4096];
    for _ in 0..n_ledgers {
        log.append(&chunk, 1, 0).await.map_err(e)?;
    }
    let fill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    log.delete_records(log.end_offset()).await.map_err(e)?;
    let trim_s = t1.elapsed().as_secs_f64();
    let trash = Trash::new(
        env.clone(),
        TrashConfig { concurrency: 16, busy_fraction: 1.0, ..TrashConfig::default() },
    );
    let trashed = trash.list().await.map_err(e)?.len();
    let t2 = Instant::now();
    let mut deleted = 0;
    while deleted < trashed as u64 {
        let pass = trash.run_once().await.map_err(e)?;
        if pass.deleted == 0 {
            return Err(format!("the deleter is stuck: {pass:?}"));
        }
        deleted += pass.deleted;
    }
    let delete_s = t2.elapsed().as_secs_f64();
    let t3 = Instant::now();
    let gc = bookies[0].gc_now().await.map_err(|e| e.to_string())?;
    let gc_s = t3.elapsed().as_secs_f64();
    println!(
        "reclaim ledgers_trashed={trashed} fill_s={fill_s:.1} trim_s={trim_s:.2} trash_delete_s={delete_s:.2} gc_s={gc_s:.2} gc_ledgers_dropped={} gc_bytes_reclaimed={} trim_and_reclaim_s={:.2} ledgers_reclaimed_per_s={:.0}",
        gc.ledgers_dropped.len(),
        gc.bytes_reclaimed,
        trim_s + delete_s + gc_s,
        trashed as f64 / (trim_s + delete_s + gc_s)
    );
    log.close().await.map_err(e)?;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
