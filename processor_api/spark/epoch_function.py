"""The function Spark runs for each task and epoch in ``applyInPandasWithState``.

One call = one task for one epoch. It hands the epoch to the task's host process
(``runtime/task_host.py``) and stays connected while the host runs the task's poll loop; the
host works on the task only while this call is connected, and tells it every few seconds that
it is there and how long ago its loop last turned: a host that says nothing, or whose loop
stands still, for longer than ``task.timeout.ms`` and a grace fails the call, naming the task.
At the epoch's end the host answers with the task's last committed metadata, which the call
stores in ``GroupState``, and the call returns one row of statistics. If the call dies (its worker or executor is killed, Spark
cancels the task), the host drops what it has not committed.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd

from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.logging import configure_logging, get_logger
from processor_api.runtime.host_client import exchange, raise_remote_error
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import EpochEnd, EpochReply, EpochRequest
from processor_api.spark.task_keys import task_id_of
from processor_api.state.manager import task_directory

OUTPUT_SCHEMA = (
    "task string, records long, outputs long, changelog_records long, restored long, "
    "stream_time long, positions string, duration_ms double, pid int, inits int, lag long"
)
STATE_SCHEMA = "metadata string"

_configured: set[str] = set()

#: Beyond ``task.timeout.ms`` (the longest the host's loop may wait for the broker), how long
#: a call waits for a message from its host (which sends one every few seconds).
ANSWER_GRACE_S = 60.0


def loop_patience_s(task_timeout_s: float) -> float:
    """How long the host's loop may stand still before the epoch's call fails: the task's
    ``task.timeout.ms`` plus as much again, at most ``ANSWER_GRACE_S`` more."""
    return task_timeout_s + min(task_timeout_s, ANSWER_GRACE_S)


def worker_setup(spec: JobSpec) -> None:
    """Once per run in each Python worker: the run's log format, and ``gc.freeze()``."""
    if spec.run_id not in _configured:
        configure_logging(spec.log_format)
        # pyspark's worker daemon runs gc.collect() after every Spark task; freezing what is
        # alive now (pyspark, pandas, pyarrow) takes it out of every later collection
        gc.freeze()
        _configured.add(spec.run_id)


def _epoch(frames: Iterator[pd.DataFrame]) -> int:
    epoch = 0
    for frame in frames:
        if not frame.empty:
            epoch = max(epoch, int(frame["epoch"].max()))
    return epoch


def run_epoch(
    spec: JobSpec, end: EpochEnd, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    """The ``applyInPandasWithState`` function body for one task and one epoch."""
    started = time.monotonic()
    worker_setup(spec)
    task_id = task_id_of(str(key[0]))
    epoch = _epoch(frames)
    get_logger("processor_api.spark_task", task=task_id).debug("epoch_call_started", epoch=epoch)
    directory = task_directory(spec.executor_state_dir, spec.config["application_id"], task_id)
    request = EpochRequest(
        spec=spec,
        task_id=task_id,
        state_json=state.get[0] if state.exists else None,
        epoch=epoch,
        end=end,
    )
    task_timeout_s = StreamsConfig.from_dict(spec.config).task_timeout_ms / 1000
    reply = exchange(
        directory,
        spec.log_format,
        request,
        timeout_s=task_timeout_s + ANSWER_GRACE_S,
        stuck_after_s=loop_patience_s(task_timeout_s),
    )
    if not isinstance(reply, EpochReply):
        raise_remote_error(reply)
    state.update((reply.metadata_json,))
    duration_ms = (time.monotonic() - started) * 1000
    metadata = TaskMetadata.from_json(reply.metadata_json)
    get_logger("processor_api.spark_task", task=task_id).debug(
        "task_epoch_done",
        epoch=epoch,
        records=reply.processed,
        outputs=reply.outputs,
        commits=reply.commits,
        stream_time=metadata.stream_time,
        duration_ms=round(duration_ms, 1),
    )
    yield pd.DataFrame(
        {
            "task": [task_id],
            "records": [reply.processed],
            "outputs": [reply.outputs],
            "changelog_records": [reply.changelog_records],
            "restored": [reply.restored],
            "stream_time": [metadata.stream_time],
            "positions": [json.dumps(metadata.input_positions, sort_keys=True)],
            "duration_ms": [duration_ms],
            "pid": [os.getpid()],
            "inits": [reply.inits],
            "lag": pd.Series([reply.lag], dtype="Int64"),
        }
    )
