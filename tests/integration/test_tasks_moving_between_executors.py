"""Tasks moving back and forth between two executors with separate state directories.

Three tasks on ``local-cluster[2,1,1024]`` (two executor JVMs, one slot each) in micro-batches
run in waves, so a task often lands on the executor it ran on two batches before, whose host
still holds it with a transactional producer that the other executor has fenced since. With a
state directory per executor (as on separate machines) the host can only learn that from the
committed state it is handed. Under ``exactly_once_v2`` the run must neither hang nor fail,
and the committed outputs and stores must equal the reference fold.
"""

from __future__ import annotations

import shutil

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
from tests.harness.processes import CliRun, cli_args
from tests.harness.topics import committed_records, uid
from tests.integration.test_local_cluster import _executor_dirs

pytestmark = pytest.mark.integration

SALES = "topologies.sales_aggregation:build_topology"
STORE = "PRODUCT_AGGREGATED_SALES"


def test_tasks_returning_to_an_executor_keep_exactly_once(kafka, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"move-in-{run_id}", f"move-out-{run_id}"
    app_id = f"move-{run_id}"
    kafka.create_topic(input_topic, 3)
    kafka.create_topic(output_topic, 3)
    sales = make_sales(900, 12, seed=51)
    produce_sales(kafka.bootstrap_servers, input_topic, sales)
    marker = f"-Dprocessor_api.test.run={run_id}"
    topology_args = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    args = cli_args(
        SALES,
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        guarantee="exactly_once_v2",
        available_now=True,
        max_records_per_batch=60,
        topology_args=topology_args,
        extra=[
            "--state-dir-per-executor",
            # no waiting for a task's previous executor: tasks move whenever a slot is free
            "--spark-conf",
            "spark.locality.wait=0",
            "--spark-conf",
            f"spark.executor.extraJavaOptions={marker}",
        ],
    )
    args[args.index("local[2]")] = "local-cluster[2,1,1024]"
    try:
        with CliRun(args, tmp_path / "run.log") as run:
            code = run.wait(300)
            assert code == 0, run.tail()
        logs = {
            directory.name: (directory / "stderr").read_text(errors="replace")
            for directory in _executor_dirs(marker)
        }
    finally:
        for app_dir in {d.parent for d in _executor_dirs(marker)}:
            shutil.rmtree(app_dir, ignore_errors=True)
    # tasks did move: a task rebuilt on an executor it had left (its committed state moved on)
    assert len(logs) == 2, sorted(logs)
    returned = sum(text.count("task_rebuilt") for text in logs.values())
    assert returned > 0, "no task came back to an executor it had run on"
    kept, _ = committed_records(kafka.bootstrap_servers, output_topic)
    reader = open_store_reader(
        kafka.bootstrap_servers, app_id, SALES, STORE, topology_kwargs=topology_args
    )
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
