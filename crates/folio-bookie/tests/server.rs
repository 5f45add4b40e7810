//! The bookie server and lifecycle over real TCP, with the embedded metadata store.

use crate::{common, poll};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use folio_bookie::bookie::{Bookie, BookieConfig, BookieError, DiskUsage};
use folio_client::BookieConnection;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;
use folio_meta::{EventKind, MetadataStore};
use folio_proto::wire::{self, Request, RequestFrame, Response};
use folio_proto::{Entry, EntryHeader, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: [u8; 20] = [5; 20];

fn entry(l: u64, e: i64, payload: &[u8]) -> Bytes {
    Entry::encode(
        EntryHeader { ledger_id: l, entry_id: e, last_add_confirmed: e - 1, length: 0 },
        payload,
    )
    .into_bytes()
}

struct Env {
    _tmp: tempfile::TempDir,
    data: std::path::PathBuf,
    meta: Arc<dyn MetadataStore>,
}

fn new_env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&tmp.path().join("meta")).unwrap());
    Env { data: tmp.path().join("bookie"), _tmp: tmp, meta }
}

fn config(data: &std::path::Path) -> BookieConfig {
    let mut c = BookieConfig::new(data, "127.0.0.1:0".parse().unwrap());
    c.bookie_id = Some("bookie-1".into());
    c.storage.write_cache_bytes = 16 * 1024 * 1024;
    c.storage.mode = common::mode_from_env();
    c
}

/// Metadata of a one-copy ledger on bookie-1 (no password), closed at entry 0 or open.
fn on_bookie_1(state: folio_meta::records::LedgerState) -> folio_meta::records::LedgerMetadata {
    use folio_meta::records::{DigestType, LedgerMetadata, LedgerState};
    LedgerMetadata {
        ensemble_size: 1,
        write_quorum: 1,
        ack_quorum: 1,
        state,
        last_entry_id: if state == LedgerState::Closed { 0 } else { -1 },
        length: 0,
        digest_type: DigestType::Crc32c,
        password: None,
        ensembles: [(0, vec!["bookie-1".to_string()])].into(),
        custom: Default::default(),
        ctime_ms: 0,
        creator_token: 0,
    }
}

async fn add(conn: &BookieConnection, e: Bytes, recovery: bool) -> Status {
    conn.request(Request::Add { master_key: KEY, recovery, entry: e }).await.unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pipelined_clients_get_every_answer_and_every_entry_reads_back() {
    let env = new_env();
    let bookie = Bookie::start(config(&env.data), env.meta.clone()).await.unwrap();
    let mut clients = Vec::new();
    for c in 0..8u64 {
        let addr = bookie.addr();
        clients.push(tokio::spawn(async move {
            let conn = Arc::new(BookieConnection::connect(addr, 256).await.unwrap());
            let mut adds = Vec::new();
            for e in 0..300i64 {
                let conn = conn.clone();
                adds.push(tokio::spawn(async move {
                    add(&conn, entry(c + 1, e, &e.to_le_bytes()), false).await
                }));
            }
            for a in adds {
                assert_eq!(a.await.unwrap(), Status::Ok);
            }
            for e in (0..300i64).step_by(7) {
                let r = conn
                    .request(Request::Read { ledger_id: c + 1, entry_id: e, fence: None })
                    .await
                    .unwrap();
                assert_eq!(r.status, Status::Ok);
                let Response::Read { entry: Some(b), .. } = r.response else { panic!("no entry") };
                assert_eq!(b, entry(c + 1, e, &e.to_le_bytes()));
            }
            let r = conn.request(Request::ListEntries { ledger_id: c + 1 }).await.unwrap();
            assert_eq!(
                r.response,
                Response::ListEntries { ledger_id: c + 1, ranges: vec![(0, 300)] }
            );
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(bookie.stats().malformed_frames.load(Ordering::Relaxed), 0);
    bookie.shutdown().await.unwrap();
}

/// The real file system, whose `sync_data` waits while the gate is held: an add cannot be
/// acknowledged until the test opens it.
#[derive(Debug, Default)]
struct SyncGate {
    held: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl SyncGate {
    fn hold(&self, held: bool) {
        *self.held.lock().unwrap() = held;
        self.opened.notify_all();
    }
}

#[derive(Debug)]
struct GatedFs(Arc<SyncGate>);

#[derive(Debug)]
struct GatedFile(Arc<dyn folio_bookie::fs::FileHandle>, Arc<SyncGate>);

impl folio_bookie::fs::FileHandle for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        let mut held = self.1.held.lock().unwrap();
        while *held {
            held = self.1.opened.wait(held).unwrap();
        }
        drop(held);
        self.0.sync_data()
    }
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn is_direct(&self) -> bool {
        self.0.is_direct()
    }
}

impl folio_bookie::fs::FileSystem for GatedFs {
    fn create_dir_all(&self, path: &std::path::Path) -> std::io::Result<()> {
        folio_bookie::fs::RealFs.create_dir_all(path)
    }
    fn open(
        &self,
        path: &std::path::Path,
        options: folio_bookie::fs::OpenOptions,
    ) -> std::io::Result<Arc<dyn folio_bookie::fs::FileHandle>> {
        let f = folio_bookie::fs::RealFs.open(path, options)?;
        Ok(Arc::new(GatedFile(f, self.0.clone())))
    }
    fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        folio_bookie::fs::RealFs.remove_file(path)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        folio_bookie::fs::RealFs.rename(from, to)
    }
    fn list_dir(&self, path: &std::path::Path) -> std::io::Result<Vec<String>> {
        folio_bookie::fs::RealFs.list_dir(path)
    }
    fn sync_dir(&self, path: &std::path::Path) -> std::io::Result<()> {
        folio_bookie::fs::RealFs.sync_dir(path)
    }
    fn exists(&self, path: &std::path::Path) -> bool {
        folio_bookie::fs::RealFs.exists(path)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_come_back_in_completion_order_not_request_order() {
    let env = new_env();
    let mut c = config(&env.data);
    // Syncs wait while the gate is held, so an add waits; a LAC read answers at once.
    let gate = Arc::new(SyncGate::default());
    c.fs = Arc::new(GatedFs(gate.clone()));
    let bookie = Bookie::start(c, env.meta.clone()).await.unwrap();
    let conn = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    assert_eq!(add(&conn, entry(1, 0, b"x"), false).await, Status::Ok);
    gate.hold(true);
    let mut raw = TcpStream::connect(bookie.addr()).await.unwrap();
    let mut out = BytesMut::new();
    let add_req = Request::Add { master_key: KEY, recovery: false, entry: entry(1, 1, b"y") };
    wire::encode_request(&RequestFrame { request_id: 1, request: add_req }, &mut out);
    wire::encode_request(
        &RequestFrame { request_id: 2, request: Request::ReadLac { ledger_id: 1 } },
        &mut out,
    );
    raw.write_all(&out).await.unwrap();
    let mut buf = BytesMut::new();
    let mut ids = Vec::new();
    let mut answers = Vec::new();
    while ids.len() < 2 {
        if ids == [2] {
            gate.hold(false); // the read came back first: let the add finish
        }
        // Answers in request order would hold the read behind the gated add: a deadline.
        let read = tokio::time::timeout(Duration::from_secs(30), raw.read_buf(&mut buf)).await;
        read.expect("no answer within 30 s: the read waits behind the add").unwrap();
        while let Some(body) = wire::take_frame(&mut buf).unwrap() {
            let answer = wire::decode_response(body).unwrap();
            ids.push(answer.request_id);
            answers.push((answer.request_id, answer.status));
        }
    }
    assert_eq!(
        ids,
        vec![2, 1],
        "the fast read overtook the add waiting for its fdatasync: {answers:?}"
    );
    bookie.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_closes_only_its_connection() {
    let env = new_env();
    let bookie = Bookie::start(config(&env.data), env.meta.clone()).await.unwrap();
    let good = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    for garbage in [
        {
            let mut b = BytesMut::new();
            b.put_u32_le(12);
            b.put_slice(&[9u8; 12]); // protocol version 9
            b
        },
        {
            let mut b = BytesMut::new();
            b.put_u32_le(u32::MAX); // oversized: refused before allocation
            b
        },
    ] {
        let mut raw = TcpStream::connect(bookie.addr()).await.unwrap();
        raw.write_all(&garbage).await.unwrap();
        let mut sink = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(10), raw.read(&mut sink))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0, "the server closed the connection");
    }
    assert_eq!(bookie.stats().malformed_frames.load(Ordering::Relaxed), 2);
    assert_eq!(add(&good, entry(1, 0, b"still fine"), false).await, Status::Ok);
    // A corrupt entry inside a well-formed frame is a BAD_REQUEST, not a closed connection.
    let mut bad = entry(1, 1, b"payload").to_vec();
    bad[40] ^= 1;
    assert_eq!(add(&good, Bytes::from(bad), false).await, Status::BadRequest);
    assert_eq!(add(&good, entry(1, 1, b"payload"), false).await, Status::Ok);
    bookie.shutdown().await.unwrap();
}

/// Reads until the bookie closes `s`.
async fn closed_by_bookie(s: &mut TcpStream) {
    let mut sink = vec![0u8; 64 * 1024];
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(n) = s.read(&mut sink).await {
            if n == 0 {
                return;
            }
        }
    })
    .await
    .expect("the bookie closes the connection");
}

/// Hostile clients over the bookie's listener (#21): a client that pipelines reads of a
/// large entry and never takes the replies pins at most its connection's byte budget and
/// is closed by `reply_write_timeout`; a frame that trickles in is closed by
/// `request_read_timeout`; a connection above `connections_max` is closed at once. A
/// well-behaved client is served throughout and every byte held comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_are_bounded_and_closed_and_others_are_served() {
    let env = new_env();
    let mut c = config(&env.data);
    c.server.connection_bytes_max = 2 * (folio_proto::wire::FRAME_BYTES_MAX + 4);
    c.server.process_bytes_max = 4 * c.server.connection_bytes_max;
    c.server.reply_write_timeout = Duration::from_millis(300);
    c.server.request_read_timeout = Duration::from_millis(300);
    c.server.connections_max = 3;
    let budget = c.server.process_bytes_max;
    let bookie = Bookie::start(c, env.meta.clone()).await.unwrap();
    let good = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    let big = vec![7u8; 4 * 1024 * 1024];
    assert_eq!(add(&good, entry(1, 0, &big), false).await, Status::Ok);

    // Pipelined reads of a 4 MiB entry, replies never taken.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let attacker = socket.connect(bookie.addr()).await.unwrap();
    let (mut rd, mut wr) = attacker.into_split();
    let mut reads = BytesMut::new();
    for i in 0..64 {
        let read = Request::Read { ledger_id: 1, entry_id: 0, fence: None };
        wire::encode_request(&RequestFrame { request_id: i, request: read }, &mut reads);
    }
    let flood = tokio::spawn(async move { while wr.write_all(&reads).await.is_ok() {} });
    poll::eventually(Duration::from_secs(20), "the reply write timeout closes the reader", || {
        assert!(bookie.bytes_held() <= budget, "held {}", bookie.bytes_held());
        bookie.stats().slow_readers_closed.load(Ordering::Relaxed) == 1
    })
    .await;
    flood.abort();
    let mut sink = vec![0u8; 1 << 16];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(20), rd.read(&mut sink)).await {
        if n == 0 {
            break;
        }
    }
    poll::eventually(Duration::from_secs(20), "the held bytes come back", || {
        bookie.bytes_held() == 0
    })
    .await;

    // A frame that declares 1 MiB and trickles in.
    let mut slow = TcpStream::connect(bookie.addr()).await.unwrap();
    slow.write_all(&(1u32 << 20).to_le_bytes()).await.unwrap();
    slow.write_all(&[1u8; 10]).await.unwrap();
    closed_by_bookie(&mut slow).await;
    assert_eq!(bookie.stats().slow_requests_closed.load(Ordering::Relaxed), 1);

    // Three connections at most: `good` and two more.
    let _second = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    let third = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    assert_eq!(add(&third, entry(2, 0, b"x"), false).await, Status::Ok);
    let mut fourth = TcpStream::connect(bookie.addr()).await.unwrap();
    closed_by_bookie(&mut fourth).await;
    assert_eq!(bookie.stats().connections_refused.load(Ordering::Relaxed), 1);

    let read = good.request(Request::Read { ledger_id: 1, entry_id: 0, fence: None }).await;
    assert_eq!(read.unwrap().status, Status::Ok);
    assert_eq!(bookie.stats().malformed_frames.load(Ordering::Relaxed), 0);
    bookie.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_reads_lac_and_statuses_over_the_wire() {
    let env = new_env();
    let bookie = Bookie::start(config(&env.data), env.meta.clone()).await.unwrap();
    let conn = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    for e in 0..3 {
        assert_eq!(add(&conn, entry(7, e, b"x"), false).await, Status::Ok);
    }
    let r =
        conn.request(Request::Read { ledger_id: 7, entry_id: -1, fence: Some(KEY) }).await.unwrap();
    assert_eq!(
        (r.status, matches!(r.response, Response::Read { entry_id: 2, .. })),
        (Status::Ok, true)
    );
    assert_eq!(add(&conn, entry(7, 3, b"zombie"), false).await, Status::Fenced);
    assert_eq!(add(&conn, entry(7, 3, b"recovery"), true).await, Status::Ok);
    let r = conn.request(Request::ReadLac { ledger_id: 7 }).await.unwrap();
    assert_eq!(r.response, Response::ReadLac { ledger_id: 7, lac: Some(2) });
    let r = conn
        .request(Request::WriteLac { ledger_id: 7, lac: 3, master_key: [1; 20] })
        .await
        .unwrap();
    assert_eq!(r.status, Status::Unauthorized);
    let r = conn.request(Request::Read { ledger_id: 8, entry_id: 0, fence: None }).await.unwrap();
    assert_eq!(r.status, Status::NoLedger);
    let r = conn.request(Request::ForceLedger { ledger_id: 7 }).await.unwrap();
    assert_eq!(r.status, Status::Ok);
    let r = conn.request(Request::GetBookieInfo).await.unwrap();
    let Response::GetBookieInfo { space: Some((total, free)) } = r.response else {
        panic!("{r:?}")
    };
    assert!(total > 0 && free <= total);
    bookie.shutdown().await.unwrap();
}

fn cookie_error(r: Result<Bookie, BookieError>) -> String {
    match r {
        Err(e @ BookieError::Cookie { .. }) => e.to_string(),
        Err(e) => panic!("expected a cookie error, got {e}"),
        Ok(_) => panic!("the bookie started"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_mismatches_refuse_to_start_and_name_the_dir() {
    let env = new_env();
    let c = config(&env.data);
    let bookie = Bookie::start(c.clone(), env.meta.clone()).await.unwrap();
    bookie.shutdown().await.unwrap();
    let ledger_dir = c.storage.ledger_dir.display().to_string();
    let journal_dir = c.storage.journal_dir.display().to_string();

    // Another cluster's metadata store: it has no cookie for this bookie.
    let other: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&env.data.with_extension("other")).unwrap());
    let msg = cookie_error(Bookie::start(c.clone(), other).await);
    assert!(msg.contains(&journal_dir) && msg.contains("metadata store has none"), "{msg}");

    // A tampered cookie in the ledger dir.
    let path = c.storage.ledger_dir.join("VERSION");
    let original = std::fs::read_to_string(&path).unwrap();
    let tampered: String = original
        .lines()
        .map(|l| {
            if l.starts_with("instance_id=") {
                "instance_id=someone-else".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, tampered + "\n").unwrap();
    let msg = cookie_error(Bookie::start(c.clone(), env.meta.clone()).await);
    assert!(msg.contains(&ledger_dir) && msg.contains("instance_id"), "{msg}");
    std::fs::write(&path, &original).unwrap();

    // A wiped ledger dir.
    std::fs::remove_dir_all(&c.storage.ledger_dir).unwrap();
    let msg = cookie_error(Bookie::start(c.clone(), env.meta.clone()).await);
    assert!(msg.contains(&ledger_dir) && msg.contains("missing"), "{msg}");

    // A cookie of another cluster id.
    let env2 = new_env();
    let b = Bookie::start(config(&env2.data), env2.meta.clone()).await.unwrap();
    b.shutdown().await.unwrap();
    let keys = Keys::default();
    env2.meta
        .put(&keys.cluster_id(), Bytes::from_static(b"another-cluster"), folio_meta::Expect::Any)
        .await
        .unwrap();
    let msg = cookie_error(Bookie::start(config(&env2.data), env2.meta.clone()).await);
    assert!(msg.contains("cluster"), "{msg}");

    // A dir with data but no cookie anywhere.
    let env3 = new_env();
    let c3 = config(&env3.data);
    std::fs::create_dir_all(&c3.storage.ledger_dir).unwrap();
    std::fs::write(c3.storage.ledger_dir.join("stray.log"), b"old data").unwrap();
    let msg = cookie_error(Bookie::start(c3.clone(), env3.meta.clone()).await);
    assert!(
        msg.contains(&c3.storage.ledger_dir.display().to_string()) && msg.contains("format"),
        "{msg}"
    );
}

#[derive(Debug)]
struct FakeUsage(AtomicU64);

impl DiskUsage for FakeUsage {
    fn usage(&self, _dir: &std::path::Path) -> std::io::Result<f64> {
        Ok(self.0.load(Ordering::SeqCst) as f64 / 100.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_mode_follows_disk_usage_thresholds() {
    let env = new_env();
    let mut c = config(&env.data);
    c.disk_check_interval = Duration::from_millis(10);
    let usage = Arc::new(FakeUsage(AtomicU64::new(50)));
    let keys = Keys::default();
    let mut watch = env.meta.watch(&format!("{}/bookies/", keys.root()), 0).await.unwrap();
    let bookie = Bookie::start_with(c, env.meta.clone(), usage.clone()).await.unwrap();
    let conn = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    let next_put = async |w: &mut folio_meta::Watch| loop {
        let e = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if e.kind == EventKind::Put {
            return e.key;
        }
    };
    assert_eq!(next_put(&mut watch).await, keys.bookie("bookie-1", false));
    assert_eq!(add(&conn, entry(1, 0, b"a"), false).await, Status::Ok);

    usage.0.store(96, Ordering::SeqCst); // above the 0.95 threshold
    assert_eq!(next_put(&mut watch).await, keys.bookie("bookie-1", true));
    assert!(bookie.is_read_only());
    assert_eq!(add(&conn, entry(1, 1, b"b"), false).await, Status::ReadOnly);
    assert_eq!(add(&conn, entry(1, 1, b"b"), true).await, Status::Ok, "recovery adds still land");

    usage.0.store(92, Ordering::SeqCst); // between the marks: stays read-only
    usage.0.store(80, Ordering::SeqCst); // below the 0.90 low-water mark
    assert_eq!(next_put(&mut watch).await, keys.bookie("bookie-1", false));
    assert_eq!(add(&conn, entry(1, 2, b"c"), false).await, Status::Ok);
    assert!(env.meta.get(&keys.bookie("bookie-1", true)).await.unwrap().is_none());
    bookie.shutdown().await.unwrap();
}

#[derive(Debug)]
struct BrokenProbe;

impl DiskUsage for BrokenProbe {
    fn usage(&self, _dir: &std::path::Path) -> std::io::Result<f64> {
        Err(std::io::Error::other("statvfs: input/output error"))
    }
}

/// Waits for the next put under the bookies prefix; returns its key.
async fn next_registration(w: &mut folio_meta::Watch) -> String {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("a registration change")
            .unwrap()
            .unwrap();
        if e.kind == EventKind::Put {
            return e.key;
        }
    }
}

/// A disk error leaves the writable set at once: a failed fsync poisons the storage and
/// the registration moves to read-only without waiting for the next disk check (here an
/// hour away); the reason is on the bookie for `/health`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_moves_the_bookie_out_of_the_writable_set_at_once() {
    let env = new_env();
    let mut c = config(&env.data);
    c.disk_check_interval = Duration::from_secs(3600);
    let keys = Keys::default();
    let mut watch = env.meta.watch(&format!("{}/bookies/", keys.root()), 0).await.unwrap();
    let fs = folio_bookie::fs::FaultFs::new();
    let mount = fs.mount();
    let usage = Arc::new(FakeUsage(AtomicU64::new(10)));
    let bookie = Bookie::start_on(c, env.meta.clone(), usage, move |sc| {
        let kv = Arc::new(folio_bookie::index::MemKv::new());
        folio_bookie::Storage::open(sc, Arc::new(mount), kv)
    })
    .await
    .unwrap();
    assert_eq!(next_registration(&mut watch).await, keys.bookie("bookie-1", false));
    let conn = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    assert_eq!(add(&conn, entry(1, 0, b"a"), false).await, Status::Ok);
    fs.fail_sync_after(0);
    assert_eq!(add(&conn, entry(1, 1, b"b"), false).await, Status::Io);
    assert_eq!(next_registration(&mut watch).await, keys.bookie("bookie-1", true));
    assert!(bookie.is_read_only());
    let why = bookie.read_only_reason().unwrap();
    assert!(why.contains("poisoned") && why.contains("fdatasync"), "{why}");
    assert_eq!(add(&conn, entry(1, 2, b"c"), false).await, Status::ReadOnly);
    bookie.abort().await;
}

/// A disk that cannot say how full it is gets no new data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_disk_probe_counts_as_read_only_not_as_empty() {
    let env = new_env();
    let keys = Keys::default();
    let mut watch = env.meta.watch(&format!("{}/bookies/", keys.root()), 0).await.unwrap();
    let bookie = Bookie::start_with(config(&env.data), env.meta.clone(), Arc::new(BrokenProbe))
        .await
        .unwrap();
    assert_eq!(next_registration(&mut watch).await, keys.bookie("bookie-1", false));
    assert_eq!(next_registration(&mut watch).await, keys.bookie("bookie-1", true));
    let why = bookie.read_only_reason().unwrap();
    assert!(why.contains("probe failed"), "{why}");
    bookie.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_shutdown_removes_dirty_and_a_dropped_bookie_leaves_it() {
    let env = new_env();
    let c = config(&env.data);
    let dirty = c.storage.ledger_dir.join("DIRTY");
    let b = Bookie::start(c.clone(), env.meta.clone()).await.unwrap();
    assert!(dirty.exists());
    assert!(!b.unclean_shutdown());
    b.shutdown().await.unwrap();
    assert!(!dirty.exists());
    let b = Bookie::start(c.clone(), env.meta.clone()).await.unwrap();
    assert!(!b.unclean_shutdown());
    b.abort().await; // no clean shutdown
    let b = Bookie::start(c.clone(), env.meta.clone()).await.unwrap();
    assert!(b.unclean_shutdown(), "the DIRTY marker reports the unclean stop");
    b.shutdown().await.unwrap();
}

/// The disk as the data files fill it (entry logs in two-write mode, the journal's files in
/// single-write mode): their bytes against a small capacity.
#[derive(Debug)]
struct DataFileBytes {
    capacity: u64,
    dirs: Vec<std::path::PathBuf>,
}

impl DataFileBytes {
    /// The data files of `c`'s mode; single-write compaction copies live entries of the
    /// journal's files into entry logs.
    fn of(c: &BookieConfig, capacity: u64) -> DataFileBytes {
        let mut dirs = vec![c.storage.ledger_dir.join("entrylogs")];
        if c.storage.mode == folio_bookie::StorageMode::SingleWrite {
            dirs.push(c.storage.journal_dir.clone());
        }
        DataFileBytes { capacity, dirs }
    }
}

impl DiskUsage for DataFileBytes {
    fn usage(&self, _ledger_dir: &std::path::Path) -> std::io::Result<f64> {
        let mut bytes = 0;
        for dir in self.dirs.iter().filter(|d| d.exists()) {
            for e in std::fs::read_dir(dir)? {
                bytes += e?.metadata()?.len();
            }
        }
        Ok(bytes as f64 / self.capacity as f64)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_a_full_disk_bookie_still_collects_garbage_and_becomes_writable_again() {
    use folio_meta::Expect;
    use folio_meta::records::{LedgerState, Record};
    let env = new_env();
    let mut c = config(&env.data);
    c.disk_check_interval = Duration::from_millis(10);
    c.gc.interval = Duration::from_millis(20);
    c.storage.flush_interval = Duration::from_millis(10);
    c.storage.entry_log_bytes_max = 1024 * 1024;
    c.storage.entry_log_per_ledger = true;
    // Single-write: the five ledgers share every data file (no per-ledger files), so space
    // comes back by compacting files as small as the entry logs, on every pass.
    c.storage.journal.file_bytes_max = 1024 * 1024;
    c.gc.minor_threshold = 0.5;
    c.gc.minor_interval = Duration::from_millis(20);
    let keys = Keys::default();
    let ledger_meta = on_bookie_1(LedgerState::Closed);
    let mut watch = env.meta.watch(&format!("{}/bookies/", keys.root()), 0).await.unwrap();
    let usage = Arc::new(DataFileBytes::of(&c, 8 * 1024 * 1024));
    let bookie = Bookie::start_with(c, env.meta.clone(), usage).await.unwrap();
    // (Created after the bookie's first start: ledgers naming a bookie id that starts
    // empty would be fenced by its pre-boot check.)
    for l in 1..=5 {
        env.meta.put(&keys.ledger(l), ledger_meta.encode(), Expect::Any).await.unwrap();
    }
    let conn = BookieConnection::connect(bookie.addr(), 64).await.unwrap();
    // Fill the disk: ledgers 1-5 get 64 KiB entries until the bookie turns read-only.
    let payload = vec![1u8; 64 * 1024];
    let mut refused = false;
    'fill: for e in 0..1000 {
        for l in 1..=5u64 {
            match add(&conn, entry(l, e, &payload), false).await {
                Status::Ok => {}
                Status::ReadOnly => {
                    refused = true;
                    break 'fill;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(refused, "the disk filled up and adds were refused");
    assert!(bookie.is_read_only());
    // Ledgers 1-4 are deleted; GC runs although the bookie is read-only.
    for l in 1..=4 {
        env.meta.delete(&keys.ledger(l), Expect::Any).await.unwrap();
    }
    // Registrations in order: writable (start), read-only (disk full), writable (freed).
    let mut puts = Vec::new();
    while puts.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("registration changes")
            .unwrap()
            .unwrap();
        if ev.kind == EventKind::Put {
            puts.push(ev.key);
        }
    }
    assert_eq!(
        puts,
        vec![
            keys.bookie("bookie-1", false),
            keys.bookie("bookie-1", true),
            keys.bookie("bookie-1", false)
        ]
    );
    // Turning writable says only that some space came back. The assertion is about GC's
    // passes: one that began after the deletions (the one running now may have listed the
    // ledgers before them) has dropped them all.
    bookie.gc_passes_after(2).await;
    assert_eq!(
        bookie.storage().ledger_ids(),
        vec![5],
        "GC dropped the deleted ledgers while read-only"
    );
    assert_eq!(add(&conn, entry(5, 10_000, b"room again"), false).await, Status::Ok);
    bookie.shutdown().await.unwrap();
}

/// D2, BookKeeper #2612: a bookie whose disk is formatted while ledgers still name it and
/// that restarts under the same id starts empty. `format` refuses unless told the bookie is
/// decommissioned; the restarted bookie (journal on) fences and puts in limbo what it held
/// before serving, so it answers UNKNOWN, never "no such entry", and zombie adds are
/// fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_formatted_bookie_restarted_under_a_known_id_is_fenced_and_in_limbo() {
    use folio_meta::Expect;
    use folio_meta::records::{LedgerState, Record};
    let env = new_env();
    let keys = Keys::default();
    let c = config(&env.data);
    assert!(c.storage.journal.write_data, "a bookie with its journal");
    let open_ledger = on_bookie_1(LedgerState::Open);
    let bookie = Bookie::start(c.clone(), env.meta.clone()).await.unwrap();
    assert!(!bookie.needs_integrity_check(), "a new bookie that no ledger names");
    env.meta.put(&keys.ledger(7), open_ledger.encode(), Expect::Absent).await.unwrap();
    let conn = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    for e in 0..3 {
        assert_eq!(add(&conn, entry(7, e, b"x"), false).await, Status::Ok);
    }
    bookie.shutdown().await.unwrap();
    let refused = folio_bookie::bookie::format(&c, env.meta.as_ref(), "bookie-1", true, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("ensembles of 1 ledgers") && refused.contains("--decommissioned"),
        "{refused}"
    );
    assert!(env.data.join("ledgers").join("VERSION").exists(), "a refused format erases nothing");
    folio_bookie::bookie::format(&c, env.meta.as_ref(), "bookie-1", true, true).await.unwrap();
    let bookie = Bookie::start(c, env.meta.clone()).await.unwrap();
    assert!(bookie.needs_integrity_check(), "the pre-boot check ran");
    let conn = BookieConnection::connect(bookie.addr(), 16).await.unwrap();
    let r = conn.request(Request::Read { ledger_id: 7, entry_id: 1, fence: None }).await.unwrap();
    assert_eq!(r.status, Status::Unknown, "limbo: not 'no such entry' for what it held");
    // The fence holds the master key of the ledger's metadata (no password here).
    let zombie = Request::Add {
        master_key: folio_proto::wire::master_key(b""),
        recovery: false,
        entry: entry(7, 3, b"zombie"),
    };
    assert_eq!(conn.request(zombie).await.unwrap().status, Status::Fenced);
    bookie.shutdown().await.unwrap();
}
