#!/usr/bin/env python3
"""Folio's schema registry driven by confluent-kafka's SchemaRegistryClient and its Avro
serializer (fastavro), against a standalone's Kafka and HTTP ports.

Usage: registry.py <scenario> <bootstrap> <registry url> [args]; prints `OK <scenario>` or
exits non-zero with what went wrong."""

import json
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

TOPIC = "users"
SUBJECT = TOPIC + "-value"
USER_V1 = json.dumps({"type": "record", "name": "User", "namespace": "folio.test", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]})
# Compatible under BACKWARD: the new field has a default.
USER_V2 = json.dumps({"type": "record", "name": "User", "namespace": "folio.test", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None}]})
# Breaking: a new field without a default (data written before cannot be read).
USER_BROKEN = json.dumps({"type": "record", "name": "User", "namespace": "folio.test", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "age", "type": "int"}]})


def check(cond, what):
    if not cond:
        print("FAIL: " + what, flush=True)
        sys.exit(1)


def refused(f, code, what):
    """f() must fail with the registry error `code`; returns the error."""
    try:
        f()
    except SchemaRegistryError as e:
        check(e.error_code == code, "%s: error %s (%s), expected %s"
              % (what, e.error_code, e.error_message, code))
        return e
    check(False, what + ": accepted")


def produce(bootstrap, client, schema, values):
    ser = AvroSerializer(client, schema)
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(TOPIC, key=str(v["id"]),
                  value=ser(v, SerializationContext(TOPIC, MessageField.VALUE)))
    check(p.flush(30) == 0, "records not acknowledged")


def consume_all(bootstrap, client, n):
    de = AvroDeserializer(client)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "registry-reader-%d" % time.time_ns(),
                  "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    got, deadline = [], time.time() + 60
    while len(got) < n and time.time() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        check(m.value()[0] == 0, "a record without the registry's magic byte")
        got.append(de(m.value(), SerializationContext(TOPIC, MessageField.VALUE)))
    c.close()
    check(len(got) == n, "read %d of %d records" % (len(got), n))
    return got


def scenario_avro(bootstrap, url):
    """Produce and consume Avro records through the registry; evolve the schema within
    BACKWARD; a breaking schema is refused (409) and reported incompatible; levels, modes,
    lookup and soft and permanent deletion answer as Confluent's registry does."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    client = SchemaRegistryClient({"url": url})
    check(client.get_subjects() == [], "a fresh registry lists subjects")
    check(set(client.get_schema_types()) == {"AVRO", "JSON", "PROTOBUF"}, "schema types")
    v1 = [{"id": i, "name": "user-%d" % i} for i in range(20)]
    produce(bootstrap, client, USER_V1, v1)
    check(client.get_subjects() == [SUBJECT], "subjects %s" % client.get_subjects())
    latest = client.get_latest_version(SUBJECT)
    check(latest.version == 1, "first version %s" % latest.version)
    id1 = latest.schema_id
    # The same schema again is the same id and version, also under another subject.
    check(client.register_schema(SUBJECT, Schema(USER_V1, "AVRO")) == id1, "registered twice")
    check(client.register_schema("other-value", Schema(USER_V1, "AVRO")) == id1, "one id per text")
    check(client.get_compatibility() == "BACKWARD", "default level")
    v2 = [{"id": 100 + i, "name": "new-%d" % i, "email": "u%d@example.com" % i} for i in range(5)]
    produce(bootstrap, client, USER_V2, v2)
    check(client.get_versions(SUBJECT) == [1, 2], "versions %s" % client.get_versions(SUBJECT))
    got = consume_all(bootstrap, client, 25)
    check(got[:20] == v1, "v1 records read back as %s" % got[:3])
    check(got[20:] == v2, "v2 records read back as %s" % got[20:22])
    # A breaking schema: refused, and reported incompatible; nothing registered.
    check(not client.test_compatibility(SUBJECT, Schema(USER_BROKEN, "AVRO")), "breaking passes")
    e = refused(lambda: client.register_schema(SUBJECT, Schema(USER_BROKEN, "AVRO")), 409,
                "a breaking schema")
    check("age" in e.error_message, "the refusal names the field: " + e.error_message)
    check(client.get_versions(SUBJECT) == [1, 2], "a refused schema left a version")
    # NONE lets it in; FORWARD_TRANSITIVE checks every version the other way.
    client.set_compatibility(SUBJECT, "NONE")
    check(client.get_compatibility(SUBJECT) == "NONE", "subject level")
    client.set_compatibility(SUBJECT, "FULL_TRANSITIVE")
    check(not client.test_compatibility(SUBJECT, Schema(USER_BROKEN, "AVRO")), "FULL passes")
    refused(lambda: client.set_compatibility(SUBJECT, "SIDEWAYS"), 42203, "an unknown level")
    # JSON Schema and Protobuf are kept and checked too.
    js1 = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}})
    js2 = json.dumps({"type": "object", "properties": {"id": {"type": "string"}}})
    client.register_schema("json-value", Schema(js1, "JSON"))
    refused(lambda: client.register_schema("json-value", Schema(js2, "JSON")), 409, "json retype")
    pb1 = 'syntax = "proto3"; message Order { int64 id = 1; string note = 2; }'
    pb2 = 'syntax = "proto3"; message Order { int64 id = 1; double note = 2; }'
    pid = client.register_schema("proto-value", Schema(pb1, "PROTOBUF"))
    check(client.get_schema(pid).schema_type == "PROTOBUF", "the protobuf schema's type")
    refused(lambda: client.register_schema("proto-value", Schema(pb2, "PROTOBUF")), 409,
            "protobuf retype")
    refused(lambda: client.register_schema("bad-value", Schema("{not json", "AVRO")), 42201,
            "an invalid schema")
    # Lookup, read-only mode, deletion.
    found = client.lookup_schema(SUBJECT, Schema(USER_V2, "AVRO"))
    check(found.version == 2, "lookup found version %s" % found.version)
    check(client.get_global_mode() == "READWRITE", "the default mode")
    check(client.update_mode("other-value", "READONLY") == "READONLY", "set read-only")
    refused(lambda: client.register_schema("other-value", Schema(USER_V2, "AVRO")), 42205,
            "a read-only subject")
    check(client.delete_mode("other-value") == "READONLY", "the mode deleted")
    check(client.get_mode("other-value") == "READWRITE", "back to the global mode")
    check(client.delete_subject("other-value") == [1], "soft delete")
    refused(lambda: client.get_versions("other-value"), 40401, "a deleted subject")
    check(client.delete_subject("other-value", permanent=True) == [1], "permanent delete")
    check(client.get_schema(id1).schema_str is not None, "an id outlives a deleted subject")
    # The console's message browser decodes the records with their registered schema.
    import requests
    web = requests.Session()
    web.get(url + "/api/v1/session").raise_for_status()
    rows = web.get(url + "/api/v1/topics/%s/messages" % TOPIC, params={"limit": 1}).json()
    check(rows[0]["value"] == {"id": 0, "name": "user-0"} and rows[0]["value_schema"] == id1,
          "the console decoded %s" % rows[0])
    validation(bootstrap, client, admin, id1)
    print("OK avro", flush=True)


def validation(bootstrap, client, admin, known_id):
    """A topic with confluent.value.schema.validation takes records framed with a
    registered id and refuses plain ones and unknown ids (INVALID_RECORD), naming why."""
    topic = "validated"
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "confluent.value.schema.validation": "true"})])[topic].result(30)
    outcomes = []
    p = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    ser = AvroSerializer(client, USER_V1)
    good = ser({"id": 1, "name": "ok"}, SerializationContext(topic, MessageField.VALUE))
    unknown = b"\x00" + (999999).to_bytes(4, "big") + good[5:]
    for value in [good, b"plain bytes", unknown, None]:
        p.produce(topic, key=b"k", value=value,
                  on_delivery=lambda err, msg: outcomes.append(err))
        check(p.flush(30) == 0, "not acknowledged")
    check(outcomes[0] is None, "a registered id refused: %s" % outcomes[0])
    for what, err in [("plain bytes", outcomes[1]), ("an unknown id", outcomes[2])]:
        check(err is not None and err.name() == "INVALID_RECORD",
              "%s answered %s, expected INVALID_RECORD" % (what, err))
    check(outcomes[3] is None, "a tombstone refused: %s" % outcomes[3])


def scenario_after_restart(bootstrap, url):
    """After a restart: the subjects, versions, ids and levels are still there, and the
    records written before decode."""
    client = SchemaRegistryClient({"url": url})
    check(sorted(client.get_subjects()) == ["json-value", "proto-value", SUBJECT, "validated-value"],
          "subjects after restart: %s" % client.get_subjects())
    check(client.get_versions(SUBJECT) == [1, 2], "versions after restart")
    check(client.get_compatibility(SUBJECT) == "FULL_TRANSITIVE", "level after restart")
    got = consume_all(bootstrap, client, 25)
    check(got[0] == {"id": 0, "name": "user-0"}, "first record after restart: %s" % got[0])
    print("OK after_restart", flush=True)


if __name__ == "__main__":
    globals()["scenario_" + sys.argv[1]](*sys.argv[2:])
