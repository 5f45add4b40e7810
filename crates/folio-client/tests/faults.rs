//! Seeded network-fault tests of replicated ledgers (D1 acked-is-durable, D3 fenced-is-final).
//!
//! Method: five bookies behind faulty links (folio-testkit); a writer (E=3, Qw=2, Qa=2)
//! keeps adds in flight while a seeded fault driver kills bookies, partitions links (hold),
//! delays and cuts them; in half the seeds the writer then dies with adds in flight. Then
//! everything heals, killed bookies restart on their dirs, and a
//! two clients recover the ledger at once. Checked: they agree on the end; every acknowledged
//! entry is at or below it and reads back byte-identical; the old writer never adds again.
//!
//! The fault schedule is a function of the seed (printed on failure); thread timing is not,
//! so a replay reproduces the schedule, not every interleaving. Run more seeds with
//! `FOLIO_FAULT_SEEDS=a..b` (default 0..5).

use std::sync::Arc;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient, LedgerError};
use folio_meta::keys::Keys;
use folio_testkit::{Cluster, Fault};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn payload(i: u64) -> Vec<u8> {
    format!("payload-{i}-").repeat(1 + (i % 5) as usize).into_bytes()
}

async fn run(seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut c = Cluster::start(5).await;
    let timeout = Duration::from_millis(300);
    let client = LedgerClient::new(c.meta.clone(), Keys::default()).with_request_timeout(timeout);
    let w = Arc::new(client.create(CreateOptions::new(3, 2, 2)).await.unwrap());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = {
        let w = w.clone();
        tokio::spawn(async move {
            let mut inflight = tokio::task::JoinSet::new();
            for i in 0..300u64 {
                let (w, tx) = (w.clone(), tx.clone());
                inflight.spawn(async move {
                    if let Ok(id) = w.add(&payload(i)).await {
                        let _ = tx.send((id, i));
                    }
                });
                if inflight.len() >= 16 {
                    inflight.join_next().await;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            while inflight.join_next().await.is_some() {}
        })
    };
    let mut killed = Vec::new();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..60))).await;
        let n = rng.random_range(0..c.nodes.len());
        match rng.random_range(0..4) {
            0 if killed.len() < 2 && !killed.contains(&n) => {
                c.nodes[n].kill().await;
                killed.push(n);
            }
            1 => {
                c.nodes[n].link.set_fault(Fault::Hold);
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
                c.nodes[n].link.set_fault(Fault::Pass);
            }
            2 => c.nodes[n]
                .link
                .set_fault(Fault::Delay(Duration::from_millis(rng.random_range(5..30)))),
            _ => {
                c.nodes[n].link.set_fault(Fault::Cut);
                tokio::time::sleep(Duration::from_millis(rng.random_range(5..50))).await;
                c.nodes[n].link.set_fault(Fault::Pass);
            }
        }
    }
    let abandoned = rng.random_bool(0.5);
    if abandoned {
        // The writer dies mid-stream, adds in flight.
        writer.abort();
        let _ = writer.await;
    } else {
        tokio::time::timeout(Duration::from_secs(120), writer)
            .await
            .expect("writer finishes")
            .unwrap();
    }
    let mut acked = Vec::new();
    while let Ok(a) = rx.try_recv() {
        acked.push(a);
    }
    // Heal: links pass, killed bookies come back on their dirs.
    for n in &c.nodes {
        n.link.set_fault(Fault::Pass);
    }
    for n in killed {
        let meta = c.meta.clone();
        c.nodes[n].restart(&meta).await;
    }
    let recoverer = LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_secs(2));
    let r = recoverer
        .recover(w.id())
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
    let last = r.last_entry_id().unwrap();
    for (id, i) in &acked {
        assert!(
            *id <= last,
            "seed {seed}: acknowledged entry {id} is past the recovered end {last}"
        );
        let got = r
            .read(*id)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: acknowledged entry {id} unreadable: {e}"));
        assert_eq!(got.payload(), &payload(*i)[..], "seed {seed}: entry {id} differs");
    }
    let zombie = w.add(b"zombie").await;
    assert!(
        matches!(
            zombie,
            Err(LedgerError::Fenced(_) | LedgerError::WriterFailed(..) | LedgerError::Closed(_))
        ),
        "seed {seed}: the old writer added after recovery: {zombie:?}"
    );
    println!(
        "seed {seed}: {} acknowledged, writer {}, recovered end {last}, {} fragments",
        acked.len(),
        if abandoned { "abandoned" } else { "finished" },
        r.metadata().ensembles.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_d3_writes_survive_seeded_kills_partitions_delays_and_cuts() {
    for seed in folio_testkit::seeds("FOLIO_FAULT_SEEDS", 0..5) {
        println!("fault seed {seed}");
        run(seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speculative_read_answers_while_the_first_replica_is_partitioned() {
    let mut c = Cluster::start(3).await;
    // Requests never time out here: only speculation can get past a held replica.
    let client = LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_secs(600))
        .with_speculative_read_timeout(Duration::from_millis(50));
    let w = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    for i in 0..10 {
        w.add(&payload(i)).await.unwrap();
    }
    w.close().await.unwrap();
    let r = client.open(w.id()).await.unwrap();
    let first = w.metadata().ensembles[&0][0].clone();
    c.node(&first).link.set_fault(Fault::Hold);
    let e = tokio::time::timeout(Duration::from_secs(30), r.read(0))
        .await
        .expect("read answered")
        .unwrap();
    assert_eq!(e.payload(), &payload(0)[..]);
    c.node(&first).link.set_fault(Fault::Pass);
}

/// BookKeeper #2614 ("existing fencing not enough to prevent data loss"): a bookie that
/// missed the fencing phase, if recovery then read from it without fencing, could answer
/// "no entry" and afterwards still accept the zombie writer's add, so negative answers were
/// not final. Recovery reads carry the fence flag: the bookie that answers them is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bk_2614_a_bookie_that_missed_the_fence_is_fenced_by_the_recovery_read() {
    let mut c = Cluster::start(3).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(3, 3, 2)).await.unwrap();
    for i in 0..5 {
        w.add(&payload(i)).await.unwrap();
    }
    let late = w.metadata().ensembles[&0][2].clone();
    // The recovering client's first connection to `late` (its fencing read) is refused;
    // its next one (the recovery reads) goes through.
    c.node(&late).link.drop_next_connections(1);
    let recoverer = LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_secs(2));
    let r = recoverer.recover(w.id()).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(4));
    // The zombie's add for entry 5 must now be refused by `late` as well.
    let conn = folio_client::BookieConnection::connect(c.node(&late).link.addr(), 4).await.unwrap();
    let h = folio_proto::EntryHeader {
        ledger_id: w.id(),
        entry_id: 5,
        last_add_confirmed: 4,
        length: 0,
    };
    let zombie = folio_proto::Entry::encode(h, b"zombie").into_bytes();
    // The zombie is the ledger's own writer: it has the ledger's password.
    let key = folio_client::master_key(w.metadata().password.as_deref().unwrap_or_default());
    let f = conn
        .request(folio_proto::wire::Request::Add {
            master_key: key,
            recovery: false,
            entry: zombie,
        })
        .await
        .unwrap();
    assert_eq!(
        f.status,
        folio_proto::Status::Fenced,
        "the bookie that answered a recovery read is fenced"
    );
}
