"""Executor loss on ``local-cluster[2,1,1024]``: kill -9 one executor JVM in a continuous run.

Each executor has its own state directory (``--state-dir-per-executor``), so a task that moves
finds no local state, as on another machine; stores are snapshotted after every commit
(``state.snapshot.interval.ms=0``, commits every 200 ms), under ``exactly_once_v2``. A first
wave of sales is processed, one executor JVM is killed, a second wave is produced at once, and
the run is stopped when every notification is committed. Used by
``tests/integration/test_executor_loss.py`` (exactness) and ``bench/executor_loss.py`` (time).

With ``watch_queries`` the run also serves interactive queries (``--query-port 0``), and a key
of every task is looked up over and over from the kill on (``query_watch.py``). The moved
task's restore waits at its start for a gate (``GatedRestoreListener``, the gate removed just
before the kill) until a lookup of the moved task's key has answered 503, so that the time the
task is away is seen whatever the machine's speed; at the end, the committed value of every
watched key is waited for until it equals the reference fold.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor_api.kafka.partitioner import default_partition
from processor_api.query import QueryClient, TaskUnavailableError
from processor_api.runtime.host_client import HOST_FILE
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
from tests.harness.query_watch import Lookup, QueryWatch
from tests.harness.topics import TopicRecord, committed_records, uid
from tests.integration.query_topologies import restore_gate

PARTITIONS = 2
SALES = "topologies.sales_aggregation:build_topology"
STORE = "PRODUCT_AGGREGATED_SALES"
LOCAL_CLUSTER = "local-cluster[2,1,1024]"
GATED_RESTORES = "tests.integration.query_topologies:GatedRestoreListener"


@dataclass
class MoveLookups:
    """The lookups of a run with ``watch_queries``."""

    #: the tasks the killed executor held, and the watched key of every task
    moved: list[str]
    keys: dict[str, str]  # key -> its task
    killed_at: float  # monotonic
    lookups: list[Lookup]
    #: every watched key's committed value once every notification was committed
    final: dict[str, Any]


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
    #: with ``watch_queries``: the lookups made from the kill on
    queries: MoveLookups | None = None

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


def executor_id_of(pid: int) -> str:
    """The Spark executor id of the executor JVM ``pid`` (its ``--executor-id``)."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index("--executor-id") + 1]


def tasks_held(state_dir: Path, executor: str, app_id: str) -> list[str]:
    """The tasks a worker host of ``executor`` holds now (their directories name a host)."""
    app_dir = state_dir / f"executor-{executor}" / app_id
    return sorted(p.parent.name for p in app_dir.glob(f"*_*/{HOST_FILE}"))


def keys_by_task(sales: list[Sale]) -> dict[str, str]:
    """A product of ``sales`` for every task (by the default partitioner): key -> task."""
    keys: dict[str, str] = {}
    for product in sorted({s.product for s in sales}):
        task = f"0_{default_partition(product.encode(), PARTITIONS)}"
        if task not in keys.values():
            keys[product] = task
    return keys


def _committed_values(client: QueryClient, keys: list[str]) -> dict[str, Any] | None:
    try:
        entries = {key: client.get(STORE, key, committed=True) for key in keys}
    except TaskUnavailableError:
        return None
    return {key: None if e is None else e["value"] for key, e in entries.items()}


def run_executor_loss(
    kafka: Any, tmp_path: Path, executor_dirs: Any, *, watch_queries: bool = False
) -> ExecutorLoss:
    """One run (see the module docstring); ``executor_dirs(marker)`` finds the executors'
    work directories (their logs)."""
    bootstrap = kafka.bootstrap_servers
    run_id = uid()
    input_topic, output_topic = f"loss-in-{run_id}", f"loss-out-{run_id}"
    # the restore gate is found by the application id: no dash in it
    app_id = f"loss{run_id}" if watch_queries else f"loss-{run_id}"
    kafka.create_topic(input_topic, PARTITIONS)
    kafka.create_topic(output_topic, PARTITIONS)
    marker = f"-Dprocessor_api.test.run={run_id}"
    topology_args = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    config = {"state.snapshot.interval.ms": "0", "commit.interval.ms": "200"}
    extra = [
        "--epoch-interval",
        "5",
        "--state-dir-per-executor",
        "--spark-conf",
        f"spark.executor.extraJavaOptions={marker}",
    ]
    gate = restore_gate(app_id)
    if watch_queries:
        config["state.restore.listener"] = GATED_RESTORES
        extra += ["--query-port", "0"]
        gate.touch()  # the first restores go on; the gate is removed before the kill
    args = cli_args(
        SALES,
        bootstrap,
        app_id,
        tmp_path / "state",
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args=topology_args,
        config=config,
        extra=extra,
    )
    args[args.index("local[2]")] = LOCAL_CLUSTER
    first = make_sales(600, 12, seed=41)
    second = make_sales(600, 12, seed=42, start_ts=1_800_000_000_000)
    run = CliRun(args, tmp_path / "run.log").start()
    watch: QueryWatch | None = None
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
        if watch_queries:
            url = run.wait_event("query_server_started", 60).event["url"]
            moved = tasks_held(tmp_path / "state", executor_id_of(executors[0]), app_id)
            if not moved:
                raise ExecutorLossFailed(f"the executor to kill holds no task; {run.tail()}")
            keys = keys_by_task(first)
            moved_keys = [key for key, task in keys.items() if task in moved]
            gate.unlink()
        os.kill(executors[0], signal.SIGKILL)
        killed_at = time.monotonic()
        if watch_queries:
            watch = QueryWatch(url, STORE, sorted(keys)).start()
        produce_sales(bootstrap, input_topic, second)
        if watch is not None:
            _wait_until(
                "a 503 for a key of the moved task",
                lambda: all(watch.unavailable(key) for key in moved_keys),
                run,
                120,
            )
            gate.touch()  # the moved task's restore goes on

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
        queries = None
        if watch is not None:
            totals = fold_totals(first + second)
            client = QueryClient(url)

            def final_values() -> dict[str, Any] | None:
                values = _committed_values(client, sorted(keys))
                return values if values == {k: totals[k] for k in keys} else None

            final = _wait_until("the final totals in the watched lookups", final_values, run, 60)
            queries = MoveLookups(moved, keys, killed_at, watch.stop(), final)
        run.signal(signal.SIGTERM)
        if run.wait(120) != 0:
            raise ExecutorLossFailed(f"the run did not stop cleanly; {run.tail()}")
        logs = "\n".join(
            (directory / "stderr").read_text(errors="replace")
            for directory in executor_dirs(marker)
        )
    finally:
        if watch is not None:
            watch.stop()
        gate.unlink(missing_ok=True)
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
        queries=queries,
    )
