//! The consumer protocol's server-side assignors (KIP-848, `group.consumer.assignors`):
//! `uniform` and `range`. Both are pure functions of the members (their subscriptions and
//! what they own now) and the subscribed topics' partition counts, deterministic for the
//! same input, so a target computed twice is the same target.
//!
//! - `uniform` balances first (members that can take the same partitions differ by at most
//!   one partition) and then keeps partitions where they are: a member keeps what it owns
//!   while that stays balanced, and only the surplus moves.
//! - `range` gives each member a contiguous range of each topic it subscribes to, members
//!   ordered by instance id (static members) or member id, so members subscribed to topics
//!   with equal partition counts get the same partition numbers of each (co-partitioning).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions by topic id.
pub type Partitions = BTreeMap<Uuid, BTreeSet<i32>>;

/// The assignors this broker runs; the first of `group.consumer.assignors` is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    /// The assignor a client names (`group.remote.assignor`), if this broker has it.
    pub fn parse(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// Its name, as ConsumerGroupDescribe answers it.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }
}

/// One member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct Subscriber<'a> {
    pub id: &'a str,
    /// Range's order: the instance id of a static member, else the member id.
    pub order: &'a str,
    /// The topics it subscribes to (resolved: names and its regex).
    pub topics: BTreeSet<Uuid>,
    /// What it is assigned now (the stickiness of `uniform`).
    pub current: &'a Partitions,
}

/// The target assignment: member id → partitions; every member has an entry.
pub fn assign(
    assignor: Assignor,
    members: &[Subscriber<'_>],
    partitions: &BTreeMap<Uuid, u32>,
) -> BTreeMap<String, Partitions> {
    let target = match assignor {
        Assignor::Uniform => uniform(members, partitions),
        Assignor::Range => range(members, partitions),
    };
    assert_eq!(target.len(), members.len(), "every member gets a target");
    target
}

fn range(
    members: &[Subscriber<'_>],
    partitions: &BTreeMap<Uuid, u32>,
) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> =
        members.iter().map(|m| (m.id.to_string(), Partitions::new())).collect();
    for (&topic, &count) in partitions {
        let mut takers: Vec<&Subscriber<'_>> =
            members.iter().filter(|m| m.topics.contains(&topic)).collect();
        if takers.is_empty() {
            continue;
        }
        takers.sort_by(|a, b| (a.order, a.id).cmp(&(b.order, b.id)));
        let (each, extra) = (count as usize / takers.len(), count as usize % takers.len());
        let mut next = 0i32;
        for (i, m) in takers.iter().enumerate() {
            let len = (each + usize::from(i < extra)) as i32;
            if len > 0 {
                let set = out.get_mut(m.id).expect("every member has an entry");
                set.insert(topic, (next..next + len).collect());
            }
            next += len;
        }
        assert_eq!(next as u32, count, "range covers every partition of a topic once");
    }
    out
}

fn uniform(
    members: &[Subscriber<'_>],
    partitions: &BTreeMap<Uuid, u32>,
) -> BTreeMap<String, Partitions> {
    let mut owner: BTreeMap<(Uuid, i32), usize> = BTreeMap::new();
    let mut count = vec![0usize; members.len()];
    let valid = |t: &Uuid, p: i32| partitions.get(t).is_some_and(|&n| p >= 0 && (p as u32) < n);
    // Stickiness: each partition stays with a member that owns it and still subscribes.
    for (i, m) in members.iter().enumerate() {
        for (t, ps) in m.current {
            if !m.topics.contains(t) {
                continue;
            }
            for &p in ps {
                if valid(t, p) && !owner.contains_key(&(*t, p)) {
                    owner.insert((*t, p), i);
                    count[i] += 1;
                }
            }
        }
    }
    // Every other subscribed partition goes to the least loaded member that subscribes.
    for (&t, &n) in partitions {
        let takers: Vec<usize> =
            (0..members.len()).filter(|&i| members[i].topics.contains(&t)).collect();
        if takers.is_empty() {
            continue;
        }
        for p in 0..n as i32 {
            if owner.contains_key(&(t, p)) {
                continue;
            }
            let i = *takers.iter().min_by_key(|&&i| (count[i], i)).expect("takers is not empty");
            owner.insert((t, p), i);
            count[i] += 1;
        }
    }
    balance(members, &mut owner, &mut count);
    let mut out: BTreeMap<String, Partitions> =
        members.iter().map(|m| (m.id.to_string(), Partitions::new())).collect();
    for ((t, p), i) in owner {
        out.get_mut(members[i].id).expect("an entry").entry(t).or_default().insert(p);
    }
    out
}

/// Moves partitions from the most loaded members to members that subscribe to them and
/// hold at least two fewer, until no such move is left. Each move lowers the sum of the
/// squared loads by at least two, so this ends.
fn balance(
    members: &[Subscriber<'_>],
    owner: &mut BTreeMap<(Uuid, i32), usize>,
    count: &mut [usize],
) {
    let mut held: Vec<Vec<(Uuid, i32)>> = vec![Vec::new(); members.len()];
    for (k, &i) in owner.iter() {
        held[i].push(*k);
    }
    loop {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(count[i]), i));
        let found = order.iter().find_map(|&from| {
            // Its partitions, last first: the highest numbers move, the lowest stay put.
            held[from].iter().enumerate().rev().find_map(|(at, &(t, _))| {
                (0..members.len())
                    .filter(|&j| j != from && members[j].topics.contains(&t))
                    .filter(|&j| count[j] + 2 <= count[from])
                    .min_by_key(|&j| (count[j], j))
                    .map(|to| (from, at, to))
            })
        });
        let Some((from, at, to)) = found else { return };
        let k = held[from].remove(at);
        held[to].push(k);
        owner.insert(k, to);
        count[from] -= 1;
        count[to] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn sub<'a>(id: &'a str, topics: &[u8], current: &'a Partitions) -> Subscriber<'a> {
        Subscriber { id, order: id, topics: topics.iter().map(|&t| topic(t)).collect(), current }
    }

    fn sizes(target: &BTreeMap<String, Partitions>) -> Vec<usize> {
        target.values().map(|ps| ps.values().map(BTreeSet::len).sum()).collect()
    }

    fn every_partition_once(target: &BTreeMap<String, Partitions>, parts: &BTreeMap<Uuid, u32>) {
        let mut seen = BTreeSet::new();
        for ps in target.values() {
            for (t, set) in ps {
                for p in set {
                    assert!(seen.insert((*t, *p)), "partition {t}/{p} assigned twice");
                }
            }
        }
        let all: usize = parts.values().map(|&n| n as usize).sum();
        assert_eq!(seen.len(), all, "every partition assigned");
    }

    #[test]
    fn uniform_balances_then_keeps_what_members_own() {
        let parts: BTreeMap<Uuid, u32> = [(topic(1), 7), (topic(2), 3)].into();
        let none = Partitions::new();
        let first = assign(Assignor::Uniform, &[sub("a", &[1, 2], &none)], &parts);
        every_partition_once(&first, &parts);
        assert_eq!(sizes(&first), vec![10]);
        // b joins: a keeps 5 of its 10, b takes the other 5; nothing else moves.
        let a_now = first["a"].clone();
        let second = assign(
            Assignor::Uniform,
            &[sub("a", &[1, 2], &a_now), sub("b", &[1, 2], &none)],
            &parts,
        );
        every_partition_once(&second, &parts);
        assert_eq!(sizes(&second), vec![5, 5]);
        for (t, ps) in &second["a"] {
            assert!(ps.is_subset(&a_now[t]), "a keeps only partitions it had");
        }
        // c joins: sizes 4, 3, 3 and a and b give up only what c takes.
        let (a2, b2) = (second["a"].clone(), second["b"].clone());
        let members = [sub("a", &[1, 2], &a2), sub("b", &[1, 2], &b2), sub("c", &[1, 2], &none)];
        let third = assign(Assignor::Uniform, &members, &parts);
        every_partition_once(&third, &parts);
        let mut s = sizes(&third);
        s.sort();
        assert_eq!(s, vec![3, 3, 4]);
        assert_eq!(third, assign(Assignor::Uniform, &members, &parts), "deterministic");
    }

    #[test]
    fn uniform_with_different_subscriptions_gives_each_only_its_topics() {
        let parts: BTreeMap<Uuid, u32> = [(topic(1), 4), (topic(2), 4)].into();
        let none = Partitions::new();
        let members = [sub("a", &[1], &none), sub("b", &[1, 2], &none), sub("c", &[2], &none)];
        let t = assign(Assignor::Uniform, &members, &parts);
        every_partition_once(&t, &parts);
        assert!(t["a"].keys().all(|k| *k == topic(1)));
        assert!(t["c"].keys().all(|k| *k == topic(2)));
        let mut s = sizes(&t);
        s.sort();
        assert!(s[2] - s[0] <= 1, "balanced: {s:?}");
    }

    #[test]
    fn range_gives_contiguous_ranges_and_copartitions() {
        let parts: BTreeMap<Uuid, u32> = [(topic(1), 5), (topic(2), 5)].into();
        let none = Partitions::new();
        let members = [sub("b", &[1, 2], &none), sub("a", &[1, 2], &none)];
        let t = assign(Assignor::Range, &members, &parts);
        every_partition_once(&t, &parts);
        assert_eq!(t["a"][&topic(1)], [0, 1, 2].into());
        assert_eq!(t["b"][&topic(1)], [3, 4].into());
        assert_eq!(t["a"][&topic(1)], t["a"][&topic(2)], "the same numbers of each topic");
        // A topic with fewer partitions than members leaves the last members without.
        let one: BTreeMap<Uuid, u32> = [(topic(3), 1)].into();
        let t = assign(Assignor::Range, &[sub("a", &[3], &none), sub("b", &[3], &none)], &one);
        assert_eq!(sizes(&t), vec![1, 0]);
    }

    #[test]
    fn nobody_subscribed_and_vanished_partitions_are_dropped() {
        let parts: BTreeMap<Uuid, u32> = [(topic(1), 2)].into();
        // a owns partition 5 of a topic that shrank to 2 and a topic it left.
        let current: Partitions = [(topic(1), [5].into()), (topic(9), [0].into())].into();
        let t = assign(Assignor::Uniform, &[sub("a", &[1], &current)], &parts);
        assert_eq!(t["a"], [(topic(1), [0, 1].into())].into());
        let t = assign(Assignor::Uniform, &[], &parts);
        assert!(t.is_empty());
    }
}
