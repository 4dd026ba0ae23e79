"""The order in which a task takes the records of its co-partitioned input topics.

Kafka Streams' ``PartitionGroup``: records of one topic (this task's partition of it) are
taken in offset order; across topics, the record with the smallest timestamp goes first.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping

from processor_api.engine.records import InputRecord
from processor_api.errors import StreamsError


def _offset(record: InputRecord) -> int:
    return record.offset


class PartitionGroup:
    """The input partitions of one task, one per source topic."""

    def __init__(self, topics: Iterable[str], task_id: str) -> None:
        self.topics = tuple(topics)
        self.task_id = task_id

    def records(
        self, batch: Iterable[InputRecord], positions: Mapping[str, int]
    ) -> Iterator[InputRecord]:
        """The records of ``batch`` in processing order, without those below ``positions``
        (the next offset to process, per topic: earlier ones were processed already)."""
        by_topic: dict[str, list[InputRecord]] = {}
        topics = self.topics
        for record in batch:
            if record.topic not in topics:
                raise StreamsError(
                    f"task {self.task_id} got a record of topic {record.topic!r}, which none "
                    f"of its sources reads (they read {sorted(topics)})"
                )
            by_topic.setdefault(record.topic, []).append(record)
        queues = []
        for topic, records in by_topic.items():
            records.sort(key=_offset)
            position = positions.get(topic)
            if position is not None and records[0].offset < position:
                records = [r for r in records if r.offset >= position]
            if records:
                queues.append(records)
        if len(queues) == 1:
            return iter(queues[0])
        return self._merge(queues)

    @staticmethod
    def _merge(queues: list[list[InputRecord]]) -> Iterator[InputRecord]:
        iterators = [iter(queue) for queue in queues]
        heap = [(queue[0].timestamp, index, queue[0]) for index, queue in enumerate(queues)]
        for iterator in iterators:
            next(iterator)
        heapq.heapify(heap)
        while heap:
            _, index, record = heapq.heappop(heap)
            yield record
            following = next(iterators[index], None)
            if following is not None:
                heapq.heappush(heap, (following.timestamp, index, following))
