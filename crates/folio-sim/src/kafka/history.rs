//! What the model Kafka clients did and saw, and the checkers that judge it, in the style
//! of Jepsen's queue workload. Every record's value names who sent it and in what order
//! (`<producer>.<session>.<partition>.<seq>`), so the final read of each partition can be
//! judged against the history alone:
//!
//! - no acknowledged record lost: every acknowledged batch is found whole at the offset
//!   its acknowledgement named;
//! - none duplicated, none invented: a value is in the log at most once, and only if sent;
//! - none reordered per producer: within a producer session and partition, sequence
//!   numbers rise with offsets;
//! - dense offsets: every offset below the end holds a record (a batch claiming more
//!   records than it holds moves the end past records that do not exist);
//! - reads are final: what a consumer read at an offset is what the log holds there, and
//!   a consumer's offsets only rise;
//! - a group's committed offset never moves backwards, and ends at least at the last
//!   commit acknowledged;
//! - deleted topics never come back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

/// An acknowledged batch.
#[derive(Debug, Clone)]
pub struct Acked {
    /// The base offset the acknowledgement named (`None`: a duplicate's, unnamed).
    pub base: Option<i64>,
    pub values: Vec<String>,
    /// The broker that acknowledged it.
    pub broker: i32,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Facts {
    /// Partition → batches acknowledged.
    pub acked: BTreeMap<i32, Vec<Acked>>,
    /// Every value sent.
    pub sent: BTreeSet<String>,
    /// (partition, offset) → the value a consumer read there.
    pub read: BTreeMap<(i32, i64), String>,
    /// Group → the highest offset commit acknowledged.
    pub commits_acked: BTreeMap<String, i64>,
    /// Group → the highest committed offset an OffsetFetch answered.
    pub commits_seen: BTreeMap<String, (i64, i32)>,
    /// (Group, generation) → the coordinators that completed a SyncGroup of it.
    pub generations: BTreeMap<(String, i32), BTreeSet<i32>>,
    /// Topics whose deletion was acknowledged.
    pub deleted_topics: BTreeSet<String>,
    /// Operations in flight: id → (what, since).
    pub ops: BTreeMap<u64, (String, Instant)>,
    next_op: u64,
    pub counts: BTreeMap<String, u64>,
    pub violations: Vec<String>,
    /// The transactional workload's own facts.
    pub txns: super::txn_check::TxnFacts,
}

/// The facts, shared by the workloads. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<Facts>>);

impl History {
    /// The facts, to read or record.
    pub fn lock(&self) -> MutexGuard<'_, Facts> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one `what`.
    pub fn count(&self, what: &str) {
        *self.lock().counts.entry(what.to_string()).or_default() += 1;
    }

    /// A broken promise seen during the run.
    pub fn violation(&self, what: String) {
        self.lock().violations.push(what);
    }

    /// An operation begins: it must end once faults stop (liveness).
    pub fn begin(&self, what: String) -> u64 {
        let mut f = self.lock();
        f.next_op += 1;
        let id = f.next_op;
        f.ops.insert(id, (what, Instant::now()));
        id
    }

    /// Operation `op` ended (acknowledged or failed).
    pub fn end(&self, op: u64) {
        self.lock().ops.remove(&op);
    }

    /// A consumer read `value` at `offset` of `partition`: the same offset never reads
    /// differently.
    pub fn read(&self, partition: i32, offset: i64, value: &str) {
        let mut f = self.lock();
        match f.read.get(&(partition, offset)) {
            Some(v) if v != value => {
                let v = v.clone();
                f.violations.push(format!(
                    "partition {partition} offset {offset} was read as {v} and later as {value}"
                ));
            }
            Some(_) => {}
            None => {
                f.read.insert((partition, offset), value.to_string());
            }
        }
    }

    /// A member synced `generation` of `group` with coordinator `node`: a generation has
    /// one coordinator (each is claimed in the store before it is answered, and goes on
    /// from the last one claimed when the group moves; nothing here deletes a group).
    pub fn generation_synced(&self, group: &str, generation: i32, node: i32) {
        let mut f = self.lock();
        let coordinators = f.generations.entry((group.to_string(), generation)).or_default();
        if coordinators.insert(node) && coordinators.len() == 2 {
            let both: Vec<i32> = coordinators.iter().copied().collect();
            f.violations.push(format!(
                "group {group}: generation {generation} synced by two coordinators {both:?}"
            ));
        }
        *f.counts.entry("generation synced".into()).or_default() += 1;
    }

    /// OffsetFetch answered `offset` for `group` (from broker `node`): never below what was
    /// seen before.
    pub fn commit_seen(&self, group: &str, offset: i64, node: i32) {
        let mut f = self.lock();
        if let Some((before, from)) = f.commits_seen.get(group).copied()
            && offset < before
        {
            f.violations.push(format!(
                "group {group}'s committed offset moved backwards: {before} (from broker {from}), then {offset} (from broker {node})"
            ));
            return;
        }
        f.commits_seen.insert(group.to_string(), (offset, node));
    }
}

/// A value's parts: (producer, session, partition, seq).
fn parse(value: &str) -> Option<(&str, u32, i32, u64)> {
    let mut it = value.split('.');
    let p = it.next()?;
    let session = it.next()?.parse().ok()?;
    let partition = it.next()?.parse().ok()?;
    let seq = it.next()?.parse().ok()?;
    Some((p, session, partition, seq))
}

/// Judges the final read of `partition` (offset → value, from offset 0 to its end `end`)
/// against the history; returns what broke.
pub fn check_partition(
    facts: &Facts,
    partition: i32,
    log: &BTreeMap<i64, String>,
    end: i64,
) -> Vec<String> {
    let mut out = Vec::new();
    // Dense offsets.
    let mut expect = 0;
    for &o in log.keys() {
        if o != expect {
            out.push(format!(
                "partition {partition}: offsets {expect}..{o} hold no record (the end is {end})"
            ));
        }
        expect = o + 1;
    }
    if expect != end {
        out.push(format!(
            "partition {partition}: the end is {end} but the last record is at {}",
            expect - 1
        ));
    }
    // None invented, none duplicated, order per producer session.
    let mut at: BTreeMap<&str, i64> = BTreeMap::new();
    let mut last: BTreeMap<(&str, u32), (u64, i64)> = BTreeMap::new();
    for (&o, v) in log {
        if !facts.sent.contains(v) {
            out.push(format!("partition {partition} offset {o}: {v} was never sent"));
        }
        if let Some(first) = at.insert(v.as_str(), o) {
            out.push(format!("partition {partition}: {v} is at {first} and again at {o}"));
        }
        if let Some((p, session, part, seq)) = parse(v) {
            if part != partition {
                out.push(format!("partition {partition} offset {o}: {v} was sent to {part}"));
            }
            if let Some((before, before_at)) = last.insert((p, session), (seq, o))
                && seq <= before
            {
                out.push(format!(
                    "partition {partition}: {p} session {session} reordered: seq {before} at {before_at}, then seq {seq} at {o}"
                ));
            }
        }
    }
    // No acknowledged record lost.
    for a in facts.acked.get(&partition).into_iter().flatten() {
        for (i, v) in a.values.iter().enumerate() {
            match (a.base, at.get(v.as_str())) {
                (_, None) => out.push(format!(
                    "partition {partition}: {v}, acknowledged by broker {} at {:?}, is lost",
                    a.broker, a.base
                )),
                (Some(base), Some(&o)) if o != base + i as i64 => out.push(format!(
                    "partition {partition}: {v} was acknowledged at {} by broker {} but is at {o}",
                    base + i as i64,
                    a.broker
                )),
                _ => {}
            }
        }
    }
    // Reads are final.
    for ((p, o), v) in facts.read.range((partition, i64::MIN)..=(partition, i64::MAX)) {
        match log.get(o) {
            Some(now) if now == v => {}
            now => out.push(format!(
                "partition {p} offset {o}: a consumer read {v}, the log holds {now:?}"
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(values: &[(i64, &str)]) -> BTreeMap<i64, String> {
        values.iter().map(|(o, v)| (*o, v.to_string())).collect()
    }

    fn facts(sent: &[&str]) -> Facts {
        Facts { sent: sent.iter().map(|s| s.to_string()).collect(), ..Facts::default() }
    }

    #[test]
    fn a_whole_log_passes() {
        let mut f = facts(&["p0.1.0.0", "p0.1.0.1"]);
        f.acked.insert(
            0,
            vec![Acked {
                base: Some(0),
                values: vec!["p0.1.0.0".into(), "p0.1.0.1".into()],
                broker: 1,
            }],
        );
        assert!(check_partition(&f, 0, &log(&[(0, "p0.1.0.0"), (1, "p0.1.0.1")]), 2).is_empty());
    }

    #[test]
    fn each_broken_promise_is_named() {
        let mut f = facts(&["p0.1.0.0", "p0.1.0.1", "p0.1.0.2"]);
        f.acked
            .insert(0, vec![Acked { base: Some(0), values: vec!["p0.1.0.2".into()], broker: 1 }]);
        f.read.insert((0, 0), "p0.1.0.0".into());
        // p0.1.0.2 acked at 0 is lost; 1 is a duplicate and out of order; 5 was never
        // sent; offsets 2..5 are empty; the read at 0 does not match.
        let l = log(&[(0, "p0.1.0.1"), (1, "p0.1.0.1"), (5, "x.1.0.9")]);
        let found = check_partition(&f, 0, &l, 6).join("\n");
        for what in
            ["is lost", "again at 1", "reordered", "never sent", "offsets 2..5", "a consumer read"]
        {
            assert!(found.contains(what), "{what:?} not found in:\n{found}");
        }
    }

    #[test]
    fn committed_offsets_moving_back_are_seen() {
        let h = History::default();
        h.commit_seen("g", 5, 1);
        h.commit_seen("g", 7, 2);
        assert!(h.lock().violations.is_empty());
        h.commit_seen("g", 6, 1);
        assert_eq!(h.lock().violations.len(), 1);
    }
}
