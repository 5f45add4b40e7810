//! Group commit of the embedded store's writes (transactions and ids taken from a
//! sequence): one fsync for many.
//!
//! A writer queues its write and waits. When no writer leads a group, it leads: it
//! takes up to [`GROUP_TXNS_MAX`] queued transactions and, under the write lock, applies
//! them in queue order without syncing (each sees the ones before it, exactly as if they
//! had committed one by one), syncs once, tells the watchers, records the commit count,
//! releases the lock and hands every writer of the group its outcome. Writers arriving
//! meanwhile wait for the next group, led by one of them as soon as this one ends: under
//! load a group holds what arrived during one fsync; alone, a transaction is its own group
//! and pays one fsync as before.
//!
//! Nothing of a group is seen before its sync: the lock is held through it, and readers
//! outside the lock read the durable snapshot (`Engine::get_durable`); no writer is
//! answered before it either. A failed sync fails every transaction of the group, and
//! fjall refuses every later write.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::{Inner, notify};
use crate::limits::GROUP_TXNS_MAX;
use crate::store::{MetaError, Result, Txn, TxnOutcome};

/// The transactions waiting for a group, and the outcomes not yet taken.
#[derive(Debug, Default)]
pub(super) struct Queue {
    waiting: Mutex<Waiting>,
    /// Signalled when a group ends.
    done: Condvar,
}

/// A write that waits for a group.
#[derive(Debug)]
enum Job {
    Txn(Txn),
    /// The next id of the named sequence.
    NextId(String),
}

/// What a job's write answered.
#[derive(Debug)]
enum Done {
    Txn(TxnOutcome),
    Id(u64),
}

#[derive(Debug, Default)]
struct Waiting {
    next_ticket: u64,
    queued: VecDeque<(u64, Job)>,
    outcomes: HashMap<u64, Result<Done>>,
    /// A writer is committing a group now.
    leading: bool,
}

impl Queue {
    /// The queue holds plain data and no lock is held across work that may panic, so a
    /// poisoned lock (a panic elsewhere while holding it) leaves it consistent.
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The leader's duty to answer its group: done by `finish`, or on a panic by `drop`, so
/// the group's writers and the next leader never wait forever.
struct Leading<'q> {
    queue: &'q Queue,
    tickets: Vec<u64>,
}

impl Leading<'_> {
    fn finish(mut self, outcomes: Vec<Result<Done>>) {
        let tickets = std::mem::take(&mut self.tickets);
        assert_eq!(tickets.len(), outcomes.len(), "one outcome per transaction of the group");
        let mut w = self.queue.lock();
        w.outcomes.extend(tickets.into_iter().zip(outcomes));
        w.leading = false;
        self.queue.done.notify_all();
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.tickets.is_empty() {
            return;
        }
        let mut w = self.queue.lock();
        for t in self.tickets.drain(..) {
            let e = "the embedded metadata store's group commit panicked (a bug; see the log)";
            w.outcomes.insert(t, Err(MetaError::unavailable(e)));
        }
        w.leading = false;
        self.queue.done.notify_all();
    }
}

/// A job answered with the other kind's outcome: a bug of this module, reported as an
/// error rather than a panic.
fn mismatch() -> MetaError {
    MetaError::unavailable(
        "the embedded store's group commit answered a write with another's outcome (a bug)",
    )
}

impl Inner {
    /// Commits `txn` in a group with the writes queued beside it (see the module doc).
    pub(super) fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        match self.grouped(Job::Txn(txn))? {
            Done::Txn(outcome) => Ok(outcome),
            Done::Id(_) => Err(mismatch()),
        }
    }

    /// Takes the next id of sequence `name` in a group with the writes queued beside it.
    pub(super) fn next_id(&self, name: &str) -> Result<u64> {
        match self.grouped(Job::NextId(name.to_string()))? {
            Done::Id(id) => Ok(id),
            Done::Txn(_) => Err(mismatch()),
        }
    }

    /// Queues `job`, leads groups while none is led, and returns `job`'s outcome.
    fn grouped(&self, job: Job) -> Result<Done> {
        let mut w = self.queue.lock();
        let ticket = w.next_ticket;
        w.next_ticket += 1;
        w.queued.push_back((ticket, job));
        loop {
            if let Some(outcome) = w.outcomes.remove(&ticket) {
                return outcome;
            }
            if w.leading {
                w = self.queue.done.wait(w).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            w.leading = true;
            let n = w.queued.len().min(GROUP_TXNS_MAX);
            let group: Vec<(u64, Job)> = w.queued.drain(..n).collect();
            drop(w);
            let leading =
                Leading { queue: &self.queue, tickets: group.iter().map(|(t, _)| *t).collect() };
            leading.finish(self.commit_group(&group));
            w = self.queue.lock();
        }
    }

    /// Applies `group` under the write lock and syncs once: one outcome per job.
    fn commit_group(&self, group: &[(u64, Job)]) -> Vec<Result<Done>> {
        let mut st = match self.lock() {
            Ok(st) => st,
            Err(e) => return group.iter().map(|_| Err(e.clone())).collect(),
        };
        let before = st.commits;
        st.deferred = Some(Vec::new());
        let outcomes: Vec<_> = group
            .iter()
            .map(|(_, job)| match job {
                Job::Txn(txn) => self.txn_locked(&mut st, txn).map(Done::Txn),
                Job::NextId(name) => self.next_id_locked(&mut st, name).map(Done::Id),
            })
            .collect();
        let deferred = st.deferred.take().unwrap_or_default();
        if st.commits == before {
            return outcomes; // nothing written: nothing to sync
        }
        if let Err(e) = self.engine.sync() {
            let e = MetaError::io(format!("syncing a group of {} writes", group.len()), e);
            tracing::error!(error = %e, "the embedded metadata store can take no more writes");
            return group.iter().map(|_| Err(e.clone())).collect();
        }
        self.record_commits(st.commits);
        for events in &deferred {
            notify(&mut st, events);
        }
        outcomes
    }
}
