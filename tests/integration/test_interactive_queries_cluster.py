"""Interactive queries on ``local-cluster[2,1,1024]``: two executor JVMs, one worker each
(two tasks, ``num.stream.threads=2``), each executor with its own state directory as on
separate machines, under ``exactly_once_v2``. The worker hosts reach the driver's router from
their executors; every store kind read through ``run-topology --query-port`` equals what
``TopologyTestDriver`` holds after the same input, and both tasks answered."""

from __future__ import annotations

import signal

import pytest

from processor_api.query import QueryClient
from tests.harness.local_cluster import executor_dirs, remove_executor_dirs
from tests.harness.processes import CliRun, cli_args
from tests.harness.scrape import wait_for
from tests.harness.topics import produce, uid
from tests.integration.test_interactive_queries_spark import (
    BASE_MS,
    CUSTOMERS,
    SHOP,
    _by_key,
    _expected,
    _fields,
    _records,
    _rendered,
    _settled,
)

pytestmark = pytest.mark.integration


def test_queries_reach_tasks_on_two_executors_and_equal_the_test_driver(
    kafka, tmp_path, local_cluster
):
    run_id = uid()
    app_id, topic = f"iqc{run_id}", f"iqc-in-{run_id}"
    kafka.create_topic(topic, 2)
    records = _records(200)
    produce(
        kafka.bootstrap_servers, topic, [(k.encode(), v.encode(), None, t) for k, v, t in records]
    )
    driver = _expected(records)
    totals = _by_key(_rendered(driver.get_key_value_store("totals").all()))
    marker = f"-Dprocessor_api.test.run={run_id}"
    args = cli_args(
        SHOP,
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args={"input_topic": topic},
        config={"num.stream.threads": "2", "commit.interval.ms": "200"},
        extra=[
            "--state-dir-per-executor",
            "--query-port",
            "0",
            "--spark-conf",
            f"spark.executor.extraJavaOptions={marker}",
        ],
    )
    args[args.index("local[2]")] = "local-cluster[2,1,1024]"
    try:
        with CliRun(args, tmp_path / "run.log") as run:
            url = run.wait_event("query_server_started", 180).event["url"]
            client = QueryClient(url)
            wait_for("every record in the committed totals", lambda: _settled(client, totals))
            answered = set()
            for key in CUSTOMERS:
                entry = client.get("totals", key, committed=True)
                assert entry is not None
                assert entry["value"] == driver.get_key_value_store("totals").get(key)
                answered.add(entry["task"])
            assert answered == {"0_0", "0_1"}
            window_store = driver.get_window_store("per-minute")
            versions = driver.get_versioned_key_value_store("prices")
            for key in ("c01", "c02"):
                assert _fields(client.fetch_window("per-minute", key, committed=True)) == (
                    _rendered(window_store.fetch(key, key, 0, BASE_MS * 2))
                )
                assert _fields(client.fetch_sessions("visits", key)) == _rendered(
                    driver.get_session_store("visits").fetch(key)
                )
                got = client.get_as_of("prices", key, BASE_MS + 30_000)
                want = versions.get(key, BASE_MS + 30_000)
                assert got is not None and want is not None
                assert (got["value"], got["timestamp"]) == (want.value, want.timestamp)
            everything = _fields(list(client.range("totals", page_size=5)))
            assert _by_key(everything) == totals
            run.signal(signal.SIGTERM)
            assert run.wait(120) == 0, run.tail()
        executors = executor_dirs(marker)
        assert len(executors) == 2, executors
        # each executor's host held a task: both executors' state directories have one
        held = {
            p.name: p.parent.parent.name
            for p in (tmp_path / "state").glob(f"executor-*/{app_id}/0_*")
        }
        assert sorted(held) == ["0_0", "0_1"] and len(set(held.values())) == 2, held
    finally:
        remove_executor_dirs(marker)
        driver.close()
