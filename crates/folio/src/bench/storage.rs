//! Storage-engine benchmark.
//!
//! Baseline (`disk`): O_DIRECT appends of `group_bytes_max` (512 KiB, the journal's largest
//! group) + fdatasync each, into a fresh file in the same directory: the disk's own limit for
//! durable appends of that size. Engine: `Storage` with default settings, sync on, adds of
//! 1 KiB, 16 KiB and 256 KiB entries with a bounded number in flight (at most 64 of 256 KiB),
//! striped over 8 ledgers; an add counts when its acknowledgement (after the journal fsync)
//! arrives. It runs in both storage modes (`--mode` picks one), each line prefixed with
//! `mode=`, and prints what the process wrote to the disk per entry byte
//! (`disk_bytes_per_entry_byte`, from `/proc/self/io`) and, at the end,
//! `ratio_single_write_vs_two_write` per entry size.
//!
//! Recycled files (`recycled=true` lines, single-write, 1 KiB and 16 KiB): a bookie whose GC
//! keeps pace hands the journal a deleted data file whenever it needs a new one, so every
//! file it writes is one written before. The run starts with enough such files in the
//! recycle pool (written beforehand, outside the measurement) to last it, and prints
//! `ratio_vs_fresh_files` against the same size's run on fresh files, and
//! `ratio_vs_disk_overwrite` against a second baseline: the same O_DIRECT writes and
//! fdatasyncs over a journal file's worth of blocks written before.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use folio_bookie::fs::{AlignedBuf, FileSystem, OpenOptions, RealFs};
use folio_bookie::{Storage, StorageConfig, StorageMode};
use folio_proto::{Entry, EntryHeader};

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Journal zero-fill preallocation chunk in MiB (0 = plain appends).
    #[arg(long, default_value_t = 0)]
    journal_prealloc_mib: u64,
    /// Adds in flight at once.
    #[arg(long, default_value_t = 512)]
    inflight: usize,
    /// Only this storage mode (`single-write` or `two-write`); both by default.
    #[arg(long)]
    mode: Option<String>,
}

pub fn run(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-")?;
    let secs = if args.run.quick { 4 } else { 20 };
    let duration = Duration::from_secs(secs);
    println!(
        "bench=storage quick={} seconds_per_run={secs} inflight={}",
        args.run.quick, args.inflight
    );
    let disk = disk_baseline(&tmp.path().join("raw"), 512 * 1024, duration, None)?;
    println!(
        "disk_write_bytes=524288 disk_mb_per_s={:.1} disk_commits_per_s={:.0}",
        disk.0, disk.1
    );
    let file_bytes = folio_bookie::JournalConfig::default().file_bytes_max;
    let over = disk_baseline(&tmp.path().join("raw"), 512 * 1024, duration, Some(file_bytes))?;
    println!(
        "disk_write_bytes=524288 disk_overwrite_mb_per_s={:.1} disk_overwrite_commits_per_s={:.0}",
        over.0, over.1
    );
    let mut results = Vec::new();
    for mode in super::storage_modes(args.mode.as_deref())? {
        let m = mode.name();
        let mut per_size = Vec::new();
        for entry_bytes in [1024usize, 16 * 1024, 256 * 1024] {
            let dir = tmp.path().join(format!("engine-{m}-{entry_bytes}"));
            let r = measured_run(&dir, mode, entry_bytes, &args, duration, 0, disk.0)?;
            per_size.push((entry_bytes, r.mb_per_s));
            if entry_bytes == 16 * 1024 {
                catch_up_read(&dir, mode, r.submitted)?;
            }
            if mode == StorageMode::SingleWrite && entry_bytes <= 16 * 1024 {
                // Enough recycled files for half again the fresh run's bytes.
                let files =
                    (r.mb_per_s * MIB * r.secs * 1.5 / file_bytes as f64).ceil() as usize + 1;
                let dir = tmp.path().join(format!("engine-{m}-{entry_bytes}-recycled"));
                let again = measured_run(&dir, mode, entry_bytes, &args, duration, files, over.0)?;
                println!(
                    "mode={m} entry_bytes={entry_bytes} recycled=true files_reused={} ratio_vs_fresh_files={:.2}",
                    again.files_reused,
                    again.mb_per_s / r.mb_per_s.max(1e-9)
                );
                let _ = std::fs::remove_dir_all(&dir); // gigabytes of recycled files
            }
        }
        results.push((mode, per_size));
    }
    super::print_mode_ratios(&results);
    println!("rss_peak_mb={:.0}", super::rss_peak_mb());
    Ok(())
}

/// One engine run with its line: rates, latencies, disk bytes per entry byte (what the
/// process wrote during the run), against the disk (`ratio_vs_disk`; a run on recycled
/// files against the disk overwriting written blocks, `ratio_vs_disk_overwrite`).
fn measured_run(
    dir: &std::path::Path,
    mode: StorageMode,
    entry_bytes: usize,
    args: &Args,
    duration: Duration,
    recycled_files: usize,
    disk_mb_per_s: f64,
) -> Result<EngineResult, String> {
    let (tag, baseline) =
        if recycled_files > 0 { (" recycled=true", "disk_overwrite") } else { ("", "disk") };
    if recycled_files > 0 {
        prefill_recycle_pool(&dir.join("journal"), recycled_files)?;
    }
    let m = mode.name();
    let written0 = super::process_disk_write_bytes();
    let r = engine_run(dir, mode, entry_bytes, args, duration, recycled_files)?;
    let written = super::process_disk_write_bytes()
        .zip(written0)
        .map(|(b, a)| b.saturating_sub(a) as f64 / MIB);
    let per_byte = written
        .map(|w| format!("{:.2}", w / (r.mb_per_s * r.secs)))
        .unwrap_or_else(|| "unknown".into());
    println!(
        "mode={m}{tag} entry_bytes={entry_bytes} adds_per_s={:.0} mb_per_s={:.1} ack_latency_p50_us={} ack_latency_p99_us={} disk_bytes_per_entry_byte={per_byte} ratio_vs_{baseline}={:.2}",
        r.adds_per_s,
        r.mb_per_s,
        r.p50_us,
        r.p99_us,
        r.mb_per_s / disk_mb_per_s
    );
    Ok(r)
}

/// `n` files of the journal's file size in `journal_dir`'s recycle pool, every block written
/// and synced, as GC would have left them.
fn prefill_recycle_pool(journal_dir: &std::path::Path, n: usize) -> Result<(), String> {
    let fs = RealFs;
    fs.create_dir_all(journal_dir)
        .map_err(|e| format!("creating {}: {e}", journal_dir.display()))?;
    let file_bytes = folio_bookie::JournalConfig::default().file_bytes_max;
    let mut chunk = AlignedBuf::with_capacity(4 * 1024 * 1024);
    chunk.extend_from_slice(&vec![0u8; 4 * 1024 * 1024]);
    for i in 0..n {
        let path = journal_dir.join(folio_bookie::journal::recycled_name(i as u64 + 1));
        let file = fs
            .open(&path, OpenOptions { direct: true, ..OpenOptions::CREATE_NEW })
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        let mut at = 0;
        while at < file_bytes {
            file.write_all_at(chunk.as_slice(), at).map_err(|e| format!("prefill: {e}"))?;
            at += chunk.len() as u64;
        }
        file.sync_data().map_err(|e| format!("prefill fdatasync: {e}"))?;
    }
    fs.sync_dir(journal_dir).map_err(|e| format!("syncing {}: {e}", journal_dir.display()))
}

/// Catch-up read of one ledger of the 8 the 16 KiB run striped its adds over (so in
/// single-write mode its entries sit between the others' in every data file): the storage
/// reopened with the page cache dropped when this process may (root), ledger 1 read from
/// its first entry to its last. Prints MB/s, what was read from files per byte served
/// (`read_amplification`), and whether the page cache was dropped (`cold`).
fn catch_up_read(dir: &std::path::Path, mode: StorageMode, submitted: u64) -> Result<(), String> {
    let mut config = StorageConfig::new(dir);
    config.mode = mode;
    let storage = Storage::open_default(config).map_err(|e| e.to_string())?;
    let cold = std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok();
    let n = (submitted / 8) as i64;
    let (start, read0) = (Instant::now(), storage.entry_log_bytes_read());
    let mut served = 0u64;
    let mut latencies = Vec::with_capacity(n.max(0) as usize);
    for entry_id in 0..n {
        let t0 = Instant::now();
        let e = storage.read_entry(1, entry_id).map_err(|e| e.to_string())?;
        latencies.push(t0.elapsed().as_micros() as u64);
        served += e.payload().len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let read = storage.entry_log_bytes_read() - read0;
    latencies.sort_unstable();
    println!(
        "mode={} catch_up_entry_bytes=16384 catch_up_entries={n} cold={cold} catch_up_mb_per_s={:.1} read_latency_p50_us={} read_latency_p99_us={} read_amplification={:.2}",
        mode.name(),
        served as f64 / MIB / secs,
        super::pct(&latencies, 0.5),
        super::pct(&latencies, 0.99),
        read as f64 / served.max(1) as f64
    );
    storage.close().map_err(|e| e.to_string())
}

/// MB/s and commits/s of O_DIRECT writes + fdatasync of `write_bytes` each: appends to a
/// fresh file, or (`overwrite` bytes) round and round over a file written and synced first.
fn disk_baseline(
    path: &std::path::Path,
    write_bytes: usize,
    duration: Duration,
    overwrite: Option<u64>,
) -> Result<(f64, f64), String> {
    let fs = RealFs;
    let file = fs
        .open(path, OpenOptions { direct: true, ..OpenOptions::CREATE_NEW })
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut buf = AlignedBuf::with_capacity(write_bytes);
    buf.extend_from_slice(&vec![0x5a; write_bytes]);
    let wrap = overwrite.map_or(u64::MAX, |n| n / write_bytes as u64 * write_bytes as u64);
    let mut at = 0;
    while at < overwrite.unwrap_or(0) {
        file.write_all_at(buf.as_slice(), at).map_err(|e| format!("baseline prefill: {e}"))?;
        at += write_bytes as u64;
    }
    file.sync_data().map_err(|e| format!("baseline prefill fdatasync: {e}"))?;
    let start = Instant::now();
    let mut offset = 0u64;
    let mut commits = 0u64;
    while start.elapsed() < duration {
        file.write_all_at(buf.as_slice(), offset % wrap)
            .map_err(|e| format!("baseline write: {e}"))?;
        file.sync_data().map_err(|e| format!("baseline fdatasync: {e}"))?;
        offset += write_bytes as u64;
        commits += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(path);
    Ok((offset as f64 / MIB / secs, commits as f64 / secs))
}

struct EngineResult {
    /// How long the run took, closing included (what the disk bytes are counted over).
    secs: f64,
    /// Adds made (striped over ledgers 1 to 8).
    submitted: u64,
    adds_per_s: f64,
    mb_per_s: f64,
    p50_us: u64,
    p99_us: u64,
    /// Journal files that were recycled files.
    files_reused: u64,
}

fn engine_run(
    dir: &std::path::Path,
    mode: StorageMode,
    entry_bytes: usize,
    args: &Args,
    duration: Duration,
    recycled_files: usize,
) -> Result<EngineResult, String> {
    let inflight = if entry_bytes > 64 * 1024 { args.inflight.min(64) } else { args.inflight };
    let mut config = StorageConfig::new(dir);
    config.mode = mode;
    config.journal.n_files_recycled_max = config.journal.n_files_recycled_max.max(recycled_files);
    config.journal.prealloc_bytes = args.journal_prealloc_mib * 1024 * 1024;
    let storage = Arc::new(Storage::open_default(config).map_err(|e| e.to_string())?);
    let payload = vec![0xa5u8; entry_bytes - folio_proto::ENTRY_HEADER_BYTES];
    let key = [1u8; 20];
    let (token_tx, token_rx) = mpsc::sync_channel::<Result<(), String>>(inflight);
    for _ in 0..inflight {
        token_tx.send(Ok(())).expect("fresh channel");
    }
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
    let mut next_entry = [0i64; 8];
    let start = Instant::now();
    let mut submitted = 0u64;
    while start.elapsed() < duration {
        token_rx.recv().map_err(|e| e.to_string())??;
        let ledger = (submitted % 8) as usize;
        let entry_id = next_entry[ledger];
        next_entry[ledger] += 1;
        let h = EntryHeader {
            ledger_id: ledger as u64 + 1,
            entry_id,
            last_add_confirmed: entry_id - 1,
            length: 0,
        };
        let e = Entry::encode(h, &payload);
        let tx = token_tx.clone();
        let lat = latencies.clone();
        let t0 = Instant::now();
        storage
            .add_entry(
                e.into_bytes(),
                &key,
                false,
                Box::new(move |r| {
                    lat.lock().expect("latency lock").push(t0.elapsed().as_micros() as u64);
                    let _ = tx.send(r.map_err(|e| e.to_string()));
                }),
            )
            .map_err(|e| e.to_string())?;
        submitted += 1;
    }
    for _ in 0..inflight {
        token_rx.recv().map_err(|e| e.to_string())??;
    }
    let secs = start.elapsed().as_secs_f64();
    let mut lat = std::mem::take(&mut *latencies.lock().expect("latency lock"));
    lat.sort_unstable();
    let mut result = EngineResult {
        secs,
        submitted,
        adds_per_s: submitted as f64 / secs,
        mb_per_s: submitted as f64 * entry_bytes as f64 / MIB / secs,
        p50_us: super::pct(&lat, 0.5),
        p99_us: super::pct(&lat, 0.99),
        files_reused: storage.journal_recycled().1,
    };
    match Arc::try_unwrap(storage) {
        Ok(s) => s.close().map_err(|e| e.to_string())?,
        Err(_) => return Err("storage still shared after the run".into()),
    }
    // The bytes a close still writes (the last flush) belong to the run.
    result.secs = start.elapsed().as_secs_f64();
    Ok(result)
}
