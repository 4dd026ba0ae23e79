"""The order in which a task takes the records of its co-partitioned input topics.

Kafka Streams' ``PartitionGroup`` and ``RecordQueue``: each input partition (one per source
topic) is a FIFO queue in offset order whose head record is deserialized and stamped with its
*extracted* timestamp (the source's timestamp extractor, else the Kafka timestamp); the group
takes the queue whose head has the smallest timestamp. A record that cannot be deserialized
(and is skipped by the handler) or whose timestamp is negative is dropped when it would
become the head.

A queue holds the records as the consumer handed them out (``confluent_kafka.Message``, seen
through :class:`~.records.KafkaMessage`): no object is made per record before its
``Record``. Records handed in as :class:`~.records.InputRecord` (the test driver, tests) are
queued as :class:`~.records.RecordMessage`; error handlers get an ``InputRecord`` made when
they are asked (:func:`~.records.input_record`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from processor_api.engine.idling import InputIdling
from processor_api.engine.nodes import ProcessorNode
from processor_api.engine.records import (
    TIMESTAMP_NOT_AVAILABLE,
    InputRecord,
    KafkaMessage,
    MessageBatch,
    RecordMessage,
    input_record,
)
from processor_api.errors import ProcessingError, StreamsError
from processor_api.processor import Record, checked_record
from processor_api.topology.nodes import SourceNode as SourceDefinition

OnDeserializationError = Callable[[InputRecord, str, Exception], None]
"""``on_error(raw, source_name, exc)``: raises to fail, returns to skip the record."""

OnSkipped = Callable[["RecordQueue", KafkaMessage], None]
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
        "partition",
        "index",
        "source",
        "key_serde",
        "value_serde",
        "node",
        "partition_time",
        "head",
        "head_raw",
        "last_offset",
        "_records",
        "_next",
        "_on_error",
        "_on_skipped",
        "_log",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        index: int,
        source: SourceDefinition,
        node: ProcessorNode,
        partition_time: int,
        on_deserialization_error: OnDeserializationError,
        on_skipped: OnSkipped,
        log: Any,
        registry: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.index = index  # tie-break between heads of equal timestamp: source topic order
        self.source = source
        # bound once per topic: Schema Registry serdes need the topic for their subject
        self.key_serde = source.key_serde.for_topic(topic, True, registry)
        self.value_serde = source.value_serde.for_topic(topic, False, registry)
        self.node = node
        self.partition_time = partition_time
        self.head: Record | None = None
        self.head_raw: KafkaMessage | None = None
        self.last_offset = -1  # the largest offset queued so far (-1: none)
        self._records: list[KafkaMessage] = []
        self._next = 0
        self._on_error = on_deserialization_error
        self._on_skipped = on_skipped
        self._log = log

    def __len__(self) -> int:
        """Records not taken yet, the head included."""
        return len(self._records) - self._next + (self.head is not None)

    def extend(self, records: list[KafkaMessage]) -> None:
        """Queue ``records`` (in offset order, all past :attr:`last_offset`) behind the rest."""
        if self._next:
            # keep the stamped head's raw record (at _next - 1) until it is polled
            done = self._next - (self.head is not None)
            self._records = self._records[done:]
            self._next -= done
        self._records.extend(records)
        self.last_offset = records[-1].offset()

    def first_offset(self) -> int | None:
        """The offset of the first record not taken yet (the head included), or None."""
        if self.head_raw is not None:
            return self.head_raw.offset()
        return self._records[self._next].offset() if self._next < len(self._records) else None

    def clear(self) -> None:
        """Drop everything queued."""
        self._records = []
        self._next = 0
        self.head = self.head_raw = None
        self.last_offset = -1

    def input_record(self, message: KafkaMessage) -> InputRecord:
        """``message`` as an :class:`InputRecord` of this queue's topic and partition."""
        return input_record(self.topic, self.partition, message)

    def stamp(self, raw: KafkaMessage) -> Record | None:
        """Deserialize ``raw`` and give it its timestamp; None if it is to be dropped."""
        source = self.source
        try:
            key = self.key_serde.deserialize(raw.key())
            value = self.value_serde.deserialize(raw.value())
        except Exception as exc:
            self._on_error(self.input_record(raw), source.name, exc)
            return None
        kind, timestamp = raw.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            timestamp = -1  # skipped below, as Kafka Streams does
        given = raw.headers()
        headers = () if given is None else tuple(given)
        extractor = source.timestamp_extractor
        if extractor is not None:
            try:
                timestamp = extractor(
                    Record(key, value, max(timestamp, 0), headers), self.partition_time
                )
            except Exception as exc:
                raise ProcessingError(
                    f"timestamp extractor raised {type(exc).__name__}: {exc}",
                    topic=self.topic,
                    partition=self.partition,
                    offset=raw.offset(),
                    processor=source.name,
                ) from exc
        if timestamp < 0:
            self._log.warning(
                "record_skipped_invalid_timestamp",
                topic=self.topic,
                partition=self.partition,
                offset=raw.offset(),
                timestamp=timestamp,
            )
            return None
        if timestamp.__class__ is int and headers.__class__ is tuple:  # as Kafka gives them
            return checked_record(key, value, timestamp, headers)
        return Record(key, value, timestamp, headers)

    def take_all(self) -> Iterable[KafkaMessage]:
        """Hand out every remaining raw record, in offset order (one-queue fast path)."""
        records, start = self._records, self._next - (self.head is not None)
        self._records, self._next = [], 0
        self.head = self.head_raw = None
        return records if start == 0 else records[start:]

    def take(self, limit: int) -> list[KafkaMessage]:
        """Hand out up to ``limit`` remaining raw records, in offset order (one-queue path);
        the rest stay queued."""
        records, start = self._records, self._next - (self.head is not None)
        end = min(len(records), start + limit)
        taken = records[start:end]
        self.head = self.head_raw = None
        if end >= len(records):
            self._records, self._next = [], 0
        else:
            self._next = end
        return taken

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
            self._on_skipped(self, raw)
        return False

    def poll(self) -> tuple[KafkaMessage, Record]:
        """Take the head (the caller updates ``partition_time`` when it processes it)."""
        raw, record = self.head_raw, self.head
        self.head = self.head_raw = None
        return raw, record  # type: ignore[return-value]


class PartitionGroup:
    """The input queues of one task, the choice of the next record, and when to wait.

    Records handed to :meth:`add_records` stay queued until they are processed: a task that
    waits for a lagging input (:mod:`.idling`) keeps the others' records for the next call.
    """

    def __init__(
        self,
        sources_by_topic: Mapping[str, tuple[SourceDefinition, ProcessorNode]],
        partition_times: Mapping[str, int],
        on_deserialization_error: OnDeserializationError,
        on_skipped: OnSkipped,
        task_id: str,
        log: Any,
        max_task_idle_ms: int = 0,
        registry: Mapping[str, Any] | None = None,
        partition: int = 0,
    ) -> None:
        self.task_id = task_id
        self.queues: dict[str, RecordQueue] = {
            topic: RecordQueue(
                topic,
                partition,
                index,
                source,
                node,
                partition_times.get(topic, -1),
                on_deserialization_error,
                on_skipped,
                log,
                registry,
            )
            for index, (topic, (source, node)) in enumerate(sources_by_topic.items())
        }
        self.idling = InputIdling(max_task_idle_ms, list(self.queues), task_id, log)
        self._heap: list[tuple[int, int, RecordQueue]] = []
        self._polled: RecordQueue | None = None

    def partition_times(self) -> dict[str, int]:
        """Per topic that has seen a record, the largest timestamp taken from it."""
        return {t: q.partition_time for t, q in self.queues.items() if q.partition_time >= 0}

    def buffered(self) -> int:
        """Records queued and not processed yet."""
        return sum(len(queue) for queue in self.queues.values())

    def first_buffered_offsets(self) -> dict[str, int]:
        """Per topic with queued records, the offset of the first one."""
        firsts = {}
        for topic, queue in self.queues.items():
            first = queue.first_offset()
            if first is not None:
                firsts[topic] = first
        return firsts

    def add_records(self, batch: Iterable[InputRecord], positions: Mapping[str, int]) -> int:
        """Queue ``batch``, less the records below ``positions`` (the next offset to process,
        per topic: earlier ones were processed already) and those queued already; returns how
        many were queued."""
        queues = self.queues
        by_topic: dict[str, list[InputRecord]] = {}
        for record in batch:
            if record.topic not in queues:
                raise StreamsError(
                    f"task {self.task_id} got a record of topic {record.topic!r}, which none "
                    f"of its sources reads (they read {sorted(queues)})"
                )
            by_topic.setdefault(record.topic, []).append(record)
        queued = 0
        for topic, records in by_topic.items():
            records.sort(key=_offset)
            messages: list[KafkaMessage] = [RecordMessage(record) for record in records]
            queued += self._queue(topic, messages, positions)
        return queued

    def add_messages(self, batch: MessageBatch, positions: Mapping[str, int]) -> int:
        """:meth:`add_records` for what the consumer handed out: per topic, in offset order
        (a partition's order, as the consumer keeps it), so nothing is sorted or copied."""
        queues = self.queues
        queued = 0
        for topic, messages in batch.by_topic.items():
            if topic not in queues:
                raise StreamsError(
                    f"task {self.task_id} got records of topic {topic!r}, which none of its "
                    f"sources reads (they read {sorted(queues)})"
                )
            if messages:
                queued += self._queue(topic, messages, positions)
        return queued

    def _queue(self, topic: str, records: list[KafkaMessage], positions: Mapping[str, int]) -> int:
        """Queue ``records`` (of ``topic``, in offset order) from the floor on; how many."""
        queue = self.queues[topic]
        floor = max(positions.get(topic, 0), queue.last_offset + 1)
        if records[0].offset() < floor:
            records = [r for r in records if r.offset() >= floor]
            if not records:
                return 0
        queue.extend(records)
        self.idling.filled(topic)
        if queue is not self._polled and queue.head is None and queue.update_head():
            head = queue.head
            assert head is not None  # update_head() said so
            heapq.heappush(self._heap, (head.timestamp, queue.index, queue))
        return len(records)

    def ready(self, now: int) -> bool:
        """Whether the next record may be taken at wall-clock time ``now`` (see ``idling``)."""
        return self.idling.ready(self.queues, now)

    def single_queue(self) -> RecordQueue | None:
        """The only queue with records, if exactly one has some (take them with
        ``take_all``: while the others stay empty, readiness cannot change)."""
        filled = [queue for queue in self.queues.values() if len(queue)]
        if len(filled) != 1:
            return None
        self._heap = []
        self._polled = None
        return filled[0]

    def next_record(self, now: int) -> tuple[RecordQueue, KafkaMessage, Record] | None:
        """The record with the smallest timestamp among the queue heads, or None when the
        queues are empty or the task must wait for an input that ran empty.

        The head of the queue it came from is stamped on the next call, so after the caller
        processed the record (the extractor then sees the partition time it advanced).
        """
        heap = self._heap
        polled = self._polled
        if polled is not None:
            self._polled = None
            if polled.update_head():
                heapq.heappush(heap, (polled.head.timestamp, polled.index, polled))  # type: ignore[union-attr]
            elif not self.ready(now):
                return None
        if not heap:
            return None
        queue = heapq.heappop(heap)[2]
        raw, record = queue.poll()
        self._polled = queue
        return queue, raw, record

    def clear(self) -> None:
        """Drop every queued record (after a failure: the runtime hands them in again)."""
        for queue in self.queues.values():
            queue.clear()
        self._heap = []
        self._polled = None
