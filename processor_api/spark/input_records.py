"""Kafka messages of planned ranges as the engine's input records (tasks and global stores)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from processor_api.engine.records import InputRecord
from processor_api.errors import StreamsError
from processor_api.kafka.batch_stamps import CommittedBatches, split_stamp
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


def drop_aborted(
    records: list[InputRecord], stamped_topics: frozenset[str], batches: CommittedBatches | None
) -> tuple[list[InputRecord], dict[tuple[str, int, str], int]]:
    """``records`` without those of repartition topics that an aborted transaction wrote
    (``batches`` decides; None: keep all), every batch stamp header taken off; and how many
    were dropped per (topic, partition, upstream task). See ``kafka/batch_stamps.py``."""
    if not stamped_topics:
        return records, {}
    kept: list[InputRecord] = []
    dropped: dict[tuple[str, int, str], int] = {}
    for record in records:
        if record.headers and record.topic in stamped_topics:
            try:
                stamp, headers = split_stamp(record.headers)
            except StreamsError as exc:
                raise StreamsError(
                    f"{exc} (topic={record.topic} partition={record.partition} "
                    f"offset={record.offset})"
                ) from exc
            if stamp is not None:
                if batches is not None and not batches.is_committed(stamp):
                    where = (record.topic, record.partition, stamp.task_id)
                    dropped[where] = dropped.get(where, 0) + 1
                    continue
                record = InputRecord(
                    record.topic,
                    record.partition,
                    record.offset,
                    record.timestamp,
                    record.key,
                    record.value,
                    headers,
                )
        kept.append(record)
    return kept, dropped
