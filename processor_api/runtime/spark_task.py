"""The function Spark runs for each task in ``applyInPandasWithState`` (executor side).

One call = one task (sub-topology x partition) for one micro-batch:

1. take the task's exclusive lock, open its stores and bring them in line with the committed
   changelog offsets held in ``GroupState`` (restore or repair); under exactly-once, a newer
   commit marker than ``GroupState`` (a committed transaction whose Spark batch was not
   committed) takes precedence;
2. re-create the task from the committed metadata, run ``init``, process the rows in offset
   order (records below the committed positions are skipped), fire due stream-time and
   wall-clock punctuations; store writes stay in the batch buffer;
3. produce sink records and changelog records and wait until the broker acknowledged all of
   them (at-least-once); under exactly-once they, and the commit marker, form one transaction
   that is committed here;
4. apply the buffered store writes and write the local checkpoint, then hand the new
   metadata to ``GroupState``.

Spark commits the micro-batch (source offsets and GroupState) only after every task returned,
so a failure anywhere before leaves the committed state as it was and the batch is re-run.
"""

from __future__ import annotations

import gc
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
from processor_api.runtime.task_keys import task_id_of
from processor_api.runtime.task_state import (
    TaskLock,
    TaskStores,
    changelog_topic,
    task_directory,
)
from processor_api.runtime.transactions import (
    TransactionalProducers,
    commit_marker_topic,
    marker_value,
    read_latest_marker,
    transaction_step,
    transactional_id,
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
    task_ids: tuple[str, ...] = ()  # every task of the run, in order (commit marker partitions)

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
        self._transactional: TransactionalProducers | None = None

    def tracker(self) -> DeliveryTracker:
        if self._tracker is None:
            producer = make_producer(
                self.spec.bootstrap_servers, extra_config=self.spec.producer_config
            )
            self._tracker = DeliveryTracker(producer)
        return self._tracker

    def transactional(self) -> TransactionalProducers:
        if self._transactional is None:
            self._transactional = TransactionalProducers(
                self.spec.bootstrap_servers, self.spec.producer_config
            )
        return self._transactional

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
        # pyspark's worker daemon runs gc.collect() after every Spark task; with pyspark,
        # pandas and pyarrow loaded that takes 200-265 ms. Freezing what is alive now (modules,
        # the topology) takes it out of every later collection.
        gc.freeze()
    return runtime


def parse_task_id(task_id: str) -> tuple[int, int]:
    sub, _, partition = task_id.partition("_")
    return int(sub), int(partition)


def _input_records(frames: list[pd.DataFrame]) -> list[InputRecord]:
    records: list[InputRecord] = []
    append = records.append
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
            append(
                InputRecord(
                    topic,
                    int(partition),
                    int(offset),
                    int(timestamp),
                    None if key is None else bytes(key),
                    None if value is None else bytes(value),
                    () if headers is None else _headers(headers),
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
    task_id = task_id_of(str(key[0]))
    runtime = _runtime(spec)
    sub_id, partition = parse_task_id(task_id)
    subtopology = runtime.subtopologies.get(sub_id)
    if subtopology is None:
        raise StreamsError(f"task {task_id}: the topology has no sub-topology {sub_id}")
    timed_out = bool(state.hasTimedOut)
    metadata = TaskMetadata.from_json(state.get[0]) if state.exists else TaskMetadata()
    records = _input_records(list(frames))
    directory = task_directory(spec.state_dir, runtime.config.application_id, task_id)
    with TaskLock(directory, task_id):
        batch = _TaskBatch(spec, runtime, task_id, partition, subtopology, directory)
        stats = batch.run(metadata, records)
    state.update((stats.metadata.to_json(),))
    if stats.next_wall_clock_due is not None and spec.wall_clock_timeouts:
        state.setTimeoutDuration(max(1, stats.next_wall_clock_due - stats.clock_ms))
    duration_ms = (time.monotonic() - started) * 1000
    if records or stats.changelog_records or stats.outputs:
        get_logger("processor_api.spark_task", task=task_id).info(
            "task_batch_done", records=len(records), processed=stats.processed,
            outputs=stats.outputs, changelog_records=stats.changelog_records,
            stream_time=stats.metadata.stream_time, duration_ms=round(duration_ms, 1),
        )
    yield pd.DataFrame(
        {
            "task": [task_id],
            "records": [stats.processed],
            "outputs": [stats.outputs],
            "changelog_records": [stats.changelog_records],
            "restored": [stats.restored],
            "stream_time": [stats.metadata.stream_time],
            "positions": [json.dumps(stats.metadata.input_positions, sort_keys=True)],
            "duration_ms": [duration_ms],
            "pid": [os.getpid()],
            "timed_out": [timed_out],
        }
    )


@dataclass
class _BatchStats:
    metadata: TaskMetadata
    processed: int
    outputs: int
    changelog_records: int
    restored: int
    next_wall_clock_due: int | None
    clock_ms: int


class _TaskBatch:
    """One task, one micro-batch: restore, process, make durable, commit locally."""

    def __init__(
        self,
        spec: JobSpec,
        runtime: _WorkerRuntime,
        task_id: str,
        partition: int,
        subtopology: SubTopology,
        directory: Any,
    ) -> None:
        self.spec = spec
        self.runtime = runtime
        self.task_id = task_id
        self.partition = partition
        self.subtopology = subtopology
        self.directory = directory
        self.app_id = runtime.config.application_id
        self.exactly_once = runtime.config.processing_guarantee == "exactly_once_v2"
        self.log = get_logger("processor_api.spark_task", task=task_id)

    def _reader(
        self, topic: str, part: int, start: int, end: int, apply: Any,
        with_timestamps: bool = False,
    ) -> int:
        isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        return read_changelog(
            self.spec.bootstrap_servers, topic, part, start, end, apply, isolation_level=isolation,
            with_timestamps=with_timestamps,
        )

    def _adopt_committed_marker(self, metadata: TaskMetadata) -> TaskMetadata:
        """A newer committed marker than GroupState means Spark re-runs a committed batch."""
        topic = commit_marker_topic(self.app_id)
        partition = self.spec.task_ids.index(self.task_id)
        start = int(metadata.extra.get("marker_end", 0))
        marker = read_latest_marker(
            self.spec.bootstrap_servers, topic, partition, start, self.task_id
        )
        if marker is None or marker.sequence <= int(metadata.extra.get("sequence", 0)):
            return metadata
        adopted = marker.metadata
        adopted.extra["marker_end"] = marker.offset + 1
        adopted.extra["sequence"] = marker.sequence
        self.log.warning(
            "committed_transaction_adopted", sequence=marker.sequence,
            state_sequence=metadata.extra.get("sequence", 0), positions=adopted.input_positions,
            detail="the last batch committed its transaction but not its Spark state: "
            "records it processed are skipped",
        )
        return adopted

    def run(self, metadata: TaskMetadata, records: list[InputRecord]) -> _BatchStats:
        runtime, spec = self.runtime, self.spec
        if self.exactly_once:
            tracker = runtime.transactional().for_task(self.app_id, self.task_id, self.directory)
            metadata = self._adopt_committed_marker(metadata)
        else:
            tracker = runtime.tracker()
        collector = KafkaCollector(tracker, spec.bootstrap_servers)
        stores = TaskStores(
            application_id=self.app_id,
            task_id=self.task_id,
            partition=self.partition,
            directory=self.directory,
            builders={name: runtime.topology.store_builders[name]
                      for name in self.subtopology.store_names},
            timestamp_fn=lambda: 0,
        )
        task = Task(
            subtopology=self.subtopology,
            partition=self.partition,
            store_builders=runtime.topology.store_builders,
            store_factory=stores.build,
            collector=collector,
            config=runtime.config,
            metadata=metadata,
        )
        in_transaction = False
        try:
            restored = stores.restore(metadata.changelog_offsets, self._reader)
            task.stores.update(stores.stacks)  # a repaired store is a new instance
            task.initialize()
            tracker.reset()
            if self.exactly_once:
                transaction_step(
                    "begin_transaction", transactional_id(self.app_id, self.task_id),
                    spec.bootstrap_servers, None, tracker.producer.begin_transaction,
                )
                in_transaction = True
            task.process_batch(records)
            task.maybe_punctuate_wall_clock()
            changes = task.flush()
            changelog_count = 0
            for store_name, store_changes in changes.items():
                changelog_count += collector.send_changes(
                    changelog_topic(self.app_id, store_name), self.partition, store_changes,
                    versioned=runtime.topology.store_builders[store_name].changelog_has_versions,
                )
            tracker.flush_and_check(spec.flush_timeout_s)
            acked = tracker.acked_end_offsets()
            positions = dict(metadata.changelog_offsets)
            for store_name in changes:
                positions[store_name] = acked[
                    (changelog_topic(self.app_id, store_name), self.partition)
                ]
            for store_name in stores.stacks:
                positions.setdefault(store_name, 0)
            task.set_changelog_offsets(positions)
            new_metadata = task.metadata()
            if self.exactly_once:
                new_metadata = self._commit_transaction(tracker, new_metadata, metadata)
                in_transaction = False
            stores.commit(positions)
        except BaseException:
            discarded = stores.discard()
            self._abandon(tracker, in_transaction)
            self.log.warning("task_batch_failed", buffered_writes_dropped=discarded)
            raise
        finally:
            try:
                task.close(close_stores=False)
            finally:
                stores.close()
        return _BatchStats(
            metadata=new_metadata,
            processed=task.records_processed,
            outputs=collector.sent,
            changelog_records=changelog_count,
            restored=sum(restored.values()),
            next_wall_clock_due=task.next_wall_clock_due(),
            clock_ms=task.clock(),
        )

    def _commit_transaction(
        self, tracker: DeliveryTracker, new_metadata: TaskMetadata, previous: TaskMetadata
    ) -> TaskMetadata:
        """Add the commit marker to the transaction and commit it."""
        sequence = int(previous.extra.get("sequence", 0)) + 1
        new_metadata.extra["sequence"] = sequence
        new_metadata.extra.pop("marker_end", None)
        topic = commit_marker_topic(self.app_id)
        partition = self.spec.task_ids.index(self.task_id)
        tracker.produce(
            topic, self.task_id.encode(), marker_value(sequence, new_metadata),
            partition=partition,
        )
        tracker.flush_and_check(self.spec.flush_timeout_s)
        marker_end = tracker.acked_end_offsets()[(topic, partition)]
        transaction_step(
            "commit_transaction", transactional_id(self.app_id, self.task_id),
            self.spec.bootstrap_servers, self.spec.flush_timeout_s,
            lambda: tracker.producer.commit_transaction(self.spec.flush_timeout_s),
        )
        new_metadata.extra["marker_end"] = marker_end
        return new_metadata

    def _abandon(self, tracker: DeliveryTracker, in_transaction: bool) -> None:
        """After a failure: abort the open transaction, forget the producer."""
        if self.exactly_once:
            if in_transaction:
                try:
                    tracker.producer.abort_transaction(10)
                except Exception as exc:  # fenced or broker gone: the broker aborts it later
                    self.log.warning("transaction_abort_failed", error=str(exc))
            self.runtime.transactional().drop(self.task_id)
        else:
            self.runtime.drop_tracker()
