"""A one-shot streaming source that makes every task exist from the first micro-batch.

Spark only calls the ``applyInPandasWithState`` function for groups that have rows or state.
A task whose partition has no data yet would never run ``init()``, so its wall-clock
punctuations would never fire. This source emits one row per task id, once (offset 0 -> 1);
after that every task has ``GroupState`` and processing-time timeouts wake it when idle.
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

BOOTSTRAP_FORMAT = "processor_api_task_bootstrap"
BOOTSTRAP_SCHEMA = "task string, topic string, partition int, start long, end long"


class _TasksPartition(InputPartition):
    def __init__(self, tasks: list[str]) -> None:
        super().__init__(None)
        self.tasks = tasks


class _BootstrapReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, tasks: list[str]) -> None:
        self._tasks = tasks

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's API
        return {"emitted": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        return {"emitted": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if int(start.get("emitted", 0)) >= 1 or int(end.get("emitted", 0)) < 1:
            return []
        return [_TasksPartition(self._tasks)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        for task in partition.tasks:  # type: ignore[attr-defined]
            yield (task, "", -1, -1, -1)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Nothing to fix: the one row per task is all there ever is."""

    def commit(self, end: dict) -> None:
        pass


class TaskBootstrapSource(DataSource):
    """Option ``tasks``: JSON list of task ids to emit once."""

    @classmethod
    def name(cls) -> str:
        return BOOTSTRAP_FORMAT

    def schema(self) -> str:
        return BOOTSTRAP_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return _BootstrapReader(list(json.loads(self.options["tasks"])))
