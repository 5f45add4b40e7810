use super::*;

fn ledger(id: u64, first: u64, records: u64, bytes: u64, newest_ms: i64) -> LedgerInfo {
    LedgerInfo {
        ledger_id: id,
        entries: records,
        bytes,
        first_offset: first,
        records,
        first_publish_ms: newest_ms - 10,
        max_publish_ms: newest_ms,
        close_ms: newest_ms as u64 + 1,
    }
}

fn chain() -> Vec<LedgerInfo> {
    let mut open = LedgerInfo::open(4, 30);
    open.entries = 3;
    vec![
        ledger(1, 0, 10, 100, 1_000),
        ledger(2, 10, 10, 100, 2_000),
        ledger(3, 20, 10, 100, 3_000),
        open,
    ]
}

#[test]
fn a_pass_is_due_by_dirty_ratio_or_max_lag_and_never_takes_the_open_ledger() {
    let c = TopicConfig { cleanup_compact: true, ..TopicConfig::default() };
    // All dirty: every closed ledger, never the open last one.
    assert_eq!(plan(&chain(), 0, &c, 10_000, 100), Some(3));
    // Two thirds clean: 1/3 dirty is below 0.5...
    assert_eq!(plan(&chain(), 20, &c, 10_000, 100), None);
    // ...but not below 0.3.
    let low = TopicConfig { min_cleanable_dirty_ppm: 300_000, ..c.clone() };
    assert_eq!(plan(&chain(), 20, &low, 10_000, 100), Some(3));
    // A dirty record older than max.compaction.lag.ms forces the pass.
    let lagged = TopicConfig { max_compaction_lag_ms: 5_000, ..c.clone() };
    assert_eq!(plan(&chain(), 20, &lagged, 10_000, 100), Some(3));
    assert_eq!(plan(&chain(), 20, &lagged, 7_000, 100), None, "2990 ms old");
    // Nothing dirty: nothing to do.
    assert_eq!(plan(&chain(), 30, &low, 10_000, 100), None);
    // min.compaction.lag.ms keeps young ledgers (and all after them) out.
    let young = TopicConfig { min_compaction_lag_ms: 7_500, ..c.clone() };
    assert_eq!(plan(&chain(), 0, &young, 10_000, 100), Some(2));
    // At most `ledgers_max` per pass (one metadata transaction).
    assert_eq!(plan(&chain(), 0, &c, 10_000, 2), Some(2));
    assert_eq!(plan(&chain()[3..], 0, &c, 10_000, 100), None, "only the open ledger");
}

fn kept(offset: u64, key: &str, value: Option<&str>) -> Kept {
    Kept {
        offset,
        timestamp: 1_000 + offset as i64,
        attributes: 0,
        key: key.as_bytes().to_vec(),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: vec![2, 2, b'h', 2, b'v'], // one header "h" = "v"
    }
}

#[test]
fn a_rewritten_batch_keeps_offsets_timestamps_headers_and_covers_its_gap() {
    let p = Pending {
        records: vec![kept(13, "a", Some("1")), kept(17, "b", None)],
        log_append_time: None,
        entry_max_ts: 5_000,
        codec: batch::Codec::None,
    };
    // Output at 10 (the gap before 13 included), ending at 20 (after 17's gap).
    let b = encode_batch(10, 20, &p).unwrap();
    assert!(batch::parse(&b).is_err(), "fewer records than offsets: not a produce batch");
    let (h, plain) = records::records_bytes(&b).unwrap();
    assert_eq!((h.last_offset_delta, h.records_count, h.producer_id), (9, 2, -1));
    assert_eq!(h.max_timestamp, 1_017);
    let rs = records::decode_records(&h, &plain).unwrap();
    let got: Vec<_> = rs.iter().map(|r| (r.offset_delta, r.timestamp, r.key, r.value)).collect();
    assert_eq!(
        got,
        [(3, 1_013, Some(&b"a"[..]), Some(&b"1"[..])), (7, 1_017, Some(&b"b"[..]), None)]
    );
    assert!(rs.iter().all(|r| r.headers == [2, 2, b'h', 2, b'v']));
    // LogAppendTime batches keep their one timestamp.
    let lat = Pending { log_append_time: Some(9_999), ..p };
    let b = encode_batch(10, 20, &lat).unwrap();
    let (h, plain) = records::records_bytes(&b).unwrap();
    assert!(h.is_log_append_time());
    assert!(records::decode_records(&h, &plain).unwrap().iter().all(|r| r.timestamp == 9_999));
}

#[test]
fn the_newest_record_of_a_key_stays_and_tombstones_go_only_when_expired() {
    let newest: HashMap<u128, u64> = [(key_hash(b"a"), 5), (key_hash(b"b"), 7)].into();
    let r = |key: Option<&'static [u8]>, value: Option<&'static [u8]>| Record {
        attributes: 0,
        offset_delta: 0,
        timestamp: 0,
        key,
        value,
        headers: &[],
    };
    assert!(keep(&r(Some(b"a"), Some(b"x")), 5, 0, &newest, false));
    assert!(!keep(&r(Some(b"a"), Some(b"x")), 4, 0, &newest, false), "superseded");
    assert!(!keep(&r(None, Some(b"x")), 9, 0, &newest, false), "keyless");
    assert!(!keep(&r(Some(b"a"), Some(b"x")), 5, 6, &newest, false), "below the log start");
    assert!(keep(&r(Some(b"b"), None), 7, 0, &newest, false), "a fresh tombstone");
    assert!(!keep(&r(Some(b"b"), None), 7, 0, &newest, true), "an expired tombstone");
    assert_ne!(key_hash(b"a"), key_hash(b"b"));
}

#[test]
fn a_rewritten_batch_keeps_its_codec_and_reads_back_in_each() {
    use batch::Codec;
    let records: Vec<Kept> = (0..300).map(|i| kept(i, &format!("k{i}"), Some("v"))).collect();
    for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let p = Pending {
            records: records
                .iter()
                .map(|r| kept(r.offset, std::str::from_utf8(&r.key).unwrap(), Some("v")))
                .collect(),
            log_append_time: None,
            entry_max_ts: 1,
            codec,
        };
        let b = encode_batch(0, 300, &p).unwrap();
        let (h, plain) = records::records_bytes(&b).unwrap();
        assert_eq!(h.codec().unwrap(), codec);
        let rs = records::decode_records(&h, &plain).unwrap();
        assert_eq!(rs.len(), 300, "{codec:?}");
        assert!(rs.iter().enumerate().all(|(i, r)| r.key == Some(format!("k{i}").as_bytes())));
        if codec != Codec::None {
            assert!(
                b.len() < encode_batch(0, 300, &Pending { codec: Codec::None, ..p }).unwrap().len(),
                "{codec:?} compresses"
            );
        }
    }
}
