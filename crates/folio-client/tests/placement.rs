//! #23 item 3 on real bookies: the racks bookies register spread every new ensemble, keep
//! each write set over two racks, and steer a replacement to the failed bookie's rack
//! when the rest of its write set is in the other one.

use std::collections::BTreeSet;

use folio_client::placement::racks_per_write_set_min;
use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;
use folio_testkit::Cluster;

fn rack_of(bookie: &str) -> Option<String> {
    let n: usize = bookie.rsplit('-').next().unwrap().parse().unwrap();
    Some(if n.is_multiple_of(2) { "rack-a" } else { "rack-b" }.to_string())
}

#[tokio::test]
async fn ensembles_and_replacements_respect_racks() {
    folio_testkit::trace();
    let mut c = Cluster::start_with(4, |b| b.rack = rack_of(b.bookie_id.as_deref().unwrap())).await;
    let client = LedgerClient::new(c.meta.clone(), Keys::default());
    for (e, qw) in [(2u16, 2u16), (4, 2), (3, 3)] {
        for _ in 0..10 {
            let w = client.create(CreateOptions::new(e, qw, qw)).await.unwrap();
            let ensemble = w.metadata().ensembles[&0].clone();
            let racks: Vec<Option<String>> = ensemble.iter().map(|b| rack_of(b)).collect();
            assert_eq!(
                racks_per_write_set_min(&racks, qw as usize),
                2,
                "E={e} Qw={qw}: {ensemble:?}"
            );
            let distinct: BTreeSet<_> = ensemble.iter().collect();
            assert_eq!(distinct.len(), e as usize);
        }
    }
    // The registrations carry the rack.
    assert_eq!(client.writable_bookies().await.unwrap().len(), 4);
    // A bookie of an E=2 ensemble dies: its replacement is the other bookie of its rack,
    // never the spare in the surviving member's rack.
    let w = client.create(CreateOptions::new(2, 2, 2)).await.unwrap();
    w.add(b"before").await.unwrap();
    let ensemble = w.metadata().ensembles[&0].clone();
    let dead = ensemble[0].clone();
    c.node(&dead).kill().await;
    w.add(b"after").await.unwrap();
    let m = w.metadata();
    let now = m.ensembles.values().last().unwrap();
    assert!(!now.contains(&dead), "{:?}", m.ensembles);
    assert_eq!(rack_of(&now[0]), rack_of(&dead), "replaced within its rack: {:?}", m.ensembles);
    assert_ne!(rack_of(&now[0]), rack_of(&now[1]));
}
