"""The application's consumer group: where its input progress is visible to Kafka tooling.

Tasks never join the group (Spark assigns the work); they commit offsets to it as a
simple, non-member client, the way lag dashboards and ``kafka-consumer-groups --describe``
expect: group ``<application.id>``, one committed offset per input topic-partition, the next
offset to process.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from processor_api.errors import StreamsError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig

TopicPartitionKey = tuple[str, int]


#: How long each wait for the answer to an offset commit polls: the answer is seen within this.
COMMIT_POLL_STEP_S = 0.002


class GroupCommitter:
    """Commits a task's input positions to the application's consumer group."""

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        role: str,
        *,
        kafka: KafkaClientConfig | None = None,
    ) -> None:
        self.group_id = group_id
        self._bootstrap = bootstrap_servers
        self._results: list[tuple[KafkaError | None, Any]] = []
        settings: dict[str, Any] = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "on_commit": lambda error, partitions: self._results.append((error, partitions)),
        }
        self._consumer = Consumer(
            client_config(bootstrap_servers, role, role="consumer", kafka=kafka, **settings)
        )

    def group_metadata(self) -> object:
        """What ``Producer.send_offsets_to_transaction`` needs to commit inside a transaction."""
        return self._consumer.consumer_group_metadata()

    def commit(self, offsets: Mapping[TopicPartitionKey, int], timeout_s: float = 30.0) -> None:
        """Commit ``offsets`` and wait for the answer, at most ``timeout_s``; a failure names
        the group and the broker (a synchronous commit would wait for an unreachable
        coordinator without a bound: 46 s measured, then ``_WAIT_COORD``)."""
        if not offsets:
            return
        self._results.clear()
        try:
            self._consumer.commit(offsets=to_topic_partitions(offsets), asynchronous=True)
            deadline = time.monotonic() + timeout_s
            while not self._results:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaException(
                        KafkaError(KafkaError._TIMED_OUT, "no answer to the offset commit")
                    )
                # serves the on_commit callback; poll() returns only at its timeout (a
                # consumer without partitions gets no message), so the step is short
                self._consumer.poll(min(COMMIT_POLL_STEP_S, remaining))
        except KafkaException as exc:
            raise self._failed(exc.args[0] if exc.args else exc) from exc
        error, partitions = self._results[0]
        failed = [tp.error for tp in partitions or [] if tp.error is not None]
        if error is not None or failed:
            cause = error if error is not None else failed[0]
            raise self._failed(cause) from KafkaException(cause)

    def _failed(self, cause: object) -> StreamsError:
        return StreamsError(
            f"committing offsets of consumer group {self.group_id!r} on {self._bootstrap} "
            f"failed: {cause}"
        )

    def close(self) -> None:
        """Close the client (it never joined the group, so nothing is revoked)."""
        self._consumer.close()


def to_topic_partitions(offsets: Mapping[TopicPartitionKey, int]) -> list[TopicPartition]:
    """``{(topic, partition): offset}`` as confluent-kafka ``TopicPartition``s."""
    return [
        TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()
    ]


def committed_offsets(
    bootstrap_servers: str,
    group_id: str,
    partitions: Iterable[TopicPartitionKey],
    timeout_s: float = 30.0,
    *,
    kafka: KafkaClientConfig | None = None,
) -> dict[TopicPartitionKey, int]:
    """The group's committed offset of each partition that has one."""
    wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
    if not wanted:
        return {}
    settings: dict[str, Any] = {"group.id": group_id, "enable.auto.commit": False}
    consumer = Consumer(
        client_config(bootstrap_servers, "group-reader", role="consumer", kafka=kafka, **settings)
    )
    try:
        found = consumer.committed(wanted, timeout=timeout_s)
    except KafkaException as exc:
        raise StreamsError(
            f"reading the committed offsets of consumer group {group_id!r} on "
            f"{bootstrap_servers} failed: {exc.args[0] if exc.args else exc}"
        ) from exc
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
