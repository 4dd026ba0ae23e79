"""The function Spark runs for each worker and epoch in ``applyInPandasWithState``.

One call = one worker for one epoch. It hands the epoch of the worker's tasks to the worker's
host process (``runtime/worker_host.py``) and stays connected while the host runs their poll
loop; the host works only while this call is connected, and tells it every few seconds that
it is there and how long ago its loop last turned: a host that says nothing, or whose loop
stands still, for longer than ``task.timeout.ms`` and a grace fails the call, naming the
worker. At the epoch's end the host answers with each task's last committed metadata, which
the call stores in the worker's ``GroupState`` (a JSON object by task id), and the call
returns one row of statistics per task. If the call dies (its Python worker or executor is
killed, Spark cancels it), the host drops what its tasks have not committed.
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
from processor_api.runtime.host_client import exchange, raise_remote_error, worker_key
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import (
    EpochEnd,
    EpochReply,
    TaskEpoch,
    WorkerEpochReply,
    WorkerEpochRequest,
)
from processor_api.spark.task_keys import task_id_of

OUTPUT_SCHEMA = (
    "task string, records long, outputs long, changelog_records long, restored long, "
    "stream_time long, positions string, duration_ms double, pid int, inits int, lag long, "
    "epoch long"
)
STATE_SCHEMA = "metadata string"

_configured: set[str] = set()

#: Beyond ``task.timeout.ms`` (the longest the host's loop may wait for the broker), how long
#: a call waits for a message from its host (which sends one every few seconds).
ANSWER_GRACE_S = 60.0


def loop_patience_s(task_timeout_s: float) -> float:
    """How long the host's loop may stand still before the epoch's call fails: the tasks'
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
    """The ``applyInPandasWithState`` function body for one worker and one epoch."""
    started = time.monotonic()
    worker_setup(spec)
    worker = task_id_of(str(key[0]))
    epoch = _epoch(frames)
    log = get_logger("processor_api.spark_task", worker=worker)
    log.debug("epoch_call_started", epoch=epoch)
    states: dict[str, str] = json.loads(state.get[0]) if state.exists else {}
    tasks = worker_tasks(spec, worker, epoch)
    if tasks:
        replies = _exchange(spec, end, worker, epoch, tasks, states)
        states.update({task_id: r.metadata_json for task_id, r in replies.items()})
        state.update((json.dumps(states, sort_keys=True),))
    else:  # its tasks run on other workers now: the slot is free at once
        log.debug("epoch_without_tasks", epoch=epoch)
        replies = {}
    duration_ms = (time.monotonic() - started) * 1000
    rows: dict[str, list[Any]] = {column.split()[0]: [] for column in OUTPUT_SCHEMA.split(", ")}
    for task_id, task_reply in replies.items():
        metadata = TaskMetadata.from_json(task_reply.metadata_json)
        get_logger("processor_api.spark_task", task=task_id).debug(
            "task_epoch_done",
            epoch=epoch,
            records=task_reply.processed,
            outputs=task_reply.outputs,
            commits=task_reply.commits,
            stream_time=metadata.stream_time,
            duration_ms=round(duration_ms, 1),
        )
        rows["task"].append(task_id)
        rows["records"].append(task_reply.processed)
        rows["outputs"].append(task_reply.outputs)
        rows["changelog_records"].append(task_reply.changelog_records)
        rows["restored"].append(task_reply.restored)
        rows["stream_time"].append(metadata.stream_time)
        rows["positions"].append(json.dumps(metadata.input_positions, sort_keys=True))
        rows["duration_ms"].append(duration_ms)
        rows["pid"].append(os.getpid())
        rows["inits"].append(task_reply.inits)
        rows["lag"].append(task_reply.lag)
        rows["epoch"].append(epoch)
    columns = {name: values for name, values in rows.items() if name not in ("lag", "epoch")}
    frame = pd.DataFrame(columns)
    frame["lag"] = pd.Series(rows["lag"], dtype="Int64")
    frame["epoch"] = pd.Series(rows["epoch"], dtype="int64")
    yield frame


def worker_tasks(spec: JobSpec, worker: str, epoch: int) -> tuple[str, ...]:
    """The tasks ``worker`` runs in ``epoch``: the run's layout's when the driver moved tasks
    during the run (``runtime/worker_layout.py``), else the assignment it started with."""
    layout = None if spec.layout is None else spec.layout.read(spec.run_id)
    tasks = None if layout is None else layout.tasks_of(worker, epoch)
    return spec.assignment.get(worker, ()) if tasks is None else tasks


def _exchange(
    spec: JobSpec,
    end: EpochEnd,
    worker: str,
    epoch: int,
    tasks: tuple[str, ...],
    states: dict[str, str],
) -> dict[str, EpochReply]:
    """Run the epoch of ``tasks`` in the worker's host; each task's reply."""
    request = WorkerEpochRequest(
        spec=spec,
        worker=worker,
        tasks=tuple(TaskEpoch(task_id, states.get(task_id)) for task_id in tasks),
        epoch=epoch,
        end=end,
    )
    task_timeout_s = StreamsConfig.from_dict(spec.config).task_timeout_ms / 1000
    reply = exchange(
        worker_key(spec.executor_state_dir, spec.config["application_id"], worker),
        spec.log_format,
        request,
        timeout_s=task_timeout_s + ANSWER_GRACE_S,
        stuck_after_s=loop_patience_s(task_timeout_s),
        early_start_pid=spec.early_start_pid,
    )
    if not isinstance(reply, WorkerEpochReply):
        raise_remote_error(reply)
    return reply.replies
