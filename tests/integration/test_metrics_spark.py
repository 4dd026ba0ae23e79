"""``run-topology --metrics-port``: a real run on the embedded broker and local Spark, scraped
over HTTP and parsed with prometheus_client's parser; the health probes; ``processor-api
status`` before and after a run, with the run stopped."""

from __future__ import annotations

import json
import shutil

import pytest

from processor_api.cli.app_status import application_status
from processor_api.cli.tools import main as processor_api_main
from tests.harness.runs import NO_SNAPSHOTS, BackgroundRun, settings_for
from tests.harness.scrape import get, scrape, total, values, wait_for
from tests.harness.topics import produce, read_topic, uid

pytestmark = pytest.mark.integration

LIFETIME = "tests.integration.topologies_for_tests:build_lifetime"
FIRST, LATER = 40, 6


def _lifetime_run(kafka, spark, tmp_path, run_id, topics, epoch_interval_s=600.0, **config):
    settings = settings_for(
        kafka.bootstrap_servers,
        f"met-{run_id}",
        tmp_path / "state",
        epoch_interval_s=epoch_interval_s,
        metrics_port=0,
        # the second run's restore replays the changelog (the metrics of a restore in flight)
        config={"commit.interval.ms": "200", **NO_SNAPSHOTS, **config},
    )
    return BackgroundRun(
        LIFETIME,
        settings,
        spark=spark,
        topology_kwargs={**topics, "log_path": str(tmp_path / "lifetime.log"), "interval_ms": 1000},
    )


def _observed(run):
    """The run's observed metrics in each of Spark's progress reports."""
    return [
        p["observedMetrics"]["processor_api"]
        for p in run.runner._query.recentProgress
        if "processor_api" in (p.get("observedMetrics") or {})
    ]


def _caught_up(port, processed, commits):
    """The samples once the tasks processed ``processed`` records, no lag is left and the
    tasks' reports show ``commits`` commits."""
    samples = scrape(port)
    lag = values(samples, "processor_api_consumer_lag")
    if total(samples, "processor_api_records_processed_total") != processed:
        return None
    if len(lag) != 2 or any(lag.values()):
        return None
    # the lag comes from the group offsets, the commit counts from the tasks' own reports
    # (sent every second): wait until the reports carry the commits the lag shows
    if total(samples, "processor_api_commit_latency_seconds_count") < commits:
        return None
    return samples


def test_a_run_in_epochs_is_seen_by_metrics_health_probes_and_status(
    kafka, spark, tmp_path, capsys
):
    run_id = uid()
    app_id = f"met-{run_id}"
    topics = {
        "input_topic": f"met-in-{run_id}",
        "ticks_topic": f"met-ticks-{run_id}",
        "counts_topic": f"met-counts-{run_id}",
    }
    for topic in topics.values():
        kafka.create_topic(topic, 2)
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"k{i % 8}".encode(), b"v", i % 2) for i in range(FIRST)],
    )

    # 1. the first run: probes turn ready, counters match, lag falls to 0
    run = _lifetime_run(kafka, spark, tmp_path, run_id, topics)
    with run:
        port = wait_for("the metrics port", lambda: run.runner.metrics_port, alive=run)
        assert get(port, "/health/ready")[0] == 503, "ready before any task ran"
        assert get(port, "/health/live")[0] == 200
        wait_for("ready", lambda: get(port, "/health/ready")[0] == 200 or None, alive=run)
        samples = wait_for("catch-up", lambda: _caught_up(port, FIRST, 2), alive=run)
        produced = sum(
            len(read_topic(kafka.bootstrap_servers, topics[t]))
            for t in ("ticks_topic", "counts_topic")
        )
        assert total(samples, "processor_api_records_produced_total") == produced >= FIRST
        assert total(samples, "processor_api_end_to_end_latency_seconds_count") == FIRST
        assert total(samples, "processor_api_process_latency_seconds_count") == FIRST
        assert total(samples, "processor_api_commit_latency_seconds_count") >= 2
        entries = values(samples, "processor_api_store_entries", store="lifetime-counts")
        assert sum(entries.values()) == 8  # k0..k7 over the two tasks
        assert total(samples, "processor_api_store_bytes") > 0
        assert total(samples, "processor_api_task_rebuilds_total") == 0
        assert values(samples, "processor_api_host_resident_memory_bytes")
        assert total(samples, "processor_api_task_running") == 2
        run.stop()
    observed = _observed(run)  # Spark's own progress: the epoch that ended at the stop
    assert sum(o["records"] for o in observed) == FIRST
    assert observed[-1]["lag"] == 0 and observed[-1]["tasks"] == 2

    # 2. stopped: status shows the records that came since as lag
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"k{i}".encode(), b"v", 0) for i in range(LATER)],
    )
    status = application_status(kafka.bootstrap_servers, app_id)
    assert {t.task_id: t.lag for t in status.tasks} == {"0_0": LATER, "0_1": 0}
    assert (
        processor_api_main(
            ["status", "--bootstrap-servers", kafka.bootstrap_servers, "--application-id", app_id]
        )
        == 0
    )
    assert f"total lag {LATER}" in capsys.readouterr().out

    # 3. the second run restores task 0_0 from its changelog (its state dir wiped, the
    # restore slowed down by a listener): the probe says not ready and the restore metrics
    # move; its epochs are short, so the ended epochs are counted while it runs
    shutil.rmtree(tmp_path / "state" / app_id / "0_0")
    run = _lifetime_run(
        kafka,
        spark,
        tmp_path,
        run_id,
        topics,
        epoch_interval_s=2.0,
        **{"state.restore.listener": "tests.integration.metrics_listeners:SlowRestoreListener"},
    )
    with run:
        port = wait_for("the metrics port", lambda: run.runner.metrics_port, alive=run)

        def restoring():
            ready = get(port, "/health/ready")[0]
            samples = scrape(port)
            left = total(samples, "processor_api_restore_remaining_records", task="0_0")
            return (ready, left) if left > 0 else None

        ready, remaining = wait_for("a restore in progress", restoring, alive=run)
        assert ready == 503
        wait_for("ready", lambda: get(port, "/health/ready")[0] == 200 or None, alive=run)
        samples = wait_for("catch-up", lambda: _caught_up(port, LATER, 1), alive=run)
        restored = values(samples, "processor_api_restored_records_total", task="0_0")
        assert sum(restored.values()) == remaining
        assert total(samples, "processor_api_restore_remaining_records") == 0

        def ended_epochs():
            counted = total(scrape(port), "processor_api_spark_batches_total")
            return counted if counted >= 2 else None

        counted = wait_for("two ended epochs counted", ended_epochs, alive=run)
        assert counted <= run.runner._progress.result.batches, "more epochs counted than ended"
        run.stop()

    # 4. stopped again: no lag left
    assert (
        processor_api_main(
            [
                "status",
                "--bootstrap-servers",
                kafka.bootstrap_servers,
                "--application-id",
                app_id,
                "--json",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["lag"] == 0
    assert sorted(t["task_id"] for t in shown["tasks"]) == ["0_0", "0_1"]
    assert all(t["stream_time"] is not None for t in shown["tasks"])
