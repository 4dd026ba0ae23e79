"""One task ``0_0`` in a task runner, on a real broker, without Spark: the job spec a run
would hand its executors, and the runner holding the task directory's lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from processor_api.runtime.job import JobSpec
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
