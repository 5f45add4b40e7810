//! Ledger benchmark: replicated writes through the ledger client to 3 local bookies
//! (E=3, Qw=2, Qa=2) and to 1 bookie (E=Qw=Qa=1), measured in the same run, at 1 KiB and
//! 64 KiB entries. Prints throughput and add latency, `ratio_vs_single` (replicated MB/s
//! over single-bookie MB/s; two copies share one disk here, so ~0.5 is the ceiling) and
//! `ratio_vs_disk` (against O_DIRECT append + fdatasync of 512 KiB, measured in the run).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;

use super::bookie::append_sync_baseline;
use super::pct;

use super::MIB;

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

pub(crate) struct Result_ {
    pub(crate) entries_per_s: f64,
    pub(crate) mb_per_s: f64,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
}

pub(crate) type Meta = Arc<dyn folio_meta::MetadataStore>;

pub(crate) async fn cluster(
    dir: &std::path::Path,
    n: usize,
) -> Result<(LedgerClient, Vec<Bookie>, Meta), String> {
    let meta: Meta = Arc::new(
        folio_meta::embedded::EmbeddedStore::open(&dir.join("meta")).map_err(|e| e.to_string())?,
    );
    let mut bookies = Vec::new();
    for i in 0..n {
        let mut c = BookieConfig::new(
            dir.join(format!("bookie-{i}")),
            "127.0.0.1:0".parse::<SocketAddr>().expect("addr"),
        );
        c.bookie_id = Some(format!("bookie-{i}"));
        bookies.push(Bookie::start(c, meta.clone()).await.map_err(|e| e.to_string())?);
    }
    Ok((LedgerClient::new(meta.clone(), Keys::default()), bookies, meta))
}

pub(crate) async fn measure(
    client: &LedgerClient,
    opts: CreateOptions,
    entry_bytes: usize,
    inflight: usize,
    d: Duration,
) -> Result<Result_, String> {
    let w = Arc::new(client.create(opts).await.map_err(|e| e.to_string())?);
    let payload = Arc::new(vec![0x42u8; entry_bytes]);
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..inflight {
        let (w, payload) = (w.clone(), payload.clone());
        workers.spawn(async move {
            let mut lat = Vec::new();
            while start.elapsed() < d {
                let t0 = Instant::now();
                w.add(&payload).await.map_err(|e| e.to_string())?;
                lat.push(t0.elapsed().as_micros() as u64);
            }
            Ok::<_, String>(lat)
        });
    }
    let mut lat = Vec::new();
    while let Some(r) = workers.join_next().await {
        lat.extend(r.map_err(|e| e.to_string())??);
    }
    let secs = start.elapsed().as_secs_f64();
    w.close().await.map_err(|e| e.to_string())?;
    lat.sort_unstable();
    let n = lat.len() as f64;
    Ok(Result_ {
        entries_per_s: n / secs,
        mb_per_s: n * entry_bytes as f64 / MIB / secs,
        p50_us: pct(&lat, 0.5),
        p99_us: pct(&lat, 0.99),
    })
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.dir, ".folio-bench-ledger-")?;
    let d = Duration::from_secs(if args.quick { 4 } else { 15 });
    println!("bench=ledger quick={} seconds_per_run={}", args.quick, d.as_secs());
    let (disk_mb, _, _) = append_sync_baseline(&tmp.path().join("raw"), 512 * 1024, d)?;
    println!("disk_append_fdatasync_mb_per_s={disk_mb:.1}");
    let (three, b3, _) = cluster(&tmp.path().join("three"), 3).await?;
    let (one, b1, _) = cluster(&tmp.path().join("one"), 1).await?;
    for (entry_bytes, inflight) in [(1024usize, 512usize), (64 * 1024, 256)] {
        let single = measure(&one, CreateOptions::new(1, 1, 1), entry_bytes, inflight, d).await?;
        let repl = measure(&three, CreateOptions::new(3, 2, 2), entry_bytes, inflight, d).await?;
        for (name, r) in [("single", &single), ("replicated_e3_qw2_qa2", &repl)] {
            println!(
                "entry_bytes={entry_bytes} setup={name} entries_per_s={:.0} mb_per_s={:.1} add_latency_p50_us={} add_latency_p99_us={}",
                r.entries_per_s, r.mb_per_s, r.p50_us, r.p99_us
            );
        }
        println!(
            "entry_bytes={entry_bytes} ratio_vs_single={:.2} ratio_vs_disk={:.2}",
            repl.mb_per_s / single.mb_per_s,
            repl.mb_per_s / disk_mb
        );
    }
    for b in b3.into_iter().chain(b1) {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
