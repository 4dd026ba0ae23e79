"""Crash scenarios: seed 000's sales aggregation under ``run-topology
--available-now``, killed with ``kill -9`` (the whole process tree) at well-defined moments and
restarted, then compared with the reference fold (:mod:`tests.harness.folds`).

Each run is one epoch in which every task commits every ``commit.interval.ms``; the kills are
placed by those commits (the hosts' ``task_committed`` events, logged at debug level):

* ``mid_commit``: after 1-3 commits, between two commits, as soon as output records of the
  open commit interval are in the log (under exactly-once: inside the task's open
  transaction);
* ``after_commit``: right after the 1st-3rd commit;
* ``state_dir_deleted``: like ``mid_commit``, then ``--state-dir`` is deleted (the Spark
  checkpoint is kept elsewhere, as Kafka keeps a Kafka Streams app's committed offsets);
* ``restore``: at the run's first ``restore_start`` (the run holds each restored batch, so
  the kill lands inside the restore).

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

from processor_api.kafka.names import commit_marker_topic
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

KILL_KINDS = ("mid_commit", "after_commit", "restore", "state_dir_deleted")


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
    restarted: ``kills`` is the sequence of kill kinds (see the module docs), then one last
    run to the end."""

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        guarantee: str,
        sales: list[Sale],
        *,
        partitions: int = 3,
        seed: int = 0,
        run_timeout_s: float = 420.0,
        mid_commit_wait_s: float = 3.0,
        pause_ms: float = 0.0,
        commit_interval_ms: int | None = None,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.guarantee = guarantee
        self.sales = sales
        self.partitions = partitions
        self.rnd = random.Random(seed)
        self.run_timeout_s = run_timeout_s
        self.mid_commit_wait_s = mid_commit_wait_s
        self.pause_ms = pause_ms  # > 0: the paced variant of seed 000's topology
        # None: Kafka Streams' default for the guarantee (30 s at_least_once, 100 ms eos)
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
            topology_args=topology_args,
            config=config,
            # the commits that place the kills are debug events
            extra=["--log-level", "debug"],
        )

    def setup(self) -> None:
        create_topics_now(
            self.bootstrap, {self.input_topic: self.partitions, self.output_topic: self.partitions}
        )
        produce_sales(self.bootstrap, self.input_topic, self.sales)

    # -- kill points
    def _kill(self, run: CliRun, kind: str, number: int) -> KillRecord:
        record = KillRecord(kind, number, done=False)
        try:
            if kind == "restore":
                hit = run.wait_event("restore_start", self.run_timeout_s)
                record.detail = {
                    "task": hit.event.get("task"),
                    "end_offset": hit.event.get("end_offset"),
                }
            else:
                record.detail = self._commit_kill_point(run, kind, self.run_timeout_s)
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

    def _commit_kill_point(self, run: CliRun, kind: str, timeout: float) -> dict[str, Any]:
        """Wait for 1-3 task commits of processed records in this run (``task_committed``),
        then: ``after_commit`` kills at once; ``mid_commit`` and ``state_dir_deleted`` as soon
        as output records that no transaction marker follows are in the log (the open
        transaction of the next commit, under exactly-once), or after ``mid_commit_wait_s``."""
        if kind not in ("mid_commit", "after_commit", "state_dir_deleted"):
            raise ValueError(kind)
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
        if kind == "after_commit":
            return {"after_commits": skip}
        marks = high_watermarks(self.bootstrap, self.output_topic, self.partitions)
        deadline = time.monotonic() + self.mid_commit_wait_s
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
            markers = topic_transaction_status(self.bootstrap, commit_marker_topic(self.app_id))
            self.report.aborted_markers = sum(1 for s in markers.values() if s == "aborted")
        return self.report
