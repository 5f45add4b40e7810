//! `folio topics …`: the Kafka topics of a cluster and the deletions in progress, read from
//! its metadata store (create and delete go through a broker's Kafka API).

use folio_broker::TopicRecord;
use folio_broker::deletion::DeletionMarker;
use folio_log::records::LogRecord;
use folio_meta::list_all;
use folio_meta::records::Record;

use crate::ledger_cmd::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Every topic (name, id, partitions, replication, config overrides) and every
    /// deletion in progress (partitions whose logs are not in the trash yet).
    List,
    /// One topic: its partitions' logs (ledgers, bytes, offsets) and its configs.
    Describe { name: String },
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (meta, keys, _) = args.cluster.connect().await?;
        match args.command {
            Command::List => {
                let prefix = keys.topics();
                let topics = list_all(meta.as_ref(), &prefix).await.map_err(|e| e.to_string())?;
                println!("{:<40} {:<34} {:>10} {:>11}  configs", "topic", "id", "partitions", "replication");
                for v in &topics {
                    let t = TopicRecord::decode(&v.key, &v.value).map_err(|e| e.to_string())?;
                    println!(
                        "{:<40} {:<34} {:>10} {:>11}  {:?}",
                        &v.key[prefix.len()..],
                        t.id.simple().to_string(),
                        t.partitions,
                        t.replication,
                        t.configs
                    );
                }
                let mprefix = keys.topic_deletions();
                let markers = list_all(meta.as_ref(), &mprefix).await.map_err(|e| e.to_string())?;
                if markers.is_empty() {
                    println!("no deletions in progress");
                }
                for v in markers {
                    let id = &v.key[mprefix.len()..];
                    let topic_id = uuid::Uuid::try_parse(id).map_err(|e| format!("{}: {e}", v.key))?;
                    let m = DeletionMarker::decode(&v.key, &v.value).map_err(|e| e.to_string())?;
                    let mut left = 0;
                    for p in 0..m.partitions {
                        let log = folio_broker::topics::log_name(topic_id, p as i32);
                        if meta.get(&keys.log(&log)).await.map_err(|e| e.to_string())?.is_some() {
                            left += 1;
                        }
                    }
                    println!(
                        "deleting {} (id {id}): {left} of {} partitions not yet in the trash, requested at {} ms",
                        m.name, m.partitions, m.requested_ms
                    );
                }
            }
            Command::Describe { name } => {
                let key = keys.topic(&name);
                let v = meta
                    .get(&key)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no topic {name}"))?;
                let t = TopicRecord::decode(&key, &v.value).map_err(|e| e.to_string())?;
                println!(
                    "topic {name} id {} partitions {} replication {} configs {:?}",
                    t.id.simple(),
                    t.partitions,
                    t.replication,
                    t.configs
                );
                for p in 0..t.partitions {
                    let log = folio_broker::topics::log_name(t.id, p as i32);
                    let lkey = keys.log(&log);
                    match meta.get(&lkey).await.map_err(|e| e.to_string())? {
                        None => println!("  partition {p}: no data yet (log {log} not created)"),
                        Some(lv) => {
                            let r = LogRecord::decode(&lkey, &lv.value).map_err(|e| e.to_string())?;
                            let bytes: u64 = r.ledgers.iter().map(|l| l.bytes).sum();
                            println!(
                                "  partition {p}: log {log} owner {} start offset {} ledgers {}, {bytes} bytes in closed ledgers",
                                r.owner,
                                r.log_start_offset(),
                                r.ledgers.len()
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    })
}
