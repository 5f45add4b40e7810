use super::*;
use crate::limits::FLUSH_PACE_ACTIVE_FRACTION_MAX;
use crate::limits::FLUSH_PACE_MAX;

impl Inner {
    pub(super) fn run_flusher(&self) {
        loop {
            {
                let mut s = self.signal.lock().expect("signal lock");
                if !s.requested && !s.shutdown {
                    s = self
                        .signal_cond
                        .wait_timeout(s, self.config.flush_interval)
                        .expect("signal lock")
                        .0;
                }
                if s.shutdown {
                    return;
                }
                s.requested = false;
            }
            if self.check_poison().is_err() {
                continue;
            }
            if let Err(e) = self.flush_with_mark(Some(self.journal()), true) {
                tracing::error!(error = %e, "flush failed");
            }
        }
    }

    pub(super) fn flush_now(&self) -> Result<()> {
        let journal = self.journal();
        self.flush_with_mark(Some(journal), false)
    }

    /// One flush. With a journal, the checkpoint moves to the mark read at the swap.
    /// `paced`: a background flush, spread over time (see [`FlushPace`]).
    pub(super) fn flush_with_mark(&self, journal: Option<&Journal>, paced: bool) -> Result<()> {
        let mut flush = self.flush.lock().expect("flush lock");
        if self.config.mode == StorageMode::SingleWrite
            && let Some(j) = journal
        {
            self.rotate_idle_data_file(&mut flush, j);
        }
        let Some((half, mark)) = self.cache.swap(|| journal.map(Journal::written_mark)) else {
            unreachable!("only the holder of the flush lock swaps the cache");
        };
        let dirty = self.take_dirty_ledgers();
        let started = std::time::Instant::now();
        let filled_in = started - std::mem::replace(&mut flush.last_swap, started);
        let budget = if paced {
            filled_in.mul_f64(FLUSH_PACE_FRACTION).min(FLUSH_PACE_MAX)
        } else {
            std::time::Duration::ZERO
        };
        let result = match self.config.mode {
            StorageMode::TwoWrite => {
                let mut pace = FlushPace::new(half.bytes, budget, started);
                let r = self.write_flush(&mut flush, &half, &dirty, mark, &mut pace);
                self.cache.finish_flush();
                r
            }
            StorageMode::SingleWrite => match self.index_flush(&mut flush, &half, &dirty, mark) {
                Ok(carry) => {
                    self.cache.finish_flush_carrying(carry);
                    Ok(())
                }
                Err(e) => {
                    // Poisoned below: nothing reads these entries again before a reopen,
                    // which replays them from the journal.
                    self.cache.finish_flush();
                    Err(e)
                }
            },
        };
        let took = started.elapsed();
        if took > std::time::Duration::from_secs(1) {
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                bytes = half.bytes,
                entries = half.entries.len(),
                "slow flush"
            );
        } else {
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                bytes = half.bytes,
                entries = half.entries.len(),
                "flush"
            );
        }
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                self.poison(PoisonReason::Flush(e.to_string()));
                Err(e)
            }
        }
    }

    pub(super) fn take_dirty_ledgers(&self) -> Vec<(LedgerId, LedgerState)> {
        let mut ledgers = self.lock_ledgers();
        let mut dirty = Vec::new();
        for (id, l) in ledgers.iter_mut().filter(|(_, l)| l.dirty) {
            l.dirty = false;
            dirty.push((*id, l.state.clone()));
        }
        dirty
    }

    pub(super) fn write_flush(
        &self,
        flush: &mut FlushState,
        half: &CacheHalf,
        dirty: &[(LedgerId, LedgerState)],
        mark: Option<JournalPosition>,
        pace: &mut FlushPace,
    ) -> Result<()> {
        let mut batch = KvBatch::default();
        let live: std::collections::HashSet<LedgerId> = {
            let ledgers = self.lock_ledgers();
            half.entries.keys().map(|k| k.0).filter(|l| ledgers.contains_key(l)).collect()
        };
        for ((ledger_id, entry_id), entry) in &half.entries {
            if !live.contains(ledger_id) {
                continue; // deleted while in the cache
            }
            let loc = flush.logs.append(entry, &mut batch)?;
            batch.put(Table::Locations, index::location_key(*ledger_id, *entry_id), loc.encode());
            pace.wrote(entry.encoded_len(), &self.cache);
        }
        let wrote = !half.entries.is_empty();
        flush.logs.finish_flush(&mut batch, wrote, |l| self.lock_ledgers().contains_key(&l))?;
        for (id, state) in dirty {
            batch.put(Table::Ledgers, index::ledger_key(*id), state.encode());
        }
        let moved = mark.is_some() && mark != flush.last_mark;
        if batch.is_empty() && !moved {
            return Ok(());
        }
        flush.logs.record_next_log_id(&mut batch);
        self.commit_checkpointed(flush, batch, mark)
    }

    /// Commits a flush's index batch with the checkpoint at `mark` (when the journal runs):
    /// the index learns it first (`index::META_CHECKPOINT`), then the journal's checkpoint
    /// file, then the journal may release the files before it (single-write keeps them: they
    /// are data, see `data_files`).
    pub(super) fn commit_checkpointed(
        &self,
        flush: &mut FlushState,
        mut batch: KvBatch,
        mark: Option<JournalPosition>,
    ) -> Result<()> {
        let checkpoint = mark.zip(self.journal.get());
        if let Some((m, _)) = checkpoint {
            batch.put(
                Table::Meta,
                index::META_CHECKPOINT.to_vec(),
                journal::format::encode_checkpoint(m).to_vec(),
            );
        }
        self.kv.commit(batch)?;
        if let Some((m, journal)) = checkpoint {
            journal::write_checkpoint(self.fs.as_ref(), &self.config.journal_dir, m)?;
            journal.release_before(m.file_id);
            flush.last_mark = Some(m);
        }
        Ok(())
    }
}

/// What the flusher keeps between flushes (under the flush lock).
#[derive(Debug)]
pub(super) struct FlushState {
    pub(super) logs: EntryLogSet,
    /// Single-write mode: byte counts of the data files not sealed yet.
    pub(super) data: DataFiles,
    pub(super) last_mark: Option<JournalPosition>,
    /// When the cache halves were last swapped: the flushed half filled since then.
    pub(super) last_swap: std::time::Instant,
}

/// A background flush spreads its entry-log writes over this fraction of the time the
/// flushed half took to fill, so it ends well before the next half is full...
const FLUSH_PACE_FRACTION: f64 = 0.5;
/// The pace is checked after every this many bytes written.
const FLUSH_PACE_STEP_BYTES: usize = 256 * 1024;

/// Paces a background flush. A disk cache flush persists everything written before it
/// (on this kind of VM the host's flush is file-wide), so a flush that writes its half as
/// fast as it can makes the journal's next fdatasyncs carry megabytes of entry-log data:
/// add latency spikes of tens of ms at half load. Written at an even rate, each journal
/// fdatasync carries only a share.
pub(super) struct FlushPace {
    start: std::time::Instant,
    budget: std::time::Duration,
    total: usize,
    done: usize,
    unpaced: usize,
}

impl FlushPace {
    pub(super) fn new(
        total: usize,
        budget: std::time::Duration,
        start: std::time::Instant,
    ) -> FlushPace {
        FlushPace { start, budget, total, done: 0, unpaced: 0 }
    }

    /// Counts `bytes` written; sleeps when ahead of schedule.
    pub(super) fn wrote(&mut self, bytes: usize, cache: &WriteCache) {
        if let Some(d) = self.delay(bytes, || cache.active_fraction(), std::time::Instant::now) {
            std::thread::sleep(d);
        }
    }

    /// How long to pause after `bytes` more were written, if at all. The cache and the
    /// clock are read only once per step, not per entry.
    pub(super) fn delay(
        &mut self,
        bytes: usize,
        active_fraction: impl FnOnce() -> f64,
        now: impl FnOnce() -> std::time::Instant,
    ) -> Option<std::time::Duration> {
        self.done += bytes;
        self.unpaced += bytes;
        if self.budget.is_zero() || self.unpaced < FLUSH_PACE_STEP_BYTES {
            return None;
        }
        self.unpaced = 0;
        if active_fraction() >= FLUSH_PACE_ACTIVE_FRACTION_MAX {
            self.budget = std::time::Duration::ZERO; // unpaced for the rest of this flush
            return None;
        }
        let due = self.start + self.budget.mul_f64(self.done as f64 / self.total.max(1) as f64);
        let now = now();
        (due > now).then(|| due - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const MIB: usize = 1024 * 1024;

    #[test]
    pub(super) fn a_paced_flush_spreads_its_writes_over_the_budget() {
        let start = Instant::now();
        let mut pace = FlushPace::new(8 * MIB, Duration::from_millis(800), start);
        // Below one step nothing is checked.
        assert_eq!(pace.delay(FLUSH_PACE_STEP_BYTES - 1, || 0.0, || start), None);
        // Written instantly, the first MiB is due at 100 ms.
        let d = pace.delay(MIB - (FLUSH_PACE_STEP_BYTES - 1), || 0.0, || start).unwrap();
        assert_eq!(d, Duration::from_millis(100));
        // Behind schedule: no pause.
        assert_eq!(pace.delay(MIB, || 0.0, || start + Duration::from_millis(500)), None);
        // Ahead again: 3 MiB done at 200 ms, due at 300 ms.
        let d = pace.delay(MIB, || 0.0, || start + Duration::from_millis(200)).unwrap();
        assert_eq!(d, Duration::from_millis(100));
    }

    #[test]
    pub(super) fn pacing_stops_once_the_active_half_fills_and_never_applies_without_a_budget() {
        let start = Instant::now();
        let mut pace = FlushPace::new(8 * MIB, Duration::from_millis(800), start);
        assert_eq!(pace.delay(MIB, || FLUSH_PACE_ACTIVE_FRACTION_MAX, || start), None);
        // Once writers may soon wait, the rest of the flush runs flat out.
        assert_eq!(pace.delay(MIB, || 0.0, || start), None);
        let mut unpaced = FlushPace::new(8 * MIB, Duration::ZERO, start);
        assert_eq!(unpaced.delay(4 * MIB, || 0.0, || start), None);
    }
}
