//! The replica check on real bookies (#23 item 4).

use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;
use folio_testkit::Cluster;

/// #23 item 4: `check_replicas` reads each entry from each bookie of its write set; with
/// one bookie down it names exactly the copies that bookie holds.
#[tokio::test]
async fn a_replica_check_names_every_copy_a_down_bookie_holds() {
    let mut c = Cluster::start(3).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_millis(500));
    let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
    for i in 0..20u64 {
        w.add(format!("entry {i}").as_bytes()).await.unwrap();
    }
    w.close().await.unwrap();
    let r = client.open(w.id()).await.unwrap();
    let whole = r.check_replicas().await.unwrap();
    assert_eq!((whole.entries, whole.copies, whole.missing.len()), (20, 40, 0));
    let ensemble = w.metadata().ensembles[&0].clone();
    let down = ensemble[1].clone();
    c.node(&down).kill().await;
    let got = r.check_replicas().await.unwrap();
    // Entry e is on positions e mod 3 and (e + 1) mod 3: position 1 for e = 0, 1 (mod 3).
    let want: Vec<i64> = (0..20).filter(|e| e % 3 == 0 || e % 3 == 1).collect();
    let named: Vec<i64> = got.missing.iter().map(|m| m.entry_id).collect();
    assert_eq!(named, want, "{:?}", got.missing);
    assert!(got.missing.iter().all(|m| m.bookie == down), "{:?}", got.missing);
    assert_eq!(got.copies, 40);
}
