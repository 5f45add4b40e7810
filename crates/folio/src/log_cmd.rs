//! `folio log …` and `folio trash …`: look at managed logs and the trash in a cluster's
//! metadata store, and say why each ledger is still there.

use std::sync::Arc;

use crate::cluster::ClusterArgs;
use folio_log::records::{CursorRecord, LedgerInfo, LogRecord, LogRecordState, TrashRecord};
use folio_log::{LogEnv, Trash, TrashConfig, WallClock};
use folio_meta::records::Record;
use folio_meta::{Clock, list_all};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LogCommand {
    /// List managed logs: name, state, ledgers, bytes.
    List,
    /// Show a log's chain, cursors, retention and trashed ledgers, and why each ledger is
    /// still there.
    Inspect { name: String },
    /// Delete a log: its ledgers and cursors go to the trash (the deleter removes them).
    Delete {
        name: String,
        #[arg(long, default_value = "admin")]
        reason: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct TrashArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: TrashCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TrashCommand {
    /// Every trashed ledger: its log, why and when it was trashed, and why it is still
    /// there (waiting for the deleter, or failing and backing off).
    List,
    /// Run one deleter pass now and print what it did.
    Run,
}

/// The managed-log environment of a CLI command on `cluster`, owning as `owner`.
pub(crate) async fn env_as(cluster: &ClusterArgs, owner: &str) -> Result<LogEnv, String> {
    let (meta, keys, client) = cluster.connect().await?;
    Ok(LogEnv { meta, client, keys, clock: Arc::new(WallClock), owner: owner.into() })
}

async fn env(cluster: &ClusterArgs) -> Result<LogEnv, String> {
    env_as(cluster, "folio-cli").await
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())
}

/// "3d 4h", "5m 2s", "800ms".
fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

pub fn run(args: Args) -> Result<(), String> {
    runtime()?.block_on(async {
        let env = env(&args.cluster).await?;
        let e = |e: folio_meta::MetaError| e.to_string();
        match args.command {
            LogCommand::List => {
                for v in list_all(env.meta.as_ref(), &env.keys.logs()).await.map_err(e)? {
                    let name = env.keys.parse_log(&v.key).unwrap_or(&v.key);
                    match LogRecord::decode(&v.key, &v.value) {
                        Ok(r) => println!(
                            "{name}\t{}\t{} ledgers\t{} bytes\tstart {}",
                            state(&r),
                            r.ledgers.len(),
                            r.total_bytes(),
                            r.log_start_offset()
                        ),
                        Err(err) => println!("{name}\tcorrupt: {err}"),
                    }
                }
            }
            LogCommand::Inspect { name } => inspect(&env, &name).await?,
            LogCommand::Delete { name, reason } => {
                folio_log::trash::delete_log(&env, &name, &reason)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("log {name}: deleted; its ledgers are in the trash");
            }
        }
        Ok(())
    })
}

fn state(r: &LogRecord) -> &'static str {
    match r.state {
        LogRecordState::Active => "active",
        LogRecordState::Deleting => "deleting",
    }
}

fn prop(r: &LogRecord, k: &str) -> i64 {
    r.properties.get(k).and_then(|v| v.parse().ok()).unwrap_or(-1)
}

async fn inspect(env: &LogEnv, name: &str) -> Result<(), String> {
    let key = env.keys.log(name);
    let v = env
        .meta
        .get(&key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no log named {name:?} (see `folio log list`)"))?;
    let r = LogRecord::decode(&key, &v.value).map_err(|e| e.to_string())?;
    let now = WallClock.now_ms();
    let (ret_ms, ret_bytes) = (prop(&r, "retention.ms"), prop(&r, "retention.bytes"));
    let require_consumed =
        r.properties.get("retention.require_consumed").is_some_and(|v| v == "true");
    println!("log {name}");
    println!("  state: {}, owner: {}", state(&r), r.owner);
    println!(
        "  start offset: {}, ledgers: {}, bytes: {}",
        r.log_start_offset(),
        r.ledgers.len(),
        r.total_bytes()
    );
    println!(
        "  retention: retention.ms={ret_ms} retention.bytes={ret_bytes} require_consumed={require_consumed}"
    );
    let prefix = env.keys.cursors(name);
    let mut cursors = Vec::new();
    for c in list_all(env.meta.as_ref(), &prefix).await.map_err(|e| e.to_string())? {
        let rec = CursorRecord::decode(&c.key, &c.value).map_err(|e| e.to_string())?;
        cursors.push((c.key[prefix.len()..].to_string(), rec));
    }
    println!("  cursors ({}):", cursors.len());
    for (n, c) in &cursors {
        println!(
            "    {n}\toffset {}\tupdated {} ago",
            c.offset,
            age(now.saturating_sub(c.updated_ms))
        );
    }
    let slowest = cursors.iter().min_by_key(|(_, c)| c.offset);
    println!("  ledgers ({}):", r.ledgers.len());
    let total = r.total_bytes();
    let mut removed = 0u64;
    let mut prefix_kept: Option<u64> = None;
    for (i, l) in r.ledgers.iter().enumerate() {
        let why = if !l.is_closed() {
            "open: the current ledger (its size is known to the owner only)".to_string()
        } else if i + 1 == r.ledgers.len() {
            "the last ledger: the owner adds the next one".to_string()
        } else if let Some(k) = prefix_kept {
            format!("kept because older ledger {k} is kept (trimming removes a prefix)")
        } else if let Some((cn, c)) =
            slowest.filter(|(_, c)| require_consumed && c.offset < l.end_offset())
        {
            format!("not yet consumed by cursor {cn} (at offset {})", c.offset)
        } else if l.end_offset() <= r.start_offset {
            "below the start offset: goes at the next trim pass".to_string()
        } else {
            kept_by_retention(l, now, ret_ms, ret_bytes, total - removed)
        };
        let goes = why.starts_with("goes") || why.starts_with("below");
        if l.is_closed() && i + 1 < r.ledgers.len() && prefix_kept.is_none() {
            if goes {
                removed += l.bytes;
            } else {
                prefix_kept = Some(l.ledger_id);
            }
        }
        let closed = if l.is_closed() {
            format!("closed {} ago", age(now.saturating_sub(l.close_ms)))
        } else {
            "open".into()
        };
        println!(
            "    ledger {}\toffsets [{}, {})\t{} entries\t{} bytes\t{closed}\t{why}",
            l.ledger_id,
            l.first_offset,
            if l.is_closed() { l.end_offset().to_string() } else { "…".into() },
            l.entries,
            l.bytes
        );
    }
    let trash: Vec<TrashRecord> = folio_log::trash::list(env)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|t| t.log == name)
        .collect();
    println!("  in the trash ({}):", trash.len());
    for t in &trash {
        println!("    {}", trash_line(t, now));
    }
    Ok(())
}

fn kept_by_retention(l: &LedgerInfo, now: u64, ret_ms: i64, ret_bytes: i64, total: u64) -> String {
    let newest = if l.max_publish_ms >= 0 { l.max_publish_ms } else { l.close_ms as i64 };
    let old = (now as i64).saturating_sub(newest);
    let by_time = ret_ms >= 0 && old > ret_ms;
    let by_size = ret_bytes >= 0 && total.saturating_sub(l.bytes) >= ret_bytes as u64;
    if by_time || by_size {
        return "goes at the next trim pass (retention releases it)".into();
    }
    let time = if ret_ms < 0 {
        "retention.ms=-1 keeps it".to_string()
    } else {
        format!(
            "newest record {} old, expires in {}",
            age(old.max(0) as u64),
            age((ret_ms - old).max(0) as u64)
        )
    };
    let size = if ret_bytes < 0 {
        "no size limit".to_string()
    } else {
        format!(
            "the rest would hold {} bytes < retention.bytes={ret_bytes}",
            total.saturating_sub(l.bytes)
        )
    };
    format!("retained: {time}; {size}")
}

fn trash_line(t: &TrashRecord, now: u64) -> String {
    let state = if t.last_error.is_empty() {
        "waiting for the deleter".to_string()
    } else if t.next_attempt_ms > now {
        format!("failing, next attempt in {}: {}", age(t.next_attempt_ms - now), t.last_error)
    } else {
        format!("failing, retry due: {}", t.last_error)
    };
    format!(
        "ledger {}\tlog {}\ttrashed {} ago for {}\tattempts {}\t{state}",
        t.ledger_id,
        t.log,
        age(now.saturating_sub(t.time_ms)),
        t.reason,
        t.attempts
    )
}

pub fn run_trash(args: TrashArgs) -> Result<(), String> {
    runtime()?.block_on(async {
        let env = env(&args.cluster).await?;
        let trash = Trash::new(env.clone(), TrashConfig::default());
        let e = |e: folio_log::LogError| e.to_string();
        match args.command {
            TrashCommand::List => {
                let now = WallClock.now_ms();
                let all = trash.list().await.map_err(e)?;
                let status = trash.status().await.map_err(e)?;
                println!(
                    "trash: {} ledgers, oldest {} old, {} failing",
                    status.ledgers,
                    age(status.oldest_age_ms),
                    status.failing
                );
                for t in &all {
                    println!("{}", trash_line(t, now));
                }
            }
            TrashCommand::Run => {
                let pass = run_with_progress(&trash).await.map_err(e)?;
                println!(
                    "deleted={} failed={} waiting={} logs_resumed={}",
                    pass.deleted, pass.failed, pass.waiting, pass.logs_resumed
                );
            }
        }
        Ok(())
    })
}

/// One deleter pass, with the trash's size shown as it goes down.
async fn run_with_progress(trash: &Trash) -> folio_log::Result<folio_log::TrashPass> {
    let at_start = trash.status().await?.ledgers;
    let mut progress = crate::progress::Progress::new("trash pass", at_start);
    let pass = trash.run_once();
    tokio::pin!(pass);
    loop {
        tokio::select! {
            done = &mut pass => {
                let outcome = match &done {
                    Ok(p) => format!("{} ledgers deleted, {} failed", p.deleted, p.failed),
                    Err(e) => format!("failed: {e}"),
                };
                progress.finish(&outcome);
                return done;
            }
            () = tokio::time::sleep(crate::limits::PROGRESS_POLL) => {
                if let Ok(s) = trash.status().await {
                    let detail = format!("{} ledgers left in the trash", s.ledgers);
                    progress.set(at_start.saturating_sub(s.ledgers), &detail);
                }
            }
        }
    }
}
