# Sourced by scripts/test.sh and scripts/soak-tests.sh: starts a private etcd on free
# loopback ports with a temporary data dir, waits until it is healthy, exports
# FOLIO_ETCD_ENDPOINTS, and stops it (and removes its data) on exit.
#
# Usage: . scripts/lib/etcd.sh; start_etcd     (sets ETCD_DIR too; the caller may put files there)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

stop_etcd() {
    if [ -n "${ETCD_PID:-}" ]; then
        kill "$ETCD_PID" 2>/dev/null || true
        wait "$ETCD_PID" 2>/dev/null || true
    fi
    [ -n "${ETCD_DIR:-}" ] && rm -rf "$ETCD_DIR"
}

start_etcd() {
    ETCD_DIR=$(mktemp -d)
    local client_port peer_port
    client_port=$(free_port)
    peer_port=$(free_port)
    echo "== starting etcd on 127.0.0.1:$client_port (data in $ETCD_DIR)"
    etcd --name folio-test --data-dir "$ETCD_DIR/data" \
        --listen-client-urls "http://127.0.0.1:$client_port" --advertise-client-urls "http://127.0.0.1:$client_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "folio-test=http://127.0.0.1:$peer_port" --initial-cluster-state new \
        --logger zap --log-outputs stderr >"$ETCD_DIR/etcd.log" 2>&1 &
    ETCD_PID=$!
    trap stop_etcd EXIT
    for _ in $(seq 1 300); do
        if curl -fsS "http://127.0.0.1:$client_port/health" 2>/dev/null | grep -q '"health":"true"'; then break; fi
        kill -0 "$ETCD_PID" 2>/dev/null || { cat "$ETCD_DIR/etcd.log"; echo "etcd exited"; exit 1; }
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$client_port/health" | grep -q '"health":"true"' || { echo "etcd not healthy"; exit 1; }
    export FOLIO_ETCD_ENDPOINTS="127.0.0.1:$client_port"
}
