//! Replicated ledgers against real bookies in one process (embedded metadata store).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use folio_bookie::bookie::{Bookie, BookieConfig, DiskUsage};
use folio_client::{CreateOptions, LedgerClient, LedgerError, LedgerWriter, master_key};
use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;
use folio_meta::records::LedgerState;
use folio_proto::Status;
use folio_proto::wire::{Request, Response};

#[derive(Debug)]
struct Usage(AtomicU64);

impl DiskUsage for Usage {
    fn usage(&self, _: &std::path::Path) -> std::io::Result<f64> {
        Ok(self.0.load(Ordering::SeqCst) as f64 / 100.0)
    }
}

struct Cluster {
    _tmp: tempfile::TempDir,
    meta: Arc<dyn MetadataStore>,
    bookies: Vec<Bookie>,
}

async fn cluster(n: usize, read_only: &[usize]) -> Cluster {
    let tmp = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&tmp.path().join("meta")).unwrap());
    let mut bookies = Vec::new();
    for i in 0..n {
        let mut c = BookieConfig::new(
            tmp.path().join(format!("bookie-{i}")),
            "127.0.0.1:0".parse().unwrap(),
        );
        c.bookie_id = Some(format!("bookie-{i}"));
        c.storage.write_cache_bytes = 16 * 1024 * 1024;
        let usage = Arc::new(Usage(AtomicU64::new(if read_only.contains(&i) { 99 } else { 10 })));
        bookies.push(Bookie::start_with(c, meta.clone(), usage).await.unwrap());
    }
    Cluster { _tmp: tmp, meta, bookies }
}

fn payload(e: u64) -> Vec<u8> {
    format!("entry-{e}-").repeat(1 + (e % 7) as usize).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_pipelined_adds_complete_in_order_and_read_back_after_close() {
    let c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = Arc::new(client.create(CreateOptions::new(3, 2, 2)).await.unwrap());
    let mut adds = Vec::new();
    for i in 0..400u64 {
        let w = w.clone();
        adds.push(tokio::spawn(async move { (i, w.add(&payload(i)).await.unwrap()) }));
    }
    let mut ids = Vec::new();
    for a in adds {
        let (_, id) = a.await.unwrap();
        assert!(id <= w.last_add_confirmed(), "an add completes only once it is confirmed");
        ids.push(id);
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..400).collect::<Vec<_>>(), "every add got its own entry id");
    assert_eq!(w.close().await.unwrap(), 399);
    let r = client.open(w.id()).await.unwrap();
    assert_eq!(r.metadata().state, LedgerState::Closed);
    assert_eq!(r.last_entry_id(), Some(399));
    let mut total = 0;
    for e in 0..400 {
        let entry = r.read(e).await.unwrap();
        total += entry.payload().len() as u64;
        assert!(entry.last_add_confirmed() < e, "the piggybacked LAC is always behind the entry");
    }
    assert_eq!(r.metadata().length, total, "closed length counts every payload byte");
    assert!(matches!(r.read(400).await, Err(LedgerError::PastEnd { .. })));
    assert_eq!(client.list().await.unwrap(), vec![w.id()]);
    assert!(matches!(w.add(b"late").await, Err(LedgerError::Closed(_))));
    client.delete(w.id()).await.unwrap();
    assert!(matches!(client.open(w.id()).await, Err(LedgerError::NoSuchLedger(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_striped_exactly_over_their_write_sets() {
    let c = cluster(4, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(4, 3, 2)).await.unwrap();
    for i in 0..40 {
        w.add(&payload(i)).await.unwrap();
    }
    let id = w.id();
    let ensemble = w.metadata().ensembles[&0].clone();
    w.close().await.unwrap();
    for (pos, bookie_id) in ensemble.iter().enumerate() {
        let b = c.bookies.iter().find(|b| b.id() == bookie_id).unwrap();
        let conn = folio_client::BookieConnection::connect(b.addr(), 8).await.unwrap();
        let r = conn.request(Request::ListEntries { ledger_id: id }).await.unwrap();
        let Response::ListEntries { ranges, .. } = r.response else { panic!() };
        let have: Vec<i64> = ranges.iter().flat_map(|(f, n)| *f..*f + i64::from(*n)).collect();
        let want: Vec<i64> =
            (0..40i64).filter(|e| (0..3).any(|i| ((e + i) % 4) as usize == pos)).collect();
        assert_eq!(have, want, "bookie at ensemble position {pos}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_qa_below_qw_a_dead_bookie_does_not_stop_writes_or_reads() {
    let mut c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    for i in 0..10 {
        w.add(&payload(i)).await.unwrap();
    }
    c.bookies.remove(1).abort().await;
    for i in 10..30 {
        w.add(&payload(i)).await.unwrap();
    }
    let lac = w.close().await.unwrap();
    assert_eq!(lac, 29);
    let r = client.open(w.id()).await.unwrap();
    for e in 0..30u64 {
        assert_eq!(r.read(e as i64).await.unwrap().payload(), &payload(e)[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_reads_of_a_fully_replicated_ledger_ask_one_bookie_until_it_fails() {
    // Sticky reads: with E = Qw every bookie holds every entry; spreading a sequential
    // reader over them makes each read the same span ahead (3x the bytes read).
    let mut c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    for i in 0..60u64 {
        w.add(&payload(i)).await.unwrap();
    }
    w.close().await.unwrap();
    let requests = |c: &Cluster| {
        c.bookies.iter().map(|b| b.stats().requests.load(Ordering::SeqCst)).collect::<Vec<_>>()
    };
    let r = client.open(w.id()).await.unwrap();
    let before = requests(&c);
    for e in 0..30u64 {
        assert_eq!(r.read(e as i64).await.unwrap().payload(), &payload(e)[..]);
    }
    let asked: Vec<u64> = requests(&c).iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(asked.iter().filter(|n| **n > 0).count(), 1, "one bookie served: {asked:?}");
    assert_eq!(asked.iter().sum::<u64>(), 30, "one request per entry: {asked:?}");
    // The sticky bookie goes: reads go on from another, and stay there.
    let sticky = asked.iter().position(|n| *n > 0).unwrap();
    c.bookies.remove(sticky).abort().await;
    for e in 30..60u64 {
        assert_eq!(r.read(e as i64).await.unwrap().payload(), &payload(e)[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_never_picks_a_read_only_bookie() {
    let c = cluster(3, &[1]).await;
    let keys = Keys::default();
    // Wait until the disk monitor moved bookie-1 to the read-only list.
    let mut watch = c.meta.watch(&keys.bookies_readonly(), 1).await.unwrap();
    if c.meta.get(&keys.bookie("bookie-1", true)).await.unwrap().is_none() {
        watch.next().await.unwrap().unwrap();
    }
    let client = LedgerClient::new(c.meta.clone(), keys);
    for _ in 0..20 {
        let w = client.create(CreateOptions::new(2, 2, 2)).await.unwrap();
        assert!(!w.metadata().ensembles[&0].contains(&"bookie-1".to_string()));
    }
    let e = client.create(CreateOptions::new(3, 2, 2)).await.unwrap_err();
    assert!(matches!(e, LedgerError::NotEnoughBookies { need: 3, have: 2 }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_a_fenced_ledger_stops_its_writer_and_bad_options_are_refused() {
    let c = cluster(2, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    assert!(matches!(
        client.create(CreateOptions::new(2, 3, 2)).await,
        Err(LedgerError::InvalidQuorum(_))
    ));
    let w = client.create(CreateOptions::new(2, 2, 2)).await.unwrap();
    w.add(b"before").await.unwrap();
    // A recovering client fences the ledger on both bookies with a fencing read.
    for b in &c.bookies {
        let conn = folio_client::BookieConnection::connect(b.addr(), 8).await.unwrap();
        let r = conn
            .request(Request::Read {
                ledger_id: w.id(),
                entry_id: -1,
                fence: Some(master_key(w.metadata().password.as_deref().unwrap_or_default())),
            })
            .await
            .unwrap();
        assert_eq!(r.status, Status::Ok);
    }
    let e = w.add(b"zombie").await.unwrap_err();
    assert!(matches!(e, LedgerError::Fenced(_)), "{e}");
    let e = w.add(b"again").await.unwrap_err();
    assert!(matches!(e, LedgerError::WriterFailed(..)), "{e}");
}

/// An add with `w`'s key (its writer's, from the ledger's password) straight to a bookie.
async fn raw_add(b: &Bookie, w: &LedgerWriter, entry: bytes::Bytes) -> Status {
    let master_key = master_key(w.metadata().password.as_deref().unwrap_or_default());
    let conn = folio_client::BookieConnection::connect(b.addr(), 8).await.unwrap();
    conn.request(Request::Add { master_key, recovery: false, entry }).await.unwrap().status
}

fn entry_bytes(ledger: u64, e: i64, lac: i64) -> bytes::Bytes {
    let h = folio_proto::EntryHeader {
        ledger_id: ledger,
        entry_id: e,
        last_add_confirmed: lac,
        length: 1000 + e as u64,
    };
    folio_proto::Entry::encode(h, &payload(e as u64)).into_bytes()
}

fn bookie<'a>(c: &'a Cluster, id: &str) -> &'a Bookie {
    c.bookies.iter().find(|b| b.id() == id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_d3_recovery_keeps_every_acknowledged_entry_and_fences_the_writer() {
    let c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
    for i in 0..50 {
        w.add(&payload(i)).await.unwrap();
    }
    // The writer "dies" without closing; another client recovers the ledger.
    let r = client.recover(w.id()).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(49), "every acknowledged entry is at or below the end");
    for e in 0..50u64 {
        assert_eq!(r.read(e as i64).await.unwrap().payload(), &payload(e)[..]);
    }
    // The zombie writer can never add again.
    let e = w.add(b"zombie").await.unwrap_err();
    assert!(matches!(e, LedgerError::Fenced(_)), "{e}");
    // Recovering a closed ledger changes nothing.
    assert_eq!(client.recover(w.id()).await.unwrap().last_entry_id(), Some(49));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_an_entry_on_one_bookie_only_is_recovered_and_written_back() {
    let c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    for i in 0..5 {
        w.add(&payload(i)).await.unwrap();
    }
    // Entry 5 reached only one bookie before the writer died: not acknowledged, but present.
    let ensemble = w.metadata().ensembles[&0].clone();
    assert_eq!(raw_add(bookie(&c, &ensemble[2]), &w, entry_bytes(w.id(), 5, 4)).await, Status::Ok);
    let r = client.recover(w.id()).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(5), "a positive entry is kept, never dropped");
    for b in &ensemble {
        let conn = folio_client::BookieConnection::connect(bookie(&c, b).addr(), 8).await.unwrap();
        let f = conn
            .request(Request::Read { ledger_id: w.id(), entry_id: 5, fence: None })
            .await
            .unwrap();
        assert_eq!(f.status, Status::Ok, "entry 5 was written back to {b}");
    }
    assert_eq!(r.metadata().length, 1005, "length from the last entry's header");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_bookie_in_limbo_never_truncates_an_acknowledged_entry() {
    let mut c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    let id = w.id();
    for i in 0..9 {
        w.add(&payload(i)).await.unwrap();
    }
    let ensemble = w.metadata().ensembles[&0].clone();
    // Entry 9 was acknowledged by bookies 1 and 2 (Qa = 2); bookie 0 never got it. Bookie 2
    // then lost it in a journal-less crash: it keeps entries 0-8 and is in limbo for the
    // ledger (so it answers UNKNOWN, not NO_ENTRY, for entry 9).
    assert_eq!(raw_add(bookie(&c, &ensemble[1]), &w, entry_bytes(id, 9, 8)).await, Status::Ok);
    bookie(&c, &ensemble[2]).storage().set_limbo(id, true).unwrap();
    // Bookie 1, the other holder, is down.
    let i1 = c.bookies.iter().position(|b| b.id() == ensemble[1]).unwrap();
    let dir = c._tmp.path().join(format!("bookie-{}", &ensemble[1]["bookie-".len()..]));
    c.bookies.remove(i1).abort().await;
    // Bookie 0 says "no entry 9", bookie 2 says "unknown", bookie 1 is silent: recovery must
    // not treat that as the end (which would lose acknowledged entry 9).
    let e = client.recover(id).await.unwrap_err();
    assert!(e.to_string().contains("cannot decide entry 9"), "{e}");
    assert_eq!(client.metadata(id).await.unwrap().state, LedgerState::InRecovery);
    // Bookie 1 comes back: now entry 9 is found and kept.
    let mut cfg = BookieConfig::new(dir, "127.0.0.1:0".parse().unwrap());
    cfg.bookie_id = Some(ensemble[1].clone());
    c.bookies.push(Bookie::start(cfg, c.meta.clone()).await.unwrap());
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let r = client.recover(id).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(9));
    assert_eq!(r.read(9).await.unwrap().payload(), &payload(9)[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_recoveries_agree_on_the_end() {
    let c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
    for i in 0..30 {
        w.add(&payload(i)).await.unwrap();
    }
    let (a, b) = (client.clone(), LedgerClient::new(c.meta.clone(), Keys::default()));
    let id = w.id();
    let (ra, rb) = tokio::join!(a.recover(id), b.recover(id));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.last_entry_id(), rb.last_entry_id());
    assert_eq!(client.metadata(id).await.unwrap().last_entry_id, 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_bookie_killed_while_writing_is_replaced_and_nothing_acknowledged_is_lost() {
    let mut c = cluster(4, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = Arc::new(client.create(CreateOptions::new(3, 2, 2)).await.unwrap());
    let victim = w.metadata().ensembles[&0][1].clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = {
        let w = w.clone();
        tokio::spawn(async move {
            let mut inflight = tokio::task::JoinSet::new();
            for i in 0..300u64 {
                let w = w.clone();
                let tx = tx.clone();
                inflight.spawn(async move {
                    let id = w.add(&payload(i)).await.unwrap();
                    let _ = tx.send((id, i));
                });
                if inflight.len() >= 32 {
                    inflight.join_next().await.unwrap().unwrap();
                }
            }
            while let Some(r) = inflight.join_next().await {
                r.unwrap();
            }
        })
    };
    let mut acked = Vec::new();
    while acked.len() < 100 {
        acked.push(rx.recv().await.unwrap());
    }
    let i = c.bookies.iter().position(|b| b.id() == victim).unwrap();
    c.bookies.remove(i).abort().await;
    writer.await.unwrap();
    while let Ok(a) = rx.try_recv() {
        acked.push(a);
    }
    assert_eq!(acked.len(), 300, "every add succeeded despite the dead bookie");
    let m = w.metadata();
    assert!(m.ensembles.len() >= 2, "an ensemble change happened: {:?}", m.ensembles);
    assert!(
        !m.ensembles.last_key_value().unwrap().1.contains(&victim),
        "the dead bookie was replaced"
    );
    w.close().await.unwrap();
    let r = client.open(w.id()).await.unwrap();
    for (id, i) in acked {
        assert_eq!(r.read(id).await.unwrap().payload(), &payload(i)[..], "acknowledged entry {id}");
    }
}

/// BookKeeper #2615 (found with TLA+): after an ensemble change, recovery that starts from
/// the LAC reported by the *last* fragment's bookies (none: they have nothing) would read
/// entry 0 against that fragment, find it "missing" and close the ledger empty, losing
/// every entry. Recovery must start no earlier than the last fragment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bk_2615_recovery_never_starts_before_the_last_fragment() {
    let c = cluster(4, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(2, 2, 2)).await.unwrap();
    for i in 0..10 {
        w.add(&payload(i)).await.unwrap();
    }
    // The writer changed its ensemble to the two other bookies from entry 10 on, then died
    // before writing anything there.
    let first = w.metadata().ensembles[&0].clone();
    let others: Vec<String> =
        c.bookies.iter().map(|b| b.id().to_string()).filter(|b| !first.contains(b)).collect();
    let keys = Keys::default();
    folio_meta::records::update::<folio_meta::records::LedgerMetadata>(
        c.meta.as_ref(),
        &keys.ledger(w.id()),
        |m| {
            let mut m = m.unwrap().clone();
            m.ensembles.insert(10, others.clone());
            Ok(folio_meta::records::Update::Write(m))
        },
    )
    .await
    .unwrap();
    let r = client.recover(w.id()).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(9), "the ten acknowledged entries are kept");
    for i in 0..10u64 {
        assert_eq!(r.read(i as i64).await.unwrap().payload(), &payload(i)[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_lac_lets_a_tailing_reader_see_the_last_entry() {
    let c = cluster(3, &[]).await;
    let meta = c.meta.clone();
    let writer_client = LedgerClient::new(meta.clone(), Keys::default())
        .with_explicit_lac_interval(Some(std::time::Duration::from_millis(20)));
    let w = writer_client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
    let reader_client = LedgerClient::new(meta, Keys::default());
    let mut r = reader_client.open(w.id()).await.unwrap();
    for i in 0..5 {
        w.add(&payload(i)).await.unwrap();
    }
    // Piggybacked LACs alone say 3 (entry 4 carries LAC 3); the explicit LAC says 4.
    let lac = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        r.wait_for_lac(3, std::time::Duration::from_millis(5)),
    )
    .await
    .expect("the explicit LAC arrives")
    .unwrap();
    assert_eq!(lac, 4);
    assert_eq!(r.read(4).await.unwrap().payload(), &payload(4)[..]);
    // Once closed, the tailing reader learns the end from the metadata.
    w.close().await.unwrap();
    assert_eq!(r.wait_for_lac(4, std::time::Duration::from_millis(5)).await.unwrap(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_explicit_lac_the_last_entry_stays_unconfirmed_to_readers() {
    let c = cluster(3, &[]).await;
    let client =
        LedgerClient::new(c.meta.clone(), Keys::default()).with_explicit_lac_interval(None);
    let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
    for i in 0..5 {
        w.add(&payload(i)).await.unwrap();
    }
    let r = client.open(w.id()).await.unwrap();
    assert_eq!(r.read_lac().await.unwrap(), 3, "only the piggybacked LAC is known");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_a_deleted_ledger_is_dropped_by_every_bookie_gc() {
    let c = cluster(3, &[]).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let keep = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    let gone = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    for i in 0..20 {
        keep.add(&payload(i)).await.unwrap();
        gone.add(&payload(i)).await.unwrap();
    }
    keep.close().await.unwrap();
    gone.close().await.unwrap();
    client.delete(gone.id()).await.unwrap();
    for b in &c.bookies {
        let r = b.gc_now().await.unwrap();
        assert_eq!(r.ledgers_dropped, vec![gone.id()], "bookie {}", b.id());
        assert!(!b.storage().ledger_exists(gone.id()));
        assert!(b.storage().ledger_exists(keep.id()));
    }
    let r = client.open(keep.id()).await.unwrap();
    assert_eq!(r.read(19).await.unwrap().payload(), &payload(19)[..]);
}
