"""The Avro serde's fastavro path (``processor_api.schemas.avro_fast``) gives exactly what
``confluent_kafka``'s ``AvroSerializer``/``AvroDeserializer`` give, both ways, for seeded
random records of a schema using every Avro type; and it takes over after a subject's first
record (the first goes through confluent_kafka, which registers / fetches the schema).
"""

from __future__ import annotations

import json
import random
import uuid

import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor_api.schemas import client_for
from processor_api.schemas.avro_fast import FastAvroDeserializer
from processor_api.serdes import Serdes, SerializationError

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Everything",
        "namespace": "tests.fast",
        "fields": [
            {"name": "l", "type": "long"},
            {"name": "i", "type": "int"},
            {"name": "s", "type": "string"},
            {"name": "b", "type": "boolean"},
            {"name": "d", "type": "double"},
            {"name": "f", "type": "float"},
            {"name": "raw", "type": "bytes"},
            {"name": "maybe", "type": ["null", "string"], "default": None},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "list", "type": {"type": "array", "items": "long"}},
            {"name": "tags", "type": {"type": "map", "values": "string"}},
            {"name": "id", "type": {"type": "fixed", "name": "Id", "size": 4}},
            {
                "name": "inner",
                "type": {
                    "type": "record",
                    "name": "Inner",
                    "fields": [{"name": "n", "type": ["null", "long"]}],
                },
            },
        ],
    }
)
TEXT = "aZ09 éß€😀\u0000"


def _records(count: int, seed: int = 24) -> list[dict]:
    rng = random.Random(seed)

    def text() -> str:
        return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, 12)))

    return [
        {
            "l": rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(10**12), 10**12)]),
            "i": rng.randint(-(2**31), 2**31 - 1),
            "s": text(),
            "b": rng.random() < 0.5,
            "d": rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)]),
            "f": rng.choice([0.0, 0.5, -2.25]),
            "raw": rng.randbytes(rng.randint(0, 9)),
            "maybe": rng.choice([None, text()]),
            "kind": rng.choice(["A", "B"]),
            "list": [rng.randint(-(10**9), 10**9) for _ in range(rng.randint(0, 5))],
            "tags": {text(): text() for _ in range(rng.randint(0, 3))},
            "id": rng.randbytes(4),
            "inner": {"n": rng.choice([None, rng.randint(-5, 5)])},
        }
        for _ in range(count)
    ]


@pytest.fixture
def registry():
    url = f"mock://{uuid.uuid4().hex}"
    return url, client_for({"url": url})


def test_bytes_and_values_equal_confluent_kafkas_both_ways(registry):
    url, client = registry
    records = _records(400)
    ours = Serdes.avro(SCHEMA, registry=url).for_topic("everything", False)
    context = SerializationContext("everything", MessageField.VALUE)
    theirs_write = AvroSerializer(client, SCHEMA)
    theirs_read = AvroDeserializer(client)
    for record in records:
        written = ours.serialize(record)
        assert written == theirs_write(record, context)
        assert theirs_read(written, context) == record
        assert ours.deserialize(written) == record
    # a serde that only reads (its first record fetches the writer's schema by id)
    reader = Serdes.avro(registry=url).for_topic("everything", False)
    assert [reader.deserialize(theirs_write(r, context)) for r in records] == records


def test_confluent_kafka_handles_only_the_first_record_of_a_schema_id(registry):
    url, client = registry
    context = SerializationContext("everything", MessageField.VALUE)
    write = AvroSerializer(client, SCHEMA)
    read = AvroDeserializer(client)
    calls = []

    def counted(data, ctx):
        calls.append(data)
        return read(data, ctx)

    fast = FastAvroDeserializer(counted, client)
    records = _records(50, seed=7)
    assert [fast(write(r, context), context) for r in records] == records
    assert len(calls) == 1


def test_a_broken_record_of_a_known_schema_id_names_subject_and_id(registry):
    url, _ = registry
    serde = Serdes.avro(SCHEMA, registry=url).for_topic("everything", False)
    good = serde.serialize(_records(1)[0])
    assert serde.deserialize(good) == _records(1)[0]  # the schema id is known now
    schema_id = int.from_bytes(good[1:5], "big")
    with pytest.raises(
        SerializationError, match=rf"subject 'everything-value' \(schema id {schema_id}\)"
    ):
        serde.deserialize(good[:7])


def test_a_schema_with_data_contract_rules_stays_on_confluent_kafkas_path(registry):
    """A READ rule of the writer's schema runs for every record, not just the first."""
    from confluent_kafka.schema_registry import Rule, RuleKind, RuleMode, RuleSet, Schema
    from confluent_kafka.schema_registry.rule_registry import RuleRegistry
    from confluent_kafka.schema_registry.serde import RuleExecutor

    class Shout(RuleExecutor):
        def type(self) -> str:
            return "TEST_FAST_PATH_SHOUT"

        def transform(self, ctx, message):
            return {**message, "s": message["s"].upper()}

    RuleRegistry.register_rule_executor(Shout())
    url, client = registry
    rule = Rule(
        name="shout", doc=None, kind=RuleKind.TRANSFORM, mode=RuleMode.READ,
        type="TEST_FAST_PATH_SHOUT", tags=None, params=None, expr=None, on_success=None,
        on_failure=None, disabled=False,
    )  # fmt: skip
    ruled = Schema(SCHEMA, "AVRO", rule_set=RuleSet(migration_rules=[], domain_rules=[rule]))
    client.register_schema("ruled-value", ruled)
    context = SerializationContext("ruled", MessageField.VALUE)
    write = AvroSerializer(
        client, SCHEMA, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    reader = Serdes.avro(registry=url).for_topic("ruled", False)
    records = _records(5, seed=3)
    read = [reader.deserialize(write(r, context)) for r in records]
    assert read == [{**r, "s": r["s"].upper()} for r in records]
