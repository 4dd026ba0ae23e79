"""Schema Registry serdes in the test driver, each against confluent-kafka's in-process
``mock://`` registry and against the REST server of ``tests/harness/schema_registry.py`` (real
HTTP; no Confluent-compatible registry server installs here from the package registries).

Bytes written by ``confluent_kafka``'s own serializers are read by the topology, and what the
topology writes is read by ``confluent_kafka``'s deserializers.
"""

from __future__ import annotations

import socket
import uuid

import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from processor_api import Topology
from processor_api.errors import ConfigError, ProcessingError
from processor_api.schemas import client_for
from processor_api.serdes import Serdes
from processor_api.testing import TopologyTestDriver
from tests.harness.schemas import (
    USER_AVRO,
    build_topology,
    confluent_serdes,
    plain,
    user_of,
)

KINDS = ["avro", "json_schema", "protobuf"]


@pytest.fixture(params=["mock", "http"])
def registry_url(request) -> str:
    """A fresh, empty registry: confluent-kafka's ``mock://`` one or the test REST server."""
    if request.param == "mock":
        return f"mock://{uuid.uuid4().hex}"
    return request.getfixturevalue("schema_registry").new_url()


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_interoperate_with_confluent_kafka_serializers(kind, registry_url):
    url = registry_url
    client = client_for({"url": url})
    serializer, deserializer = confluent_serdes(kind, client)
    written = serializer(user_of(kind, 7, "ann"), SerializationContext("users", MessageField.VALUE))
    with TopologyTestDriver(build_topology(kind, registry=url)) as driver:
        source = driver.create_input_topic("users", Serdes.string(), Serdes.bytes())
        out = driver.create_output_topic("users-renamed", Serdes.string(), Serdes.bytes())
        source.pipe_input("k", written)
        raw = out.read_value()
        context = SerializationContext("users-renamed", MessageField.VALUE)
        assert plain(kind, deserializer(raw, context)) == {"id": 7, "name": "ANN"}
        assert plain(kind, driver.get_key_value_store("users").get("k")) == {
            "id": 7,
            "name": "ANN",
        }
    # TopicNameStrategy everywhere, the store's changelog included (as Kafka Streams does)
    assert set(client.get_subjects()) == {
        "users-value",
        "users-renamed-value",
        "topology-test-driver-users-changelog-value",
    }


@pytest.mark.parametrize("kind", KINDS)
def test_registry_comes_from_the_run_config_when_the_serde_names_none(kind, registry_url):
    url = registry_url
    config = {"schema.registry.url": url, "schema.registry.basic.auth.user.info": "u:p"}
    with TopologyTestDriver(build_topology(kind), config) as driver:
        driver.create_input_topic("users").pipe_input("k", user_of(kind, 1, "bo"))
        assert plain(kind, driver.create_output_topic("users-renamed").read_value()) == {
            "id": 1,
            "name": "BO",
        }
    assert (
        "users-renamed-value"
        in client_for({"url": url, "basic.auth.user.info": "u:p"}).get_subjects()
    )


def test_a_serde_without_registry_in_a_run_without_one_fails_naming_the_topic():
    with pytest.raises(ConfigError, match="avro serde for topic '.*' names no registry"):
        TopologyTestDriver(build_topology("avro"))


def test_unknown_registry_settings_are_refused_with_the_closest_known_one():
    with pytest.raises(ConfigError, match="did you mean 'schema.registry.basic.auth.user.info'"):
        TopologyTestDriver(build_topology("avro"), {"schema.registry.basic.auth.user": "u:p"})


def test_a_serde_without_schema_only_deserializes(registry_url):
    url = registry_url
    client = client_for({"url": url})
    serializer, _ = confluent_serdes("avro", client)
    topology = Topology()
    topology.add_source(
        "in", "users", key_serde=Serdes.string(), value_serde=Serdes.avro(registry=url)
    )
    topology.add_sink("out", "names", "in", key_serde=Serdes.string(), value_serde=Serdes.json())
    with TopologyTestDriver(topology) as driver:
        written = serializer(
            {"id": 3, "name": "cy"}, SerializationContext("users", MessageField.VALUE)
        )
        driver.create_input_topic("users", Serdes.string(), Serdes.bytes()).pipe_input("k", written)
        assert driver.create_output_topic("names").read_value() == {"id": 3, "name": "cy"}
    reader = Serdes.avro(registry=url).for_topic("users", False)
    with pytest.raises(ValueError, match="without a schema only deserializes"):
        reader.serialize({"id": 1, "name": "x"})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"{not avro}", r"magic byte 0x7b, expected 0x00"),
        (b"\x00\x00\x00\x03\xe7\x02\x02a", r"schema id 999"),
    ],
    ids=["wrong-magic-byte", "unknown-schema-id"],
)
def test_bad_data_goes_to_the_deserialization_handler_naming_subject_id_and_offset(
    data, expected, registry_url
):
    url = registry_url
    with TopologyTestDriver(build_topology("avro", registry=url)) as driver:
        source = driver.create_input_topic("users", Serdes.string(), Serdes.bytes())
        with pytest.raises(ProcessingError) as failure:
            source.pipe_input("k", data)
    message = str(failure.value)
    assert "subject 'users-value'" in message
    assert expected in message
    assert "topic=users" in message.replace("'", "") and "offset=0" in message
    config = {"default.deserialization.exception.handler": "log_and_continue"}
    with TopologyTestDriver(build_topology("avro", registry=url), config) as driver:
        source = driver.create_input_topic("users", Serdes.string(), Serdes.bytes())
        source.pipe_input("bad", data)
        driver.create_input_topic("users").pipe_input("good", {"id": 2, "name": "di"})
        assert driver.create_output_topic("users-renamed").read_key_values_to_list() == [
            ("good", {"id": 2, "name": "DI"})
        ]


def test_a_sink_with_a_topic_extractor_registers_under_each_topic_it_writes(registry_url):
    url = registry_url
    value = Serdes.avro(USER_AVRO, registry=url)
    topology = Topology()
    topology.add_source("in", "users", key_serde=Serdes.string(), value_serde=value)
    topology.add_sink(
        "out",
        lambda record: f"users-{record.key}",
        "in",
        key_serde=Serdes.string(),
        value_serde=value,
    )
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("users")
        source.pipe_input("a", {"id": 1, "name": "a"})
        source.pipe_input("b", {"id": 2, "name": "b"})
        out = driver.create_output_topic("users-b", Serdes.string(), value)
        assert out.read_value() == {"id": 2, "name": "b"}
    assert set(client_for({"url": url}).get_subjects()) == {
        "users-value",
        "users-a-value",
        "users-b-value",
    }


def test_a_global_store_is_bound_to_its_source_topics_subject(registry_url):
    client = client_for({"url": registry_url})
    serializer, _ = confluent_serdes("avro", client)
    listed = serializer(
        {"id": 5, "name": "eve"}, SerializationContext("directory", MessageField.VALUE)
    )
    topology = build_topology("avro", registry=registry_url, directory_topic="directory")
    with TopologyTestDriver(topology) as driver:
        directory = driver.create_input_topic("directory", Serdes.string(), Serdes.bytes())
        directory.pipe_input("k", listed)
        driver.create_input_topic("users").pipe_input("k", {"id": 5, "name": "x"})
        assert driver.create_output_topic("users-renamed").read_value() == {"id": 5, "name": "EVE"}
        assert driver.get_key_value_store("directory").get("k") == {"id": 5, "name": "eve"}
        with pytest.raises(ProcessingError) as failure:
            directory.pipe_input("j", b"{not avro}")
    assert "subject 'directory-value'" in str(failure.value)
    # the store writes under its source topic's subject (the topic is its changelog): no other
    assert set(client.get_subjects()) == {
        "directory-value",
        "users-value",
        "users-renamed-value",
        "topology-test-driver-users-changelog-value",
    }


def test_a_run_hands_its_registry_settings_to_the_executors(tmp_path):
    from processor_api.config import StreamsConfig
    from processor_api.spark.runner import TopologyRunner
    from processor_api.spark.settings import RunSettings

    registry = {
        "schema.registry.url": "http://r:8081",
        "schema.registry.basic.auth.user.info": "u:p",
    }
    settings = RunSettings(
        bootstrap_servers="h:1", application_id="app", state_dir=str(tmp_path), config=registry
    )
    spec = TopologyRunner(build_topology("avro"), settings)._job_spec(False)
    # the executors build their StreamsConfig from the job spec's config
    assert StreamsConfig.from_dict(spec.config).schema_registry == {
        "url": "http://r:8081",
        "basic.auth.user.info": "u:p",
    }


@pytest.fixture
def dead_registry() -> dict:
    """Settings of a registry nothing answers at (a loopback port just freed), no retries."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return {"url": f"http://127.0.0.1:{port}", "max.retries": 0}


def _outage_topology(where: str, dead: dict, mock: str) -> Topology:
    """users (string, bytes) -> pass -> users-renamed: the dead registry's serde reads the
    input (``deserialization``), is called by the processor (``processing``) or writes the
    output (``production``); ``mock`` is the registry the input was written with."""
    from processor_api import Processor

    dead_serde = Serdes.avro(USER_AVRO, registry=dead).for_topic("users", False)

    class _Pass(Processor):
        def init(self, context):
            self.context = context

        def process(self, record):
            if where == "processing":
                dead_serde.serialize(record.value)  # looks the schema up in the registry
            self.context.forward(record)

    topology = Topology()
    source = Serdes.avro(USER_AVRO, registry=dead if where == "deserialization" else mock)
    topology.add_source("in", "users", key_serde=Serdes.string(), value_serde=source)
    topology.add_processor("pass", _Pass, "in")
    sink = Serdes.avro(USER_AVRO, registry=dead if where == "production" else mock)
    topology.add_sink("out", "users-renamed", "pass", key_serde=Serdes.string(), value_serde=sink)
    return topology


@pytest.mark.parametrize(
    ("where", "handler"),
    [
        ("deserialization", "default.deserialization.exception.handler"),
        ("processing", "processing.exception.handler"),
        ("production", "production.exception.handler"),
    ],
)
def test_a_registry_outage_fails_the_task_whatever_the_handlers_say(where, handler, dead_registry):
    # a handler that continues would skip every record while the registry is down
    mock = f"mock://{uuid.uuid4().hex}"
    written = confluent_serdes("avro", client_for({"url": mock}))[0](
        user_of("avro", 7, "ann"), SerializationContext("users", MessageField.VALUE)
    )
    config = {handler: "log_and_continue"}
    with TopologyTestDriver(_outage_topology(where, dead_registry, mock), config) as driver:
        source = driver.create_input_topic("users", Serdes.string(), Serdes.bytes())
        with pytest.raises(ProcessingError) as failure:
            source.pipe_input("k", written)
    message = str(failure.value)
    assert "did not answer" in message and dead_registry["url"] in message
    assert "topic=users" in message.replace("'", "") and "offset=0" in message
