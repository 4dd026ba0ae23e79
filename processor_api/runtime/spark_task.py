"""The function Spark runs for each task in ``applyInPandasWithState`` (executor side).

One call = one task (sub-topology x partition) for one micro-batch:

1. take the task's exclusive lock, open its stores and bring them in line with the committed
   changelog offsets held in ``GroupState`` (restore or repair);
2. re-create the task from the committed metadata, run ``init``, process the rows in offset
   order, fire due stream-time and wall-clock punctuations;
3. produce sink records and changelog records, wait until the broker acknowledged all of them;
4. write the local checkpoint, then hand the new metadata to ``GroupState``.

Spark commits the micro-batch (source offsets and GroupState) only after every task returned,
so a failure anywhere before leaves the committed state as it was and the batch is re-run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from processor_api.errors import StreamsError
from processor_api.kafka.producer import DeliveryTracker, make_producer
from processor_api.logging import configure_logging, get_logger
from processor_api.runtime.config import StreamsConfig
from processor_api.runtime.kafka_io import KafkaCollector, read_changelog
from processor_api.runtime.metadata import TaskMetadata
from processor_api.runtime.records import InputRecord
from processor_api.runtime.task import Task
from processor_api.runtime.task_state import (
    TaskLock,
    TaskStores,
    changelog_topic,
    task_directory,
)
from processor_api.topology import SubTopology, Topology

OUTPUT_SCHEMA = (
    "task string, records long, outputs long, changelog_records long, restored long, "
    "stream_time long, positions string, duration_ms double, pid int, timed_out boolean"
)
STATE_SCHEMA = "metadata string"
BOOTSTRAP_TOPIC = ""  # rows that only make a task exist (no Kafka record)


@dataclass(frozen=True)
class JobSpec:
    """Everything an executor needs to run tasks; pickled into the Spark function."""

    run_id: str
    topology_ref: str | None
    topology_kwargs: dict[str, Any]
    topology_pickle: bytes | None
    bootstrap_servers: str
    state_dir: str
    config: dict[str, Any]
    log_format: str = "console"
    producer_config: dict[str, Any] = field(default_factory=dict)
    flush_timeout_s: float = 60.0
    wall_clock_timeouts: bool = True  # False for Trigger.AvailableNow (NoTimeout) queries

    def load_topology(self) -> Topology:
        if self.topology_ref is not None:
            from processor_api.runtime.loader import load_topology

            return load_topology(self.topology_ref, self.topology_kwargs)
        from pyspark import cloudpickle

        assert self.topology_pickle is not None
        return cloudpickle.loads(self.topology_pickle)


class _WorkerRuntime:
    """Per Python worker process: the topology, the config and one producer."""

    def __init__(self, spec: JobSpec) -> None:
        configure_logging(spec.log_format)
        self.spec = spec
        self.topology = spec.load_topology()
        self.subtopologies: dict[int, SubTopology] = {
            sub.id: sub for sub in self.topology.subtopologies()
        }
        self.config = StreamsConfig.from_dict(spec.config)
        self._tracker: DeliveryTracker | None = None

    def tracker(self) -> DeliveryTracker:
        if self._tracker is None:
            producer = make_producer(
                self.spec.bootstrap_servers, extra_config=self.spec.producer_config
            )
            self._tracker = DeliveryTracker(producer)
        return self._tracker

    def drop_tracker(self) -> None:
        """Forget the producer after a failure: the next batch starts with a clean one."""
        if self._tracker is not None:
            try:
                self._tracker.producer.purge()
                self._tracker.producer.flush(5)
            except Exception:  # the producer may already be unusable
                pass
        self._tracker = None


_RUNTIMES: dict[str, _WorkerRuntime] = {}


def _runtime(spec: JobSpec) -> _WorkerRuntime:
    runtime = _RUNTIMES.get(spec.run_id)
    if runtime is None:
        runtime = _RUNTIMES[spec.run_id] = _WorkerRuntime(spec)
    return runtime


def parse_task_id(task_id: str) -> tuple[int, int]:
    sub, _, partition = task_id.partition("_")
    return int(sub), int(partition)


def _input_records(frames: list[pd.DataFrame]) -> list[InputRecord]:
    records: list[InputRecord] = []
    for frame in frames:
        if frame.empty:
            continue
        columns = [
            frame["topic"].tolist(),
            frame["partition"].tolist(),
            frame["offset"].tolist(),
            frame["timestamp"].tolist(),
            frame["key"].tolist(),
            frame["value"].tolist(),
            frame["headers"].tolist(),
        ]
        for topic, partition, offset, timestamp, key, value, headers in zip(*columns, strict=True):
            if topic == BOOTSTRAP_TOPIC or topic is None:
                continue
            records.append(
                InputRecord(
                    topic,
                    int(partition),
                    int(offset),
                    int(timestamp),
                    None if key is None else bytes(key),
                    None if value is None else bytes(value),
                    _headers(headers),
                )
            )
    return records


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    if raw is None:
        return ()
    try:
        if len(raw) == 0:
            return ()
    except TypeError:
        return ()
    result = []
    for entry in raw:
        if isinstance(entry, dict):
            name, value = entry.get("key"), entry.get("value")
        else:
            name, value = entry[0], entry[1]
        result.append((str(name), None if value is None else bytes(value)))
    return tuple(result)


def run_task(
    spec: JobSpec, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    """The ``applyInPandasWithState`` function body for one task and one micro-batch."""
    started = time.monotonic()
    task_id = str(key[0])
    runtime = _runtime(spec)
    log = get_logger("processor_api.spark_task", task=task_id)
    sub_id, partition = parse_task_id(task_id)
    subtopology = runtime.subtopologies.get(sub_id)
    if subtopology is None:
        raise StreamsError(f"task {task_id}: the topology has no sub-topology {sub_id}")
    timed_out = bool(state.hasTimedOut)
    metadata = TaskMetadata.from_json(state.get[0]) if state.exists else TaskMetadata()
    records = _input_records(list(frames))
    app_id = runtime.config.application_id
    directory = task_directory(spec.state_dir, app_id, task_id)
    tracker = runtime.tracker()
    collector = KafkaCollector(tracker, spec.bootstrap_servers)
    isolation = (
        "read_committed"
        if runtime.config.processing_guarantee == "exactly_once_v2"
        else "read_uncommitted"
    )

    def reader(topic, part, start, end, apply):  # noqa: ANN001 - ChangelogReader
        return read_changelog(
            spec.bootstrap_servers, topic, part, start, end, apply, isolation_level=isolation
        )

    with TaskLock(directory, task_id):
        stores = TaskStores(
            application_id=app_id,
            task_id=task_id,
            partition=partition,
            directory=directory,
            builders={name: runtime.topology.store_builders[name]
                      for name in subtopology.store_names},
            timestamp_fn=lambda: 0,
        )
        task = Task(
            subtopology=subtopology,
            partition=partition,
            store_builders=runtime.topology.store_builders,
            store_factory=stores.build,
            collector=collector,
            config=runtime.config,
            metadata=metadata,
        )
        try:
            restored = stores.restore(metadata.changelog_offsets, reader)
            task.stores.update(stores.stacks)  # a repaired store is a new instance
            task.initialize()
            stores.invalidate_checkpoint()
            tracker.reset()
            task.process_batch(records)
            task.maybe_punctuate_wall_clock()
            changes = task.flush()
            changelog_count = 0
            for store_name, store_changes in changes.items():
                collector.send_changes(
                    changelog_topic(app_id, store_name), partition, store_changes
                )
                changelog_count += len(store_changes)
            tracker.flush_and_check(spec.flush_timeout_s)
            acked = tracker.acked_end_offsets()
            positions = dict(metadata.changelog_offsets)
            for store_name in changes:
                positions[store_name] = acked[(changelog_topic(app_id, store_name), partition)]
            for store_name in stores.stacks:
                positions.setdefault(store_name, 0)
            task.set_changelog_offsets(positions)
            stores.write_checkpoint(positions)
            new_metadata = task.metadata()
        except BaseException:
            runtime.drop_tracker()
            raise
        finally:
            try:
                task.close(close_stores=False)
            finally:
                stores.close()

    state.update((new_metadata.to_json(),))
    next_due = task.next_wall_clock_due()
    if next_due is not None and spec.wall_clock_timeouts:
        state.setTimeoutDuration(max(1, next_due - task.clock()))
    duration_ms = (time.monotonic() - started) * 1000
    if records or changelog_count or collector.sent:
        log.info(
            "task_batch_done", records=len(records), outputs=collector.sent,
            changelog_records=changelog_count, stream_time=task.stream_time,
            duration_ms=round(duration_ms, 1),
        )
    yield pd.DataFrame(
        {
            "task": [task_id],
            "records": [task.records_processed],
            "outputs": [collector.sent],
            "changelog_records": [changelog_count],
            "restored": [sum(restored.values())],
            "stream_time": [task.stream_time],
            "positions": [json.dumps(new_metadata.input_positions, sort_keys=True)],
            "duration_ms": [duration_ms],
            "pid": [os.getpid()],
            "timed_out": [timed_out],
        }
    )
