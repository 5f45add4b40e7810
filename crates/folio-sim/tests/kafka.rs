//! The broker in the simulator (#46): seeds from `FOLIO_SIM_KAFKA_SEEDS` (`a..b` or
//! `a,b,c`), else CI's range, split over two tests so nextest runs them on both cores. A
//! failing seed prints its violations, the command that replays it and its trace's tail.

use folio_sim::kafka::{run_kafka, run_kafka_txns};
use folio_sim::{Options, Report, seeds};

/// Seeds CI runs when `FOLIO_SIM_KAFKA_SEEDS` is not set.
const CI_SEEDS: std::ops::Range<u64> = 0..60;
const PARTS: u64 = 2;

fn run_part(part: u64) {
    let all = seeds("FOLIO_SIM_KAFKA_SEEDS", CI_SEEDS);
    run_part_of(all, PARTS, part, &Options::default(), ("FOLIO_SIM_KAFKA_SEEDS", run_kafka));
}

/// Runs the seeds of `all` that are `part` mod `parts`.
fn run_part_of(
    all: Vec<u64>,
    parts: u64,
    part: u64,
    opts: &Options,
    (var, run): (&str, fn(u64, &Options) -> Report),
) {
    let mine: Vec<u64> = all.iter().copied().filter(|s| s % parts == part).collect();
    let started = std::time::Instant::now();
    let mut failed: Vec<Report> = Vec::new();
    let mut sim_secs = 0.0;
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for seed in &mine {
        let r = run(*seed, opts);
        sim_secs += r.sim_time.as_secs_f64();
        for (k, v) in &r.counts {
            *counts.entry(k.clone()).or_default() += v;
        }
        if !r.passed() {
            eprintln!(
                "{}",
                r.failure_text()
                    .replace("FOLIO_SIM_SEEDS=", &format!("{var}="))
                    .replace("--test sim", "--test kafka")
            );
            failed.push(r);
        }
    }
    let took = started.elapsed().as_secs_f64();
    eprintln!(
        "kafka part {part}: {} seeds in {took:.1} s ({:.2} seeds/s, {sim_secs:.0} simulated s), {} failed",
        mine.len(),
        mine.len() as f64 / took.max(1e-9),
        failed.len()
    );
    eprintln!("kafka part {part}: {counts:?}");
    assert!(
        failed.is_empty(),
        "failing seeds: {:?} (replay one with FOLIO_SIM_STORAGE_MODE={} {var}=<seed> FOLIO_SIM_VERBOSE=1)",
        failed.iter().map(|r| r.seed).collect::<Vec<_>>(),
        opts.storage_mode.name()
    );
}

/// Seeds CI runs with single-write bookies (`FOLIO_SIM_KAFKA_SINGLE_WRITE_SEEDS` for others).
const SINGLE_WRITE_CI_SEEDS: std::ops::Range<u64> = 0..60;

#[test]
fn kafka_single_write_seeds() {
    let opts =
        Options { storage_mode: folio_bookie::StorageMode::SingleWrite, ..Options::default() };
    let all = seeds("FOLIO_SIM_KAFKA_SINGLE_WRITE_SEEDS", SINGLE_WRITE_CI_SEEDS);
    run_part_of(all, 1, 0, &opts, ("FOLIO_SIM_KAFKA_SINGLE_WRITE_SEEDS", run_kafka));
}

/// Seeds of the transactional workload CI runs (`FOLIO_SIM_KAFKA_TXN_SEEDS` for others).
const TXN_CI_SEEDS: std::ops::Range<u64> = 0..200;

/// #49: transactors and a read_committed consumer under the nemesis, judged by
/// `txn_check` (lost writes, aborted reads, torn transactions, G1c, offsets torn from
/// writes).
#[test]
fn kafka_transaction_seeds() {
    let all = seeds("FOLIO_SIM_KAFKA_TXN_SEEDS", TXN_CI_SEEDS);
    run_part_of(all, 1, 0, &Options::default(), ("FOLIO_SIM_KAFKA_TXN_SEEDS", run_kafka_txns));
}

#[test]
fn kafka_seeds_part_0() {
    run_part(0);
}

#[test]
fn kafka_seeds_part_1() {
    run_part(1);
}

/// A seed replays exactly: the same trace, line for line (its checksum), twice.
#[test]
fn a_kafka_seed_replays_to_the_same_trace() {
    let opts = Options::default();
    let (a, b) = (run_kafka(5, &opts), run_kafka(5, &opts));
    assert_eq!(a.checksum, b.checksum, "seed 5 ran differently twice");
    assert!(a.checksum.1 > 100, "seed 5 traced only {} lines", a.checksum.1);
}

/// Seeds that catch the broker bugs the simulator found, each put back by a `kafka-` mutant
/// of `scripts/sim-mutants.sh` (which runs this test beside CI's range): they run in every
/// build, whatever `FOLIO_SIM_KAFKA_SEEDS` says. A change to the scenario draws other runs
/// from the same seeds: then rerun the mutants and take the seeds they print.
const REGRESSION_SEEDS: &[(&str, &[u64])] = &[
    // Broker 1 restarts and opens partition 0; broker 2, not yet seeing it, opens the
    // partition too (recovering broker 1's ledger), acknowledges a record at offset 106,
    // then hands the partition back. Broker 1's log, fenced underneath but only reading,
    // served end 106 and the record stayed out of sight (`Inner::partition` now reopens a
    // log whose record's epoch moved on). Seed 171 at 6dd216b (1 of 0..600); since the
    // pause fault (ceca65f) seeds 466, 509, 670, 916, 1698 of 0..2000.
    ("kafka-reader-unaware", &[466, 509]),
    // A committer's commit 45 reached broker 1 while it was cut off from the store (its
    // transaction held); the client gave up and sent 46, held too; on heal both landed,
    // 46 first: 46 acknowledged, 45 kept. A group's commits now write in the order they
    // arrived. Seed 805 of 300..1300 at 4ad1721; since the pause fault, 2512 (1 of 0..3000).
    ("kafka-commits-unordered", &[2512]),
    // An offset commit that waited out its coordinator's move away and back is written
    // with a claim newer than the offsets written meanwhile. Seed 28 before the pause
    // fault; since, 373, 926, 1402, 1606, 1658, 2152, 2168, 2510 of 0..3000. Seed 373 also
    // catches `kafka-claim-arrival-off`: with the log actors' exact sleeps (no 50 ms
    // re-check) it moved group-0's offset from 51 back to 24 before the claim-arrival check.
    ("kafka-commit-tenure-off", &[373, 926]),
    // A long-polling Fetch on a stopping broker waits again at once (its simulated time
    // stands still). Since the pause fault, 805 only of 0..300.
    ("kafka-fetch-stop-spin", &[805]),
];

#[test]
fn kafka_regression_seeds() {
    run_regressions(REGRESSION_SEEDS, run_kafka);
}

/// Runs each bug's seeds with `run`; fails naming the bugs that are back.
fn run_regressions(bugs: &[(&str, &[u64])], run: fn(u64, &Options) -> Report) {
    let opts = Options::default();
    let mut failed = Vec::new();
    for (bug, seeds) in bugs {
        assert!(!seeds.is_empty(), "{bug}: no seed");
        for seed in *seeds {
            let r = run(*seed, &opts);
            if !r.passed() {
                eprintln!("{bug} is back:\n{}", r.failure_text());
                failed.push((*bug, *seed));
            }
        }
    }
    assert!(failed.is_empty(), "regressions: {failed:?}");
}

/// Seeds that catch the transaction bugs the simulator found, each put back by a
/// `kafka-txn-` mutant of `scripts/sim-mutants.sh` (as `REGRESSION_SEEDS`, with the
/// transactional workload).
const TXN_REGRESSION_SEEDS: &[(&str, &[u64])] = &[
    // A read_committed Fetch below an open transaction on a fenced log waited on the log,
    // which returns at once, and spun until its deadline (simulated time stood still).
    ("kafka-txn-lso-spin", &[3]),
    // A new owner read the producer and transaction snapshots apart, found them unmatched,
    // and replayed transactions only from the producer snapshot: aborted reads.
    ("kafka-txn-index-partial", &[73, 147]),
    // A TxnOffsetCommit held at a coordinator cut off from the store staged its offsets into
    // the next transaction's: the group's offset went back.
    ("kafka-txn-stage-unchecked", &[674, 1239]),
    // A marker pass that read the record before a slow partition open wrote a marker the
    // transaction had already, closing the producer's next transaction there.
    ("kafka-txn-stale-marker", &[940, 961]),
    // A version 1 EndTxn held at its coordinator ended the next transaction (KAFKA-17754).
    ("kafka-txn-end-before-start", &[357, 623]),
];

#[test]
fn kafka_transaction_regression_seeds() {
    run_regressions(TXN_REGRESSION_SEEDS, run_kafka_txns);
}
