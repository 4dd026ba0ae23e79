"""Kafka messages of planned ranges as the engine's input records (tasks and global stores)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from processor_api.engine.records import InputRecord
from processor_api.kafka.reader import read_bounded


def to_input_records(topic: str, partition: int, messages: Iterable[Any]) -> list[InputRecord]:
    """confluent-kafka messages of one partition as input records (no timestamp: -1, which
    the engine skips as Kafka Streams does)."""
    not_available = TIMESTAMP_NOT_AVAILABLE
    records = []
    append = records.append
    for message in messages:
        kind, timestamp = message.timestamp()
        headers = message.headers()
        append(
            InputRecord(
                topic,
                partition,
                message.offset(),
                -1 if kind == not_available else timestamp,
                message.key(),
                message.value(),
                () if headers is None else tuple(headers),
            )
        )
    return records


def read_input_records(
    consumer: Any, topic: str, partition: int, start: int, end: int, *, source: str
) -> Iterator[list[InputRecord]]:
    """The records of ``topic[partition]`` in ``[start, end)``, in batches, in offset order."""
    for messages in read_bounded(consumer, topic, partition, start, end, source=source):
        yield to_input_records(topic, partition, messages)


def read_ranges(consumer: Any, ranges: Iterable[Any], *, source: str) -> list[InputRecord]:
    """Every record of the planned ``ranges`` (``topic``, ``partition``, ``start``, ``end``)."""
    records: list[InputRecord] = []
    for planned in ranges:
        for batch in read_input_records(
            consumer, planned.topic, planned.partition, planned.start, planned.end, source=source
        ):
            records.extend(batch)
    return records
