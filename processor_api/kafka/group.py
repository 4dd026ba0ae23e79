"""The application's consumer group: where its input progress is visible to Kafka tooling.

Tasks never join the group (Spark assigns the work); they commit offsets to it as a
simple, non-member client, the way lag dashboards and ``kafka-consumer-groups --describe``
expect: group ``<application.id>``, one committed offset per input topic-partition, the next
offset to process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from processor_api.errors import StreamsError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig

TopicPartitionKey = tuple[str, int]


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
        self._consumer = Consumer(
            client_config(
                bootstrap_servers,
                role,
                role="consumer",
                kafka=kafka,
                **{"group.id": group_id, "enable.auto.commit": False},
            )
        )

    def group_metadata(self) -> object:
        """What ``Producer.send_offsets_to_transaction`` needs to commit inside a transaction."""
        return self._consumer.consumer_group_metadata()

    def commit(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Commit ``offsets`` synchronously; a failure names the group and the broker."""
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=to_topic_partitions(offsets), asynchronous=False)
        except KafkaException as exc:
            raise StreamsError(
                f"committing offsets of consumer group {self.group_id!r} on "
                f"{self._bootstrap} failed: {exc.args[0] if exc.args else exc}"
            ) from exc

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
    consumer = Consumer(
        client_config(
            bootstrap_servers,
            "group-reader",
            role="consumer",
            kafka=kafka,
            **{"group.id": group_id, "enable.auto.commit": False},
        )
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
