"""The client side of `folio bench kafka` (embedded in the folio binary, run with python3).

    kafka_driver.py <bootstrap> <topic> <seconds> <record_bytes> [partitions]

Produces records of <record_bytes> with librdkafka (confluent-kafka; acks=all, batching)
for <seconds>, waits for every delivery report, then reads everything back from the
start. Prints key=value figures on one line.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

bootstrap, topic, seconds, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
partitions = int(sys.argv[5]) if len(sys.argv) > 5 else 1
payload = b"\x42" * size
latencies = []
errors = []


def on_delivery(err, msg):
    if err is not None:
        errors.append(err)
    else:
        latencies.append(msg.latency())


p = Producer({
    "bootstrap.servers": bootstrap,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.codec": "none",
    # A bounded client queue: latency at saturation is queueing, so keep it near the
    # pipeline's depth rather than librdkafka's default of 100 000 records.
    "queue.buffering.max.messages": 20_000,
})
start = time.perf_counter()
deadline = start + seconds
sent = 0
while time.perf_counter() < deadline:
    try:
        for _ in range(1000):
            p.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
            sent += 1
    except BufferError:
        p.poll(0.001)
    p.poll(0)
left = p.flush(120)
produce_s = time.perf_counter() - start
if left or errors:
    print(f"error=produce left={left} errors={len(errors)} first={errors[:1]}", flush=True)
    sys.exit(1)
latencies.sort()


def pct(q):
    return latencies[min(len(latencies) - 1, int(round((len(latencies) - 1) * q)))] * 1000.0


c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
              "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
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
mib = 1024.0 * 1024.0
print(
    f"records={sent} record_bytes={size} produce_s={produce_s:.2f} "
    f"records_per_s={sent / produce_s:.0f} mb_per_s={sent * size / produce_s / mib:.1f} "
    f"produce_latency_p50_ms={pct(0.5):.2f} produce_latency_p99_ms={pct(0.99):.2f} "
    f"consumed={got} consume_records_per_s={got / consume_s:.0f} consume_mb_per_s={got * size / consume_s / mib:.1f}",
    flush=True,
)
if got != sent:
    sys.exit(1)
