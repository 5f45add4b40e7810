//! `folio audit`: which ledgers and bytes of a cluster belong to nobody (see
//! `folio_broker::audit` for the classes).

use std::time::Duration;

use crate::cluster::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Orphans, and data awaiting a bookie's GC, younger than this many seconds do not
    /// fail the audit (nor get repaired): something may be creating or deleting them right
    /// now, and a bookie's GC runs every minute by default.
    #[arg(long, default_value_t = 600)]
    grace_s: u64,
    /// Move orphans older than the grace period into the trash (the running deleter then
    /// deletes them, checking their owner tags), and delete stray logs through the trash.
    #[arg(long)]
    repair: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    crate::log_cmd::runtime()?.block_on(async {
        let env = crate::log_cmd::env_as(&args.cluster, "folio-audit").await?;
        let audit = folio_broker::audit::run(&env).await.map_err(|e| e.to_string())?;
        if args.json {
            print!("{}", audit.json());
        } else {
            print!("{}", audit.table());
        }
        let grace = Duration::from_secs(args.grace_s);
        if args.repair {
            for line in folio_broker::audit::repair(&env, &audit, grace).await {
                eprintln!("repair: {line}");
            }
        }
        let old = audit.leaks_older_than(grace);
        if old > 0 {
            let repair = if args.repair {
                "repair moved orphan metadata and stray logs to the trash and deleted orphan offset indexes"
            } else {
                "--repair moves orphan metadata and stray logs to the trash and deletes orphan offset indexes"
            };
            return Err(format!(
                "{old} orphans (or data a bookie's GC should have dropped) older than {} s (orphan data of unknown age always counts); {repair}",
                args.grace_s
            ));
        }
        Ok(())
    })
}
