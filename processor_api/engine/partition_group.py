"""The order in which a task takes the records of its co-partitioned input topics.

Kafka Streams' ``PartitionGroup`` and ``RecordQueue``: each input partition (one per source
topic) is a FIFO queue in offset order whose head record is deserialized and stamped with its
*extracted* timestamp (the source's timestamp extractor, else the Kafka timestamp); the group
takes the queue whose head has the smallest timestamp. A record that cannot be deserialized
(and is skipped by the handler) or whose timestamp is negative is dropped when it would
become the head.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from processor_api.engine.nodes import ProcessorNode
from processor_api.engine.records import InputRecord
from processor_api.errors import ProcessingError, StreamsError
from processor_api.processor import Record
from processor_api.topology import SourceNode as SourceDefinition

OnDeserializationError = Callable[[InputRecord, str, Exception], None]
"""``on_error(raw, source_name, exc)``: raises to fail, returns to skip the record."""

OnSkipped = Callable[[InputRecord], None]
"""Told of every record a queue drops (deserialization skipped, negative timestamp)."""


def _offset(record: InputRecord) -> int:
    return record.offset


class RecordQueue:
    """The records of one input partition (one source topic) of a task, in offset order.

    ``partition_time`` is the largest timestamp taken from it so far (-1: none); the
    timestamp extractor gets it as its second argument.
    """

    __slots__ = (
        "topic",
        "index",
        "source",
        "node",
        "partition_time",
        "head",
        "head_raw",
        "_records",
        "_next",
        "_on_error",
        "_on_skipped",
        "_log",
    )

    def __init__(
        self,
        topic: str,
        index: int,
        source: SourceDefinition,
        node: ProcessorNode,
        partition_time: int,
        on_deserialization_error: OnDeserializationError,
        on_skipped: OnSkipped,
        log: Any,
    ) -> None:
        self.topic = topic
        self.index = index  # tie-break between heads of equal timestamp: source topic order
        self.source = source
        self.node = node
        self.partition_time = partition_time
        self.head: Record | None = None
        self.head_raw: InputRecord | None = None
        self._records: list[InputRecord] = []
        self._next = 0
        self._on_error = on_deserialization_error
        self._on_skipped = on_skipped
        self._log = log

    def __len__(self) -> int:
        """Records not taken yet, the head included."""
        return len(self._records) - self._next + (self.head is not None)

    def set_records(self, records: list[InputRecord]) -> None:
        """Replace the queue's content with ``records`` (in offset order)."""
        self._records = records
        self._next = 0
        self.head = self.head_raw = None

    def stamp(self, raw: InputRecord) -> Record | None:
        """Deserialize ``raw`` and give it its timestamp; None if it is to be dropped."""
        source = self.source
        try:
            key = source.key_serde.deserialize(raw.key)
            value = source.value_serde.deserialize(raw.value)
        except Exception as exc:
            self._on_error(raw, source.name, exc)
            return None
        timestamp = raw.timestamp
        headers = raw.headers
        extractor = source.timestamp_extractor
        if extractor is not None:
            try:
                timestamp = extractor(
                    Record(key, value, max(timestamp, 0), headers), self.partition_time
                )
            except Exception as exc:
                raise ProcessingError(
                    f"timestamp extractor raised {type(exc).__name__}: {exc}",
                    topic=raw.topic,
                    partition=raw.partition,
                    offset=raw.offset,
                    processor=source.name,
                ) from exc
        if timestamp < 0:
            self._log.warning(
                "record_skipped_invalid_timestamp",
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                timestamp=timestamp,
            )
            return None
        return Record(key, value, timestamp, headers)

    def take_all(self) -> Iterable[InputRecord]:
        """Hand out every remaining raw record, in offset order (one-queue fast path)."""
        records, start = self._records, self._next
        self._records, self._next = [], 0
        self.head = self.head_raw = None
        return records if start == 0 else records[start:]

    def update_head(self) -> bool:
        """Stamp the next record that is not dropped as the head; False if none is left."""
        records = self._records
        while self._next < len(records):
            raw = records[self._next]
            record = self.stamp(raw)  # a failing handler raises here: the record stays
            self._next += 1
            if record is not None:
                self.head, self.head_raw = record, raw
                return True
            self._on_skipped(raw)
        return False

    def poll(self) -> tuple[InputRecord, Record]:
        """Take the head (the caller updates ``partition_time`` when it processes it)."""
        raw, record = self.head_raw, self.head
        self.head = self.head_raw = None
        return raw, record  # type: ignore[return-value]


class PartitionGroup:
    """The input queues of one task and the choice of the next record."""

    def __init__(
        self,
        sources_by_topic: Mapping[str, tuple[SourceDefinition, ProcessorNode]],
        partition_times: Mapping[str, int],
        on_deserialization_error: OnDeserializationError,
        on_skipped: OnSkipped,
        task_id: str,
        log: Any,
    ) -> None:
        self.task_id = task_id
        self.queues: dict[str, RecordQueue] = {
            topic: RecordQueue(
                topic,
                index,
                source,
                node,
                partition_times.get(topic, -1),
                on_deserialization_error,
                on_skipped,
                log,
            )
            for index, (topic, (source, node)) in enumerate(sources_by_topic.items())
        }
        self._heap: list[tuple[int, int, RecordQueue]] = []
        self._polled: RecordQueue | None = None

    def partition_times(self) -> dict[str, int]:
        """Per topic that has seen a record, the largest timestamp taken from it."""
        return {t: q.partition_time for t, q in self.queues.items() if q.partition_time >= 0}

    def add_records(
        self, batch: Iterable[InputRecord], positions: Mapping[str, int]
    ) -> RecordQueue | None:
        """Queue ``batch``, less the records below ``positions`` (the next offset to process,
        per topic: earlier ones were processed already); whatever was queued before goes.

        Returns the queue when only one got records (take them with ``take_all``), else None
        (take them with :meth:`next_record`).
        """
        queues = self.queues
        by_topic: dict[str, list[InputRecord]] = {}
        for record in batch:
            if record.topic not in queues:
                raise StreamsError(
                    f"task {self.task_id} got a record of topic {record.topic!r}, which none "
                    f"of its sources reads (they read {sorted(queues)})"
                )
            by_topic.setdefault(record.topic, []).append(record)
        self._heap = []
        self._polled = None
        filled = []
        for topic, queue in queues.items():
            records = by_topic.get(topic, [])
            records.sort(key=_offset)
            position = positions.get(topic)
            if records and position is not None and records[0].offset < position:
                records = [r for r in records if r.offset >= position]
            queue.set_records(records)
            if records:
                filled.append(queue)
        if len(filled) == 1:
            return filled[0]
        for queue in filled:
            if queue.update_head():
                self._heap.append((queue.head.timestamp, queue.index, queue))  # type: ignore[union-attr]
        heapq.heapify(self._heap)
        return None

    def next_record(self) -> tuple[RecordQueue, InputRecord, Record] | None:
        """The record with the smallest timestamp among the queue heads, or None when done.

        The head of the queue it came from is stamped on the next call, so after the caller
        processed the record (the extractor then sees the partition time it advanced).
        """
        heap = self._heap
        polled = self._polled
        if polled is not None:
            self._polled = None
            if polled.update_head():
                heapq.heappush(heap, (polled.head.timestamp, polled.index, polled))  # type: ignore[union-attr]
        if not heap:
            return None
        queue = heapq.heappop(heap)[2]
        raw, record = queue.poll()
        self._polled = queue
        return queue, raw, record
