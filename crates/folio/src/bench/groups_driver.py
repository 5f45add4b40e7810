#!/usr/bin/env python3
"""`folio bench groups` driver (confluent-kafka). Modes:

    settle <bootstrap> <topic> <protocol> <members>
        Starts members-1 consumers (child processes) of a fresh group, waits until the
        group is settled, then measures: a member joins (until every partition is owned by
        exactly one member and the newcomer owns some) and a member dies (SIGKILL: until
        its partitions are owned by the others). Prints settle_after_join_ms=... and
        settle_after_death_ms=...
    share <bootstrap> <topic> <members> <records>
        Share consumers (child processes, implicit acknowledgement) read a topic holding
        `records` records: prints records_per_s from the first poll until all are read.
    member <bootstrap> <topic> <group> <protocol>     (a child: reports its partitions)
    share_member <bootstrap> <topic> <group>          (a child: reports records read)
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid


def ck():
    import confluent_kafka
    return confluent_kafka


def member(bootstrap, topic, group, protocol):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                     "partition.assignment.strategy": "cooperative-sticky"})
    c = ck().Consumer(conf)
    say = lambda **kv: print(json.dumps(kv), flush=True)
    c.subscribe([topic],
                on_assign=lambda _c, ps: say(e="assigned", p=[p.partition for p in ps]),
                on_revoke=lambda _c, ps: say(e="revoked", p=[p.partition for p in ps]))
    while True:
        c.poll(0.1)


class Child:
    def __init__(self, args):
        self.proc = subprocess.Popen([sys.executable, __file__] + args, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.held, self.read, self.lock = set(), 0, threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            e = json.loads(line)
            with self.lock:
                if e["e"] == "assigned":
                    self.held |= set(e["p"])
                elif e["e"] == "revoked":
                    self.held -= set(e["p"])
                elif e["e"] == "read":
                    self.read += e["n"]

    def owns(self):
        with self.lock:
            return set(self.held)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def settled(children, partitions, newcomer=None):
    owned = [c.owns() for c in children]
    every = [p for o in owned for p in o]
    ok = sorted(every) == list(range(partitions))
    return ok and (newcomer is None or newcomer.owns())


def wait(cond, timeout=120):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise SystemExit("timed out waiting for the group to settle")
        time.sleep(0.02)
    return (time.time() - t0) * 1000


def settle(bootstrap, topic, protocol, members):
    members = int(members)
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    partitions = len(md.topics[topic].partitions)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    args = lambda: ["member", bootstrap, topic, group, protocol]
    children = [Child(args()) for _ in range(members - 1)]
    try:
        wait(lambda: settled(children, partitions))
        time.sleep(1)
        newcomer = Child(args())
        children.append(newcomer)
        join_ms = wait(lambda: settled(children, partitions, newcomer))
        time.sleep(1)
        victim = children.pop(0)
        victim.kill()
        death_ms = wait(lambda: settled(children, partitions))
        print(f"protocol={protocol} members={members} partitions={partitions} "
              f"settle_after_join_ms={join_ms:.0f} settle_after_death_ms={death_ms:.0f}")
    finally:
        for c in children:
            c.kill()


def share_member(bootstrap, topic, group):
    c = ck().ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    while True:
        n = sum(1 for m in c.poll(0.5) if not m.error())
        if n:
            print(json.dumps({"e": "read", "n": n}), flush=True)


def share(bootstrap, topic, members, records):
    members, records = int(members), int(records)
    group = f"share-{uuid.uuid4().hex[:8]}"
    children = [Child(["share_member", bootstrap, topic, group]) for _ in range(members)]
    total = lambda: sum(c.read for c in children)
    try:
        wait(lambda: total() > 0, timeout=60)
        t0 = time.time()
        wait(lambda: total() >= records, timeout=300)
        secs = time.time() - t0
        print(f"share_members={members} records={records} read={total()} "
              f"records_per_s={records / max(secs, 1e-9):.0f}")
    finally:
        for c in children:
            c.kill()


if __name__ == "__main__":
    modes = {"settle": settle, "member": member, "share": share, "share_member": share_member}
    if len(sys.argv) < 2 or sys.argv[1] not in modes:
        print(__doc__)
        sys.exit(2)
    modes[sys.argv[1]](*sys.argv[2:])
