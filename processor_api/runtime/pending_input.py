"""Input a task was handed but held back, waiting for a lagging co-partitioned input.

With ``max.task.idle.ms`` (the engine's ``idling``), a task with several input topics stops
when one runs empty while the broker has more of it; the others' records stay queued in the
task. On Spark the micro-batch still commits: the task's input positions stop at the first
held-back record, the consumer group gets that offset (not the range end), and the task's
metadata carries, per topic, ``[first held-back offset, end of what was read]`` (the
``pending`` extra), so that a rebuilt task (another executor, a restart, a failed batch) reads
those records again before the new ranges.

The lag the task waits on is the broker's end of a partition read in this batch minus the
range end (records that arrived after the batch was planned, or that ``max.records.per.batch``
left out); a partition without a range in this batch had nothing more when the batch was
planned and counts as caught up. A bounded run (``Trigger.AvailableNow``, end offsets given)
never waits: data past its bound will not come in this run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaException

from processor_api.engine.task import Task
from processor_api.logging import get_logger

PENDING_KEY = "pending"  # in TaskMetadata.extra: {topic: [first held-back offset, read end]}

_log = get_logger(__name__)


class Range(Protocol):
    """Offsets ``[start, end)`` of one input partition (read only)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


class HeldBackInput:
    """What a task runner knows of its task's held-back input between batches."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[int, int]] = {}  # topic -> (first held back, read end)
        self._read_ends: dict[str, int] = {}

    def restore(self, extra: Mapping[str, Any]) -> None:
        """Take the held-back input a (re)built task's committed metadata records."""
        self.pending = {
            str(t): (int(first), int(end)) for t, (first, end) in extra.get(PENDING_KEY, {}).items()
        }
        self._read_ends = {topic: end for topic, (_, end) in self.pending.items()}

    def reread(self, ranges: Iterable[Range]) -> list[tuple[str, int, int]]:
        """``(topic, start, end)`` to read again for a rebuilt task: its held-back records,
        less what this batch's ranges cover already (a run resumed from the group offsets)."""
        starts = {r.topic: r.start for r in ranges}
        spans = []
        for topic, (first, read_end) in self.pending.items():
            end = min(read_end, starts.get(topic, read_end))
            if first < end:
                spans.append((topic, first, end))
        return spans

    def after_batch(self, task: Task, ranges: Iterable[Range]) -> dict[str, list[int]]:
        """Per topic with records still queued in ``task``: ``[first queued offset, read
        end]``, also written to the task's metadata ``extra``."""
        for planned in ranges:
            self._read_ends[planned.topic] = max(planned.end, self._read_ends.get(planned.topic, 0))
        pending = {
            topic: [first, self._read_ends.get(topic, first + 1)]
            for topic, first in task.partition_group.first_buffered_offsets().items()
        }
        if pending:
            task.extra[PENDING_KEY] = pending
        else:
            task.extra.pop(PENDING_KEY, None)
        return pending

    def group_offsets(
        self, ranges: Iterable[Range], pending: Mapping[str, list[int]], partition: int
    ) -> dict[tuple[str, int], int]:
        """The consumer-group offsets of a batch that leaves ``pending`` held back.

        A range is read to its end, so the next offset to consume is its end even when its
        last offsets were transaction markers (no record, no position); a held-back topic's is
        its first held-back record; a topic held back before and processed now gets its read
        end. Other partitions keep the offset an earlier batch committed.
        """
        offsets = {(r.topic, r.partition): r.end for r in ranges}
        for topic, (_, read_end) in self.pending.items():
            offsets.setdefault((topic, partition), read_end)
        for topic, (first, _) in pending.items():
            offsets[(topic, partition)] = first
        return offsets

    def committed(self, pending: Mapping[str, list[int]]) -> None:
        """The batch that left ``pending`` committed."""
        self.pending = {t: (first, end) for t, (first, end) in pending.items()}


def waits_for_lagging_inputs(task: Task, bounded: bool) -> bool:
    """Whether lags matter to ``task``: several inputs, idling not disabled, an unbounded run."""
    return (
        len(task.partition_group.queues) > 1 and task.config.max_task_idle_ms != -1 and not bounded
    )


def broker_lags(reader: Any, ranges: Iterable[Range], topics: Iterable[str]) -> dict[str, int]:
    """Per input topic, how many offsets the broker has past this batch's range (0 without a
    range; 0 when the reader cannot say, so that a task never waits on nothing).

    The end is the high watermark of the fetch responses that read the range
    (``PartitionReader.high_watermark``): no extra round trip.
    """
    lags = dict.fromkeys(topics, 0)
    for planned in ranges:
        try:
            high = reader.high_watermark(planned.topic, planned.partition)
        except KafkaException as exc:
            _log.warning(
                "input_lag_unknown",
                topic=planned.topic,
                partition=planned.partition,
                error=str(exc),
            )
            continue
        if high is not None:
            lags[planned.topic] = max(0, high - planned.end)
    return lags
