//! Typed records on top of the store, and the compare-and-set update loop.
//!
//! Binary records are little-endian and start with a magic and a format version; decoders
//! never panic and reject what they do not understand with `Corrupt`.

use std::collections::BTreeMap;

use bytes::Bytes;
use folio_proto::InvalidRecord;

pub use crate::limits::UPDATE_ATTEMPTS_MAX;
use crate::store::{Expect, MetaError, MetadataStore, Result, Version};

/// A value stored under one key.
pub trait Record: Sized {
    fn encode(&self) -> Bytes;
    fn decode(key: &str, bytes: &[u8]) -> Result<Self>;
}

/// What an update's transform wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update<T> {
    Write(T),
    Delete,
    /// Nothing to do: stop without writing.
    Nothing,
}

/// The compare-and-set loop: read the record, let `transform` decide, write with the version
/// read (create-if-absent when there was none), and start over on a conflict. Returns the
/// record and version as the loop left them (`None` if absent or deleted).
pub async fn update<T: Record>(
    store: &dyn MetadataStore,
    key: &str,
    mut transform: impl FnMut(Option<&T>) -> Result<Update<T>>,
) -> Result<Option<(T, Version)>> {
    for _ in 0..UPDATE_ATTEMPTS_MAX {
        let current = store.get(key).await?;
        let (value, expect) = match &current {
            Some(v) => (Some(T::decode(key, &v.value)?), Expect::Version(v.version)),
            None => (None, Expect::Absent),
        };
        let result = match transform(value.as_ref())? {
            Update::Nothing => return Ok(value.zip(current.map(|c| c.version))),
            Update::Write(new) => {
                store.put(key, new.encode(), expect).await.map(|v| Some((new, v)))
            }
            Update::Delete => match expect {
                Expect::Version(_) => store.delete(key, expect).await.map(|_| None),
                _ => return Ok(None),
            },
        };
        match result {
            Err(MetaError::Conflict { .. }) => continue,
            other => return other,
        }
    }
    Err(MetaError::Conflict { key: key.into() })
}

/// The error for a record at `key` that does not decode.
pub fn corrupt(key: &str, detail: impl Into<String>) -> MetaError {
    MetaError::Corrupt { key: key.into(), detail: detail.into() }
}

/// A little-endian reader that reports truncation instead of panicking: the decoding half
/// of every record format (here and in crates that define their own records).
#[derive(Debug)]
pub struct Reader<'a> {
    key: &'a str,
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Reads `b`, the value stored at `key` (named in errors).
    pub fn new(key: &'a str, b: &'a [u8]) -> Reader<'a> {
        Reader { key, b, at: 0 }
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n).ok_or_else(|| corrupt(self.key, "truncated"))?;
        self.at += n;
        Ok(s)
    }
    /// The next byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    /// The next little-endian u16.
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    /// The next little-endian u32.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    /// The next little-endian u64.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    /// The next length-prefixed UTF-8 string.
    pub fn string(&mut self) -> Result<String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| corrupt(self.key, "invalid UTF-8"))
    }
    /// Fails unless every byte was read (trailing bytes mean a damaged or newer record).
    pub fn done(&self) -> Result<()> {
        if self.at != self.b.len() {
            return Err(corrupt(self.key, "trailing bytes"));
        }
        Ok(())
    }
}

/// Writes a string as `Reader::string` reads it (u16 length, UTF-8).
pub fn put_string(v: &mut Vec<u8>, s: &str) {
    let n = u16::try_from(s.len()).expect("strings in metadata are short");
    v.extend_from_slice(&n.to_le_bytes());
    v.extend_from_slice(s.as_bytes());
}

/// A ledger's state: open for its writer, being recovered, or closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerState {
    Open = 1,
    InRecovery = 2,
    Closed = 3,
}

/// How entries are digested (CRC32C only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestType {
    Crc32c = 1,
}

/// Ledger metadata (bookkeeper.md §2.1).
///
/// Invariants (checked by `validate`, on encode and decode): `E >= Qw >= Qa >= 1`; at least
/// one ensemble; every ensemble has `E` distinct bookies; ensembles are keyed by strictly
/// increasing first entry ids starting at 0; a closed ledger's last entry id is `>= -1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerMetadata {
    pub ensemble_size: u16,
    pub write_quorum: u16,
    pub ack_quorum: u16,
    pub state: LedgerState,
    /// Set when closed; -1 for an empty ledger.
    pub last_entry_id: i64,
    /// Bytes of payload; set when closed.
    pub length: u64,
    pub digest_type: DigestType,
    pub password: Option<Vec<u8>>,
    /// First entry id → the ensemble (bookie ids) from that entry on.
    pub ensembles: BTreeMap<i64, Vec<String>>,
    pub custom: BTreeMap<String, Bytes>,
    pub ctime_ms: u64,
    /// Random token of the creator, to recognise its own create after a retry.
    pub creator_token: u64,
}

const LEDGER_MAGIC: &[u8; 3] = b"FLM";
const LEDGER_FORMAT_VERSION: u8 = 1;

impl LedgerMetadata {
    /// Checks the invariants listed above.
    pub fn validate(&self) -> std::result::Result<(), InvalidRecord> {
        let (e, w, a) = (self.ensemble_size, self.write_quorum, self.ack_quorum);
        if !(e >= w && w >= a && a >= 1) {
            return Err(InvalidRecord::new(format!(
                "need E >= Qw >= Qa >= 1, got E={e} Qw={w} Qa={a}"
            )));
        }
        if self.ensembles.first_key_value().map(|(k, _)| *k) != Some(0) {
            return Err(InvalidRecord::new("the first ensemble must start at entry 0"));
        }
        for (first, bookies) in &self.ensembles {
            if bookies.len() != e as usize {
                return Err(InvalidRecord::new(format!(
                    "ensemble at {first} has {} bookies, E={e}",
                    bookies.len()
                )));
            }
            let distinct: std::collections::BTreeSet<&String> = bookies.iter().collect();
            if distinct.len() != bookies.len() {
                return Err(InvalidRecord::new(format!("ensemble at {first} repeats a bookie")));
            }
        }
        if self.last_entry_id < -1 {
            return Err(InvalidRecord::new(format!("last entry id {}", self.last_entry_id)));
        }
        Ok(())
    }

    /// The ensemble that stores `entry_id`.
    pub fn ensemble_for(&self, entry_id: i64) -> &[String] {
        self.ensembles
            .range(..=entry_id)
            .next_back()
            .map(|(_, b)| b.as_slice())
            .expect("validated: starts at 0")
    }
}

impl Record for LedgerMetadata {
    fn encode(&self) -> Bytes {
        assert_eq!(self.validate(), Ok(()), "encoding invalid ledger metadata");
        let mut v = LEDGER_MAGIC.to_vec();
        v.push(LEDGER_FORMAT_VERSION);
        for q in [self.ensemble_size, self.write_quorum, self.ack_quorum] {
            v.extend_from_slice(&q.to_le_bytes());
        }
        v.push(self.state as u8);
        v.extend_from_slice(&self.last_entry_id.to_le_bytes());
        v.extend_from_slice(&self.length.to_le_bytes());
        v.push(self.digest_type as u8);
        match &self.password {
            None => v.push(0),
            Some(p) => {
                v.push(1);
                v.extend_from_slice(&(p.len() as u16).to_le_bytes());
                v.extend_from_slice(p);
            }
        }
        v.extend_from_slice(&(self.ensembles.len() as u32).to_le_bytes());
        for (first, bookies) in &self.ensembles {
            v.extend_from_slice(&first.to_le_bytes());
            v.extend_from_slice(&(bookies.len() as u16).to_le_bytes());
            for b in bookies {
                put_string(&mut v, b);
            }
        }
        v.extend_from_slice(&(self.custom.len() as u32).to_le_bytes());
        for (k, val) in &self.custom {
            put_string(&mut v, k);
            v.extend_from_slice(&(val.len() as u32).to_le_bytes());
            v.extend_from_slice(val);
        }
        v.extend_from_slice(&self.ctime_ms.to_le_bytes());
        v.extend_from_slice(&self.creator_token.to_le_bytes());
        Bytes::from(v)
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let mut r = Reader { key, b, at: 0 };
        if r.take(3)? != LEDGER_MAGIC {
            return Err(corrupt(key, "not ledger metadata"));
        }
        let version = r.u8()?;
        if version != LEDGER_FORMAT_VERSION {
            return Err(corrupt(key, format!("unsupported ledger metadata version {version}")));
        }
        let (ensemble_size, write_quorum, ack_quorum) = (r.u16()?, r.u16()?, r.u16()?);
        let state = match r.u8()? {
            1 => LedgerState::Open,
            2 => LedgerState::InRecovery,
            3 => LedgerState::Closed,
            s => return Err(corrupt(key, format!("ledger state {s}"))),
        };
        let last_entry_id = r.u64()? as i64;
        let length = r.u64()?;
        let digest_type = match r.u8()? {
            1 => DigestType::Crc32c,
            d => return Err(corrupt(key, format!("digest type {d}"))),
        };
        let password = match r.u8()? {
            0 => None,
            1 => {
                let n = r.u16()? as usize;
                Some(r.take(n)?.to_vec())
            }
            _ => return Err(corrupt(key, "password flag")),
        };
        let mut ensembles = BTreeMap::new();
        let n = r.u32()?;
        for _ in 0..n {
            let first = r.u64()? as i64;
            let m = r.u16()?;
            let bookies = (0..m).map(|_| r.string()).collect::<Result<Vec<_>>>()?;
            if ensembles.insert(first, bookies).is_some() {
                return Err(corrupt(key, "duplicate ensemble"));
            }
        }
        let mut custom = BTreeMap::new();
        let n = r.u32()?;
        for _ in 0..n {
            let k = r.string()?;
            let len = r.u32()? as usize;
            custom.insert(k, Bytes::copy_from_slice(r.take(len)?));
        }
        let ctime_ms = r.u64()?;
        let creator_token = r.u64()?;
        r.done()?;
        let m = LedgerMetadata {
            ensemble_size,
            write_quorum,
            ack_quorum,
            state,
            last_entry_id,
            length,
            digest_type,
            password,
            ensembles,
            custom,
            ctime_ms,
            creator_token,
        };
        m.validate().map_err(|d| corrupt(key, d))?;
        Ok(m)
    }
}

/// Text `key=value` records: a first line naming the record and its version, then one
/// field per line. Used for cookies and registrations, which operators read.
fn encode_fields(kind: &str, fields: &[(&str, String)]) -> Bytes {
    let mut s = format!("{kind} 1\n");
    for (k, v) in fields {
        assert!(!v.contains('\n'), "field values are single-line");
        s.push_str(&format!("{k}={v}\n"));
    }
    Bytes::from(s)
}

fn decode_fields(key: &str, kind: &str, b: &[u8]) -> Result<BTreeMap<String, String>> {
    let s = std::str::from_utf8(b).map_err(|_| corrupt(key, "invalid UTF-8"))?;
    let mut lines = s.lines();
    if lines.next() != Some(&format!("{kind} 1")) {
        return Err(corrupt(key, format!("not a {kind} record (version 1)")));
    }
    let mut out = BTreeMap::new();
    for line in lines {
        let (k, v) =
            line.split_once('=').ok_or_else(|| corrupt(key, format!("bad line {line:?}")))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

fn field(key: &str, m: &BTreeMap<String, String>, name: &str) -> Result<String> {
    m.get(name).cloned().ok_or_else(|| corrupt(key, format!("missing {name}")))
}

fn list_field(v: &[String]) -> String {
    v.join(",")
}

fn parse_list(s: &str) -> Vec<String> {
    if s.is_empty() { Vec::new() } else { s.split(',').map(str::to_string).collect() }
}

/// A cookie binds a bookie's identity to its disks and its cluster (bookkeeper.md §6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cookie {
    pub bookie_id: String,
    pub cluster_id: String,
    pub journal_dirs: Vec<String>,
    pub ledger_dirs: Vec<String>,
    /// Random per format: tells apart a re-formatted bookie with the same id.
    pub instance_id: String,
}

impl Record for Cookie {
    fn encode(&self) -> Bytes {
        encode_fields(
            "folio-cookie",
            &[
                ("bookie_id", self.bookie_id.clone()),
                ("cluster_id", self.cluster_id.clone()),
                ("journal_dirs", list_field(&self.journal_dirs)),
                ("ledger_dirs", list_field(&self.ledger_dirs)),
                ("instance_id", self.instance_id.clone()),
            ],
        )
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let m = decode_fields(key, "folio-cookie", b)?;
        Ok(Cookie {
            bookie_id: field(key, &m, "bookie_id")?,
            cluster_id: field(key, &m, "cluster_id")?,
            journal_dirs: parse_list(&field(key, &m, "journal_dirs")?),
            ledger_dirs: parse_list(&field(key, &m, "ledger_dirs")?),
            instance_id: field(key, &m, "instance_id")?,
        })
    }
}

/// A bookie's registration: where to reach it. Whether it is writable or read-only is its
/// key (see `Keys::bookie`); the key is attached to the bookie's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookieRegistration {
    pub bookie_id: String,
    pub address: String,
    pub http_address: Option<String>,
    /// The rack (or zone) the bookie is in; placement spreads ensembles over racks.
    pub rack: Option<String>,
}

impl Record for BookieRegistration {
    fn encode(&self) -> Bytes {
        let mut f = vec![("bookie_id", self.bookie_id.clone()), ("address", self.address.clone())];
        if let Some(h) = &self.http_address {
            f.push(("http_address", h.clone()));
        }
        if let Some(r) = &self.rack {
            f.push(("rack", r.clone()));
        }
        encode_fields("folio-bookie", &f)
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let m = decode_fields(key, "folio-bookie", b)?;
        Ok(BookieRegistration {
            bookie_id: field(key, &m, "bookie_id")?,
            address: field(key, &m, "address")?,
            http_address: m.get("http_address").cloned(),
            rack: m.get("rack").cloned(),
        })
    }
}

/// The cluster id: created once by whoever gets there first, then read by everyone.
pub async fn ensure_cluster_id(
    store: &dyn MetadataStore,
    keys: &crate::keys::Keys,
) -> Result<String> {
    let key = keys.cluster_id();
    loop {
        if let Some(v) = store.get(&key).await? {
            return String::from_utf8(v.value.to_vec()).map_err(|_| corrupt(&key, "invalid UTF-8"));
        }
        let id = format!("{:016x}{:016x}", folio_rt::random::<u64>(), folio_rt::random::<u64>());
        match store.put(&key, Bytes::from(id.clone()), Expect::Absent).await {
            Ok(_) => return Ok(id),
            Err(MetaError::Conflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub fn ledger(ensembles: usize) -> LedgerMetadata {
        LedgerMetadata {
            ensemble_size: 3,
            write_quorum: 2,
            ack_quorum: 2,
            state: LedgerState::Open,
            last_entry_id: -1,
            length: 0,
            digest_type: DigestType::Crc32c,
            password: Some(b"secret".to_vec()),
            ensembles: (0..ensembles)
                .map(|i| {
                    (i as i64 * 100, (0..3).map(|b| format!("bookie-{}:3181", b + i)).collect())
                })
                .collect(),
            custom: [("component".to_string(), Bytes::from_static(b"managed-log"))].into(),
            ctime_ms: 1234,
            creator_token: 99,
        }
    }

    #[test]
    fn ledger_metadata_round_trips_and_invalid_metadata_is_rejected() {
        let m = ledger(3);
        assert_eq!(LedgerMetadata::decode("k", &m.encode()).unwrap(), m);
        assert_eq!(m.ensemble_for(150), m.ensembles[&100].as_slice());
        assert_eq!(m.ensemble_for(0), m.ensembles[&0].as_slice());
        let mut bad = m.clone();
        bad.ack_quorum = 3;
        assert!(bad.validate().is_err());
        let mut bad = m;
        bad.ensembles.get_mut(&0).unwrap()[1] = "bookie-0:3181".into();
        assert!(bad.validate().unwrap_err().0.contains("repeats"));
    }

    #[test]
    fn cookies_and_registrations_round_trip() {
        let c = Cookie {
            bookie_id: "b1".into(),
            cluster_id: "c".into(),
            journal_dirs: vec!["/j".into()],
            ledger_dirs: vec!["/l1".into(), "/l2".into()],
            instance_id: "i".into(),
        };
        assert_eq!(Cookie::decode("k", &c.encode()).unwrap(), c);
        let r = BookieRegistration {
            bookie_id: "b1".into(),
            address: "127.0.0.1:3181".into(),
            http_address: None,
            rack: None,
        };
        assert_eq!(BookieRegistration::decode("k", &r.encode()).unwrap(), r);
        let racked = BookieRegistration { rack: Some("rack-a".into()), ..r };
        assert_eq!(BookieRegistration::decode("k", &racked.encode()).unwrap(), racked);
        assert!(Cookie::decode("k", b"folio-cookie 2\n").is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_a_decoder(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = LedgerMetadata::decode("k", &b);
            let _ = Cookie::decode("k", &b);
            let _ = BookieRegistration::decode("k", &b);
        }

        #[test]
        fn truncated_metadata_is_an_error_not_a_panic(cut in 0usize..200) {
            let enc = ledger(2).encode();
            let cut = cut.min(enc.len().saturating_sub(1));
            prop_assert!(LedgerMetadata::decode("k", &enc[..cut]).is_err());
        }
    }
}
