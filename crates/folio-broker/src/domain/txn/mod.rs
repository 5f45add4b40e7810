//! Transactions (Kafka's exactly-once produce): the coordinator's state machine per
//! transactional id (`TxnCoordinator`), the markers that end a transaction in each of its
//! partitions (`marker`), and each partition's open and aborted transactions (`partition`).
//!
//! The coordinator of a transactional id is chosen like a group's (the owner of its key,
//! `cluster::txn_key`). Its state lives in the metadata store, one record per id, and every
//! change is a compare-and-set of the version read, so a coordinator that lost the id (to
//! another broker, or to a newer request here) can never overwrite a newer state; a new
//! coordinator needs no loading: the record is the state.
//!
//! ```text
//! transactions/<id, escaped>          TxnRecord (record.rs): producer id, epoch, state,
//!                                     timeout, partitions, groups
//! transactions-ending/<id, escaped>   empty: the id is in PrepareCommit or PrepareAbort
//! transaction-offsets/<group>/<pid>   TxnOffsetCommit's offsets, until the end
//! ```
//! EndTxn writes Prepare* and the ending key in one transaction and answers. Every broker
//! then writes the markers of the partitions it owns (and applies or drops the offsets of
//! the groups it coordinates), removing each from the record as it lands; the one that
//! removes the last writes Complete* and deletes the ending key (the broker's `transactions.rs`).
//! Until then the id's next transaction waits (CONCURRENT_TRANSACTIONS, which clients
//! retry).
//!
//! Epochs: InitProducerId bumps the epoch (a new producer id once it would pass
//! `i16::MAX - 1`); one while a transaction is open aborts it at the bumped epoch, so the
//! old producer's late batches and markers are fenced on every partition
//! (`PartitionTxns::admits`). A transaction open past its timeout is aborted the same way.

pub mod marker;
pub mod partition;
pub mod record;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use folio_meta::keys::Keys;
use folio_meta::records::Record;
use folio_meta::{Compare, MetaError, MetadataStore, Txn, Version};

use crate::errors;
pub use record::{TxnRecord, TxnState};

/// The most a producer may ask for `transaction.timeout.ms` (Kafka's
/// `transaction.max.timeout.ms` default): 15 minutes.
pub const TXN_TIMEOUT_MAX_MS: i32 = 900_000;

/// Why a transactional request was refused: a Kafka code and what the log says.
#[derive(Debug)]
pub struct Refusal {
    pub code: i16,
    pub why: String,
}

fn refuse(code: i16, why: impl Into<String>) -> Refusal {
    Refusal { code, why: why.into() }
}

impl From<MetaError> for Refusal {
    fn from(e: MetaError) -> Refusal {
        refuse(errors::COORDINATOR_NOT_AVAILABLE, format!("the metadata store: {e}"))
    }
}

/// A transactional id's state, read with its version.
type Read = Option<(TxnRecord, Version)>;

/// The transaction coordinator of this broker: the state machine over the records of the
/// ids it coordinates. Requests for one id run one at a time here.
pub struct TxnCoordinator {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Bumped whenever a transaction completes here (`marked`): what `wait_complete` wakes on.
    completed: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator").finish_non_exhaustive()
    }
}

/// How a producer's id and epoch match the record.
fn check_producer(r: &TxnRecord, producer_id: i64, epoch: i16) -> Result<(), Refusal> {
    if producer_id != r.producer_id {
        return Err(refuse(
            errors::INVALID_PRODUCER_ID_MAPPING,
            format!("producer id {producer_id} is not the id's ({})", r.producer_id),
        ));
    }
    if epoch != r.epoch {
        return Err(refuse(
            errors::PRODUCER_FENCED,
            format!("producer epoch {epoch} is not the id's ({}): fenced", r.epoch),
        ));
    }
    Ok(())
}

/// Prepare* → Complete*; under TV2 with the epoch spent, the next producer id takes over
/// at epoch 0.
fn complete(r: &mut TxnRecord) {
    debug_assert!(r.state.is_prepare(), "completing a transaction in {}", r.state.name());
    r.state = if r.state == TxnState::PrepareCommit {
        TxnState::CompleteCommit
    } else {
        TxnState::CompleteAbort
    };
    if r.next_producer_id >= 0 {
        (r.producer_id, r.epoch, r.next_producer_id) = (r.next_producer_id, 0, -1);
    }
}

impl TxnCoordinator {
    /// A coordinator over the records in `meta` under `keys`.
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys) -> TxnCoordinator {
        let completed = tokio::sync::watch::channel(0).0;
        TxnCoordinator { meta, keys, locks: Mutex::new(HashMap::new()), completed }
    }

    /// The record key of `id`.
    pub fn key(&self, id: &str) -> String {
        self.keys.transaction(&crate::domain::group::escape(id))
    }

    fn ending_key(&self, id: &str) -> String {
        self.keys.transaction_ending(&crate::domain::group::escape(id))
    }

    async fn lock(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut locks = self.locks.lock().expect("txn locks");
            if locks.len() > crate::limits::PRODUCERS_MAX {
                locks.retain(|_, m| Arc::strong_count(m) > 1);
            }
            locks.entry(id.to_string()).or_default().clone()
        };
        m.lock_owned().await
    }

    /// `id`'s record as stored now.
    pub async fn load(&self, id: &str) -> Result<Read, MetaError> {
        let key = self.key(id);
        match self.meta.get(&key).await? {
            None => Ok(None),
            Some(v) => Ok(Some((TxnRecord::decode(&key, &v.value)?, v.version))),
        }
    }

    /// Writes `r` over the version read (`None`: the id had no record); `ending`: put
    /// (`Some(true)`) or delete (`Some(false)`) the id's ending key in the same write.
    /// A lost compare is CONCURRENT_TRANSACTIONS: another writer moved it (the client
    /// retries and this coordinator reads it again).
    async fn save(
        &self,
        id: &str,
        r: &TxnRecord,
        read: Option<Version>,
        ending: Option<bool>,
    ) -> Result<(), Refusal> {
        let key = self.key(id);
        let guard = match read {
            Some(v) => Compare::Version(key.clone(), v),
            None => Compare::Absent(key.clone()),
        };
        let mut txn = Txn::new().compare(guard).put(key, r.encode());
        match ending {
            Some(true) => txn = txn.put(self.ending_key(id), Vec::new()),
            Some(false) => txn = txn.delete(self.ending_key(id)),
            None => {}
        }
        if self.meta.txn(txn).await?.succeeded {
            Ok(())
        } else {
            Err(refuse(errors::CONCURRENT_TRANSACTIONS, "the transaction's state moved; retry"))
        }
    }

    /// InitProducerId for `id`: its producer id and a bumped epoch (`new_id` issues a
    /// producer id when the id has none, or its epoch is spent). `expected`: the id and
    /// epoch a v3+ producer says it has (-1, -1: none). An open transaction is aborted at
    /// the bumped epoch first: the answer is CONCURRENT_TRANSACTIONS until its markers are
    /// written, and the retry gets the epoch after it.
    pub async fn init_producer(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: (i64, i16),
        now_ms: u64,
        new_id: impl AsyncFnOnce() -> Result<i64, Refusal>,
    ) -> Result<(i64, i16), Refusal> {
        if !(1..=TXN_TIMEOUT_MAX_MS).contains(&timeout_ms) {
            return Err(refuse(
                errors::INVALID_TRANSACTION_TIMEOUT,
                format!("transaction timeout {timeout_ms} ms is outside 1..={TXN_TIMEOUT_MAX_MS}"),
            ));
        }
        let _one = self.lock(id).await;
        let read = self.load(id).await?;
        let Some((mut r, version)) = read else {
            let pid = new_id().await?;
            let r = TxnRecord {
                producer_id: pid,
                epoch: 0,
                state: TxnState::Empty,
                timeout_ms: timeout_ms as u32,
                started_ms: 0,
                updated_ms: now_ms,
                coordinator_epoch: 0,
                partitions: Vec::new(),
                groups: Vec::new(),
                tv2: false,
                next_producer_id: -1,
            };
            self.save(id, &r, None, None).await?;
            return Ok((pid, 0));
        };
        if r.state.is_prepare() {
            return Err(refuse(errors::CONCURRENT_TRANSACTIONS, "the last transaction is ending"));
        }
        if expected.0 >= 0 && (expected.0 != r.producer_id || expected.1 != r.epoch) {
            return Err(refuse(
                errors::PRODUCER_FENCED,
                format!(
                    "producer {}/{} is not the id's {}/{}",
                    expected.0, expected.1, r.producer_id, r.epoch
                ),
            ));
        }
        r.coordinator_epoch = r.coordinator_epoch.wrapping_add(1);
        r.updated_ms = now_ms;
        r.timeout_ms = timeout_ms as u32;
        if r.state == TxnState::Ongoing {
            // Fence: the open transaction ends aborted at the next epoch.
            self.begin_end(id, &mut r, version, false, true, now_ms).await?;
            return Err(refuse(
                errors::CONCURRENT_TRANSACTIONS,
                "a transaction was open: it is being aborted",
            ));
        }
        if r.epoch >= i16::MAX - 1 {
            r.producer_id = new_id().await?;
            r.epoch = 0;
        } else {
            r.epoch += 1;
        }
        r.state = TxnState::Empty;
        r.partitions.clear();
        r.groups.clear();
        r.started_ms = 0;
        self.save(id, &r, Some(version), None).await?;
        Ok((r.producer_id, r.epoch))
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn: `partitions` and `groups` join `id`'s
    /// transaction (opened by the first). `tv2`: an implicit add of transaction version 2
    /// (Produce v12, TxnOffsetCommit v5): a transaction it opens ends with an epoch bump.
    pub async fn add(
        &self,
        id: &str,
        (producer_id, epoch): (i64, i16),
        (partitions, groups): (&[(String, i32)], &[String]),
        now_ms: u64,
        tv2: bool,
    ) -> Result<(), Refusal> {
        let _one = self.lock(id).await;
        let Some((mut r, version)) = self.load(id).await? else {
            return Err(refuse(errors::INVALID_PRODUCER_ID_MAPPING, "no such transactional id"));
        };
        check_producer(&r, producer_id, epoch)?;
        if r.state.is_prepare() {
            return Err(refuse(errors::CONCURRENT_TRANSACTIONS, "the last transaction is ending"));
        }
        let was_open = r.state == TxnState::Ongoing;
        if r.state.is_idle() {
            r.state = TxnState::Ongoing;
            r.started_ms = now_ms;
            r.partitions.clear();
            r.groups.clear();
            r.tv2 = tv2;
        }
        let before = (r.partitions.len(), r.groups.len());
        for p in partitions {
            if !r.partitions.contains(p) {
                r.partitions.push(p.clone());
            }
        }
        for g in groups {
            if !r.groups.contains(g) {
                r.groups.push(g.clone());
            }
        }
        if r.partitions.len() + r.groups.len() > crate::limits::TXN_PARTITIONS_MAX {
            return Err(refuse(
                errors::POLICY_VIOLATION,
                format!(
                    "a transaction writes to at most {} partitions and groups (txn_partitions_max)",
                    crate::limits::TXN_PARTITIONS_MAX
                ),
            ));
        }
        if was_open && before == (r.partitions.len(), r.groups.len()) {
            return Ok(()); // nothing new
        }
        r.updated_ms = now_ms;
        self.save(id, &r, Some(version), None).await
    }

    /// EndTxn: `id`'s transaction commits or aborts. Answered once Prepare* is durable; its
    /// markers follow (the broker's `transactions.rs`). A retry of an end already done is
    /// answered as it was; one still being written gets CONCURRENT_TRANSACTIONS. `tv2`
    /// (EndTxn v5, KIP-890): the end bumps the epoch (its markers carry the new one, so
    /// the ended transaction's late batches are fenced), a retry is told by its epoch
    /// being one behind, and an abort with nothing open is a bump too; `new_id` issues the
    /// next producer id when the epoch is spent. Returns the producer id and epoch of the
    /// next transaction. `arrived_ms`: when the request reached this broker; under version
    /// 1, where epochs do not tell transactions apart, one that reached it well before the
    /// open transaction began (`TXN_END_BEFORE_START_MARGIN`) belongs to an earlier one,
    /// held here meanwhile (a coordinator cut off from the store), and is refused: it would
    /// end the open one (Kafka's KAFKA-17754; found by the simulator). A request delayed in
    /// the network instead is the version 1 hole only version 2 closes.
    pub async fn end(
        &self,
        id: &str,
        (producer_id, epoch): (i64, i16),
        (commit, tv2): (bool, bool),
        (arrived_ms, now_ms): (u64, u64),
        new_id: impl AsyncFnOnce() -> Result<i64, Refusal>,
    ) -> Result<(i64, i16), Refusal> {
        let _one = self.lock(id).await;
        let Some((mut r, version)) = self.load(id).await? else {
            return Err(refuse(errors::INVALID_PRODUCER_ID_MAPPING, "no such transactional id"));
        };
        let retry = tv2 && producer_id == r.producer_id && epoch.checked_add(1) == Some(r.epoch);
        if !retry {
            check_producer(&r, producer_id, epoch)?;
        }
        let done = if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
        let prepare = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        let next = |r: &TxnRecord| match r.next_producer_id {
            -1 => (r.producer_id, r.epoch),
            next => (next, 0),
        };
        let margin = crate::limits::TXN_END_BEFORE_START_MARGIN.as_millis() as u64;
        match r.state {
            TxnState::Ongoing
                if !tv2 && !r.tv2 && arrived_ms.saturating_add(margin) < r.started_ms =>
            {
                Err(refuse(
                    errors::INVALID_TXN_STATE,
                    "an EndTxn that arrived before this transaction began (a late one of an earlier transaction)",
                ))
            }
            TxnState::Ongoing if !retry => {
                let bump = tv2 || r.tv2;
                if bump && r.epoch >= i16::MAX - 2 {
                    r.next_producer_id = new_id().await?;
                }
                self.begin_end(id, &mut r, version, commit, bump, now_ms).await?;
                Ok(next(&r))
            }
            s if s == done && (retry || !tv2) => Ok(next(&r)),
            s if s == prepare && (retry || !tv2) => {
                Err(refuse(errors::CONCURRENT_TRANSACTIONS, "the transaction is still ending"))
            }
            s if tv2 && !commit && !retry && s.is_idle() => {
                // TV2: an abort with nothing open bumps the epoch (fencing what is late).
                if r.epoch >= i16::MAX - 2 {
                    r.producer_id = new_id().await?;
                    r.epoch = 0;
                } else {
                    r.epoch += 1;
                }
                r.state = TxnState::CompleteAbort;
                r.updated_ms = now_ms;
                self.save(id, &r, Some(version), None).await?;
                Ok((r.producer_id, r.epoch))
            }
            s => Err(refuse(
                errors::INVALID_TXN_STATE,
                format!(
                    "{} with the transaction {}",
                    if commit { "commit" } else { "abort" },
                    s.name()
                ),
            )),
        }
    }

    /// Ongoing → Prepare*: the partitions and groups left to mark are the transaction's
    /// (`fence`: at the next epoch, fencing the producer).
    async fn begin_end(
        &self,
        id: &str,
        r: &mut TxnRecord,
        version: Version,
        commit: bool,
        fence: bool,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        debug_assert_eq!(r.state, TxnState::Ongoing);
        if fence {
            r.epoch = r.epoch.saturating_add(1).min(i16::MAX - 1);
        }
        r.updated_ms = now_ms;
        if r.partitions.is_empty() && r.groups.is_empty() {
            r.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
            complete(r);
            return self.save(id, r, Some(version), None).await;
        }
        r.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        tracing::debug!(
            transactional_id = id,
            state = r.state.name(),
            partitions = r.partitions.len(),
            "ending a transaction"
        );
        self.save(id, r, Some(version), Some(true)).await
    }

    /// Aborts `id`'s transaction if it is open past its timeout (at the next epoch, so the
    /// producer is fenced); whether it did.
    pub async fn abort_if_expired(&self, id: &str, now_ms: u64) -> Result<bool, Refusal> {
        self.abort_open(id, now_ms, true).await
    }

    /// Aborts `id`'s open transaction at the next epoch, fencing its producer (`folio
    /// transactions abort`; `expired_only`: only one open past its timeout); whether it
    /// did. The markers follow as after any EndTxn.
    pub async fn abort_open(
        &self,
        id: &str,
        now_ms: u64,
        expired_only: bool,
    ) -> Result<bool, Refusal> {
        let _one = self.lock(id).await;
        let Some((mut r, version)) = self.load(id).await? else { return Ok(false) };
        let expired = r.started_ms + u64::from(r.timeout_ms) <= now_ms;
        if r.state != TxnState::Ongoing || (expired_only && !expired) {
            return Ok(false);
        }
        let (pid, epoch) = (r.producer_id, r.epoch);
        tracing::info!(
            transactional_id = id,
            producer_id = pid,
            epoch,
            expired,
            "aborting an open transaction"
        );
        self.begin_end(id, &mut r, version, false, true, now_ms).await?;
        Ok(true)
    }

    /// Waits until `id`'s transaction is no longer ending (its markers written), for at
    /// most `within`: EndTxn answers after it, so the producer's next transaction does not
    /// meet CONCURRENT_TRANSACTIONS and its client's backoff. Markers of partitions other
    /// brokers own may take longer; then the answer goes out without them.
    pub async fn wait_complete(&self, id: &str, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let mut completed = self.completed.subscribe();
        loop {
            completed.borrow_and_update();
            match self.load(id).await {
                Ok(Some((r, _))) if r.state.is_prepare() => {}
                _ => return,
            }
            if tokio::time::timeout_at(deadline, completed.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Deletes `id`'s record if its transaction ended (or never began) before
    /// `idle_before_ms` and nothing changed it since (Kafka's Dead state: the next
    /// InitProducerId for the id starts over with a new producer id); whether it did.
    pub async fn expire(&self, id: &str, idle_before_ms: u64) -> Result<bool, Refusal> {
        let _one = self.lock(id).await;
        let Some((r, version)) = self.load(id).await? else { return Ok(false) };
        if !r.state.is_idle() || r.updated_ms >= idle_before_ms {
            return Ok(false);
        }
        let key = self.key(id);
        let txn = Txn::new().compare(Compare::Version(key.clone(), version)).delete(key);
        let gone = self.meta.txn(txn).await?.succeeded;
        if gone {
            tracing::info!(
                transactional_id = id,
                producer_id = r.producer_id,
                "transactional id expired"
            );
        }
        Ok(gone)
    }

    /// The marker work left on `id`'s ending transaction is done for `partitions` and
    /// `groups`: they leave the record, and the last one's removal completes it.
    pub async fn marked(
        &self,
        id: &str,
        (producer_id, epoch): (i64, i16),
        partitions: &[(String, i32)],
        groups: &[String],
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let _one = self.lock(id).await;
        let Some((mut r, version)) = self.load(id).await? else { return Ok(()) };
        if !r.state.is_prepare() || (r.producer_id, r.epoch) != (producer_id, epoch) {
            return Ok(()); // someone else finished it
        }
        r.partitions.retain(|p| !partitions.contains(p));
        r.groups.retain(|g| !groups.contains(g));
        r.updated_ms = now_ms;
        if r.partitions.is_empty() && r.groups.is_empty() {
            complete(&mut r);
            tracing::debug!(transactional_id = id, state = r.state.name(), "transaction ended");
            self.save(id, &r, Some(version), Some(false)).await?;
            self.completed.send_modify(|n| *n += 1);
            return Ok(());
        }
        self.save(id, &r, Some(version), None).await
    }

    /// The transactional ids whose transaction is ending (markers to write).
    pub async fn ending(&self) -> Result<Vec<String>, MetaError> {
        let prefix = self.keys.transactions_ending();
        let all = folio_meta::list_all(self.meta.as_ref(), &prefix).await?;
        Ok(all
            .iter()
            .filter_map(|v| v.key.strip_prefix(&prefix).map(crate::domain::group::unescape))
            .collect())
    }

    /// Every transactional id with its record (ListTransactions, timeouts).
    pub async fn all(&self) -> Result<Vec<(String, TxnRecord)>, MetaError> {
        let prefix = self.keys.transactions();
        let all = folio_meta::list_all(self.meta.as_ref(), &prefix).await?;
        let mut out = Vec::with_capacity(all.len());
        for v in all {
            let Some(esc) = v.key.strip_prefix(&prefix) else { continue };
            match TxnRecord::decode(&v.key, &v.value) {
                Ok(r) => out.push((crate::domain::group::unescape(esc), r)),
                Err(e) => {
                    tracing::warn!(key = %v.key, error = %e, "a transaction record that does not read")
                }
            }
        }
        Ok(out)
    }
}
