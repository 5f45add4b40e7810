//! GC benchmark: how fast deleted data comes back, and what GC costs writers.
//!
//! One bookie (interleaved entry logs, compaction on), embedded metadata. Phase 1 writes
//! through the ledger client across many ledgers with GC idle: the baseline write rate.
//! Then 90 % of the ledgers are deleted, and phase 2 writes new ledgers for the same time
//! while GC and compaction run; meanwhile the entry-log bytes on disk are sampled until they
//! are within 10 % of the live data. Prints `reclaim_seconds` and
//! `ratio_vs_no_gc` (phase 2 rate / phase 1 rate; target ≥ 0.8).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
}

/// Writes `payload` to `ledgers` new ledgers round-robin for `d`; returns MB/s and ids.
async fn write(
    client: &LedgerClient,
    ledgers: usize,
    d: Duration,
    payload: &[u8],
) -> Result<(f64, Vec<u64>, u64), String> {
    let mut writers = Vec::new();
    for _ in 0..ledgers {
        writers.push(Arc::new(
            client.create(CreateOptions::new(1, 1, 1)).await.map_err(|e| e.to_string())?,
        ));
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in &writers {
        for _ in 0..4 {
            let (w, p) = (w.clone(), payload.to_vec());
            tasks.spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < d {
                    w.add(&p).await.map_err(|e| e.to_string())?;
                    n += 1;
                }
                Ok::<_, String>(n)
            });
        }
    }
    let mut n = 0;
    while let Some(r) = tasks.join_next().await {
        n += r.map_err(|e| e.to_string())??;
    }
    let secs = start.elapsed().as_secs_f64();
    let mut ids = Vec::new();
    for w in writers {
        w.close().await.map_err(|e| e.to_string())?;
        ids.push(w.id());
    }
    let bytes = n * payload.len() as u64;
    Ok((bytes as f64 / MIB / secs, ids, bytes))
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-gc-")?;
    let d = Duration::from_secs(if args.run.quick { 8 } else { 30 });
    let meta = Arc::new(
        folio_meta::embedded::EmbeddedStore::open(&tmp.path().join("meta"))
            .map_err(|e| e.to_string())?,
    );
    let mut c = BookieConfig::new(
        tmp.path().join("bookie"),
        "127.0.0.1:0".parse::<SocketAddr>().expect("addr"),
    );
    c.bookie_id = Some("bookie-0".into());
    c.storage.entry_log_bytes_max = 64 * 1024 * 1024;
    c.storage.flush_interval = Duration::from_secs(1);
    c.gc.interval = Duration::from_millis(500);
    c.gc.minor_threshold = 0.5;
    c.gc.minor_interval = Duration::from_millis(500);
    let log_dir = c.storage.ledger_dir.join("entrylogs");
    let bookie = Bookie::start(c, meta.clone()).await.map_err(|e| e.to_string())?;
    let client = LedgerClient::new(meta, Keys::default());
    let payload = vec![0x33u8; 16 * 1024];
    println!(
        "bench=gc quick={} seconds_per_phase={} entry_bytes={}",
        args.run.quick,
        d.as_secs(),
        payload.len()
    );

    let (base_mb_s, ids, written) = write(&client, 40, d, &payload).await?;
    let keep = ids.len() / 10;
    for id in &ids[keep..] {
        client.delete(*id).await.map_err(|e| e.to_string())?;
    }
    let kept_bytes = written / 10;
    let deleted_at = Instant::now();
    let samples: Arc<std::sync::Mutex<Vec<(f64, u64)>>> =
        Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = {
        let (samples, log_dir) = (samples.clone(), log_dir.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                samples
                    .lock()
                    .expect("samples")
                    .push((deleted_at.elapsed().as_secs_f64(), super::files_bytes(&log_dir)));
            }
        })
    };
    let (gc_mb_s, _, written2) = write(&client, 40, d, &payload).await?;
    // Live data at a sample's time: the ledgers kept plus what phase 2 had written by then
    // (it writes at a steady rate over `d`). Reclaimed = the entry logs within 10 % of that;
    // keep sampling after the writes if need be.
    let live = (kept_bytes + written2) as f64;
    let live_at = |t: f64| kept_bytes as f64 + written2 as f64 * (t / d.as_secs_f64()).min(1.0);
    let deadline = Instant::now() + Duration::from_secs(if args.run.quick { 30 } else { 300 });
    let reclaimed = loop {
        let hit = samples
            .lock()
            .expect("samples")
            .iter()
            .find(|(t, b)| *b as f64 <= 1.1 * live_at(*t))
            .copied();
        if hit.is_some() || Instant::now() > deadline {
            break hit;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    sampler.abort();
    let status = bookie.gc_status();
    println!(
        "written_mb={:.0} deleted_mb={:.0} written_during_gc_mb={:.0} live_mb={:.0} gc_passes={} gc_bytes_reclaimed_mb={:.0}",
        written as f64 / MIB,
        (written - kept_bytes) as f64 / MIB,
        written2 as f64 / MIB,
        live / MIB,
        status.passes,
        status.bytes_reclaimed_total as f64 / MIB
    );
    match reclaimed {
        Some((secs, bytes)) => {
            println!("reclaim_seconds={secs:.1} entry_log_mb_then={:.0}", bytes as f64 / MIB)
        }
        None => println!(
            "reclaim_seconds=not_reached entry_log_mb_now={:.0}",
            super::files_bytes(&log_dir) as f64 / MIB
        ),
    }
    println!(
        "write_mb_per_s_no_gc={base_mb_s:.1} write_mb_per_s_during_gc={gc_mb_s:.1} ratio_vs_no_gc={:.2}",
        gc_mb_s / base_mb_s
    );
    bookie.shutdown().await.map_err(|e| e.to_string())?;
    Ok(())
}
