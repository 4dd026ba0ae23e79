"""Kafka messages of planned ranges as the engine's input records (tasks and global stores)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from processor_api.engine.records import InputRecord
from processor_api.kafka.reader import PartitionReader


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


def read_ranges(reader: PartitionReader, ranges: Iterable[Any]) -> list[InputRecord]:
    """Every record of the planned ``ranges`` (``topic``, ``partition``, ``start``, ``end``),
    in offset order per range."""
    records: list[InputRecord] = []
    for planned in ranges:
        topic, partition = planned.topic, planned.partition
        for messages in reader.read(topic, partition, planned.start, planned.end):
            records.extend(to_input_records(topic, partition, messages))
    return records
