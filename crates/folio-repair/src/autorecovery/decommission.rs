//! Draining a bookie (`folio bookie decommission ID`): a request the auditor turns into
//! marks, placement that avoids the bookie meanwhile, and the last step once nothing names
//! it: its cookie and registrations are removed, so it is forgotten by the cluster.

use crate::RepairError;
use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::records::{LedgerMetadata, Record};
use folio_meta::{Expect, MetadataStore, list_all};

/// Asks for `bookie_id` to be drained (idempotent). Fails for a bookie the cluster does
/// not know (no cookie and no registration).
pub async fn request(
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
) -> Result<(), RepairError> {
    let known = meta.get(&keys.cookie(bookie_id)).await?.is_some()
        || meta.get(&keys.bookie(bookie_id, false)).await?.is_some()
        || meta.get(&keys.bookie(bookie_id, true)).await?.is_some();
    if !known {
        return Err(RepairError::UnknownBookie(bookie_id.to_string()));
    }
    meta.put(&keys.decommission(bookie_id), Bytes::from_static(b"drain"), Expect::Any).await?;
    Ok(())
}

/// The ledgers whose metadata still names `bookie_id` (what a drain waits for), and how
/// many ledgers there are in all.
pub async fn references(
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
) -> Result<(u64, u64), RepairError> {
    let (mut naming, mut total) = (0, 0);
    for v in list_all(meta, &keys.ledgers()).await? {
        let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
        total += 1;
        if m.ensembles.values().any(|e| e.iter().any(|b| b == bookie_id)) {
            naming += 1;
        }
    }
    Ok((naming, total))
}

/// The drain's last step, once `references` is zero: the bookie's cookie, registrations,
/// the auditor's note of it and the request itself are removed. Refused while a ledger
/// still names it.
pub async fn finish(
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
) -> Result<(), RepairError> {
    let (naming, _) = references(meta, keys, bookie_id).await?;
    if naming > 0 {
        return Err(RepairError::NotDrained { bookie: bookie_id.to_string(), ledgers: naming });
    }
    for key in [
        keys.cookie(bookie_id),
        keys.bookie(bookie_id, false),
        keys.bookie(bookie_id, true),
        keys.bookie_seen(bookie_id),
        keys.maintenance(bookie_id),
        keys.decommission(bookie_id),
    ] {
        meta.delete(&key, Expect::Any).await?;
    }
    tracing::info!(bookie = bookie_id, "bookie decommissioned: cookie and registration removed");
    Ok(())
}
