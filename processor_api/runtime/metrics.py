"""A task's metrics where the task runs: plain counters and histogram buckets.

The runner updates a :class:`TaskMetrics` once per poll batch, commit or restore batch, never
per record and without a lock: the host's publisher thread (``metrics_publisher.py``) copies it
into a :class:`TaskSnapshot` (copies of small dicts and lists, atomic under the GIL) and sends
that to the driver, whose Prometheus collector (``spark/metrics_collector.py``) exposes it.

Latencies are observed per batch: the process latency of a poll batch is its mean time per
record, counted once per record of the batch; the end-to-end latency is sampled (at most
``E2E_SAMPLES`` records a batch, each counted for the records it stands for).
"""

from __future__ import annotations

import json
import os
import resource
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from processor_api.engine.records import TIMESTAMP_NOT_AVAILABLE, MessageBatch
from processor_api.restore_listener import StateRestoreListener, TopicPartition

#: Upper bounds (seconds) of the histograms' buckets (``+Inf`` is implied).
PROCESS_BUCKETS_S = (
    0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01, 0.1, 1.0,
)  # fmt: skip
COMMIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
E2E_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
)  # fmt: skip
LATENESS_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)

#: Records of a poll batch whose end-to-end latency is observed, at most.
E2E_SAMPLES = 32


def _message_timestamp(message: Any) -> int:
    kind, timestamp = message.timestamp()
    return -1 if kind == TIMESTAMP_NOT_AVAILABLE else int(timestamp)


def _record_timestamp(record: Any) -> int:
    return int(record.timestamp)


class Buckets:
    """A histogram as plain counts per bucket (not cumulative; the last is ``+Inf``)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        """``count`` observations of ``value`` seconds."""
        self.counts[bisect_left(self.bounds, value)] += count
        self.total += value * count

    def snapshot(self) -> HistogramSnapshot:
        """A copy of the counts."""
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.total)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram's buckets at one moment: ``counts[i]`` observations ``<= bounds[i]`` and
    above the bound before; the last count is above every bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` pairs, ``+Inf`` last (Prometheus' bucket form)."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass
class TaskMetrics:
    """What one task did in this host process (counters never go down while it lives)."""

    task_id: str
    processed: int = 0
    produced: int = 0
    rebuilds: int = 0
    #: Records a handler let go, per reason (``deserialization``, ``processing``,
    #: ``production``, ``delivery``); totals over the task's rebuilds.
    dropped: dict[str, int] = field(default_factory=dict)
    restored: dict[str, int] = field(default_factory=dict)  # per store, total replayed
    restore_remaining: dict[str, int] = field(default_factory=dict)  # per store, now
    store_entries: dict[str, int] = field(default_factory=dict)
    store_bytes: dict[str, int] = field(default_factory=dict)
    #: ``starting`` (no task yet), ``restoring`` (rebuilding: recovery, restore, init) or
    #: ``running`` (it went through its loop once since it was built).
    phase: str = "starting"
    commits: int = 0
    process_latency: Buckets = field(default_factory=lambda: Buckets(PROCESS_BUCKETS_S))
    commit_latency: Buckets = field(default_factory=lambda: Buckets(COMMIT_BUCKETS_S))
    e2e_latency: Buckets = field(default_factory=lambda: Buckets(E2E_BUCKETS_S))
    punctuation_lateness: Buckets = field(default_factory=lambda: Buckets(LATENESS_BUCKETS_S))
    #: The dropped counts of the current task's handlers, added to ``dropped`` when it goes.
    _dropped_base: dict[str, int] = field(default_factory=dict)

    def observe_batch(
        self, records: Sequence | MessageBatch, processed: int, elapsed_s: float, produced: int
    ) -> None:
        """A poll batch went to the task: ``records`` (its input; the task may hold some
        back), ``processed`` records processed in ``elapsed_s``, ``produced`` records sent."""
        self.produced += produced
        if processed:
            self.processed += processed
            self.process_latency.observe(elapsed_s / processed, processed)
        count = len(records)
        if not count:
            return
        now_ms = time.time() * 1000
        stride = max(1, count // E2E_SAMPLES)
        e2e = self.e2e_latency
        if isinstance(records, MessageBatch):
            parts: Any = records.by_topic.values()
            timestamp_of: Callable[[Any], int] = _message_timestamp
        else:
            parts, timestamp_of = (records,), _record_timestamp
        for part in parts:
            size = len(part)
            for index in range(0, size, stride):
                timestamp = timestamp_of(part[index])
                if timestamp >= 0:
                    e2e.observe(max(0.0, (now_ms - timestamp) / 1000), min(stride, size - index))

    def set_dropped(self, current: dict[str, int]) -> None:
        """The current task's drops per reason (its handlers' counts since it was built)."""
        for reason, value in current.items():
            self.dropped[reason] = self._dropped_base.get(reason, 0) + value

    def task_dropped(self) -> None:
        """The current task goes (a rebuild follows): its drops so far stay counted."""
        self._dropped_base = dict(self.dropped)

    def snapshot(self, run_id: str) -> TaskSnapshot:
        """A copy to send to the driver."""
        return TaskSnapshot(
            run_id=run_id,
            task_id=self.task_id,
            at=time.time(),
            pid=os.getpid(),
            phase=self.phase,
            processed=self.processed,
            produced=self.produced,
            rebuilds=self.rebuilds,
            commits=self.commits,
            dropped=dict(self.dropped),
            restored=dict(self.restored),
            restore_remaining=dict(self.restore_remaining),
            store_entries=dict(self.store_entries),
            store_bytes=dict(self.store_bytes),
            process_latency=self.process_latency.snapshot(),
            commit_latency=self.commit_latency.snapshot(),
            e2e_latency=self.e2e_latency.snapshot(),
            punctuation_lateness=self.punctuation_lateness.snapshot(),
        )


@dataclass(frozen=True)
class TaskSnapshot:
    """One task's metrics as its host sent them (JSON on the metrics topic)."""

    run_id: str
    task_id: str
    at: float  # wall clock (s) when it was taken
    pid: int
    phase: str
    processed: int
    produced: int
    rebuilds: int
    commits: int
    dropped: dict[str, int]
    restored: dict[str, int]
    restore_remaining: dict[str, int]
    store_entries: dict[str, int]
    store_bytes: dict[str, int]
    process_latency: HistogramSnapshot
    commit_latency: HistogramSnapshot
    e2e_latency: HistogramSnapshot
    punctuation_lateness: HistogramSnapshot


_HISTOGRAMS = ("process_latency", "commit_latency", "e2e_latency", "punctuation_lateness")


@dataclass(frozen=True)
class ProcessSnapshot:
    """A host process's own resource use."""

    pid: int
    hostname: str
    at: float
    rss_bytes: int
    cpu_seconds: float

    @classmethod
    def now(cls) -> ProcessSnapshot:
        """This process, now."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(
            pid=os.getpid(),
            hostname=os.uname().nodename,
            at=time.time(),
            rss_bytes=_rss_bytes(),
            cpu_seconds=usage.ru_utime + usage.ru_stime,
        )


def _rss_bytes() -> int:
    """The resident set size now (``/proc/self/statm``; the peak where there is no /proc)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass(frozen=True)
class HostReport:
    """What a host sends at each interval: its process and the tasks it runs."""

    process: ProcessSnapshot
    tasks: tuple[TaskSnapshot, ...]

    def to_json(self) -> bytes:
        """The report as JSON bytes (the metrics topic's record value)."""
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> HostReport:
        """The report a host sent; ``ValueError`` names what is wrong with it."""
        try:
            raw = json.loads(data)
            tasks = []
            for task in raw["tasks"]:
                for name in _HISTOGRAMS:
                    h = task[name]
                    task[name] = HistogramSnapshot(
                        tuple(h["bounds"]), tuple(h["counts"]), float(h["total"])
                    )
                tasks.append(TaskSnapshot(**task))
            return cls(ProcessSnapshot(**raw["process"]), tuple(tasks))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a metrics report: {type(exc).__name__}: {exc}") from exc


class RestoreMetrics(StateRestoreListener):
    """Keeps a task's restore metrics moving and tells the configured listener, if any."""

    def __init__(self, metrics: TaskMetrics, inner: StateRestoreListener | None) -> None:
        self._metrics = metrics
        self._inner = inner
        self._ends: dict[str, int] = {}

    def on_restore_start(
        self, topic_partition: TopicPartition, store_name: str, start_offset: int, end_offset: int
    ) -> None:
        self._ends[store_name] = end_offset
        self._metrics.restore_remaining[store_name] = max(0, end_offset - start_offset)
        if self._inner is not None:
            self._inner.on_restore_start(topic_partition, store_name, start_offset, end_offset)

    def on_batch_restored(
        self,
        topic_partition: TopicPartition,
        store_name: str,
        batch_end_offset: int,
        num_restored: int,
    ) -> None:
        metrics = self._metrics
        metrics.restored[store_name] = metrics.restored.get(store_name, 0) + num_restored
        end = self._ends.get(store_name, batch_end_offset)
        metrics.restore_remaining[store_name] = max(0, end - batch_end_offset)
        if self._inner is not None:
            self._inner.on_batch_restored(
                topic_partition, store_name, batch_end_offset, num_restored
            )

    def on_restore_end(
        self, topic_partition: TopicPartition, store_name: str, total_restored: int
    ) -> None:
        self._metrics.restore_remaining[store_name] = 0
        if self._inner is not None:
            self._inner.on_restore_end(topic_partition, store_name, total_restored)


def store_sizes(buffers: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """Per store, its approximate entries and (RocksDB stores) bytes, from the innermost
    store under each batch buffer (``TaskStores.buffers``)."""
    entries: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for name, buffer in buffers.items():
        inner = buffer.inner
        if not inner.is_open:
            continue
        entries[name] = inner.approximate_num_entries()
        disk = getattr(inner, "backing", inner)  # a segmented store's one RocksDB
        if hasattr(disk, "approximate_bytes"):
            sizes[name] = disk.approximate_bytes()
    return entries, sizes
