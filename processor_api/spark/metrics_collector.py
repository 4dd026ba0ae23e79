"""The driver's view of a running application, as Prometheus metrics.

:class:`MetricsFeed` is a thread on the driver that

* reads the run's metrics topic (``runtime/metrics_publisher.py``: every worker host, on any
  machine, sends a report there every second) and keeps the newest report of each task and
  of each host process;
* every ``LAG_INTERVAL_S`` looks up the consumer group's committed offsets and the input
  partitions' end offsets (one call each), the lag per task and partition.

:class:`RunCollector` is a ``prometheus_client`` custom collector: each scrape turns what the
feed holds into metric families (no exposition format is written here).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from processor_api.errors import StreamsError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import metrics_topic
from processor_api.kafka.offsets import end_offsets
from processor_api.logging import get_logger
from processor_api.runtime.metrics import (
    HistogramSnapshot,
    HostReport,
    ProcessSnapshot,
    TaskSnapshot,
)

#: How often the driver looks up the lag (committed offsets and end offsets).
LAG_INTERVAL_S = 2.0
#: A host that sent nothing for this long is gone: its process metrics are dropped.
HOST_GONE_S = 30.0

_log = get_logger("processor_api.metrics")


@dataclass
class FeedState:
    """What the feed knows (replaced or mutated only under ``FeedState.lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    tasks: dict[str, TaskSnapshot] = field(default_factory=dict)
    hosts: dict[tuple[str, int], ProcessSnapshot] = field(default_factory=dict)
    #: (task, topic, partition) -> records past the group's committed offset
    lag: dict[tuple[str, str, int], int] = field(default_factory=dict)
    lag_at: float | None = None


class MetricsFeed:
    """Follows the run's metrics topic and the lag (see the module docs).

    ``inputs``: per task, its input partitions (source and repartition topics).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        application_id: str,
        run_id: str,
        inputs: dict[str, list[tuple[str, int]]],
        *,
        kafka: KafkaClientConfig | None = None,
        lag_interval_s: float = LAG_INTERVAL_S,
    ) -> None:
        self.state = FeedState()
        self._bootstrap = bootstrap_servers
        self._group = application_id
        self._run_id = run_id
        self._inputs = inputs
        self._kafka = kafka
        self._lag_interval_s = lag_interval_s
        self._topic = metrics_topic(application_id)
        self._stop = threading.Event()
        settings: dict[str, Any] = {
            "group.id": f"processor-api-metrics-{uuid.uuid4().hex}",  # never joined
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
        self._consumer = Consumer(
            client_config(
                bootstrap_servers, "metrics-reader", role="consumer", kafka=kafka, **settings
            )
        )
        try:
            # from the end as it is now: earlier reports belong to earlier runs
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self._topic, 0), timeout=10.0
            )
            start = high if high is not None and high >= 0 else OFFSET_END
        except KafkaException:
            start = OFFSET_END
        self._consumer.assign([TopicPartition(self._topic, 0, start)])
        self._thread = threading.Thread(target=self._run, name="metrics-feed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_lag = 0.0
        try:
            while not self._stop.is_set():
                for message in self._consumer.consume(100, timeout=0.2):
                    if message.error() is None:
                        self._take(message.value())
                if time.monotonic() >= next_lag:
                    self._refresh_lag()
                    next_lag = time.monotonic() + self._lag_interval_s
        finally:
            self._consumer.close()

    def _take(self, value: bytes | None) -> None:
        try:
            report = HostReport.from_json(value or b"")
        except ValueError as exc:
            _log.debug("metrics_report_unreadable", error=str(exc))
            return
        state = self.state
        now = time.time()
        with state.lock:
            process = report.process
            state.hosts[(process.hostname, process.pid)] = process
            for key in [k for k, p in state.hosts.items() if now - p.at > HOST_GONE_S]:
                del state.hosts[key]
            for task in report.tasks:
                if task.run_id != self._run_id:
                    continue
                known = state.tasks.get(task.task_id)
                if known is None or known.at <= task.at:
                    state.tasks[task.task_id] = task

    def _refresh_lag(self) -> None:
        partitions = sorted({tp for tps in self._inputs.values() for tp in tps})
        if not partitions:
            return
        try:
            committed = committed_offsets(
                self._bootstrap, self._group, partitions, timeout_s=5.0, kafka=self._kafka
            )
            ends = end_offsets(self._bootstrap, partitions, kafka=self._kafka, timeout_s=5.0)
        except StreamsError as exc:
            _log.debug("metrics_lag_unknown", error=str(exc))
            return
        lag = {
            (task, topic, partition): max(
                0, ends[(topic, partition)] - committed.get((topic, partition), 0)
            )
            for task, tps in self._inputs.items()
            for topic, partition in tps
            if (topic, partition) in ends
        }
        with self.state.lock:
            self.state.lag = lag
            self.state.lag_at = time.time()

    def close(self) -> None:
        """Stop following."""
        self._stop.set()
        self._thread.join(timeout=5.0)


class RunCollector(Collector):
    """Exposes a :class:`MetricsFeed`'s state (and the Spark query's progress) to Prometheus.

    ``spark_batches``: how many batches (epochs) Spark has completed.
    """

    def __init__(self, feed: MetricsFeed, spark_batches: Callable[[], int] | None = None) -> None:
        self._feed = feed
        self._spark_batches = spark_batches

    def collect(self) -> Iterator[Metric]:
        state = self._feed.state
        with state.lock:
            tasks = sorted(state.tasks.values(), key=lambda t: t.task_id)
            hosts = sorted(state.hosts.values(), key=lambda h: (h.hostname, h.pid))
            lag = dict(state.lag)
        yield from task_families(tasks, time.time())
        consumer_lag = GaugeMetricFamily(
            "processor_api_consumer_lag",
            "Records in an input partition past the consumer group's committed offset "
            "(broker end offset minus committed position)",
            labels=["task", "topic", "partition"],
        )
        for (task, topic, partition), value in sorted(lag.items()):
            consumer_lag.add_metric([task, topic, str(partition)], value)
        yield consumer_lag
        memory = GaugeMetricFamily(
            "processor_api_host_resident_memory_bytes",
            "Resident memory of a worker host process",
            labels=["host", "pid"],
        )
        cpu = CounterMetricFamily(
            "processor_api_host_cpu_seconds",
            "CPU time (user + system) of a worker host process",
            labels=["host", "pid"],
        )
        for host in hosts:
            labels = [host.hostname, str(host.pid)]
            memory.add_metric(labels, host.rss_bytes)
            cpu.add_metric(labels, host.cpu_seconds)
        yield memory
        yield cpu
        if self._spark_batches is not None:
            batches = CounterMetricFamily(
                "processor_api_spark_batches",
                "Batches (epochs) the Spark query completed",
            )
            batches.add_metric([], self._spark_batches())
            yield batches


def task_families(tasks: list[TaskSnapshot], now: float) -> list[Metric]:
    """The per-task metric families of ``tasks`` (one snapshot per task)."""
    task = ["task"]
    store = ["task", "store"]

    def counter(name: str, doc: str, labels: list[str] = task) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=labels)

    def gauge(name: str, doc: str, labels: list[str] = task) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=labels)

    processed = counter("processor_api_records_processed", "Input records the task processed")
    produced = counter(
        "processor_api_records_produced", "Records the task's sinks and handlers sent"
    )
    rebuilds = counter(
        "processor_api_task_rebuilds", "Times the task was rebuilt from its last commit"
    )
    commits = counter("processor_api_commits", "Commits of the task")
    dropped = counter(
        "processor_api_dropped_records",
        "Records a handler let go (deserialization, processing, production, delivery)",
        ["task", "reason"],
    )
    restored = counter(
        "processor_api_restored_records", "Changelog records replayed into a store", store
    )
    remaining = gauge(
        "processor_api_restore_remaining_records",
        "Changelog records still to replay into a store (0 when not restoring)",
        store,
    )
    entries = gauge(
        "processor_api_store_entries",
        "Approximate entries of a store (RocksDB rocksdb.estimate-num-keys)",
        store,
    )
    size = gauge(
        "processor_api_store_bytes",
        "Bytes of a RocksDB store: live SST files plus memtables",
        store,
    )
    running = gauge(
        "processor_api_task_running",
        "1 when the task is running (restored, and through its loop once), else 0",
    )
    age = gauge(
        "processor_api_task_report_age_seconds",
        "Seconds since the task's host took the metrics shown",
    )
    histograms = {
        "e2e_latency": HistogramMetricFamily(
            "processor_api_end_to_end_latency_seconds",
            "Wall clock when the task had processed a record minus the record's timestamp "
            "(sampled, at most 32 records a poll batch)",
            labels=task,
        ),
        "process_latency": HistogramMetricFamily(
            "processor_api_process_latency_seconds",
            "Processing time per record (a poll batch's mean, counted for each of its records)",
            labels=task,
        ),
        "commit_latency": HistogramMetricFamily(
            "processor_api_commit_latency_seconds",
            "Duration of a commit (changelogs, flush, marker and offsets, stores)",
            labels=task,
        ),
        "punctuation_lateness": HistogramMetricFamily(
            "processor_api_punctuation_lateness_seconds",
            "How late a wall-clock punctuation fired (fired minus due)",
            labels=task,
        ),
    }
    for snap in tasks:
        labels = [snap.task_id]
        processed.add_metric(labels, snap.processed)
        produced.add_metric(labels, snap.produced)
        rebuilds.add_metric(labels, snap.rebuilds)
        commits.add_metric(labels, snap.commits)
        running.add_metric(labels, 1 if snap.phase == "running" else 0)
        age.add_metric(labels, max(0.0, now - snap.at))
        for reason, value in sorted(snap.dropped.items()):
            dropped.add_metric([snap.task_id, reason], value)
        for name, value in sorted(snap.restored.items()):
            restored.add_metric([snap.task_id, name], value)
        for name, value in sorted(snap.restore_remaining.items()):
            remaining.add_metric([snap.task_id, name], value)
        for name, value in sorted(snap.store_entries.items()):
            entries.add_metric([snap.task_id, name], value)
        for name, value in sorted(snap.store_bytes.items()):
            size.add_metric([snap.task_id, name], value)
        for attribute, family in histograms.items():
            histogram: HistogramSnapshot = getattr(snap, attribute)
            family.add_metric(labels, histogram.cumulative(), histogram.total)
    return [
        processed, produced, rebuilds, commits, dropped, restored, remaining, entries, size,
        running, age, *histograms.values(),
    ]  # fmt: skip


def readiness(feed: MetricsFeed, task_ids: list[str]) -> tuple[bool, str]:
    """Whether every task of the run is running (restored, through its loop once), and why not."""
    with feed.state.lock:
        tasks = dict(feed.state.tasks)
    waiting = [
        task_id
        for task_id in task_ids
        if (snap := tasks.get(task_id)) is None
        or snap.phase != "running"
        or any(snap.restore_remaining.values())
    ]
    if waiting:
        shown = ", ".join(waiting[:10]) + (" ..." if len(waiting) > 10 else "")
        return False, f"{len(waiting)} of {len(task_ids)} tasks not running yet: {shown}"
    return True, f"all {len(task_ids)} tasks running"
