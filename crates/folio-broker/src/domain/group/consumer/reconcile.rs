//! One member's way from its current assignment to its target (KIP-848's reconciliation):
//! partitions are revoked before they are assigned elsewhere.
//!
//! Per topic, with `current` C and `target` T: `kept` = C ∩ T, `revoke` = C − kept,
//! `add` = T − kept − the partitions another member still holds, `held` = the rest of T.
//!
//! | case, in order | the member becomes |
//! |---|---|
//! | revoke ≠ ∅ and the member may still own some of it | UNREVOKED_PARTITIONS, epoch unchanged, assigned `kept` |
//! | add ≠ ∅ | `kept ∪ add` at the target epoch; UNRELEASED_PARTITIONS if held ≠ ∅, else STABLE |
//! | held ≠ ∅ | UNRELEASED_PARTITIONS at the target epoch, assigned `kept` |
//! | else | STABLE at the target epoch, assigned `kept` |
//!
//! A member "may still own" a partition unless its heartbeat listed what it owns and the
//! partition was not in it; a partition it is revoking counts as held by it, so nobody
//! else gets it until it is gone from the member's list.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::assign::Partitions;

/// Where a member is in its reconciliation (Kafka's `MemberState`, with its codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// At the target epoch with its whole target.
    Stable,
    /// Told to give partitions up; its epoch waits until it has.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions others still hold.
    UnreleasedPartitions,
}

impl MemberState {
    /// The name ConsumerGroupDescribe and the logs use.
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

/// A member's reconciliation state: what it may consume and what it must give up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub state: MemberState,
    pub epoch: i32,
    /// What the member is told it owns.
    pub assigned: Partitions,
    /// What it must give up (it still holds them until its heartbeat says otherwise).
    pub revoking: Partitions,
}

/// The next state of a member at `epoch` assigned `current`, towards `target` at
/// `target_epoch`. `owned`: what its heartbeat says it owns (`None`: not said);
/// `held_elsewhere`: whether another member still holds a partition.
pub fn step(
    epoch: i32,
    current: &Partitions,
    target: &Partitions,
    target_epoch: i32,
    owned: Option<&Partitions>,
    held_elsewhere: impl Fn(Uuid, i32) -> bool,
) -> Reconciled {
    let (mut kept, mut revoke, mut add, mut held) =
        (Partitions::new(), Partitions::new(), Partitions::new(), Partitions::new());
    let topics: BTreeSet<Uuid> = current.keys().chain(target.keys()).copied().collect();
    let empty = BTreeSet::new();
    for t in topics {
        let (c, tg) = (current.get(&t).unwrap_or(&empty), target.get(&t).unwrap_or(&empty));
        for &p in c {
            let into = if tg.contains(&p) { &mut kept } else { &mut revoke };
            into.entry(t).or_default().insert(p);
        }
        for &p in tg.difference(c) {
            let into = if held_elsewhere(t, p) { &mut held } else { &mut add };
            into.entry(t).or_default().insert(p);
        }
    }
    let still_owns = |ps: &Partitions| match owned {
        None => true,
        Some(o) => ps.iter().any(|(t, set)| o.get(t).is_some_and(|os| !os.is_disjoint(set))),
    };
    if !revoke.is_empty() && still_owns(&revoke) {
        return Reconciled {
            state: MemberState::UnrevokedPartitions,
            epoch,
            assigned: kept,
            revoking: revoke,
        };
    }
    let state =
        if held.is_empty() { MemberState::Stable } else { MemberState::UnreleasedPartitions };
    for (t, ps) in add {
        kept.entry(t).or_default().extend(ps);
    }
    Reconciled { state, epoch: target_epoch, assigned: kept, revoking: Partitions::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Uuid {
        Uuid::from_bytes([7; 16])
    }

    fn ps(p: &[i32]) -> Partitions {
        [(t(), p.iter().copied().collect())].into()
    }

    #[test]
    fn partitions_are_revoked_before_they_are_assigned() {
        // a owns 0..4; the target gives it 0, 1 and 2, 3 to b.
        let a = step(1, &ps(&[0, 1, 2, 3]), &ps(&[0, 1]), 2, None, |_, _| false);
        assert_eq!(a.state, MemberState::UnrevokedPartitions);
        assert_eq!((a.epoch, &a.assigned, &a.revoking), (1, &ps(&[0, 1]), &ps(&[2, 3])));
        // b may not take 2 and 3 while a holds them: it waits at the target epoch.
        let held = |_, p| a.revoking.values().any(|s| s.contains(&p));
        let b = step(0, &Partitions::new(), &ps(&[2, 3]), 2, Some(&Partitions::new()), held);
        assert_eq!(b.state, MemberState::UnreleasedPartitions);
        assert_eq!((b.epoch, b.assigned.is_empty()), (2, true));
        // a's heartbeat lists only 0, 1: it gave 2 and 3 up and reaches the target epoch.
        let a2 = step(a.epoch, &a.assigned, &ps(&[0, 1]), 2, Some(&ps(&[0, 1])), |_, _| false);
        assert_eq!((a2.state, a2.epoch, a2.revoking.is_empty()), (MemberState::Stable, 2, true));
        // Now b gets them.
        let b2 = step(b.epoch, &b.assigned, &ps(&[2, 3]), 2, None, |_, _| false);
        assert_eq!((b2.state, &b2.assigned), (MemberState::Stable, &ps(&[2, 3])));
    }

    #[test]
    fn a_member_that_still_lists_a_revoked_partition_keeps_waiting() {
        let a = step(1, &ps(&[0, 1]), &ps(&[0]), 2, Some(&ps(&[0, 1])), |_, _| false);
        assert_eq!((a.state, a.epoch), (MemberState::UnrevokedPartitions, 1));
        // A member that already dropped the partition (it says so) moves on at once.
        let a = step(1, &ps(&[0, 1]), &ps(&[0]), 2, Some(&ps(&[0])), |_, _| false);
        assert_eq!((a.state, a.epoch, a.assigned), (MemberState::Stable, 2, ps(&[0])));
    }

    #[test]
    fn a_stable_member_at_its_target_stays_as_it_is() {
        let a = step(3, &ps(&[0, 1]), &ps(&[0, 1]), 3, None, |_, _| true);
        assert_eq!((a.state, a.epoch, a.assigned), (MemberState::Stable, 3, ps(&[0, 1])));
    }
}
