"""The client side of `folio bench latency` (embedded in the folio binary, run with python3).

    latency_driver.py run <bootstrap> <topic> <seconds> <record_bytes> <linger_ms>
                          <partitions> <replication> <records_per_s> [no-consumer]
        Creates <topic>, then a producer (acks=all) sends at <records_per_s> on a fixed
        schedule (open loop), or as fast as librdkafka takes records when it is 0 (the peak),
        while a tailing consumer (a separate process) reads the topic (unless `no-consumer`).
        librdkafka's defaults otherwise (message.timeout.ms 300 000, a client queue of
        100 000 records): a record it cannot deliver in time fails the run.

Latency without coordinated omission: record i has an intended send time, start + i / rate,
written into its first 8 bytes (CLOCK_MONOTONIC, the same clock in both processes). The
produce latency is from that intended time to the delivery report; the end-to-end latency
to the consumer's receipt. A producer that falls behind its schedule (a full client queue,
a slow broker) therefore counts the wait in every late record, as the field's tools do.
Every latency is kept (no histogram buckets): the percentiles are exact.

Prints key=value figures on one line.
"""
import multiprocessing
import struct
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
seconds, size, linger = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
partitions = int(sys.argv[7])
MIB = 1024.0 * 1024.0
# Records produced before the measured run (connections, metadata) carry intended time 0
# and are not measured.
WARMUP = 0.0


def producer():
    return Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": linger,
        "batch.size": 1_000_000,
        "compression.codec": "none",
        "queue.buffering.max.messages": 100_000,
    })


def figures(prefix, lat_s):
    """p50/p99/p99.9/max/mean in ms of a list of latencies in seconds."""
    lat = sorted(lat_s)
    if not lat:
        return f"{prefix}_count=0"
    at = lambda q: lat[min(len(lat) - 1, int(round((len(lat) - 1) * q)))] * 1000.0
    mean = sum(lat) / len(lat) * 1000.0
    return (f"{prefix}_count={len(lat)} {prefix}_p50_ms={at(0.5):.2f} {prefix}_p99_ms={at(0.99):.2f} "
            f"{prefix}_p999_ms={at(0.999):.2f} {prefix}_max_ms={lat[-1] * 1000.0:.2f} "
            f"{prefix}_mean_ms={mean:.3f}")


def tail(conn, expected_topic, n_partitions):
    """The tailing consumer (own process): reads from offset 0 until told how many records
    were produced and it has them all (or 60 s more passed), then sends its latencies."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(expected_topic, i, 0) for i in range(n_partitions)])
    ready, lat, got, total, deadline = set(), [], 0, None, None
    while True:
        if total is None and conn.poll():
            total = conn.recv()
            deadline = time.monotonic() + 60
        if total is not None and (got >= total or time.monotonic() > deadline):
            break
        # Whatever is already here, else wait for the next record: consume() with a
        # timeout would hold the records it has until the timeout or its count is reached.
        batch = c.consume(num_messages=1000, timeout=0)
        if not batch:
            m = c.poll(0.05)
            batch = [m] if m is not None else []
        for m in batch:
            err = m.error()
            if err is None:
                now = time.monotonic()
                intended = struct.unpack_from("<d", m.value())[0]
                got += 1
                if intended != WARMUP:
                    lat.append(now - intended)
            elif err.code() == KafkaError._PARTITION_EOF:
                if len(ready) < n_partitions:
                    ready.add(m.partition())
                    if len(ready) == n_partitions:
                        conn.send("ready")
            else:
                conn.send(f"error {err}")
                return
    c.close()
    conn.send((got, lat))


def run():
    replication, rate = int(sys.argv[8]), float(sys.argv[9])
    tailing = len(sys.argv) <= 10 or sys.argv[10] != "no-consumer"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, replication)]).values():
        f.result(30)
    ours, theirs = multiprocessing.Pipe()
    consumer = multiprocessing.get_context("fork").Process(
        target=tail, args=(theirs, topic, partitions), daemon=True)
    if tailing:
        consumer.start()
        if not ours.poll(60) or ours.recv() != "ready":
            print("error=the tailing consumer did not reach the end of the partitions", flush=True)
            sys.exit(1)
    p, lat, errors = producer(), [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
            return
        intended = struct.unpack_from("<d", msg.value())[0]
        if intended != WARMUP:
            lat.append(time.monotonic() - intended)

    pad = b"\x42" * max(0, size - 8)
    # Warm up: one record per partition, delivered, before the schedule starts.
    for i in range(partitions):
        p.produce(topic, struct.pack("<d", WARMUP) + pad, partition=i, on_delivery=on_delivery)
    p.flush(30)
    interval, start = 1.0 / rate if rate else 0.0, time.monotonic()
    end, sent, behind_max = start + seconds, 0, 0.0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = start + sent * interval if rate else now
        while due <= now:
            try:
                p.produce(topic, struct.pack("<d", due) + pad, partition=sent % partitions,
                          on_delivery=on_delivery)
            except BufferError:
                # The client's queue is full: the record stays due (its wait is counted).
                p.poll(0.001)
                break
            behind_max = max(behind_max, now - due)
            sent += 1
            due = start + sent * interval if rate else now
            if not rate and sent % 1000 == 0:
                break
        p.poll(max(0.0, min(due, end) - time.monotonic()) if rate else 0)
    left = p.flush(120)
    s = time.monotonic() - start
    if left or errors:
        print(f"error=paced left={left} errors={len(errors)} first={errors[:1]}", flush=True)
        sys.exit(1)
    if not tailing:
        print(f"target_records_per_s={rate:.0f} records={sent} records_per_s={sent / s:.0f} "
              f"mb_per_s={sent * size / s / MIB:.1f} schedule_behind_max_ms={behind_max * 1000.0:.1f} "
              f"{figures('produce', lat)}", flush=True)
        return
    ours.send(sent + partitions)
    reply = ours.recv() if ours.poll(120) else None
    consumer.join(10)
    if not isinstance(reply, tuple):
        print(f"error=the tailing consumer answered {reply!r}", flush=True)
        sys.exit(1)
    got, e2e = reply
    print(f"target_records_per_s={rate:.0f} records={sent} records_per_s={sent / s:.0f} "
          f"mb_per_s={sent * size / s / MIB:.1f} schedule_behind_max_ms={behind_max * 1000.0:.1f} "
          f"{figures('produce', lat)} consumed={got} {figures('e2e', e2e)}", flush=True)
    if got != sent + partitions:
        sys.exit(1)


{"run": run}[mode]()
