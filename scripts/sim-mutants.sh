#!/usr/bin/env bash
# Breaks, one at a time, the code that keeps Folio's promises, and shows that the simulator
# catches each break within the seeds CI runs (#26). Each mutant is a one-line change:
#
#   fence-off     the bookie takes a fenced ledger's adds (D3)
#   2614          recovery reads past the LAC without the fence flag (BookKeeper #2614: a
#                 bookie that missed the fence acknowledges a zombie's add after answering
#                 "no entry"; the simulator's missed_fence writer fault)
#   2615          recovery starts at the LAC, even before the last fragment (#2615)
#   limbo-off     a journal-less bookie's pre-boot check puts nothing in limbo (D2)
#   preboot-fence-off  ...and fences nothing
#   ensemble-change-in-recovery  a writer may still change the ensemble of a ledger being
#                 recovered (the path BookKeeper's #2614 took); and 2614 together with it
#   epoch-before-recovery  a take-over begins its owner epoch where the previous owner's
#                 last ledger began, not where recovery ended it (#25: Kafka clients would
#                 see batches of the old owner in the new epoch)
#
# and the bugs the simulator found, each put back (their seeds are the regression seeds
# of crates/folio-sim/tests/sim.rs):
#
#   fenced-retry-loop     a log whose retry finds it fenced stays Failed, its appends wait
#   live-end-from-record  a failed roll takes the confirmed end from the record (it moves
#                         back; later appends reuse acknowledged offsets)
#   recovered-sent-again  appends a recovery found in the ledger are sent again
#   monitor-spin          the disk monitor spins once the poison watch's sender is gone
#
# and the fixes of #45 (autorecovery, GC and tombstones; seeds with autorecovery on):
#
#   tombstone-off         an add (fence, recovery add) for an id the bookie deleted creates it
#                         again (a zombie's add after GC is acknowledged into nothing)
#   tombstone-replay-off  journal replay creates again a ledger deleted since the checkpoint
#   incoming-off          GC drops a copy being made here (recovery adds, a mark, a claim)
#   verify-off            the worker swaps its copy in without listing the target again
#   claim-answer-lost     a claim whose answer was lost is never taken again on its own lease
#                         (found by the simulator: marks never drained after store failures)
#   claim-release-any     a worker releases its claim with no compare
#   copy-after-lease-lost a worker goes on copying and swaps after its lease is lost
#   absence-in-memory     each audit round counts a bookie's absence from zero again
#   ensemble-from-pick    a writer whose position was already replaced in the metadata (its
#                         own earlier attempt, answer lost) takes its new pick anyway
#   stale-uncreated       a log's retry creates a ledger a roll has since sealed and trashed
#   lac-backwards         a writer's published LAC may move back (two acks publishing in
#                         the other order: the stuck append of #26, its adds wait for ever)
#
# and single-write storage (#47; caught by the single-write seeds, `single_write_seeds_part`):
#
#   single-write-no-carry       a flush drops the cached entries it did not index (written
#                               after its mark): acknowledged entries become unreadable
#   single-write-past-the-mark  a flush indexes records the journal has not synced yet
#
# and the broker's (#44's fixes, each reverted; #46's Kafka scenario, `--test kafka`):
#
#   kafka-batch-count     a batch whose header claims more records than it holds is taken
#                         (the 75-byte batch that moved a partition's end by 2^31)
#   kafka-blind-commits   offset commits do not compare the group's claim (a stale
#                         coordinator's late write moves committed offsets back)
#   kafka-no-self-fence   a broker cut off from the store past its lease keeps serving
#                         (neither its membership loop nor its uses check the lease)
#   kafka-blind-registration  a broker registers without create-if-absent (a second
#                         process with a live broker's node id starts at once)
#   kafka-producer-state-lost  a partition's next owner starts with no idempotent producer
#                         state (a retried batch is appended twice)
#   kafka-commit-tenure-off  an offset commit that waited out a move away and back is still
#                         written (its claim is newer than the offsets written meanwhile)
#   kafka-claim-arrival-off  an offset commit that arrived under a claim now gone takes a
#                         new one and is written (seed 373: a broker cut off from the store
#                         never saw its tenure end, and moved group-0's offset from 51 to 24)
#
# and the spins the Kafka scenario found (its simulated time stood still):
#
#   kafka-reader-unaware  a broker whose open log another broker took over (and handed
#                         back) goes on serving its stale view: it never writes, so never
#                         learns its ledger was fenced (seed 171: an acknowledged record
#                         out of sight)
#   kafka-generation-in-memory  a rebalance numbers its generation from the coordinator's
#                         memory, not past the claimed one (a group that moves starts at 1
#                         again: one generation answered by two coordinators)
#   kafka-commits-unordered  a group's commits write as soon as they are decoded, not in
#                         the order they arrived (two held by the store land the other way
#                         round: an acknowledged offset replaced by an older one)
#   kafka-lease-checked-late  a broker checks its lease only in its membership loop, not
#                         at every use (paused past its lease, it serves as leader from the
#                         moment it resumes until the loop runs: #46's pause fault)
#   kafka-fetch-stop-spin   a long-polling Fetch on a stopping broker waits again at once
#   kafka-fetch-final-spin  ...and on a log that will not grow again
#
# and the transactional workload's (#49, `kafka_transaction_seeds`, FOLIO_SIM_KAFKA_TXN_SEEDS):
#
#   kafka-txn-lso-spin      a read_committed Fetch below an open transaction on a fenced
#                           log waits on it (returns at once) until its deadline
#   kafka-txn-index-partial a new owner reads the two snapshots apart and replays the
#                           transactions only from the producer snapshot (aborted reads)
#   kafka-txn-stage-unchecked  TxnOffsetCommit stages without comparing its transaction's
#                           record (a late one moves the group's offset back)
#   kafka-txn-stale-marker  a marker is written without reading the record again (a late
#                           duplicate closes the next transaction: precommitted reads)
#   kafka-txn-end-before-start  a version 1 EndTxn held at its coordinator ends the next
#                           transaction (KAFKA-17754 at the broker)
#
# For each: apply it to a copy of the tree, build the simulator, run the seeds
# (FOLIO_SIM_SEEDS, default 0..200: the first half of CI's seeds; for `kafka-` mutants
# FOLIO_SIM_KAFKA_SEEDS, default 0..60: all of CI's, and the regression seeds of
# crates/folio-sim/tests/kafka.rs, which CI runs too; for `kafka-txn-` mutants
# FOLIO_SIM_KAFKA_TXN_SEEDS, default CI's 0..200, and the transactional regression seeds),
# print the seeds that failed and what they found.
# The tree itself is never touched: each mutant is applied to a copy of a commit
# (MUTANTS_REF, default HEAD) in target/mutants, built there with its own target dir.
#
# Usage: scripts/sim-mutants.sh [mutant ...]   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/mutants/tree
seeds=${FOLIO_SIM_SEEDS:-0..200}
kafka_seeds=${FOLIO_SIM_KAFKA_SEEDS:-0..60}
txn_seeds=${FOLIO_SIM_KAFKA_TXN_SEEDS:-0..200}
ref=${MUTANTS_REF:-HEAD}

# name^file^find^replacement[^file^find^replacement...] (each found exactly once)
mutants=(
    "fence-off^crates/folio-storage/src/storage/add.rs^if ledger.state.fenced && !recovery {^if false && ledger.state.fenced && !recovery {"
    "2614^crates/folio-client/src/ledger/recovery.rs^Request::Read { ledger_id, entry_id, fence: Some(key) }^Request::Read { ledger_id, entry_id, fence: (entry_id < 0).then_some(key) }"
    "2615^crates/folio-client/src/ledger/recovery.rs^lac = lac.max(first - 1);^let _ = first;"
    "limbo-off^crates/folio-bookie/src/integrity.rs^let limbo = config.pre_boot_limbo && last^let limbo = false && last"
    "preboot-fence-off^crates/folio-bookie/src/integrity.rs^storage.prepare_ledger(ledger_id, key, config.pre_boot_fence, limbo)^storage.prepare_ledger(ledger_id, key, false, limbo)"
    # A writer may change the ensemble of a ledger in recovery (BookKeeper's path to #2614),
    # alone and together with #2614.
    "ensemble-change-in-recovery^crates/folio-client/src/ledger/writer.rs^if m.state != LedgerState::Open {^if m.state == LedgerState::Closed {"
    "2614+ensemble-change-in-recovery^crates/folio-client/src/ledger/recovery.rs^Request::Read { ledger_id, entry_id, fence: Some(key) }^Request::Read { ledger_id, entry_id, fence: (entry_id < 0).then_some(key) }^crates/folio-client/src/ledger/writer.rs^if m.state != LedgerState::Open {^if m.state == LedgerState::Closed {"
    "epoch-before-recovery^crates/folio-log/src/log/actor/seal.rs^let epoch = record.epochs.begin(end, record.log_start_offset());^let epoch = record.epochs.begin(self.record.ledgers.last().map_or(end, |l| l.first_offset.max(self.record.epochs.entries().last().map_or(0, |e| e.start_offset))), record.log_start_offset());"
    # The bugs the simulator found, put back one at a time (their regression seeds):
    "fenced-retry-loop^crates/folio-log/src/log/actor.rs^            LogError::Fenced(_) => {^            LogError::Fenced(_) => return, LogError::Closed(_) if false => {"
    "live-end-from-record^crates/folio-log/src/log/actor.rs^(!last.is_closed() && last.ledger_id == self.cur.ledger_id)^(!last.is_closed() && self.writer.is_some())"
    "recovered-sent-again^crates/folio-log/src/log/actor/seal.rs^if self.cur.ledger_id == last.ledger_id {^if false {"
    "ensemble-from-pick^crates/folio-client/src/ledger/writer.rs^let (pick, conn) = if placed == pick {^let (pick, conn) = if true || placed == pick {^crates/folio-client/src/ledger/writer.rs^if self.state.lock().expect(\"writer lock\").failed.is_some() {^if false {"
    "stale-uncreated^crates/folio-log/src/log/actor.rs^if self.uncreated.is_some() && self.uncreated != last_open {^if false && last_open.is_none() {^crates/folio-log/src/log/actor/seal.rs^let _sealed = self.uncreated.take();^let _sealed = ();"
    "lac-backwards^crates/folio-client/src/ledger/mod.rs^let forward = lac > *published;^let forward = lac != *published;"
    "monitor-spin^crates/folio-bookie/src/bookie.rs^poison_watched = r.is_ok(),^poison_watched = r.is_ok() || true,"
    # #45: tombstones, incoming copies, the worker's claim, verification and lost clock.
    "tombstone-off^crates/folio-storage/src/storage/mod.rs^            && self.tombstones.lock()^            && false && self.tombstones.lock()"
    "tombstone-replay-off^crates/folio-storage/src/storage/recovery.rs^.is_some_and(|l| self.tombstones.lock()^.is_some_and(|l| false && self.tombstones.lock()"
    "incoming-off^crates/folio-bookie/src/gc.rs^    if age.is_some_and(|a| a < config.incoming_grace) {^    if false {^crates/folio-bookie/src/gc.rs^            Ok(Some(_)) | Err(_) => return Drop::Incoming,^            Ok(Some(_)) | Err(_) => {}"
    "verify-off^crates/folio-repair/src/autorecovery/worker.rs^            self.verify(id, metadata, f, &target).await.map_err(Restore::Failed)?;^^crates/folio-repair/src/autorecovery/worker.rs^        self.verify(id, metadata, f, &target).await.map_err(Restore::Failed)^        Ok(())"
    "claim-answer-lost^crates/folio-repair/src/autorecovery/mod.rs^Some(v) if v.lease == Some(lease) => v.version,^Some(v) if false && v.lease == Some(lease) => v.version,"
    "claim-release-any^crates/folio-repair/src/autorecovery/mod.rs^folio_meta::Expect::Version(version)).await;^folio_meta::Expect::Any).await;"
    "copy-after-lease-lost^crates/folio-repair/src/autorecovery/mod.rs^        claimed.is_none_or(^        true || claimed.is_none_or("
    "absence-in-memory^crates/folio-repair/src/autorecovery/auditor.rs^Some((a, version)) => (*a, Expect::Version(*version)),^Some((_, version)) => (None, Expect::Version(*version)),"
    # #44's fixes in the broker, reverted one at a time (the Kafka scenario).
    "kafka-batch-count^crates/folio-broker/src/domain/batch.rs^if i64::from(info.last_offset_delta) + 1 != i64::from(info.records_count) {^if false {^crates/folio-broker/src/domain/records/mod.rs^    if count > records.len() / 7 + 1 {^    if false {^crates/folio-broker/src/domain/records/mod.rs^    for _ in 0..count {^    for _ in 0..count {\n        if records.is_empty() {\n            break;\n        }^crates/folio-broker/src/domain/records/mod.rs^    if count > plain.len() / 7 + 1 {^    if false {^crates/folio-broker/src/domain/records/mod.rs^    for i in 0..count {^    for i in 0..count {\n        if rest.is_empty() {\n            break;\n        }"
    "kafka-blind-commits^crates/folio-broker/src/domain/group/store.rs^let mut txn = Txn::new().compare(Compare::Version(claim_key.clone(), claim.version));^let mut txn = {\n                let _ = (&claim_key, Compare::Absent(String::new()));\n                Txn::new()\n            };"
    "kafka-no-self-fence^crates/folio-broker/src/domain/cluster/lease.rs^let fence = if self.left().is_zero() {^let fence = if false && self.left().is_zero() {^crates/folio-broker/src/domain/cluster.rs^until.is_some_and(|t| self.clock.now() >= t)^until.is_some_and(|t| false && self.clock.now() >= t)"
    "kafka-blind-registration^crates/folio-broker/src/domain/cluster.rs^let create = Txn::new().compare(folio_meta::Compare::Absent(k.clone())).put_with_lease(^let create = Txn::new().put_with_lease("
    "kafka-producer-state-lost^crates/folio-broker/src/state.rs^    let mut offset = from;\n    while offset < status.end_offset {^    let (mut offset, _) = (status.end_offset, from);\n    producers = Producers::default();\n    while offset < status.end_offset {"
    "kafka-commit-tenure-off^crates/folio-broker/src/domain/group/store.rs^        if self.tenure() == arrived {^        if true || self.tenure() == arrived {"
    "kafka-claim-arrival-off^crates/folio-broker/src/domain/group/claim.rs^        if known.is_some() && current.as_ref().map(|v| v.version) != known {^        if false && known.is_some() && current.as_ref().map(|v| v.version) != known {"
    "kafka-reader-unaware^crates/folio-broker/src/state.rs^if !self.leader_epochs.taken_over(part.log.name(), status.epoch) {^if true || !self.leader_epochs.taken_over(part.log.name(), status.epoch) {"
    "kafka-generation-in-memory^crates/folio-broker/src/domain/group/claim.rs^let last = was.map_or(-1, |r| r.generation).max(known);^let last = was.map_or(-1, |_| -1).max(known);"
    "kafka-commits-unordered^crates/folio-broker/src/api/group_offsets.rs^    if let Ok(Some(arrival)) = super::REQUEST.try_with(|s| s.arrival) {\n        inner.groups.commits_before(group, arrival).await;\n    }\n    let mut attempt = 0;^    let mut attempt = 0;"
    "kafka-lease-checked-late^crates/folio-broker/src/domain/cluster.rs^self.fenced.read().expect(\"fenced lock\").is_some() || self.lease_ran_out()^self.fenced.read().expect(\"fenced lock\").is_some()"
    "kafka-fetch-stop-spin^crates/folio-broker/src/api/fetch.rs^_ = shutdown.wait_for(|s| *s) => stopping = true,^_ = shutdown.wait_for(|s| *s) => stopping = stopping || false,"
    "single-write-no-carry^crates/folio-storage/src/storage/flush.rs^self.cache.finish_flush_carrying(carry);^drop(carry);\n                    self.cache.finish_flush();"
    "single-write-past-the-mark^crates/folio-storage/src/storage/data_files.rs^let taken = self.located.take_before(mark);^let taken = self.located.take_before(None);"
    "kafka-fetch-final-spin^crates/folio-broker/src/api/fetch.rs^    if !status.state.is_final() || offset < readable_end {^    if true || offset < readable_end {"
    "kafka-txn-lso-spin^crates/folio-broker/src/api/fetch.rs^will_not_grow(&status, w.offset, readable)^will_not_grow(&status, w.offset, status.end_offset as i64)"
    "kafka-txn-index-partial^crates/folio-broker/src/state.rs^        if same {\n            break;^        if true || same {\n            break;^crates/folio-broker/src/state.rs^            None => (PartitionTxns::default(), status.start_offset),^            None => (PartitionTxns::default(), from),"
    "kafka-txn-stage-unchecked^crates/folio-broker/src/transactions.rs^Txn::new().compare(record).compare(guard)^{ drop(record); Txn::new() }.compare(guard)"
    "kafka-txn-stale-marker^crates/folio-broker/src/transactions.rs^        if !waits {^        if false && !waits {"
    "kafka-txn-end-before-start^crates/folio-broker/src/domain/txn/mod.rs^                if !tv2 && !r.tv2 && arrived_ms.saturating_add(margin) < r.started_ms =>^                if false && !tv2 && !r.tv2 && arrived_ms.saturating_add(margin) < r.started_ms =>"
)

want=("$@")
rm -rf "$work"
mkdir -p "$work"
summary=()
for m in "${mutants[@]}"; do
    IFS='^' read -r -a parts <<<"$m"
    name=${parts[0]}
    if ((${#want[@]})) && [[ ! " ${want[*]} " == *" $name "* ]]; then
        continue
    fi
    echo "== mutant $name: ${parts[1]}"
    rm -rf "$work" && mkdir -p "$work"
    git -C "$root" archive "$ref" | tar -C "$work" -xf -
    # Every source newer than the last build: cargo's freshness is by mtime, and a file an
    # earlier mutant changed would otherwise come back older than its build and be skipped.
    find "$work/crates" -name '*.rs' -exec touch {} +
    applied=1
    for ((i = 1; i < ${#parts[@]}; i += 3)); do
        python3 - "$work/${parts[i]}" "${parts[i + 1]}" "${parts[i + 2]}" <<'EOF' || applied=0
import sys
path, find, replace = sys.argv[1], sys.argv[2].replace('\\n', '\n'), sys.argv[3].replace('\\n', '\n')
s = open(path).read()
if s.count(find) != 1:
    sys.exit(f"{path}: {find!r} found {s.count(find)} times")
open(path, 'w').write(s.replace(find, replace))
EOF
    done
    if ((!applied)); then
        summary+=("$name: the code to break was not found")
        continue
    fi
    log=$root/target/mutants/$name.log
    if [[ $name == kafka-txn-* ]]; then
        (cd "$work" && CARGO_TARGET_DIR=$root/target/mutants/target FOLIO_SIM_KAFKA_TXN_SEEDS=$txn_seeds \
            FOLIO_SIM_WALL_MAX_S=120 FOLIO_SIM_STALL_S=10 cargo test -q -p folio-sim --test kafka \
            -- kafka_transaction --nocapture --test-threads 1) >"$log" 2>&1
    elif [[ $name == kafka-* ]]; then
        (cd "$work" && CARGO_TARGET_DIR=$root/target/mutants/target FOLIO_SIM_KAFKA_SEEDS=$kafka_seeds \
            FOLIO_SIM_WALL_MAX_S=120 FOLIO_SIM_STALL_S=10 cargo test -q -p folio-sim --test kafka \
            -- kafka_seeds_part kafka_regression_seeds --nocapture --test-threads 1) >"$log" 2>&1
    else
        (cd "$work" && CARGO_TARGET_DIR=$root/target/mutants/target FOLIO_SIM_SEEDS=$seeds \
            FOLIO_SIM_WALL_MAX_S=120 cargo test -q -p folio-sim --test sim seeds_part -- \
            --nocapture --test-threads 1) >"$log" 2>&1
    fi
    # A failing seed, or one the watchdog aborted (its simulated time stood still).
    failed=$(grep -oE '^\.*seed [0-9]+( failed|: )' "$log" | awk '{print $2}' | tr -d ':' | sort -n | tr '\n' ' ')
    kinds=$( (grep -oE '^  - [A-Za-z0-9]+' "$log" | awk '{print $2}'; grep -oE '^\.*seed [0-9]+: simulated time' "$log" | awk '{print "stall"}') | sort | uniq -c | sort -rn | head -4 | awk '{print $2 "×" $1}' | tr '\n' ' ')
    # A run that aborted without naming a seed (an allocation failure, say) failed too.
    if [[ -z $failed ]] && grep -q "SIGABRT" "$log"; then
        failed="? "
        kinds+="abort×1 "
    fi
    n=$(echo "$failed" | wc -w)
    summary+=("$name: $n failing seeds [$failed] ($kinds)")
    echo "   $n seeds failed; log $log"
done
echo "== summary (seeds $seeds; kafka $kafka_seeds; transactions $txn_seeds; $(git -C "$root" rev-parse --short "$ref"))"
printf '%s\n' "${summary[@]}"
