//! Recovery benchmark (#23 item 6): how fast a lost bookie's copies come back, and what
//! re-replication costs a writer.
//!
//! Five bookies in this process (journal on, embedded metadata), ledgers of E=3 Qw=2 Qa=2
//! filled with 16 KiB entries (1 GiB, 256 MiB with `--quick`). One bookie is killed.
//! Then: a produce stream (a fresh E=3 ledger, 16 in flight) on the three survivors with
//! nothing else running, the baseline; then the same stream while autorecovery (default
//! rate limit unless `--bytes-per-s`) restores every ledger, until nothing names the lost
//! bookie. Prints `recovery_seconds`, `rereplicate_mb_per_s` with `ratio_vs_disk` (O_DIRECT
//! append + fdatasync on the same disk, measured first) and the stream's
//! `ratio_vs_no_recovery` (target ≥ 0.7 with the default rate limit), and what the process
//! read from and wrote to storage per byte it served (copied or produced). Last, a second
//! bookie is killed and restored with no rate limit and no stream:
//! `rereplicate_mb_per_s_unlimited` and its `ratio_vs_disk_unlimited`.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;
use folio_repair::autorecovery::{Autorecovery, AutorecoveryConfig};

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// The workers' copy rate limit (default: autorecovery's, 32 MiB/s; 0 = unlimited).
    #[arg(long)]
    bytes_per_s: Option<u64>,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

const ENTRY_BYTES: usize = 16 * 1024;

/// Adds to a fresh ledger, 16 in flight, until `done` says stop (or `d` passed); returns
/// the bytes acknowledged and the seconds taken.
async fn stream(
    client: &LedgerClient,
    d: Duration,
    done: impl Fn() -> bool + Clone + Send + Sync + 'static,
) -> Result<(u64, f64), String> {
    let w = Arc::new(client.create(CreateOptions::new(3, 2, 2)).await.map_err(|e| e.to_string())?);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (w, done) = (w.clone(), done.clone());
        tasks.spawn(async move {
            let payload = vec![0x77u8; ENTRY_BYTES];
            let mut n = 0u64;
            while start.elapsed() < d && !done() {
                w.add(&payload).await.map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok::<u64, String>(n)
        });
    }
    let mut n = 0;
    while let Some(r) = tasks.join_next().await {
        n += r.map_err(|e| e.to_string())??;
    }
    let secs = start.elapsed().as_secs_f64();
    w.close().await.map_err(|e| e.to_string())?;
    Ok((n * ENTRY_BYTES as u64, secs))
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-recovery-")?;
    let quick = args.run.quick;
    let fill_bytes: u64 = if quick { 256 << 20 } else { 1 << 30 };
    let d = Duration::from_secs(if quick { 5 } else { 15 });
    let (disk_mb, _, _) =
        super::bookie::append_sync_baseline(&tmp.path().join("raw"), 512 * 1024, d)?;
    let (client, mut bookies, meta) =
        super::ledger::cluster_tuned(tmp.path(), 5, |c| c.lease_ttl = Duration::from_secs(1))
            .await?;
    let config = AutorecoveryConfig {
        lost_after: Duration::ZERO,
        poll_interval: Duration::from_millis(100),
        check_interval: None,
        lease_ttl: Duration::from_secs(2),
        bytes_per_s: args.bytes_per_s.unwrap_or(AutorecoveryConfig::default().bytes_per_s),
        ..AutorecoveryConfig::default()
    };
    println!(
        "bench=recovery quick={quick} fill_mb={} entry_bytes={ENTRY_BYTES} rate_limit_mb_per_s={:.0} disk_append_fdatasync_mb_per_s={disk_mb:.1}",
        fill_bytes >> 20,
        config.bytes_per_s as f64 / MIB
    );
    fill(&client, fill_bytes).await?;
    let lost_id = kill(&mut bookies, &meta).await?;
    let lost_bytes = naming_bytes(&client, &lost_id).await?;
    // The baseline: the stream on the survivors, nothing else running.
    let (base_bytes, base_secs) = stream(&client, d, || false).await?;
    let base_mb_s = base_bytes as f64 / MIB / base_secs;
    // Recovery with the stream running.
    let io_read0 = super::process_io("read_bytes").unwrap_or(0);
    let io_write0 = super::process_disk_write_bytes().unwrap_or(0);
    let a =
        Autorecovery::new(meta.clone(), Keys::default(), client.clone(), config.clone(), "bench");
    let stats = a.stats();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(a.run(stop_rx));
    let healed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn(watch_healed(client.clone(), lost_id.clone(), healed.clone()));
    let limit = Duration::from_secs(if quick { 90 } else { 600 });
    let flag = healed.clone();
    let (rec_bytes, rec_secs) = stream(&client, limit, move || flag.load(Relaxed)).await?;
    let recovery = if healed.load(Relaxed) {
        Some(watcher.await.map_err(|e| e.to_string())?)
    } else {
        watcher.abort();
        None
    };
    let _ = stop.send(true);
    let _ = task.await;
    let copied = stats.bytes_copied.load(Relaxed);
    let unlimited = unlimited(&client, &meta, &mut bookies, &config, limit).await?;
    let read = super::process_io("read_bytes").unwrap_or(0).saturating_sub(io_read0);
    let written = super::process_disk_write_bytes().unwrap_or(0).saturating_sub(io_write0);
    let rec_mb_s = rec_bytes as f64 / MIB / rec_secs;
    println!(
        "lost_bookie_mb={:.1} copied_mb={:.1} entries_copied={} copy_errors={} ledgers_healed={}",
        lost_bytes as f64 / MIB,
        copied as f64 / MIB,
        stats.entries_copied.load(Relaxed),
        stats.copy_errors.load(Relaxed),
        stats.ledgers_healed.load(Relaxed)
    );
    match recovery {
        Some(t) => {
            let mb_s = copied as f64 / MIB / t.as_secs_f64();
            println!(
                "recovery_seconds={:.1} rereplicate_mb_per_s={mb_s:.1} ratio_vs_disk={:.2}",
                t.as_secs_f64(),
                mb_s / disk_mb
            );
        }
        None => println!("recovery_seconds=not_reached limit_seconds={}", limit.as_secs()),
    }
    println!(
        "produce_mb_per_s_no_recovery={base_mb_s:.1} produce_mb_per_s_during_recovery={rec_mb_s:.1} ratio_vs_no_recovery={:.2}",
        rec_mb_s / base_mb_s
    );
    print_unlimited(unlimited, disk_mb);
    let served = (copied + rec_bytes).max(1) as f64;
    println!(
        "process_read_mb={:.1} process_written_mb={:.1} read_per_byte_served={:.2} written_per_byte_served={:.2}",
        read as f64 / MIB,
        written as f64 / MIB,
        read as f64 / served,
        written as f64 / served
    );
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits until nothing names `lost` and sets `healed`; returns the time it took.
async fn watch_healed(
    client: LedgerClient,
    lost: String,
    healed: Arc<std::sync::atomic::AtomicBool>,
) -> Duration {
    let started = Instant::now();
    loop {
        if matches!(naming_bytes(&client, &lost).await, Ok(0)) {
            healed.store(true, Relaxed);
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn print_unlimited(unlimited: Option<(u64, f64)>, disk_mb: f64) {
    match unlimited {
        Some((bytes, t)) => {
            let mb_s = bytes as f64 / MIB / t;
            println!(
                "unlimited_copied_mb={:.1} unlimited_recovery_seconds={t:.1} rereplicate_mb_per_s_unlimited={mb_s:.1} ratio_vs_disk_unlimited={:.2}",
                bytes as f64 / MIB,
                mb_s / disk_mb
            );
        }
        None => println!("unlimited_recovery_seconds=not_reached"),
    }
}

/// Fills 32 ledgers of E=3 Qw=2 Qa=2 with `bytes` of 16 KiB entries, 64 adds in flight.
async fn fill(client: &LedgerClient, bytes: u64) -> Result<(), String> {
    let payload = vec![0x42u8; ENTRY_BYTES];
    let per_ledger = bytes / 32 / ENTRY_BYTES as u64;
    for _ in 0..32 {
        let w =
            Arc::new(client.create(CreateOptions::new(3, 2, 2)).await.map_err(|e| e.to_string())?);
        let mut adds = tokio::task::JoinSet::new();
        for _ in 0..per_ledger {
            let (w, p) = (w.clone(), payload.clone());
            adds.spawn(async move { w.add(&p).await.map(|_| ()).map_err(|e| e.to_string()) });
            while adds.len() >= 64 {
                adds.join_next().await.expect("an add").map_err(|e| e.to_string())??;
            }
        }
        while let Some(r) = adds.join_next().await {
            r.map_err(|e| e.to_string())??;
        }
        w.close().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Kills the second bookie of `bookies` (an abort: no clean stop) and waits for its
/// registration to expire; returns its id.
async fn kill(
    bookies: &mut Vec<folio_bookie::bookie::Bookie>,
    meta: &super::ledger::Meta,
) -> Result<String, String> {
    let lost = bookies.remove(1);
    let lost_id = lost.id().to_string();
    lost.abort().await;
    let key = Keys::default().bookie(&lost_id, false);
    while meta.get(&key).await.map_err(|e| e.to_string())?.is_some() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(lost_id)
}

/// Kills another bookie and restores its copies with no rate limit and nothing else
/// running; returns the bytes copied and the seconds until nothing names it.
async fn unlimited(
    client: &LedgerClient,
    meta: &super::ledger::Meta,
    bookies: &mut Vec<folio_bookie::bookie::Bookie>,
    config: &AutorecoveryConfig,
    limit: Duration,
) -> Result<Option<(u64, f64)>, String> {
    let lost_id = kill(bookies, meta).await?;
    let config = AutorecoveryConfig { bytes_per_s: 0, ..config.clone() };
    let a = Autorecovery::new(meta.clone(), Keys::default(), client.clone(), config, "bench-2");
    let stats = a.stats();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(a.run(stop_rx));
    let started = Instant::now();
    let mut done = None;
    while started.elapsed() < limit {
        if naming_bytes(client, &lost_id).await? == 0 {
            done = Some((stats.bytes_copied.load(Relaxed), started.elapsed().as_secs_f64()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    let _ = task.await;
    Ok(done)
}

/// Bytes of the ledgers' entries whose write sets hold `bookie` (0: nothing names it).
async fn naming_bytes(client: &LedgerClient, bookie: &str) -> Result<u64, String> {
    let mut bytes = 0;
    for id in client.list().await.map_err(|e| e.to_string())? {
        let Ok(m) = client.metadata(id).await else { continue };
        for f in folio_repair::autorecovery::worker::fragments_of(&m, bookie) {
            let last = f.last.unwrap_or(m.last_entry_id.max(f.first - 1));
            let (e, w) = (m.ensemble_size as usize, m.write_quorum as usize);
            let n =
                folio_repair::autorecovery::worker::entries_on(f.first, last, f.pos, e, w).count();
            bytes += (n as u64 * m.length / (m.last_entry_id + 1).max(1) as u64).max(1);
        }
    }
    Ok(bytes)
}
