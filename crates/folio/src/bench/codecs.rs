//! Codec benchmark (#25 item 2): the pure-Rust codecs the broker decodes record batches
//! with (gzip on `flate2`/miniz_oxide, snappy on `snap`, lz4 frames on `lz4_flex`, zstd on
//! `ruzstd`), measured where Kafka needs records: decompressing and decoding a stored
//! batch (ListOffsets by timestamp, keyless-record checks on compacted topics, the
//! compactor's read) and compressing a batch's records again (the compactor's write).
//!
//! The data: 64-record batches of about 1 KiB JSON-like records (keys, a few repeated field
//! names and values, a random hex payload: compressible as event data is, not a run of one
//! byte), the same records in every codec. Each codec's line gives its compressed fraction,
//! compress MB/s and decode MB/s (plain record bytes per second) and `ratio_vs_none`: its
//! decode rate against decoding the same records uncompressed, measured in the same run.
//! What the process read and wrote per byte decoded (`/proc/self/io` rchar and wchar) is
//! printed too: the codecs touch no file, so both stay near 0.
//!
//! The produce and fetch paths never come here (batches stay opaque bytes there).

use std::time::Instant;

use folio_broker::batch::{self, BatchInfo, Codec};
use folio_broker::records;

use super::MIB;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::Run,
}

/// Records per batch and the approximate bytes of each.
const BATCH_RECORDS: usize = 64;
const RECORD_BYTES: usize = 1024;

/// Plain record bytes per codec: 512 MiB (64 MiB with --quick).
fn plain_bytes(quick: bool) -> usize {
    if quick { 64 << 20 } else { 512 << 20 }
}

pub fn run(args: Args) -> Result<(), String> {
    let plains = batches_plain(plain_bytes(args.run.quick))?;
    let plain_total: usize = plains.iter().map(|(_, p)| p.len()).sum();
    println!(
        "setup=codecs batches={} records_per_batch={BATCH_RECORDS} plain_mb={:.1}",
        plains.len(),
        plain_total as f64 / MIB
    );
    let rchar0 = super::process_io("rchar").unwrap_or(0);
    let wchar0 = super::process_io("wchar").unwrap_or(0);
    let mut decoded_total = 0usize;
    let mut none_decode_mb_s = None;
    for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let t0 = Instant::now();
        let mut stored = Vec::with_capacity(plains.len());
        for (info, plain) in &plains {
            let body = records::compress(codec, plain).map_err(|e| e.to_string())?;
            let info = BatchInfo { attributes: codec.bits(), ..*info };
            stored.push(batch::encode(0, &info, &body));
        }
        let compress_s = t0.elapsed().as_secs_f64();
        let stored_total: usize = stored.iter().map(Vec::len).sum();

        let t0 = Instant::now();
        let mut records_seen = 0usize;
        for b in &stored {
            let (h, plain) = records::records_bytes(b).map_err(|e| e.to_string())?;
            let rs = records::decode_records(&h, &plain).map_err(|e| e.to_string())?;
            // Touch every key so the decoding cannot be skipped.
            records_seen += rs.iter().filter(|r| r.key.is_some()).count();
        }
        let decode_s = t0.elapsed().as_secs_f64();
        if records_seen != plains.len() * BATCH_RECORDS {
            return Err(format!("{codec:?}: decoded {records_seen} keyed records"));
        }
        decoded_total += plain_total;
        let mb = plain_total as f64 / MIB;
        let decode_mb_s = mb / decode_s;
        let base = *none_decode_mb_s.get_or_insert(decode_mb_s);
        println!(
            "codec={} compressed_fraction={:.3} compress_mb_per_s={:.1} decode_mb_per_s={:.1} ratio_vs_none={:.3}",
            format!("{codec:?}").to_lowercase(),
            stored_total as f64 / plain_total as f64,
            mb / compress_s,
            decode_mb_s,
            decode_mb_s / base,
        );
    }
    let rchar = super::process_io("rchar").unwrap_or(0).saturating_sub(rchar0);
    let wchar = super::process_io("wchar").unwrap_or(0).saturating_sub(wchar0);
    println!(
        "rchar_per_byte_decoded={:.4} wchar_per_byte_decoded={:.4}",
        rchar as f64 / decoded_total as f64,
        wchar as f64 / decoded_total as f64
    );
    Ok(())
}

/// About `total` bytes of plain records in batches: each batch's header fields (without
/// its codec) and its uncompressed records, as `batch::build_keyed` writes them.
fn batches_plain(total: usize) -> Result<Vec<(BatchInfo, Vec<u8>)>, String> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64; // xorshift: the same data every run
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    const EVENTS: [&str; 4] = ["click", "view", "purchase", "scroll"];
    let mut out = Vec::new();
    let mut made = 0;
    let mut n = 0u64;
    while made < total {
        let mut records = Vec::with_capacity(BATCH_RECORDS);
        for _ in 0..BATCH_RECORDS {
            let user = next() % 10_000;
            let mut value = format!(
                "{{\"user\":\"user-{user}\",\"event\":\"{}\",\"page\":\"/products/{}\",\"n\":{n},\"payload\":\"",
                EVENTS[(next() % 4) as usize],
                next() % 500,
            );
            while value.len() < RECORD_BYTES - 2 {
                value.push_str(&format!("{:016x}", next() & 0x0f0f_0f0f_0f0f_0f0f));
            }
            value.push_str("\"}");
            n += 1;
            records.push((format!("user-{user}").into_bytes(), value.into_bytes()));
        }
        let built = batch::build_keyed(BATCH_RECORDS as i32, 1_700_000_000_000, 0, |i| {
            let (key, value) = &records[i as usize];
            (Some(key.clone()), Some(value.clone()))
        });
        let (info, plain) = records::records_bytes(&built).map_err(|e| e.to_string())?;
        made += plain.len();
        out.push((info, plain.into_owned()));
    }
    Ok(out)
}
