"""Kafka messages as the engine's input records (tasks and global stores), and what a task
keeps of its polled input: the check that keeps aborted repartition records out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from processor_api.engine.records import InputRecord, MessageBatch, input_record
from processor_api.errors import StreamsError
from processor_api.kafka.batch_stamps import CommittedBatches, split_stamp
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.transaction_ends import RELEASE_HEADER
from processor_api.logging import get_logger

#: Who wrote a dropped record that released a pinned partition, in the drop counts.
RELEASE_WRITER = "(pinned-partition release)"


def to_input_records(topic: str, partition: int, messages: Iterable[Any]) -> list[InputRecord]:
    """confluent-kafka messages of one partition as input records (no timestamp: -1, which
    the engine skips as Kafka Streams does)."""
    return [input_record(topic, partition, message) for message in messages]


def drop_aborted(
    batch: MessageBatch,
    partition: int,
    stamped_topics: frozenset[str],
    batches: CommittedBatches | None,
) -> tuple[MessageBatch, dict[tuple[str, int, str], int]]:
    """``batch`` (a task's poll, of ``partition``) without the records of repartition topics
    that an aborted transaction wrote (``batches`` decides; None: keep all) and without the
    records that released a partition pinned by Tansu (``kafka/transaction_ends.py``), every
    batch stamp header taken off (the message's headers are replaced); and how many were
    dropped per (topic, partition, upstream task or :data:`RELEASE_WRITER`). See
    ``kafka/batch_stamps.py``."""
    if not stamped_topics or not any(topic in stamped_topics for topic in batch.by_topic):
        return batch, {}
    by_topic: dict[str, list[Any]] = {}
    dropped: dict[tuple[str, int, str], int] = {}
    for topic, messages in batch.by_topic.items():
        if topic not in stamped_topics:
            by_topic[topic] = messages
            continue
        kept: list[Any] = []
        message: Any  # confluent_kafka.Message: set_headers
        for message in messages:
            headers = message.headers()
            if headers:
                if any(name == RELEASE_HEADER for name, _ in headers):
                    where = (topic, partition, RELEASE_WRITER)
                    dropped[where] = dropped.get(where, 0) + 1
                    continue
                try:
                    stamp, rest = split_stamp(headers)
                except StreamsError as exc:
                    raise StreamsError(
                        f"{exc} (topic={topic} partition={partition} offset={message.offset()})"
                    ) from exc
                if stamp is not None:
                    if batches is not None and not batches.is_committed(stamp):
                        where = (topic, partition, stamp.task_id)
                        dropped[where] = dropped.get(where, 0) + 1
                        continue
                    message.set_headers(list(rest))
            kept.append(message)
        if kept:
            by_topic[topic] = kept
    return MessageBatch(by_topic), dropped


class TaskInput:
    """What a task keeps of its polled input, for as long as it lives: under exactly-once
    with repartition inputs, what upstream tasks committed, so that records of their aborted
    transactions are dropped (``kafka/batch_stamps.py``)."""

    def __init__(
        self,
        bootstrap_servers: str,
        task_id: str,
        *,
        stamped_topics: frozenset[str],
        marker_topic: str,
        marker_partitions: dict[str, int],
        exactly_once: bool,
        kafka: KafkaClientConfig | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._task_id = task_id
        self._stamped_topics = stamped_topics
        self._marker_topic = marker_topic
        self._marker_partitions = marker_partitions
        self._checks = exactly_once and bool(stamped_topics)
        self._kafka = kafka
        self._batches: CommittedBatches | None = None
        self._log = get_logger("processor_api.task_runner", task=task_id)

    def keep_committed(self, records: MessageBatch, partition: int) -> MessageBatch:
        """``records`` (of ``partition``) without those an aborted upstream transaction wrote
        to a repartition topic, batch stamps taken off (see ``drop_aborted``)."""
        if self._checks and self._batches is None:
            self._batches = CommittedBatches(
                self._bootstrap, self._marker_topic, self._marker_partitions, kafka=self._kafka
            )
        records, dropped = drop_aborted(records, partition, self._stamped_topics, self._batches)
        for (topic, partition, upstream), count in dropped.items():
            self._log.info(
                "aborted_records_skipped",
                topic=topic,
                partition=partition,
                upstream_task=upstream,
                records=count,
                detail="written by a transaction that aborted (the broker showed them)",
            )
        return records

    def close(self) -> None:
        """Close the marker reader (idempotent)."""
        if self._batches is not None:
            self._batches.close()
            self._batches = None
