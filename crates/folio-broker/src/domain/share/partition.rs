//! One share-partition (KIP-932): a share group's delivery state of one topic partition,
//! kept by the partition's owner.
//!
//! ```text
//!            acquire (delivery count + 1, lock starts)
//! AVAILABLE ─────────────────────────────────────────► ACQUIRED ──Accept──► ACKNOWLEDGED
//!     ▲                                                   │ │
//!     └── Release, lock expiry, session end ──────────────┘ └─Reject, Gap──► ARCHIVED
//!         (ARCHIVED instead once the count reached the delivery count limit)
//! ```
//! Offsets below the **start offset** (SPSO) are done; the start moves over the run of
//! ACKNOWLEDGED and ARCHIVED offsets at its front. Offsets in `[start, next)` are in flight
//! and each has an entry; offsets at or past `next` were never delivered. At most
//! `record_locks_max` offsets are in flight: past that, nothing new is acquired.
//!
//! ## Durable state
//! The start offset, and every in-flight offset's state and delivery count (an ACQUIRED
//! offset is stored AVAILABLE: a new owner delivers it again), are written to the metadata
//! store on every acknowledgement, compare-and-set against the version read, so a new
//! owner goes on from the last acknowledgement and an old owner's late write fails:
//! ```text
//! share-states/<topic id hex>/<partition>/<group, escaped>
//! ShareState "FSS" 1 | start i64 | n u32 | n × (offset i64 | state u8 | delivery count u16)
//! ```
//! As in Kafka, acquisitions are not written: a delivery count may undercount after the
//! owner moves (at least once, never lost).

use std::collections::BTreeMap;

/// A record's delivery state (KIP-932's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available = 0,
    Acquired = 1,
    Acknowledged = 2,
    Archived = 4,
}

/// What a consumer says of a record (ShareAcknowledge's AcknowledgeType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// No record at the offset (compaction, a control batch): done.
    Gap,
    Accept,
    Release,
    Reject,
}

impl Ack {
    /// The wire's type: 0 Gap, 1 Accept, 2 Release, 3 Reject.
    pub fn from_wire(t: i8) -> Option<Ack> {
        match t {
            0 => Some(Ack::Gap),
            1 => Some(Ack::Accept),
            2 => Some(Ack::Release),
            3 => Some(Ack::Reject),
            _ => None,
        }
    }
}

/// One in-flight offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub state: RecordState,
    pub deliveries: u16,
    /// While ACQUIRED: the member holding it and until when (clock ms).
    pub holder: Option<(String, u64)>,
}

/// A share-partition's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartition {
    pub start: i64,
    /// The first offset never delivered.
    pub next: i64,
    pub records: BTreeMap<i64, InFlight>,
}

/// Why an acknowledgement was refused (INVALID_RECORD_STATE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAcquired {
    pub offset: i64,
}

/// The limits a share-partition runs under (`group.share.*`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub lock_ms: u64,
    pub delivery_count_limit: u16,
    pub record_locks_max: usize,
}

impl SharePartition {
    /// A share-partition starting at `start`, nothing delivered.
    pub fn new(start: i64) -> SharePartition {
        SharePartition { start, next: start, records: BTreeMap::new() }
    }

    /// Ends expired locks: their records are AVAILABLE again, or ARCHIVED once delivered
    /// `delivery_count_limit` times. Returns how many ended.
    pub fn expire_locks(&mut self, now: u64, limits: &Limits) -> usize {
        let mut ended = 0;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired
                && r.holder.as_ref().is_some_and(|(_, at)| *at <= now)
            {
                release(r, limits);
                ended += 1;
            }
        }
        self.advance();
        ended
    }

    /// The earliest lock deadline (clock ms), if any record is acquired.
    pub fn next_expiry(&self) -> Option<u64> {
        self.records.values().filter_map(|r| r.holder.as_ref().map(|(_, at)| *at)).min()
    }

    /// The first offset a fetch should read from: the lowest AVAILABLE in-flight offset
    /// (a redelivery), else `next` if the in-flight window has room; `None`: nothing to
    /// acquire now.
    pub fn fetch_from(&self, limits: &Limits) -> Option<i64> {
        let redeliver = self.records.iter().find(|(_, r)| r.state == RecordState::Available);
        if let Some((o, _)) = redeliver {
            return Some(*o);
        }
        ((self.next - self.start) < limits.record_locks_max as i64).then_some(self.next)
    }

    /// Acquires for `member` the offsets of `[first, last]` that are AVAILABLE (in flight
    /// or never delivered), at most `max` and within the in-flight window; `skip` offsets
    /// (control batches) are archived instead. Returns the acquired ranges with their
    /// delivery counts: (first, last, count).
    pub fn acquire(
        &mut self,
        member: &str,
        (first, last): (i64, i64),
        max: usize,
        now: u64,
        limits: &Limits,
    ) -> Vec<(i64, i64, u16)> {
        let mut out: Vec<(i64, i64, u16)> = Vec::new();
        let mut taken = 0;
        for o in first.max(self.start)..=last {
            if taken >= max {
                break;
            }
            if o >= self.next {
                if (o - self.start) >= limits.record_locks_max as i64 {
                    break;
                }
                for gap in self.next..o {
                    // Offsets the log holds no batch for (compacted away): done.
                    let none =
                        InFlight { state: RecordState::Archived, deliveries: 0, holder: None };
                    self.records.insert(gap, none);
                }
                let fresh = InFlight { state: RecordState::Available, deliveries: 0, holder: None };
                self.records.insert(o, fresh);
                self.next = o + 1;
            }
            let r = self.records.get_mut(&o).expect("every in-flight offset has an entry");
            if r.state != RecordState::Available {
                continue;
            }
            r.state = RecordState::Acquired;
            r.deliveries = r.deliveries.saturating_add(1);
            r.holder = Some((member.to_string(), now + limits.lock_ms));
            taken += 1;
            match out.last_mut() {
                Some((_, l, c)) if *l + 1 == o && *c == r.deliveries => *l = o,
                _ => out.push((o, o, r.deliveries)),
            }
        }
        self.advance();
        out
    }

    /// Archives `[first, last]` (a control batch: never delivered), extending `next`.
    pub fn archive(&mut self, first: i64, last: i64) {
        for o in first.max(self.start)..=last {
            let r = self.records.entry(o).or_insert(InFlight {
                state: RecordState::Available,
                deliveries: 0,
                holder: None,
            });
            if r.state == RecordState::Available {
                *r = InFlight {
                    state: RecordState::Archived,
                    deliveries: r.deliveries,
                    holder: None,
                };
            }
        }
        self.next = self.next.max(last + 1);
        self.advance();
    }

    /// Applies `member`'s acknowledgement of `[first, last]` (`acks`: one for the range, or
    /// one per offset). Every offset must be ACQUIRED by `member`, else nothing changes.
    pub fn acknowledge(
        &mut self,
        member: &str,
        (first, last): (i64, i64),
        acks: &[Ack],
        limits: &Limits,
    ) -> Result<(), NotAcquired> {
        let n = (last - first + 1).max(0) as usize;
        if acks.is_empty() || (acks.len() != 1 && acks.len() != n) || last < first {
            return Err(NotAcquired { offset: first });
        }
        for o in first..=last {
            let held = self.records.get(&o).is_some_and(|r| {
                r.state == RecordState::Acquired
                    && r.holder.as_ref().is_some_and(|(m, _)| m == member)
            });
            // A Gap may name an offset that holds no record (never acquired).
            let gap = acks[if acks.len() == 1 { 0 } else { (o - first) as usize }] == Ack::Gap;
            let in_flight = o >= self.start && o < self.next;
            if !(held || gap && in_flight) {
                return Err(NotAcquired { offset: o });
            }
        }
        for o in first..=last {
            let ack = acks[if acks.len() == 1 { 0 } else { (o - first) as usize }];
            let r = self.records.get_mut(&o).expect("checked above");
            match ack {
                Ack::Accept => set(r, RecordState::Acknowledged),
                Ack::Reject | Ack::Gap => set(r, RecordState::Archived),
                Ack::Release => release(r, limits),
            }
        }
        self.advance();
        Ok(())
    }

    /// Releases every record `member` holds (its share session ended).
    pub fn release_member(&mut self, member: &str, limits: &Limits) -> usize {
        let mut n = 0;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired
                && r.holder.as_ref().is_some_and(|(m, _)| m == member)
            {
                release(r, limits);
                n += 1;
            }
        }
        self.advance();
        n
    }

    /// Moves the start past records the log no longer has (retention, DeleteRecords).
    pub fn trim_to(&mut self, log_start: i64) {
        if log_start > self.start {
            self.records = self.records.split_off(&log_start);
            self.start = log_start;
            self.next = self.next.max(log_start);
            self.advance();
        }
    }

    /// Moves the start over the finished records at its front.
    fn advance(&mut self) {
        while let Some(r) = self.records.get(&self.start) {
            if !matches!(r.state, RecordState::Acknowledged | RecordState::Archived) {
                break;
            }
            self.records.remove(&self.start);
            self.start += 1;
        }
        if self.records.is_empty() {
            self.next = self.next.max(self.start);
        }
        self.check();
    }

    /// The invariants: every in-flight offset lies in `[start, next)` and the front is not
    /// finished.
    fn check(&self) {
        assert!(self.start <= self.next, "share start {} past next {}", self.start, self.next);
        if let (Some((lo, r)), Some((hi, _))) =
            (self.records.first_key_value(), self.records.last_key_value())
        {
            assert!(*lo >= self.start && *hi < self.next, "in-flight offsets out of range");
            assert!(
                *lo > self.start
                    || !matches!(r.state, RecordState::Acknowledged | RecordState::Archived),
                "a finished record at the start"
            );
        }
    }

    /// The stored form (the module doc's `ShareState`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(19 + self.records.len() * 11);
        out.extend_from_slice(b"FSS\x01");
        out.extend_from_slice(&self.start.to_be_bytes());
        out.extend_from_slice(&(self.records.len() as u32).to_be_bytes());
        for (o, r) in &self.records {
            let state = match r.state {
                RecordState::Acquired => RecordState::Available,
                s => s,
            };
            out.extend_from_slice(&o.to_be_bytes());
            out.push(state as u8);
            out.extend_from_slice(&r.deliveries.to_be_bytes());
        }
        out
    }

    /// Reads the stored form; `None` for damaged bytes (the caller starts over and says so).
    pub fn decode(b: &[u8]) -> Option<SharePartition> {
        let rest = b.strip_prefix(b"FSS\x01")?;
        let start = i64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        let n = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
        let body = rest.get(12..)?;
        if body.len() != n.checked_mul(11)? {
            return None;
        }
        let mut records = BTreeMap::new();
        let mut next = start;
        for c in body.chunks_exact(11) {
            let o = i64::from_be_bytes(c[..8].try_into().ok()?);
            let state = match c[8] {
                0 => RecordState::Available,
                2 => RecordState::Acknowledged,
                4 => RecordState::Archived,
                _ => return None,
            };
            let deliveries = u16::from_be_bytes([c[9], c[10]]);
            if o < start
                || records.insert(o, InFlight { state, deliveries, holder: None }).is_some()
            {
                return None;
            }
            next = next.max(o + 1);
        }
        let sp = SharePartition { start, next, records };
        let front_done = sp.records.get(&start).is_some_and(|r| r.state != RecordState::Available);
        (!front_done).then_some(sp)
    }
}

fn set(r: &mut InFlight, state: RecordState) {
    r.state = state;
    r.holder = None;
}

fn release(r: &mut InFlight, limits: &Limits) {
    let to = if r.deliveries >= limits.delivery_count_limit {
        RecordState::Archived
    } else {
        RecordState::Available
    };
    set(r, to);
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits { lock_ms: 1000, delivery_count_limit: 3, record_locks_max: 10 };

    #[test]
    fn records_are_acquired_once_acknowledged_and_the_start_moves() {
        let mut sp = SharePartition::new(5);
        assert_eq!(sp.fetch_from(&L), Some(5));
        assert_eq!(sp.acquire("a", (5, 9), 100, 0, &L), vec![(5, 9, 1)]);
        // b finds nothing of [5, 9] left to acquire.
        assert!(sp.acquire("b", (5, 9), 100, 0, &L).is_empty());
        assert_eq!(sp.acknowledge("b", (5, 5), &[Ack::Accept], &L), Err(NotAcquired { offset: 5 }));
        sp.acknowledge("a", (5, 6), &[Ack::Accept], &L).unwrap();
        assert_eq!((sp.start, sp.next), (7, 10));
        // Per-offset types: 7 released (delivered again), 8 rejected, 9 accepted.
        let acks = [Ack::Release, Ack::Reject, Ack::Accept];
        sp.acknowledge("a", (7, 9), &acks, &L).unwrap();
        assert_eq!(sp.start, 7, "7 is available again");
        assert_eq!(sp.fetch_from(&L), Some(7));
        assert_eq!(sp.acquire("b", (7, 12), 100, 0, &L), vec![(7, 7, 2), (10, 12, 1)]);
        sp.acknowledge("b", (7, 7), &[Ack::Accept], &L).unwrap();
        assert_eq!(sp.start, 10);
    }

    #[test]
    fn expired_locks_redeliver_until_the_delivery_count_limit_archives() {
        let mut sp = SharePartition::new(0);
        for round in 1..=3u16 {
            assert_eq!(sp.acquire("a", (0, 0), 1, 0, &L), vec![(0, 0, round)]);
            assert_eq!(sp.expire_locks(999, &L), 0, "the lock still holds");
            assert_eq!(sp.expire_locks(1000, &L), 1);
        }
        assert_eq!(sp.start, 1, "archived after 3 deliveries");
        assert_eq!(sp.fetch_from(&L), Some(1));
    }

    #[test]
    fn the_in_flight_window_and_a_session_end_bound_what_one_member_holds() {
        let mut sp = SharePartition::new(0);
        assert_eq!(sp.acquire("a", (0, 99), 100, 0, &L), vec![(0, 9, 1)]);
        assert_eq!(sp.fetch_from(&L), None, "the window is full");
        assert_eq!(sp.release_member("a", &L), 10);
        assert_eq!(sp.fetch_from(&L), Some(0));
        assert_eq!(sp.acquire("b", (0, 3), 2, 0, &L), vec![(0, 1, 2)]);
    }

    #[test]
    fn the_stored_state_round_trips_and_damage_is_refused() {
        let mut sp = SharePartition::new(0);
        sp.acquire("a", (0, 4), 100, 0, &L);
        sp.acknowledge("a", (1, 1), &[Ack::Accept], &L).unwrap();
        sp.acknowledge("a", (3, 3), &[Ack::Reject], &L).unwrap();
        let back = SharePartition::decode(&sp.encode()).unwrap();
        assert_eq!((back.start, back.next), (0, 5));
        // Acquired records come back available, with their delivery counts.
        assert_eq!(
            back.records[&0],
            InFlight { state: RecordState::Available, deliveries: 1, holder: None }
        );
        assert_eq!(back.records[&1].state, RecordState::Acknowledged);
        assert_eq!(back.records[&3].state, RecordState::Archived);
        let bytes = sp.encode();
        for cut in 0..bytes.len() {
            assert!(SharePartition::decode(&bytes[..cut]).is_none(), "a cut at {cut} decoded");
        }
        let mut bad = bytes.clone();
        bad[24] = 9;
        assert!(SharePartition::decode(&bad).is_none(), "an unknown state decoded");
    }

    #[test]
    fn control_batches_and_trimmed_offsets_are_never_delivered() {
        let mut sp = SharePartition::new(0);
        sp.archive(0, 0);
        assert_eq!(sp.start, 1);
        sp.acquire("a", (1, 5), 100, 0, &L);
        sp.trim_to(4);
        assert_eq!((sp.start, sp.records.len()), (4, 2));
        sp.acknowledge("a", (4, 5), &[Ack::Accept], &L).unwrap();
        assert_eq!((sp.start, sp.next), (6, 6));
    }
}
