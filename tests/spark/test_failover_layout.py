"""Tasks moving while a run goes on: the run's layout file (``runtime/worker_layout.py``), the
lost workers' tasks spread over the running ones (``assignment.move_lost_tasks``), the epoch
call's choice of tasks, and the driver's spread once executors came back
(``spark/failover.py``). No broker, no Spark: the hosts' part is in
``tests/runtime/test_failover_moves.py``."""

from __future__ import annotations

import json
import threading

import pytest

from processor_api.runtime.job import JobSpec
from processor_api.runtime.worker_layout import (
    LAYOUT_FILE,
    LayoutGeneration,
    LayoutLocation,
    WorkerLayout,
)
from processor_api.spark.assignment import ASSIGNMENT_FILE, move_lost_tasks
from processor_api.spark.checkpoint_files import open_checkpoint
from processor_api.spark.epoch_function import worker_tasks
from processor_api.spark.executor_watch import ExecutorWatch
from processor_api.spark.failover import Failover, LossOutcome

TASKS = [f"{sub}_{p}" for sub in (0, 1) for p in range(6)]  # 12 tasks
STATEFUL = {t for t in TASKS if t.startswith("1_")}
START = {
    "w0": ("0_0", "0_4", "1_2"),
    "w1": ("0_1", "0_5", "1_3"),
    "w2": ("0_2", "1_0", "1_4"),
    "w3": ("0_3", "1_1", "1_5"),
}


def test_an_epoch_takes_the_newest_generation_that_applies_to_it():
    layout = (
        WorkerLayout("run", ())
        .with_generation(0, {"w0": ("a",), "w1": ("b",)})
        .with_generation(7, {"w0": (), "w1": ("a", "b")})
        .with_generation(0, {"w0": ("a", "b"), "w1": ()})  # a loss: at once
    )
    assert [g.generation for g in layout.generations] == [0, 1, 2]
    assert layout.tasks_of("w0", 3) == ("a", "b")
    assert layout.tasks_of("w1", 9) == ()  # generation 2 is newer than 1 and applies too
    assert layout.tasks_of("w9", 3) == ()  # a worker it does not name holds nothing
    assert WorkerLayout("run", (LayoutGeneration(0, 5, {"w0": ("a",)}),)).tasks_of("w0", 4) is None
    assert WorkerLayout.from_json(layout.to_json()) == layout


def test_the_file_is_the_runs_own_and_replaced_whole(tmp_path):
    location = LayoutLocation(str(tmp_path / "checkpoint"))
    assert location.read("run") is None  # no file yet
    layout = WorkerLayout("run", ()).with_generation(0, {"w0": ("a",)})
    location.write(layout)
    assert location.read("run") == layout
    assert location.read("another run") is None
    location.write(layout.with_generation(2, {"w0": (), "w1": ("a",)}))
    assert location.read("run") is not None
    assert [p.name for p in (tmp_path / "checkpoint").iterdir()] == [LAYOUT_FILE]  # no leftovers
    assert LayoutLocation(f"file://{tmp_path / 'checkpoint'}").read("run") == location.read("run")


def test_the_lost_workers_tasks_go_to_the_running_ones_and_nothing_else_moves():
    moved = move_lost_tasks(START, ["w2", "w3"], ["w0", "w1"], STATEFUL)
    assert moved["w2"] == moved["w3"] == ()
    for worker in ("w0", "w1"):
        assert moved[worker][: len(START[worker])] == START[worker]  # kept, in place
        assert len(moved[worker]) == 6
        assert len([t for t in moved[worker] if t in STATEFUL]) == 3  # stateful spread evenly
    assert sorted(t for ts in moved.values() for t in ts) == sorted(TASKS)
    with pytest.raises(ValueError, match="no running workers"):
        move_lost_tasks(START, ["w0"], [], STATEFUL)


def test_an_epoch_call_takes_its_tasks_from_the_layout_once_there_is_one(tmp_path):
    location = LayoutLocation(str(tmp_path))
    spec = JobSpec(
        run_id="run",
        topology_ref=None,
        topology_kwargs={},
        topology_pickle=None,
        bootstrap_servers="localhost:1",
        state_dir=str(tmp_path / "state"),
        config={"application_id": "app"},
        assignment=dict(START),
        layout=location,
    )
    assert worker_tasks(spec, "w2", 5) == START["w2"]  # no layout written: the assignment
    location.write(
        WorkerLayout("run", ()).with_generation(0, move_lost_tasks(START, ["w2"], ["w0"], set()))
    )
    assert worker_tasks(spec, "w2", 5) == ()
    assert set(worker_tasks(spec, "w0", 5)) == set(START["w0"]) | set(START["w2"])
    location.write(WorkerLayout("another run", ()).with_generation(0, {"w2": ()}))
    assert worker_tasks(spec, "w2", 5) == START["w2"]  # another run's file is not this run's


def _failover(tmp_path, slots: list[int]) -> Failover:
    return Failover(
        location=LayoutLocation(str(tmp_path)),
        checkpoint=open_checkpoint(str(tmp_path)),
        run_id="run",
        application_id="app",
        task_ids=TASKS,
        assignment=dict(START),
        stateful=STATEFUL,
        state_dirs=lambda: [tmp_path / "state"],  # no hosts there
        started_at=0.0,
        slots=lambda: slots[0],
        fence=None,
    )


def test_without_hosts_on_this_machine_nothing_moves_and_the_runner_cuts(tmp_path):
    failover = _failover(tmp_path, [4])
    assert failover.on_lost() is LossOutcome.UNKNOWN
    assert not (tmp_path / LAYOUT_FILE).exists()


def test_executors_back_spread_the_tasks_again_two_epochs_on_once_slots_suffice(tmp_path):
    failover = _failover(tmp_path, [2])
    location = LayoutLocation(str(tmp_path))
    lost = move_lost_tasks(START, ["w2", "w3"], ["w0", "w1"], STATEFUL)
    failover._write(0, lost)  # as on_lost writes it
    failover.on_added()
    failover.after_batch(last_epoch=11)  # two slots for four workers: not yet
    layout = location.read("run")
    assert layout is not None and len(layout.generations) == 2

    failover._slots = lambda: 4
    failover.after_batch(last_epoch=12)
    layout = location.read("run")
    assert layout is not None and len(layout.generations) == 3
    spread = layout.newest
    assert spread.from_epoch == 14  # the workers of epoch 13 read it when that epoch ends
    assert layout.tasks_of("w0", 13) == lost["w0"]  # the epochs before keep the loss's
    assert sorted(len(t) for t in spread.workers.values()) == [3, 3, 3, 3]
    kept = {w: set(spread.workers[w]) & set(lost[w]) for w in ("w0", "w1")}
    assert all(len(tasks) == 3 for tasks in kept.values())  # sticky: only the surplus moves
    recorded = json.loads((tmp_path / ASSIGNMENT_FILE).read_text())["workers"]
    assert {w: tuple(t) for w, t in recorded.items()} == spread.workers  # the next run's start

    failover.after_batch(last_epoch=13)  # asked once, done once
    assert len(location.read("run").generations) == 3  # type: ignore[union-attr]


def test_the_watch_reports_executors_added_to_on_added():
    listings = iter([{"d:1", "a:2"}, {"d:1"}, {"d:1", "c:3"}])
    added: list[set[str]] = []
    called = threading.Event()
    watch = ExecutorWatch(
        lambda: next(listings),
        lambda lost, now: called.set(),
        on_added=lambda new, now: added.append(new),
    )
    for _ in range(3):
        watch.poll()
    assert called.is_set() and added == [{"c:3"}]
