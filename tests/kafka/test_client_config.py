"""User Kafka client settings reach every client the runtime makes, per role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from processor_api.cli.run_topology import build_parser
from processor_api.errors import BrokerUnavailableError, ConfigError
from processor_api.kafka import admin, group, markers, offsets, producer, reader, transactions
from processor_api.kafka.client_config import KafkaClientConfig, parse_properties
from processor_api.kafka.names import changelog_topic

SETTINGS = {
    "client.id": "ops-run",  # every client
    "socket.timeout.ms": "31000",  # every client, overridden for consumers below
    "consumer.socket.timeout.ms": "32000",
    "producer.linger.ms": "17",
    "admin.client.id": "ops-admin",
    "fetch.wait.max.ms": "250",  # consumer-only property, unprefixed: consumers only
}


@pytest.fixture(scope="module")
def kafka_config() -> KafkaClientConfig:
    return KafkaClientConfig.from_dict(SETTINGS)


def test_for_role_applies_prefixes_over_unprefixed_keys(kafka_config):
    assert kafka_config.for_role("consumer") == {
        "client.id": "ops-run",
        "socket.timeout.ms": "32000",
        "fetch.wait.max.ms": "250",
    }
    assert kafka_config.for_role("producer") == {
        "client.id": "ops-run",
        "socket.timeout.ms": "31000",
        "linger.ms": "17",
    }
    assert kafka_config.for_role("admin") == {
        "client.id": "ops-admin",
        "socket.timeout.ms": "31000",
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bogus.key": "1"}, 'No such configuration property: "bogus.key"'),
        ({"security.protocol": "SSLX"}, 'Invalid value "SSLX"'),
        ({"producer.fetch.wait.max.ms": "1"}, "does not use 'fetch.wait.max.ms' for producer"),
        ({"bootstrap.servers": "h:1"}, "--bootstrap-servers"),
        ({"consumer.group.id": "g"}, "never join a consumer group"),
        ({"isolation.level": "read_committed"}, "--processing-guarantee"),
        ({"ssl.truststore.location": "/x.jks"}, "ssl.ca.location"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings, message):
    with pytest.raises(ConfigError, match=None) as raised:
        KafkaClientConfig.from_dict(settings)
    assert message in str(raised.value)


def test_secrets_are_masked_in_messages():
    config = KafkaClientConfig.from_dict(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "hunter2",
        }
    )
    assert "hunter2" not in config.describe() and "sasl.password=***" in config.describe()


def test_java_jaas_config_becomes_username_and_password():
    config = KafkaClientConfig.from_dict(
        {
            "security.protocol": "SASL_SSL",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="alice" password="s3cret";',
        }
    )
    role = config.for_role("producer")
    assert (role["sasl.username"], role["sasl.password"], role["sasl.mechanism"]) == (
        "alice",
        "s3cret",
        "PLAIN",
    )


def test_properties_format():
    text = (
        "# comment\n"
        "! also a comment\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : PLAIN\n"
        "client.id   ops\n"
        "sasl.username = a\\\n"
        "      lice\n"
        "path=C:\\\\certs\\\\ca.pem\n"
        "unicode=\\u0041B\n"
        "empty=\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "client.id": "ops",
        "sasl.username": "alice",
        "path": "C:\\certs\\ca.pem",
        "unicode": "AB",
        "empty": "",
    }


def test_cli_flags_merge_file_then_pairs(tmp_path: Path):
    from processor_api.cli.run_topology import _check_arguments

    props = tmp_path / "client.properties"
    props.write_text("client.id=from-file\nsocket.timeout.ms=30000\n")
    args = build_parser().parse_args(
        [
            "m:f",
            "--bootstrap-servers",
            "h:1",
            "--kafka-config-file",
            str(props),
            "--kafka-config",
            "client.id=from-flag",
        ]
    )
    _, kafka = _check_arguments(args)
    assert kafka == {"client.id": "from-flag", "socket.timeout.ms": "30000"}


# ------------------------------------------------------------------ every client builder
class _Recorder:
    """Stands in for a confluent-kafka client class: records the config, then stops."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        self.configs = configs

    def __call__(self, config: dict[str, Any]) -> Any:
        self.configs.append(dict(config))
        raise _Built


class _Built(Exception):
    pass


@pytest.fixture
def built(monkeypatch) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = []
    recorder = _Recorder(configs)
    for module, names in (
        (admin, ["AdminClient"]),
        (producer, ["Producer"]),
        (reader, ["Consumer"]),
        (group, ["Consumer"]),
        (offsets, ["AdminClient", "Consumer"]),
    ):
        for name in names:
            monkeypatch.setattr(module, name, recorder)
    monkeypatch.setattr(markers, "end_offsets", lambda *a, **k: {("t", 0): 10})
    return configs


def _build(call) -> dict[str, Any]:
    with pytest.raises(_Built):
        call()
    return {}


def _roles_seen(configs: list[dict[str, Any]]) -> list[str]:
    out = []
    for config in configs:
        if config.get("client.id") == "ops-admin":
            out.append("admin")
        elif config.get("socket.timeout.ms") == "32000" and config.get("fetch.wait.max.ms"):
            out.append("consumer")
        elif config.get("linger.ms") == "17":
            out.append("producer")
        else:
            out.append("none")
    return out


def test_every_client_builder_gets_the_settings_of_its_role(built, kafka_config):
    k = kafka_config
    _build(lambda: admin.check_broker("h:1", kafka=k))
    _build(lambda: admin.topic_partitions("h:1", ["t"], kafka=k))
    _build(lambda: admin.ensure_topics("h:1", [("t", 1)], kafka=k))
    _build(lambda: producer.make_producer("h:1", kafka=k))
    _build(lambda: producer.make_producer("h:1", transactional_id="app-0_0", kafka=k))
    _build(
        lambda: transactions.TransactionalProducers("h:1", kafka=k).for_task(
            "app", "0_0", Path("/nonexistent-ops-test")
        )
    )
    _build(
        lambda: reader.PartitionReader("h:1", "task-0_0", isolation_level="read_committed", kafka=k)
    )
    _build(
        lambda: reader.read_changelog(
            "h:1", changelog_topic("app", "s"), 0, 0, 5, lambda batch: None, kafka=k
        )
    )
    _build(lambda: markers.read_latest_marker("h:1", "t", 0, 0, "0_0", kafka=k))
    _build(lambda: group.GroupCommitter("h:1", "app", "group-0_0", kafka=k))
    _build(lambda: group.committed_offsets("h:1", "app", [("t", 0)], kafka=k))
    _build(lambda: offsets.end_offsets("h:1", [("t", 0)], kafka=k))
    _build(lambda: offsets.beginning_offsets("h:1", [("t", 0)], kafka=k))
    assert _roles_seen(built) == [
        "admin",  # check_broker
        "admin",  # topic_partitions
        "admin",  # ensure_topics
        "producer",  # task producer
        "producer",  # transactional producer
        "producer",  # TransactionalProducers
        "consumer",  # task input reader
        "consumer",  # changelog restore
        "consumer",  # commit marker reader
        "consumer",  # consumer-group committer
        "consumer",  # consumer-group reader (resume)
        "admin",  # offset look-up (ListOffsets)
        "admin",  # offset look-up (ListOffsets)
    ]
    # the runtime's own keys still win over the user's
    marker_reader = built[8]
    assert marker_reader["isolation.level"] == "read_committed"
    assert built[4]["transactional.id"] == "app-0_0"


def test_user_settings_override_the_runtime_defaults_but_not_its_required_keys(built):
    k = KafkaClientConfig.from_dict({"producer.linger.ms": "50", "producer.acks": "1"})
    _build(lambda: producer.make_producer("h:1", kafka=k))
    (config,) = built
    assert config["linger.ms"] == "50" and config["acks"] == "1"
    assert config["enable.idempotence"] is True


def test_job_spec_carries_the_settings_to_the_executors():
    import pickle

    from processor_api.runtime.job import JobSpec

    spec = JobSpec(
        "r", None, {}, None, "h:1", "/s", {}, kafka=KafkaClientConfig.from_dict(SETTINGS)
    )
    assert pickle.loads(pickle.dumps(spec)).kafka.for_role("producer")["linger.ms"] == "17"


def test_unreachable_broker_error_names_address_cause_and_settings():
    config = KafkaClientConfig.from_dict({"security.protocol": "SSL", "client.id": "x"})
    with pytest.raises(BrokerUnavailableError) as raised:
        admin.check_broker("127.0.0.1:1", timeout_s=1.0, kafka=config)
    text = str(raised.value)
    assert "127.0.0.1:1" in text and "security.protocol=SSL" in text
