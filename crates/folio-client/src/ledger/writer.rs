//! The writer: adds striped over the ensemble, acknowledged at the ack quorum and
//! completed in entry order; a failed bookie replaced (ensemble change) and its unconfirmed
//! entries resent; close at the LAC; the explicit LAC on an interval.

use std::sync::{Arc, Mutex};

use folio_meta::records::{LedgerMetadata, LedgerState, Update, update};
use folio_proto::limits::ENTRY_BYTES_MAX;
use folio_proto::wire::{MasterKey, Request};
use folio_proto::{
    ENTRY_HEADER_BYTES, Entry, EntryHeader, EntryId, INVALID_ENTRY_ID, LedgerId, Status,
};
use tokio::sync::{Semaphore, watch};

use crate::BookieConnection;
use crate::error::{LedgerError, Result, WriterFailure};

use super::*;

impl LedgerWriter {
    pub(super) fn new(
        id: LedgerId,
        key: MasterKey,
        metadata: LedgerMetadata,
        bookies: Vec<(String, Arc<BookieConnection>)>,
        client: LedgerClient,
    ) -> LedgerWriter {
        let state = WriterState { lac: INVALID_ENTRY_ID, ..WriterState::default() };
        let inner = WriterInner {
            id,
            key,
            metadata: Mutex::new(metadata),
            ensemble: Mutex::new(bookies),
            state: Mutex::new(state),
            lac_tx: watch::channel(INVALID_ENTRY_ID).0,
            added: watch::channel(()).0,
            change_lock: tokio::sync::Mutex::new(()),
            client,
        };
        let inner = Arc::new(inner);
        if let Some(interval) = inner.client.explicit_lac_interval {
            tokio::spawn(explicit_lac(Arc::downgrade(&inner), interval));
        }
        if let Some(after) = inner.client.add_stall_after {
            tokio::spawn(super::stall::watch_stalls(Arc::downgrade(&inner), after));
        }
        LedgerWriter { inner, slots: Arc::new(Semaphore::new(OUTSTANDING_ADDS_MAX)) }
    }

    /// The ledger's id.
    pub fn id(&self) -> LedgerId {
        self.inner.id
    }

    /// The last entry acknowledged by an ack quorum, with every entry before it (-1: none).
    pub fn last_add_confirmed(&self) -> EntryId {
        *self.inner.lac_tx.borrow()
    }

    /// The ledger's metadata as the writer knows it (its ensembles so far).
    pub fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata.lock().expect("metadata lock").clone()
    }

    /// A reader over this ledger as the writer knows it now (its current ensembles), for
    /// entries up to `last_add_confirmed`.
    pub fn reader(&self) -> LedgerReader {
        LedgerReader::new(self.inner.id, self.metadata(), self.inner.client.clone())
    }

    /// Appends `payload`; returns its entry id once it and every earlier entry reached the
    /// ack quorum.
    pub async fn add(&self, payload: &[u8]) -> Result<EntryId> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LedgerError::Closed(self.inner.id))?;
        self.start_add(payload, Some(slot))?.1.await
    }

    /// Starts an add and returns its entry id at once; the caller follows completion
    /// through `lac_watch` (entries at or below the LAC are confirmed) and `failure`, and
    /// bounds its own outstanding adds (this takes no slot).
    pub fn add_detached(&self, payload: &[u8]) -> Result<EntryId> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        Ok(self.start_add(payload, None)?.0)
    }

    /// The LAC as it moves; also changes (to the same value) when the writer fails.
    pub fn lac_watch(&self) -> watch::Receiver<EntryId> {
        self.inner.lac_tx.subscribe()
    }

    /// Why the writer failed, once it has: no add after that succeeds.
    pub fn failure(&self) -> Option<WriterFailure> {
        self.inner.state.lock().expect("writer lock").failed.clone()
    }

    /// Starts an add without waiting: the entry id is assigned before this returns (so
    /// callers that start adds in order get ids in that order), and the future completes
    /// when the entry is confirmed, as `add` does. Fails with `Busy` when
    /// `OUTSTANDING_ADDS_MAX` adds are outstanding.
    pub fn add_nowait(
        &self,
        payload: &[u8],
    ) -> Result<(EntryId, impl Future<Output = Result<EntryId>> + Send + 'static)> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        let slot =
            self.slots.clone().try_acquire_owned().map_err(|_| LedgerError::Busy(self.inner.id))?;
        self.start_add(payload, Some(slot))
    }

    pub(super) fn start_add(
        &self,
        payload: &[u8],
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<(EntryId, impl Future<Output = Result<EntryId>> + Send + 'static)> {
        let inner = &self.inner;
        let entry_id = {
            let mut st = inner.state.lock().expect("writer lock");
            if let Some(f) = &st.failed {
                return Err(LedgerError::WriterFailed(inner.id, f.clone()));
            }
            if st.closed {
                return Err(LedgerError::Closed(inner.id));
            }
            let id = st.next_entry;
            st.next_entry += 1;
            st.length += payload.len() as u64;
            let header = EntryHeader {
                ledger_id: inner.id,
                entry_id: id,
                last_add_confirmed: st.lac,
                length: st.length,
            };
            let entry = Entry::encode(header, payload).into_bytes();
            let length = st.length;
            let since = tokio::time::Instant::now();
            st.pending.insert(id, PendingAdd { entry, length, since, acked: Default::default() });
            id
        };
        inner.added.send_replace(());
        let down = inner.state.lock().expect("writer lock").down.clone();
        let positions: Vec<usize> =
            inner.write_set(entry_id).into_iter().filter(|p| !down.contains(p)).collect();
        if positions.len() < inner.quorums().1 {
            inner.fail(WriterFailure::WriteSetDown { entry_id, up: positions.len() });
        }
        for pos in positions {
            inner.send(entry_id, pos);
        }
        let inner = inner.clone();
        Ok((entry_id, async move {
            let _slot = slot;
            inner.wait_confirmed(entry_id).await
        }))
    }
}

impl WriterInner {
    pub(super) async fn wait_confirmed(self: &Arc<Self>, entry_id: EntryId) -> Result<EntryId> {
        let inner = self;
        let mut rx = inner.lac_tx.subscribe();
        let confirmed = rx
            .wait_for(|lac| {
                *lac >= entry_id || inner.state.lock().expect("writer lock").failed.is_some()
            })
            .await
            .map(|lac| *lac >= entry_id)
            .unwrap_or(false);
        if confirmed {
            return Ok(entry_id);
        }
        let failed = inner.state.lock().expect("writer lock").failed.clone();
        match failed.unwrap_or(WriterFailure::Dropped) {
            WriterFailure::Fenced { .. } => Err(LedgerError::Fenced(inner.id)),
            f => Err(LedgerError::WriterFailed(inner.id, f)),
        }
    }
}

impl LedgerWriter {
    /// Waits for outstanding adds, then records the ledger as closed at its LAC.
    pub async fn close(&self) -> Result<EntryId> {
        let inner = &self.inner;
        let _all = self
            .slots
            .acquire_many(OUTSTANDING_ADDS_MAX as u32)
            .await
            .map_err(|_| LedgerError::Closed(inner.id))?;
        let (lac, length) = {
            let mut st = inner.state.lock().expect("writer lock");
            st.closed = true;
            (st.lac, st.lac_length)
        };
        let key = inner.client.keys.ledger(inner.id);
        let id = inner.id;
        let closed = update::<LedgerMetadata>(inner.client.meta.as_ref(), &key, |m| {
            let Some(m) = m else {
                return Err(folio_meta::MetaError::Corrupt {
                    key: key.clone(),
                    detail: format!("ledger {id} vanished"),
                });
            };
            match m.state {
                LedgerState::Closed if m.last_entry_id == lac => Ok(Update::Nothing),
                LedgerState::Open => {
                    let mut m = m.clone();
                    m.state = LedgerState::Closed;
                    m.last_entry_id = lac;
                    m.length = length;
                    Ok(Update::Write(m))
                }
                // Someone recovered (or is recovering) the ledger: it is theirs to close.
                _ => Err(folio_meta::MetaError::Conflict { key: key.clone() }),
            }
        })
        .await;
        match closed {
            Ok(Some((m, _))) => {
                *inner.metadata.lock().expect("metadata lock") = m;
                Ok(lac)
            }
            Ok(None) => Err(LedgerError::NoSuchLedger(id)),
            Err(folio_meta::MetaError::Conflict { .. }) => Err(LedgerError::Fenced(id)),
            Err(e) => Err(e.into()),
        }
    }
}

/// Sends the LAC to the ensemble whenever it moved since the last time, so tailing readers
/// see the last entries even when no later add piggybacks them. Ends with the writer. It
/// waits for the LAC to move before it waits `interval`: an idle ledger (one per idle
/// partition) costs no wake-ups.
pub(super) async fn explicit_lac(
    writer: std::sync::Weak<WriterInner>,
    interval: std::time::Duration,
) {
    let Some(mut moved) = writer.upgrade().map(|w| w.lac_tx.subscribe()) else { return };
    let mut sent = INVALID_ENTRY_ID;
    loop {
        // Err: the writer is gone (its sender with it).
        if moved.changed().await.is_err() {
            return;
        }
        tokio::time::sleep(interval).await;
        let Some(w) = writer.upgrade() else { return };
        let (lac, done) = {
            let st = w.state.lock().expect("writer lock");
            (st.lac, st.closed || st.failed.is_some())
        };
        if done {
            return;
        }
        if lac <= sent {
            continue;
        }
        let ensemble: Vec<String> =
            w.ensemble.lock().expect("ensemble lock").iter().map(|(b, _)| b.clone()).collect();
        for b in ensemble {
            let request = Request::WriteLac { ledger_id: w.id, lac, master_key: w.key };
            if let Err(e) = w.client.call(&b, request).await {
                tracing::debug!(ledger = w.id, bookie = %b, error = %e, "explicit LAC not delivered");
            }
        }
        sent = lac;
    }
}

impl WriterInner {
    pub(super) fn quorums(&self) -> (usize, usize) {
        let m = self.metadata.lock().expect("metadata lock");
        (m.write_quorum as usize, m.ack_quorum as usize)
    }

    /// Ensemble positions of entry `e`'s write set: `(e + i) mod E` for `i < Qw`.
    pub(super) fn write_set(&self, entry_id: EntryId) -> Vec<usize> {
        let (w, _) = self.quorums();
        let e = self.ensemble.lock().expect("ensemble lock").len() as i64;
        (0..w).map(|i| ((entry_id + i as i64) % e) as usize).collect()
    }

    pub(super) fn fail(&self, reason: WriterFailure) {
        tracing::warn!(ledger = self.id, %reason, "ledger writer failed");
        self.state.lock().expect("writer lock").failed.get_or_insert(reason);
        self.lac_tx.send_modify(|_| {}); // wake every waiting add
    }

    /// Sends a pending entry to the bookie at `pos`; the answer comes back to `on_answer`.
    pub(super) fn send(self: &Arc<Self>, entry_id: EntryId, pos: usize) {
        let Some(entry) =
            self.state.lock().expect("writer lock").pending.get(&entry_id).map(|p| p.entry.clone())
        else {
            return; // already confirmed
        };
        let (bookie, conn) = self.ensemble.lock().expect("ensemble lock")[pos].clone();
        let this = self.clone();
        tokio::spawn(async move {
            let request = Request::Add { master_key: this.key, recovery: false, entry };
            let timeout = this.client.request_timeout;
            let answer = match tokio::time::timeout(timeout, conn.request(request)).await {
                Ok(Ok(f)) => Ok(f.status),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            };
            this.on_answer(entry_id, pos, &bookie, answer);
        });
    }

    pub(super) fn on_answer(
        self: &Arc<Self>,
        entry_id: EntryId,
        pos: usize,
        bookie: &str,
        answer: std::result::Result<Status, String>,
    ) {
        match answer {
            Ok(Status::Ok) => {
                let still_there = self.ensemble.lock().expect("ensemble lock")[pos].0 == bookie;
                if still_there {
                    let mut st = self.state.lock().expect("writer lock");
                    if let Some(p) = st.pending.get_mut(&entry_id) {
                        p.acked.insert(pos);
                    }
                    drop(st);
                    self.advance_lac();
                }
            }
            Ok(Status::Fenced) => self.fail(WriterFailure::Fenced { bookie: bookie.to_string() }),
            Ok(Status::Unauthorized) => {
                self.fail(WriterFailure::Unauthorized { bookie: bookie.to_string() })
            }
            Ok(status) => self.replace_later(pos, bookie, status.name().to_string()),
            Err(e) => self.replace_later(pos, bookie, e),
        }
    }

    /// Moves the LAC over every leading entry with `Qa` acks (unless an ensemble change is
    /// in progress) and wakes the adds it confirms.
    pub(super) fn advance_lac(self: &Arc<Self>) {
        let (_, a) = self.quorums();
        let mut st = self.state.lock().expect("writer lock");
        if st.changing {
            return;
        }
        let before = st.lac;
        let mut lac = st.lac;
        let mut lac_length = st.lac_length;
        while let Some(entry) = st.pending.first_entry() {
            if *entry.key() != lac + 1 || entry.get().acked.len() < a {
                break;
            }
            let (id, p) = entry.remove_entry();
            lac = id;
            lac_length = p.length;
        }
        // D1: the LAC moves forward only over entries Qa bookies acknowledged, in entry
        // order, and never past the last entry assigned.
        assert!(lac >= before && lac < st.next_entry, "ledger {}: LAC {before} -> {lac}", self.id);
        st.lac = lac;
        st.lac_length = lac_length;
        drop(st);
        if lac != before {
            // Acks of two entries can advance the LAC on two threads and publish in either
            // order; the watch only moves forward. (It once went back from 6 to 5, leaving
            // the add of entry 6 waiting for ever when no later add came to move it: a
            // produce never acknowledged, with nothing logged.) Not published under the
            // state lock: `wait_confirmed` takes that lock inside the watch's read lock.
            // Another thread may overtake it here (`after_unlock`: so may another task,
            // under the simulator).
            let this = self.clone();
            folio_rt::after_unlock(move || publish_lac(&this.lac_tx, lac));
        }
    }

    pub(super) fn replace_later(self: &Arc<Self>, pos: usize, bookie: &str, why: String) {
        tracing::info!(ledger = self.id, bookie, %why, "bookie failed an add; changing the ensemble");
        let (this, bookie) = (self.clone(), bookie.to_string());
        tokio::spawn(async move {
            match this.change_ensemble(pos, &bookie).await {
                Ok(()) => {}
                Err(LedgerError::NotEnoughBookies { .. }) => this.mark_down(pos, &bookie, why),
                Err(e) => {
                    this.fail(WriterFailure::EnsembleChange { bookie, why, error: e.to_string() })
                }
            }
        });
    }

    /// No replacement for `pos`: go on without it while every unconfirmed entry can still
    /// reach its ack quorum from the other bookies of its write set.
    pub(super) fn mark_down(&self, pos: usize, bookie: &str, why: String) {
        let (_, a) = self.quorums();
        let mut st = self.state.lock().expect("writer lock");
        st.down.insert(pos);
        let ids: Vec<EntryId> = st.pending.keys().copied().collect();
        let short = ids
            .into_iter()
            .find(|id| self.write_set(*id).iter().filter(|p| !st.down.contains(p)).count() < a);
        drop(st);
        match short {
            Some(entry_id) => self.fail(WriterFailure::NoReplacement {
                bookie: bookie.to_string(),
                why,
                entry_id,
            }),
            None => tracing::warn!(
                ledger = self.id,
                bookie,
                %why,
                "no replacement bookie; writing to the rest of the ensemble"
            ),
        }
    }

    /// Replaces the bookie at `pos` (if it is still `failed`): a new fragment from LAC + 1
    /// through the metadata compare-and-set loop, then every unconfirmed entry whose write
    /// set holds `pos` is resent to the replacement.
    pub(super) async fn change_ensemble(self: &Arc<Self>, pos: usize, failed: &str) -> Result<()> {
        let _one_at_a_time = self.change_lock.lock().await;
        if self.ensemble.lock().expect("ensemble lock")[pos].0 != failed {
            return Ok(()); // already replaced for another entry's failure
        }
        if self.state.lock().expect("writer lock").failed.is_some() {
            return Ok(()); // a failed writer changes nothing (its adds have failed)
        }
        self.state.lock().expect("writer lock").changing = true;
        let result = self.install_replacement(pos, failed).await;
        self.state.lock().expect("writer lock").changing = false;
        if result.is_err() {
            // Acks that arrived while the LAC was frozen count now: nothing else may come
            // to move it (without this, adds waited for ever when no replacement existed).
            self.advance_lac();
        }
        result?;
        let resend: Vec<EntryId> = {
            let mut st = self.state.lock().expect("writer lock");
            let ids: Vec<EntryId> = st.pending.keys().copied().collect();
            let mut out = Vec::new();
            for id in ids {
                if self.write_set(id).contains(&pos) {
                    if let Some(p) = st.pending.get_mut(&id) {
                        // The failed bookie's ack no longer counts: the entry now belongs to
                        // the new fragment, where that position is the replacement.
                        p.acked.remove(&pos);
                    }
                    out.push(id);
                }
            }
            out
        };
        for id in resend {
            self.send(id, pos);
        }
        self.advance_lac();
        Ok(())
    }

    pub(super) async fn install_replacement(&self, pos: usize, failed: &str) -> Result<()> {
        let client = &self.client;
        let current: Vec<String> =
            self.ensemble.lock().expect("ensemble lock").iter().map(|(b, _)| b.clone()).collect();
        let (mut candidates, racks) = client.pool.spares(&current).await?;
        let qw = self.quorums().0;
        loop {
            let Some(pick) =
                crate::placement::replacement(&candidates, &racks, pos, qw, &mut folio_rt::rng())
            else {
                return Err(LedgerError::NotEnoughBookies {
                    need: current.len() + 1,
                    have: current.len(),
                });
            };
            candidates.retain(|c| c.bookie_id != pick);
            let Ok(conn) = client.pool.get(&pick).await else { continue };
            let start = self.state.lock().expect("writer lock").lac + 1;
            let key = client.keys.ledger(self.id);
            let (id, failed_s, pick_s) = (self.id, failed.to_string(), pick.clone());
            let updated = update::<LedgerMetadata>(client.meta.as_ref(), &key, |m| {
                let Some(m) = m else {
                    return Err(folio_meta::MetaError::Corrupt {
                        key: key.clone(),
                        detail: format!("ledger {id} vanished"),
                    });
                };
                if m.state != LedgerState::Open {
                    return Err(folio_meta::MetaError::Conflict { key: key.clone() });
                }
                let (&last_start, last) = m.ensembles.last_key_value().expect("validated metadata");
                if last[pos] != failed_s {
                    return Ok(Update::Nothing);
                }
                let mut ens = last.clone();
                ens[pos] = pick_s.clone();
                let mut m = m.clone();
                if last_start == start {
                    m.ensembles.insert(last_start, ens);
                } else {
                    m.ensembles.insert(start, ens);
                }
                Ok(Update::Write(m))
            })
            .await;
            let m = match updated {
                Ok(Some((m, _))) => m,
                Ok(None) => return Err(LedgerError::NoSuchLedger(self.id)),
                Err(folio_meta::MetaError::Conflict { .. }) => {
                    return Err(LedgerError::Fenced(self.id));
                }
                Err(e) => return Err(e.into()),
            };
            let placed = m.ensembles.last_key_value().expect("validated metadata").1[pos].clone();
            let (pick, conn) = if placed == pick {
                (pick, conn)
            } else {
                // The position was replaced already, by an earlier attempt of this writer
                // whose answer was lost after it applied: the metadata's bookie stands.
                // Taking `pick` instead left the ensemble here unlike the metadata, and the
                // next change put one bookie in two positions (found by the simulator,
                // #26).
                tracing::info!(ledger = self.id, failed, replacement = %placed, "ensemble already changed");
                let conn = client.pool.get(&placed).await?;
                (placed, conn)
            };
            tracing::info!(ledger = self.id, failed, replacement = %pick, from_entry = start, "ensemble changed");
            *self.metadata.lock().expect("metadata lock") = m;
            self.ensemble.lock().expect("ensemble lock")[pos] = (pick, conn);
            return Ok(());
        }
    }
}
