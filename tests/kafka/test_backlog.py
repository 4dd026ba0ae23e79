"""A group's backlog on the embedded broker: committed offsets against high watermarks and last
stable offsets, and waiting for records held back by an open transaction."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from processor_api.kafka.backlog import PartitionBacklog, group_backlog, wait_until_readable
from tests.harness.topics import uid

pytestmark = pytest.mark.integration


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _open_transaction(bootstrap: str, topic: str) -> Producer:
    """Three committed records (offsets 0-2, marker 3), then two in an open transaction (4-5)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": uid("backlog-tid")})
    producer.init_transactions(10)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(10)
    producer.begin_transaction()
    for _ in range(2):
        producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(10) == 0
    return producer


def test_a_backlog_past_an_open_transaction_is_not_readable_until_it_commits(kafka):
    topic, group = uid("backlog"), uid("backlog-group")
    kafka.create_topic(topic, 1)
    producer = _open_transaction(kafka.bootstrap_servers, topic)
    _commit(kafka.bootstrap_servers, group, topic, 4)  # read up to the open transaction

    (held,) = group_backlog(kafka.bootstrap_servers, group, [(topic, 0)], "read_committed")
    assert held == PartitionBacklog(topic, 0, committed=4, end=6, stable_end=4)
    assert not held.readable and held.records == 2
    assert "an open transaction from offset 4" in held.describe()
    (uncommitted,) = group_backlog(kafka.bootstrap_servers, group, [(topic, 0)], "read_uncommitted")
    assert uncommitted.readable  # a read_uncommitted reader is not held back

    still = wait_until_readable(kafka.bootstrap_servers, group, [held], timeout_s=0.5)
    assert still == [held]  # the transaction is still open when the wait gives up

    committer = threading.Thread(target=producer.commit_transaction, args=(10,))
    committer.start()
    try:
        (now,) = wait_until_readable(kafka.bootstrap_servers, group, [held], timeout_s=30)
    finally:
        committer.join()
    assert now.readable and now.stable_end == now.end == 7  # the commit marker is offset 6


def test_a_group_at_the_end_has_no_backlog(kafka):
    topic, group = uid("backlog-none"), uid("backlog-group")
    kafka.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for _ in range(3):
        producer.produce(topic, value=b"x", partition=0)
    assert producer.flush(10) == 0
    _commit(kafka.bootstrap_servers, group, topic, 3)
    partitions = [(topic, 0), (topic, 1)]  # the second one is empty, never committed
    assert group_backlog(kafka.bootstrap_servers, group, partitions, "read_committed") == []
    _commit(kafka.bootstrap_servers, group, topic, 1)
    (behind,) = group_backlog(kafka.bootstrap_servers, group, partitions, "read_committed")
    assert (behind.committed, behind.end, behind.readable) == (1, 3, True)
