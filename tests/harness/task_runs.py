"""One task ``0_0`` in a task runner, on a real broker, without Spark: the job spec a run
would hand its executors, the runner holding the task directory's lock, an epoch of it run in
a thread, and an epoch's request for the tests of the host protocol."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from processor_api.runtime.epoch_runner import EpochControl
from processor_api.runtime.host_client import worker_key
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import (
    EpochEnd,
    EpochReply,
    EpochRequest,
    TaskEpoch,
    WorkerEpochReply,
    WorkerEpochRequest,
)
from processor_api.state.locks import TaskLock
from processor_api.state.manager import task_directory
from processor_api.topology import Topology

TASK = "0_0"


def one_task(
    runner_class: type,
    topology: Topology,
    *,
    run_id: str,
    bootstrap: str,
    state_dir: Path,
    config: dict[str, Any],
    input_topic: str | None = None,
) -> tuple[JobSpec, Any]:
    """``(spec, runner_class(spec, topology, "0_0", lock))``; ``config`` names the
    application; ``input_topic`` (if given) starts from its earliest offset."""
    spec = JobSpec(
        run_id=run_id,
        topology_ref=None,
        topology_kwargs={},
        topology_pickle=None,
        bootstrap_servers=bootstrap,
        state_dir=str(state_dir),
        config=config,
        task_ids=(TASK,),
        flush_timeout_s=10,
        reset_policies={input_topic: "earliest"} if input_topic else {},
    )
    app = config["application_id"]
    lock = TaskLock(task_directory(str(state_dir), app, TASK), TASK).__enter__()
    return spec, runner_class(spec, topology, TASK, lock)


class EpochInThread:
    """``runner.run_epoch(request, control)`` in a daemon thread (so that a test can act while
    it runs, and a deadlocked epoch cannot hang the test): :meth:`result` after it ended."""

    def __init__(self, runner: Any, request: EpochRequest, control: EpochControl) -> None:
        self._outcome: list[EpochReply | BaseException] = []

        def run() -> None:
            try:
                self._outcome.append(runner.run_epoch(request, control))
            except BaseException as exc:  # noqa: BLE001 - re-raised by result()
                self._outcome.append(exc)

        self.thread = threading.Thread(target=run, name=f"epoch-{request.epoch}", daemon=True)
        self.thread.start()

    def result(self) -> EpochReply:
        """The epoch's reply; its error re-raised."""
        (outcome,) = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def epoch_request(epoch: int, end: EpochEnd) -> EpochRequest:
    """An epoch's request that no host can run (the fake hosts of the protocol tests only
    read it)."""
    spec = JobSpec(
        run_id="run-1",
        topology_ref="tests.nowhere:build",
        topology_kwargs={},
        topology_pickle=None,
        bootstrap_servers="localhost:1",
        state_dir="/nonexistent",
        config={"application_id": "app"},
        task_ids=(TASK,),
    )
    return EpochRequest(spec, TASK, None, epoch, end)


def one_task_epoch(
    spec: JobSpec, state_json: str | None, epoch: int, end: EpochEnd, task_id: str = TASK
) -> WorkerEpochRequest:
    """A worker's epoch request for one task (worker ``w0``)."""
    return WorkerEpochRequest(spec, "w0", (TaskEpoch(task_id, state_json),), epoch, end)


def the_reply(reply: Any, task_id: str = TASK) -> EpochReply:
    """The task's reply in a worker's reply (asserting there is one)."""
    assert isinstance(reply, WorkerEpochReply), f"the host answered {reply!r}"
    assert task_id in reply.replies, f"no reply for task {task_id}: {reply!r}"
    return reply.replies[task_id]


def worker_of(spec: JobSpec) -> Path:
    """The key of worker ``w0`` of ``spec``'s application (its host's socket name)."""
    return worker_key(spec.state_dir, spec.config["application_id"], "w0")
