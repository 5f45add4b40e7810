//! Hostile-client benchmark (#21): a well-behaved producer's rate while adversarial
//! connections attack the Kafka listener, against its rate alone in the same run.
//!
//! A broker on one in-process bookie (embedded metadata). The producer: 4 connections,
//! each producing 16 KiB batches (acks=all) in a closed loop. Phase `quiet`: the producer
//! alone. Phase `attack`: the same while `--attackers` connections (default 1 000) each run
//! one attack in a loop, reconnecting when closed:
//! trickle (a 90 MiB frame declared, one byte a second), huge (declared, then silence),
//! garbage (seeded random frames), pipeline (Fetches never read, on a 4 KiB receive
//! buffer), names (Metadata for a 30 000-byte topic name, OffsetCommit with a 30 000-byte
//! group id), auto-create storm (Metadata for 50 new names), by-id storm (Metadata for
//! random topic ids), idle (connected, silent). Each attacker pauses `PACE` between two
//! requests, bursts or reconnections (see there why).
//!
//! Prints the rates, `ratio_vs_quiet` (target ≥ 0.5), the process's disk reads and writes
//! per byte produced in each phase, peak RSS against the configured memory budget (the
//! listener's `process_bytes_max` and `answer_bytes_max` + the bookie's write and read
//! caches + 256 MiB for the runtime and the attackers' own buffers: `rss_within_budget`),
//! and the limit hits.

// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_broker::limits::Limit;
use folio_broker::{Broker, BrokerConfig};
use folio_kafka_client::{KafkaConn, create_topics_request, encode_request, produce_request};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
    /// Adversarial connections (default 1 000).
    #[arg(long, default_value_t = 1000)]
    attackers: usize,
    /// Only these attacks (comma-separated; default all): trickle, huge, garbage,
    /// pipeline, names, auto_create, by_id, idle.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Sets a limit of the broker's listener, as `folio broker --limit` does.
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    limits: Vec<String>,
}

const PRODUCERS: usize = 4;
const BATCH_RECORDS: i32 = 16;
const RECORD_BYTES: usize = 1024;
/// Overhead of the runtime, binary and the attackers' own buffers in the memory budget.
const BASE_MB: f64 = 256.0;
/// The pause between two requests (or bursts, or reconnections) of an attacker: 1 000
/// attackers make thousands of requests a second. Unpaced, they would measure how two
/// cores are shared between a flood and a producer, which only per-client request quotas
/// address (not built yet), not whether a hostile request does harm.
const PACE: Duration = Duration::from_millis(250);
/// Fetches a pipeliner sends at a time (never reading the answers).
const PIPELINE_BURST: usize = 64;
const ATTACKS: [&str; 8] =
    ["trickle", "huge", "garbage", "pipeline", "names", "auto_create", "by_id", "idle"];

pub fn run(args: Args) -> Result<(), String> {
    super::block_on(run_async(args))
}

async fn run_async(args: Args) -> Result<(), String> {
    let tmp = super::temp_dir(&args.run.dir, ".folio-bench-hostile-")?;
    let phase = Duration::from_secs(if args.run.quick { 10 } else { 30 });
    let (client, _bookies, meta) =
        super::ledger::cluster_tuned(&tmp.path().join("cluster"), 1, |_| {}).await?;
    let caches = folio_bookie::config::StorageConfig::new(".");
    let caches_bytes = caches.write_cache_bytes + caches.read_cache_bytes;
    let env = super::log_env(meta, client);
    let mut config = BrokerConfig {
        listeners: vec![folio_broker::config::ListenerConfig::plaintext(
            "127.0.0.1:0".parse().expect("address"),
        )],
        ..BrokerConfig::default()
    };
    for l in &args.limits {
        let (name, value) =
            l.split_once('=').ok_or_else(|| format!("--limit {l:?}: expected NAME=VALUE"))?;
        config.limits.set(name, value)?;
    }
    config.limits.validate()?;
    let limits = config.limits.clone();
    let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
    let addr = broker.addr();
    let mut conn = KafkaConn::connect(addr).await?;
    let r: CreateTopicsResponse =
        conn.call(ApiKey::CreateTopics, 7, &create_topics_request(&["good".into()], 1)).await?;
    if r.topics[0].error_code != 0 {
        return Err(format!("creating the topic: error {}", r.topics[0].error_code));
    }
    let budget_mb =
        (limits.process_bytes_max + limits.answer_bytes_max + caches_bytes) as f64 / MIB + BASE_MB;
    println!(
        "bench=hostile quick={} attackers={} phase_s={} producers={PRODUCERS} batch_bytes={} process_bytes_max_mb={:.0} budget_mb={budget_mb:.0}",
        args.run.quick,
        args.attackers,
        phase.as_secs(),
        BATCH_RECORDS as usize * RECORD_BYTES,
        limits.process_bytes_max as f64 / MIB
    );
    let batch = Bytes::from(folio_broker::batch::build(BATCH_RECORDS, 1, 0, |i| {
        vec![b'a' + (i % 26) as u8; RECORD_BYTES]
    }));

    let quiet = produce_for(addr, &batch, phase).await?;
    report("quiet", &quiet);

    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicU64::new(0));
    let mut attackers = tokio::task::JoinSet::new();
    let kinds: Vec<&'static str> = ATTACKS
        .iter()
        .copied()
        .filter(|k| args.only.is_empty() || args.only.iter().any(|o| o == k))
        .collect();
    if kinds.is_empty() {
        return Err(format!("--only: no known attack; the attacks are {}", ATTACKS.join(", ")));
    }
    for i in 0..args.attackers {
        let (stop, connected) = (stop.clone(), connected.clone());
        attackers.spawn(attack(addr, kinds[i % kinds.len()], i, stop, connected));
    }
    let held_peak = Arc::new(AtomicU64::new(0));
    let sampler = tokio::spawn({
        let (broker, held_peak, stop) = (broker.clone(), held_peak.clone(), stop.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                held_peak.fetch_max(broker.bytes_held() as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let attack_phase = produce_for(addr, &batch, phase).await?;
    report("attack", &attack_phase);
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.await;
    let held_peak_mb = held_peak.load(Ordering::Relaxed) as f64 / MIB;
    attackers.abort_all();
    while attackers.join_next().await.is_some() {}
    let ratio = attack_phase.rate() / quiet.rate().max(f64::MIN_POSITIVE);
    let rss = super::rss_peak_mb();
    println!(
        "attacker_connections={} ratio_vs_quiet={ratio:.2} target_ratio=0.5 bytes_held_peak_mb={held_peak_mb:.1} rss_peak_mb={rss:.0} budget_mb={budget_mb:.0} rss_within_budget={}",
        connected.load(Ordering::Relaxed),
        rss <= budget_mb
    );
    let m = broker.metrics();
    let hits: Vec<String> = Limit::ALL
        .iter()
        .map(|l| format!("limit_hits_{}={}", l.name(), m.limit_hits(*l)))
        .collect();
    println!("{}", hits.join(" "));
    Ok(())
}

/// What one phase measured.
struct Phase {
    secs: f64,
    batches: u64,
    bytes: u64,
    disk_read: Option<u64>,
    disk_write: Option<u64>,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.bytes as f64 / MIB / self.secs
    }
}

fn report(name: &str, p: &Phase) {
    let per_byte = |io: Option<u64>| {
        io.map_or("unknown".to_string(), |b| format!("{:.2}", b as f64 / p.bytes.max(1) as f64))
    };
    println!(
        "phase={name} produced_mb_per_s={:.1} batches_per_s={:.0} disk_read_per_byte={} disk_write_per_byte={}",
        p.rate(),
        p.batches as f64 / p.secs,
        per_byte(p.disk_read),
        per_byte(p.disk_write)
    );
}

/// The producer for `d`: `PRODUCERS` connections, one acks=all batch in flight each.
async fn produce_for(
    addr: std::net::SocketAddr,
    batch: &Bytes,
    d: Duration,
) -> Result<Phase, String> {
    let (read0, write0) = (super::process_io("read_bytes"), super::process_io("write_bytes"));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..PRODUCERS {
        let batch = batch.clone();
        tasks.spawn(async move {
            let mut c = KafkaConn::connect(addr).await?;
            let mut n = 0u64;
            while started.elapsed() < d {
                let r: ProduceResponse = c
                    .call(ApiKey::Produce, 9, &produce_request("good", 0, batch.clone(), -1))
                    .await?;
                let code = r.responses[0].partition_responses[0].error_code;
                if code != 0 {
                    return Err(format!("produce: error {code}"));
                }
                n += 1;
            }
            Ok::<_, String>(n)
        });
    }
    let mut batches = 0;
    while let Some(r) = tasks.join_next().await {
        batches += r.map_err(|e| e.to_string())??;
    }
    let secs = started.elapsed().as_secs_f64();
    let delta = |before: Option<u64>, field| Some(super::process_io(field)? - before?);
    Ok(Phase {
        secs,
        batches,
        bytes: batches * batch.len() as u64,
        disk_read: delta(read0, "read_bytes"),
        disk_write: delta(write0, "write_bytes"),
    })
}

/// Runs attack `kind` until `stop`, reconnecting whenever the broker closes.
async fn attack(
    addr: std::net::SocketAddr,
    kind: &'static str,
    i: usize,
    stop: Arc<AtomicBool>,
    connected: Arc<AtomicU64>,
) {
    let mut rng = SmallRng::seed_from_u64(i as u64);
    while !stop.load(Ordering::Relaxed) {
        let socket = match tokio::net::TcpSocket::new_v4() {
            Ok(s) => s,
            Err(_) => return,
        };
        if kind == "pipeline" {
            let _ = socket.set_recv_buffer_size(4096);
        }
        let Ok(mut s) = socket.connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        connected.fetch_add(1, Ordering::Relaxed);
        let _ = one_attack(kind, &mut s, &mut rng).await;
        // Closed by the broker: come back after a moment, as a retrying client would.
        tokio::time::sleep(PACE).await;
    }
}

/// One connection's worth of attack `kind`; returns when the broker closes it.
async fn one_attack(kind: &str, s: &mut TcpStream, rng: &mut SmallRng) -> std::io::Result<()> {
    match kind {
        "trickle" => {
            s.write_all(&(90i32 << 20).to_be_bytes()).await?;
            loop {
                s.write_all(&[rng.random()]).await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        "huge" => {
            s.write_all(&(99i32 << 20).to_be_bytes()).await?;
            s.write_all(&vec![0u8; 4096]).await?;
            wait_closed(s).await
        }
        "garbage" => {
            let len = rng.random_range(8..512usize);
            let mut frame = (len as i32).to_be_bytes().to_vec();
            frame.extend((0..len).map(|_| rng.random::<u8>()));
            s.write_all(&frame).await?;
            wait_closed(s).await
        }
        "pipeline" => {
            let fetch =
                FetchRequest::default().with_max_wait_ms(0).with_max_bytes(0).with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_static_str("good")))
                        .with_partitions(vec![
                            fetch_request::FetchPartition::default()
                                .with_partition_max_bytes(i32::MAX),
                        ]),
                ]);
            let frame =
                encode_request(ApiKey::Fetch, 12, 1, &fetch).map_err(std::io::Error::other)?;
            let burst = frame.repeat(PIPELINE_BURST);
            loop {
                s.write_all(&burst).await?;
                tokio::time::sleep(PACE).await;
            }
        }
        "names" => {
            let long = "n".repeat(30_000);
            let metadata = MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(long.clone())))),
            ]));
            let commit = OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(long)))
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("good")))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default(),
                        ]),
                ]);
            loop {
                request(s, ApiKey::Metadata, 12, &metadata).await?;
                request(s, ApiKey::OffsetCommit, 7, &commit).await?;
                tokio::time::sleep(PACE).await;
            }
        }
        "auto_create" => loop {
            let names: Vec<_> = (0..50)
                .map(|_| {
                    metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(
                        StrBytes::from_string(format!("storm-{:016x}", rng.random::<u64>())),
                    )))
                })
                .collect();
            let req = MetadataRequest::default()
                .with_allow_auto_topic_creation(true)
                .with_topics(Some(names));
            request(s, ApiKey::Metadata, 12, &req).await?;
            tokio::time::sleep(PACE).await;
        },
        "by_id" => loop {
            let ids: Vec<_> = (0..50)
                .map(|_| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_topic_id(uuid::Uuid::from_u128(rng.random()))
                })
                .collect();
            request(s, ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(Some(ids)))
                .await?;
            tokio::time::sleep(PACE).await;
        },
        _ => wait_closed(s).await, // idle
    }
}

/// Sends one request and reads (and drops) its answer.
async fn request<R: kafka_protocol::protocol::Encodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    req: &R,
) -> std::io::Result<()> {
    let frame = encode_request(key, version, 1, req).map_err(std::io::Error::other)?;
    s.write_all(&frame).await?;
    let mut size = [0u8; 4];
    s.read_exact(&mut size).await?;
    let mut body = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    s.read_exact(&mut body).await?;
    Ok(())
}

/// Reads until the broker closes the connection.
async fn wait_closed(s: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    while s.read(&mut buf).await? > 0 {}
    Ok(())
}
