//! OffsetCommit and OffsetFetch of a group in the order they arrived (`Arrivals`).

use std::collections::HashMap;
use std::sync::Arc;

use super::Coordinator;

/// The commits in flight of every group, numbered in the order they arrived.
///
/// Kafka serves one connection's requests one at a time, so an OffsetFetch sees every commit
/// sent before it. Here each request is a task of its own; so an OffsetCommit takes its
/// number when it is decoded, in its connection's order (`begin_commit`), and holds it until
/// its write ends; an OffsetFetch notes the next number when it is decoded (`arrival`) and
/// waits only for its group's commits numbered below it (`commits_before`): never behind
/// other work, never for a commit that came after it. An OffsetCommit waits the same way
/// before it writes, so a group's commits land in the order they arrived: two in flight at
/// once (the first held up by the store) never land the other way round, the older offset
/// last (found by the simulator, seed 805: 46 acknowledged, 45 answered after). Bounded by
/// the requests in flight.
#[derive(Debug, Default)]
pub(super) struct Arrivals {
    next: u64,
    open: HashMap<String, std::collections::BTreeSet<u64>>,
}

/// An OffsetCommit's place among its group's commits; its end is noted when dropped.
#[derive(Debug)]
pub struct CommitTicket {
    coordinator: Arc<Coordinator>,
    group: String,
    number: u64,
}

impl CommitTicket {
    /// Its number among the commits (the order they arrived in).
    pub fn number(&self) -> u64 {
        self.number
    }
}

impl Drop for CommitTicket {
    fn drop(&mut self) {
        let mut a = self.coordinator.arrivals.lock().expect("arrivals lock");
        if let Some(open) = a.open.get_mut(&self.group) {
            open.remove(&self.number);
            if open.is_empty() {
                a.open.remove(&self.group);
            }
        }
        drop(a);
        self.coordinator.commit_ended.notify_waiters();
    }
}

impl Coordinator {
    /// Numbers an OffsetCommit of `group` as it arrives; held until its write ends.
    pub fn begin_commit(self: &Arc<Self>, group: &str) -> CommitTicket {
        let mut a = self.arrivals.lock().expect("arrivals lock");
        let number = a.next;
        a.next += 1;
        a.open.entry(group.to_string()).or_default().insert(number);
        CommitTicket { coordinator: self.clone(), group: group.to_string(), number }
    }

    /// Where an OffsetFetch arrives among the commits: the next commit's number.
    pub fn arrival(&self) -> u64 {
        self.arrivals.lock().expect("arrivals lock").next
    }

    /// Waits until no commit of `group` that arrived before `arrival` is in flight.
    pub async fn commits_before(&self, group: &str, arrival: u64) {
        loop {
            let ended = self.commit_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let waiting = {
                let a = self.arrivals.lock().expect("arrivals lock");
                a.open.get(group).and_then(|o| o.first()).is_some_and(|first| *first < arrival)
            };
            if !waiting {
                return;
            }
            ended.await;
        }
    }
}
