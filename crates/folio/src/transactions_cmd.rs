//! `folio transactions …`: the transactional ids of a cluster and their transactions, read
//! from its metadata store directly (the records the coordinators keep), and the abort of a
//! hanging one, as Kafka's `kafka-transactions.sh` does: the abort goes through the same
//! compare-and-set state machine as a coordinator's, at the next epoch (fencing the
//! producer), and the brokers write its markers.

use folio_broker::domain::txn::{TxnCoordinator, TxnState};

use crate::cluster::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Every transactional id: its producer id and epoch, its transaction's state, how long
    /// it has been open and its timeout, and the partitions and groups it holds.
    List {
        /// Only transactions open at least this long (seconds): hanging ones.
        #[arg(long)]
        open_for_s: Option<u64>,
    },
    /// Aborts a transactional id's open transaction at the next epoch: its producer is
    /// fenced (its next request fails) and the brokers write the abort markers, releasing
    /// what read_committed consumers wait for.
    Abort { transactional_id: String },
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (meta, keys, _client) = args.cluster.connect().await?;
        let txns = TxnCoordinator::new(meta, keys);
        let now = folio_meta::Clock::now_ms(&folio_log::WallClock);
        match args.command {
            Command::List { open_for_s } => {
                let all = txns.all().await.map_err(|e| e.to_string())?;
                println!(
                    "{:<40} {:>12} {:>6} {:<15} {:>10} {:>10}  partitions/groups",
                    "transactional id", "producer id", "epoch", "state", "open s", "timeout s"
                );
                for (id, r) in all {
                    let open_s = (r.state == TxnState::Ongoing)
                        .then(|| now.saturating_sub(r.started_ms) / 1000);
                    if open_for_s.is_some_and(|min| open_s.is_none_or(|s| s < min)) {
                        continue;
                    }
                    let parts: Vec<String> =
                        r.partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
                    println!(
                        "{:<40} {:>12} {:>6} {:<15} {:>10} {:>10}  {} {}",
                        id,
                        r.producer_id,
                        r.epoch,
                        r.state.name(),
                        open_s.map_or("-".to_string(), |s| s.to_string()),
                        r.timeout_ms / 1000,
                        parts.join(","),
                        r.groups.join(",")
                    );
                }
            }
            Command::Abort { transactional_id } => {
                let id = transactional_id.as_str();
                let aborted = txns.abort_open(id, now, false).await.map_err(|r| r.why)?;
                if !aborted {
                    let state = txns.load(id).await.map_err(|e| e.to_string())?;
                    return Err(match state {
                        None => format!("no transactional id {id}"),
                        Some((r, _)) => {
                            format!("{id} has no open transaction (it is {})", r.state.name())
                        }
                    });
                }
                println!(
                    "{id}: aborting (PrepareAbort at the next epoch); brokers write the markers"
                );
            }
        }
        Ok(())
    })
}
