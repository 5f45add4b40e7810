//! The conformance suite on the etcd backend (feature `etcd`), plus etcd restart behaviour.
//!
//! The shared etcd comes from `FOLIO_ETCD_ENDPOINTS` (scripts/test.sh starts one); each test
//! works under its own random root. Tests that compact history or stop etcd start a private
//! etcd of their own, so they never disturb the others.
#![cfg(feature = "etcd")]

mod suite;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio_meta::etcd::EtcdStore;
use folio_meta::*;
use suite::Backend;

/// An etcd process with its own data dir and ports, stopped on drop.
struct EtcdProcess {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl EtcdProcess {
    fn start() -> EtcdProcess {
        let mut p = EtcdProcess {
            child: None,
            dir: tempfile::tempdir().unwrap(),
            client_port: free_port(),
            peer_port: free_port(),
        };
        p.spawn();
        p
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}"), "--initial-cluster-state", "new"])
            .args(["--log-level", "error", "--logger", "zap"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd on PATH (apt-get install etcd-server)");
        self.child = Some(child);
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connects and waits until etcd answers (it takes a moment to elect itself).
async fn connect_ready(endpoint: &str) -> EtcdStore {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = EtcdStore::connect(&[endpoint.to_string()]).await
            && s.revision().await.is_ok()
        {
            return s;
        }
        assert!(Instant::now() < deadline, "etcd at {endpoint} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Etcd {
    store: Arc<EtcdStore>,
    endpoint: String,
    root: String,
    _private: Option<EtcdProcess>,
}

async fn make(name: &str) -> Etcd {
    let private = (name == "watch_from_compacted_history_says_so").then(EtcdProcess::start);
    let endpoint = match &private {
        Some(p) => p.endpoint(),
        None => std::env::var("FOLIO_ETCD_ENDPOINTS").expect(
            "FOLIO_ETCD_ENDPOINTS names the etcd to test against (scripts/test.sh sets it)",
        ),
    };
    let store = Arc::new(connect_ready(&endpoint).await);
    let root = format!("test-{name}-{:016x}", rand::random::<u64>());
    Etcd { store, endpoint, root, _private: private }
}

impl Backend for Etcd {
    fn store(&self) -> Arc<dyn MetadataStore> {
        self.store.clone()
    }
    fn root(&self) -> String {
        self.root.clone()
    }
    async fn expire(&self, _ttl: Duration) {
        // Real time: etcd expires the lease on its own; the suite awaits the delete event.
    }
    async fn reopen(&mut self) {
        self.store = Arc::new(connect_ready(&self.endpoint).await);
    }
    async fn compact(&self, revision: Revision) {
        self.store.compact(revision).await.unwrap();
    }
}

conformance_tests!(make);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_fail_clearly_while_etcd_is_down_and_work_after_it_restarts() {
    let mut etcd = EtcdProcess::start();
    let s = connect_ready(&etcd.endpoint()).await;
    let v = s.put("r/k", bytes::Bytes::from_static(b"before"), Expect::Absent).await.unwrap();
    etcd.stop();
    let err = s.get("r/k").await.unwrap_err();
    assert!(matches!(err, MetaError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains(&etcd.endpoint()), "the error names the endpoint: {err}");
    assert!(std::error::Error::source(&err).is_some(), "the transport's error is kept: {err:?}");
    let err =
        s.put("r/k", bytes::Bytes::from_static(b"during"), Expect::Version(v)).await.unwrap_err();
    assert!(matches!(err, MetaError::Unavailable { .. }), "{err}");
    etcd.spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        match s.get("r/k").await {
            Ok(got) => break got,
            Err(MetaError::Unavailable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after restart: {e}"),
        }
    };
    assert_eq!(got.unwrap().version, v, "etcd kept the write; the failed one never applied");
    s.put("r/k", bytes::Bytes::from_static(b"after"), Expect::Version(v)).await.unwrap();
}
