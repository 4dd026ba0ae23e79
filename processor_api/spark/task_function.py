"""The function Spark runs for each task in ``applyInPandasWithState`` (executor side).

One call = one task (sub-topology x partition) for one micro-batch. Its rows are the offset
ranges the source planned for the task's input partitions (plus, in the first micro-batch, a
bootstrap row that only makes the task exist). The call hands the ranges and the task's
committed metadata (``GroupState``) to the task's host process, which keeps the task alive
between micro-batches, reads the ranges from Kafka, processes them and commits
(``task_runner.py``); the call stores the new metadata in ``GroupState`` and returns one row of
statistics.

Spark commits the micro-batch (source offsets and GroupState) only after every task returned,
so a failure anywhere before leaves the committed state as it was and the batch is re-run.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd

from processor_api.engine.metadata import TaskMetadata
from processor_api.logging import configure_logging, get_logger
from processor_api.runtime.host_client import exchange, raise_remote_error
from processor_api.runtime.job import JobSpec
from processor_api.runtime.task_runner import InputRange
from processor_api.spark.task_keys import task_id_of
from processor_api.state.manager import task_directory

OUTPUT_SCHEMA = (
    "task string, records long, outputs long, changelog_records long, restored long, "
    "stream_time long, positions string, duration_ms double, pid int, timed_out boolean, "
    "inits int, lag long"
)
STATE_SCHEMA = "metadata string"
RANGE_COLUMNS = ("topic", "partition", "start", "end")
BOOTSTRAP_TOPIC = ""  # rows that only make a task exist (no Kafka record)

_configured: set[str] = set()


def worker_setup(spec: JobSpec) -> None:
    if spec.run_id not in _configured:
        configure_logging(spec.log_format)
        # pyspark's worker daemon runs gc.collect() after every Spark task; freezing what is
        # alive now (pyspark, pandas, pyarrow) takes it out of every later collection
        gc.freeze()
        _configured.add(spec.run_id)


def _ranges(frames: Iterator[pd.DataFrame]) -> list[InputRange]:
    ranges = []
    for frame in frames:
        if frame.empty:
            continue
        columns = [frame[name].tolist() for name in RANGE_COLUMNS]
        for topic, partition, start, end in zip(*columns, strict=True):
            if topic is None or topic == BOOTSTRAP_TOPIC:
                continue
            ranges.append(InputRange(topic, int(partition), int(start), int(end)))
    return ranges


def run_task(
    spec: JobSpec, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    """The ``applyInPandasWithState`` function body for one task and one micro-batch."""
    started = time.monotonic()
    worker_setup(spec)
    task_id = task_id_of(str(key[0]))
    timed_out = bool(state.hasTimedOut)
    ranges = _ranges(frames)
    directory = task_directory(spec.executor_state_dir, spec.config["application_id"], task_id)
    request = {
        "op": "batch",
        "spec": spec,
        "task_id": task_id,
        "state": state.get[0] if state.exists else None,
        "ranges": ranges,
    }
    reply = exchange(directory, spec.log_format, request)
    if not reply["ok"]:
        raise_remote_error(reply)
    result = reply["result"]
    state.update((result.metadata_json,))
    wake_ups = [
        due for due in (result.next_wall_clock_due, result.next_idle_due) if due is not None
    ]
    if wake_ups and spec.wall_clock_timeouts:
        # a wall-clock punctuation is due, max.task.idle.ms runs out for held-back input, or
        # stream.time.idle.advance.ms makes a stream-time punctuation due
        state.setTimeoutDuration(max(1, min(wake_ups) - result.clock_ms))
    duration_ms = (time.monotonic() - started) * 1000
    metadata = TaskMetadata.from_json(result.metadata_json)
    if ranges or result.changelog_records or result.outputs:
        get_logger("processor_api.spark_task", task=task_id).info(
            "task_batch_done",
            ranges=len(ranges),
            records=result.processed,
            outputs=result.outputs,
            changelog_records=result.changelog_records,
            stream_time=metadata.stream_time,
            duration_ms=round(duration_ms, 1),
            **({"dropped_records": result.dropped_records} if result.dropped_records else {}),
        )
    yield pd.DataFrame(
        {
            "task": [task_id],
            "records": [result.processed],
            "outputs": [result.outputs],
            "changelog_records": [result.changelog_records],
            "restored": [result.restored],
            "stream_time": [metadata.stream_time],
            "positions": [json.dumps(metadata.input_positions, sort_keys=True)],
            "duration_ms": [duration_ms],
            "pid": [os.getpid()],
            "timed_out": [timed_out],
            "inits": [reply["inits"]],
            "lag": pd.Series([None], dtype="Int64"),  # the source's progress shows offsets
        }
    )
