#!/usr/bin/env python3
"""Real Kafka clients on Folio's secured listeners (#24): one scenario per invocation.

    security.py <scenario> <sasl_ssl bootstrap> <sasl_plaintext bootstrap> <ca.pem>

Users (made by the Rust test with `folio users`): alice / alice-secret with SCRAM-SHA-512
and SCRAM-SHA-256, bob / bob-secret with SCRAM-SHA-256 only. Every scenario asserts what it
reads back and that a wrong password or an unknown user fails cleanly (an error, no hang).
Run by crates/folio/tests/kafka_security.rs.
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

def ck_conf(bootstrap, protocol, mechanism, user, password, ca):
    c = {
        "bootstrap.servers": bootstrap,
        "security.protocol": protocol,
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if protocol == "SASL_SSL":
        c["ssl.ca.location"] = ca
    return c


def ck_roundtrip(produce_conf, consume_conf, n, label):
    import confluent_kafka as ck
    topic = topic_name("ck-sec")
    p = ck.Producer({**produce_conf, "linger.ms": 5, "acks": "all"})
    errors = []
    for i in range(n):
        p.produce(topic, value=f"{label}-{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: err and errors.append(err))
    left = p.flush(30)
    check(left == 0 and not errors, f"{label}: {left} undelivered, errors {errors[:3]}")
    c = ck.Consumer({**consume_conf, "group.id": topic, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 30
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.append(m.value().decode())
    c.close()
    check(got == [f"{label}-{i}" for i in range(n)], f"{label}: read {len(got)} of {n}: {got[:3]}")


def ck_refused(conf, label):
    """A metadata request with bad credentials fails with an authentication error."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient
    seen = []
    a = AdminClient({**conf, "error_cb": lambda e: seen.append(e)})
    try:
        a.list_topics(timeout=3)
        fail(f"{label}: metadata with bad credentials succeeded")
    except ck.KafkaException:
        pass
    deadline = time.time() + 10
    while not seen and time.time() < deadline:
        a.poll(0.2)  # serves error_cb
    check(any(e.code() == ck.KafkaError._AUTHENTICATION for e in seen),
          f"{label}: no authentication error reported: {seen}")


def scenario_confluent(sasl_ssl, sasl_plain, ca):
    alice = lambda proto, boot, mech: ck_conf(boot, proto, mech, "alice", "alice-secret", ca)
    ck_roundtrip(alice("SASL_SSL", sasl_ssl, "SCRAM-SHA-512"),
                 alice("SASL_PLAINTEXT", sasl_plain, "PLAIN"), 200, "ck-scram512-plain")
    bob = ck_conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-256", "bob", "bob-secret", ca)
    ck_roundtrip(bob, ck_conf(sasl_plain, "SASL_PLAINTEXT", "PLAIN", "bob", "bob-secret", ca), 20,
                 "ck-scram256")
    ck_refused(ck_conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", "alice", "wrong", ca), "ck wrong password")
    ck_refused(ck_conf(sasl_plain, "SASL_PLAINTEXT", "PLAIN", "mallory", "x", ca), "ck unknown user")
    ck_refused(ck_conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret", ca),
               "ck bob has no SCRAM-SHA-512 credential")
    print("ok confluent-kafka")


# ---------------------------------------------------------------- kafka-python

def kp_conf(bootstrap, protocol, mechanism, user, password, ca):
    c = dict(bootstrap_servers=bootstrap, security_protocol=protocol, sasl_mechanism=mechanism,
             sasl_plain_username=user, sasl_plain_password=password)
    if protocol == "SASL_SSL":
        c["ssl_cafile"] = ca
    return c


def scenario_kafka_python(sasl_ssl, sasl_plain, ca):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = topic_name("kpy-sec")
    for proto, boot, mech, tag in [("SASL_SSL", sasl_ssl, "SCRAM-SHA-512", "a"),
                                   ("SASL_PLAINTEXT", sasl_plain, "PLAIN", "b")]:
        p = KafkaProducer(acks="all", **kp_conf(boot, proto, mech, "alice", "alice-secret", ca))
        futures = [p.send(topic, value=f"{tag}-{i}".encode(), partition=0) for i in range(50)]
        p.flush()
        [f.get(timeout=20) for f in futures]
        p.close()
    c = KafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest",
                      **kp_conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-256", "bob", "bob-secret", ca))
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = []
    deadline = time.time() + 30
    while len(got) < 100 and time.time() < deadline:
        got += [m.value.decode() for ms in c.poll(timeout_ms=1000).values() for m in ms]
    c.close()
    check(got == [f"{t}-{i}" for t in "ab" for i in range(50)], f"kafka-python read {len(got)} of 100")
    import logging
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logging.getLogger("kafka").addHandler(Keep())
    for conf, label in [
        (kp_conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", "alice", "wrong", ca), "wrong password"),
        (kp_conf(sasl_plain, "SASL_PLAINTEXT", "PLAIN", "mallory", "x", ca), "unknown user"),
    ]:
        seen.clear()
        try:
            # kafka-python retries a failed bootstrap until bootstrap_timeout_ms, logging why.
            KafkaProducer(bootstrap_timeout_ms=3000, **conf).close()
            fail(f"kafka-python {label}: a producer started")
        except Exception as e:  # KafkaTimeoutError: unable to bootstrap
            why = [m for m in seen if "SaslAuthenticationFailed" in m or "uthentication failed" in m]
            check(why, f"kafka-python {label}: {type(e).__name__}, no authentication failure logged: {seen[:3]}")
            print(f"kafka-python {label}: {why[0][:160]}")
    print("ok kafka-python")


# ---------------------------------------------------------------- aiokafka

def scenario_aiokafka(sasl_ssl, sasl_plain, ca):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context
    topic = topic_name("aio-sec")

    def conf(boot, proto, mech, user, password):
        c = dict(bootstrap_servers=boot, security_protocol=proto, sasl_mechanism=mech,
                 sasl_plain_username=user, sasl_plain_password=password)
        if proto == "SASL_SSL":
            c["ssl_context"] = create_ssl_context(cafile=ca)
        return c

    async def run():
        p = AIOKafkaProducer(acks="all", **conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret"))
        await p.start()
        try:
            for i in range(50):
                await p.send_and_wait(topic, f"aio-{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest",
                             **conf(sasl_plain, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"))
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got = []
            deadline = time.time() + 30
            while len(got) < 50 and time.time() < deadline:
                got += (await c.getmany(tp, timeout_ms=1000)).get(tp, [])
            check([m.value.decode() for m in got] == [f"aio-{i}" for i in range(50)], f"aiokafka read {len(got)}")
        finally:
            await c.stop()
        bad = AIOKafkaProducer(request_timeout_ms=5000,
                               **conf(sasl_ssl, "SASL_SSL", "SCRAM-SHA-512", "alice", "wrong"))
        try:
            await asyncio.wait_for(bad.start(), 30)
            fail("aiokafka: a producer with a wrong password started")
        except asyncio.TimeoutError:
            fail("aiokafka: a wrong password hung")
        except Exception as e:
            print(f"aiokafka wrong password: {type(e).__name__}")
        finally:
            await bad.stop()

    asyncio.run(run())
    print("ok aiokafka")


SCENARIOS = {
    "confluent": scenario_confluent,
    "kafka_python": scenario_kafka_python,
    "aiokafka": scenario_aiokafka,
}

if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] not in SCENARIOS:
        print(__doc__)
        print("scenarios:", ", ".join(SCENARIOS))
        sys.exit(2)
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
