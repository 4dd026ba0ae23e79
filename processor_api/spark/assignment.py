"""Which worker runs which task: Kafka Streams' sticky, balanced task assignment.

A run has W workers (``num.stream.threads`` per executor, by default one per core), each one
Spark task slot held for the epoch and one host process running its tasks in one poll loop
(``runtime/worker_host.py``). The driver spreads the tasks over them:

* **balanced**: every worker gets ``floor(n/W)`` or ``ceil(n/W)`` tasks, and the stateful
  tasks (those with stores, whose moves cost a restore) are spread evenly on their own,
  placed before the stateless ones;
* **sticky**: a task stays on the worker that ran it in the last run of the same checkpoint
  (recorded in :data:`ASSIGNMENT_FILE`) as long as that worker exists and keeps its share, so
  only the tasks that must move do when the worker count changes.

Spark keeps a worker's Spark task on the executor whose state store it used (its preferred
location), so a task stays on its executor's local state too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from processor_api.spark.checkpoint_files import CheckpointFiles, as_checkpoint

ASSIGNMENT_FILE = "processor_api_assignment.json"

#: A worker's tasks, by worker id.
Assignment = dict[str, tuple[str, ...]]


def worker_ids(count: int) -> list[str]:
    """The ids of ``count`` workers: ``w0``, ``w1``, ..."""
    return [f"w{index}" for index in range(count)]


def assign_tasks(
    task_ids: Sequence[str],
    workers: Sequence[str],
    stateful: Collection[str],
    previous: dict[str, str] | None = None,
) -> Assignment:
    """Spread ``task_ids`` over ``workers`` (see the module docs); ``previous`` maps a task
    to the worker it had."""
    if not workers:
        raise ValueError("no workers to assign tasks to")
    previous = previous or {}
    capacity = math.ceil(len(task_ids) / len(workers))
    stateful_ids = [t for t in task_ids if t in stateful]
    stateless_ids = [t for t in task_ids if t not in stateful]
    stateful_capacity = math.ceil(len(stateful_ids) / len(workers)) if stateful_ids else 0
    tasks_of: dict[str, list[str]] = {w: [] for w in workers}
    stateful_of: dict[str, int] = dict.fromkeys(workers, 0)
    unplaced: list[str] = []
    for task_id in [*stateful_ids, *stateless_ids]:  # stateful first: they stay where they were
        worker = previous.get(task_id)
        is_stateful = task_id in stateful
        if (
            worker in tasks_of
            and len(tasks_of[worker]) < capacity
            and (not is_stateful or stateful_of[worker] < stateful_capacity)
        ):
            tasks_of[worker].append(task_id)
            stateful_of[worker] += is_stateful
        else:
            unplaced.append(task_id)
    order = {w: index for index, w in enumerate(workers)}
    for task_id in unplaced:  # already stateful first
        if task_id in stateful:
            worker = min(workers, key=lambda w: (stateful_of[w], len(tasks_of[w]), order[w]))
        else:
            worker = min(workers, key=lambda w: (len(tasks_of[w]), order[w]))
        tasks_of[worker].append(task_id)
        stateful_of[worker] += task_id in stateful
    position = {t: index for index, t in enumerate(task_ids)}
    return {w: tuple(sorted(tasks_of[w], key=position.__getitem__)) for w in workers}


def move_lost_tasks(
    assignment: Mapping[str, tuple[str, ...]],
    lost: Collection[str],
    running: Sequence[str],
    stateful: Collection[str],
) -> Assignment:
    """``assignment`` with the tasks of the ``lost`` workers spread over the ``running`` ones
    (stateful tasks first, each to the running worker with the fewest stateful tasks, then the
    fewest tasks); every other task stays where it is, and the lost workers hold none."""
    if not running:
        raise ValueError("no running workers to move the lost workers' tasks to")
    moved = {w: list(tasks) for w, tasks in assignment.items()}
    orphans = [t for w in sorted(lost) for t in moved.get(w, [])]
    for worker in lost:
        moved[worker] = []
    order = {w: index for index, w in enumerate(running)}
    for task_id in sorted(orphans, key=lambda t: t not in stateful):
        worker = min(
            running,
            key=lambda w: (
                sum(t in stateful for t in moved[w]) if task_id in stateful else 0,
                len(moved[w]),
                order[w],
            ),
        )
        moved[worker].append(task_id)
    return {w: tuple(tasks) for w, tasks in moved.items()}


def record_assignment(checkpoint: str | Path | CheckpointFiles, assignment: Assignment) -> None:
    """Record ``assignment`` in the checkpoint: the next run starts sticky to it."""
    as_checkpoint(checkpoint).write_text(
        ASSIGNMENT_FILE,
        json.dumps({"workers": {w: list(t) for w, t in assignment.items()}}, indent=1) + "\n",
    )


def load_or_assign(
    checkpoint: str | Path | CheckpointFiles,
    task_ids: Sequence[str],
    workers: Sequence[str],
    stateful: Collection[str],
    before_recording: Callable[[Mapping[str, str], Assignment], None] | None = None,
) -> Assignment:
    """The run's assignment, sticky to the one recorded in the checkpoint, recorded there;
    ``before_recording(previous, assignment)`` (``previous``: each task's worker in the
    recorded one) is called before it is recorded."""
    files = as_checkpoint(checkpoint)
    text = files.read_text(ASSIGNMENT_FILE)
    previous: dict[str, str] = {}
    if text is not None:
        recorded = json.loads(text).get("workers", {})
        previous = {task: worker for worker, tasks in recorded.items() for task in tasks}
    assignment = assign_tasks(task_ids, workers, stateful, previous)
    if before_recording is not None:
        before_recording(previous, assignment)
    record_assignment(files, assignment)
    return assignment


def moved_from(previous: Mapping[str, str], assignment: Assignment) -> list[str]:
    """The workers of ``previous`` that had a task which ``assignment`` gives another one."""
    now = {task: worker for worker, tasks in assignment.items() for task in tasks}
    return sorted({worker for task, worker in previous.items() if now.get(task) != worker})
