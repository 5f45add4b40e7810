//! Running without the journal safely: the pre-boot check (BookKeeper BP-46).
//!
//! A journal-less bookie acknowledges entries from its write cache, so a crash loses them;
//! a bookie whose disk was wiped loses everything, fences included. Two things then go
//! wrong (seed 004): a forgotten fence lets a zombie writer reach its ack quorum after
//! recovery began (D3), and "no such entry" answers for entries it had acknowledged let
//! recovery truncate the ledger (D2, D1). So before such a bookie serves, the pre-boot
//! check runs:
//!
//! 1. set the persistent `NEEDS_INTEGRITY_CHECK` storage flag (the full check, in
//!    `folio-repair`, clears it once every ledger is whole again — after a crash too);
//! 2. list every ledger's metadata (paged, rate-limited);
//! 3. for every ledger whose ensembles include this bookie: make it exist locally (master
//!    key from the metadata's password) and **fence** it; for every such ledger that is not
//!    closed and whose last ensemble includes this bookie, also set **limbo** (reads that
//!    would answer no-such-entry/ledger answer `Unknown`, which recovery never counts as
//!    negative);
//! 4. flush storage; only then serve.
//!
//! Fencing closed ledgers too is stricter than BookKeeper (which fences non-closed ones):
//! a closed ledger takes only recovery adds, so the fence costs nothing and a zombie
//! writer can never be acknowledged by this bookie again.

use std::time::Duration;

use folio_meta::MetadataStore;
use folio_meta::keys::Keys;
use folio_meta::records::{LedgerMetadata, LedgerState, Record};
use folio_proto::LedgerId;
use folio_proto::wire::master_key;

use crate::config::StorageConfig;
use crate::error::BookieError;
use crate::index::flags::NEEDS_INTEGRITY_CHECK;
use crate::storage::Storage;

/// How the integrity check runs: on or off, and how fast it copies.
#[derive(Debug, Clone)]
pub struct IntegrityConfig {
    /// Run the pre-boot check and the full check (`None`: exactly when
    /// `journal.write_data = false`).
    pub enabled: Option<bool>,
    /// A data dir without a cookie while the metadata store has this bookie's cookie (a
    /// wiped disk): run the pre-boot check and re-stamp, instead of refusing to start.
    pub stamp_missing_cookies: bool,
    /// Ledger metadata records per listing page, and pages per second at most.
    pub list_page: usize,
    pub list_pages_per_sec: u32,
    /// How often the full check looks at the `NEEDS_INTEGRITY_CHECK` flag.
    pub check_interval: Duration,
    /// Tests only: turn off one protection to show it is needed.
    #[doc(hidden)]
    pub pre_boot_fence: bool,
    #[doc(hidden)]
    pub pre_boot_limbo: bool,
}

impl Default for IntegrityConfig {
    fn default() -> Self {
        IntegrityConfig {
            enabled: None,
            stamp_missing_cookies: false,
            list_page: 1000,
            list_pages_per_sec: 50,
            check_interval: Duration::from_secs(3),
            pre_boot_fence: true,
            pre_boot_limbo: true,
        }
    }
}

impl IntegrityConfig {
    /// Whether the check runs for this storage (on by default only without a journal).
    pub fn is_enabled(&self, storage: &StorageConfig) -> bool {
        self.enabled.unwrap_or(!storage.journal.write_data)
    }
}

/// What the pre-boot check did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreBootReport {
    pub ledgers_listed: u64,
    /// Ledgers with this bookie in an ensemble (made to exist locally and fenced).
    pub ledgers_fenced: u64,
    /// Non-closed ledgers with this bookie in the last ensemble, put in limbo.
    pub ledgers_in_limbo: u64,
}

/// Whether a ledger's ensembles include `bookie_id`, and whether its last one does.
pub fn membership(m: &LedgerMetadata, bookie_id: &str) -> (bool, bool) {
    let has = |b: &Vec<String>| b.iter().any(|x| x == bookie_id);
    let any = m.ensembles.values().any(has);
    let last = m.ensembles.last_key_value().is_some_and(|(_, b)| has(b));
    (any, last)
}

/// Calls `f` with every ledger whose ensembles name `bookie_id` (any fragment), and whether
/// its last ensemble does; the ledger metadata is listed `list_page` at a time, at most
/// `list_pages_per_sec` pages a second. Returns how many ledgers were listed.
async fn for_each_ledger_naming(
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
    config: &IntegrityConfig,
    mut f: impl FnMut(LedgerId, &LedgerMetadata, bool) -> Result<(), BookieError>,
) -> Result<u64, BookieError> {
    let prefix = keys.ledgers();
    let pause = Duration::from_secs(1) / config.list_pages_per_sec.max(1);
    let (mut listed, mut after) = (0u64, None::<String>);
    loop {
        let page = meta.list(&prefix, after.as_deref(), config.list_page.max(1)).await?;
        for v in &page.items {
            let Some(ledger_id) = keys.parse_ledger(&v.key) else { continue };
            let m = LedgerMetadata::decode(&v.key, &v.value)?;
            listed += 1;
            let (any, last) = membership(&m, bookie_id);
            if any {
                f(ledger_id, &m, last)?;
            }
        }
        if !page.more {
            return Ok(listed);
        }
        after = page.items.last().map(|v| v.key.clone());
        tokio::time::sleep(pause).await;
    }
}

/// The ledgers whose ensembles name `bookie_id` (any fragment): how many, and the first
/// few ids (for messages).
pub async fn ledgers_naming(
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
) -> Result<(u64, Vec<LedgerId>), BookieError> {
    use crate::limits::INTEGRITY_EXAMPLES_MAX;
    let (mut count, mut examples) = (0u64, Vec::new());
    let config = IntegrityConfig::default();
    for_each_ledger_naming(meta, keys, bookie_id, &config, |id, _, _| {
        count += 1;
        if examples.len() < INTEGRITY_EXAMPLES_MAX {
            examples.push(id);
        }
        Ok(())
    })
    .await?;
    Ok((count, examples))
}

/// Before a journal-less bookie serves (steps 1 to 4 above): sets the check flag, then fences
/// (and where needed puts in limbo) every ledger whose ensembles include this bookie.
pub async fn pre_boot_check(
    storage: &Storage,
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
    config: &IntegrityConfig,
) -> Result<PreBootReport, BookieError> {
    storage.set_storage_flags(storage.storage_flags()? | NEEDS_INTEGRITY_CHECK)?;
    let mut report = PreBootReport::default();
    report.ledgers_listed =
        for_each_ledger_naming(meta, keys, bookie_id, config, |ledger_id, m, last| {
            let limbo = config.pre_boot_limbo && last && m.state != LedgerState::Closed;
            let key = master_key(m.password.as_deref().unwrap_or_default());
            match storage.prepare_ledger(ledger_id, key, config.pre_boot_fence, limbo) {
                // Deleted here already (its metadata went after the listing): nothing to guard.
                Err(folio_storage::StorageError::Deleted(_)) => return Ok(()),
                r => r?,
            }
            report.ledgers_fenced += u64::from(config.pre_boot_fence);
            report.ledgers_in_limbo += u64::from(limbo);
            Ok(())
        })
        .await?;
    storage.flush()?;
    tracing::warn!(
        bookie = bookie_id,
        ?report,
        "pre-boot integrity check done: ledgers fenced and in limbo until the full check repairs them"
    );
    Ok(report)
}
