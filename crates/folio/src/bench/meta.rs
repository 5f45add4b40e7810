//! Metadata-store benchmark: compare-and-set updates per second and watch latency, for the
//! embedded backend and (built with `--features etcd`, given `--etcd`) the etcd backend.
//!
//! Baselines, measured in the same run: for embedded, a raw synced fjall write of the same
//! size (`ratio_vs_raw_kv`); for etcd, a plain unconditional put (`ratio_vs_etcd_put`).
//! CAS: `records::update` on one key (get, then put expecting the version read), sequential.
//! Watch latency: from just before a put to the moment a watcher receives its event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_meta::records::{Record, Update, update};
use folio_meta::{Expect, MetaError, MetadataStore};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// etcd endpoints (host:port, comma-separated) to measure too; needs `--features etcd`.
    #[arg(long)]
    etcd: Option<String>,
}

struct Counter(u64);

impl Record for Counter {
    fn encode(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn decode(key: &str, b: &[u8]) -> Result<Self, MetaError> {
        let a: [u8; 8] = b
            .try_into()
            .map_err(|_| MetaError::Corrupt { key: key.into(), detail: "len".into() })?;
        Ok(Counter(u64::from_le_bytes(a)))
    }
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    let secs = if args.run.quick { 2 } else { 10 };
    let d = Duration::from_secs(secs);
    println!("bench=meta quick={} seconds_per_run={secs}", args.run.quick);
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-meta-")?;
    let raw = raw_kv_commits_per_s(&tmp.path().join("raw"), d)?;
    println!("backend=raw_kv commits_per_s={raw:.0}");
    let embedded = Arc::new(
        folio_meta::embedded::EmbeddedStore::open(&tmp.path().join("embedded"))
            .map_err(|e| e.to_string())?,
    );
    let r = measure(embedded, "bench", d).await?;
    println!(
        "backend=embedded cas_updates_per_s={:.0} put_per_s={:.0} watch_latency_p50_us={} watch_latency_p99_us={} ratio_vs_raw_kv={:.2}",
        r.cas_per_s,
        r.put_per_s,
        r.watch_p50_us,
        r.watch_p99_us,
        r.cas_per_s / raw
    );
    if let Some(endpoints) = args.etcd {
        etcd(endpoints, d).await?;
    }
    Ok(())
}

#[cfg(feature = "etcd")]
async fn etcd(endpoints: String, d: Duration) -> Result<(), String> {
    let eps: Vec<String> = endpoints.split(',').map(str::to_string).collect();
    let store =
        Arc::new(folio_meta::etcd::EtcdStore::connect(&eps).await.map_err(|e| e.to_string())?);
    let root = format!("folio-bench-{:x}", rand::random::<u64>());
    let r = measure(store, &root, d).await?;
    println!(
        "backend=etcd cas_updates_per_s={:.0} put_per_s={:.0} watch_latency_p50_us={} watch_latency_p99_us={} ratio_vs_etcd_put={:.2}",
        r.cas_per_s,
        r.put_per_s,
        r.watch_p50_us,
        r.watch_p99_us,
        r.cas_per_s / r.put_per_s
    );
    Ok(())
}

#[cfg(not(feature = "etcd"))]
async fn etcd(_endpoints: String, _d: Duration) -> Result<(), String> {
    Err("this folio was built without etcd support: rebuild with `--features etcd`".into())
}

/// Synced single-key fjall writes: the embedded backend's engine at its own limit.
fn raw_kv_commits_per_s(dir: &std::path::Path, d: Duration) -> Result<f64, String> {
    let db = fjall::Database::builder(dir).open().map_err(|e| e.to_string())?;
    let ks =
        db.keyspace("raw", fjall::KeyspaceCreateOptions::default).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        let mut b = db.batch().durability(Some(fjall::PersistMode::SyncData));
        b.insert(&ks, "k", n.to_le_bytes());
        b.commit().map_err(|e| e.to_string())?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

struct MetaResult {
    cas_per_s: f64,
    put_per_s: f64,
    watch_p50_us: u64,
    watch_p99_us: u64,
}

async fn measure(
    store: Arc<dyn MetadataStore>,
    root: &str,
    d: Duration,
) -> Result<MetaResult, String> {
    let e = |e: MetaError| e.to_string();
    let key = format!("{root}/cas");
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        update::<Counter>(store.as_ref(), &key, |c| {
            Ok(Update::Write(Counter(c.map_or(0, |c| c.0) + 1)))
        })
        .await
        .map_err(e)?;
        n += 1;
    }
    let cas_per_s = n as f64 / start.elapsed().as_secs_f64();
    let key = format!("{root}/put");
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < d {
        store.put(&key, Bytes::copy_from_slice(&n.to_le_bytes()), Expect::Any).await.map_err(e)?;
        n += 1;
    }
    let put_per_s = n as f64 / start.elapsed().as_secs_f64();
    let prefix = format!("{root}/watched/");
    let mut watch = store.watch(&prefix, 0).await.map_err(e)?;
    let mut latencies = Vec::new();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < d {
        let t0 = Instant::now();
        store
            .put(&format!("{prefix}{i}"), Bytes::from_static(b"v"), Expect::Any)
            .await
            .map_err(e)?;
        let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .map_err(|_| "no watch event within 10 s".to_string())?
            .ok_or("watch ended")?
            .map_err(e)?;
        if ev.key != format!("{prefix}{i}") {
            return Err(format!("watch delivered {} while waiting for {prefix}{i}", ev.key));
        }
        latencies.push(t0.elapsed().as_micros() as u64);
        i += 1;
    }
    latencies.sort_unstable();
    Ok(MetaResult {
        cas_per_s,
        put_per_s,
        watch_p50_us: super::pct(&latencies, 0.5),
        watch_p99_us: super::pct(&latencies, 0.99),
    })
}
