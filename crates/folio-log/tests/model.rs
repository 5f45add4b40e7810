//! Offset lookups across rollovers, reopenings and delete_records, against a model (a
//! plain list of batches). Property test; cases are few because each runs real bookies.

use crate::common;

use common::*;
use folio_log::{LogConfig, LogError, ManagedLog};
use folio_testkit::Cluster;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    /// Records per batch.
    batches: Vec<u32>,
    entries_per_ledger: u64,
    /// Reopen the log (new owner) after this many batches.
    reopen_at: usize,
    /// delete_records at this fraction of the end, in percent.
    delete_at_pct: u64,
    max_entries: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (prop::collection::vec(1u32..6, 1..40), 1u64..6, 0usize..40, 0u64..100, 1usize..8).prop_map(
        |(batches, entries_per_ledger, reopen_at, delete_at_pct, max_entries)| Case {
            reopen_at: reopen_at % batches.len(),
            batches,
            entries_per_ledger,
            delete_at_pct,
            max_entries,
        },
    )
}

async fn check(case: Case) {
    let c = Cluster::start(1).await;
    let config = || LogConfig { ..small(1, case.entries_per_ledger) };
    let mut log = ManagedLog::open_or_create(env(&c, "a"), "m", config()).await.unwrap();
    // The model: (base offset, records, payload) per batch.
    let mut model: Vec<(u64, u32, Vec<u8>)> = Vec::new();
    let mut end = 0u64;
    for (i, n) in case.batches.iter().enumerate() {
        if i == case.reopen_at {
            log = ManagedLog::open_or_create(env(&c, "b"), "m", config()).await.unwrap();
            assert_eq!(log.end_offset(), end);
        }
        let base = log.append(&batch(i as u64), *n, i as i64).await.unwrap();
        assert_eq!(base, end);
        model.push((base, *n, batch(i as u64)));
        end += u64::from(*n);
    }
    let start = end * case.delete_at_pct / 100;
    assert_eq!(log.delete_records(start).await.unwrap(), start);
    for off in 0..end + 2 {
        let got = log.read(off, 1, case.max_entries).await;
        if off < start || off > end {
            assert!(matches!(got, Err(LogError::OffsetOutOfRange { .. })), "offset {off}: {got:?}");
            continue;
        }
        let got = got.unwrap();
        let first = model.iter().position(|(b, n, _)| *b <= off && off < b + u64::from(*n));
        match first {
            None => assert!(got.is_empty(), "offset {off} is the end"),
            Some(i) => {
                // max_bytes 1: exactly one batch, the one holding the offset.
                assert_eq!(got.len(), 1);
                assert_eq!(
                    (got[0].base_offset, &got[0].payload[..]),
                    (model[i].0, &model[i].2[..])
                );
                let many = log.read(off, usize::MAX, case.max_entries).await.unwrap();
                let want: Vec<u64> =
                    model[i..].iter().take(case.max_entries).map(|(b, _, _)| *b).collect();
                let have: Vec<u64> = many.iter().map(|e| e.base_offset).collect();
                assert_eq!(have, want, "reading on from offset {off}");
            }
        }
    }
    assert_no_leak(c.meta.as_ref(), "model").await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn offsets_map_to_the_batches_that_hold_them(case in case()) {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        rt.block_on(check(case));
    }
}
