"""Kafka side of a running task: producing outputs and changelogs, replaying changelogs."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from processor_api.errors import StreamsError
from processor_api.kafka.admin import client_config, topic_partitions
from processor_api.kafka.producer import DeliveryTracker
from processor_api.logging import get_logger
from processor_api.runtime.records import OutputRecord
from processor_api.state.changelogging import ChangeRecord

_log = get_logger("processor_api.kafka_io")

RESTORE_BATCH = 10_000
RESTORE_STALL_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 2.0


class KafkaCollector:
    """A :class:`RecordCollector` producing sink records through a :class:`DeliveryTracker`."""

    def __init__(self, tracker: DeliveryTracker, bootstrap_servers: str) -> None:
        self.tracker = tracker
        self._bootstrap = bootstrap_servers
        self._partition_counts: dict[str, int] = {}
        self.sent = 0

    def send(self, record: OutputRecord) -> None:
        self.tracker.produce(
            record.topic,
            record.key,
            record.value,
            partition=record.partition,
            timestamp=record.timestamp,
            headers=record.headers or None,
        )
        self.sent += 1

    def partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            count = topic_partitions(self._bootstrap, [topic])[topic]
            self._partition_counts[topic] = count
        return count

    def send_changes(
        self, topic: str, partition: int, changes: list[ChangeRecord], *, versioned: bool = False
    ) -> int:
        """Log a batch's store changes to partition ``partition`` of a changelog topic.

        Only the last change of each key in the batch is sent: the batch is committed as a
        whole, so a restore ends in the same state, and compaction would drop the earlier
        values anyway. For a ``versioned`` store the record timestamp is the version, so the
        last change of each (key, timestamp) is sent. Returns how many records were sent.
        """
        latest: dict[object, ChangeRecord] = {}
        for change in changes:
            ident = (change.key, change.timestamp) if versioned else change.key
            latest.pop(ident, None)  # re-insert: keep the order of last writes
            latest[ident] = change
        self.tracker.produce_many(
            topic, partition, [(change.key, change.value, change.timestamp)
                               for change in latest.values()],
        )
        return len(latest)


def read_changelog(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    apply_batch: Callable[[list[tuple]], None],
    *,
    isolation_level: str = "read_committed",
    with_timestamps: bool = False,
) -> int:
    """Replay offsets ``[start, end)`` of one changelog partition into ``apply_batch``.

    Records are handed over in batches (bulk store writes) of ``(key, value)``, or of
    ``(key, value, timestamp)`` with ``with_timestamps`` (versioned stores). Progress is logged every few
    seconds with the record count and rate. Offsets that are transaction markers are never
    delivered, so the replay ends once the consumer position reaches ``end``.
    """
    if end <= start:
        return 0
    consumer = Consumer(
        client_config(
            bootstrap_servers,
            "restore",
            **{
                "group.id": f"processor-api-restore-{topic}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation_level,
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 10_485_760,
            },
        )
    )
    count = 0
    started = last_report = last_progress = time.monotonic()
    position = start
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        batch: list[tuple] = []
        while position < end:
            messages = consumer.consume(RESTORE_BATCH, timeout=0.5)
            now = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == error._PARTITION_EOF:
                        continue
                    raise StreamsError(
                        f"restore of {topic}[{partition}] failed at offset {position}: {error}"
                    )
                offset = message.offset()
                if offset >= end:
                    position = end
                    break
                if with_timestamps:
                    batch.append((message.key(), message.value(), message.timestamp()[1]))
                else:
                    batch.append((message.key(), message.value()))
                position = offset + 1
            if batch:
                apply_batch(batch)
                count += len(batch)
                batch = []
                last_progress = now
            if position < end:
                try:
                    (current,) = consumer.position([TopicPartition(topic, partition)])
                    if current.offset >= end:
                        position = end  # the rest are transaction markers
                except KafkaException:
                    pass
            if now - last_report >= PROGRESS_EVERY_S:
                elapsed = now - started
                _log.info(
                    "restore_progress", topic=topic, partition=partition, records=count,
                    offset=position, end_offset=end, rate_per_s=round(count / elapsed),
                )
                last_report = now
            if position < end and now - last_progress > RESTORE_STALL_TIMEOUT_S:
                raise StreamsError(
                    f"restore of {topic}[{partition}] stalled at offset {position} "
                    f"(target {end}) for {RESTORE_STALL_TIMEOUT_S:g}s"
                )
    finally:
        consumer.close()
    return count
