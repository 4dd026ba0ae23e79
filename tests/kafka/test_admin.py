"""Admin helpers against the embedded broker (and a closed port)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from processor_api.errors import BrokerUnavailableError, MissingTopicError, TopicMismatchError
from processor_api.kafka.admin import (
    TopicSpec,
    check_broker,
    ensure_topics,
    topic_partitions,
)
from processor_api.testing.embedded import free_port
from tests.harness.topics import uid


def _all_topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics)


@pytest.mark.integration
def test_check_broker_returns_metadata(kafka):
    metadata = check_broker(kafka.bootstrap_servers)
    assert len(metadata.brokers) == 1


def test_check_broker_on_closed_port_fails_fast_naming_the_address():
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=address):
        check_broker(address, timeout_s=1.5)
    assert time.monotonic() - started < 4


@pytest.mark.integration
def test_topic_partitions_counts(kafka):
    a, b = uid("adm-a"), uid("adm-b")
    kafka.create_topic(a, 3)
    kafka.create_topic(b, 1)
    assert topic_partitions(kafka.bootstrap_servers, [a, b]) == {a: 3, b: 1}


@pytest.mark.integration
def test_topic_partitions_names_missing_topics_without_creating_them(kafka):
    present, missing1, missing2 = uid("adm-p"), uid("adm-m1"), uid("adm-m2")
    kafka.create_topic(present, 2)
    with pytest.raises(MissingTopicError) as caught:
        topic_partitions(kafka.bootstrap_servers, [present, missing1, missing2])
    assert caught.value.topics == (missing1, missing2)
    assert missing1 in str(caught.value) and missing2 in str(caught.value)
    assert present not in caught.value.topics
    assert not {missing1, missing2} & _all_topics(kafka.bootstrap_servers)


@pytest.mark.integration
def test_ensure_topics_creates_compacted_changelogs_and_is_idempotent(kafka):
    changelog, plain = uid("app-store-changelog"), uid("adm-plain")
    specs = [(changelog, 4, {"cleanup.policy": "compact"}), TopicSpec(plain, 2)]
    created = ensure_topics(kafka.bootstrap_servers, specs)
    assert sorted(created) == sorted([changelog, plain])
    assert topic_partitions(kafka.bootstrap_servers, [changelog, plain]) == {
        changelog: 4,
        plain: 2,
    }
    metadata = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=5)
    assert all(p.leader >= 0 for p in metadata.topics[changelog].partitions.values())
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, changelog)]).values()
    assert future.result()["cleanup.policy"].value == "compact"

    assert ensure_topics(kafka.bootstrap_servers, specs) == []  # second time: nothing to do


@pytest.mark.integration
def test_ensure_topics_creates_only_the_missing_ones(kafka):
    existing, new = uid("adm-old"), uid("adm-new")
    kafka.create_topic(existing, 3)
    assert ensure_topics(kafka.bootstrap_servers, [(existing, 3, None), (new, 1, None)]) == [new]
    assert topic_partitions(kafka.bootstrap_servers, [new]) == {new: 1}


@pytest.mark.integration
def test_ensure_topics_rejects_a_partition_count_mismatch(kafka):
    name = uid("adm-mismatch")
    kafka.create_topic(name, 2)
    with pytest.raises(TopicMismatchError, match=rf"{name}.*2 partition\(s\) but 3 are required"):
        ensure_topics(kafka.bootstrap_servers, [(name, 3, {"cleanup.policy": "compact"})])


def test_ensure_topics_on_dead_broker_names_the_address():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerUnavailableError, match=address):
        ensure_topics(address, [("x", 1, None)], timeout_s=1)
