#!/usr/bin/env bash
# Flake hunt: runs the whole test suite N times in a row under a CPU hog and prints how often
# each test failed.
#
# The hog is one busy loop per core at normal priority, and the tests run under `nice`, so
# every test gets less CPU than it would alone and in an uneven way: a test that takes an
# earlier event for the one it asserts, or a timing for a synchronisation, fails here.
# Nothing is retried. Reports of each run stay in target/soak/run-<i>.xml.
#
# Usage: scripts/soak-tests.sh N [extra nextest args, e.g. a filter expression]
#   SOAK_HOG=0   no hog (only `nice`)
#   SOAK_NICE=N  the tests' niceness (default 10)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/deps.sh
. scripts/lib/etcd.sh

runs=${1:?usage: scripts/soak-tests.sh N [nextest args]}
shift
install_deps || exit 1
start_etcd
echo "== building the tests once"
cargo nextest run --workspace --all-features --profile ci --no-run || exit 1

hogs=()
stop_all() {
    for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
    stop_etcd
}
trap stop_all EXIT
if [ "${SOAK_HOG:-1}" != 0 ]; then
    for _ in $(seq "$(nproc)"); do
        (while :; do :; done) &
        hogs+=($!)
    done
    echo "== CPU hog: ${#hogs[@]} busy loops"
fi

out=target/soak
rm -rf "$out"
mkdir -p "$out"
reports=()
for i in $(seq "$runs"); do
    start=$(date +%s)
    nice -n "${SOAK_NICE:-10}" cargo nextest run --workspace --all-features --profile ci \
        --no-fail-fast "$@" >"$out/run-$i.log" 2>&1
    rc=$?
    cp target/nextest/ci/junit.xml "$out/run-$i.xml" 2>/dev/null
    reports+=("$out/run-$i.xml")
    echo "run $i/$runs: exit $rc in $(($(date +%s) - start)) s ($(grep -E '^ *Summary' "$out/run-$i.log" | tail -1 | sed 's/^ *//'))"
done
python3 scripts/lib/junit_summary.py soak "${reports[@]}"
