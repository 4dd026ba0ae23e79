"""Kafka side of a running task: producing its outputs and its changelog records."""

from __future__ import annotations

from typing import Protocol

from processor_api.kafka.admin import topic_partitions
from processor_api.kafka.batch_stamps import STAMP_HEADER, BatchStamp
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.producer import DeliveryTracker
from processor_api.logging import get_logger
from processor_api.state.changelogging import ChangeRecord

_log = get_logger("processor_api.kafka_io")

RESTORE_BATCH = 10_000
RESTORE_STALL_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 2.0


class ProducedRecord(Protocol):
    """What the collector needs of an output record (the engine's ``OutputRecord``)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


class KafkaCollector:
    """A :class:`RecordCollector` producing sink records through a :class:`DeliveryTracker`."""

    def __init__(
        self,
        tracker: DeliveryTracker,
        bootstrap_servers: str,
        *,
        kafka: KafkaClientConfig | None = None,
        stamped_topics: frozenset[str] = frozenset(),
    ) -> None:
        self.tracker = tracker
        self._bootstrap = bootstrap_servers
        self._kafka = kafka
        self._partition_counts: dict[str, int] = {}
        self.sent = 0
        self._stamped_topics = stamped_topics
        self._stamp: tuple[str, bytes] | None = None

    def stamp_batch(self, stamp: BatchStamp | None) -> None:
        """Stamp the records sent to the stamped (repartition) topics from now on with
        ``stamp`` (None: no stamp); see ``batch_stamps.py``."""
        self._stamp = None if stamp is None else (STAMP_HEADER, stamp.encode())

    def send(self, record: ProducedRecord) -> None:
        headers = record.headers
        if self._stamp is not None and record.topic in self._stamped_topics:
            headers = (*headers, self._stamp)
        self.tracker.produce(
            record.topic,
            record.key,
            record.value,
            partition=record.partition,
            timestamp=record.timestamp,
            headers=headers or None,
        )
        self.sent += 1

    def send_values(
        self, topic: str, entries: list[tuple[bytes | None, bytes | None]], timestamp: int
    ) -> None:
        """Produce serialized ``(key, value)`` records to ``topic`` with one timestamp, no
        headers (but a batch stamp), partitioned by key: the bulk path of a punctuation
        forwarding a store."""
        if self._stamp is not None and topic in self._stamped_topics:
            stamp, at = [self._stamp], None if timestamp < 0 else timestamp
            for key, value in entries:
                self.tracker.produce(topic, key, value, timestamp=at, headers=stamp)
        else:
            self.tracker.produce_values(topic, entries, timestamp)
        self.sent += len(entries)

    def partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            count = topic_partitions(self._bootstrap, [topic], kafka=self._kafka)[topic]
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
            topic,
            partition,
            [(change.key, change.value, change.timestamp) for change in latest.values()],
        )
        return len(latest)
