"""The client side of `folio bench kafka` (embedded in the folio binary, run with python3).

    kafka_driver.py run <bootstrap> <topic> <seconds> <record_bytes> [partitions]
        Produces records of <record_bytes> with librdkafka (confluent-kafka; acks=all,
        batching) for <seconds>, waits for every delivery report, then reads everything
        back from the start.
    kafka_driver.py produce <bootstrap> <topic> <records> <record_bytes>
        Produces <records> records to partition 0 as fast as the client goes.
    kafka_driver.py consume <bootstrap> <topic> <records>
        A fresh consumer reads <records> records of partition 0 from offset 0 (librdkafka's
        default isolation, read_committed, unless FOLIO_BENCH_KAFKA_CONF says otherwise).
    kafka_driver.py txn_produce <bootstrap> <topic> <records> <record_bytes> <commit_every>
        A transactional producer writes <records> records to partition 0, committing a
        transaction every <commit_every> records (0: an idempotent producer, no
        transactions, for the baseline).
    kafka_driver.py first <bootstrap> <topic> <offset>...
        For each offset, the time from assigning partition 0 at it to its first record, with
        librdkafka's default consumer settings.

Prints key=value figures on one line.
"""
import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

MIB = 1024.0 * 1024.0
# Extra client settings (JSON) for both producer and consumer: the security settings of
# `bench kafka --tls`.
EXTRA = json.loads(os.environ.get("FOLIO_BENCH_KAFKA_CONF", "{}"))
mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
latencies = []
errors = []


def on_delivery(err, msg):
    if err is not None:
        errors.append(err)
    else:
        latencies.append(msg.latency())


def producer():
    return Producer(p_conf())


def p_conf():
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "compression.codec": "none",
        # A bounded client queue: latency at saturation is queueing, so keep it near the
        # pipeline's depth rather than librdkafka's default of 100 000 records.
        "queue.buffering.max.messages": 20_000,
        **EXTRA,
    }


def consumer(defaults=False):
    """A consumer tuned for throughput (10 MiB per partition fetch, and librdkafka's queue
    threshold raised so that 100 000 small records in its queue do not postpone the next
    fetch by fetch.queue.backoff.ms); with `defaults`, librdkafka's own settings."""
    config = {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    if not defaults:
        config.update({"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                       "queued.min.messages": 1_000_000})
    return Consumer({**config, **EXTRA})


def pct(q):
    return latencies[min(len(latencies) - 1, int(round((len(latencies) - 1) * q)))] * 1000.0


def produce(p, count, payload, partitions, deadline=None):
    """Produces until `count` records were sent or `deadline` passed; returns how many."""
    sent = 0
    while sent < count and (deadline is None or time.perf_counter() < deadline):
        try:
            for _ in range(min(1000, count - sent)):
                p.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
                sent += 1
        except BufferError:
            p.poll(0.001)
        p.poll(0)
    left = p.flush(120)
    if left or errors:
        print(f"error=produce left={left} errors={len(errors)} first={errors[:1]}", flush=True)
        sys.exit(1)
    latencies.sort()
    return sent


def run():
    seconds, size = float(sys.argv[4]), int(sys.argv[5])
    partitions = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    start = time.perf_counter()
    sent = produce(producer(), 1 << 62, b"\x42" * size, partitions, start + seconds)
    produce_s = time.perf_counter() - start
    c = consumer()
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    while got < sent and time.perf_counter() - t0 < 300:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
            elif m.error().code() != KafkaError._PARTITION_EOF:
                print(f"error=consume {m.error()}", flush=True)
                sys.exit(1)
    consume_s = time.perf_counter() - t0
    c.close()
    print(
        f"records={sent} record_bytes={size} produce_s={produce_s:.2f} "
        f"records_per_s={sent / produce_s:.0f} mb_per_s={sent * size / produce_s / MIB:.1f} "
        f"produce_latency_p50_ms={pct(0.5):.2f} produce_latency_p99_ms={pct(0.99):.2f} "
        f"consumed={got} consume_records_per_s={got / consume_s:.0f} "
        f"consume_mb_per_s={got * size / consume_s / MIB:.1f}",
        flush=True,
    )
    if got != sent:
        sys.exit(1)


def produce_only():
    count, size = int(sys.argv[4]), int(sys.argv[5])
    start = time.perf_counter()
    sent = produce(producer(), count, b"\x42" * size, 1)
    s = time.perf_counter() - start
    print(f"records={sent} record_bytes={size} produce_s={s:.2f} records_per_s={sent / s:.0f} "
          f"mb_per_s={sent * size / s / MIB:.1f} produce_latency_p50_ms={pct(0.5):.2f} "
          f"produce_latency_p99_ms={pct(0.99):.2f}", flush=True)


def txn_produce():
    count, size, every = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    conf = {"enable.idempotence": True}
    if every > 0:
        conf["transactional.id"] = f"bench-{topic}-{every}"
    p = Producer({**p_conf(), **conf})
    if every > 0:
        p.init_transactions(30)
    payload = b"\x42" * size
    start = time.perf_counter()
    sent, txns = 0, 0
    while sent < count:
        n = min(every if every > 0 else 10_000, count - sent)
        if every > 0:
            p.begin_transaction()
        i = 0
        while i < n:
            try:
                p.produce(topic, payload, partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.001)
        sent += n
        if every > 0:
            p.commit_transaction(60)
            txns += 1
        else:
            p.poll(0)
    left = p.flush(120)
    s = time.perf_counter() - start
    if left or errors:
        print(f"error=produce left={left} errors={len(errors)} first={errors[:1]}", flush=True)
        sys.exit(1)
    print(f"records={sent} transactions={txns} produce_s={s:.2f} records_per_s={sent / s:.0f} "
          f"mb_per_s={sent * size / s / MIB:.1f}", flush=True)


def consume_only():
    count = int(sys.argv[4])
    c = consumer()
    c.list_topics(topic, timeout=10)
    t0, cpu0 = time.perf_counter(), time.process_time()
    c.assign([TopicPartition(topic, 0, 0)])
    got, size, first_ms = 0, 0, None
    while got < count and time.perf_counter() - t0 < 600:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                if first_ms is None:
                    first_ms = (time.perf_counter() - t0) * 1000.0
                got += 1
                size += len(m.value())
            elif m.error().code() != KafkaError._PARTITION_EOF:
                print(f"error=consume {m.error()}", flush=True)
                sys.exit(1)
    s, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    c.close()
    # client_cpu_share near 1 (or above: librdkafka's threads) means the client is the
    # bottleneck, not the broker.
    print(f"consumed={got} consume_s={s:.2f} consume_records_per_s={got / s:.0f} "
          f"consume_mb_per_s={size / s / MIB:.1f} first_record_ms={first_ms or -1:.1f} "
          f"client_cpu_share={cpu / s:.2f}", flush=True)
    if got != count:
        sys.exit(1)


def first():
    c = consumer(defaults=True)
    c.list_topics(topic, timeout=10)
    out = []
    for offset in [int(a) for a in sys.argv[4:]]:
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, offset)])
        ms = None
        while ms is None and time.perf_counter() - t0 < 60:
            for m in c.consume(num_messages=1, timeout=1.0):
                if m.error() is None:
                    if m.offset() > offset:
                        print(f"error=first offset {offset} answered {m.offset()}", flush=True)
                        sys.exit(1)
                    ms = (time.perf_counter() - t0) * 1000.0
        c.unassign()
        out.append(f"offset_{offset}_ms={ms or -1:.1f}")
    c.close()
    print(" ".join(out), flush=True)


{"run": run, "produce": produce_only, "consume": consume_only, "first": first,
 "txn_produce": txn_produce}[mode]()
