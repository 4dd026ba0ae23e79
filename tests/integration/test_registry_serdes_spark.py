"""Schema Registry serdes on Spark (issue 24): Avro in, Avro out, an Avro store and an Avro
global store, with the registry given by the run's ``--config schema.registry.url=...``; JSON
Schema and Protobuf in and out.

The registry is the REST server of ``tests/harness/schema_registry.py`` (fixture
``schema_registry``): real HTTP, which Spark's Python workers and the task host processes reach
like any registry (``mock://`` lives in one process only). Input bytes are written by
``confluent_kafka``'s own serializers; what the run writes (output and changelog) is read
back with its deserializers, on a client of their own; the store is then read with
``read_store`` and the ``read-store`` command, with the registry from their settings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor_api import read_store
from processor_api.errors import ConfigError
from processor_api.kafka.names import changelog_topic
from processor_api.spark.runner import TopologyRunner
from tests.harness.processes import REPO_ROOT, cli_environment
from tests.harness.runs import settings_for
from tests.harness.schemas import USER_AVRO, confluent_serdes, plain, user_of
from tests.harness.topics import produce, read_topic, uid

pytestmark = pytest.mark.integration

TOPOLOGY = "tests.harness.schemas:build_topology"
PARTITIONS = 2
USERS = {f"k{i}": {"id": i, "name": f"user {i}"} for i in range(10)}
LISTED = {"k3": {"id": 3, "name": "listed three"}, "k7": {"id": 7, "name": "listed seven"}}
#: Schema Registry framing with schema id 999999, which no registry here has.
UNKNOWN_ID_RECORD = b"\x00" + (999999).to_bytes(4, "big") + b"\x02\x02a"


def _expected() -> dict[str, dict[str, Any]]:
    """The last user per key the run writes (directory names win), upper-cased."""
    out = {}
    for key, user in USERS.items():
        name = LISTED.get(key, user)["name"]
        out[key] = {"id": user["id"], "name": name.upper()}
    return out


@pytest.fixture(scope="module")
def avro_app(kafka, spark, schema_registry, tmp_path_factory) -> dict[str, Any]:
    """The Avro topology run to the end of its input (available-now), then stopped."""
    run_id = uid()
    app: dict[str, Any] = {
        "bootstrap": kafka.bootstrap_servers,
        "app_id": f"avro-{run_id}",
        "registry": schema_registry.new_url(),
        "kwargs": {
            "kind": "avro",
            "input_topic": f"users-{run_id}",
            "output_topic": f"users-renamed-{run_id}",
            "directory_topic": f"directory-{run_id}",
        },
    }
    topics = app["kwargs"]
    kafka.create_topic(topics["input_topic"], PARTITIONS)
    kafka.create_topic(topics["output_topic"], PARTITIONS)
    kafka.create_topic(topics["directory_topic"], 1)
    serialize = AvroSerializer(SchemaRegistryClient({"url": app["registry"]}), USER_AVRO)

    def encoded(topic: str, users: dict[str, dict]) -> list[tuple[bytes, bytes, int]]:
        context = SerializationContext(topic, MessageField.VALUE)
        return [
            (key.encode(), serialize(user, context), int(key[1:]) % PARTITIONS)
            for key, user in users.items()
        ]

    directory = [(k, v, 0) for k, v, _ in encoded(topics["directory_topic"], LISTED)]
    produce(app["bootstrap"], topics["directory_topic"], directory)
    users = encoded(topics["input_topic"], USERS)
    users.insert(3, (b"bad", UNKNOWN_ID_RECORD, 0))
    produce(app["bootstrap"], topics["input_topic"], users)
    app["dead_letters"] = f"avro-dlq-{run_id}"
    settings = settings_for(
        app["bootstrap"],
        app["app_id"],
        tmp_path_factory.mktemp("avro-run"),
        available_now=True,
        config={
            "schema.registry.url": app["registry"],
            "default.deserialization.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": app["dead_letters"],
        },
    )
    TopologyRunner(TOPOLOGY, settings, topology_kwargs=topics, spark=spark).run()
    return app


def _decoded(app: dict[str, Any], topic: str) -> list[tuple[str, dict[str, Any] | None]]:
    """``(key, value)`` of every record of ``topic``, values by confluent's deserializer."""
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": app["registry"]}))
    context = SerializationContext(topic, MessageField.VALUE)
    return [
        (record.key.decode(), deserialize(record.value, context))
        for record in read_topic(app["bootstrap"], topic)
    ]


def test_avro_in_and_out_on_spark_read_by_confluents_deserializer(avro_app):
    out = _decoded(avro_app, avro_app["kwargs"]["output_topic"])
    assert sorted(key for key, _ in out) == sorted(USERS)
    assert dict(out) == _expected()


def test_a_record_of_an_unknown_schema_id_is_a_dead_letter_naming_subject_and_id(avro_app):
    (letter,) = read_topic(avro_app["bootstrap"], avro_app["dead_letters"])
    assert (letter.key, letter.value) == (b"bad", UNKNOWN_ID_RECORD)
    headers = {k: v.decode() for k, v in letter.headers or [] if v is not None}
    subject = f"{avro_app['kwargs']['input_topic']}-value"
    assert f"subject {subject!r} (schema id 999999)" in headers["__streams.errors.message"]
    assert headers["__streams.errors.topic"] == avro_app["kwargs"]["input_topic"]
    assert (headers["__streams.errors.partition"], headers["__streams.errors.offset"]) == ("0", "2")


def test_the_store_changelog_is_avro_under_the_changelog_topics_subject(avro_app, schema_registry):
    changelog = changelog_topic(avro_app["app_id"], "users")
    topics = avro_app["kwargs"]
    assert schema_registry.subjects(avro_app["registry"]) == sorted(
        [
            f"{topics['directory_topic']}-value",
            f"{topics['input_topic']}-value",
            f"{topics['output_topic']}-value",
            f"{changelog}-value",
        ]
    )
    assert dict(_decoded(avro_app, changelog)) == _expected()


def test_read_store_decodes_the_avro_store_with_the_registry_given(avro_app):
    app = avro_app

    def read(**registry: Any) -> dict[str, Any]:
        entries = read_store(
            app["bootstrap"], app["app_id"], TOPOLOGY, "users",
            topology_kwargs=app["kwargs"], **registry,
        )  # fmt: skip
        return {entry.key: entry.value for entry in entries}

    assert read(registry={"url": app["registry"]}) == _expected()
    with pytest.raises(ConfigError, match="schema.registry.url"):
        read()


def _cli(app: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    topology_args = [f"--topology-arg={k}={v}" for k, v in app["kwargs"].items()]
    return subprocess.run(
        [
            sys.executable, "-m", "processor_api.cli.read_store",
            "--bootstrap-servers", app["bootstrap"],
            "--application-id", app["app_id"],
            "--topology", TOPOLOGY, *topology_args, "users", *args,
        ],
        cwd=REPO_ROOT, env=cli_environment(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_read_store_command_takes_the_registry_from_config(avro_app):
    result = _cli(avro_app, "--config", f"schema.registry.url={avro_app['registry']}")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {row["key"]: row["value"] for row in rows} == _expected()
    assert {row["partition"] for row in rows} == set(range(PARTITIONS))

    missing = _cli(avro_app)
    assert missing.returncode == 2
    assert "schema.registry.url" in missing.stderr


@pytest.mark.parametrize("kind", ["json_schema", "protobuf"])
def test_json_schema_and_protobuf_in_and_out_on_spark(
    kind, kafka, spark, schema_registry, tmp_path_factory
):
    run_id = uid()
    registry = schema_registry.new_url()
    topics = {"input_topic": f"users-{run_id}", "output_topic": f"users-renamed-{run_id}"}
    kafka.create_topic(topics["input_topic"], PARTITIONS)
    kafka.create_topic(topics["output_topic"], PARTITIONS)
    serialize, _ = confluent_serdes(kind, SchemaRegistryClient({"url": registry}))
    context = SerializationContext(topics["input_topic"], MessageField.VALUE)
    records = [
        (key.encode(), serialize(user_of(kind, user["id"], user["name"]), context), n % 2)
        for n, (key, user) in enumerate(USERS.items())
    ]
    produce(kafka.bootstrap_servers, topics["input_topic"], records)
    settings = settings_for(
        kafka.bootstrap_servers,
        f"{kind}-{run_id}",
        tmp_path_factory.mktemp(f"{kind}-run"),
        available_now=True,
        config={"schema.registry.url": registry},
    )
    TopologyRunner(TOPOLOGY, settings, topology_kwargs={"kind": kind, **topics}, spark=spark).run()

    _, deserialize = confluent_serdes(kind, SchemaRegistryClient({"url": registry}))
    out_context = SerializationContext(topics["output_topic"], MessageField.VALUE)
    out = {
        record.key.decode(): plain(kind, deserialize(record.value, out_context))
        for record in read_topic(kafka.bootstrap_servers, topics["output_topic"])
    }
    assert out == {k: {"id": u["id"], "name": u["name"].upper()} for k, u in USERS.items()}
    assert f"{kind}-{run_id}-users-changelog-value" in schema_registry.subjects(registry)
