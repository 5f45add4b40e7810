//! `folio autorecovery status`: the marks, their age, an estimate of the bytes left to
//! copy, the auditor and the workers at work, read from the metadata store.

use folio_meta::keys::Keys;
use folio_meta::records::{LedgerMetadata, Record};
use folio_meta::{MetadataStore, list_all};

use super::mark::ReplicationMark;
use super::worker::{entries_on, fragments_of};
use folio_proto::clock::{Clock, WallClock};

/// The cluster's autorecovery as the metadata store shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The auditor's host, if one holds the claim.
    pub auditor: Option<String>,
    /// Ledgers with a mark, and the fragments the marks name.
    pub marked_ledgers: u64,
    pub marked_fragments: u64,
    /// The oldest mark's age (0 without marks).
    pub oldest_mark_age_ms: u64,
    /// The copies left, estimated from the ledgers' lengths: the bytes of the marked
    /// fragments' entries on their marked bookies.
    pub bytes_left: u64,
    /// Workers with a claim: (ledger, host).
    pub active: Vec<(u64, String)>,
    /// Bookies being drained, and bookies in maintenance.
    pub draining: Vec<String>,
    pub maintenance: Vec<String>,
}

/// Reads the status (every mark, and the metadata of every marked ledger).
pub async fn status(meta: &dyn MetadataStore, keys: &Keys) -> folio_meta::Result<Status> {
    let mut s = Status::default();
    if let Some(v) = meta.get(&keys.auditor()).await? {
        s.auditor = Some(String::from_utf8_lossy(&v.value).to_string());
    }
    let mut oldest = u64::MAX;
    for v in list_all(meta, &keys.under_replicated()).await? {
        let (Some(id), Ok(mark)) =
            (keys.parse_under_replicated(&v.key), ReplicationMark::decode(&v.key, &v.value))
        else {
            continue;
        };
        s.marked_ledgers += 1;
        s.marked_fragments += mark.fragments.len() as u64;
        oldest = oldest.min(mark.since_ms);
        let key = keys.ledger(id);
        let Some(m) = meta.get(&key).await? else { continue };
        let Ok(m) = LedgerMetadata::decode(&key, &m.value) else { continue };
        let entries = (m.last_entry_id + 1).max(1) as u64;
        let per_entry = m.length / entries;
        let (e, w) = (m.ensemble_size as usize, m.write_quorum as usize);
        for b in mark.bookies() {
            for f in fragments_of(&m, &b) {
                let last = f.last.unwrap_or(m.last_entry_id.max(f.first - 1));
                s.bytes_left += entries_on(f.first, last, f.pos, e, w).count() as u64 * per_entry;
            }
        }
    }
    s.oldest_mark_age_ms =
        if oldest == u64::MAX { 0 } else { WallClock.now_ms().saturating_sub(oldest) };
    let claims = keys.replication_claims();
    for v in list_all(meta, &claims).await? {
        if let Ok(id) = v.key[claims.len()..].parse() {
            s.active.push((id, String::from_utf8_lossy(&v.value).to_string()));
        }
    }
    let ids = |prefix: String, items: Vec<folio_meta::Versioned>| {
        items.into_iter().map(|v| v.key[prefix.len()..].to_string()).collect::<Vec<_>>()
    };
    s.draining = ids(keys.decommissions(), list_all(meta, &keys.decommissions()).await?);
    s.maintenance = ids(keys.maintenances(), list_all(meta, &keys.maintenances()).await?);
    Ok(s)
}
