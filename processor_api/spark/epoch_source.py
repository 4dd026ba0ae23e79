"""The streaming source of a run in epochs: one row per task per epoch, no record offsets.

A Spark micro-batch is an *epoch* of the application: its offset is the epoch number
(``{"epoch": n}``), and it holds one row ``(task, epoch)`` per task, keyed by the task's group
key (``task_keys.py``), so that ``applyInPandasWithState`` calls every task once per epoch.
What a task reads is its own business (``runtime/epoch_runner.py``): offsets never cross Spark,
and the checkpoint's offset log records epochs. Every trigger has a new epoch, so epochs run
back to back; under ``Trigger.AvailableNow`` the query runs exactly one epoch and ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

EPOCH_FORMAT = "processor_api_epochs"
EPOCH_SCHEMA = "task string, epoch long"


class _EpochPartition(InputPartition):
    def __init__(self, tasks: list[str], epoch: int) -> None:
        super().__init__(None)
        self.tasks = tasks
        self.epoch = epoch


def _epoch_of(offset: dict) -> int:
    return int(offset.get("epoch", 0))


class EpochStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans epoch ``n + 1`` after epoch ``n``; one partition emits every task's row."""

    def __init__(self, tasks: list[str]) -> None:
        self._tasks = tasks
        self._available_now = False
        self._target: int | None = None

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's API
        """Epoch 0 is before the first one."""
        return {"epoch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """Every epoch is one step: limits do not apply."""
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """An available-now query runs one epoch (the next ``latestOffset`` fixes which)."""
        self._available_now = True
        self._target = None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        """The next epoch (under available-now: the one epoch, then no more)."""
        current = _epoch_of(start)
        if not self._available_now:
            return {"epoch": current + 1}
        if self._target is None:
            self._target = current + 1
        return {"epoch": min(current + 1, self._target)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One partition with every task's row for epoch ``end`` (none if nothing new)."""
        if _epoch_of(end) <= _epoch_of(start):
            return []
        return [_EpochPartition(self._tasks, _epoch_of(end))]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        """``(task group key, epoch)`` per task."""
        assert isinstance(partition, _EpochPartition)
        for task in partition.tasks:
            yield (task, partition.epoch)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Kafka (commit markers, group offsets)."""


class EpochSource(DataSource):
    """Option ``tasks``: JSON list of the tasks' group keys."""

    @classmethod
    def name(cls) -> str:
        """Format name for ``spark.readStream.format``."""
        return EPOCH_FORMAT

    def schema(self) -> str:
        """:data:`EPOCH_SCHEMA`."""
        return EPOCH_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """An :class:`EpochStreamReader` over the tasks of the option."""
        return EpochStreamReader(list(json.loads(self.options["tasks"])))
