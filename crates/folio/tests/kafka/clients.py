#!/usr/bin/env python3
"""Real Kafka clients against a Folio broker: one scenario per invocation.

    clients.py <scenario> <bootstrap> [args...]

Every scenario asserts what it sees and exits non-zero (with the reason) on a mismatch.
Run by crates/folio/tests/kafka_clients.rs against `folio standalone`; the clients come
from pip (confluent-kafka, kafka-python, aiokafka), installed by scripts/test.sh.
"""

import asyncio
import sys
import time
import uuid


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def topic_name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- confluent-kafka (librdkafka)

def ck():
    import confluent_kafka
    return confluent_kafka


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap, name, partitions=1, config=None):
    from confluent_kafka.admin import NewTopic
    a = admin(bootstrap)  # kept alive until the future resolves
    futures = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config or {})],
        operation_timeout=10)
    futures[name].result(timeout=20)


def consume_all(bootstrap, topic, partition, start, count, timeout=30.0):
    """Reads `count` records of one partition from offset `start` (assign, no group)."""
    c = ck().Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "unused",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    })
    c.assign([ck().TopicPartition(topic, partition, start)])
    out = []
    deadline = time.time() + timeout
    while len(out) < count and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == ck().KafkaError._PARTITION_EOF:
                continue
            fail(f"consume error: {m.error()}")
        out.append(m)
    c.close()
    check(len(out) == count, f"{topic}[{partition}]: read {len(out)} of {count} records from {start}")
    return out


def produce(bootstrap, topic, records, **conf):
    """Produces (key, value, headers, partition, timestamp) tuples; returns delivery reports."""
    p = ck().Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports = []

    def on_delivery(err, msg):
        reports.append((err, msg.offset() if err is None else None))

    for key, value, headers, partition, ts in records:
        kw = {"partition": partition} if partition is not None else {}
        if ts is not None:
            kw["timestamp"] = ts
        p.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery, **kw)
        p.poll(0)
    left = p.flush(30)
    check(left == 0, f"{left} records still queued after flush")
    return reports


def scenario_confluent_codecs(bootstrap):
    """acks 0/1/all x every codec: values, keys, duplicate header keys and order survive."""
    for acks in ["0", "1", "all"]:
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
            topic = topic_name(f"codec-{codec}-acks{acks}")
            create_topic(bootstrap, topic)
            n = 300
            records = [
                (f"k{i}".encode(), f"value-{i}-".encode() * (1 + i % 7),
                 [("h", b"first"), ("h", f"second-{i}".encode()), ("other", None)], 0, None)
                for i in range(n)
            ]
            reports = produce(bootstrap, topic, records, acks=acks, **{"compression.codec": codec})
            errors = [e for e, _ in reports if e is not None]
            check(not errors, f"acks={acks} codec={codec}: delivery errors {errors[:3]}")
            if acks != "0":
                offsets = [o for _, o in reports]
                check(sorted(offsets) == list(range(n)), f"acks={acks} codec={codec}: offsets {offsets[:10]}...")
            got = consume_all(bootstrap, topic, 0, 0, n)
            for i, m in enumerate(got):
                check(m.offset() == i, f"{topic}: offset {m.offset()} at position {i}")
                check(m.key() == f"k{i}".encode(), f"{topic}: key {m.key()} at {i}")
                check(m.value() == records[i][1], f"{topic}: value mismatch at {i}")
                check(m.headers() == records[i][2], f"{topic}: headers {m.headers()} at {i}")
            print(f"ok acks={acks} codec={codec} records={n}")


def scenario_large_batches(bootstrap):
    """A batch near max.message.bytes is stored; one above it gets MESSAGE_TOO_LARGE."""
    topic = topic_name("large")
    create_topic(bootstrap, topic)
    limit = 1_048_588
    conf = {"message.max.bytes": 10_000_000, "compression.codec": "none", "linger.ms": 0,
            "batch.num.messages": 1}
    near = b"x" * (limit - 200)
    reports = produce(bootstrap, topic, [(None, near, None, 0, None)], **conf)
    check(reports[0][0] is None, f"a batch just under the limit failed: {reports[0][0]}")
    above = b"y" * (limit + 1000)
    reports = produce(bootstrap, topic, [(None, above, None, 0, None)], **conf)
    err = reports[0][0]
    check(err is not None and err.code() == ck().KafkaError.MSG_SIZE_TOO_LARGE,
          f"a batch above max.message.bytes: expected MSG_SIZE_TOO_LARGE, got {err}")
    got = consume_all(bootstrap, topic, 0, 0, 1)
    check(got[0].value() == near, "the large record came back different")
    # Raising the topic's max.message.bytes lets the big batch in.
    from confluent_kafka.admin import ConfigResource, ConfigEntry, AlterConfigOpType
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(2 * limit), incremental_operation=AlterConfigOpType.SET)])
    a = admin(bootstrap)
    a.incremental_alter_configs([res])[res].result(timeout=20)
    reports = produce(bootstrap, topic, [(None, above, None, 0, None)], **conf)
    check(reports[0][0] is None, f"after raising max.message.bytes: {reports[0][0]}")
    print("ok large batches")


def scenario_offsets_by_time(bootstrap):
    """ListOffsets: earliest, latest, and by timestamp, resolved to the record: once with one
    batch per record, then with all ten records in one batch in every codec (#25 item 2)."""
    t0 = int(time.time() * 1000) - 100_000
    setups = [("one-per-batch", {"linger.ms": 0}, True)] + [
        (codec, {"linger.ms": 200, "compression.codec": codec}, False)
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"]]
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    for name, conf, one_by_one in setups:
        topic = topic_name(f"bytime-{name}")
        create_topic(bootstrap, topic)
        records = [(None, f"v{i}".encode(), None, 0, t0 + i * 1000) for i in range(10)]
        reports = []
        for chunk in ([[r] for r in records] if one_by_one else [records]):
            reports += produce(bootstrap, topic, chunk, **conf)
        check(all(err is None for err, _ in reports), f"{name}: produce {reports}")
        lo, hi = c.get_watermark_offsets(ck().TopicPartition(topic, 0), timeout=10)
        check((lo, hi) == (0, 10), f"{name}: watermarks {(lo, hi)}")
        for ts, want in [(t0 + 2500, 3), (t0, 0), (t0 - 5, 0), (t0 + 9000, 9), (t0 + 9001, -1),
                         (t0 + 6999, 7)]:
            r = c.offsets_for_times([ck().TopicPartition(topic, 0, ts)], timeout=10)
            check(r[0].offset == want, f"{name}: offset for time {ts - t0}: {r[0].offset}, expected {want}")
        got = consume_all(bootstrap, topic, 0, 0, 10)
        check([m.timestamp()[1] for m in got] == [t0 + i * 1000 for i in range(10)],
              f"{name}: timestamps came back different")
    c.close()
    print("ok offsets by time, to the record, in every codec")


def scenario_delete_records(bootstrap):
    """DeleteRecords moves the log start offset; reads start there."""
    topic = topic_name("delrec")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, [(None, f"v{i}".encode(), None, 0, None) for i in range(20)])
    a = admin(bootstrap)
    tp = ck().TopicPartition(topic, 0, 7)
    result = a.delete_records([tp])[tp].result(timeout=20)
    check(result.low_watermark == 7, f"low watermark after delete_records: {result.low_watermark}")
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    lo, hi = c.get_watermark_offsets(ck().TopicPartition(topic, 0), timeout=10)
    check((lo, hi) == (7, 20), f"watermarks after delete_records {(lo, hi)}")
    c.close()
    got = consume_all(bootstrap, topic, 0, ck().OFFSET_BEGINNING, 13)
    check(got[0].offset() == 7 and got[0].value() == b"v7", f"first record after delete: {got[0].offset()}")
    # Beyond the high watermark: OFFSET_OUT_OF_RANGE.
    bad = ck().TopicPartition(topic, 0, 100)
    try:
        a.delete_records([bad])[bad].result(timeout=20)
        fail("delete_records beyond the high watermark succeeded")
    except ck().KafkaException as e:
        check(e.args[0].code() == ck().KafkaError.OFFSET_OUT_OF_RANGE, f"wrong error: {e}")
    print("ok delete records")


def read_positions(bootstrap, topic, phase):
    """#22: reads from every position. `produce`: 40 batches of exactly 10 records (values
    `v-<offset>` padded to 200 bytes) to partition 0 of a new topic; run the broker with small
    ledgers so that they span many. `check`: a consumer assigned at each offset from the log
    start to the end gets that record first (the start, inside a batch, each ledger
    boundary, the open ledger), and a read from the start gets every record in order.
    `trim`: DeleteRecords to offset 137 (inside a batch), then `check` again."""
    value = lambda o: f"v-{o}".encode().ljust(200, b".")
    if phase == "produce":
        create_topic(bootstrap, topic)
        # A long linger and a flush per 10 records: each batch holds exactly those 10.
        p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10_000})
        for b in range(40):
            reports = []
            for i in range(10):
                p.produce(topic, value=value(b * 10 + i), partition=0,
                          on_delivery=lambda err, m: reports.append((err, m.offset())))
            check(p.flush(30) == 0, "records still queued after flush")
            offsets = sorted(o for e, o in reports if e is None)
            check(offsets == list(range(b * 10, b * 10 + 10)), f"batch {b} offsets {offsets}")
        print("ok produced")
        return
    if phase == "trim":
        a = admin(bootstrap)
        tp = ck().TopicPartition(topic, 0, 137)
        result = a.delete_records([tp])[tp].result(timeout=20)
        check(result.low_watermark == 137, f"low watermark {result.low_watermark}")
    # A short long-poll: after each record the client fetches on to the end of the log and
    # waits there, and the next assignment's fetch queues behind that wait.
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                       "auto.offset.reset": "error"})
    lo, hi = c.get_watermark_offsets(ck().TopicPartition(topic, 0), timeout=30)
    check((lo, hi) == ((137 if phase == "trim" else 0), 400), f"watermarks {(lo, hi)}")
    for o in range(lo, hi):
        c.assign([ck().TopicPartition(topic, 0, o)])
        deadline = time.time() + 20
        m = None
        while m is None and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error():
                fail(f"reading from {o}: {m.error()}")
        check(m is not None, f"nothing read from offset {o} within 20 s")
        check(m.offset() == o and m.value() == value(o),
              f"from offset {o}: got offset {m.offset()} value {m.value()[:12]}")
        c.unassign()
    if phase == "trim":
        # Below the log start: the client is told the offset is out of range.
        c.assign([ck().TopicPartition(topic, 0, 136)])
        deadline, err = time.time() + 20, None
        while err is None and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None:
                check(m.error() is not None, f"read {m.offset()} below the log start")
                err = m.error()
        check(err is not None and err.code() == ck().KafkaError._AUTO_OFFSET_RESET,
              f"below the log start: {err}")
    c.close()
    got = consume_all(bootstrap, topic, 0, lo, hi - lo)
    check([m.offset() for m in got] == list(range(lo, hi)), "offsets in order")
    check(all(m.value() == value(m.offset()) for m in got), "values")
    print(f"ok read positions {lo}..{hi}")


def scenario_create_partitions(bootstrap):
    from confluent_kafka.admin import NewPartitions
    topic = topic_name("parts")
    create_topic(bootstrap, topic, partitions=1)
    a = admin(bootstrap)
    a.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=20)
    md = a.list_topics(topic, timeout=10)
    check(len(md.topics[topic].partitions) == 3, f"partitions after create_partitions: {md.topics[topic].partitions}")
    try:
        a.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=20)
        fail("shrinking partitions succeeded")
    except ck().KafkaException as e:
        check(e.args[0].code() == ck().KafkaError.INVALID_PARTITIONS, f"wrong error: {e}")
    reports = produce(bootstrap, topic, [(None, b"p2", None, 2, None)])
    check(reports[0] == (None, 0), f"produce to the new partition: {reports}")
    check(consume_all(bootstrap, topic, 2, 0, 1)[0].value() == b"p2", "new partition read back wrong")
    # An existing topic cannot be created again; a bad name is refused.
    from confluent_kafka.admin import NewTopic
    for name, code in [(topic, ck().KafkaError.TOPIC_ALREADY_EXISTS), ("bad/name", ck().KafkaError.TOPIC_EXCEPTION)]:
        try:
            a.create_topics([NewTopic(name, 1, -1)])[name].result(timeout=20)
            fail(f"create_topics {name} succeeded")
        except ck().KafkaException as e:
            check(e.args[0].code() == code, f"create {name}: wrong error {e}")
    print("ok create partitions")


def scenario_configs(bootstrap):
    """DescribeConfigs, IncrementalAlterConfigs and AlterConfigs round trip, with validation."""
    from confluent_kafka.admin import ConfigResource, ConfigEntry, AlterConfigOpType, ConfigSource
    topic = topic_name("configs")
    create_topic(bootstrap, topic, config={"retention.ms": "3600000"})
    a = admin(bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def describe():
        return a.describe_configs([res])[res].result(timeout=20)

    d = describe()
    check(d["retention.ms"].value == "3600000", f"retention.ms {d['retention.ms'].value}")
    check(d["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, f"source {d['retention.ms'].source}")
    check(d["retention.bytes"].value == "-1" and d["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value,
          f"retention.bytes {d['retention.bytes']}")
    check(d["cleanup.policy"].value == "delete", "cleanup.policy")
    inc = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([inc])[inc].result(timeout=20)
    d = describe()
    check(d["retention.bytes"].value == "1048576", f"retention.bytes after SET: {d['retention.bytes'].value}")
    check(d["retention.ms"].value == "604800000", f"retention.ms after DELETE: {d['retention.ms'].value}")
    for key, value in [("cleanup.policy", "shred"), ("retention.ms", "-5"), ("segment.bytes", "100"),
                       ("max.message.bytes", "nope")]:
        bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        try:
            a.incremental_alter_configs([bad])[bad].result(timeout=20)
            fail(f"{key}={value} was accepted")
        except ck().KafkaException as e:
            check(e.args[0].code() == ck().KafkaError.INVALID_CONFIG, f"{key}={value}: wrong error {e}")
    check(describe()["retention.bytes"].value == "1048576", "a refused change altered the topic")
    # AlterConfigs (not incremental) replaces every override.
    full = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"message.timestamp.type": "LogAppendTime"})
    a.alter_configs([full])[full].result(timeout=20)
    d = describe()
    check(d["message.timestamp.type"].value == "LogAppendTime", "message.timestamp.type")
    check(d["retention.bytes"].value == "-1", f"AlterConfigs kept retention.bytes={d['retention.bytes'].value}")
    before = int(time.time() * 1000)
    produce(bootstrap, topic, [(None, b"stamped", None, 0, 1000)])
    m = consume_all(bootstrap, topic, 0, 0, 1)[0]
    kind, ts = m.timestamp()
    check(kind == ck().TIMESTAMP_LOG_APPEND_TIME and ts >= before, f"LogAppendTime not applied: {m.timestamp()}")
    # The broker's own configs are described, read-only.
    b = ConfigResource(ConfigResource.Type.BROKER, "1")
    bc = a.describe_configs([b])[b].result(timeout=20)
    check("num.partitions" in bc and bc["num.partitions"].is_read_only, f"broker configs {list(bc)}")
    print("ok configs")


def produce_stream(bootstrap, topic):
    """Produces numbered records (acks=all) until killed; prints `acked <n>` per acknowledgement."""
    p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                       "message.timeout.ms": 5000})

    def on_delivery(err, msg):
        if err is None:
            print(f"acked {int(msg.value())}", flush=True)

    i = 0
    while True:
        try:
            p.produce(topic, value=str(i).encode(), partition=0, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        p.poll(0.001)


def produce_spread(bootstrap, topic, partitions):
    """Idempotent acks=all producer of numbered records over `partitions` partitions (value
    i to partition i % partitions) until killed; prints `acked <partition> <value>`."""
    partitions = int(partitions)
    p = ck().Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                       "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 500})

    def on_delivery(err, msg):
        if err is None:
            print(f"acked {msg.partition()} {int(msg.value())}", flush=True)
        else:
            print(f"failed {msg.partition()} {int(msg.value())} {err}", flush=True)

    i = 0
    while True:
        try:
            p.produce(topic, value=str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        p.poll(0.002)


def tail_spread(bootstrap, topic, partitions, timeout="180"):
    """Reads every partition from offset 0 while the test moves them between brokers, with
    auto.offset.reset=error: a reset or a detected log truncation (KIP-320, after a leader
    epoch change) is fatal. Prints `got <partition> <offset> <value> <leader epoch>` for each
    record and exits once every partition has delivered the record `end`."""
    partitions = int(partitions)
    kafka = ck()
    c = kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "tail-spread",
                        "enable.auto.commit": False, "auto.offset.reset": "error",
                        "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 1000})
    c.assign([kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    fatal = {kafka.KafkaError._AUTO_OFFSET_RESET, kafka.KafkaError.OFFSET_OUT_OF_RANGE}
    if hasattr(kafka.KafkaError, "_LOG_TRUNCATION"):
        fatal.add(kafka.KafkaError._LOG_TRUNCATION)
    ended = set()
    deadline = time.time() + float(timeout)
    while len(ended) < partitions:
        check(time.time() < deadline, f"tail_spread: only {sorted(ended)} ended in {timeout} s")
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            check(m.error().code() not in fatal, f"tail_spread: {m.error()}")
            print(f"warn {m.error()}", flush=True)
            continue
        if m.value() == b"end":
            ended.add(m.partition())
            continue
        print(f"got {m.partition()} {m.offset()} {int(m.value())} {m.leader_epoch()}", flush=True)
    c.close()


def group_commit(bootstrap, topic, group, members="2", protocols="classic"):
    """`members` consumers of `group` on `topic`, each committing synchronously after every
    50 records, until killed. Prints `consumed <n>` every 500 records and `commit-failed
    <error>` for each commit refused (the test reads the committed offsets themselves).
    `protocols`: the members' `group.protocol`s in turn (`classic,consumer`: a group with
    members of both, Kafka's online upgrade)."""
    import threading
    kafka = ck()
    kinds = protocols.split(",")

    def member(i):
        conf = {"bootstrap.servers": bootstrap, "group.id": group,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "reconnect.backoff.max.ms": 500, "client.id": f"member-{i}",
                "group.protocol": kinds[i % len(kinds)]}
        if conf["group.protocol"] == "classic":
            conf["session.timeout.ms"] = 10000
        c = kafka.Consumer(conf)
        c.subscribe([topic])
        n = 0
        while True:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            n += 1
            if n % 50 == 0:
                try:
                    c.commit(asynchronous=False)
                except kafka.KafkaException as e:
                    print(f"commit-failed {e}", flush=True)
            if n % 500 == 0:
                print(f"consumed {i} {n}", flush=True)

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(int(members))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def dump_all(bootstrap, topic, partitions):
    """Prints `<partition> <value>` for every record of every partition, in offset order."""
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    ends = {}
    for p in range(int(partitions)):
        ends[p] = c.get_watermark_offsets(ck().TopicPartition(topic, p), timeout=30)
    c.close()
    for p, (lo, hi) in ends.items():
        for m in consume_all(bootstrap, topic, p, lo, hi - lo, timeout=60):
            print(f"{p} {m.value().decode()}")


def dump(bootstrap, topic):
    """Prints every value of partition 0, one per line, from the start to the high watermark."""
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    lo, hi = c.get_watermark_offsets(ck().TopicPartition(topic, 0), timeout=30)
    c.close()
    for m in consume_all(bootstrap, topic, 0, lo, hi - lo, timeout=60):
        print(m.value().decode())


def scenario_delete_under_load(bootstrap):
    """A topic is deleted while producers and consumers use it (L3): confluent-kafka and
    kcat (librdkafka 2.0.2) each produce and consume; all see errors and none hangs or
    crashes; once recreated, the topic is empty (nothing of the old one, nothing produced
    after the delete, is readable)."""
    import subprocess
    import threading
    topic = topic_name("busy")
    create_topic(bootstrap, topic, partitions=2)
    # (Without allow.auto.create.topics=false, librdkafka's producer would recreate the
    # topic through auto-creation right after the delete, as with Kafka.)
    kcat_common = ["-b", bootstrap, "-t", topic, "-X", "topic.metadata.refresh.interval.ms=500",
                   "-X", "allow.auto.create.topics=false"]
    import tempfile
    kcat_p_err = tempfile.TemporaryFile()
    kcat_p = subprocess.Popen(["kcat", "-P", "-X", "message.timeout.ms=3000", *kcat_common],
                              stdin=subprocess.PIPE, stderr=kcat_p_err)
    kcat_c = subprocess.Popen(["kcat", "-C", "-o", "beginning", *kcat_common],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def kcat_feeding():
        i = 0
        try:
            while not stop.is_set():
                kcat_p.stdin.write(f"kcat-{i}\n".encode())
                kcat_p.stdin.flush()
                i += 1
                time.sleep(0.001)
        except BrokenPipeError:
            pass
        try:
            kcat_p.stdin.close()
        except BrokenPipeError:
            pass
    stop = threading.Event()
    state = {"acked": 0, "produce_errors": set(), "consumed": 0, "consume_errors": set()}

    def producing():
        p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                           "allow.auto.create.topics": False, "message.timeout.ms": 3000,
                           "topic.metadata.refresh.interval.ms": 500})

        def on_delivery(err, msg):
            if err is None:
                state["acked"] += 1
            else:
                state["produce_errors"].add(err.name())

        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, value=str(i).encode(), partition=i % 2, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            except ck().KafkaException as e:
                state["produce_errors"].add(e.args[0].name())
            p.poll(0.002)
        p.flush(10)

    def consuming():
        c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 500})
        c.assign([ck().TopicPartition(topic, p, 0) for p in range(2)])
        while not stop.is_set():
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error():
                state["consume_errors"].add(m.error().name())
            else:
                state["consumed"] += 1
        c.close()

    threads = [threading.Thread(target=producing), threading.Thread(target=consuming),
               threading.Thread(target=kcat_feeding)]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while (state["acked"] < 2000 or state["consumed"] < 500) and time.time() < deadline:
        time.sleep(0.05)
    check(state["acked"] >= 2000 and state["consumed"] >= 500, f"no traffic before the delete: {state}")
    a = admin(bootstrap)
    a.delete_topics([topic], operation_timeout=10)[topic].result(timeout=20)
    acked_at_delete = state["acked"]
    time.sleep(3)  # the clients keep trying against the deleted topic
    stop.set()
    for t in threads:
        t.join(timeout=30)
        check(not t.is_alive(), "a client hung after the topic was deleted")
    check(state["produce_errors"], f"the producer saw no error after the delete: {state}")
    # kcat: the producer exits once its input ends (its undeliverable records time out);
    # the consumer, which read records before the delete, stops at SIGINT, not hanging.
    try:
        kcat_p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kcat_p.kill()
        check(False, "kcat -P hung after the topic was deleted")
    kcat_p_err.seek(0)
    p_err = kcat_p_err.read()
    kcat_c.send_signal(2)
    try:
        c_out, c_err = kcat_c.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        kcat_c.kill()
        check(False, "kcat -C hung after the topic was deleted")
    kcat_read = c_out.count(b"\n")
    check(kcat_read > 0, f"kcat -C read nothing before the delete: {c_err[-500:]!r}")
    p_err = p_err.decode(errors="replace")
    check("nknown topic" in p_err or "Unknown" in p_err or "timed out" in p_err,
          f"kcat -P reported no error after the delete: {p_err[-500:]!r}")
    # Recreated: a new, empty topic.
    create_topic(bootstrap, topic, partitions=2)
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    for p in range(2):
        wm = c.get_watermark_offsets(ck().TopicPartition(topic, p), timeout=10)
        check(wm == (0, 0), f"recreated topic partition {p} is not empty: {wm}")
    c.close()
    print(f"ok delete under load: {acked_at_delete} acked before the delete, producer errors {sorted(state['produce_errors'])}, consumer errors {sorted(state['consume_errors'])}, kcat read {kcat_read} records")


def produce_count(bootstrap, topic, n):
    """Produces n numbered records with acks=all; prints how many were acknowledged."""
    p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    acked = []

    def on_delivery(err, msg):
        if err is None:
            acked.append(int(msg.value()))

    for i in range(int(n)):
        p.produce(topic, value=str(i).encode(), partition=0, on_delivery=on_delivery)
        p.poll(0)
    p.flush(60)
    print(f"acked={len(acked)}")
    check(sorted(acked) == list(range(int(n))), f"acked {len(acked)} of {n}")


def consume_count(bootstrap, topic, n):
    got = consume_all(bootstrap, topic, 0, 0, int(n), timeout=60)
    values = [int(m.value()) for m in got]
    check(values == list(range(int(n))), f"values read back out of order or missing: {values[:20]}")
    print(f"ok consumed={len(values)}")


def scenario_group_rebalance(bootstrap):
    """Two consumers in a group: one joins, one leaves; with a synchronous commit after every
    record, every record is read, and no record whose commit succeeded is read again (a
    commit refused during a rebalance leaves its record to be read again, as in Kafka)."""
    topic = topic_name("group")
    create_topic(bootstrap, topic, partitions=4)
    n = 2000
    produce(bootstrap, topic, [(f"k{i}".encode(), str(i).encode(), None, i % 4, None) for i in range(n)])
    group = topic_name("g")

    def consumer(name):
        c = ck().Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100,
        })
        c.subscribe([topic])
        return c

    seen = {}
    committed_ok = set()
    dups = []
    refused = []

    def poll(c, name):
        m = c.poll(0.1)
        if m is None or m.error():
            return False
        key = (m.partition(), m.offset())
        if key in committed_ok:
            dups.append((key, seen[key], name))
        seen[key] = name
        try:
            c.commit(message=m, asynchronous=False)
            committed_ok.add(key)
        except ck().KafkaException as e:
            code = e.args[0].code()
            check(code in (ck().KafkaError.REBALANCE_IN_PROGRESS, ck().KafkaError.ILLEGAL_GENERATION,
                           ck().KafkaError.UNKNOWN_MEMBER_ID), f"commit failed: {e}")
            refused.append(key)
        return True

    a = consumer("a")
    deadline = time.time() + 60
    while len(seen) < 500 and time.time() < deadline:
        poll(a, "a")
    check(len(seen) >= 500, f"a alone read {len(seen)}")
    b = consumer("b")
    got_b = 0
    while (got_b < 300 or len(seen) < 1500) and time.time() < deadline + 60:
        poll(a, "a")
        if poll(b, "b"):
            got_b += 1
    check(got_b >= 300, f"b joined but read {got_b}")
    b.close()  # LeaveGroup: a takes every partition again
    while len(seen) < n and time.time() < deadline + 120:
        poll(a, "a")
    # Nothing more arrives.
    for _ in range(20):
        poll(a, "a")
    a.close()
    check(not dups, f"{len(dups)} committed records read again, e.g. {dups[:5]}")
    check(len(seen) == n, f"read {len(seen)} of {n} records")
    values = set()
    per_part = {}
    for (p, o) in seen:
        per_part.setdefault(p, []).append(o)
    for p, offs in per_part.items():
        check(sorted(offs) == list(range(len(offs))), f"partition {p}: offsets not contiguous")
    # Committed offsets are the ends; the group is empty and can be described and deleted.
    from confluent_kafka import ConsumerGroupTopicPartitions
    adm = admin(bootstrap)
    res = adm.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=20)
    committed = {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic}
    check(committed == {p: len(per_part[p]) for p in per_part}, f"committed offsets {committed}")
    desc = adm.describe_consumer_groups([group])[group].result(timeout=20)
    check(str(desc.state).endswith("EMPTY"), f"group state {desc.state}")
    adm.delete_consumer_groups([group])[group].result(timeout=20)
    print(f"ok group: {n} records, b read {got_b}, commits refused in rebalances {len(refused)}, no committed record read again")


# ---------------------------------------------------------------- kafka-python

def scenario_kafka_python(bootstrap):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic, ConfigResource, ConfigResourceType
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    topic = topic_name("kpy")
    a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    for acks in [0, 1, "all"]:
        p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, enable_idempotence=False,
                          compression_type="gzip")
        futures = [p.send(topic, key=b"k", value=f"{acks}-{i}".encode(), partition=1,
                          headers=[("h", b"1"), ("h", b"2")]) for i in range(50)]
        p.flush()
        if acks != 0:
            offsets = [f.get(timeout=20).offset for f in futures]
            check(offsets == sorted(offsets) and len(set(offsets)) == 50, f"kafka-python offsets {offsets[:5]}")
        p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=10000)
    tp = TopicPartition(topic, 1)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = [m for _, ms in c.poll(timeout_ms=5000, max_records=500).items() for m in ms]
    while len(got) < 150:
        batch = c.poll(timeout_ms=5000, max_records=500)
        if not batch:
            break
        got += [m for _, ms in batch.items() for m in ms]
    check(len(got) == 150, f"kafka-python read {len(got)} of 150")
    check([m.value.decode() for m in got] == [f"{a}-{i}" for a in [0, 1, "all"] for i in range(50)], "kafka-python values")
    check(got[0].headers == [("h", b"1"), ("h", b"2")], f"kafka-python headers {got[0].headers}")
    end = c.end_offsets([tp])[tp]
    check(end == 150, f"end offset {end}")
    c.close()
    res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    check(res is not None, "describe_configs")
    a.close()
    print("ok kafka-python")


def dropping_proxy(listen_port, target, drop_every):
    """A TCP proxy in front of the broker that forwards every request but drops the
    connection instead of returning every `drop_every`-th Produce answer: the request was
    carried out, the client never hears of it and retries."""
    import socket
    import struct
    import threading

    host, port = target.rsplit(":", 1)
    state = {"produce": 0, "dropped": 0}
    lock = threading.Lock()

    def read_frame(sock):
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        n = struct.unpack(">i", head)[0]
        body = b""
        while len(body) < n:
            chunk = sock.recv(min(1 << 20, n - len(body)))
            if not chunk:
                return None
            body += chunk
        return body

    def serve(client):
        server = socket.create_connection((host, int(port)))
        pending = {}

        def close():
            # shutdown first: a plain close() does not end a socket another thread is
            # blocked reading, and the client would never see the connection drop.
            for s_ in (client, server):
                try:
                    s_.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s_.close()
                except OSError:
                    pass

        def up():
            try:
                while True:
                    frame = read_frame(client)
                    if frame is None:
                        break
                    api, corr = struct.unpack(">h", frame[:2])[0], struct.unpack(">i", frame[4:8])[0]
                    with lock:
                        pending[corr] = api
                    server.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                pass
            close()

        def down():
            try:
                while True:
                    frame = read_frame(server)
                    if frame is None:
                        break
                    corr = struct.unpack(">i", frame[:4])[0]
                    with lock:
                        api = pending.pop(corr, None)
                        drop = False
                        if api == 0:
                            state["produce"] += 1
                            drop = state["produce"] % drop_every == 0
                            state["dropped"] += drop
                    if drop:
                        break
                    client.sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                pass
            close()

        threading.Thread(target=up, daemon=True).start()
        threading.Thread(target=down, daemon=True).start()

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", int(listen_port)))
    srv.listen(64)

    def accept():
        while True:
            c, _ = srv.accept()
            serve(c)

    threading.Thread(target=accept, daemon=True).start()
    return state


def scenario_idempotent_retries(kafka, proxy_port):
    """kafka-python's default producer (idempotent, acks=all) through a proxy that drops
    Produce answers: every retry is recognised, nothing is stored twice, order is kept."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    state = dropping_proxy(proxy_port, kafka, drop_every=7)
    bootstrap = f"127.0.0.1:{proxy_port}"
    topic = topic_name("idem")
    create_topic(bootstrap, topic)
    # One record per batch, several batches in flight: many Produce requests to drop.
    p = KafkaProducer(bootstrap_servers=bootstrap, retries=20, linger_ms=0, batch_size=1, request_timeout_ms=5000,
                      reconnect_backoff_ms=20, reconnect_backoff_max_ms=100,
                      retry_backoff_ms=50)
    check(p.config["enable_idempotence"], "kafka-python is idempotent by default")
    n = 300
    futures = [p.send(topic, value=str(i).encode(), partition=0) for i in range(n)]
    p.flush()
    offsets = [f.get(timeout=60).offset for f in futures]
    p.close()
    check(state["dropped"] > 0, f"the proxy dropped no answer ({state})")
    check(offsets == list(range(n)), f"acknowledged offsets are not 0..{n}: {offsets[:20]}")
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = []
    deadline = time.time() + 30
    while len(got) < n + 1 and time.time() < deadline:
        for _, ms in c.poll(timeout_ms=1000).items():
            got += [int(m.value) for m in ms]
        if len(got) >= n and c.end_offsets([tp])[tp] == len(got):
            break
    c.close()
    check(got == list(range(n)), f"read {len(got)} records; duplicates or gaps: {got[:20]}...")
    print(f"ok idempotent kafka-python: {n} records, {state['dropped']} answers dropped, stored once each")
    # librdkafka with enable.idempotence through the same proxy.
    dropped = state["dropped"]
    topic = topic_name("idem-rd")
    create_topic(bootstrap, topic)
    reports = produce(bootstrap, topic, [(None, str(i).encode(), None, 0, None) for i in range(n)],
                      **{"enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 1,
                         "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100})
    check(all(e is None for e, _ in reports), f"librdkafka delivery errors: {[e for e, _ in reports if e][:3]}")
    check(sorted(o for _, o in reports) == list(range(n)), "librdkafka offsets are not dense")
    check(state["dropped"] > dropped, "the proxy dropped no librdkafka answer")
    got = [int(m.value()) for m in consume_all(bootstrap, topic, 0, 0, n)]
    check(got == list(range(n)), "librdkafka records stored twice or out of order")
    print(f"ok idempotent librdkafka: {n} records, {state['dropped'] - dropped} answers dropped, stored once each")


# ---------------------------------------------------------------- aiokafka

def scenario_aiokafka(bootstrap):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    topic = topic_name("aio")
    create_topic(bootstrap, topic)

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
        await p.start()
        try:
            offsets = []
            for i in range(100):
                md = await p.send_and_wait(topic, f"aio-{i}".encode(), partition=0)
                offsets.append(md.offset)
            check(offsets == list(range(100)), f"aiokafka offsets {offsets[:5]}")
            batch = p.create_batch()
            for i in range(10):
                batch.append(key=None, value=f"b-{i}".encode(), timestamp=None)
            fut = await p.send_batch(batch, topic, partition=0)
            check((await fut).offset == 100, "aiokafka batch offset")
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got = []
            deadline = time.time() + 30
            while len(got) < 110 and time.time() < deadline:
                r = await c.getmany(tp, timeout_ms=1000)
                got += r.get(tp, [])
            check([m.value.decode() for m in got] == [f"aio-{i}" for i in range(100)] + [f"b-{i}" for i in range(10)],
                  f"aiokafka read {len(got)}")
            ts = int(time.time() * 1000) + 60_000
            r = await c.offsets_for_times({tp: ts})
            check(r[tp] is None, f"offsets_for_times in the future: {r[tp]}")
        finally:
            await c.stop()

    asyncio.run(run())
    print("ok aiokafka")


# ---------------------------------------------------------------- cluster lifecycle (L1, D1)

def lifecycle_create_produce(bootstrap, prefix, n, records):
    """Creates topics <prefix>-0..n-1 (one partition each) and produces `records` 1 KiB
    records to each with acks=all; every delivery must succeed. Prints `acked <count>`."""
    from confluent_kafka.admin import NewTopic
    n, records = int(n), int(records)
    names = [f"{prefix}-{i}" for i in range(n)]
    a = admin(bootstrap)
    futures = a.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=-1) for t in names], operation_timeout=30)
    for t, f in futures.items():
        f.result(timeout=60)
    p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                       "enable.idempotence": True, "message.timeout.ms": 60000})
    errors, acked = [], [0]

    def on_delivery(err, msg):
        if err is None:
            acked[0] += 1
        else:
            errors.append(str(err))

    value = b"v" * 1024
    for t in names:
        for _ in range(records):
            while True:
                try:
                    p.produce(t, value=value, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
    left = p.flush(90)
    check(left == 0 and not errors, f"{left} queued, errors {errors[:5]}")
    print(f"acked {acked[0]}", flush=True)


def lifecycle_delete(bootstrap, prefix, n):
    """Deletes topics <prefix>-0..n-1 through one broker (one DeleteTopics request)."""
    names = [f"{prefix}-{i}" for i in range(int(n))]
    a = admin(bootstrap)
    for t, f in a.delete_topics(names, operation_timeout=30).items():
        f.result(timeout=60)
    print("deleted", flush=True)


def lifecycle_produce_one(bootstrap, prefix, n):
    """Produces one record to each of topics <prefix>-0..n-1 through `bootstrap` (after a
    deletion: a broker whose topic cache may still show them). Prints `acked <a> failed
    <f>`."""
    p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all",
                       "message.timeout.ms": 4000, "allow.auto.create.topics": False})
    res = {"acked": 0, "failed": 0}

    def on_delivery(err, msg):
        res["failed" if err else "acked"] += 1

    for i in range(int(n)):
        p.produce(f"{prefix}-{i}", value=b"late", partition=0, on_delivery=on_delivery)
        p.poll(0)
    p.flush(30)
    print(f"acked {res['acked']} failed {res['failed']}", flush=True)


def scenario_commit_then_committed(bootstrap):
    """#25: committed() right after an asynchronous commit answers with that commit (Kafka
    serves a connection's requests in order: the OffsetFetch comes after the OffsetCommit),
    at once, many times over."""
    topic = topic_name("committed")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [(None, str(i).encode(), None, 0, None) for i in range(10)])
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": topic_name("g"),
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    tp = ck().TopicPartition
    c.assign([tp(topic, 0)])
    # The consumer reads first (its assignment fetches its start offset: a fetch of its own
    # that the client may send after the first commit).
    deadline = time.time() + 30
    while (m := c.poll(0.5)) is None or m.error():
        check(time.time() < deadline, "no record read")
    slowest = 0.0
    for i in range(1, 101):
        c.commit(offsets=[tp(topic, 0, i)], asynchronous=True)
        started = time.time()
        got = c.committed([tp(topic, 0)], timeout=10)[0].offset
        slowest = max(slowest, time.time() - started)
        check(got == i, f"committed() after the asynchronous commit of {i} said {got}")
    c.close()
    print(f"ok committed: 100 asynchronous commits each read back at once (slowest {slowest * 1000:.1f} ms)")


def scenario_static_membership(bootstrap):
    """#25, KIP-345: two static members (group.instance.id) share four partitions; one
    closes (no LeaveGroup) and comes back with the same instance id before its session
    ends: it gets its old partitions and the other member is never revoked; a second
    consumer with a taken instance id takes its place and fences the first."""
    topic = topic_name("static")
    create_topic(bootstrap, topic, partitions=4)
    group = topic_name("g")
    events = []

    def consumer(instance, name):
        c = ck().Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
            "client.id": name, "session.timeout.ms": 20000, "heartbeat.interval.ms": 500,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
        })
        c.subscribe([topic],
                    on_assign=lambda _, ps: events.append((name, "assign", sorted(p.partition for p in ps))),
                    on_revoke=lambda _, ps: events.append((name, "revoke", sorted(p.partition for p in ps))))
        return c

    def assigned(c):
        return sorted(p.partition for p in c.assignment())

    def settle(cs, want, within=60):
        deadline = time.time() + within
        while time.time() < deadline:
            for c in cs:
                c.poll(0.1)
            if want():
                return
        fail(f"no settled assignment in {within} s: {events}")

    a, b = consumer("a", "a"), consumer("b", "b")
    settle([a, b], lambda: len(assigned(a)) == 2 and len(assigned(b)) == 2)
    a_parts, b_parts = assigned(a), assigned(b)
    check(sorted(a_parts + b_parts) == [0, 1, 2, 3], f"split {a_parts} {b_parts}")
    b_events = len([e for e in events if e[0] == "b"])
    a.close()  # a static member leaves no LeaveGroup behind: its partitions wait for it
    for _ in range(20):
        b.poll(0.1)
    a = consumer("a", "a-again")
    settle([a, b], lambda: assigned(a) == a_parts)
    for _ in range(30):  # a rebalance, if one came, would revoke b within this
        a.poll(0.1)
        b.poll(0.1)
    check(assigned(b) == b_parts, f"b's partitions changed: {assigned(b)} (was {b_parts})")
    later_b = [e for e in events if e[0] == "b"][b_events:]
    check(later_b == [], f"b saw a rebalance when a came back: {later_b}")
    # A second consumer with a's instance id takes its place (librdkafka reports the first
    # one fenced: a fatal error): the group then lists it, not the first, with a's partitions.
    a2 = consumer("a", "a-duplicate")
    settle([a2, b, a], lambda: assigned(a2) == a_parts)
    check(assigned(b) == b_parts, f"b's partitions changed: {assigned(b)} (was {b_parts})")
    try:
        a.commit(offsets=[ck().TopicPartition(topic, a_parts[0], 0)], asynchronous=False)
        fail("the fenced consumer still commits")
    except ck().KafkaException as e:
        # FENCED_INSTANCE_ID itself, or _FATAL when a heartbeat met the fence first.
        err = e.args[0]
        fenced = "fenced" in err.str().lower() or err.fatal() or err.code() == ck().KafkaError._FATAL
        check(fenced, f"the fenced consumer's commit: {err}")
    for c in (a2, b):
        c.close()
    print(f"ok static: a came back to {a_parts} without a rebalance of b ({b_parts}); a duplicate instance id took its place")


def scenario_cooperative_sticky(bootstrap):
    """#25: the cooperative-sticky assignor's incremental rebalance: when b joins, a gives
    up only the partitions b gets and keeps consuming the rest (never revoked)."""
    topic = topic_name("coop")
    create_topic(bootstrap, topic, partitions=6)
    group = topic_name("g")
    events = []

    def consumer(name):
        c = ck().Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest",
        })
        c.subscribe([topic],
                    on_assign=lambda _, ps: events.append((name, "assign", {p.partition for p in ps})),
                    on_revoke=lambda _, ps: events.append((name, "revoke", {p.partition for p in ps})))
        return c

    def parts(c):
        return {p.partition for p in c.assignment()}

    a = consumer("a")
    deadline = time.time() + 60
    while len(parts(a)) != 6 and time.time() < deadline:
        a.poll(0.1)
    check(parts(a) == set(range(6)), f"a alone holds {parts(a)}")
    b = consumer("b")
    while (not parts(b) or parts(a) | parts(b) != set(range(6))) and time.time() < deadline + 60:
        a.poll(0.1)
        b.poll(0.1)
    for _ in range(20):
        a.poll(0.1)
        b.poll(0.1)
    pa, pb = parts(a), parts(b)
    check(pa and pb and not pa & pb and pa | pb == set(range(6)), f"a {pa} b {pb}")
    revoked = set().union(*[p for (who, what, p) in events if who == "a" and what == "revoke"])
    check(revoked == pb, f"a gave up {revoked}, b got {pb}: a revoked more than it lost")
    for c in (a, b):
        c.close()
    print(f"ok cooperative-sticky: a kept {sorted(pa)} throughout, gave b {sorted(pb)}")


def scenario_fetch_sessions(bootstrap):
    """#25, KIP-227: a kafka-python consumer of 500 partitions fetches in an incremental
    fetch session: after the full fetch that opens it, each answer holds only the partitions
    with news, and the client (which checks every answer against its session) never finds
    one invalid."""
    import logging
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    class Seen(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    seen = Seen()
    log = logging.getLogger("kafka.consumer.fetcher")
    log.setLevel(logging.DEBUG)
    log.addHandler(seen)
    n = 500
    topic = topic_name("sessions")
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=n, replication_factor=1)])
    a.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    for i in range(n):
        p.send(topic, value=f"{i}".encode(), partition=i)
    p.flush()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    tps = [TopicPartition(topic, i) for i in range(n)]
    c.assign(tps)
    c.seek_to_beginning()

    def read(count):
        got = {}
        deadline = time.time() + 60
        while len(got) < count and time.time() < deadline:
            for tp, ms in c.poll(timeout_ms=500, max_records=1000).items():
                for m in ms:
                    got[(tp.partition, m.offset)] = m.value.decode()
        return got

    first = read(n)
    check(len(first) == n and all(first[(i, 0)] == f"{i}" for i in range(n)),
          f"read {len(first)} of {n} first records")
    for _ in range(3):
        idle = c.poll(timeout_ms=300)
        check(not idle, f"records from nowhere: {idle}")
    second = {}
    for i in (7, 300):
        p.send(topic, value=f"again-{i}".encode(), partition=i)
        p.flush()
        second.update(read(1))
    check(second == {(7, 1): "again-7", (300, 1): "again-300"}, f"second records {second}")
    c.close()
    p.close()
    bad = [x for x in seen.lines if "invalid" in x or "unable to process" in x]
    check(not bad, f"kafka-python found answers invalid: {bad[:3]}")
    opened = [x for x in seen.lines if "created a new incremental fetch session" in x]
    incremental = [x for x in seen.lines if "sent an incremental fetch response for session" in x]
    check(opened, "no fetch session was opened")
    check(len(incremental) >= 3, f"{len(incremental)} incremental answers")
    # "... with <k> response partitions (<implied> implied)": an idle session answers none.
    sizes = [int(x.split(" with ")[1].split()[0]) for x in incremental]
    check(min(sizes) == 0 and max(sizes) < n, f"incremental answer sizes {sorted(set(sizes))}")
    print(f"ok fetch sessions: {len(opened)} opened, {len(incremental)} incremental answers "
          f"holding {min(sizes)}..{max(sizes)} of {n} partitions")


def scenario_quota_throttle(bootstrap):
    """#25: client quotas with librdkafka's own throttle reports. The test set
    producer_byte_rate and consumer_byte_rate of 100 kB/s for client id "slow": 1.5 MB
    produced and read back at once are throttled (throttle_cb with a positive time), and
    every record arrives all the same."""
    topic = topic_name("quota")
    create_topic(bootstrap, topic)
    throttled = []

    def on_throttle(event):
        throttled.append(event.throttle_time)

    n = 1500
    p = ck().Producer({"bootstrap.servers": bootstrap, "client.id": "slow", "linger.ms": 5,
                       "throttle_cb": on_throttle})
    acked = []
    for i in range(n):
        p.produce(topic, value=b"q" * 1000, partition=0,
                  on_delivery=lambda err, m: acked.append(err))
        p.poll(0)
    check(p.flush(60) == 0, "records still queued after flush")
    check(len(acked) == n and all(e is None for e in acked), f"{len(acked)} of {n} acknowledged")
    check(any(t > 0 for t in throttled), f"the producer was never throttled: {throttled}")
    produced = len(throttled)
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "quota", "client.id": "slow",
                       "enable.auto.commit": False, "throttle_cb": on_throttle})
    c.assign([ck().TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.time() + 60
    while got < n and time.time() < deadline:
        for m in c.consume(num_messages=1000, timeout=0.5):
            check(m.error() is None, f"consume error {m.error()}")
            got += 1
    # Throttle reports reach the callback through poll.
    c.poll(0.5)
    c.close()
    check(got == n, f"read {got} of {n}")
    check(any(t > 0 for t in throttled[produced:]), f"the consumer was never throttled: {throttled[produced:]}")
    print(f"ok quota throttle: producer throttled {produced} times, consumer {len(throttled) - produced}")


def compacted(bootstrap, topic, phase, start, end):
    """#25: a compacted topic. `produce`: rounds start..end-1 (the topic is created at round
    0 with cleanup.policy=compact), one batch of 40 keyed records each, in codec round % 5
    (none, gzip, snappy, lz4, zstd): k<i> = r<round>;
    keys k0..k4 get tombstones from round 3 on. `check`: confluent-kafka and kafka-python each
    read the partition from offset 0 to its end, across the gaps compaction left, and find
    the newest value of every key (the tombstones too); offsets only grow. Prints how many
    records each read, so a caller can tell whether compaction removed any."""
    start, end = int(start), int(end)
    value = lambda r, k: None if (k < 5 and r >= 3) else f"r{r}-k{k}".encode()
    if phase == "produce":
        if start == 0:
            create_topic(bootstrap, topic, config={"cleanup.policy": "compact",
                                                   "min.cleanable.dirty.ratio": "0.01"})
        codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
        for r in range(start, end):
            # Each round in another codec: the compactor rewrites batches in their own.
            p = ck().Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10_000,
                               "compression.type": codecs[r % len(codecs)]})
            for k in range(40):
                p.produce(topic, key=f"k{k}".encode(), value=value(r, k), partition=0)
            check(p.flush(30) == 0, "records still queued after flush")
        print(f"ok produced rounds {start}..{end - 1}")
        return
    expected = {f"k{k}".encode(): value(end - 1, k) for k in range(40)}
    c = ck().Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                       "enable.auto.commit": False, "enable.partition.eof": True,
                       "fetch.wait.max.ms": 10})
    lo, hi = c.get_watermark_offsets(ck().TopicPartition(topic, 0), timeout=30)
    check((lo, hi) == (0, 40 * end), f"watermarks {(lo, hi)}")
    c.assign([ck().TopicPartition(topic, 0, 0)])
    got, deadline = [], time.time() + 60
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == ck().KafkaError._PARTITION_EOF and m.offset() >= hi:
                break
            if m.error().code() != ck().KafkaError._PARTITION_EOF:
                fail(f"confluent-kafka: {m.error()}")
            continue
        got.append((m.offset(), m.key(), m.value()))
    c.close()
    from kafka import KafkaConsumer, TopicPartition
    kc = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    kc.assign([tp])
    kc.seek(tp, 0)
    kgot, deadline = [], time.time() + 60
    while kc.position(tp) < hi and time.time() < deadline:
        for ms in kc.poll(timeout_ms=1000, max_records=1000).values():
            kgot += [(m.offset, m.key, m.value) for m in ms]
    kc.close()
    check(kgot, "kafka-python read nothing")
    for name, records in (("confluent-kafka", got), ("kafka-python", kgot)):
        offsets = [o for o, _, _ in records]
        check(offsets == sorted(set(offsets)), f"{name}: offsets out of order or repeated")
        check(offsets[-1] < hi, f"{name}: offset {offsets[-1]} beyond the end {hi}")
        latest = {}
        for _, k, v in records:
            latest[k] = v
        check(latest == expected, f"{name}: newest values differ: " +
              str({k: (latest.get(k), v) for k, v in expected.items() if latest.get(k) != v}))
    # A compaction may swap in between the two reads: each must be right on its own.
    print(f"ok compacted read {len(got)} of {hi} offsets (kafka-python: {len(kgot)})")


SCENARIOS = {
    "confluent_codecs": scenario_confluent_codecs,
    "large_batches": scenario_large_batches,
    "offsets_by_time": scenario_offsets_by_time,
    "delete_records": scenario_delete_records,
    "create_partitions": scenario_create_partitions,
    "configs": scenario_configs,
    "group_rebalance": scenario_group_rebalance,
    "commit_then_committed": scenario_commit_then_committed,
    "static_membership": scenario_static_membership,
    "cooperative_sticky": scenario_cooperative_sticky,
    "fetch_sessions": scenario_fetch_sessions,
    "quota_throttle": scenario_quota_throttle,
    "delete_under_load": scenario_delete_under_load,
    "kafka_python": scenario_kafka_python,
    "idempotent_retries": scenario_idempotent_retries,
    "aiokafka": scenario_aiokafka,
    "produce_count": produce_count,
    "consume_count": consume_count,
    "produce_stream": produce_stream,
    "dump": dump,
    "produce_spread": produce_spread,
    "dump_all": dump_all,
    "group_commit": group_commit,
    "tail_spread": tail_spread,
    "read_positions": read_positions,
    "compacted": compacted,
    "lifecycle_create_produce": lifecycle_create_produce,
    "lifecycle_delete": lifecycle_delete,
    "lifecycle_produce_one": lifecycle_produce_one,
}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in SCENARIOS:
        print(__doc__)
        print("scenarios:", ", ".join(SCENARIOS))
        sys.exit(2)
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
