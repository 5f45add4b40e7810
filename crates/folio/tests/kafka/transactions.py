"""Transactions with a real client (confluent-kafka, librdkafka) against a Folio broker.

Usage: transactions.py <scenario> <bootstrap> [args]. Each scenario asserts what it reads
back and exits non-zero with a message on the first failure.
"""

import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


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


SCENARIOS = {
    "commit_and_abort": scenario_commit_and_abort,
    "open_transaction_holds_back": scenario_open_transaction_holds_back,
    "zombie_fenced": scenario_zombie_fenced,
}

if __name__ == "__main__":
    name, bootstrap = sys.argv[1], sys.argv[2]
    SCENARIOS[name](bootstrap, *sys.argv[3:])
