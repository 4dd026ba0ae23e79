"""end_offsets / beginning_offsets, including the Tansu ListOffsets deviation they work around."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from processor_api.errors import MissingTopicError, StreamsError
from processor_api.kafka.offsets import beginning_offsets, end_offsets
from tests.harness.topics import uid


def _produce_batches(bootstrap: str, topic: str, partition: int, batches: list[int]) -> None:
    """Produce ``batches[i]`` records as one record batch each (flush between batches)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
    for size in batches:
        for i in range(size):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=partition)
        assert producer.flush(10) == 0


def _raw_list_offsets_latest(bootstrap: str, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()}).values()
    return future.result().offset


@pytest.mark.integration
def test_tansu_list_offsets_reports_last_batch_base_plus_one(kafka):
    """Documents the deviation the workaround exists for (fails once Tansu is fixed)."""
    topic = uid("off-dev")
    kafka.create_topic(topic, 1)
    _produce_batches(kafka.bootstrap_servers, topic, 0, [10, 5])
    assert _raw_list_offsets_latest(kafka.bootstrap_servers, topic, 0) == 11  # Kafka: 15
    assert end_offsets(kafka.bootstrap_servers, [(topic, 0)]) == {(topic, 0): 15}


@pytest.mark.integration
def test_end_offsets_of_several_partitions_and_batch_layouts(kafka):
    topic = uid("off-multi")
    kafka.create_topic(topic, 4)
    _produce_batches(kafka.bootstrap_servers, topic, 0, [10, 5])
    _produce_batches(kafka.bootstrap_servers, topic, 1, [7])
    _produce_batches(kafka.bootstrap_servers, topic, 2, [1, 1, 1])
    partitions = [(topic, p) for p in range(4)]
    expected = {(topic, 0): 15, (topic, 1): 7, (topic, 2): 3, (topic, 3): 0}
    assert end_offsets(kafka.bootstrap_servers, partitions) == expected
    assert (
        end_offsets(kafka.bootstrap_servers, partitions, isolation_level="read_committed")
        == expected
    )
    assert beginning_offsets(kafka.bootstrap_servers, partitions) == dict.fromkeys(partitions, 0)


@pytest.mark.integration
def test_end_offsets_accepts_topic_partitions_and_a_config_dict(kafka):
    topic = uid("off-cfg")
    kafka.create_topic(topic, 2)
    _produce_batches(kafka.bootstrap_servers, topic, 1, [3, 4])
    result = end_offsets(
        {"bootstrap.servers": kafka.bootstrap_servers},
        [TopicPartition(topic, 1), TopicPartition(topic, 0)],
    )
    assert result == {(topic, 1): 7, (topic, 0): 0}
    assert list(result) == [(topic, 1), (topic, 0)]  # in the order asked


@pytest.mark.integration
def test_end_offsets_follow_new_records(kafka):
    topic = uid("off-grow")
    kafka.create_topic(topic, 1)
    _produce_batches(kafka.bootstrap_servers, topic, 0, [4])
    assert end_offsets(kafka.bootstrap_servers, [(topic, 0)]) == {(topic, 0): 4}
    _produce_batches(kafka.bootstrap_servers, topic, 0, [6, 2])
    assert end_offsets(kafka.bootstrap_servers, [(topic, 0)]) == {(topic, 0): 12}


@pytest.mark.integration
def test_read_committed_end_stops_at_an_open_transaction(kafka):
    topic = uid("off-txn")
    kafka.create_topic(topic, 1)
    _produce_batches(kafka.bootstrap_servers, topic, 0, [3])  # offsets 0..2
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "transactional.id": uid("off-tid"),
            "linger.ms": 5,
        }
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    for _ in range(4):
        producer.produce(topic, value=b"open", partition=0)  # offsets 3..6, uncommitted
    assert producer.flush(10) == 0
    key = (topic, 0)
    assert end_offsets(kafka.bootstrap_servers, [key]) == {key: 7}
    assert end_offsets(kafka.bootstrap_servers, [key], isolation_level="read_committed") == {key: 3}
    producer.commit_transaction(10)  # commit marker at offset 7
    assert end_offsets(kafka.bootstrap_servers, [key]) == {key: 8}
    assert end_offsets(kafka.bootstrap_servers, [key], isolation_level="read_committed") == {key: 8}


@pytest.mark.integration
def test_many_partitions_in_bounded_time(kafka):
    topic = uid("off-many")
    kafka.create_topic(topic, 48)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 20})
    for i in range(48 * 20):
        producer.produce(topic, value=b"x", partition=i % 48)
    assert producer.flush(10) == 0
    partitions = [(topic, p) for p in range(48)]
    started = time.monotonic()
    result = end_offsets(kafka.bootstrap_servers, partitions, timeout_s=10)
    assert time.monotonic() - started < 3
    assert result == dict.fromkeys(partitions, 20)


@pytest.mark.integration
def test_missing_topic_or_partition_is_named_and_not_created(kafka):
    topic, missing = uid("off-present"), uid("off-missing")
    kafka.create_topic(topic, 2)
    with pytest.raises(MissingTopicError, match=missing):
        end_offsets(kafka.bootstrap_servers, [(topic, 0), (missing, 0)])
    with pytest.raises(MissingTopicError, match=rf"{topic}\[5\] \(topic has 2\)"):
        end_offsets(kafka.bootstrap_servers, [(topic, 5)])
    with pytest.raises(MissingTopicError, match=missing):
        beginning_offsets(kafka.bootstrap_servers, [(missing, 0)])
    topics = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=5)
    assert missing not in topics.topics


@pytest.mark.integration
def test_unknown_isolation_level_is_rejected(kafka):
    with pytest.raises(StreamsError, match="read_commited"):
        end_offsets(kafka.bootstrap_servers, [("t", 0)], isolation_level="read_commited")


def test_empty_request_needs_no_broker():
    assert end_offsets("127.0.0.1:1", []) == {}
    assert beginning_offsets("127.0.0.1:1", []) == {}
