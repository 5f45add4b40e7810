#!/usr/bin/env bash
# Runs every check and test Folio has: formatting, clippy, and the whole test suite.
# Usage: scripts/test.sh            (from the repo root, on a fresh machine)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test"
cargo test --workspace 2>&1 | tee /tmp/folio-test.log
grep -q "test result: ok" /tmp/folio-test.log
