"""The task metrics (``runtime/metrics.py``) and the driver's collector
(``spark/metrics_collector.py``), without a broker: buckets, reports, exposition."""

from __future__ import annotations

import time
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from processor_api.engine.records import InputRecord
from processor_api.restore_listener import TopicPartition
from processor_api.runtime.metrics import (
    Buckets,
    HostReport,
    ProcessSnapshot,
    RestoreMetrics,
    TaskMetrics,
)
from processor_api.spark.metrics_collector import FeedState, RunCollector, readiness


def test_buckets_count_each_value_in_the_first_bucket_it_fits_and_sum_it():
    buckets = Buckets((0.1, 1.0))
    buckets.observe(0.1)  # le="0.1" holds 0.1 itself
    buckets.observe(0.5, count=3)
    buckets.observe(7.0)
    snap = buckets.snapshot()
    assert snap.counts == (1, 3, 1)
    assert snap.cumulative() == [("0.1", 1), ("1.0", 4), ("+Inf", 5)]
    assert snap.total == 0.1 + 1.5 + 7.0


def _records(count, timestamp):
    return [InputRecord("t", 0, i, timestamp, b"k", b"v") for i in range(count)]


def test_a_batch_counts_each_record_once_in_its_latency_histograms():
    metrics = TaskMetrics("0_0")
    old = int(time.time() * 1000) - 2_000
    metrics.observe_batch(_records(1_000, old), 1_000, 0.5, produced=10)
    metrics.observe_batch(_records(7, old), 7, 0.007, produced=0)
    assert (metrics.processed, metrics.produced) == (1_007, 10)
    assert metrics.process_latency.snapshot().count == 1_007
    e2e = metrics.e2e_latency.snapshot()
    assert e2e.count == 1_007  # sampled, but each sample stands for its stride
    assert 2.0 <= e2e.total / e2e.count < 10.0


def test_the_restore_listener_tracks_what_is_left_and_tells_the_configured_one():
    told = []

    class Inner:
        def on_restore_start(self, *args):
            told.append(("start", *args))

        def on_batch_restored(self, *args):
            told.append(("batch", *args))

        def on_restore_end(self, *args):
            told.append(("end", *args))

    metrics = TaskMetrics("0_0")
    listener = RestoreMetrics(metrics, Inner())
    tp = TopicPartition("app-s-changelog", 0)
    listener.on_restore_start(tp, "s", 10, 110)
    assert metrics.restore_remaining == {"s": 100}
    listener.on_batch_restored(tp, "s", 60, 50)
    assert (metrics.restore_remaining, metrics.restored) == ({"s": 50}, {"s": 50})
    listener.on_batch_restored(tp, "s", 110, 50)
    listener.on_restore_end(tp, "s", 100)
    assert (metrics.restore_remaining, metrics.restored) == ({"s": 0}, {"s": 100})
    assert [t[0] for t in told] == ["start", "batch", "batch", "end"]


def test_drops_of_a_dropped_task_stay_counted_after_its_rebuild():
    metrics = TaskMetrics("0_0")
    metrics.set_dropped({"processing": 2})
    metrics.task_dropped()
    metrics.set_dropped({"processing": 1, "delivery": 0})
    assert metrics.dropped == {"processing": 3, "delivery": 0}


def test_a_report_survives_its_json_and_a_broken_one_is_refused():
    metrics = TaskMetrics("1_3")
    metrics.observe_batch(_records(5, 0), 5, 0.001, produced=5)
    report = HostReport(ProcessSnapshot.now(), (metrics.snapshot("run-1"),))
    assert HostReport.from_json(report.to_json()) == report
    try:
        HostReport.from_json(b'{"process": {}}')
    except ValueError as exc:
        assert "not a metrics report" in str(exc)
    else:
        raise AssertionError("a broken report was accepted")


def _feed(tasks, lag=None):
    state = FeedState()
    state.tasks = {t.task_id: t for t in tasks}
    state.lag = lag or {}
    state.hosts = {("exec-1", 42): ProcessSnapshot(42, "exec-1", time.time(), 123_456, 1.5)}
    return SimpleNamespace(state=state)


def _snapshot(task_id, phase="running", remaining=0):
    metrics = TaskMetrics(task_id)
    metrics.phase = phase
    metrics.restore_remaining = {"s": remaining}
    metrics.observe_batch(_records(3, 0), 3, 0.001, produced=2)
    metrics.commit_latency.observe(0.02)
    return metrics.snapshot("run")


def test_the_collector_exposes_every_task_in_a_form_prometheus_parses():
    feed = _feed(
        [_snapshot("0_0"), _snapshot("0_1")], lag={("0_0", "in", 0): 5, ("0_1", "in", 1): 0}
    )
    registry = CollectorRegistry()
    registry.register(RunCollector(feed, lambda: 4))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    processed = families["processor_api_records_processed"]
    assert processed.type == "counter"
    assert {s.labels["task"]: s.value for s in processed.samples} == {"0_0": 3.0, "0_1": 3.0}
    lag = families["processor_api_consumer_lag"]
    assert {(s.labels["task"], s.labels["partition"]): s.value for s in lag.samples} == {
        ("0_0", "0"): 5.0,
        ("0_1", "1"): 0.0,
    }
    commit = families["processor_api_commit_latency_seconds"]
    assert commit.type == "histogram"
    counts = [s for s in commit.samples if s.name.endswith("_count")]
    assert [s.value for s in counts] == [1.0, 1.0]
    assert families["processor_api_spark_batches"].samples[0].value == 4
    memory = families["processor_api_host_resident_memory_bytes"].samples
    assert [(s.labels, s.value) for s in memory] == [({"host": "exec-1", "pid": "42"}, 123_456)]


def test_ready_only_when_every_task_runs_and_none_restores():
    assert readiness(_feed([_snapshot("0_0")]), ["0_0", "0_1"])[0] is False
    restoring = _feed([_snapshot("0_0"), _snapshot("0_1", phase="restoring")])
    assert readiness(restoring, ["0_0", "0_1"]) == (False, "1 of 2 tasks not running yet: 0_1")
    left = _feed([_snapshot("0_0"), _snapshot("0_1", remaining=3)])
    assert readiness(left, ["0_0", "0_1"])[0] is False
    assert readiness(_feed([_snapshot("0_0"), _snapshot("0_1")]), ["0_0", "0_1"])[0] is True
