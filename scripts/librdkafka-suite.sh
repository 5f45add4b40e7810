#!/usr/bin/env bash
# Runs librdkafka's own integration tests against a fresh `folio standalone`, with the
# classic group protocol, the consumer protocol (KIP-848), or both, and prints one line per
# test and protocol (PASS/FAIL with the runner's last error) and the totals.
#
#   scripts/librdkafka-suite.sh <librdkafka>/tests [--protocol classic|consumer|both] [TEST...]
#
# <librdkafka>/tests must hold a built `test-runner` (./configure && make libs, then make
# -C tests build). TESTS defaults to the groups, offsets and share-consumer tests below.
# FOLIO picks the binary (default: target/release/folio, else target/debug/folio);
# TEST_KAFKA_VERSION the broker version the tests assume (default 4.0.0); TEST_TIMEOUT_S
# one test's limit (default 600; 0113's two dozen rebalances take longer). CI has no copy of
# librdkafka's source: its client tests are in crates/folio/tests/kafka/*.py.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tests_dir="${1:?usage: $0 <librdkafka>/tests [--protocol classic|consumer|both] [TEST...]}"
shift
protocols=(classic consumer)
if [[ "${1:-}" == "--protocol" ]]; then
  case "${2:-}" in
    classic|consumer) protocols=("$2") ;;
    both) ;;
    *) echo "--protocol: classic, consumer or both" >&2; exit 2 ;;
  esac
  shift 2
fi
tests=("$@")
if [[ ${#tests[@]} -eq 0 ]]; then
  tests=(0030 0033 0040 0045 0050 0054 0056 0069 0081 0089 0099 0102 0106 0113 0116 0118 0120
         0122 0129 0130 0132 0140 0153 0170 0171 0172 0173 0175 0176 0178 0179 0180 0181)
fi
runner="$tests_dir/test-runner"
[[ -x "$runner" ]] || { echo "no test-runner in $tests_dir: build it first (make -C tests build)" >&2; exit 2; }
folio="${FOLIO:-}"
if [[ -z "$folio" ]]; then
  for f in "$here/target/release/folio" "$here/target/debug/folio"; do
    [[ -x "$f" ]] && { folio="$f"; break; }
  done
fi
[[ -x "$folio" ]] || { echo "no folio binary: cargo build --release (or set FOLIO)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
"$folio" standalone --data-dir "$work/data" --bookies 1 --listen 127.0.0.1:0 --http 127.0.0.1:0 \
  --kafka-listen "127.0.0.1:$port" --num-partitions 4 \
  --group-consumer-heartbeat-interval-ms 1000 >"$work/folio.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  grep -q "Kafka listener up" "$work/folio.log" && break
  sleep 0.1
done
grep -q "Kafka listener up" "$work/folio.log" || { cat "$work/folio.log" >&2; exit 1; }
printf 'metadata.broker.list=127.0.0.1:%s\n' "$port" >"$work/test.conf"

pass=0; fail=0
for proto in "${protocols[@]}"; do
  for t in "${tests[@]}"; do
    log="$work/$t-$proto.log"
    (cd "$tests_dir" && RDKAFKA_TEST_CONF="$work/test.conf" TESTS="$t" \
      TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-4.0.0}" TEST_CONSUMER_GROUP_PROTOCOL="$proto" \
      timeout "${TEST_TIMEOUT_S:-600}" ./test-runner >"$log" 2>&1)
    if [[ $? -eq 0 ]]; then
      pass=$((pass + 1)); skipped="$(grep -c -i "SKIP" "$log")"; echo "PASS $t $proto$( [[ $skipped -gt 0 ]] && echo " (skips: $(grep -m1 -i skip "$log" | cut -c1-120))")"
    else
      fail=$((fail + 1))
      why="$(grep -m1 -E "FAIL|Test .* failed|TIMEOUT|timed out" "$log" | cut -c1-200)"
      echo "FAIL $t $proto: ${why:-see $log}"
      cp "$log" "/tmp/librdkafka-$t-$proto.log"
      cp "$work/folio.log" "/tmp/librdkafka-$t-$proto.folio.log"
    fi
  done
done
echo "(failed tests' logs: /tmp/librdkafka-TEST-PROTOCOL.log and .folio.log)"
echo "librdkafka_suite passed=$pass failed=$fail protocols=${protocols[*]}"
[[ $fail -eq 0 ]]
