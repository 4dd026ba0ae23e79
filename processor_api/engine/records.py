"""Serialized records crossing the task boundary, and where a task's outputs go."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

RawHeaders = tuple[tuple[str, "bytes | None"], ...]

#: The timestamp type of a message without a timestamp (librdkafka's
#: ``RD_KAFKA_TIMESTAMP_NOT_AVAILABLE``, confluent-kafka's ``TIMESTAMP_NOT_AVAILABLE``).
TIMESTAMP_NOT_AVAILABLE = 0


@dataclass(slots=True)
class InputRecord:
    """A record as read from Kafka: coordinates, timestamp and raw key/value bytes."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: RawHeaders = ()


class KafkaMessage(Protocol):
    """The accessors of a consumed message that a task reads (``confluent_kafka.Message``'s):
    a task takes its input as the consumer hands it out, without a copy per record."""

    def offset(self) -> int: ...  # a record's (None only for events, never queued)

    def timestamp(self) -> tuple[int, int]: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...


class MessageBatch:
    """What one poll brought a task: per input topic, the records (no error events) of the
    task's partition, in offset order, as the consumer gave them (:class:`KafkaMessage`).

    ``len()`` is the number of records; a batch without records is false.
    """

    __slots__ = ("by_topic", "count")

    def __init__(self, by_topic: dict[str, list[KafkaMessage]] | None = None) -> None:
        self.by_topic: dict[str, list[KafkaMessage]] = by_topic if by_topic is not None else {}
        self.count = sum(map(len, self.by_topic.values()))

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def messages(self) -> list[KafkaMessage]:
        """Every record of the batch, topic after topic."""
        return [message for messages in self.by_topic.values() for message in messages]


class RecordMessage:
    """An :class:`InputRecord` seen through the :class:`KafkaMessage` accessors: the queues
    of a task hold messages, and records handed in as ``InputRecord``s (the test driver,
    tests) join them this way."""

    __slots__ = ("record",)

    def __init__(self, record: InputRecord) -> None:
        self.record = record

    def offset(self) -> int:
        return self.record.offset

    def timestamp(self) -> tuple[int, int]:
        # CREATE_TIME (1); -1, like a missing timestamp, is skipped by the task
        return (1, self.record.timestamp)

    def key(self) -> bytes | None:
        return self.record.key

    def value(self) -> bytes | None:
        return self.record.value

    def headers(self) -> RawHeaders | None:
        # the tuple as it is: the task's tuple() of it is the same object
        return self.record.headers or None


def input_record(topic: str, partition: int, message: KafkaMessage) -> InputRecord:
    """``message`` of ``topic``/``partition`` as an :class:`InputRecord` (what error handlers
    and the record context are given)."""
    if isinstance(message, RecordMessage):
        return message.record
    kind, timestamp = message.timestamp()
    headers = message.headers()
    return InputRecord(
        topic,
        partition,
        message.offset(),
        -1 if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        message.key(),
        message.value(),
        () if headers is None else tuple(headers),
    )


@dataclass(slots=True)
class OutputRecord:
    """A record a sink produced, serialized with the sink's serdes."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: RawHeaders = ()
    partition: int | None = None  # None: the default (murmur2 of the key) partitioner decides


class RecordCollector(Protocol):
    """Receives what sinks (and the dead-letter handler) produce.

    A collector may also have ``send_values(topic, entries, timestamp)``: serialized
    ``(key, value)`` pairs for one topic with one timestamp, no headers, partition chosen by
    key. Sinks use it, when present, for store entries forwarded as they are (see
    ``SinkNode.send_raw``); it must behave as ``send`` called once per pair, in order.
    """

    def send(self, record: OutputRecord) -> None:
        """Deliver one serialized record (asynchronously is fine)."""

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (for custom partitioners)."""


class ListCollector:
    """A collector that keeps records in a list: for tests and the test driver."""

    def __init__(self, partitions: int = 1) -> None:
        self.records: list[OutputRecord] = []
        self._partitions = partitions

    def send(self, record: OutputRecord) -> None:
        self.records.append(record)

    def partition_count(self, topic: str) -> int:
        return self._partitions

    def drain(self) -> list[OutputRecord]:
        records, self.records = self.records, []
        return records
