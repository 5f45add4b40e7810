//! #26, item 4: an append that is never acknowledged is never silent. With per-request
//! timeouts far beyond the stall bound, a bookie that takes an add and never answers is
//! found only by the stalled-add watchdog (`ledger/stall.rs`): the add is counted and
//! logged with its bookies, the silent bookie is replaced, and the add is confirmed
//! through the replacement; when the replacement is silent too, the writer fails instead
//! of hanging.

use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient, LedgerError, WriterFailure, adds_stalled_total};
use folio_meta::keys::Keys;
use folio_testkit::{Cluster, Fault};

fn client(c: &Cluster) -> LedgerClient {
    folio_testkit::trace();
    LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_secs(3600))
        .with_add_stall_after(Some(Duration::from_millis(300)))
}

#[tokio::test]
async fn a_stalled_add_is_reported_and_confirmed_through_a_replacement_bookie() {
    let mut c = Cluster::start(3).await;
    let w = client(&c).create(CreateOptions::new(2, 2, 2)).await.unwrap();
    assert_eq!(w.add(b"before").await.unwrap(), 0);
    let ensemble = w.metadata().ensembles[&0].clone();
    let silent = ensemble[1].clone();
    c.node(&silent).link.set_fault(Fault::Hold);
    let before = adds_stalled_total();
    let e = tokio::time::timeout(Duration::from_secs(120), w.add(b"during"))
        .await
        .expect("the stalled add is confirmed, long before the request timeout")
        .unwrap();
    assert_eq!(e, 1);
    assert!(adds_stalled_total() > before, "the stall was counted");
    let m = w.metadata();
    let last = m.ensembles.values().last().unwrap();
    assert!(!last.contains(&silent), "{silent} replaced: {:?}", m.ensembles);
    c.node(&silent).link.set_fault(Fault::Pass);
    w.close().await.unwrap();
    let r = client(&c).open(w.id()).await.unwrap();
    assert_eq!(r.read(0).await.unwrap().payload(), b"before");
    assert_eq!(r.read(1).await.unwrap().payload(), b"during");
}

#[tokio::test]
async fn a_stalled_add_that_a_replacement_cannot_confirm_fails_the_writer() {
    let mut c = Cluster::start(3).await;
    let w = client(&c).create(CreateOptions::new(2, 2, 2)).await.unwrap();
    w.add(b"before").await.unwrap();
    let ensemble = w.metadata().ensembles[&0].clone();
    // The ensemble's second bookie and the only replacement there is both go silent.
    let spare = c.nodes.iter().map(|n| n.id.clone()).find(|id| !ensemble.contains(id)).unwrap();
    c.node(&ensemble[1]).link.set_fault(Fault::Hold);
    c.node(&spare).link.set_fault(Fault::Hold);
    let got = tokio::time::timeout(Duration::from_secs(120), w.add(b"never"))
        .await
        .expect("the add fails, long before the request timeout");
    match got {
        Err(LedgerError::WriterFailed(_, WriterFailure::AddStalled { entry_id, .. })) => {
            assert_eq!(entry_id, 1)
        }
        other => panic!("expected the writer to fail as stalled, got {other:?}"),
    }
    assert!(w.failure().is_some());
    for n in &c.nodes {
        n.link.set_fault(Fault::Pass);
    }
}
