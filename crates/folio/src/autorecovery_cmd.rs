//! `folio autorecovery`: run an auditor candidate and a replication worker on a cluster
//! (every bookie runs one unless `autorecovery.enabled = false`), or print the status:
//! the marks, their age, the bytes left, the auditor and the workers at work.

use std::sync::Arc;
use std::time::Duration;

use folio_repair::autorecovery::{Autorecovery, AutorecoveryConfig};

pub const KEYS_HELP: &str = "\
AUTORECOVERY KEYS (bookie config or `folio autorecovery run --override KEY=VALUE`):
  autorecovery.enabled              bool     default true (run an auditor candidate and a worker)
  autorecovery.auditor              bool     default true (false: a worker only)
  autorecovery.lost_after_ms        integer  default 60000 (a bookie gone this long is lost)
  autorecovery.poll_interval_ms     integer  default 5000
  autorecovery.check_interval_ms    integer  default 86400000 (periodic check; 0 = off)
  autorecovery.check_requests_per_s integer  default 100
  autorecovery.open_ledger_grace_ms integer  default 30000 (then an open ledger is fenced)
  autorecovery.bytes_per_s          integer  default 33554432 (copy rate; 0 = unlimited)
  autorecovery.lease_ttl_ms         integer  default 10000
  autorecovery.absence_window_ms    integer  default 600000 (absences add up within it: a
                                             bookie that keeps coming back is still lost)";

/// Applies one `autorecovery.*` key (the prefix optional); `Ok(false)` if `key` is not one.
pub fn set_key(
    c: &mut AutorecoveryConfig,
    enabled: &mut bool,
    key: &str,
    v: &toml::Value,
) -> Result<bool, String> {
    let Some(k) = key.strip_prefix("autorecovery.") else { return Ok(false) };
    let int = || crate::config_value::non_negative(key, v);
    let boolean = || crate::config_value::true_or_false(key, v);
    let ms = |x: u64| Duration::from_millis(x);
    match k {
        "enabled" => *enabled = boolean()?,
        "auditor" => c.auditor = boolean()?,
        "lost_after_ms" => c.lost_after = ms(int()?),
        "poll_interval_ms" => c.poll_interval = ms(int()?.max(10)),
        "check_interval_ms" => c.check_interval = Some(int()?).filter(|&x| x > 0).map(ms),
        "check_requests_per_s" => c.check_requests_per_s = int()?.clamp(1, 100_000) as u32,
        "open_ledger_grace_ms" => c.open_ledger_grace = ms(int()?),
        "bytes_per_s" => c.bytes_per_s = int()?,
        "absence_window_ms" => {
            c.absence_window = ms(int()?);
            if c.absence_window < c.lost_after {
                return Err(format!("{key} must be at least autorecovery.lost_after_ms"));
            }
        }
        "lease_ttl_ms" => {
            c.lease_ttl = ms(int()?);
            if c.lease_ttl < Duration::from_secs(1) {
                return Err(format!("{key} must be at least 1000"));
            }
        }
        _ => return Err(format!("unknown config key {key:?} (see `folio autorecovery --help`)")),
    }
    Ok(true)
}

/// Settings as `(key, value)` pairs, flattened from TOML.
pub type Flat = Vec<(String, toml::Value)>;

/// Splits the `autorecovery.*` keys off a bookie's settings: the autorecovery config
/// (`None` when `autorecovery.enabled = false`) and the other keys.
pub fn take_keys(
    flat: &[(String, toml::Value)],
) -> Result<(Option<AutorecoveryConfig>, Flat), String> {
    let (mut config, mut enabled, mut rest) = (AutorecoveryConfig::default(), true, Vec::new());
    for (k, v) in flat {
        if !set_key(&mut config, &mut enabled, k, v)? {
            rest.push((k.clone(), v.clone()));
        }
    }
    Ok((enabled.then_some(config), rest))
}

#[derive(Debug, clap::Args)]
#[command(after_help = KEYS_HELP)]
pub struct Args {
    #[command(flatten)]
    cluster: crate::cluster::ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run an auditor candidate and a replication worker until Ctrl-C.
    Run {
        /// The name this process claims work under (default: autorecovery-<pid>).
        #[arg(long)]
        host: Option<String>,
        /// Sets an autorecovery key: `--override lost_after_ms=10000` (repeatable).
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Print the marks (ledgers and fragments to restore), the oldest mark's age, the bytes
    /// left to copy, the auditor, the workers at work, and bookies draining or in
    /// maintenance. Exits 0 whatever it finds.
    Status,
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (meta, keys, client) = args.cluster.connect().await?;
        match args.command {
            Command::Status => {
                let s = folio_repair::autorecovery::status(meta.as_ref(), &keys)
                    .await
                    .map_err(|e| e.to_string())?;
                print_status(&s);
                Ok(())
            }
            Command::Run { host, overrides } => {
                let mut config = AutorecoveryConfig::default();
                let mut enabled = true;
                for o in &overrides {
                    let (k, v) = crate::cluster::parse_override(o)?;
                    let k = if k.starts_with("autorecovery.") {
                        k
                    } else {
                        format!("autorecovery.{k}")
                    };
                    set_key(&mut config, &mut enabled, &k, &v)?;
                }
                let host = host.unwrap_or_else(|| format!("autorecovery-{}", std::process::id()));
                println!("autorecovery {host} running; Ctrl-C to stop");
                let a = Autorecovery::new(meta, keys, client, config, host);
                let (stop, stop_rx) = tokio::sync::watch::channel(false);
                let task = tokio::spawn(a.run(stop_rx));
                tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
                let _ = stop.send(true);
                let _ = task.await;
                Ok(())
            }
        }
    })
}

fn print_status(s: &folio_repair::autorecovery::Status) {
    println!("auditor={}", s.auditor.as_deref().unwrap_or("none"));
    println!("under_replicated_ledgers={}", s.marked_ledgers);
    println!("under_replicated_fragments={}", s.marked_fragments);
    println!("oldest_mark_age_ms={}", s.oldest_mark_age_ms);
    println!("bytes_left={}", s.bytes_left);
    println!("active_workers={}", s.active.len());
    for (ledger, host) in &s.active {
        println!("  ledger {ledger}: {host}");
    }
    println!("draining={}", s.draining.join(","));
    println!("maintenance={}", s.maintenance.join(","));
}

/// Spawns this process's autorecovery (a bookie's, or standalone's) until `stop`.
pub fn spawn(
    meta: Arc<dyn folio_meta::MetadataStore>,
    keys: folio_meta::keys::Keys,
    client: folio_client::LedgerClient,
    config: AutorecoveryConfig,
    host: &str,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(Autorecovery::new(meta, keys, client, config, host).run(stop))
}

/// `folio bookie decommission ID`: asks for the drain, waits with a progress line until no
/// ledger names the bookie, then removes its cookie and registrations.
pub async fn decommission(
    cluster: &crate::cluster::ClusterArgs,
    bookie_id: &str,
    wait: bool,
) -> Result<(), String> {
    use folio_repair::autorecovery::decommission;
    let (meta, keys, _) = cluster.connect().await?;
    decommission::request(meta.as_ref(), &keys, bookie_id).await.map_err(|e| e.to_string())?;
    let s = folio_repair::autorecovery::status(meta.as_ref(), &keys)
        .await
        .map_err(|e| e.to_string())?;
    if s.auditor.is_none() {
        eprintln!("warning: no auditor is running: start a bookie or `folio autorecovery run`");
    }
    println!("bookie {bookie_id}: drain requested; new ledgers avoid it");
    if !wait {
        return Ok(());
    }
    let mut progress: Option<crate::progress::Progress> = None;
    loop {
        let (naming, total) = decommission::references(meta.as_ref(), &keys, bookie_id)
            .await
            .map_err(|e| e.to_string())?;
        let p = progress.get_or_insert_with(|| {
            crate::progress::Progress::new(format!("draining {bookie_id}"), total)
        });
        if naming == 0 {
            p.finish("no ledger names it");
            break;
        }
        let done = p.total().saturating_sub(naming);
        p.set(done, &format!("{naming} of {total} ledgers still name {bookie_id}"));
        tokio::time::sleep(crate::limits::PROGRESS_POLL).await;
    }
    decommission::finish(meta.as_ref(), &keys, bookie_id).await.map_err(|e| e.to_string())?;
    println!(
        "bookie {bookie_id} decommissioned: nothing names it; cookie and registration removed; stop its process"
    );
    Ok(())
}

/// `folio bookie maintenance ID on|off`: while on, the bookie's absence is not a loss.
pub async fn maintenance(
    cluster: &crate::cluster::ClusterArgs,
    bookie_id: &str,
    on: bool,
) -> Result<(), String> {
    let (meta, keys, _) = cluster.connect().await?;
    let key = keys.maintenance(bookie_id);
    if on {
        let v = bytes::Bytes::from_static(b"maintenance");
        meta.put(&key, v, folio_meta::Expect::Any).await.map_err(|e| e.to_string())?;
    } else {
        meta.delete(&key, folio_meta::Expect::Any).await.map_err(|e| e.to_string())?;
    }
    println!("bookie {bookie_id}: maintenance {}", if on { "on" } else { "off" });
    Ok(())
}
