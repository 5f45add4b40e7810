//! The stalled-add watchdog (#26): a hang is never silent. An add that is still not
//! confirmed `add_stall_after` after it was started is reported — one warn line naming the
//! ledger, the entry, how long it waited, and which bookies of its write set acknowledged
//! it and which did not; counter [`adds_stalled_total`] — and handled:
//!
//! 1. the LAC is moved again over what the acknowledgements allow (an acknowledgement whose
//!    LAC move was lost is found here);
//! 2. if the entry is still pending, every bookie of its write set that has not
//!    acknowledged it is replaced (an ensemble change: the entry is resent to the
//!    replacement), whatever its connection says;
//! 3. if that same entry is still pending another `add_stall_after` later, the writer fails
//!    (`WriterFailure::AddStalled`): its adds fail instead of waiting for ever, and the
//!    managed log above moves to a new ledger.
//!
//! And a published LAC behind the confirmed one at two ticks in a row (the stuck append of
//! #26: two acknowledgements publishing in the other order left entry 6 confirmed but the
//! watch at 5, its add waiting with nothing pending) is published again, logged at error
//! with an `invariant` field (the simulator counts such a line as a broken promise) and
//! counted as a stalled add. The publish only moves forward, so this is a second line.
//!
//! Per-request timeouts (`request_timeout`) replace a bookie that does not answer; this
//! catches what they cannot: an answer that came but confirmed nothing, an ensemble change
//! that never ends, a bookie that accepts and never answers below the request timeout.

use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use folio_proto::EntryId;

use super::WriterInner;
use crate::error::WriterFailure;

/// Adds reported as stalled by every writer of the process.
static ADDS_STALLED: AtomicU64 = AtomicU64::new(0);

/// Adds every writer of this process reported as stalled (metric
/// `folio_ledger_adds_stalled_total`).
pub fn adds_stalled_total() -> u64 {
    ADDS_STALLED.load(Ordering::Relaxed)
}

/// The published LAC of `w` if it is behind the confirmed one, with the confirmed one; the
/// same pair as `before` (a tick ago) is a stuck publish: published again, and reported.
fn republish_if_behind(
    w: &WriterInner,
    before: Option<(EntryId, EntryId)>,
) -> Option<(EntryId, EntryId)> {
    // The state lock is not held across the watch's: `wait_confirmed` takes them the other
    // way round.
    let confirmed = w.state.lock().expect("writer lock").lac;
    let published = *w.lac_tx.borrow();
    if published >= confirmed {
        return None;
    }
    if before == Some((published, confirmed)) {
        ADDS_STALLED.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            ledger = w.id,
            published,
            confirmed,
            invariant = "a writer's published LAC reaches its confirmed LAC",
            "the published LAC is behind the confirmed one; publishing it again"
        );
        super::publish_lac(&w.lac_tx, confirmed);
        return None;
    }
    Some((published, confirmed))
}

/// Watches `writer`'s oldest pending add until the writer is gone, failed or closed. With
/// nothing pending and the published LAC caught up, it waits for the next add instead of
/// ticking: an idle writer (one per idle partition) costs no wake-ups.
pub(super) async fn watch_stalls(writer: Weak<WriterInner>, after: Duration) {
    let tick = (after / 4).max(Duration::from_millis(5));
    let Some(mut added) = writer.upgrade().map(|w| w.added.subscribe()) else { return };
    // The entry reported last, and when: it gets one more bound before the writer fails.
    let mut reported: Option<(EntryId, Instant)> = None;
    // (published, confirmed) when the published LAC was last seen behind.
    let mut behind: Option<(EntryId, EntryId)> = None;
    loop {
        tokio::time::sleep(tick).await;
        let Some(w) = writer.upgrade() else { return };
        behind = republish_if_behind(&w, behind);
        // Seen before the look at `pending`: an add queued after it wakes the wait below.
        added.borrow_and_update();
        let oldest = {
            let st = w.state.lock().expect("writer lock");
            if st.failed.is_some() || (st.closed && st.pending.is_empty()) {
                return;
            }
            st.pending.first_key_value().map(|(id, p)| (*id, p.since, p.acked.clone()))
        };
        let Some((entry_id, since, acked)) = oldest else {
            // Idle only with the published LAC caught up: a lagging publish with nothing
            // pending is the stuck append above, repaired at a later tick.
            let confirmed = w.state.lock().expect("writer lock").lac;
            if behind.is_some() || *w.lac_tx.borrow() < confirmed {
                continue;
            }
            drop(w);
            // Err: the writer is gone.
            if added.changed().await.is_err() {
                return;
            }
            continue;
        };
        let now = Instant::now();
        let waited = now.saturating_duration_since(since);
        if waited < after {
            continue;
        }
        if let Some((e, at)) = reported
            && e == entry_id
        {
            if now.saturating_duration_since(at) >= after {
                tracing::warn!(
                    ledger = w.id,
                    entry = entry_id,
                    waited_ms = waited.as_millis() as u64,
                    "a stalled add is still not confirmed after its bookies were replaced; failing the writer"
                );
                w.fail(WriterFailure::AddStalled {
                    entry_id,
                    waited_ms: waited.as_millis() as u64,
                });
                return;
            }
            continue;
        }
        reported = Some((entry_id, now));
        ADDS_STALLED.fetch_add(1, Ordering::Relaxed);
        let ensemble: Vec<String> =
            w.ensemble.lock().expect("ensemble lock").iter().map(|(b, _)| b.clone()).collect();
        let write_set = w.write_set(entry_id);
        let name = |p: &usize| ensemble.get(*p).cloned().unwrap_or_default();
        let answered: Vec<String> =
            write_set.iter().filter(|p| acked.contains(p)).map(name).collect();
        let silent: Vec<usize> = write_set.iter().copied().filter(|p| !acked.contains(p)).collect();
        tracing::warn!(
            ledger = w.id,
            entry = entry_id,
            waited_ms = waited.as_millis() as u64,
            acknowledged = ?answered,
            not_acknowledged = ?silent.iter().map(name).collect::<Vec<_>>(),
            "an add is not confirmed; replacing the bookies that did not acknowledge it"
        );
        w.advance_lac();
        let still_pending = w.state.lock().expect("writer lock").pending.contains_key(&entry_id);
        if still_pending {
            for pos in silent {
                w.replace_later(pos, &name(&pos), format!("add {entry_id} stalled for {waited:?}"));
            }
        }
    }
}
