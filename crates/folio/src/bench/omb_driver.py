"""The client side of `folio bench omb` (embedded in the folio binary, run with python3).

    omb_driver.py run <bootstrap> <topic> <seconds> <record_bytes> <partitions>
                      <replication> <records_per_s> <producers> <consumers> <backlog_s>

Shaped like an OpenMessaging Benchmark Kafka workload with OMB's Kafka driver settings
(producer: acks=all, linger.ms=1, batch.size=131072; consumer: auto.offset.reset=earliest,
no auto commit): <producers> producer processes share <records_per_s> on a fixed schedule
(open loop), each sending to every partition in turn; <consumers> consumer processes read
the partitions (consumer i takes partitions i, i + consumers, ...: the split a consumer
group would make, without rebalances in the measurement).

With <backlog_s> > 0 the consumers wait that long before they start reading from offset 0
(OMB's consumerBacklogSizeGB: a backlog builds while they are stopped); the producers go on
at their rate, and `backlog_drain_s` is how long after the start each consumer took to
receive a record less than `CAUGHT_UP_S` old (the slowest consumer's).

Latency without coordinated omission, as `latency_driver.py`: record i carries its intended
send time (CLOCK_MONOTONIC, shared by the processes) in its first 8 bytes; publish latency is
from it to the delivery report, end-to-end to the consumer's receipt (records that waited in
the backlog excluded: they measure the pause, not the system). Every latency is kept, so the
percentiles are exact.

Prints key=value figures on one line.
"""
import multiprocessing
import struct
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
seconds, size = float(sys.argv[4]), int(sys.argv[5])
partitions, replication = int(sys.argv[6]), int(sys.argv[7])
rate, n_producers, n_consumers = float(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
backlog_s = float(sys.argv[11])
MIB = 1024.0 * 1024.0
WARMUP = 0.0
# A consumer receiving records younger than this has caught up with the producers.
CAUGHT_UP_S = 1.0


def figures(prefix, lat_s):
    """OMB's latency figures in ms: avg, p50, p99, p99.9, p99.99, max."""
    lat = sorted(lat_s)
    if not lat:
        return f"{prefix}_count=0"
    at = lambda q: lat[min(len(lat) - 1, int(round((len(lat) - 1) * q)))] * 1000.0
    mean = sum(lat) / len(lat) * 1000.0
    return (f"{prefix}_count={len(lat)} {prefix}_avg_ms={mean:.2f} {prefix}_p50_ms={at(0.5):.2f} "
            f"{prefix}_p99_ms={at(0.99):.2f} {prefix}_p999_ms={at(0.999):.2f} "
            f"{prefix}_p9999_ms={at(0.9999):.2f} {prefix}_max_ms={lat[-1] * 1000.0:.2f}")


def consume(conn, index, start_at):
    """One consumer (own process): its partitions from offset 0, from `start_at` on, until
    told how many records its partitions got and it has them all (or 120 s more passed)."""
    mine = [p for p in range(partitions) if p % n_consumers == index]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-omb-{index}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 100})
    conn.send("ready")
    time.sleep(max(0.0, start_at - time.monotonic()))
    c.assign([TopicPartition(topic, p, 0) for p in mine])
    lat, got, total, deadline, caught_up, got_then = [], 0, None, None, None, 0
    first = time.monotonic()
    while True:
        if total is None and conn.poll():
            total = conn.recv()
            deadline = time.monotonic() + 120
        if total is not None and (got >= total or time.monotonic() > deadline):
            break
        batch = c.consume(num_messages=1000, timeout=0)
        if not batch:
            m = c.poll(0.05)
            batch = [m] if m is not None else []
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                conn.send(f"error {err}")
                return
            now = time.monotonic()
            intended = struct.unpack_from("<d", m.value())[0]
            got += 1
            if intended == WARMUP:
                continue
            age = now - intended
            if caught_up is None and age < CAUGHT_UP_S:
                caught_up, got_then = now - first, got
            if caught_up is not None:
                lat.append(age)
    c.close()
    conn.send((got, lat, caught_up, got_then))


def produce(conn, index, start):
    """One producer (own process): rate / producers records a second from `start` for
    `seconds`, partitions in turn; sends back its latencies and counts."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                  "batch.size": 131072, "compression.codec": "none"})
    lat, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
            return
        intended = struct.unpack_from("<d", msg.value())[0]
        if intended != WARMUP:
            lat.append(time.monotonic() - intended)

    pad = b"\x42" * max(0, size - 8)
    interval = n_producers / rate
    end, sent, per_partition = start + seconds, 0, [0] * partitions
    time.sleep(max(0.0, start - time.monotonic()))
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = start + sent * interval
        while due <= now:
            part = (sent * n_producers + index) % partitions
            try:
                p.produce(topic, struct.pack("<d", due) + pad, partition=part,
                          on_delivery=on_delivery)
            except BufferError:
                p.poll(0.001)
                break
            per_partition[part] += 1
            sent += 1
            due = start + sent * interval
        p.poll(max(0.0, min(due, end) - time.monotonic()))
    left = p.flush(120)
    conn.send((sent, lat, errors[:1] + ([f"{left} undelivered"] if left else []), per_partition))


def run():
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, replication)]).values():
        f.result(30)
    # Warm up: one record per partition, delivered, before the schedule starts.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(partitions):
        p.produce(topic, struct.pack("<d", WARMUP) + b"\x42" * max(0, size - 8), partition=i)
    if p.flush(30):
        print("error=the warm-up records were not delivered", flush=True)
        sys.exit(1)
    fork = multiprocessing.get_context("fork")
    start = time.monotonic() + 2.0  # every process started and connected by then
    consumers, producers = [], []
    for i in range(n_consumers):
        ours, theirs = multiprocessing.Pipe()
        fork.Process(target=consume, args=(theirs, i, start + backlog_s), daemon=True).start()
        consumers.append(ours)
    for i in range(n_producers):
        ours, theirs = multiprocessing.Pipe()
        fork.Process(target=produce, args=(theirs, i, start), daemon=True).start()
        producers.append(ours)
    for c in consumers:
        if not c.poll(30) or c.recv() != "ready":
            print("error=a consumer did not start", flush=True)
            sys.exit(1)
    sent, pub, errors, per_partition = 0, [], [], [1] * partitions  # the warm-up records
    for c in producers:
        if not c.poll(seconds + 180):
            print("error=a producer did not finish", flush=True)
            sys.exit(1)
        s, lat, errs, per = c.recv()
        sent, errors = sent + s, errors + errs
        pub.extend(lat)
        per_partition = [a + b for a, b in zip(per_partition, per)]
    elapsed = time.monotonic() - start
    if errors:
        print(f"error=publish errors={errors}", flush=True)
        sys.exit(1)
    for i, c in enumerate(consumers):
        c.send(sum(n for p, n in enumerate(per_partition) if p % n_consumers == i))
    got, e2e, drain, catch_up_rate = 0, [], 0.0, 0.0
    for c in consumers:
        reply = c.recv() if c.poll(180) else None
        if not isinstance(reply, tuple):
            print(f"error=a consumer answered {reply!r}", flush=True)
            sys.exit(1)
        g, lat, caught_up, got_then = reply
        got += g
        e2e.extend(lat)
        drain = max(drain, caught_up if caught_up is not None else float("inf"))
        catch_up_rate += got_then / caught_up if caught_up else 0.0
    if got != sum(per_partition):
        print(f"error=consumed {got} of {sum(per_partition)} records", flush=True)
        sys.exit(1)
    print(f"target_rate_msg_s={rate:.0f} pub_rate_msg_s={sent / seconds:.0f} "
          f"pub_rate_mb_s={sent * size / seconds / MIB:.1f} "
          f"records={sent} consumed={got} backlog_s={backlog_s:.0f} backlog_drain_s={drain:.2f} "
          f"catch_up_msg_s={catch_up_rate:.0f} elapsed_s={elapsed:.1f} "
          f"{figures('pub_latency', pub)} {figures('e2e_latency', e2e)}", flush=True)


{"run": run}[mode]()
