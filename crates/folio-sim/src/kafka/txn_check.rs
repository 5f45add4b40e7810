//! What the transactional clients did and saw (#49), and the checker that judges it, after
//! Jepsen's Kafka workload. Every value names its transaction: `t<k>.<n>.<partition>.<i>`
//! is record `i` written to `partition` by transaction `n` of transactor `k` (its
//! transactional id is `txn-<k>`; `n` rises across its sessions). Judged against the final
//! read_committed and read_uncommitted reads of every partition, and the committed offset
//! of each transactor's group (each transaction commits offset `n` for partition 0):
//!
//! - lost write: a transaction whose commit was acknowledged is not wholly visible;
//! - aborted read (G1a): a value of a transaction whose abort was acknowledged, whose commit
//!   was refused or never asked for, is visible to read_committed, or was read by a
//!   read_committed consumer or inside another transaction;
//! - precommitted read: read_committed read a value before its transaction asked to commit;
//! - torn transaction: some but not all of a transaction's values are visible;
//! - duplicates and inventions: a value twice in a log, or one never sent;
//! - reads are final: what read_committed read at an offset is what the log holds there;
//! - offsets torn from writes: a group's committed offset names a transaction other than
//!   the last one of its transactor visible;
//! - an acknowledged write (even of an aborted transaction) missing from read_uncommitted;
//! - G1c: a cycle of read-from (wr) and process-order edges among visible transactions,
//!   which read_committed makes impossible (a transaction reads only what committed before
//!   it read, and a transactor begins one only after the last ended);
//! - G0: a cycle of write-order (ww) edges alone is counted, not judged: Kafka orders each
//!   partition by itself, so two concurrent transactions may cross on two partitions.

use std::collections::{BTreeMap, BTreeSet};

/// A transaction: (transactor, number).
pub type TxnId = (u32, u64);

/// The value of record `i` written to `partition` by transaction `t`.
pub fn value_of(t: TxnId, partition: i32, i: u32) -> String {
    format!("t{}.{}.{partition}.{i}", t.0, t.1)
}

/// The transaction that wrote `value`.
pub fn txn_of(value: &str) -> Option<TxnId> {
    let mut it = value.strip_prefix('t')?.split('.');
    let k = it.next()?.parse().ok()?;
    let n = it.next()?.parse().ok()?;
    Some((k, n))
}

/// How a transaction ended, as its transactor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Not ended yet.
    #[default]
    Open,
    /// EndTxn(commit) acknowledged.
    Committed,
    /// EndTxn(abort) acknowledged.
    Aborted,
    /// EndTxn(commit) refused with a definite error (fenced, aborted on its timeout).
    Refused,
    /// Nothing definite: a request without an answer, then a new session.
    Unknown,
}

/// One transaction's history.
#[derive(Debug, Clone, Default)]
pub struct Txn {
    /// (partition, value) sent, acknowledged or not.
    pub sent: Vec<(i32, String)>,
    /// Values whose Produce was acknowledged.
    pub acked: BTreeSet<String>,
    /// Transactions whose values it read (read_committed) before it ended.
    pub read_from: BTreeSet<TxnId>,
    /// EndTxn(commit) was sent (before any answer).
    pub commit_sent: bool,
    pub outcome: Outcome,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct TxnFacts {
    pub txns: BTreeMap<TxnId, Txn>,
    /// (partition, offset) → the value the read_committed consumer read there.
    pub reads: BTreeMap<(i32, i64), String>,
    /// What broke during the run (reads judged as they happened).
    pub violations: Vec<String>,
}

impl TxnFacts {
    /// Transaction `reader` (or the consumer, `None`) read `value` at read_committed: its
    /// transaction must have asked to commit already, and must not have been aborted.
    pub fn read(&mut self, reader: Option<TxnId>, at: (i32, i64), value: &str) {
        let who = reader.map_or("the read_committed consumer".to_string(), |t| format!("{t:?}"));
        let Some(writer) = txn_of(value) else {
            self.violations.push(format!("{who} read {value} at {at:?}, not a transaction's"));
            return;
        };
        match self.txns.get(&writer) {
            None => self.violations.push(format!("{who} read {value}, never sent")),
            Some(t) if t.outcome == Outcome::Aborted => self.violations.push(format!(
                "aborted read (G1a): {who} read {value} at {at:?}; {writer:?} was aborted"
            )),
            Some(t) if !t.commit_sent => self.violations.push(format!(
                "precommitted read: {who} read {value} at {at:?} before {writer:?} asked to commit"
            )),
            Some(_) => {}
        }
        match reader {
            Some(r) if r != writer => {
                self.txns.entry(r).or_default().read_from.insert(writer);
            }
            Some(_) => {}
            None => {
                if let Some(before) = self.reads.insert(at, value.to_string())
                    && before != value
                {
                    self.violations
                        .push(format!("offset {at:?} was read as {before} and later as {value}"));
                }
            }
        }
    }
}

/// A partition's final read: offset → value (data records only).
pub type Log = BTreeMap<i64, String>;

/// Judges the run: `committed` and `raw` are every partition's final read_committed and
/// read_uncommitted reads, `offsets` each transactor's group's committed offset of
/// partition 0 (`None`: none). Returns the violations and what was counted.
pub fn check(
    facts: &TxnFacts,
    committed: &BTreeMap<i32, Log>,
    raw: &BTreeMap<i32, Log>,
    offsets: &BTreeMap<u32, Option<i64>>,
) -> (Vec<String>, BTreeMap<String, u64>) {
    let mut out = facts.violations.clone();
    let mut counts = BTreeMap::new();
    let visible_at = locate(facts, committed, "read_committed", &mut out);
    let raw_at = locate(facts, raw, "read_uncommitted", &mut out);
    let mut visible: BTreeSet<TxnId> = BTreeSet::new();
    for (id, t) in &facts.txns {
        let seen = t.sent.iter().filter(|(_, v)| visible_at.contains_key(v.as_str())).count();
        let kind = format!("txn {:?}", t.outcome).to_lowercase();
        *counts.entry(kind).or_default() += 1;
        let whole = seen == t.sent.len() && seen > 0;
        if whole {
            visible.insert(*id);
        }
        match t.outcome {
            Outcome::Committed if !whole => out.push(format!(
                "lost write: {id:?}'s commit was acknowledged, {seen} of its {} values are visible",
                t.sent.len()
            )),
            Outcome::Aborted | Outcome::Refused | Outcome::Open if seen > 0 => out.push(format!(
                "aborted read (G1a): {id:?} ended {:?}, {seen} of its values are visible",
                t.outcome
            )),
            _ if seen > 0 && !t.commit_sent => {
                out.push(format!("{id:?} never asked to commit, {seen} values are visible"))
            }
            _ if seen > 0 && !whole => out.push(format!(
                "torn transaction: {seen} of {id:?}'s {} values are visible",
                t.sent.len()
            )),
            _ => {}
        }
        for v in &t.acked {
            if !raw_at.contains_key(v.as_str()) {
                out.push(format!("{v} of {id:?} was acknowledged, read_uncommitted lacks it"));
            }
        }
    }
    for ((p, o), v) in &facts.reads {
        let now = committed.get(p).and_then(|l| l.get(o));
        if now != Some(v) {
            out.push(format!("partition {p} offset {o}: read_committed read {v}, now {now:?}"));
        }
    }
    for (t, r) in &facts.txns {
        for w in r.read_from.iter().filter(|w| visible.contains(t) && !visible.contains(w)) {
            out.push(format!("aborted read (G1a): {t:?} read {w:?}, which is not visible"));
        }
    }
    offsets_follow_writes(&visible, offsets, &mut out);
    let process = process_edges(&visible);
    let mut wr = process.clone();
    for t in &visible {
        for w in facts.txns[t].read_from.iter().filter(|w| visible.contains(w)) {
            wr.entry(*w).or_default().insert(*t);
            *counts.entry("txn read-from edges".into()).or_default() += 1;
        }
    }
    if let Some(cycle) = find_cycle(&wr) {
        out.push(format!("G1c: a cycle of read-from and process-order edges: {cycle:?}"));
    }
    if find_cycle(&write_order(committed)).is_some() {
        *counts.entry("G0 write cycle (Kafka allows one)".into()).or_default() += 1;
    }
    (out, counts)
}

/// Value → (partition, offset) in `logs`; names duplicates and values never sent.
fn locate<'a>(
    facts: &TxnFacts,
    logs: &'a BTreeMap<i32, Log>,
    what: &str,
    out: &mut Vec<String>,
) -> BTreeMap<&'a str, (i32, i64)> {
    let mut at = BTreeMap::new();
    for (p, log) in logs {
        for (o, v) in log {
            let sent = txn_of(v)
                .and_then(|t| facts.txns.get(&t))
                .is_some_and(|t| t.sent.iter().any(|(sp, sv)| sv == v && sp == p));
            if !sent {
                out.push(format!("{what}: partition {p} offset {o} holds {v}, never sent there"));
            }
            if let Some(first) = at.insert(v.as_str(), (*p, *o)) {
                out.push(format!("{what}: {v} is at {first:?} and again at ({p}, {o})"));
            }
        }
    }
    at
}

/// Each transactor's group's committed offset is the number of its last visible
/// transaction (offsets and writes commit together).
fn offsets_follow_writes(
    visible: &BTreeSet<TxnId>,
    offsets: &BTreeMap<u32, Option<i64>>,
    out: &mut Vec<String>,
) {
    for (k, offset) in offsets {
        let last = visible.range((*k, 0)..=(*k, u64::MAX)).next_back().map(|t| t.1 as i64);
        if *offset != last {
            out.push(format!(
                "offsets torn from writes: transactor {k}'s group committed {offset:?}, its last visible transaction is {last:?}"
            ));
        }
    }
}

type Graph = BTreeMap<TxnId, BTreeSet<TxnId>>;

/// Each transactor's visible transactions in the order it ran them.
fn process_edges(visible: &BTreeSet<TxnId>) -> Graph {
    let mut g = Graph::new();
    for pair in visible.iter().collect::<Vec<_>>().windows(2) {
        if pair[0].0 == pair[1].0 {
            g.entry(*pair[0]).or_default().insert(*pair[1]);
        }
    }
    g
}

/// Per partition, each transaction before the next one's records (ww edges).
fn write_order(committed: &BTreeMap<i32, Log>) -> Graph {
    let mut g = Graph::new();
    for log in committed.values() {
        let order: Vec<TxnId> = log.values().filter_map(|v| txn_of(v)).collect();
        for pair in order.windows(2).filter(|p| p[0] != p[1]) {
            g.entry(pair[0]).or_default().insert(pair[1]);
        }
    }
    g
}

/// One cycle of `g`, if it has any (iterative depth-first search).
fn find_cycle(g: &Graph) -> Option<Vec<TxnId>> {
    // 1: on the current path, 2: done.
    let mut mark: BTreeMap<TxnId, u8> = BTreeMap::new();
    for &start in g.keys() {
        if mark.contains_key(&start) {
            continue;
        }
        let mut path: Vec<(TxnId, Vec<TxnId>)> = vec![(start, next_of(g, start))];
        mark.insert(start, 1);
        while let Some((node, rest)) = path.last_mut() {
            let node = *node;
            match rest.pop() {
                Some(n) if mark.get(&n) == Some(&1) => {
                    let from = path.iter().position(|(p, _)| *p == n).unwrap_or(0);
                    return Some(path[from..].iter().map(|(p, _)| *p).collect());
                }
                Some(n) if !mark.contains_key(&n) => {
                    mark.insert(n, 1);
                    path.push((n, next_of(g, n)));
                }
                Some(_) => {}
                None => {
                    mark.insert(node, 2);
                    path.pop();
                }
            }
        }
    }
    None
}

fn next_of(g: &Graph, n: TxnId) -> Vec<TxnId> {
    g.get(&n).map(|s| s.iter().copied().collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(facts: &mut TxnFacts, t: TxnId, partitions: &[i32], outcome: Outcome) {
        let sent: Vec<(i32, String)> =
            partitions.iter().map(|p| (*p, value_of(t, *p, 0))).collect();
        let acked = sent.iter().map(|(_, v)| v.clone()).collect();
        let commit_sent = matches!(outcome, Outcome::Committed | Outcome::Unknown);
        facts.txns.insert(t, Txn { sent, acked, commit_sent, outcome, ..Txn::default() });
    }

    fn logs(rows: &[(i32, i64, TxnId)]) -> BTreeMap<i32, Log> {
        let mut out: BTreeMap<i32, Log> = BTreeMap::new();
        for (p, o, t) in rows {
            out.entry(*p).or_default().insert(*o, value_of(*t, *p, 0));
        }
        out
    }

    #[test]
    fn a_serial_history_passes_and_each_anomaly_is_named() {
        let mut f = TxnFacts::default();
        txn(&mut f, (0, 1), &[0, 1], Outcome::Committed);
        txn(&mut f, (0, 2), &[0], Outcome::Aborted);
        txn(&mut f, (1, 1), &[1], Outcome::Unknown);
        let committed = logs(&[(0, 0, (0, 1)), (1, 0, (0, 1)), (1, 2, (1, 1))]);
        let raw = logs(&[(0, 0, (0, 1)), (0, 2, (0, 2)), (1, 0, (0, 1)), (1, 2, (1, 1))]);
        let offsets = BTreeMap::from([(0, Some(1)), (1, Some(1))]);
        let (bad, counts) = check(&f, &committed, &raw, &offsets);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(counts["txn committed"], 1);
        // An aborted read, a lost write, a torn transaction, a duplicate, and offsets that
        // name an aborted transaction.
        let committed = logs(&[(0, 0, (0, 2)), (1, 0, (0, 1)), (1, 1, (0, 1))]);
        let mut f2 = TxnFacts::default();
        txn(&mut f2, (0, 1), &[0, 1], Outcome::Unknown);
        txn(&mut f2, (0, 2), &[0], Outcome::Aborted);
        txn(&mut f2, (0, 3), &[2], Outcome::Committed);
        let (bad, _) = check(&f2, &committed, &committed, &BTreeMap::from([(0, Some(3))]));
        let all = bad.join("\n");
        for what in ["aborted read", "lost write", "torn", "again at", "offsets torn"] {
            assert!(all.contains(what), "{what:?} not in:\n{all}");
        }
    }

    #[test]
    fn read_committed_reads_are_judged_as_they_happen() {
        let mut f = TxnFacts::default();
        txn(&mut f, (0, 1), &[0], Outcome::Open);
        assert!(!f.txns[&(0, 1)].commit_sent);
        f.read(None, (0, 0), &value_of((0, 1), 0, 0));
        assert!(f.violations[0].contains("precommitted"), "{:?}", f.violations);
        txn(&mut f, (0, 2), &[0], Outcome::Aborted);
        f.read(Some((1, 1)), (0, 1), &value_of((0, 2), 0, 0));
        assert!(f.violations[1].contains("G1a"), "{:?}", f.violations);
        assert!(f.txns[&(1, 1)].read_from.contains(&(0, 2)));
    }

    #[test]
    fn a_read_from_cycle_is_g1c_and_a_write_cycle_is_only_counted() {
        let mut f = TxnFacts::default();
        txn(&mut f, (0, 1), &[0, 1], Outcome::Committed);
        txn(&mut f, (1, 1), &[0, 1], Outcome::Committed);
        // Crossed on two partitions: G0, which Kafka allows.
        let committed = logs(&[(0, 0, (0, 1)), (0, 1, (1, 1)), (1, 0, (1, 1)), (1, 1, (0, 1))]);
        let offsets = BTreeMap::from([(0, Some(1)), (1, Some(1))]);
        let (bad, counts) = check(&f, &committed, &committed, &offsets);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(counts.get("G0 write cycle (Kafka allows one)"), Some(&1));
        // Each read the other: impossible under read_committed.
        f.txns.entry((0, 1)).or_default().read_from.insert((1, 1));
        f.txns.entry((1, 1)).or_default().read_from.insert((0, 1));
        let (bad, _) = check(&f, &committed, &committed, &offsets);
        assert!(bad.iter().any(|b| b.contains("G1c")), "{bad:?}");
    }
}
