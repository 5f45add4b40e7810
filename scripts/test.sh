#!/usr/bin/env bash
# Runs every check and test Folio has: formatting, clippy, and the whole test suite,
# including the metadata store's etcd backend against a real etcd.
#
# On a fresh machine it installs what the tests need (Debian: etcd-server for the etcd
# backend, protobuf-compiler to build etcd-client, kcat; pip: confluent-kafka,
# kafka-python and aiokafka as real Kafka clients), starts etcd on 127.0.0.1 with a
# temporary data dir, waits until it is healthy, runs everything with the `etcd` feature,
# and stops etcd when done (also on failure or Ctrl-C).
#
# Usage: scripts/test.sh            (from anywhere; needs root or sudo for apt-get)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v curl >/dev/null || need+=(curl)
command -v kcat >/dev/null || need+=(kcat)
command -v python3 >/dev/null || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if ((${#need[@]})); then
    echo "== installing ${need[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The real Kafka clients the broker is tested with (crates/folio/tests/kafka_clients.rs).
if ! python3 -c 'import confluent_kafka, kafka, aiokafka' 2>/dev/null; then
    echo "== installing confluent-kafka, kafka-python, aiokafka (pip)"
    pkgs=(confluent-kafka kafka-python aiokafka)
    python3 -m pip install --quiet "${pkgs[@]}" 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages "${pkgs[@]}"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_DIR=$(mktemp -d)
CLIENT_PORT=$(free_port)
PEER_PORT=$(free_port)
echo "== starting etcd on 127.0.0.1:$CLIENT_PORT (data in $ETCD_DIR)"
etcd --name folio-test --data-dir "$ETCD_DIR/data" \
    --listen-client-urls "http://127.0.0.1:$CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "folio-test=http://127.0.0.1:$PEER_PORT" --initial-cluster-state new \
    --logger zap --log-outputs stderr >"$ETCD_DIR/etcd.log" 2>&1 &
ETCD_PID=$!
stop_etcd() {
    kill "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
    rm -rf "$ETCD_DIR"
}
trap stop_etcd EXIT
for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then break; fi
    kill -0 "$ETCD_PID" 2>/dev/null || { cat "$ETCD_DIR/etcd.log"; echo "etcd exited"; exit 1; }
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$CLIENT_PORT/health" | grep -q '"health":"true"' || { echo "etcd not healthy"; exit 1; }
export FOLIO_ETCD_ENDPOINTS="127.0.0.1:$CLIENT_PORT"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (all targets, all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

echo "== cargo test (all features: etcd backend included)"
cargo test --workspace --all-features 2>&1 | tee "$ETCD_DIR/test.log"
grep -q "test result: ok" "$ETCD_DIR/test.log"
