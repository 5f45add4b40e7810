//! What every managed log of a process shares (the metadata store, the ledger client, the
//! key layout, the clock, the owner's name), and the two ledger operations the log and the
//! trash both do: creating a log's ledger with its owner tag, and fencing one for good.
//!
//! **Architecture invariant:** the log (`log/`) and the trash (`trash.rs`) build on this
//! module, which knows neither.

use std::sync::Arc;

use bytes::Bytes;
use folio_client::{CreateOptions, LedgerClient, LedgerError, LedgerReader};
use folio_meta::keys::Keys;
use folio_meta::{Clock, MetaError, MetadataStore};

use crate::error::{LogError, Result};

/// Custom-metadata key naming the log that owns a ledger (the deleter checks it).
pub const OWNER_TAG: &str = "folio.log";

/// What every log of a process shares.
#[derive(Debug, Clone)]
pub struct LogEnv {
    pub meta: Arc<dyn MetadataStore>,
    pub client: LedgerClient,
    pub keys: Keys,
    /// Wall-clock milliseconds since the Unix epoch (persisted in records).
    pub clock: Arc<dyn Clock>,
    /// Who opens logs here (a broker or process id), recorded in the log record.
    pub owner: String,
}

impl LogEnv {
    /// Milliseconds on the environment's clock.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms().max(1)
    }
}

/// Options to create ledger `id` of log `name` with (ensemble, write, ack) quorums: the
/// owner tag names the log (the trash deletes only ledgers whose tag names their log).
pub(crate) fn ledger_options(name: &str, id: u64, (e, w, a): (u16, u16, u16)) -> CreateOptions {
    let mut o = CreateOptions::new(e, w, a);
    o.ledger_id = Some(id);
    o.custom.insert(OWNER_TAG.into(), Bytes::from(name.to_string()));
    o
}

/// Fences ledger `id` for good: recovers it (its writer can add nothing more) or, if a
/// chain lists it but it was never created (an owner commits its chain, then creates the
/// ledger), creates it closed with `options`, so that the owner's create fails. Returns a
/// reader of the closed ledger.
pub(crate) async fn fence_ledger(
    client: &LedgerClient,
    id: u64,
    options: impl Fn() -> CreateOptions,
) -> Result<LedgerReader> {
    for _ in 0..3 {
        match client.recover(id).await {
            Ok(r) => return Ok(r),
            Err(LedgerError::NoSuchLedger(_)) => match client.create(options()).await {
                Ok(w) => w.close().await.map(|_| ())?,
                Err(LedgerError::Meta(MetaError::Conflict { .. })) => {}
                // The chain that listed it changed meanwhile: whoever changed it owns it now.
                Err(LedgerError::CreateRefused(_)) => {
                    return Err(LogError::Fenced(format!("ledger {id}: its log changed")));
                }
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(LogError::LedgersUnavailable {
        why: format!("ledger {id} could not be recovered"),
        source: None,
    })
}
