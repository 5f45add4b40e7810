# Sourced by scripts/test.sh and scripts/soak-tests.sh: installs what the tests need on a
# fresh Debian machine (apt: etcd-server for the etcd backend, etcd-client for etcdctl,
# protobuf-compiler to build etcd-client, curl, kcat; pip: confluent-kafka, kafka-python
# and aiokafka as real Kafka clients, with lz4, python-snappy and zstandard so kafka-python
# reads every codec, and confluent-kafka's schema registry client with its Avro serializer
# (authlib, httpx, fastavro: the `avro,schemaregistry` extras), and Playwright to drive
# Debian's chromium (apt) in the console's browser tests (no browser download); cargo:
# cargo-nextest, the test runner, when the machine lacks it).

install_deps() {
    local need=()
    command -v etcd >/dev/null || need+=(etcd-server)
    command -v etcdctl >/dev/null || need+=(etcd-client) # the secured-etcd test enables auth
    command -v protoc >/dev/null || need+=(protobuf-compiler)
    command -v curl >/dev/null || need+=(curl)
    command -v kcat >/dev/null || need+=(kcat)
    command -v chromium >/dev/null || need+=(chromium) # the console's browser tests
    command -v python3 >/dev/null || need+=(python3)
    python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
    if ((${#need[@]})); then
        echo "== installing ${need[*]}"
        local sudo=""
        [ "$(id -u)" -ne 0 ] && sudo=sudo
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
    fi
    # The real Kafka clients the broker is tested with (crates/folio/tests/kafka_clients.rs).
    local probe='import confluent_kafka, kafka, aiokafka, lz4.frame, snappy, zstandard'
    probe+='; from confluent_kafka.schema_registry.avro import AvroSerializer'
    probe+='; import playwright.sync_api'
    if ! python3 -c "$probe" 2>/dev/null; then
        echo "== installing the Python clients: confluent-kafka (with its schema registry" \
            "client), kafka-python, aiokafka and its codecs, playwright (pip)"
        local pkgs=("confluent-kafka[avro,schemaregistry]" kafka-python aiokafka lz4 python-snappy zstandard
            playwright)
        python3 -m pip install --quiet "${pkgs[@]}" 2>/dev/null ||
            python3 -m pip install --quiet --break-system-packages "${pkgs[@]}"
    fi
    if ! cargo nextest --version >/dev/null 2>&1; then
        echo "== installing cargo-nextest (crates.io)"
        cargo install --locked --quiet cargo-nextest
    fi
}
