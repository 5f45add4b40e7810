//! Placement (#23 item 3): which writable bookies a new ensemble, or a replacement in one,
//! uses. Bookies register a rack (default none: all of them one rack); placement spreads an
//! ensemble over as many racks as there are, and orders it so that each write set (Qw
//! consecutive positions, cyclically) spans as many racks as it can: every write set spans
//! two racks whenever some order of the ensemble allows it (with two racks and `Qw` = 2 that
//! needs each rack to hold at most half the positions; `E` = 3 over two racks cannot, and one
//! write set then stays in one rack). A replacement prefers a rack that no other member of
//! the write sets of its position is in. Only writable bookies are candidates: read-only
//! (full, draining) ones never register as writable.
//!
//! Pure functions of the candidates and a random source, so tests check them directly.

use std::collections::BTreeMap;

use rand::Rng;
use rand::seq::SliceRandom;

/// A writable bookie and its rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub bookie_id: String,
    pub rack: Option<String>,
}

/// The racks of the positions of `ensemble`'s write sets that hold `pos`, other than `pos`.
fn neighbours(racks: &[Option<String>], pos: usize, qw: usize) -> Vec<Option<String>> {
    let e = racks.len();
    let reach = qw.saturating_sub(1).min(e.saturating_sub(1));
    let mut out = Vec::new();
    for d in 1..=reach {
        out.push(racks[(pos + d) % e].clone());
        out.push(racks[(pos + e - d) % e].clone());
    }
    out
}

/// An ensemble of `e` of `candidates` for write quorum `qw` (see the module doc); `None`
/// if there are fewer than `e` candidates.
pub fn ensemble(
    candidates: &[Candidate],
    e: usize,
    qw: usize,
    rng: &mut impl Rng,
) -> Option<Vec<String>> {
    if candidates.len() < e {
        return None;
    }
    let mut by_rack: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for c in candidates {
        by_rack.entry(c.rack.clone()).or_default().push(c.bookie_id.clone());
    }
    let mut racks: Vec<(Option<String>, Vec<String>)> = by_rack.into_iter().collect();
    racks.shuffle(rng);
    for (_, ids) in &mut racks {
        ids.shuffle(rng);
    }
    let mut placed: Vec<Option<String>> = Vec::with_capacity(e);
    let mut out = Vec::with_capacity(e);
    for pos in 0..e {
        // Racks the write sets through `pos` already hold: before it, and (near the end)
        // at the start of the ensemble, which the last write sets wrap around to.
        let before = pos.saturating_sub(qw.saturating_sub(1));
        let mut taken: Vec<&Option<String>> = placed[before..pos].iter().collect();
        let wrap = (pos + qw).saturating_sub(e).min(pos);
        taken.extend(placed[..wrap].iter());
        // The rack with the most bookies left that no neighbour holds; else one that the
        // position just before does not hold; else any.
        let prev = placed.last();
        let allowed = |level: usize, rack: &Option<String>| match level {
            0 => !taken.contains(&rack),
            1 => prev != Some(rack),
            _ => true,
        };
        let pick = (0..3).find_map(|level| {
            racks
                .iter()
                .enumerate()
                .filter(|(_, (rack, ids))| !ids.is_empty() && allowed(level, rack))
                .max_by_key(|(_, (_, ids))| ids.len())
                .map(|(i, _)| i)
        })?;
        let (rack, ids) = &mut racks[pick];
        out.push(ids.pop()?);
        placed.push(rack.clone());
    }
    Some(out)
}

/// A replacement for position `pos` of `ensemble` (whose members' racks are `racks`) among
/// `candidates` (none of them in the ensemble): one whose rack no other member of `pos`'s
/// write sets holds if there is one, else one whose rack the ensemble holds least; random
/// among equals. `None` without candidates.
pub fn replacement(
    candidates: &[Candidate],
    racks: &[Option<String>],
    pos: usize,
    qw: usize,
    rng: &mut impl Rng,
) -> Option<String> {
    if candidates.is_empty() {
        return None;
    }
    let near = neighbours(racks, pos, qw);
    let used =
        |r: &Option<String>| racks.iter().enumerate().filter(|(i, x)| *i != pos && *x == r).count();
    let score = |c: &Candidate| (near.contains(&c.rack), used(&c.rack));
    let best = candidates.iter().map(score).min()?;
    let equal: Vec<&Candidate> = candidates.iter().filter(|c| score(c) == best).collect();
    Some(equal[rng.random_range(0..equal.len())].bookie_id.clone())
}

/// The fewest racks any write set of an ensemble with these racks spans.
pub fn racks_per_write_set_min(racks: &[Option<String>], qw: usize) -> usize {
    let e = racks.len();
    (0..e)
        .map(|start| {
            let mut set: Vec<&Option<String>> =
                (0..qw.min(e)).map(|i| &racks[(start + i) % e]).collect();
            set.sort();
            set.dedup();
            set.len()
        })
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    fn bookies(racks: &[(&str, usize)]) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (rack, n) in racks {
            for i in 0..*n {
                let rack = (!rack.is_empty()).then(|| rack.to_string());
                out.push(Candidate {
                    bookie_id: format!("{}-{i}", rack.as_deref().unwrap_or("b")),
                    rack,
                });
            }
        }
        out
    }

    /// Racks with their bookies, E, Qw, and the fewest racks a write set must span.
    type Case = (&'static [(&'static str, usize)], usize, usize, usize);

    fn racks_of(c: &[Candidate], ensemble: &[String]) -> Vec<Option<String>> {
        ensemble
            .iter()
            .map(|b| c.iter().find(|x| &x.bookie_id == b).expect("a candidate").rack.clone())
            .collect()
    }

    /// Every ensemble is distinct candidates; it spreads over as many racks as it can; each
    /// write set spans two racks whenever the racks allow it.
    #[test]
    fn ensembles_spread_over_racks_and_write_sets_over_two_when_they_can() {
        let mut rng = SmallRng::seed_from_u64(7);
        let cases: &[Case] = &[
            (&[("a", 3), ("b", 3)], 2, 2, 2),
            (&[("a", 3), ("b", 3)], 4, 2, 2),
            (&[("a", 3), ("b", 3)], 6, 2, 2),
            (&[("a", 3), ("b", 3)], 3, 3, 2),
            (&[("a", 2), ("b", 2), ("c", 2)], 3, 2, 2),
            (&[("a", 2), ("b", 2), ("c", 2)], 3, 3, 3),
            (&[("a", 5), ("b", 1)], 2, 2, 2),
            (&[("a", 4), ("b", 2)], 4, 2, 2),
            (&[("", 5)], 3, 2, 1),
            (&[("a", 3), ("", 3)], 2, 2, 2),
        ];
        for (racks, e, qw, least) in cases {
            for _ in 0..50 {
                let c = bookies(racks);
                let got = ensemble(&c, *e, *qw, &mut rng).expect("enough bookies");
                assert_eq!(got.len(), *e);
                let mut distinct = got.clone();
                distinct.sort();
                distinct.dedup();
                assert_eq!(distinct.len(), *e, "distinct bookies: {got:?}");
                let r = racks_of(&c, &got);
                let mut used = r.clone();
                used.sort();
                used.dedup();
                assert_eq!(used.len(), racks.len().min(*e), "{racks:?} E={e}: {r:?}");
                let min = racks_per_write_set_min(&r, *qw);
                assert!(min >= *least, "{racks:?} E={e} Qw={qw}: {r:?} has a write set over {min}");
            }
        }
        // E = 3 over two racks with Qw = 2: one write set must share a rack, but only one.
        let c = bookies(&[("a", 3), ("b", 3)]);
        let r = racks_of(&c, &ensemble(&c, 3, 2, &mut rng).unwrap());
        assert_eq!(racks_per_write_set_min(&r, 2), 1);
        let same = (0..3).filter(|i| r[*i] == r[(i + 1) % 3]).count();
        assert_eq!(same, 1, "{r:?}");
        assert_eq!(ensemble(&c, 7, 2, &mut rng), None, "too few bookies");
    }

    /// A replacement goes to a rack none of its write sets' other members is in, else to
    /// the rack the ensemble uses least.
    #[test]
    fn a_replacement_keeps_its_write_sets_over_two_racks() {
        let mut rng = SmallRng::seed_from_u64(3);
        let rack = |s: &str| Some(s.to_string());
        // Ensemble a, b; the bookie in a failed: the replacement must be in a, not b.
        let spare = bookies(&[("a", 2), ("b", 2)]);
        for _ in 0..20 {
            let got = replacement(&spare, &[rack("a"), rack("b")], 0, 2, &mut rng).unwrap();
            assert!(got.starts_with("a-"), "{got}");
        }
        // a b a b, position 1 (b) failed: its write sets hold a on both sides.
        for _ in 0..20 {
            let r = [rack("a"), rack("b"), rack("a"), rack("b")];
            let got = replacement(&spare, &r, 1, 2, &mut rng).unwrap();
            assert!(got.starts_with("b-"), "{got}");
        }
        // Three racks, a b c with c failed: a and b are its neighbours, c and d are not.
        let spare = bookies(&[("a", 1), ("c", 1), ("d", 1)]);
        let got = replacement(&spare, &[rack("a"), rack("b"), rack("c")], 2, 3, &mut rng);
        assert!(matches!(got.as_deref(), Some("c-0") | Some("d-0")), "{got:?}");
        assert_eq!(replacement(&[], &[rack("a")], 0, 1, &mut rng), None);
    }
}
