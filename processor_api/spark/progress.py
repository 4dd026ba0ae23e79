"""Progress of a running query: per-batch statistics from ``foreachBatch`` and a periodic
``progress`` event (records/s, lag per task), plus what Spark's own progress reports say."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from processor_api.errors import StreamsError
from processor_api.logging import get_logger
from processor_api.spark.settings import RunResult

_log = get_logger("processor_api.runner")

#: How often a running query logs a ``progress`` event (records/s, lag per task).
PROGRESS_INTERVAL_S = 30.0


class Progress:
    """Batch statistics collected by ``foreachBatch`` (runs on a py4j callback thread)."""

    def __init__(
        self,
        end_offsets_of: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]] | None = None,
        interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self.lock = threading.Lock()
        self.result = RunResult()
        self.positions: dict[tuple[str, int], int] = {}
        self.completed_batches: set[int] = set()
        #: the newest epoch a worker reported (0: none yet)
        self.last_epoch = 0
        self._end_offsets_of = end_offsets_of
        self._interval_s = interval_s
        self._task_topics: dict[str, set[str]] = {}
        self._last_report = time.monotonic()
        self._records_at_report = 0

    def on_batch(self, frame: Any, batch_id: int) -> None:
        started = time.monotonic()
        rows = frame.collect()
        with self.lock:
            records = sum(r["records"] for r in rows)
            outputs = sum(r["outputs"] for r in rows)
            changelog = sum(r["changelog_records"] for r in rows)
            restored = sum(r["restored"] for r in rows)
            for row in rows:
                partition = int(row["task"].split("_", 1)[1])
                positions = json.loads(row["positions"])
                self._task_topics.setdefault(row["task"], set()).update(positions)
                for topic, position in positions.items():
                    key = (topic, partition)
                    self.positions[key] = max(self.positions.get(key, 0), int(position))
            result = self.result
            result.batches += 1
            result.records += records
            result.outputs += outputs
            result.changelog_records += changelog
            result.restored += restored
            self.completed_batches.add(batch_id)
            self.last_epoch = max([self.last_epoch, *(int(r["epoch"]) for r in rows)])
        if records or outputs or restored:
            _log.info(
                "batch_done",
                batch=batch_id,
                tasks=len(rows),
                records=records,
                outputs=outputs,
                changelog_records=changelog,
                restored=restored,
                max_task_ms=round(max((r["duration_ms"] for r in rows), default=0.0), 1),
                collect_ms=round((time.monotonic() - started) * 1000, 1),
            )
        self._report_progress()

    def _report_progress(self) -> None:
        """Every ``interval_s``: a ``progress`` event with records/s and the lag per task.

        The lag of a task is the sum, over its input partitions, of the broker's end offset
        minus the position the task has committed (what ``kafka-consumer-groups --describe``
        shows as LAG); one end-offset look-up per report.
        """
        now = time.monotonic()
        elapsed = now - self._last_report
        if elapsed < self._interval_s:
            return
        with self.lock:
            records = self.result.records
            positions = dict(self.positions)
            task_topics = {task: set(topics) for task, topics in self._task_topics.items()}
        lag: dict[str, int] = {}
        if self._end_offsets_of is not None and positions:
            try:
                ends = self._end_offsets_of(sorted(positions))
            except StreamsError as exc:
                _log.debug("progress_lag_unknown", error=str(exc))
                ends = {}
            for task, topics in sorted(task_topics.items()):
                partition = int(task.split("_", 1)[1])
                keys = [(t, partition) for t in topics if (t, partition) in ends]
                if keys:
                    lag[task] = sum(max(0, ends[k] - positions.get(k, 0)) for k in keys)
        _log.info(
            "progress",
            records=records,
            records_per_s=round((records - self._records_at_report) / elapsed, 1),
            batches=self.result.batches,
            lag=sum(lag.values()) if lag else None,
            lag_by_task=lag or None,
        )
        self._last_report, self._records_at_report = now, records


#: The name of the run's observed metrics in Spark's progress (``observedMetrics``).
OBSERVED = "processor_api"


def observed(results: Any) -> Any:
    """``results`` (one row per task and batch) with the run's figures observed for Spark's
    progress: ``query.lastProgress["observedMetrics"]["processor_api"]`` holds, per epoch,
    the records processed, outputs, changelog records, records restored, tasks, the lag left
    at the epoch's end, and the longest task call (``max_task_ms``)."""
    from pyspark.sql import functions as F

    return results.observe(
        OBSERVED,
        F.coalesce(F.sum("records"), F.lit(0)).alias("records"),
        F.coalesce(F.sum("outputs"), F.lit(0)).alias("outputs"),
        F.coalesce(F.sum("changelog_records"), F.lit(0)).alias("changelog_records"),
        F.coalesce(F.sum("restored"), F.lit(0)).alias("restored"),
        F.count(F.lit(1)).alias("tasks"),
        F.sum("lag").alias("lag"),
        F.max("duration_ms").alias("max_task_ms"),
    )


def log_batch_timings(query: Any) -> None:
    """Where each epoch's time went, as Spark measured it (``durationMs``)."""
    for progress in query.recentProgress or []:
        durations = progress.get("durationMs") or {}
        _log.debug(
            "spark_batch_timings",
            batch=progress.get("batchId"),
            input_rows=progress.get("numInputRows"),
            **{f"{name}_ms": value for name, value in sorted(durations.items())},
        )
