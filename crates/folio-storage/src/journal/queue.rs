//! The journal's bounded request queue (see the parent module).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Request;
use super::format::record_len;

/// The journal's request queue. Unlike a channel it does not wake the journal thread for
/// every record: only when the thread is idle, when a group is full, for requests that
/// must not wait (barriers, releases, shutdown), or when the syncer has synced every group
/// written. The thread otherwise sleeps until the oldest queued record has waited
/// `group_wait_max`.
///
/// Group commit without a timer at light load: a group is written at once when no written
/// group waits for its fdatasync (`unsynced` is 0), since waiting would only add latency;
/// while a sync is in flight, records gather into the next group, which is written when
/// that sync ends (or the group is full, or `group_wait_max` passed).
#[derive(Debug)]
pub(super) struct Queue {
    pub(super) state: Mutex<QueueState>,
    /// Signals the journal thread.
    pub(super) work: Condvar,
    /// Signals submitters waiting for room.
    pub(super) room: Condvar,
    pub(super) depth_max: usize,
    /// `state.items.len()`, readable without the lock (`Journal::has_room` on every add).
    pub(super) len: std::sync::atomic::AtomicUsize,
    pub(super) group_bytes_max: usize,
    /// Stepped: nothing waits (there is no thread to wait for); `wake` is told of work.
    pub(super) wake: Option<crate::config::Wake>,
    /// Groups handed to the syncer and not synced yet (threads only).
    pub(super) unsynced: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Default)]
pub(super) struct QueueState {
    items: VecDeque<(Request, Instant)>,
    bytes: usize,
    urgent: bool,
    /// The journal thread waits for a first request.
    idle: bool,
    closed: bool,
}

impl Queue {
    /// Queues a request; blocks while the queue is full. Gives it back if closed.
    pub(super) fn push(&self, req: Request) -> Result<(), Request> {
        let mut st = self.state.lock().expect("journal queue lock");
        while self.wake.is_none() && st.items.len() >= self.depth_max && !st.closed {
            st = self.room.wait(st).expect("journal queue lock");
        }
        if st.closed {
            return Err(req);
        }
        let bytes = match &req {
            Request::Append(r, _) => record_len(r),
            _ => {
                st.urgent = true;
                0
            }
        };
        st.bytes += bytes;
        st.items.push_back((req, Instant::now()));
        self.len.store(st.items.len(), std::sync::atomic::Ordering::Relaxed);
        if st.idle || st.urgent || st.bytes >= self.group_bytes_max {
            self.work.notify_one();
        }
        drop(st);
        if let Some(wake) = &self.wake {
            wake.wake();
        }
        Ok(())
    }

    /// Waits for a group: the first request, then until the oldest has waited `wait_max`,
    /// the group is full, or something urgent arrives. Returns everything queued.
    pub(super) fn take_group(&self, wait_max: Duration) -> Vec<Request> {
        let mut st = self.state.lock().expect("journal queue lock");
        while st.items.is_empty() {
            st.idle = true;
            st = self.work.wait(st).expect("journal queue lock");
        }
        st.idle = false;
        loop {
            let deadline = st.items.front().expect("non-empty").1 + wait_max;
            let now = Instant::now();
            let syncer_idle = self.unsynced.load(std::sync::atomic::Ordering::Acquire) == 0;
            if st.urgent || st.bytes >= self.group_bytes_max || now >= deadline || syncer_idle {
                break;
            }
            st = self.work.wait_timeout(st, deadline - now).expect("journal queue lock").0;
        }
        self.take(&mut st)
    }

    /// What is queued now, as one group (stepped: no waiting); empty if nothing is.
    pub(super) fn take_now(&self) -> Vec<Request> {
        let mut st = self.state.lock().expect("journal queue lock");
        self.take(&mut st)
    }

    /// Takes requests in order up to `group_bytes_max` (always at least one, if any); the
    /// rest waits for the next group, so a group's memory stays bounded.
    fn take(&self, st: &mut QueueState) -> Vec<Request> {
        let mut group = Vec::new();
        let mut bytes = 0;
        while let Some((req, _)) = st.items.front() {
            let len = match req {
                Request::Append(r, _) => record_len(r),
                _ => 0,
            };
            if !group.is_empty() && bytes + len > self.group_bytes_max {
                break;
            }
            bytes += len;
            group.push(st.items.pop_front().expect("front exists").0);
        }
        st.bytes -= bytes.min(st.bytes);
        self.len.store(st.items.len(), std::sync::atomic::Ordering::Relaxed);
        st.urgent = st.items.iter().any(|(r, _)| !matches!(r, Request::Append(..)));
        self.room.notify_all();
        group
    }

    pub(super) fn take_remaining(&self) -> Vec<Request> {
        let mut st = self.state.lock().expect("journal queue lock");
        self.len.store(0, std::sync::atomic::Ordering::Relaxed);
        st.items.drain(..).map(|(r, _)| r).collect()
    }

    /// The writer hands a group to the syncer.
    pub(super) fn handed_to_syncer(&self) {
        self.unsynced.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// The syncer synced `groups` groups; when none is left, the writer, if it gathers a
    /// group, writes it now.
    pub(super) fn synced(&self, groups: usize) {
        let before = self.unsynced.fetch_sub(groups, std::sync::atomic::Ordering::AcqRel);
        assert!(before >= groups, "synced {groups} groups of {before} handed over");
        if before == groups {
            // Under the lock: the writer checks `unsynced` holding it, then waits.
            let _st = self.state.lock().expect("journal queue lock");
            self.work.notify_one();
        }
    }

    pub(super) fn close(&self) {
        let mut st = self.state.lock().expect("journal queue lock");
        st.closed = true;
        self.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::JournalRecord;
    use folio_proto::{Entry, EntryHeader};

    fn queue(group_bytes_max: usize) -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            depth_max: 1000,
            group_bytes_max,
            len: std::sync::atomic::AtomicUsize::new(0),
            wake: None,
            unsynced: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn append(e: i64) -> Request {
        let h = EntryHeader { ledger_id: 1, entry_id: e, last_add_confirmed: -1, length: 0 };
        Request::Append(JournalRecord::Entry(Entry::encode(h, &[0u8; 8 * 1024])), None)
    }

    /// Runs `take_group` with an hour-long wait on a thread; its group, or a failure if it
    /// has not returned within `deadline` (the hour would be the bug).
    fn take_group_on_thread(q: &std::sync::Arc<Queue>) -> std::sync::mpsc::Receiver<usize> {
        let (tx, rx) = std::sync::mpsc::channel();
        let q = q.clone();
        std::thread::spawn(move || {
            let _ = tx.send(q.take_group(Duration::from_secs(3600)).len());
        });
        rx
    }

    #[test]
    fn an_idle_syncer_lets_a_group_go_at_once_without_the_group_wait() {
        let q = std::sync::Arc::new(queue(1 << 20));
        q.push(append(0)).unwrap();
        let group = take_group_on_thread(&q).recv_timeout(Duration::from_secs(60));
        assert_eq!(group, Ok(1), "nothing is being synced, so the record need not wait");
    }

    #[test]
    fn a_group_gathered_during_a_sync_goes_when_the_sync_ends() {
        let q = std::sync::Arc::new(queue(1 << 20));
        q.handed_to_syncer();
        q.push(append(0)).unwrap();
        let taken = take_group_on_thread(&q);
        q.push(append(1)).unwrap();
        q.synced(1);
        let group = taken.recv_timeout(Duration::from_secs(60));
        assert!(matches!(group, Ok(1 | 2)), "the end of the sync wakes the writer: {group:?}");
        assert_eq!(q.unsynced.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn a_group_stops_at_its_byte_limit_and_keeps_order() {
        let q = queue(64 * 1024);
        for e in 0..64 {
            q.push(append(e)).unwrap();
        }
        q.push(Request::ReleaseBefore(7)).unwrap();
        let mut seen = Vec::new();
        let mut groups = 0;
        while seen.len() < 65 {
            let group = q.take_group(Duration::ZERO);
            let bytes: usize = group
                .iter()
                .map(|r| match r {
                    Request::Append(r, _) => record_len(r),
                    _ => 0,
                })
                .sum();
            assert!(bytes <= 64 * 1024, "a group of {bytes} bytes");
            for r in group {
                seen.push(match r {
                    Request::Append(JournalRecord::Entry(e), _) => e.entry_id(),
                    _ => -7,
                });
            }
            groups += 1;
        }
        let mut expected: Vec<i64> = (0..64).collect();
        expected.push(-7);
        assert_eq!(seen, expected, "requests leave in the order they came");
        assert!(groups >= 9, "{groups} groups for 512 KiB in 64 KiB groups");
    }
}
