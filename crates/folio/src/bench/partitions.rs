//! Many-partitions benchmark: what a partition costs a broker, at 10 000 of them
//! (2 000 with `--quick`, 100 000 with `--full`, or `--partitions N`). One topic holds at
//! most `PARTITIONS_MAX` (10 000): more are spread over as many topics as they need
//! (`partitions-0`, `partitions-1`, ...), each full but the last.
//!
//! A broker on `--replication` in-process bookies (3) and embedded metadata, with
//! `partitions_open_max` raised to hold them all. Over the Kafka wire (Folio's own test
//! client, so the client costs little):
//! - `create_s`: one CreateTopics of the topics, N partitions in all;
//! - `metadata_p50_ms`/`_p99_ms` and `metadata_answer_bytes`: Metadata for those topics;
//! - `first_produce_s`: one 100-byte record to every partition (acks=all; 100 partitions per
//!   Produce, `CONNECTIONS` connections): each partition's log and first ledger are created
//!   here, so `open_ms_per_partition_amortized` is the cost of a new partition;
//! - `produce_round_s`: the same again, on open partitions (the low steady rate);
//! - `rss_per_partition_kib`: the process's resident memory (broker and bookies) after the
//!   first round against before, per partition;
//! - `fetch_session_full_ms`: a Fetch of every partition at its end, opening a fetch
//!   session (KIP-227), then `fetch_session_incremental_ms`: the next Fetch of that session,
//!   nothing changed (a caught-up consumer's poll);
//! - `idle_cpu_cores`: the process's CPU per second over `IDLE_MEASURED` with every
//!   partition open and nothing to do (their logs' timers);
//! - `meta_store_keys` and `meta_store_bytes` (keys and values), per partition, and the
//!   embedded store's files (`meta_store_files_bytes`; its logs are preallocated);
//! - after a clean restart of the broker: `reopen_one_ms` (a Fetch of one partition, which
//!   opens it: fences and recovers its ledger) and `reopen_all_s` (a Fetch of every
//!   partition, which opens all the others), with `reopen_ms_per_partition`.
//!
//! Every answer's error codes are checked: a partition that failed fails the bench.

use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_broker::config::ListenerConfig;
use folio_broker::{Broker, BrokerConfig};
use folio_kafka_client::{KafkaConn, create_topics_request};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::pct;

const TOPIC: &str = "partitions";
/// Partitions per Produce request.
const PARTITIONS_PER_PRODUCE: usize = 100;
/// Connections producing at once.
const CONNECTIONS: usize = 4;
/// Metadata requests timed.
const METADATA_CALLS: usize = 20;
/// How long the process's CPU is measured with every partition open and idle.
const IDLE_MEASURED: Duration = Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// 100 000 partitions (over ten topics).
    #[arg(long)]
    full: bool,
    /// Exactly this many partitions (overrides `--quick` and `--full`).
    #[arg(long)]
    partitions: Option<usize>,
    /// Replication factor (that many bookies).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=3))]
    replication: u16,
}

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    let n = args.partitions.unwrap_or(if args.full {
        100_000
    } else if args.run.quick {
        2_000
    } else {
        10_000
    });
    if n == 0 {
        return Err("bench partitions needs at least one partition".into());
    }
    let topic_max = folio_broker::limits::PARTITIONS_MAX as usize;
    let topics: Vec<(String, usize)> = (0..n.div_ceil(topic_max))
        .map(|i| (format!("{TOPIC}-{i}"), topic_max.min(n - i * topic_max)))
        .collect();
    let topics: Vec<(&str, usize)> = topics.iter().map(|(t, k)| (t.as_str(), *k)).collect();
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-partitions-")?;
    let replication = args.replication;
    let (client, bookies, meta) =
        super::ledger::cluster_tuned(tmp.path(), usize::from(replication), |_| {}).await?;
    let mut config = BrokerConfig {
        listeners: vec![ListenerConfig::plaintext("127.0.0.1:0".parse().expect("address"))],
        default_replication: replication,
        replication_max: replication,
        ..BrokerConfig::default()
    };
    config.limits.partitions_open_max = config.limits.partitions_open_max.max(n + 1);
    let env = super::log_env(meta, client);
    let broker = Broker::start(config.clone(), env.clone()).await.map_err(|e| e.to_string())?;
    let rss0 = super::rss_now_mb();
    println!(
        "bench=partitions partitions={n} topics={} replication={replication} quick={}",
        topics.len(),
        args.run.quick
    );

    let mut conn = connect(&broker).await?;
    let (create_s, metadata_us, answer_bytes) = create_and_describe(&mut conn, &topics).await?;

    let first_s = produce_round(&broker, &topics).await?;
    let rss1 = super::rss_now_mb();
    let round_s = produce_round(&broker, &topics).await?;

    // At the end of every partition: what a caught-up consumer's session costs.
    let (session, full_ms) = fetch_all(&mut conn, &topics, 2, 0, 0).await?;
    let (_, incremental_ms) = fetch_session_again(&mut conn, session).await?;
    // Every partition open and idle: what they cost the CPU doing nothing.
    let (idle_from, cpu0) = (Instant::now(), super::process_cpu_ms());
    tokio::time::sleep(IDLE_MEASURED).await;
    let idle_cpu_cores =
        (super::process_cpu_ms() - cpu0) / 1000.0 / idle_from.elapsed().as_secs_f64();
    let meta_files = dir_bytes(&tmp.path().join("meta"));
    let records = folio_meta::list_all(env.meta.as_ref(), "").await.map_err(|e| e.to_string())?;
    let meta_bytes: usize = records.iter().map(|v| v.key.len() + v.value.len()).sum();
    println!(
        "create_s={create_s:.3} metadata_p50_ms={:.2} metadata_p99_ms={:.2} metadata_answer_bytes={answer_bytes} first_produce_s={first_s:.2} open_ms_per_partition_amortized={:.3} produce_round_s={round_s:.2} rss_before_mb={rss0:.0} rss_after_mb={rss1:.0} rss_per_partition_kib={:.1} fetch_session_full_ms={full_ms:.1} fetch_session_incremental_ms={incremental_ms:.2} idle_cpu_cores={idle_cpu_cores:.3} meta_store_keys={} meta_store_bytes={meta_bytes} meta_store_bytes_per_partition={:.0} meta_store_files_bytes={meta_files}",
        pct(&metadata_us, 0.5) as f64 / 1000.0,
        pct(&metadata_us, 0.99) as f64 / 1000.0,
        first_s * 1000.0 / n as f64,
        (rss1 - rss0) * 1024.0 / n as f64,
        records.len(),
        meta_bytes as f64 / n as f64,
    );
    drop(conn);

    // A clean restart: every partition opens again on first use.
    broker.shutdown().await;
    let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
    let mut conn = connect(&broker).await?;
    reopen(&broker, &mut conn, &topics, n).await?;
    drop(conn);
    broker.shutdown().await;
    for b in bookies {
        b.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Creates `topics` (one CreateTopics each) and times `METADATA_CALLS` Metadata requests
/// for them: the seconds the creation took, the sorted Metadata latencies (us), and the
/// answer's size.
async fn create_and_describe(
    conn: &mut KafkaConn,
    topics: &[(&str, usize)],
) -> Result<(f64, Vec<u64>, usize), String> {
    let t = Instant::now();
    for (topic, k) in topics {
        let req = create_topics_request(&[topic.to_string()], *k as i32);
        let created: CreateTopicsResponse =
            conn.call(ApiKey::CreateTopics, 5, &req).await.map_err(|e| e.to_string())?;
        if let Some(t) = created.topics.iter().find(|t| t.error_code != 0) {
            return Err(format!("CreateTopics answered {} ({:?})", t.error_code, t.error_message));
        }
    }
    let create_s = t.elapsed().as_secs_f64();
    let mut metadata_us = Vec::new();
    let mut answer_bytes = 0;
    for _ in 0..METADATA_CALLS {
        let req = MetadataRequest::default().with_topics(Some(
            topics
                .iter()
                .map(|(t, _)| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                })
                .collect(),
        ));
        let t = Instant::now();
        conn.send(ApiKey::Metadata, 12, &req).await.map_err(|e| e.to_string())?;
        let frame = conn.recv_raw().await.map_err(|e| e.to_string())?.ok_or("no answer")?;
        metadata_us.push(t.elapsed().as_micros() as u64);
        answer_bytes = frame.len();
    }
    metadata_us.sort_unstable();
    Ok((create_s, metadata_us, answer_bytes))
}

/// After a restart: a Fetch of one partition (which opens it), then of all `n` (which opens
/// the others); prints the times and the open-time histogram's bounds.
async fn reopen(
    broker: &Broker,
    conn: &mut KafkaConn,
    topics: &[(&str, usize)],
    n: usize,
) -> Result<(), String> {
    let t = Instant::now();
    fetch_all(conn, &topics[..1].iter().map(|(t, _)| (*t, 1)).collect::<Vec<_>>(), 0, -1, 0)
        .await?;
    let one_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    fetch_all(conn, topics, 0, -1, 0).await?;
    let all_s = t.elapsed().as_secs_f64();
    println!(
        "reopen_one_ms={one_ms:.1} reopen_all_s={all_s:.2} reopen_ms_per_partition={:.3} partitions_opened={} open_p50_ms_at_most={} open_p99_ms_at_most={} rss_peak_mb={:.0}",
        all_s * 1000.0 / (n - 1).max(1) as f64,
        broker.metrics().partitions_opened.load(std::sync::atomic::Ordering::Relaxed),
        bound_ms(&broker.metrics().partition_open_latency, 0.5),
        bound_ms(&broker.metrics().partition_open_latency, 0.99),
        super::rss_peak_mb()
    );
    Ok(())
}

pub(super) async fn connect(broker: &Broker) -> Result<KafkaConn, String> {
    KafkaConn::connect(broker.addr()).await.map_err(|e| e.to_string())
}

/// One record to every partition of `topics` (name, partitions), `PARTITIONS_PER_PRODUCE`
/// per request over `CONNECTIONS` connections; the seconds it took.
pub(super) async fn produce_round(
    broker: &Broker,
    topics: &[(&str, usize)],
) -> Result<f64, String> {
    let batch = Bytes::from(folio_broker::batch::build(1, now_ms(), 0, |_| vec![0x42; 100]));
    let chunks: Vec<(String, Vec<i32>)> = topics
        .iter()
        .flat_map(|(t, k)| {
            let parts: Vec<i32> = (0..*k as i32).collect();
            let chunks: Vec<Vec<i32>> =
                parts.chunks(PARTITIONS_PER_PRODUCE).map(<[i32]>::to_vec).collect();
            chunks.into_iter().map(|c| (t.to_string(), c))
        })
        .collect();
    let chunks = std::sync::Arc::new(chunks);
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..CONNECTIONS {
        let (addr, batch, chunks) = (broker.addr(), batch.clone(), chunks.clone());
        tasks.spawn(async move {
            let mut conn = KafkaConn::connect(addr).await.map_err(|e| e.to_string())?;
            for (topic, chunk) in chunks.iter().skip(c).step_by(CONNECTIONS) {
                let parts = chunk.iter().map(|p| {
                    PartitionProduceData::default().with_index(*p).with_records(Some(batch.clone()))
                });
                let req = ProduceRequest::default()
                    .with_acks(-1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(topic.clone())))
                            .with_partition_data(parts.collect()),
                    ]);
                let r: ProduceResponse =
                    conn.call(ApiKey::Produce, 9, &req).await.map_err(|e| e.to_string())?;
                let bad = r.responses.iter().flat_map(|t| &t.partition_responses);
                if let Some(p) = bad.clone().find(|p| p.error_code != 0) {
                    return Err(format!(
                        "Produce to {topic} partition {} answered {}",
                        p.index, p.error_code
                    ));
                }
            }
            Ok::<_, String>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// A Fetch (v12, no wait) of the partitions `0..k` of each of `topics` (name, k) from
/// `offset`: with `epoch` 0 it opens a fetch session, with -1 it is sessionless. The
/// session id and the milliseconds taken.
pub(super) async fn fetch_all(
    conn: &mut KafkaConn,
    topics: &[(&str, usize)],
    offset: i64,
    epoch: i32,
    session: i32,
) -> Result<(i32, f64), String> {
    let wanted = topics.iter().map(|(t, k)| {
        let parts = (0..*k).map(|p| {
            FetchPartition::default()
                .with_partition(p as i32)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024)
        });
        FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(t.to_string())))
            .with_partitions(parts.collect())
    });
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(64 << 20)
        .with_session_id(session)
        .with_session_epoch(epoch)
        .with_topics(wanted.collect());
    let t = Instant::now();
    let r: FetchResponse = conn.call(ApiKey::Fetch, 12, &req).await.map_err(|e| e.to_string())?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    check_fetch(&r)?;
    let answered: usize = r.responses.iter().map(|t| t.partitions.len()).sum();
    let n: usize = topics.iter().map(|(_, k)| k).sum();
    if answered != n {
        return Err(format!("a Fetch of {n} partitions answered {answered}"));
    }
    Ok((r.session_id, ms))
}

/// The next Fetch of fetch session `session` (epoch 1, nothing added or removed).
async fn fetch_session_again(conn: &mut KafkaConn, session: i32) -> Result<(i32, f64), String> {
    if session == 0 {
        return Err("the broker opened no fetch session".into());
    }
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(64 << 20)
        .with_session_id(session)
        .with_session_epoch(1);
    let t = Instant::now();
    let r: FetchResponse = conn.call(ApiKey::Fetch, 12, &req).await.map_err(|e| e.to_string())?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    check_fetch(&r)?;
    Ok((r.session_id, ms))
}

fn check_fetch(r: &FetchResponse) -> Result<(), String> {
    if r.error_code != 0 {
        return Err(format!("Fetch answered {}", r.error_code));
    }
    let parts = r.responses.iter().flat_map(|t| &t.partitions);
    if let Some(p) = parts.clone().find(|p| p.error_code != 0) {
        return Err(format!("Fetch of partition {} answered {}", p.partition_index, p.error_code));
    }
    Ok(())
}

/// The bucket bound of quantile `q` of `h`, in ms, for a figure.
pub(super) fn bound_ms(h: &folio_broker::metrics::Histogram, q: f64) -> String {
    match h.quantile_bound(q) {
        None => "none".into(),
        Some(d) if d == Duration::MAX => "inf".into(),
        Some(d) => format!("{:.1}", d.as_secs_f64() * 1000.0),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as i64
}

/// Bytes of the files under `dir`, recursively.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
