"""Transactions with a real client (confluent-kafka, librdkafka) against a Folio broker.

Usage: transactions.py <scenario> <bootstrap> [args]. Each scenario asserts what it reads
back and exits non-zero with a message on the first failure.
"""

import os
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def fail(msg):
    print("FAIL: " + msg, flush=True)
    # At once: librdkafka's destroy of a client left open (a consumer whose coordinator is
    # unreachable) can hang the interpreter's exit for ever.
    os._exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def create_topic(bootstrap, name, partitions=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    for f in fs.values():
        f.result(timeout=30)


def txn_producer(bootstrap, txn_id, **conf):
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "transaction.timeout.ms": 60000,
        **conf,
    })
    p.init_transactions(30)
    return p


def read_all(bootstrap, topic, partitions, isolation, idle=3.0, timeout=60.0):
    """Every record of `topic` as (partition, offset, value), read from the start with
    `isolation`, until nothing new arrived for `idle` seconds."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "read-" + uuid.uuid4().hex,
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, last, start = [], time.time(), time.time()
    while time.time() - last < idle:
        check(time.time() - start < timeout, "reading did not settle in %ss" % timeout)
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            fail("consume error: %s" % m.error())
        out.append((m.partition(), m.offset(), m.value().decode()))
        last = time.time()
    c.close()
    return out


def scenario_commit_and_abort(bootstrap):
    """#49 item 5: committed transactions are visible to read_committed, aborted ones only
    to read_uncommitted; the markers take offsets; the last stable offset catches up."""
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic, partitions=2)
    p = txn_producer(bootstrap, "tx-" + topic)
    expected_committed = []
    for round_ in range(4):
        p.begin_transaction()
        values = ["r%d-%d" % (round_, i) for i in range(10)]
        for i, v in enumerate(values):
            p.produce(topic, value=v, partition=i % 2)
        p.flush(30)  # an abort purges what is not sent yet: send it all first
        commit = round_ % 2 == 0
        if commit:
            p.commit_transaction(30)
            expected_committed += values
        else:
            p.abort_transaction(30)
    committed = read_all(bootstrap, topic, 2, "read_committed")
    got = sorted(v for _, _, v in committed)
    check(got == sorted(expected_committed),
          "read_committed saw %s, expected %s" % (got, sorted(expected_committed)))
    everything = read_all(bootstrap, topic, 2, "read_uncommitted")
    check(len(everything) == 40, "read_uncommitted saw %d records, expected 40" % len(everything))
    # Each partition: 4 transactions of 5 records, each ended by one marker offset.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm-" + topic,
                  "isolation.level": "read_committed"})
    for part in range(2):
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
        check(hi == 24, "partition %d ends at %d, expected 24 (20 records, 4 markers)" % (part, hi))
    c.close()
    print("OK commit_and_abort committed=%d total=%d" % (len(committed), len(everything)))


def scenario_open_transaction_holds_back(bootstrap):
    """#49 item 2: records of an open transaction are not read by read_committed until it
    commits, while read_uncommitted sees them at once."""
    topic = "txn-open-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic)
    p = txn_producer(bootstrap, "tx-" + topic)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value="open-%d" % i)
    p.flush(30)
    check(len(read_all(bootstrap, topic, 1, "read_uncommitted", idle=2)) == 5,
          "read_uncommitted does not see the open transaction's records")
    check(read_all(bootstrap, topic, 1, "read_committed", idle=2) == [],
          "read_committed saw records of an open transaction")
    p.commit_transaction(30)
    got = [v for _, _, v in read_all(bootstrap, topic, 1, "read_committed", idle=2)]
    check(got == ["open-%d" % i for i in range(5)], "after the commit read_committed saw %s" % got)
    print("OK open_transaction_holds_back")


def scenario_zombie_fenced(bootstrap):
    """#49 item 5: a second producer with the same transactional id fences the first: the
    first's open transaction is aborted and its next commit fails as fenced."""
    topic = "txn-zombie-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic)
    txn_id = "tx-" + topic
    old = txn_producer(bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, value="zombie")
    old.flush(30)
    new = txn_producer(bootstrap, txn_id)
    new.begin_transaction()
    new.produce(topic, value="winner")
    new.commit_transaction(30)
    try:
        old.commit_transaction(30)
        fail("the fenced producer's commit succeeded")
    except KafkaException as e:
        err = e.args[0]
        check(err.fatal() or "fenced" in str(err).lower() or "epoch" in str(err).lower(),
              "the fenced producer's commit failed with %s" % err)
    got = [v for _, _, v in read_all(bootstrap, topic, 1, "read_committed", idle=2)]
    check(got == ["winner"], "read_committed saw %s, expected only the new producer's" % got)
    print("OK zombie_fenced")


def produce_plain(bootstrap, topic, values):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        p.produce(topic, value=v)
    check(p.flush(30) == 0, "plain produce did not finish")


def committed_offset(bootstrap, group, topic, partition):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    tp = c.committed([TopicPartition(topic, partition)], timeout=10)[0]
    c.close()
    return tp.offset


def transform(bootstrap, src, dst, group, txn_id, batch, stop_after=None, abort_every=None,
              until=None):
    """Consume-transform-produce: reads `src` in group `group`, writes each value upper-cased
    to `dst`, and commits its input offsets in the same transaction, `batch` records at a
    time, until `src` has nothing more for 5 s (or `stop_after` transactions, or its input
    position reached `until`: then waiting up to 90 s, across broker moves). Every
    `abort_every`-th transaction is aborted instead (and its input read again)."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
    })
    c.subscribe([src])
    p = txn_producer(bootstrap, txn_id)
    n_txn, idle_since = 0, time.time()
    while stop_after is None or n_txn < stop_after:
        msgs = c.consume(batch, 1.0)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            if until is None and time.time() - idle_since > 5:
                break
            check(time.time() - idle_since < 90, "no input for 90 s before offset %s" % until)
            continue
        idle_since = time.time()
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, value=m.value().decode().upper())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        n_txn += 1
        if abort_every and n_txn % abort_every == 0:
            p.flush(30)
            p.abort_transaction(30)
            # Read the aborted input again: back to the committed offsets.
            for tp in c.committed(c.assignment(), timeout=10):
                c.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
        else:
            p.commit_transaction(30)
            if until is not None and sum(tp.offset for tp in c.position(c.assignment())) >= until:
                break
    c.close()
    return n_txn


def scenario_consume_transform_produce(bootstrap):
    """#49 item 3 and 5: offsets committed in a transaction become visible only on commit;
    the output holds each input record once, aborted attempts invisible to read_committed."""
    src = "ctp-in-" + uuid.uuid4().hex[:8]
    dst = "ctp-out-" + uuid.uuid4().hex[:8]
    group = "ctp-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, src)
    create_topic(bootstrap, dst)
    values = ["v%03d" % i for i in range(100)]
    produce_plain(bootstrap, src, values)
    transform(bootstrap, src, dst, group, "tx-" + group, batch=7, abort_every=3)
    got = [v for _, _, v in read_all(bootstrap, dst, 1, "read_committed")]
    check(sorted(got) == sorted(v.upper() for v in values),
          "output has %d records (%d distinct), expected each of %d once"
          % (len(got), len(set(got)), len(values)))
    off = committed_offset(bootstrap, group, src, 0)
    check(off == 100, "the group's committed offset is %s, expected 100" % off)
    everything = read_all(bootstrap, dst, 1, "read_uncommitted")
    check(len(everything) > len(got), "no aborted attempt reached the output log")
    print("OK consume_transform_produce output=%d with_aborted=%d" % (len(got), len(everything)))


def scenario_ctp_begin(bootstrap, src, dst, group):
    """Phase 1 of a consume-transform-produce across a broker kill: 100 input records, 5
    transactions of 7 committed, then a 6th left open (produced, offsets sent, never ended:
    the process exits)."""
    create_topic(bootstrap, src)
    create_topic(bootstrap, dst)
    produce_plain(bootstrap, src, ["v%03d" % i for i in range(100)])
    n = transform(bootstrap, src, dst, group, "tx-" + group, batch=7, stop_after=5)
    check(n == 5, "only %d transactions ran" % n)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.subscribe([src])
    p = txn_producer(bootstrap, "tx-" + group)
    msgs = []
    while len(msgs) < 7:
        msgs += [m for m in c.consume(7 - len(msgs), 1.0) if not m.error()]
    p.begin_transaction()
    for m in msgs:
        p.produce(dst, value=m.value().decode().upper())
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
    check(p.flush(30) == 0, "the open transaction's records were not sent")
    print("OK ctp_begin open transaction left with %d records" % len(msgs), flush=True)
    # Exit without ending it: the broker is killed next.
    import os
    os._exit(0)


def scenario_ctp_finish(bootstrap, src, dst, group):
    """Phase 2: the same transactional id again (fencing and aborting the open transaction)
    finishes the input; each input record is in the output exactly once for
    read_committed, the open transaction's records only for read_uncommitted."""
    transform(bootstrap, src, dst, group, "tx-" + group, batch=7, until=100)
    got = [v for _, _, v in read_all(bootstrap, dst, 1, "read_committed")]
    want = ["V%03d" % i for i in range(100)]
    dups = len(got) - len(set(got))
    check(sorted(got) == want, "output has %d records, %d duplicates, %d missing"
          % (len(got), dups, len(set(want) - set(got))))
    off = committed_offset(bootstrap, group, src, 0)
    check(off == 100, "the group's committed offset is %s, expected 100" % off)
    everything = read_all(bootstrap, dst, 1, "read_uncommitted")
    check(len(everything) == 107, "read_uncommitted saw %d, expected 100 and the 7 aborted"
          % len(everything))
    print("OK ctp_finish output=%d" % len(got))


def timed(what, f, *args):
    """f(*args), printing `slow <what> <seconds>` when it took over 5 s: a stalled run
    shows which client call stalled."""
    t0 = time.time()
    try:
        return f(*args)
    finally:
        took = time.time() - t0
        if took > 5:
            print("slow %s %.1f s at %.1f" % (what, took, time.time()), flush=True)


def scenario_ctp_partitioned(bootstrap, src, dst, group, n):
    """A consume-transform-produce that goes on across a network partition (the test cuts
    the coordinator off meanwhile), handling errors as a Kafka application does: after any
    error a new producer (whose init fences the old one and ends what it left open) and the
    input read again from the group's committed offsets; every fifth transaction aborted
    on purpose. Then each input record is in the output exactly once for read_committed and
    the group's offset is at the end. Prints `progress <transactions>` as it commits."""
    n = int(n)
    create_topic(bootstrap, src)
    create_topic(bootstrap, dst)
    produce_plain(bootstrap, src, ["v%04d" % i for i in range(n)])
    txn_id = "tx-" + group
    debug = {"debug": os.environ["CTP_DEBUG"]} if os.environ.get("CTP_DEBUG") else {}
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        **debug,
    })
    c.subscribe([src])
    # librdkafka 2.16 (confluentinc/librdkafka#5511, #5456): a broker missing from Metadata
    # (broker 1 while it is cut off) is decommissioned, yet may stay cached as the group
    # coordinator; send_offsets_to_transaction then waits, past its timeout, for some broker
    # connection to change state, up to the broker's 10-minute idle close. Closing idle
    # connections after 10 s (connections.max.idle.ms) is that change, soon: the workaround
    # a Kafka application needs against any broker, so the test uses it (README).
    conf = dict(debug, **{"connections.max.idle.ms": 10000})
    p = txn_producer(bootstrap, txn_id, **conf)
    done = n_txn = aborted = restarts = 0
    start = time.time()
    while done < n:
        check(time.time() - start < 300, "only %d of %d inputs done in 300 s" % (done, n))
        msgs = [m for m in timed("consume", c.consume, 5, 1.0) if not m.error()]
        if not msgs:
            continue
        ends = {}
        for m in msgs:
            ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
        offsets = [TopicPartition(src, q, o) for q, o in ends.items()]
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, value=m.value().decode().upper())
            timed("send_offsets_to_transaction", p.send_offsets_to_transaction, offsets,
                  c.consumer_group_metadata(), 30)
            n_txn += 1
            if n_txn % 5 == 0:
                check(timed("flush", p.flush, 30) == 0,
                      "the aborted transaction's records were not sent")
                timed("abort_transaction", p.abort_transaction, 30)
                aborted += 1
                raise_rewind = True
            else:
                timed("commit_transaction", p.commit_transaction, 30)
                done = max(done, max(ends.values()))
                print("progress %d" % n_txn, flush=True)
                raise_rewind = False
        except KafkaException as e:
            print("error %s: a new producer" % e, flush=True)
            restarts += 1
            while True:
                check(time.time() - start < 300, "no new producer in 300 s")
                try:
                    p = timed("init_transactions", lambda: txn_producer(bootstrap, txn_id, **conf))
                    break
                except KafkaException as e2:
                    print("init: %s" % e2, flush=True)
            raise_rewind = True
        if raise_rewind:
            while True:
                check(time.time() - start < 300, "the committed offsets never read")
                try:
                    tps = [TopicPartition(src, q) for q in ends]
                    committed = timed("committed", lambda: c.committed(tps, timeout=10))
                    break
                except KafkaException as e:
                    print("committed: %s" % e, flush=True)
            for tp in committed:
                try:
                    c.seek(TopicPartition(src, tp.partition, max(tp.offset, 0)))
                except KafkaException as e:
                    # Not assigned now: the next assignment starts at the committed offset.
                    print("seek: %s" % e, flush=True)
                done = max(done, tp.offset)
    c.close()
    got = [v for _, _, v in read_all(bootstrap, dst, 1, "read_committed")]
    want = ["V%04d" % i for i in range(n)]
    dups = len(got) - len(set(got))
    check(sorted(got) == want, "output has %d records, %d duplicates, %d missing"
          % (len(got), dups, len(set(want) - set(got))))
    off = committed_offset(bootstrap, group, src, 0)
    check(off == n, "the group's committed offset is %s, expected %d" % (off, n))
    everything = read_all(bootstrap, dst, 1, "read_uncommitted")
    print("OK ctp_partitioned output=%d transactions=%d aborted=%d new_producers=%d "
          "read_uncommitted=%d" % (len(got), n_txn, aborted, restarts, len(everything)),
          flush=True)


def scenario_hanging_timeout(bootstrap):
    """#49 item 5: a transaction whose producer went away holds the last stable offset back
    until its timeout; then it is aborted by the coordinator and read_committed consumers
    read what others committed after it."""
    topic = "txn-hang-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic)
    hanging = txn_producer(bootstrap, "tx-hang-" + topic, **{"transaction.timeout.ms": 2000})
    hanging.begin_transaction()
    hanging.produce(topic, value="hanging")
    check(hanging.flush(30) == 0, "the hanging record was not sent")
    started = time.time()
    other = txn_producer(bootstrap, "tx-other-" + topic)
    other.begin_transaction()
    other.produce(topic, value="after")
    other.commit_transaction(30)
    got = [v for _, _, v in read_all(bootstrap, topic, 1, "read_committed", idle=1)]
    check(got == [], "read_committed read past an open transaction: %s" % got)
    got = []
    while not got:
        check(time.time() - started < 60, "the hanging transaction was not aborted in 60 s")
        got = [v for _, _, v in read_all(bootstrap, topic, 1, "read_committed", idle=1)]
    check(got == ["after"], "read_committed saw %s, expected only the committed record" % got)
    print("OK hanging_timeout aborted after %.1f s" % (time.time() - started))


def scenario_hang(bootstrap, topic):
    """A transaction left open (a 10-minute timeout) by a producer that exits: it holds the
    last stable offset of `topic` back until someone aborts it."""
    create_topic(bootstrap, topic)
    p = txn_producer(bootstrap, "tx-" + topic, **{"transaction.timeout.ms": 600000})
    p.begin_transaction()
    p.produce(topic, value="hanging")
    check(p.flush(30) == 0, "the hanging record was not sent")
    print("OK hang", flush=True)
    import os
    os._exit(0)


def scenario_committed_after(bootstrap, topic):
    """Another producer commits a record after the hanging transaction's; read_committed
    reads it (and not the hanging record) within 60 s."""
    other = txn_producer(bootstrap, "tx-after-" + topic)
    other.begin_transaction()
    other.produce(topic, value="after")
    other.commit_transaction(30)
    started, got = time.time(), []
    while not got:
        check(time.time() - started < 60, "read_committed is still held back after 60 s")
        got = [v for _, _, v in read_all(bootstrap, topic, 1, "read_committed", idle=1)]
    check(got == ["after"], "read_committed saw %s" % got)
    print("OK committed_after")


SCENARIOS = {
    "hang": scenario_hang,
    "committed_after": scenario_committed_after,
    "ctp_begin": scenario_ctp_begin,
    "ctp_finish": scenario_ctp_finish,
    "ctp_partitioned": scenario_ctp_partitioned,
    "hanging_timeout": scenario_hanging_timeout,
    "consume_transform_produce": scenario_consume_transform_produce,
    "commit_and_abort": scenario_commit_and_abort,
    "open_transaction_holds_back": scenario_open_transaction_holds_back,
    "zombie_fenced": scenario_zombie_fenced,
}

if __name__ == "__main__":
    name, bootstrap = sys.argv[1], sys.argv[2]
    SCENARIOS[name](bootstrap, *sys.argv[3:])
