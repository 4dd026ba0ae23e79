"""Crash scenarios: seed 000's sales aggregation under ``run-topology
--available-now``, killed with ``kill -9`` (the whole process tree) at well-defined moments and
restarted, then compared with the reference fold (:mod:`tests.harness.folds`).

Used by ``tests/reliability/test_crash.py`` and ``python -m tests.reliability.soak``.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from tests.harness.folds import (
    SALES,
    SALES_STORE,
    Comparison,
    Sale,
    compare,
    expected_notifications,
    fold_totals,
    notifications_by_product,
    produce_sales,
)
from tests.harness.processes import CliRun, RunEnded, cli_args
from tests.harness.topics import create_topics_now, read_topic, uid
from tests.harness.wire import OutputWatch, high_watermarks, topic_transaction_status

PACED_SALES = "tests.reliability.topologies_for_tests:build_paced_sales"
PAUSING_LISTENER = "tests.reliability.topologies_for_tests:PausingRestoreListener"

KILL_KINDS = ("mid_batch", "between_batches", "restore", "state_dir_deleted")


@dataclass
class KillRecord:
    kind: str
    run: int
    done: bool  # False: the run finished before the kill point
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CrashReport:
    guarantee: str
    events: int
    products: int
    runs: int = 0
    kills: list[KillRecord] = field(default_factory=list)
    read_committed: Comparison | None = None  # what a read_committed reader sees (on Tansu)
    committed_only: Comparison | None = None  # aborted records filtered by their markers
    output_status: dict[str, int] = field(default_factory=dict)
    aborted_visible: int = 0  # records Tansu shows a read_committed reader though aborted
    aborted_markers: int = 0  # aborted records on the commit-marker topic
    store_totals_equal: bool = False
    duration_s: float = 0.0
    logs: str = ""
    failure: str = ""  # a run that failed by itself (the soak's repeat series counts them)

    def kills_by_kind(self) -> dict[str, int]:
        counts = Counter(k.kind for k in self.kills if k.done)
        return {kind: counts.get(kind, 0) for kind in KILL_KINDS}

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kills_by_kind"] = self.kills_by_kind()
        return data


class CrashScenario:
    """Seed 000's sales aggregation under ``run-topology --available-now``, killed and
    restarted: ``kills`` is the sequence of kill kinds, then one last run to the end."""

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        guarantee: str,
        sales: list[Sale],
        *,
        partitions: int = 3,
        max_records_per_batch: int = 400,
        seed: int = 0,
        run_timeout_s: float = 420.0,
        mid_batch_wait_s: float = 3.0,
        pause_ms: float = 0.0,
        epochs: bool = False,
        commit_interval_ms: int | None = None,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.guarantee = guarantee
        self.sales = sales
        self.partitions = partitions
        self.max_records_per_batch = max_records_per_batch
        self.rnd = random.Random(seed)
        self.run_timeout_s = run_timeout_s
        self.mid_batch_wait_s = mid_batch_wait_s
        self.pause_ms = pause_ms  # > 0: the paced variant of seed 000's topology
        # epochs: one long epoch per run; kills are placed by the tasks' commits
        self.epochs = epochs
        self.commit_interval_ms = commit_interval_ms
        self.log = log
        run_id = uid()
        self.input_topic = f"crash-sales-{run_id}"
        self.output_topic = f"crash-notes-{run_id}"
        self.app_id = f"crash-{guarantee.split('_')[0]}-{run_id}"
        self.state_dir = workdir / "state"
        self.checkpoint_dir = workdir / "spark-checkpoint"  # outside the state dir
        self.log_path = workdir / "run-topology.log"
        self.report = CrashReport(
            guarantee, len(sales), len({s.product for s in sales}), logs=str(self.log_path)
        )

    def args(self, kill: str | None = None) -> list[str]:
        """The run's arguments; a run to be killed in a restore holds each restored batch
        (``PausingRestoreListener``) so the kill lands inside it however fast it is."""
        config = {"state.restore.listener": PAUSING_LISTENER} if kill == "restore" else {}
        if self.commit_interval_ms is not None:
            config["commit.interval.ms"] = str(self.commit_interval_ms)
        topology_args: dict[str, Any] = {
            "input_topic": self.input_topic,
            "output_topic": self.output_topic,
        }
        if self.pause_ms:
            topology_args["pause_ms"] = self.pause_ms
        return cli_args(
            PACED_SALES if self.pause_ms else SALES,
            self.bootstrap,
            self.app_id,
            self.state_dir,
            self.checkpoint_dir,
            guarantee=self.guarantee,
            max_records_per_batch=None if self.epochs else self.max_records_per_batch,
            topology_args=topology_args,
            config=config,
            # the commits that place the kills are debug events
            extra=["--epochs", "--log-level", "debug"] if self.epochs else (),
        )

    def setup(self) -> None:
        create_topics_now(
            self.bootstrap, {self.input_topic: self.partitions, self.output_topic: self.partitions}
        )
        produce_sales(self.bootstrap, self.input_topic, self.sales)

    # -- kill points
    def _committed_batches(self) -> set[int]:
        commits = self.checkpoint_dir / "commits"
        if not commits.exists():
            return set()
        return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}

    def _kill(self, run: CliRun, kind: str, number: int) -> KillRecord:
        record = KillRecord(kind, number, done=False)
        timeout = self.run_timeout_s
        try:
            if self.epochs and kind != "restore":
                record.detail = self._epoch_kill_point(run, kind, timeout)
            elif kind in ("mid_batch", "state_dir_deleted"):
                # after >= 1 batch of this run committed, so the changelog positions in
                # GroupState are > 0 and the next start has something to restore
                skip = self.rnd.randint(1, 2)
                after = 0
                for _ in range(skip):
                    after = (
                        run.wait_event(
                            lambda e: e.name == "batch_done" and e.event.get("records", 0) > 0,
                            timeout,
                            after,
                        ).index
                        + 1
                    )
                hit = run.wait_event(
                    lambda e: e.name == "task_batch_done" and e.event.get("records", 0) > 0,
                    timeout,
                    after,
                )
                # kill once the next task has produced output records that no commit marker
                # follows yet (its open transaction, under exactly-once: records whose
                # transaction already committed do not count); if none within the bound,
                # kill anyway
                marks = high_watermarks(self.bootstrap, self.output_topic, self.partitions)
                deadline = time.monotonic() + self.mid_batch_wait_s
                produced = 0
                watch = OutputWatch(self.bootstrap, self.output_topic, marks)
                try:
                    while time.monotonic() < deadline and run.is_alive():
                        produced = watch.count()
                        if produced:
                            break
                        time.sleep(0.001)
                finally:
                    watch.close()
                if not run.is_alive():
                    raise RunEnded("ended while waiting for output")
                record.detail = {
                    "after_batches": skip,
                    "task": hit.event.get("task"),
                    "output_in_flight": produced,
                }
            elif kind == "between_batches":
                skip = self.rnd.randint(0, 2)
                after = 0
                while True:
                    done = run.wait_event("batch_done", timeout, after)
                    after = done.index + 1
                    if skip == 0 and done.event.get("records", 0) > 0:
                        break
                    skip -= 1 if done.event.get("records", 0) > 0 else 0
                batch = int(done.event["batch"])
                deadline = time.monotonic() + 30
                while batch not in self._committed_batches():
                    if time.monotonic() > deadline or not run.is_alive():
                        raise RunEnded(f"batch {batch} was never committed")
                    time.sleep(0.005)
                record.detail = {"batch": batch}
            elif kind == "restore":
                hit = run.wait_event("restore_start", timeout)
                record.detail = {
                    "task": hit.event.get("task"),
                    "end_offset": hit.event.get("end_offset"),
                }
            else:
                raise ValueError(kind)
        except RunEnded:
            self.log(f"  run {number} ended before the {kind} kill point")
            return record
        run.kill9()
        record.done = True
        if kind == "restore":
            # did the kill land while a restore was in flight? (restore_start without done)
            started = {e["task"] for e in run.find("restore_start")}
            finished = {e["task"] for e in run.find("restore_done")}
            record.detail["in_flight"] = sorted(started - finished)
        if kind == "state_dir_deleted":
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return record

    def _epoch_kill_point(self, run: CliRun, kind: str, timeout: float) -> dict[str, Any]:
        """In epochs: ``between_batches`` kills right after a task's commit (of processed
        records); ``mid_batch`` and ``state_dir_deleted`` once 1-3 commits happened, as soon
        as output records that no transaction marker follows are in the log (an open
        transaction, under exactly-once)."""
        skip = self.rnd.randint(1, 3)
        after = 0
        for _ in range(skip):
            after = (
                run.wait_event(
                    lambda e: e.name == "task_committed" and e.event.get("processed", 0) > 0,
                    timeout,
                    after,
                ).index
                + 1
            )
        if kind == "between_batches":
            return {"after_commits": skip}
        if kind not in ("mid_batch", "state_dir_deleted"):
            raise ValueError(kind)
        marks = high_watermarks(self.bootstrap, self.output_topic, self.partitions)
        deadline = time.monotonic() + self.mid_batch_wait_s
        produced = 0
        watch = OutputWatch(self.bootstrap, self.output_topic, marks)
        try:
            while time.monotonic() < deadline and run.is_alive():
                produced = watch.count()
                if produced:
                    break
                time.sleep(0.001)
        finally:
            watch.close()
        if not run.is_alive():
            raise RunEnded("ended while waiting for output")
        return {"after_commits": skip, "output_in_flight": produced}

    # -- the scenario
    def run(self, kills: list[str]) -> CrashReport:
        started = time.monotonic()
        try:
            return self._run(kills)
        finally:
            self.report.duration_s = round(time.monotonic() - started, 1)

    def _run(self, kills: list[str]) -> CrashReport:
        self.setup()
        number = 0
        for kind in kills:
            number += 1
            with CliRun(self.args(kind), self.log_path) as run:
                record = self._kill(run, kind, number)
                self.report.kills.append(record)
                self.log(f"  run {number}: kill {kind} done={record.done} {record.detail}")
                if not record.done:
                    code = run.wait(60)
                    if code != 0:
                        raise AssertionError(f"run {number} exited {code}; {run.tail()}")
        number += 1
        with CliRun(self.args(), self.log_path) as run:
            code = run.wait(self.run_timeout_s)
            if code != 0:
                raise AssertionError(f"final run exited {code}; {run.tail()}")
        self.report.runs = number
        self.evaluate()
        return self.report

    def evaluate(self) -> CrashReport:
        expected = expected_notifications(self.sales)
        totals = fold_totals(self.sales)
        store = read_local_store(
            self.state_dir, self.app_id, SALES_STORE, Serdes.string(), Serdes.long()
        )
        self.report.store_totals_equal = store == totals
        records = read_topic(self.bootstrap, self.output_topic)
        status = topic_transaction_status(self.bootstrap, self.output_topic)
        self.report.output_status = dict(Counter(status.values()))
        visible = notifications_by_product(records)
        self.report.read_committed = compare(expected, visible, self.guarantee, totals, store)
        kept = [r for r in records if status.get((r.partition, r.offset)) != "aborted"]
        self.report.aborted_visible = len(records) - len(kept)
        self.report.committed_only = compare(
            expected, notifications_by_product(kept), self.guarantee, totals, store
        )
        if self.guarantee == "exactly_once_v2":
            markers = topic_transaction_status(self.bootstrap, f"{self.app_id}-task-commits")
            self.report.aborted_markers = sum(1 for s in markers.values() if s == "aborted")
        return self.report
