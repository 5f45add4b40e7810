//! In-process clusters for tests: an embedded metadata store and N bookies, each behind a
//! [`FaultyLink`], a TCP proxy whose behaviour a test switches at will: pass, delay, hold
//! (a partition: bytes stop flowing, connections stay open, requests time out), or cut
//! (connections drop and new ones are refused). Bookies can be killed (`abort`, a crash
//! that keeps synced data) and restarted on the same dirs.
//!
//! Bookies register the proxy's address, so every client reaches them through it.

pub mod disk;
pub mod poll;

/// The raw Kafka client, and the throwaway TLS certificates (folio-kafka-client, which the
/// benchmarks ship with).
pub use folio_kafka_client::{self as kafka, certs};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What a link does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Pass,
    /// Every chunk is delayed by this much.
    Delay(Duration),
    /// Nothing flows in either direction until the fault changes (a partition).
    Hold,
    /// Open connections are dropped and new ones closed at once.
    Cut,
}

/// A TCP proxy in front of one bookie.
#[derive(Debug)]
pub struct FaultyLink {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    target: Arc<Mutex<Option<SocketAddr>>>,
    drop_new: Arc<std::sync::atomic::AtomicUsize>,
}

impl FaultyLink {
    /// Starts a proxy on a free loopback port with no target and no fault.
    pub async fn start() -> FaultyLink {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (fault, fault_rx) = watch::channel(Fault::Pass);
        let target: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
        let accept_target = target.clone();
        let drop_new = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accept_drop = drop_new.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let fault_rx = fault_rx.clone();
                if *fault_rx.borrow() == Fault::Cut {
                    continue; // dropped: the client sees the connection close
                }
                let dropping = accept_drop
                    .fetch_update(
                        std::sync::atomic::Ordering::SeqCst,
                        std::sync::atomic::Ordering::SeqCst,
                        |n| n.checked_sub(1),
                    )
                    .is_ok();
                if dropping {
                    continue; // this one connection is refused; later ones pass
                }
                let Some(to) = *accept_target.lock().expect("target lock") else { continue };
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(to).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        () = pump(cr, sw, fault_rx.clone()) => {}
                        () = pump(sr, cw, fault_rx) => {}
                    }
                });
            }
        });
        FaultyLink { addr, fault, target, drop_new }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends new connections to `to`.
    pub fn set_target(&self, to: SocketAddr) {
        *self.target.lock().expect("target lock") = Some(to);
    }

    /// The next `n` new connections are closed at once; existing ones are not touched.
    pub fn drop_next_connections(&self, n: usize) {
        self.drop_new.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Applies `f` to every connection from now on.
    pub fn set_fault(&self, f: Fault) {
        tracing::debug!(proxy = %self.addr, fault = ?f, "link fault");
        self.fault.send_replace(f);
    }
}

/// Copies bytes one way, obeying the link's fault; returns when either side closes or the
/// link is cut.
async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut fault: watch::Receiver<Fault>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = fault.changed() => {
                if *fault.borrow() == Fault::Cut {
                    return;
                }
                continue;
            }
        };
        loop {
            let f = *fault.borrow_and_update();
            match f {
                Fault::Pass => break,
                Fault::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Fault::Cut => return,
                Fault::Hold => {
                    if fault.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// One bookie of a [`Cluster`], with its link and what it needs to restart.
#[derive(Debug)]
pub struct Node {
    pub id: String,
    pub link: FaultyLink,
    pub config: BookieConfig,
    pub bookie: Option<Bookie>,
}

/// An embedded metadata store and N bookies behind faulty links.
#[derive(Debug)]
pub struct Cluster {
    pub meta: Arc<dyn MetadataStore>,
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` bookies, each behind its own faulty link, on an embedded metadata store.
    pub async fn start(n: usize) -> Cluster {
        Cluster::start_with(n, |_| {}).await
    }

    /// `start`, with each bookie's config adjusted by `tune` first.
    pub async fn start_with(n: usize, tune: impl Fn(&mut BookieConfig)) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        // etcd's transaction cap, so code that batches by it runs as it does on etcd.
        let config = folio_meta::embedded::EmbeddedConfig {
            txn_ops_max: folio_meta::ETCD_TXN_OPS_MAX,
            ..Default::default()
        };
        let clock = Arc::new(folio_meta::SystemClock::default());
        let meta: Arc<dyn MetadataStore> = Arc::new(
            EmbeddedStore::open_with(&dir.path().join("meta"), config, clock)
                .expect("metadata store"),
        );
        let mut nodes = Vec::new();
        for i in 0..n {
            let link = FaultyLink::start().await;
            let mut config = BookieConfig::new(
                dir.path().join(format!("bookie-{i}")),
                "127.0.0.1:0".parse().expect("addr"),
            );
            config.bookie_id = Some(format!("bookie-{i}"));
            config.advertised_address = Some(link.addr().to_string());
            config.storage.write_cache_bytes = 16 * 1024 * 1024;
            tune(&mut config);
            let mut node = Node { id: format!("bookie-{i}"), link, config, bookie: None };
            node.restart(&meta).await;
            nodes.push(node);
        }
        Cluster { meta, nodes, _dir: dir }
    }

    /// The node named `id`.
    pub fn node(&mut self, id: &str) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node exists")
    }
}

impl Node {
    /// Kills the bookie (no clean shutdown; synced data stays).
    pub async fn kill(&mut self) {
        if let Some(b) = self.bookie.take() {
            b.abort().await;
        }
    }

    /// Starts (or restarts) the bookie on its dirs, behind the same link.
    pub async fn restart(&mut self, meta: &Arc<dyn MetadataStore>) {
        self.kill().await;
        let bookie = Bookie::start(self.config.clone(), meta.clone()).await.expect("bookie starts");
        self.link.set_target(bookie.addr());
        self.bookie = Some(bookie);
    }

    /// The node's running bookie (panics if stopped).
    pub fn bookie(&self) -> &Bookie {
        self.bookie.as_ref().expect("bookie running")
    }
}

/// Seeds for a seeded test: `$var` as `a..b` or `a,b,c`, else `default`. A failing seed is
/// printed by the test; set the variable to replay it.
pub fn seeds(var: &str, default: std::ops::Range<u64>) -> Vec<u64> {
    let parse = |x: &str| x.trim().parse::<u64>().unwrap_or_else(|e| panic!("{var}: {x:?}: {e}"));
    match std::env::var(var) {
        Ok(s) => match s.split_once("..") {
            Some((a, b)) => (parse(a)..parse(b)).collect(),
            None => s.split(',').map(parse).collect(),
        },
        Err(_) => default.collect(),
    }
}

/// Logs to the test's output when `RUST_LOG` is set (once per test binary).
pub fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
