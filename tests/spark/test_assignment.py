"""Which worker runs which task (``spark/assignment.py``) and how many workers a run has."""

from __future__ import annotations

import json

from processor_api.spark.assignment import (
    ASSIGNMENT_FILE,
    assign_tasks,
    load_or_assign,
    worker_ids,
)
from processor_api.spark.epochs import local_master, worker_count

TASKS = [f"{sub}_{p}" for sub in (0, 1) for p in range(12)]  # 24 tasks, two sub-topologies
STATEFUL = {t for t in TASKS if t.startswith("1_")}


def _sizes(assignment: dict[str, tuple[str, ...]]) -> list[int]:
    return [len(tasks) for tasks in assignment.values()]


def test_tasks_are_spread_evenly_and_the_stateful_ones_evenly_among_them() -> None:
    assignment = assign_tasks(TASKS, worker_ids(5), STATEFUL)
    assert sorted(_sizes(assignment)) == [4, 5, 5, 5, 5]
    stateful_counts = [len([t for t in ts if t in STATEFUL]) for ts in assignment.values()]
    assert max(stateful_counts) - min(stateful_counts) <= 1
    assert sorted(t for ts in assignment.values() for t in ts) == sorted(TASKS)


def test_a_new_worker_takes_only_its_share_and_the_others_keep_their_tasks() -> None:
    before = assign_tasks(TASKS, worker_ids(2), STATEFUL)
    previous = {t: w for w, ts in before.items() for t in ts}
    after = assign_tasks(TASKS, worker_ids(3), STATEFUL, previous)
    moved = [t for w, ts in after.items() for t in ts if previous[t] != w]
    assert sorted(_sizes(after)) == [8, 8, 8]
    assert len(moved) == 8 and set(moved) == set(after["w2"])  # only the new worker's share


def test_a_worker_gone_hands_its_tasks_to_the_others_and_nothing_else_moves() -> None:
    before = assign_tasks(TASKS, worker_ids(3), STATEFUL)
    previous = {t: w for w, ts in before.items() for t in ts}
    after = assign_tasks(TASKS, worker_ids(2), STATEFUL, previous)
    moved = {t for w, ts in after.items() for t in ts if previous[t] != w}
    assert moved == set(before["w2"])
    assert sorted(_sizes(after)) == [12, 12]


def test_the_assignment_is_recorded_in_the_checkpoint_and_kept_on_resume(tmp_path) -> None:
    first = load_or_assign(tmp_path, TASKS, worker_ids(2), STATEFUL)
    recorded = json.loads((tmp_path / ASSIGNMENT_FILE).read_text())["workers"]
    assert {w: tuple(ts) for w, ts in recorded.items()} == first
    assert load_or_assign(tmp_path, TASKS, worker_ids(2), STATEFUL) == first


def test_a_run_has_a_worker_per_core_or_num_stream_threads_per_executor() -> None:
    assert worker_count(24, cores=2, executors=1, threads=None) == 2
    assert worker_count(24, cores=4, executors=2, threads=3) == 6
    assert worker_count(1, cores=8, executors=1, threads=None) == 1  # never more than tasks
    assert local_master("local[2]", worker_count(24, 2, 1, None)) == "local[2]"
    assert local_master("local[2]", worker_count(24, 2, 1, 4)) == "local[4]"
