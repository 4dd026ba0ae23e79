"""Serialized records crossing the task boundary, and where a task's outputs go."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

RawHeaders = tuple[tuple[str, "bytes | None"], ...]


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
