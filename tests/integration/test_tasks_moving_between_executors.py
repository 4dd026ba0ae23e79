"""Tasks moving back and forth between two executors with separate state directories.

Three tasks on ``local-cluster[2,1,1024]`` (two executor JVMs, one slot each) and three
workers of one task each (``num.stream.threads=3``): a continuous run with more workers than
slots runs *bounded* epochs (each ends once its worker's tasks caught up with what their
partitions held when it began, with a ``bounded_epochs`` warning), so the workers take turns
on the two slots and a task often lands on the executor it ran on a few epochs before, whose
host still holds it with a transactional producer that the other executor has fenced since. With a
state directory per executor (as on separate machines) the host can only learn that from the
committed state it is handed. The sales come in waves, each once the one before is committed,
so the tasks commit on both executors in turn. Under ``exactly_once_v2`` the run must neither
hang nor fail, and the committed outputs and stores must equal the reference fold.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from processor_api.store_queries import open_store_reader
from tests.harness.folds import (
    compare,
    expected_notifications,
    fold_totals,
    make_sales,
    notifications_by_product,
    produce_sales,
)
from tests.harness.local_cluster import executor_dirs, remove_executor_dirs
from tests.harness.processes import CliRun, cli_args
from tests.harness.topics import committed_records, uid

pytestmark = pytest.mark.integration

SALES = "topologies.sales_aggregation:build_topology"
STORE = "PRODUCT_AGGREGATED_SALES"
PARTITIONS = 3
WAVES, WAVE = 15, 60
#: more waves, while no task has come back to an executor it ran on (Spark's choice of slots)
MAX_WAVES = 40
WAVE_TIMEOUT_S = 120.0


def _wait_committed(bootstrap: str, topic: str, count: int, run: CliRun) -> None:
    """Wait until ``count`` notifications are committed on ``topic``; fail if the run ends
    or after :data:`WAVE_TIMEOUT_S` (a hung task)."""
    deadline = time.monotonic() + WAVE_TIMEOUT_S
    while (committed := len(committed_records(bootstrap, topic)[0])) < count:
        assert run.is_alive(), f"the run ended with {committed} of {count} committed; {run.tail()}"
        assert time.monotonic() < deadline, (
            f"{committed} of {count} notifications committed in {WAVE_TIMEOUT_S:g}s; {run.tail()}"
        )
        time.sleep(0.2)


def _rebuilt(executor_dirs: list[Path]) -> int:
    """How many times a task was rebuilt on an executor it had left (its executors' logs)."""
    return sum(
        (d / "stderr").read_text(errors="replace").count("task_rebuilt")
        for d in executor_dirs
        if (d / "stderr").exists()
    )


def test_tasks_returning_to_an_executor_keep_exactly_once(kafka, tmp_path, local_cluster):
    run_id = uid()
    bootstrap = kafka.bootstrap_servers
    input_topic, output_topic = f"move-in-{run_id}", f"move-out-{run_id}"
    app_id = f"move-{run_id}"
    kafka.create_topic(input_topic, PARTITIONS)
    kafka.create_topic(output_topic, PARTITIONS)
    sales = make_sales(MAX_WAVES * WAVE, 12, seed=51)
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
        extra=[
            "--state-dir-per-executor",
            # no waiting for a task's previous executor: tasks move whenever a slot is free
            "--spark-conf",
            "spark.locality.wait=0",
            "--spark-conf",
            f"spark.executor.extraJavaOptions={marker}",
            "--config",
            "num.stream.threads=3",
        ],
    )
    args[args.index("local[2]")] = "local-cluster[2,1,1024]"
    try:
        with CliRun(args, tmp_path / "run.log") as run:
            for wave in range(MAX_WAVES):
                produce_sales(bootstrap, input_topic, sales[wave * WAVE : (wave + 1) * WAVE])
                _wait_committed(bootstrap, output_topic, (wave + 1) * WAVE, run)
                if wave + 1 >= WAVES and _rebuilt(executor_dirs(marker)):
                    break
            sales = sales[: (wave + 1) * WAVE]
            run.signal(signal.SIGTERM)
            code = run.wait(120)
            assert code == 0, run.tail()
            warnings = run.find("bounded_epochs")
        logs = {
            directory.name: (directory / "stderr").read_text(errors="replace")
            for directory in executor_dirs(marker)
        }
    finally:
        remove_executor_dirs(marker)
    # three workers on two slots: bounded epochs, the workers taking turns
    assert [(w["workers"], w["slots"]) for w in warnings] == [(PARTITIONS, 2)], warnings
    # tasks did move: a task rebuilt on an executor it had left (its committed state moved on)
    assert len(logs) == 2, sorted(logs)
    returned = sum(text.count("task_rebuilt") for text in logs.values())
    assert returned > 0, "no task came back to an executor it had run on"
    kept, _ = committed_records(bootstrap, output_topic)
    reader = open_store_reader(bootstrap, app_id, SALES, STORE, topology_kwargs=topology_args)
    store = {entry.key: entry.value for _, entry in reader.read()}
    comparison = compare(
        expected_notifications(sales, threshold=0),
        notifications_by_product(kept),
        "exactly_once_v2",
        fold_totals(sales),
        store,
        threshold=0,
    )
    assert comparison.equal and comparison.seen == comparison.expected, comparison
    assert comparison.totals_equal, store
    print(f"tasks rebuilt on an executor they had left: {returned}")
