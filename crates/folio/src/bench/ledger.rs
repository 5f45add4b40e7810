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
    #[command(flatten)]
    run: super::Run,
    /// Instead: journal-less bookies against journal bookies (same run), then the full
    /// integrity check's speed on a bookie holding 1 M entries (200 k with --quick).
    #[arg(long)]
    no_journal: bool,
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
    cluster_with(dir, n, true).await
}

pub(crate) async fn cluster_with(
    dir: &std::path::Path,
    n: usize,
    journal: bool,
) -> Result<(LedgerClient, Vec<Bookie>, Meta), String> {
    cluster_tuned(dir, n, |c| {
        if !journal {
            c.storage.make_journal_less();
        }
    })
    .await
}

/// An embedded metadata store and `n` bookies, each config adjusted by `tune`.
pub(crate) async fn cluster_tuned(
    dir: &std::path::Path,
    n: usize,
    tune: impl Fn(&mut BookieConfig),
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
        tune(&mut c);
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
    let (secs, lat) = super::closed_loop(inflight, d, {
        let w = w.clone();
        move || {
            let (w, payload) = (w.clone(), payload.clone());
            async move { w.add(&payload).await.map(|_| ()).map_err(|e| e.to_string()) }
        }
    })
    .await?;
    w.close().await.map_err(|e| e.to_string())?;
    let n = lat.len() as f64;
    Ok(Result_ {
        entries_per_s: n / secs,
        mb_per_s: n * entry_bytes as f64 / MIB / secs,
        p50_us: pct(&lat, 0.5),
        p99_us: pct(&lat, 0.99),
    })
}

async fn run_async(args: Args) -> Result<(), String> {
    if args.no_journal {
        return no_journal(args).await;
    }
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-ledger-")?;
    let d = Duration::from_secs(if args.run.quick { 4 } else { 15 });
    println!("bench=ledger quick={} seconds_per_run={}", args.run.quick, d.as_secs());
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

/// Journal-less against journal writes, then the integrity check's speed.
async fn no_journal(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-ledger-nj-")?;
    let d = Duration::from_secs(if args.run.quick { 4 } else { 15 });
    let n_entries: u64 = if args.run.quick { 200_000 } else { 1_000_000 };
    println!(
        "bench=ledger_no_journal quick={} seconds_per_run={} check_entries={n_entries}",
        args.run.quick,
        d.as_secs()
    );
    let (with, bw, _) = cluster_with(&tmp.path().join("journal"), 3, true).await?;
    let (without, bn, meta) = cluster_with(&tmp.path().join("no-journal"), 3, false).await?;
    for (entry_bytes, inflight) in [(1024usize, 512usize), (64 * 1024, 256)] {
        let j = measure(&with, CreateOptions::new(3, 2, 2), entry_bytes, inflight, d).await?;
        let nj = measure(&without, CreateOptions::new(3, 2, 2), entry_bytes, inflight, d).await?;
        for (name, r) in [("journal", &j), ("no_journal", &nj)] {
            println!(
                "entry_bytes={entry_bytes} setup={name} entries_per_s={:.0} mb_per_s={:.1} add_latency_p50_us={} add_latency_p99_us={}",
                r.entries_per_s, r.mb_per_s, r.p50_us, r.p99_us
            );
        }
        println!("entry_bytes={entry_bytes} ratio_vs_journal={:.2}", nj.mb_per_s / j.mb_per_s);
    }
    for b in bw {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    // The check: fill, then check bookie-0 (nothing missing: pure checking speed), then
    // kill it (its write cache is lost), restart, and repair.
    let t0 = Instant::now();
    let payload = vec![0x33u8; 100];
    let per_ledger = 100_000u64;
    let mut written = 0;
    while written < n_entries {
        let w =
            Arc::new(without.create(CreateOptions::new(3, 2, 2)).await.map_err(|e| e.to_string())?);
        let n = per_ledger.min(n_entries - written);
        let mut tasks = tokio::task::JoinSet::new();
        for k in 0..256u64 {
            let (w, payload) = (w.clone(), payload.clone());
            tasks.spawn(async move {
                let mut i = k;
                while i < n {
                    w.add(&payload).await.map_err(|e| e.to_string())?;
                    i += 256;
                }
                Ok::<_, String>(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| e.to_string())??;
        }
        w.close().await.map_err(|e| e.to_string())?;
        written += n;
    }
    println!("check_fill_entries={written} fill_s={:.1}", t0.elapsed().as_secs_f64());
    let mut bn = bn;
    let b0 = bn.remove(0);
    let check = |storage| folio_repair::IntegrityCheck {
        storage,
        client: without.clone(),
        meta: meta.clone(),
        keys: Keys::default(),
        bookie_id: "bookie-0".into(),
    };
    let t1 = Instant::now();
    let r = check(b0.storage().clone()).run(false, &|_, _| {}).await.map_err(|e| e.to_string())?;
    let secs = t1.elapsed().as_secs_f64();
    println!(
        "check entries_checked={} entries_missing={} seconds={secs:.2} entries_checked_per_s={:.0}",
        r.entries_checked,
        r.entries_missing,
        r.entries_checked as f64 / secs
    );
    b0.abort().await;
    let config = journal_less_bookie(&tmp.path().join("no-journal").join("bookie-0"));
    let b0 = Bookie::start(config, meta.clone()).await.map_err(|e| e.to_string())?;
    let t2 = Instant::now();
    let r = check(b0.storage().clone()).run(true, &|_, _| {}).await.map_err(|e| e.to_string())?;
    let secs = t2.elapsed().as_secs_f64();
    println!(
        "repair entries_checked={} entries_missing={} entries_copied={} entries_failed={} seconds={secs:.2} entries_checked_per_s={:.0} entries_copied_per_s={:.0} flag_cleared={}",
        r.entries_checked,
        r.entries_missing,
        r.entries_copied,
        r.entries_failed,
        r.entries_checked as f64 / secs,
        r.entries_copied as f64 / secs,
        r.flag_cleared
    );
    b0.shutdown().await.map_err(|e| e.to_string())?;
    for b in bn {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The config of a journal-less bookie `bookie-0` in `dir`.
fn journal_less_bookie(dir: &std::path::Path) -> BookieConfig {
    let mut c = BookieConfig::new(dir, "127.0.0.1:0".parse::<SocketAddr>().expect("addr"));
    c.bookie_id = Some("bookie-0".into());
    c.storage.make_journal_less();
    c
}
