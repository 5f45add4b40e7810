#!/usr/bin/env bash
# Runs every check and test Folio has: formatting, clippy, and the whole test suite,
# including the metadata store's etcd backend against a real etcd and real Kafka clients.
#
# On a fresh machine it installs what the tests need (scripts/lib/deps.sh), starts etcd on
# 127.0.0.1 with a temporary data dir (scripts/lib/etcd.sh) and stops it when done (also on
# failure or Ctrl-C). Tests run under cargo-nextest (.config/nextest.toml, profile `ci`):
# every test in its own process, every test binary run even when one fails, no retries.
# At the end it prints the failures and the ten slowest tests, and exits non-zero if any
# check or test failed.
#
# Longer fault sweeps than CI's are behind environment variables, e.g.
#   FOLIO_CRASH_SEEDS=0..400 FOLIO_FAULT_SEEDS=0..50 scripts/test.sh
#
# Usage: scripts/test.sh [extra nextest args, e.g. a filter]   (needs root or sudo for apt-get)
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/deps.sh
. scripts/lib/etcd.sh

started=$(date +%s)
install_deps || exit 1
echo "== dependencies installed: $(($(date +%s) - started)) s"
start_etcd

failed=()
step() { # step NAME COMMAND...: runs it, remembers a failure, never stops the run
    local name=$1 t0=$SECONDS
    shift
    echo "== $name"
    "$@" || failed+=("$name")
    echo "== $name: $((SECONDS - t0)) s"
}

step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy (all targets, all features, warnings are errors)" \
    cargo clippy --workspace --all-targets --all-features -- -D warnings
# No doc tests: doc comments hold only ```text blocks (tidy's doc_comments_hold_no_doc_tests),
# so rustdoc is not run over every crate for nothing.
report=target/nextest/ci/junit.xml
rm -f "$report"
step "cargo nextest (all features: etcd backend included)" \
    cargo nextest run --workspace --all-features --profile ci --no-fail-fast "$@"

if [ -f "$report" ]; then
    python3 scripts/lib/junit_summary.py run "$report"
else
    echo "== no test report at $report (the build failed?)"
    failed+=("test report")
fi
# The storage engine and the bookie's GC suites once more in the other storage mode (the
# main run uses the default, single-write; tests of one mode's own behaviour set it
# themselves), from the same build.
two_write_report=target/nextest/ci-two-write/junit.xml
rm -f "$two_write_report"
step "storage and GC suites in two-write mode" \
    env FOLIO_STORAGE_MODE=two-write cargo nextest run --workspace --all-features \
    --profile ci-two-write --no-fail-fast -E 'package(folio-storage) | package(folio-bookie)'
[ -f "$two_write_report" ] && python3 scripts/lib/junit_summary.py run "$two_write_report"
echo "== wall time $(($(date +%s) - started)) s"
if ((${#failed[@]})); then
    printf 'FAILED: %s\n' "${failed[@]}"
fi
# The closing line: tests passed and failed (nextest's report), or the failed step.
reports=()
for r in "$report" "$two_write_report"; do [ -f "$r" ] && reports+=("$r"); done
((${#reports[@]})) && python3 scripts/lib/junit_summary.py counts "${reports[@]}"
if ((${#failed[@]})); then
    exit 1
fi
