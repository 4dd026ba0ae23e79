"""Executor loss on ``local-cluster[2,1,1024]``: kill -9 one executor JVM in a continuous run.

Each executor has its own state directory (``--state-dir-per-executor``), so a task that moves
finds no local state, as on another machine; stores are snapshotted after every commit
(``state.snapshot.interval.ms=0``, commits every 200 ms), under ``exactly_once_v2``. A first
wave of sales is processed, one executor JVM is killed, a second wave is produced at once, and
the run is stopped when every notification is committed. Used by
``tests/integration/test_executor_loss.py`` (exactness) and ``bench/executor_loss.py`` (time).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor_api.store_queries import open_store_reader
from tests.harness.folds import (
    Comparison,
    Sale,
    compare,
    expected_notifications,
    fold_totals,
    make_sales,
    notifications_by_product,
    produce_sales,
)
from tests.harness.processes import CliRun, cli_args
from tests.harness.topics import TopicRecord, committed_records, uid

PARTITIONS = 2
SALES = "topologies.sales_aggregation:build_topology"
STORE = "PRODUCT_AGGREGATED_SALES"
LOCAL_CLUSTER = "local-cluster[2,1,1024]"


@dataclass
class ExecutorLoss:
    """What one executor-loss run saw."""

    sales: list[Sale]
    committed: list[TopicRecord]
    aborted: list[TopicRecord]
    store: dict[Any, Any]
    #: seconds from the kill until every output partition had a committed output of the
    #: second wave (the moved task's partition included)
    first_outputs_after_kill_s: float
    #: seconds from the kill until every notification was committed
    complete_after_kill_s: float
    #: executor log lines of restores that started from a snapshot
    restores_from_snapshots: list[str]

    def comparison(self) -> Comparison:
        """The committed notifications and final stores against the reference fold."""
        return compare(
            expected_notifications(self.sales, threshold=0),
            notifications_by_product(self.committed),
            "exactly_once_v2",
            fold_totals(self.sales),
            self.store,
            threshold=0,
        )


class ExecutorLossFailed(AssertionError):
    """The run ended, or did not get there in time."""


def executor_pids(marker: str) -> list[int]:
    """Executor JVMs started with ``marker`` on their command line."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        backend = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"
        if marker.encode() in argv and backend in argv:
            pids.append(int(entry.name))
    return sorted(pids)


def _committed(bootstrap: str, topic: str) -> tuple[list[TopicRecord], list[TopicRecord]]:
    return committed_records(bootstrap, topic)


def _complete(
    committed: tuple[list[TopicRecord], list[TopicRecord]], total: int
) -> tuple[list[TopicRecord], list[TopicRecord]] | None:
    return committed if len(committed[0]) >= total else None


def _wait_until(what: str, done: Any, run: CliRun, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = done()
        if result:
            return result
        if not run.is_alive():
            raise ExecutorLossFailed(f"the run ended before {what}; {run.tail()}")
        if time.monotonic() > deadline:
            raise ExecutorLossFailed(f"no {what} within {timeout_s:g}s; {run.tail()}")
        time.sleep(0.2)


def run_executor_loss(kafka: Any, tmp_path: Path, executor_dirs: Any) -> ExecutorLoss:
    """One run (see the module docstring); ``executor_dirs(marker)`` finds the executors'
    work directories (their logs)."""
    bootstrap = kafka.bootstrap_servers
    run_id = uid()
    input_topic, output_topic = f"loss-in-{run_id}", f"loss-out-{run_id}"
    app_id = f"loss-{run_id}"
    kafka.create_topic(input_topic, PARTITIONS)
    kafka.create_topic(output_topic, PARTITIONS)
    marker = f"-Dprocessor_api.test.run={run_id}"
    topology_args = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    args = cli_args(
        SALES,
        bootstrap,
        app_id,
        tmp_path / "state",
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args=topology_args,
        config={"state.snapshot.interval.ms": "0", "commit.interval.ms": "200"},
        extra=[
            "--epoch-interval",
            "5",
            "--state-dir-per-executor",
            "--spark-conf",
            f"spark.executor.extraJavaOptions={marker}",
        ],
    )
    args[args.index("local[2]")] = LOCAL_CLUSTER
    first = make_sales(600, 12, seed=41)
    second = make_sales(600, 12, seed=42, start_ts=1_800_000_000_000)
    run = CliRun(args, tmp_path / "run.log").start()
    try:
        produce_sales(bootstrap, input_topic, first)
        _wait_until(
            "the first wave's outputs",
            lambda: len(_committed(bootstrap, output_topic)[0]) >= len(first),
            run,
            240,
        )
        executors = executor_pids(marker)
        if len(executors) != 2:
            raise ExecutorLossFailed(f"expected 2 executor JVMs with {marker}: {executors}")
        before = {(r.partition, r.offset) for r in _committed(bootstrap, output_topic)[0]}
        os.kill(executors[0], signal.SIGKILL)
        killed_at = time.monotonic()
        produce_sales(bootstrap, input_topic, second)

        def every_partition_has_new_output() -> bool:
            kept = _committed(bootstrap, output_topic)[0]
            fresh = {r.partition for r in kept if (r.partition, r.offset) not in before}
            return len(fresh) == PARTITIONS

        _wait_until("a new output on every partition", every_partition_has_new_output, run, 240)
        first_outputs_s = time.monotonic() - killed_at
        total = len(first) + len(second)
        kept, aborted = _wait_until(
            "every notification",
            lambda: _complete(_committed(bootstrap, output_topic), total),
            run,
            240,
        )
        complete_s = time.monotonic() - killed_at
        run.signal(signal.SIGTERM)
        if run.wait(120) != 0:
            raise ExecutorLossFailed(f"the run did not stop cleanly; {run.tail()}")
        logs = "\n".join(
            (directory / "stderr").read_text(errors="replace")
            for directory in executor_dirs(marker)
        )
    finally:
        if run.is_alive():
            run.kill9()
        for app_dir in {d.parent for d in executor_dirs(marker)}:
            shutil.rmtree(app_dir, ignore_errors=True)
    reader = open_store_reader(bootstrap, app_id, SALES, STORE, topology_kwargs=topology_args)
    return ExecutorLoss(
        sales=first + second,
        committed=kept,
        aborted=aborted,
        store={entry.key: entry.value for _, entry in reader.read()},
        first_outputs_after_kill_s=first_outputs_s,
        complete_after_kill_s=complete_s,
        restores_from_snapshots=[
            line
            for line in logs.splitlines()
            if "restore_start" in line and "snapshot_offset" in line
        ],
    )
