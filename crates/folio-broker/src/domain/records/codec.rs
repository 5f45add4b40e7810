//! Codecs (attribute bits 0-2), all pure Rust: gzip (`flate2` on miniz_oxide), snappy
//! (`snap`: raw, or the xerial framing Java clients write), lz4 (the LZ4 frame format,
//! `lz4_flex`), zstd (`ruzstd`); `compress` writes them again for the compactor. What a
//! batch decompresses to is bounded by [`DECOMPRESSED_BYTES_MAX`] (a small batch must not
//! inflate into gigabytes).

use std::io::Read;

use super::{RecordsError, err, take};
use crate::domain::batch::{self, Codec};
use crate::limits::DECOMPRESSED_BYTES_MAX;

/// Decompresses a batch's records, at most [`DECOMPRESSED_BYTES_MAX`].
pub fn decompress(codec: Codec, body: &[u8]) -> Result<Vec<u8>, RecordsError> {
    let failed = |e: std::io::Error| err(format!("{codec:?} data does not decompress: {e}"));
    match codec {
        Codec::None => Ok(body.to_vec()),
        Codec::Gzip => bounded(flate2::read::MultiGzDecoder::new(body)).map_err(failed),
        Codec::Lz4 => bounded(lz4_flex::frame::FrameDecoder::new(body)).map_err(failed),
        Codec::Snappy => snappy(body),
        Codec::Zstd => {
            let mut out = Vec::new();
            let mut input = body;
            while !input.is_empty() {
                let d = ruzstd::decoding::StreamingDecoder::new(&mut input)
                    .map_err(|e| err(format!("zstd frame: {e}")))?;
                let room = DECOMPRESSED_BYTES_MAX - out.len();
                let frame = bounded_to(d, room).map_err(failed)?;
                out.extend_from_slice(&frame);
            }
            Ok(out)
        }
    }
}

/// Compresses a batch's `plain` records with `codec` as Kafka's clients write it: gzip,
/// snappy in the xerial framing Java clients use (32 KiB blocks), lz4 frames of
/// independent 64 KiB blocks, zstd at level 1 (`ruzstd`'s fastest). For the compactor,
/// which rewrites a batch in its own codec.
pub fn compress(codec: Codec, plain: &[u8]) -> Result<Vec<u8>, RecordsError> {
    use std::io::Write;
    let failed = |e: std::io::Error| err(format!("{codec:?} compression: {e}"));
    match codec {
        Codec::None => Ok(plain.to_vec()),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(plain).map_err(failed)?;
            e.finish().map_err(failed)
        }
        Codec::Snappy => {
            let mut out = XERIAL_MAGIC.to_vec();
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // compatible version
            let mut enc = snap::raw::Encoder::new();
            for chunk in plain.chunks(32 * 1024) {
                let block = enc.compress_vec(chunk).map_err(|e| err(format!("snappy: {e}")))?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Codec::Lz4 => {
            use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
            let info =
                FrameInfo::new().block_size(BlockSize::Max64KB).block_mode(BlockMode::Independent);
            let mut e = FrameEncoder::with_frame_info(info, Vec::new());
            e.write_all(plain).map_err(failed)?;
            e.finish().map_err(|e| err(format!("lz4: {e}")))
        }
        Codec::Zstd => Ok(ruzstd::encoding::compress_to_vec(
            plain,
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
    }
}

/// `plain` (an uncompressed batch, as `build` makes) with its records compressed by `codec`
/// and the codec's bits set. For tests and benchmarks.
pub fn with_codec(plain: &[u8], codec: Codec) -> Result<Vec<u8>, RecordsError> {
    let info = batch::parse(plain).map_err(|e| err(e.to_string()))?;
    let body = compress(codec, &plain[batch::HEADER_BYTES..info.size])?;
    let attributes = (info.attributes & !7) | codec.bits();
    Ok(batch::encode(0, &batch::BatchInfo { attributes, ..info }, &body))
}

/// `batch` (a well-formed v2 batch) with its records compressed by `codec` instead: the
/// broker's side of a topic's `compression.type`. Every header field but the codec bits
/// (and so the CRC) stays.
pub fn recompressed(batch: &[u8], codec: Codec) -> Result<Vec<u8>, RecordsError> {
    let (info, plain) = super::records_bytes(batch)?;
    let body = match codec {
        Codec::None => plain.into_owned(),
        codec => compress(codec, &plain)?,
    };
    let attributes = (info.attributes & !7) | codec.bits();
    let base_offset = i64::from_be_bytes(batch[..8].try_into().expect("a parsed batch"));
    Ok(batch::encode(base_offset as u64, &batch::BatchInfo { attributes, ..info }, &body))
}

/// Java clients frame snappy blocks (xerial): a magic header, then (length, block) pairs.
pub(super) const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

fn snappy(body: &[u8]) -> Result<Vec<u8>, RecordsError> {
    let block = |b: &[u8], out: &mut Vec<u8>| -> Result<(), RecordsError> {
        let n = snap::raw::decompress_len(b).map_err(|e| err(format!("snappy: {e}")))?;
        if out.len() + n > DECOMPRESSED_BYTES_MAX {
            return Err(err("snappy data decompresses beyond DECOMPRESSED_BYTES_MAX"));
        }
        let at = out.len();
        out.resize(at + n, 0);
        let wrote = snap::raw::Decoder::new()
            .decompress(b, &mut out[at..])
            .map_err(|e| err(format!("snappy: {e}")))?;
        out.truncate(at + wrote);
        Ok(())
    };
    let mut out = Vec::new();
    let Some(mut rest) = body.strip_prefix(XERIAL_MAGIC) else {
        block(body, &mut out)?;
        return Ok(out);
    };
    take(&mut rest, 8)?; // version, compatible version
    while !rest.is_empty() {
        let len = take(&mut rest, 4)?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len > rest.len() {
            return Err(err(format!("a snappy block of {len} bytes with {} left", rest.len())));
        }
        let (b, r) = rest.split_at(len);
        block(b, &mut out)?;
        rest = r;
    }
    Ok(out)
}

fn bounded(r: impl Read) -> std::io::Result<Vec<u8>> {
    bounded_to(r, DECOMPRESSED_BYTES_MAX)
}

fn bounded_to(r: impl Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    r.take(max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > max {
        return Err(std::io::Error::other("decompresses beyond DECOMPRESSED_BYTES_MAX"));
    }
    Ok(out)
}
