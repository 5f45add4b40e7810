//! `folio topics …`: the Kafka topics of a cluster and the deletions in progress, read from
//! and written to its metadata store directly (the same records and transactions as the
//! brokers' CreateTopics and DeleteTopics; a running controller broker deletes the data).

use folio_broker::TopicRecord;
use folio_log::records::LogRecord;
use folio_meta::list_all;
use folio_meta::records::Record;

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
    /// Every topic (name, id, partitions, replication, config overrides) and every
    /// deletion in progress (partitions whose logs are not in the trash yet).
    List,
    /// One topic: its partitions' logs (ledgers, bytes, offsets) and its configs.
    Describe { name: String },
    /// Creates a topic (as Kafka's CreateTopics does: a new topic id; partitions' logs are
    /// created by the broker that serves them on first use).
    Create {
        name: String,
        /// Partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Copies of each batch (1..=the bookies registered); default: min(3, bookies).
        #[arg(long)]
        replication: Option<u16>,
        /// A topic config override, `key=value` (repeatable), e.g. `retention.ms=3600000`.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Deletes topics: their names are free at once (one metadata transaction, split only
    /// where the store's transaction limit needs it), and the controller broker deletes their
    /// data through the trash (watch it with `folio topics list` or `GET /admin/deletions`
    /// on a broker's HTTP port).
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
        /// Wait until the running controller broker has deleted the topics' data (every
        /// ledger out of the trash), showing progress; fail after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
    },
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (meta, keys, client) = args.cluster.connect().await?;
        let env = folio_log::LogEnv {
            meta: meta.clone(),
            client,
            keys: keys.clone(),
            clock: std::sync::Arc::new(folio_log::WallClock),
            owner: "folio-topics".into(),
        };
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
                let deletions = folio_broker::deletion::progress(&env).await.map_err(|e| e.to_string())?;
                if deletions.is_empty() {
                    println!("no deletions in progress");
                }
                for d in deletions {
                    let states: Vec<String> =
                        d.partitions.iter().map(|(p, s)| format!("{p}:{}", s.name())).collect();
                    println!(
                        "deleting {} (id {}): {} partitions not yet in the trash, {} ledgers in the trash, {} bytes not reclaimed{}; partitions {}",
                        if d.name.is_empty() { "(marker done)" } else { &d.name },
                        d.id.simple(),
                        d.partitions_left(),
                        d.ledgers_in_trash,
                        d.bytes_not_reclaimed,
                        if d.marker { "" } else { " (waiting for the trash deleter)" },
                        states.join(" ")
                    );
                }
            }
            Command::Create { name, partitions, replication, configs } => {
                let bookies = list_all(meta.as_ref(), &keys.bookies_writable())
                    .await
                    .map_err(|e| e.to_string())?
                    .len()
                    + list_all(meta.as_ref(), &keys.bookies_readonly())
                        .await
                        .map_err(|e| e.to_string())?
                        .len();
                let replication = replication.unwrap_or_else(|| bookies.clamp(1, 3) as u16);
                if replication == 0 || usize::from(replication) > bookies.max(1) {
                    return Err(format!(
                        "--replication must be 1..={} (the bookies registered), not {replication}",
                        bookies.max(1)
                    ));
                }
                let mut pairs = Vec::new();
                for c in &configs {
                    let (k, v) = c
                        .split_once('=')
                        .ok_or_else(|| format!("--config {c:?}: expected key=value"))?;
                    pairs.push((k.trim(), v));
                }
                let configs = folio_broker::topics::validate_configs(pairs)?;
                let topics = folio_broker::topics::Topics::new(meta.clone(), keys.clone());
                let new = folio_broker::topics::NewTopic {
                    partitions: i32::try_from(partitions).unwrap_or(i32::MAX),
                    replication: replication as i16,
                    replication_max: replication,
                    configs,
                    now_ms: env.now_ms(),
                };
                // CreateTopics' own checks (name, partitions) and write.
                let t = topics
                    .create_topic(&name, new, folio_broker::topics::IfExists::Fail, false)
                    .await
                    .map_err(|e| e.to_string())?;
                println!(
                    "created topic {name} id {} partitions {partitions} replication {replication}",
                    t.record.id.simple()
                );
            }
            Command::Delete { names, wait } => delete(&env, &names, wait).await?,
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

/// Waits until no deletion of `ids` is in progress (their data deleted), showing the bytes
/// and partitions left; an error after `timeout`.
async fn wait_deleted(
    env: &folio_log::LogEnv,
    ids: &[uuid::Uuid],
    timeout: std::time::Duration,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let mut progress: Option<crate::progress::Progress> = None;
    loop {
        let all = folio_broker::deletion::progress(env).await.map_err(|e| e.to_string())?;
        let left: Vec<_> = all.iter().filter(|d| ids.contains(&d.id)).collect();
        let bytes: u64 = left.iter().map(|d| d.bytes_not_reclaimed).sum();
        let partitions: usize = left.iter().map(|d| d.partitions_left()).sum();
        let ledgers: u64 = left.iter().map(|d| d.ledgers_in_trash).sum();
        let p = progress.get_or_insert_with(|| {
            crate::progress::Progress::new("deleting the topics' data", bytes)
        });
        if left.is_empty() {
            p.finish(&format!("done in {:.1} s", started.elapsed().as_secs_f64()));
            return Ok(());
        }
        let detail = format!(
            "{bytes} bytes, {partitions} partitions not yet in the trash, {ledgers} ledgers in it"
        );
        p.set(p_total(p, bytes), &detail);
        if started.elapsed() >= timeout {
            p.finish("still deleting");
            return Err(format!(
                "the topics' data is not deleted after {} s ({detail}); is a broker running (its controller deletes it)?",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(crate::limits::PROGRESS_POLL).await;
    }
}

/// Units done of a progress whose total was the bytes left at the start.
fn p_total(p: &crate::progress::Progress, bytes_left: u64) -> u64 {
    p.total().saturating_sub(bytes_left)
}

/// Deletes `names` as DeleteTopics does (every name must exist, or nothing is deleted);
/// with `wait`, waits up to that many seconds for their data to be deleted.
async fn delete(
    env: &folio_log::LogEnv,
    names: &[String],
    wait: Option<u64>,
) -> Result<(), String> {
    let (meta, keys) = (&env.meta, &env.keys);
    let topics = folio_broker::topics::Topics::new(meta.clone(), keys.clone());
    let mut targets = Vec::new();
    for name in names {
        match topics.load(name).await.map_err(|e| e.to_string())? {
            Some(t) => targets.push(t),
            None => return Err(format!("no topic {name} (nothing deleted)")),
        }
    }
    folio_broker::deletion::unbind_topics(meta.as_ref(), keys, &targets, env.now_ms())
        .await
        .map_err(|e| format!("deleting: {e} (retry)"))?;
    for t in &targets {
        println!(
            "deleted topic {} (id {}); the controller broker deletes its {} partitions' data",
            t.name,
            t.record.id.simple(),
            t.record.partitions
        );
    }
    if let Some(secs) = wait {
        let ids: Vec<uuid::Uuid> = targets.iter().map(|t| t.record.id).collect();
        wait_deleted(env, &ids, std::time::Duration::from_secs(secs)).await?;
    }
    Ok(())
}
