"""What the embedded broker does with the fences a producer per worker could rely on.

Issue 35 item 3: with one transactional producer per worker instead of one per task, a task's
transactional id no longer fences a worker that lost the task. Kafka Streams' exactly_once_v2
(KIP-447) fences such a zombie with the consumer group metadata its producer sends in
``TxnOffsetCommit``: Apache Kafka's group coordinator refuses a stale generation
(``ILLEGAL_GENERATION``) or a member that is gone (``UNKNOWN_MEMBER_ID``), so the zombie's
transaction cannot commit. These probes record, through confluent-kafka, what Tansu does; the
designs are weighed on them in ``bench/NOTES-producer-per-worker.md``:

* Tansu validates no group metadata in ``TxnOffsetCommit``: a stale generation and a member that
  left the group commit their offsets with their transaction. An ``assign()`` consumer's
  metadata carries no member and no generation, and Apache Kafka accepts that in a transaction
  even on a group with members, so it fences nothing on either broker.
* ``init_transactions`` with the same transactional id fences the older producer on Tansu as
  on Kafka: its open transaction is aborted at once, records and group offsets. Its
  ``commit_transaction`` then gets no answer from Tansu (librdkafka's ``_TIMED_OUT``), where
  Kafka answers that the producer is fenced; a produce fails ``PRODUCER_FENCED`` on both.

What Tansu does with a transaction that outlives its ``transaction.timeout.ms`` (it stays open)
is in the note, not here: showing that something does not happen needs a fixed wait.

The fenced producer's commit waits ``WAIT_S`` for an answer that does not come, so these run
with the long scenarios (``make test-slow``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.harness.topics import uid
from tests.harness.wire import transaction_status

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WAIT_S = 30.0
#: Tansu answers a new group's first JoinGroup after about half the session timeout.
SESSION_TIMEOUT_MS = 6000
#: librdkafka's serialized ``consumer_group_metadata()`` starts with this, then the generation.
METADATA_MAGIC = b"CGMDv2:"


def generation_and_member(metadata: bytes) -> tuple[int, str]:
    """The generation and member id in librdkafka's serialized group metadata (magic, int32
    generation in host byte order, then the NUL-terminated group id and member id)."""
    assert metadata.startswith(METADATA_MAGIC), metadata
    start = len(METADATA_MAGIC)
    (generation,) = struct.unpack("=i", metadata[start : start + 4])
    _group, member = metadata[start + 4 :].split(b"\0")[:2]
    return generation, member.decode()


def group_member(bootstrap: str, group: str, topic: str) -> Consumer:
    """A consumer that joins ``group`` with ``subscribe()``, as a Kafka Streams thread does."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "max.poll.interval.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
        }
    )
    consumer.subscribe([topic])
    return consumer


def poll_until(consumers: Iterable[Consumer], done: Callable[[], bool], what: str) -> None:
    """Serve the members' group protocol until ``done()``, at most ``WAIT_S``."""
    members = list(consumers)
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g}s: {what}")
        for consumer in members:
            consumer.poll(0.1)


def transactional(bootstrap: str, transactional_id: str, **settings: Any) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **settings}
    )
    producer.init_transactions(WAIT_S)
    return producer


def commit_with_offsets(
    bootstrap: str, out: str, offsets: list[TopicPartition], metadata: bytes
) -> None:
    """One transaction: a record to ``out`` and ``offsets`` sent with ``metadata``."""
    producer = transactional(bootstrap, uid("probe"))
    producer.begin_transaction()
    producer.produce(out, value=b"x")
    producer.send_offsets_to_transaction(offsets, metadata, WAIT_S)
    producer.commit_transaction(WAIT_S)


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (found,) = reader.committed([TopicPartition(topic, partition)], timeout=WAIT_S)
    finally:
        reader.close()
    return found.offset


def last_record_status(bootstrap: str, topic: str) -> str:
    """Where partition 0's last data record stands: ``open``, ``committed``, ``aborted``."""
    statuses = transaction_status(bootstrap, topic, 0)
    return statuses[max(statuses)]


def test_a_stale_generations_offsets_commit_with_its_transaction(kafka):
    """Apache Kafka refuses this TxnOffsetCommit (ILLEGAL_GENERATION); Tansu commits it."""
    bootstrap, group, source, out = kafka.bootstrap_servers, uid("g"), uid("in"), uid("out")
    kafka.create_topic(source, 2)
    kafka.create_topic(out, 1)
    first = group_member(bootstrap, group, source)
    second = None
    try:
        poll_until([first], lambda: len(first.assignment()) == 2, "the first member's join")
        stale = first.consumer_group_metadata()
        stale_generation, member = generation_and_member(stale)
        second = group_member(bootstrap, group, source)
        both = [first, second]
        poll_until(
            both,
            lambda: (
                all(len(c.assignment()) == 1 for c in both)
                and generation_and_member(first.consumer_group_metadata())[0] > stale_generation
            ),
            "the rebalance after the second member joined",
        )
        assert generation_and_member(first.consumer_group_metadata())[1] == member

        commit_with_offsets(bootstrap, out, [TopicPartition(source, 0, 5)], stale)

        assert committed_offset(bootstrap, group, source, 0) == 5
    finally:
        for consumer in (first, second):
            if consumer is not None:
                consumer.close()


def test_a_departed_member_and_an_assign_consumer_commit_on_a_group_with_members(kafka):
    """Apache Kafka refuses the departed member (UNKNOWN_MEMBER_ID) and accepts the
    ``assign()`` consumer (no member, generation -1: a transactional commit is let through);
    Tansu commits both."""
    bootstrap, group, source, out = kafka.bootstrap_servers, uid("g"), uid("in"), uid("out")
    kafka.create_topic(source, 1)
    kafka.create_topic(out, 1)
    departed = group_member(bootstrap, group, source)
    poll_until([departed], lambda: len(departed.assignment()) == 1, "the first member's join")
    departed_metadata = departed.consumer_group_metadata()
    departed.close()
    member = group_member(bootstrap, group, source)
    assigned = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        poll_until([member], lambda: len(member.assignment()) == 1, "the second member's join")
        assigned.assign([TopicPartition(source, 0)])
        assigned_metadata = assigned.consumer_group_metadata()
        assert generation_and_member(assigned_metadata) == (-1, "")

        commit_with_offsets(bootstrap, out, [TopicPartition(source, 0, 3)], departed_metadata)
        assert committed_offset(bootstrap, group, source, 0) == 3

        commit_with_offsets(bootstrap, out, [TopicPartition(source, 0, 4)], assigned_metadata)
        assert committed_offset(bootstrap, group, source, 0) == 4
    finally:
        member.close()
        assigned.close()


def test_init_transactions_of_the_same_id_aborts_the_old_producers_transaction(kafka):
    bootstrap, group, source, out = kafka.bootstrap_servers, uid("g"), uid("in"), uid("out")
    kafka.create_topic(source, 1)
    kafka.create_topic(out, 1)
    metadata = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        group_metadata = metadata.consumer_group_metadata()
    finally:
        metadata.close()
    earlier = [TopicPartition(source, 0, 2)]
    commit_with_offsets(bootstrap, out, earlier, group_metadata)  # the task's last commit
    transactional_id = uid("worker")
    zombie = transactional(bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(out, value=b"zombie")
    zombie.send_offsets_to_transaction([TopicPartition(source, 0, 7)], group_metadata, WAIT_S)
    zombie.flush(WAIT_S)
    assert last_record_status(bootstrap, out) == "open"

    transactional(bootstrap, transactional_id)  # the new owner's producer

    deadline = time.monotonic() + WAIT_S
    while (ended := last_record_status(bootstrap, out)) == "open":
        assert time.monotonic() < deadline, "the zombie's transaction is still open"
        time.sleep(0.05)
    try:
        zombie.commit_transaction(WAIT_S)
        commit = "committed"
    except KafkaException as exc:
        commit = exc.args[0].name()
    assert {
        "zombie's records": ended,
        "zombie's commit": commit,
        "group offset": committed_offset(bootstrap, group, source, 0),
    } == {"zombie's records": "aborted", "zombie's commit": "_TIMED_OUT", "group offset": 2}
