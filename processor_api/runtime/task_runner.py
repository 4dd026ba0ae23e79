"""One task for as long as it lives on this executor: what its epochs share.

A :class:`TaskRunner` lives in the task's host process (``worker_host.py``) and keeps, across
epochs, what Kafka Streams' stream thread keeps for a task: the processors (``init`` ran
once), the open stores, the producer and the guarantee. This class builds the task and tears
it down; :class:`~processor_api.runtime.epoch_runner.EpochTaskRunner` runs its poll loop and
commits::

    rebuild     drop the current task, recover (exactly-once: adopt a newer committed marker),
                open and restore the stores, init the processors
    process     the engine: order, deserialize, process, stream-time and wall-clock punctuation,
                in chunks so that a slow processor holds back no commit or punctuation due
    produce     changelog records (the last write per key); sink records go out as produced
    abandon     a failure drops the open transaction, the buffered store writes and the task
                (``close`` runs): the next epoch rebuilds it from the committed state
    close       the task leaves this process: processors, stores, producer, lock
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.global_task import GlobalTask
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.records import MessageBatch
from processor_api.engine.task import Task
from processor_api.errors import StreamsError
from processor_api.kafka.batch_stamps import BatchStamp
from processor_api.kafka.collector import KafkaCollector
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.kafka.producer import MAX_TRANSACTION_TIMEOUT_MS
from processor_api.kafka.reader import read_changelog
from processor_api.logging import get_logger
from processor_api.restore_listener import StateRestoreListener, resolve_restore_listener
from processor_api.runtime.delivery_failures import TaskDeliveryFailures
from processor_api.runtime.global_stores import GlobalStores
from processor_api.runtime.guarantee import (
    AtLeastOnce,
    Guarantee,
    TaskCommitSettings,
    WorkerClients,
    make_guarantee,
)
from processor_api.runtime.input_records import TaskInput
from processor_api.runtime.job import JobSpec, parse_task_id
from processor_api.runtime.metrics import RestoreMetrics, TaskMetrics, store_sizes
from processor_api.runtime.off_loop_reads import answer_point_read
from processor_api.runtime.patience import Patience
from processor_api.runtime.query_link import TaskStoreReader
from processor_api.runtime.worker_globals import WorkerGlobalStores
from processor_api.runtime.worker_transaction import SharedExactlyOnce, WorkerTransaction
from processor_api.state.locks import TaskLock
from processor_api.state.manager import TaskStores, task_directory
from processor_api.state.snapshots import TaskSnapshots
from processor_api.state.snapshots import settings_from_config as snapshot_settings_from_config
from processor_api.topology import Topology
from processor_api.topology.nodes import SubTopology

#: A record may wait in the producer's queue this much longer than ``task.timeout.ms`` plus
#: ``commit.interval.ms``: a task whose commit waits out an outage never sees one of its
#: records fail first (the commit's wait, bounded by task.timeout.ms, ends before).
DELIVERY_MARGIN_MS = 30_000

#: In a continuous loop, records are processed in chunks between looks at the clocks (a commit
#: or a wall-clock punctuation due); a chunk's size adapts to take between these two times, as
#: Kafka Streams adapts its records per iteration to its commit interval.
CHUNK_FAST_S, CHUNK_SLOW_S = 0.01, 0.05
FIRST_CHUNK, MAX_CHUNK = 100, 10_000


@dataclass(frozen=True)
class LastCommit:
    """The task's last commit as this process holds it, in one object: the metadata the next
    commit builds on (its commit state numbers the next batch, its changelog offsets are where
    the stores stand) and the same as the JSON handed to Spark's GroupState."""

    metadata: TaskMetadata
    json: str

    @classmethod
    def of(cls, metadata: TaskMetadata) -> LastCommit:
        return cls(metadata, metadata.to_json())


def delivery_timeout_ms(config: StreamsConfig) -> int:
    """How long the producer retries a record (``message.timeout.ms``): past every wait of a
    commit (see ``DELIVERY_MARGIN_MS``), within what a broker allows a transaction."""
    return min(
        config.task_timeout_ms + config.commit_interval + DELIVERY_MARGIN_MS,
        MAX_TRANSACTION_TIMEOUT_MS,
    )


class TaskRunner:
    """One task while this process owns it (see the module docs)."""

    def __init__(
        self,
        spec: JobSpec,
        topology: Topology,
        task_id: str,
        lock: TaskLock,
        *,
        shared_global: WorkerGlobalStores | None = None,
        shared_transaction: WorkerTransaction | None = None,
        shared_clients: WorkerClients | None = None,
    ) -> None:
        self.spec = spec
        self.task_id = task_id
        self.config = StreamsConfig.from_dict(spec.config)
        if spec.bounded and self.config.max_task_idle_ms > 0:
            # data past a bounded run's end will not come: held-back records would stay
            self.config = replace(self.config, max_task_idle_ms=0)
        self.app_id = self.config.application_id
        self._listener: StateRestoreListener | None = None
        sub_id, self.partition = parse_task_id(task_id)
        subtopology = {sub.id: sub for sub in topology.subtopologies()}.get(sub_id)
        if subtopology is None:
            raise StreamsError(f"task {task_id}: the topology has no sub-topology {sub_id}")
        self.subtopology: SubTopology = subtopology
        self.topology = topology
        self.directory = task_directory(spec.executor_state_dir, self.app_id, task_id)
        self._lock = lock
        self._patience = Patience(task_id, spec.bootstrap_servers, self.config.task_timeout_ms)
        snapshot_settings = snapshot_settings_from_config(self.config)
        #: Warm failover: this task's snapshots (one interval across rebuilds), or None.
        self._snapshots = (
            None
            if snapshot_settings is None
            else TaskSnapshots(
                snapshot_settings,
                task_id=task_id,
                partition=self.partition,
                directory=self.directory,
            )
        )
        #: monotonic time of the last sign of life: a turn of the poll loop, a restored batch
        self.alive_at = time.monotonic()
        self._chunk = FIRST_CHUNK
        self._unfinished = False  # records left because a commit or punctuation came due
        #: exactly-once in a worker host: the worker's transaction, shared by its tasks
        self._shared: SharedExactlyOnce | None = None
        self._guarantee = self._make_guarantee(shared_transaction, shared_clients)
        self._task: Task | None = None
        self._stores: TaskStores | None = None
        self._collector: KafkaCollector | None = None
        self._delivery_failures: TaskDeliveryFailures | None = None
        #: The live task's last commit (or what it was rebuilt from); None without a task.
        self._committed: LastCommit | None = None
        self._batch_open = False
        #: the global stores: the worker host's copy, shared by its tasks, or, without one,
        #: this runner's own copy; kept across rebuilds
        self._global: GlobalStores | None = None
        self._shared_global = shared_global
        # repartition topics: written stamped (exactly-once), read with stamps checked
        self._internal_topics = frozenset(topology.internal_topics())
        self._input = TaskInput(
            spec.bootstrap_servers,
            task_id,
            stamped_topics=self._internal_topics & set(subtopology.source_topics),
            marker_topic=commit_marker_topic(self.app_id),
            marker_partitions={task: index for index, task in enumerate(spec.task_ids)},
            exactly_once=self.config.exactly_once,
            kafka=spec.kafka,
        )
        self.inits = 0
        #: What the task did in this process (``runtime/metrics.py``), read by the host's
        #: metrics publisher.
        self.metrics = TaskMetrics(task_id)
        #: Called between two processing chunks (the host answers interactive queries there).
        self.between_chunks: Callable[[], None] | None = None
        self._log = get_logger("processor_api.task_runner", task=task_id)

    def _make_guarantee(
        self, shared_transaction: WorkerTransaction | None, shared_clients: WorkerClients | None
    ) -> Guarantee:
        spec = self.spec
        settings = TaskCommitSettings(
            bootstrap_servers=spec.bootstrap_servers,
            producer_config=spec.producer_config,
            flush_timeout_s=spec.flush_timeout_s,
            application_id=self.app_id,
            task_id=self.task_id,
            marker_partition=spec.task_ids.index(self.task_id),
            directory=self.directory,
            kafka=spec.kafka,
            patience=self._patience,
            message_timeout_ms=delivery_timeout_ms(self.config),
        )
        if self.config.exactly_once and shared_transaction is not None:
            self._shared = SharedExactlyOnce(settings, shared_transaction, self)  # type: ignore[arg-type]
            return self._shared
        if not self.config.exactly_once and shared_clients is not None:
            return AtLeastOnce(settings, shared_clients)
        return make_guarantee(self.config.exactly_once, settings)

    def _process(
        self, task: Task, records: MessageBatch | list[Any], busy_until: float
    ) -> tuple[int, bool]:
        """Process ``records`` (what a poll returned) until ``busy_until`` (monotonic) and
        punctuate, with the task's metrics updated once for the poll; (processed, punctuated
        or advanced)."""
        collector = self._collector
        assert collector is not None
        sent_before = collector.sent
        started = time.perf_counter()
        processed = self._process_in_chunks(task, records, busy_until)
        elapsed_s = time.perf_counter() - started
        fired = self._punctuate_wall_clock(task)
        advanced = task.advance_idle_stream_time()
        metrics = self.metrics
        metrics.observe_batch(records, processed, elapsed_s, collector.sent - sent_before)
        metrics.phase = "running"
        return processed, fired or advanced

    def _process_in_chunks(
        self, task: Task, records: MessageBatch | list[Any], busy_until: float
    ) -> int:
        """Process what the task may, in chunks, until ``busy_until``: a slow processor
        holds back neither the commit nor a wall-clock punctuation that comes due meanwhile.
        Records left stay queued in the task for the next turn, which does not wait to poll."""
        count = 0
        while True:
            chunk = self._chunk
            started = time.monotonic()
            done = task.process_batch(records, limit=chunk)
            records = []
            count += done
            now = time.monotonic()
            if done < chunk:  # nothing more may be processed now, or records were skipped
                self._unfinished = done > 0 and task.buffered() > 0
                return count
            took = now - started
            if took > CHUNK_SLOW_S:
                self._chunk = max(1, chunk // 2)
            elif took < CHUNK_FAST_S:
                self._chunk = min(MAX_CHUNK, chunk * 2)
            if now >= busy_until:
                self._unfinished = task.buffered() > 0
                return count
            if self.between_chunks is not None:
                self.between_chunks()

    def store_reader(self) -> TaskStoreReader | None:
        """What answers interactive queries of the task's stores while it is open and not
        restoring (None otherwise); for the loop thread only."""
        stores = self._stores
        if stores is None or self._task is None or self.metrics.phase == "restoring":
            return None
        return TaskStoreReader(
            self.task_id,
            stores.stacks,
            stores.committed_view,
            self._committed_changelog_offset,
            self._input_offsets,
        )

    def read_off_loop(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """A point read answered on the calling thread (the query link's), without the loop;
        None: the loop answers it (``off_loop_reads.py``). The stores read must still be the
        task's, running, once the read is done: else it is left to the loop."""
        stores = self._stores
        if stores is None or self._task is None or self.metrics.phase != "running":
            return None
        answer = answer_point_read(
            self.task_id,
            stores.stacks,
            stores.buffers,
            self._committed_changelog_offset,
            request,
            self._input_offsets,
        )
        if self._stores is not stores or self.metrics.phase != "running":
            return None  # dropped or rebuilt meanwhile
        return answer

    def _input_offsets(self, committed: bool) -> dict[str, int]:
        """The next input offset to process per source topic: live (as the stores stand
        between two records) or as the last commit left them; what a read's position bound
        is checked against (``query_bounds.py``). Safe off the loop thread: one dict copy."""
        if committed:
            last = self._committed
            return {} if last is None else dict(last.metadata.input_positions)
        task = self._task
        # not Task.metadata(): that copies the schedules too, which the loop may change
        # while the query link's thread reads
        return {} if task is None else task.input_positions()

    def _committed_changelog_offset(self, store: str) -> int | None:
        """Where ``store``'s changelog stood at the task's last commit (None before one)."""
        committed = self._committed
        return None if committed is None else committed.metadata.changelog_offsets.get(store)

    def _punctuate_wall_clock(self, task: Task) -> bool:
        """Fire the due wall-clock punctuations; how late they fired goes to the metrics."""
        due = task.next_wall_clock_due()
        now = task.clock()
        fired = task.maybe_punctuate_wall_clock(now)
        if fired and due is not None and due <= now:
            self.metrics.punctuation_lateness.observe((now - due) / 1000)
        return fired

    def _committed_metrics(
        self, task: Task, stores: TaskStores, failures: TaskDeliveryFailures, took_s: float
    ) -> None:
        """After a commit: its latency, the stores' sizes and the handlers' drops."""
        metrics = self.metrics
        metrics.commits += 1
        metrics.commit_latency.observe(took_s)
        metrics.store_entries, metrics.store_bytes = store_sizes(stores.buffers)
        metrics.set_dropped({**task.errors.dropped, "delivery": failures.dropped})

    def _open_batch(self) -> None:
        if not self._batch_open:
            self._guarantee.begin()
            self._batch_open = True
            writer = self._guarantee.writer
            if self._collector is not None and writer is not None:
                assert self._committed is not None, "a live task has a last commit"
                sequence = self._committed.metadata.commit.sequence + 1
                self._collector.stamp_batch(BatchStamp(self.task_id, sequence, writer))

    def _abandon_open_batch(self) -> None:
        """Drop what the task did since its last commit, if anything (it is rebuilt)."""
        if self._batch_open:
            dropped = self._abandon_batch()
            self._log.info("uncommitted_work_dropped", buffered_writes_dropped=dropped)

    def _abandon_batch(self) -> int:
        """Drop the open batch and the task; returns how many buffered writes were dropped."""
        stores = self._stores
        dropped = stores.discard() if stores is not None else 0
        self._batch_open = False
        self._guarantee.abandon()
        self._drop_task()
        return dropped

    def _rebuild_waiting(self, metadata: TaskMetadata) -> int:
        """:meth:`_rebuild`, done again while the broker does not answer (commit markers,
        changelogs, the transactional producer's init), up to ``task.timeout.ms``."""
        return self._patience.call(
            "recovery", "its recovery (commit markers, changelog restore, producer init)",
            lambda: self._rebuild(metadata),
        )  # fmt: skip

    def _rebuild(self, metadata: TaskMetadata) -> int:
        """Drop the current task (if any) and build it anew from ``metadata``."""
        if self._task is not None:
            self._log.info("task_rebuilt", reason="the committed state moved on elsewhere")
        self._drop_task()
        if self.inits:
            self.metrics.rebuilds += 1
        self.metrics.phase = "restoring"
        metadata = self._guarantee.recover(metadata)
        builders = {
            name: self.topology.store_builders[name] for name in self.subtopology.store_names
        }
        sources = self.subtopology.source_changelogs  # read-only stores: their source topic
        stores = TaskStores(
            application_id=self.app_id,
            task_id=self.task_id,
            partition=self.partition,
            directory=self.directory,
            builders=builders,
            changelog_topics={
                n: sources.get(n) or changelog_topic(self.app_id, n) for n in builders
            },
            timestamp_fn=lambda: 0,
            source_changelogs=frozenset(sources),
            snapshots=self._snapshots,
        )
        collector = KafkaCollector(
            self._guarantee.producer,
            self.spec.bootstrap_servers,
            kafka=self.spec.kafka,
            stamped_topics=self._internal_topics if self.config.exactly_once else frozenset(),
        )
        task = Task(
            subtopology=self.subtopology,
            partition=self.partition,
            store_builders=self.topology.store_builders,
            store_factory=stores.build,
            collector=collector,
            config=self.config,
            metadata=metadata,
            global_task=self._global_task(),
        )
        self._task, self._stores, self._collector = task, stores, collector
        self._delivery_failures = TaskDeliveryFailures(
            self.config,
            self.task_id,
            self.subtopology,
            collector.send,
            exactly_once=self.config.exactly_once,
        )
        try:
            committed = {**metadata.changelog_offsets,
                         **{n: metadata.input_positions.get(t, 0) for n, t in sources.items()}}  # fmt: skip
            restored = stores.restore(committed, self._replay_changelog, self._restore_listener())
            task.stores.update(stores.stacks)  # a repaired store is a new instance
            task.initialize()
        except BaseException:
            self._drop_task()
            raise
        self.inits += 1
        self._committed = LastCommit.of(metadata)
        return sum(restored.values())

    def _restore_listener(self) -> StateRestoreListener | None:
        """The configured ``state.restore.listener``, made once per task runner."""
        if self._listener is None:
            self._listener = RestoreMetrics(
                self.metrics, resolve_restore_listener(self.config.state_restore_listener)
            )
        return self._listener

    def _global_task(self) -> GlobalTask | None:
        """The global stores, opened and restored before the task is built."""
        if self._global is None and self.topology.global_stores():
            if self._shared_global is not None:
                self._global = self._shared_global.open(
                    self.topology, self.spec, self.config, self._guarantee.isolation_level
                )
                return self._global.task
            self._global = GlobalStores.restored(
                self.topology, self.directory / "global", self.spec, self.config,
                isolation_level=self._guarantee.isolation_level, role=f"global-{self.task_id}",
            )  # fmt: skip
        return None if self._global is None else self._global.task

    def _replay_changelog(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        apply: Any,
        with_timestamps: bool = False,
        on_batch: Any = None,
    ) -> int:
        def batch_read(next_offset: int, records: int) -> None:
            self.alive_at = time.monotonic()
            if on_batch is not None:
                on_batch(next_offset, records)

        self.alive_at = time.monotonic()
        return read_changelog(
            self.spec.bootstrap_servers,
            topic,
            partition,
            start,
            end,
            apply,
            isolation_level=self._guarantee.isolation_level,
            with_timestamps=with_timestamps,
            kafka=self.spec.kafka,
            on_batch=batch_read,
        )

    def _produce_changelogs(self, task: Task, collector: KafkaCollector) -> int:
        count = 0
        for store_name, changes in task.flush().items():
            count += collector.send_changes(
                changelog_topic(self.app_id, store_name),
                self.partition,
                changes,
                versioned=self.topology.store_builders[store_name].changelog_has_versions,
            )
        return count

    def _acked_changelog_positions(self, task: Task) -> dict[str, int]:
        """Per store, the changelog end offset after this commit's acknowledged records."""
        acked = self._guarantee.producer.acked_end_offsets()
        assert self._committed is not None, "a live task has a last commit"
        positions = dict(self._committed.metadata.changelog_offsets)
        for store_name in task.stores:
            key = (changelog_topic(self.app_id, store_name), self.partition)
            if key in acked:
                positions[store_name] = acked[key]
            positions.setdefault(store_name, 0)
        if self.subtopology.source_changelogs:  # read-only stores hold their input up to here
            inputs = task.metadata().input_positions
            for store_name, topic in self.subtopology.source_changelogs.items():
                positions[store_name] = inputs.get(topic, 0)
        return positions

    # --------------------------------------------------------------- lifetime
    def _drop_task(self) -> None:
        """Close the processors and the stores of the current task, if any."""
        task, stores = self._task, self._stores
        self._task = self._stores = self._collector = None
        self._committed = None
        self.metrics.task_dropped()
        if task is not None:
            try:
                task.close(close_stores=False)
            except Exception as exc:  # noqa: BLE001 - keep dropping; the cause is logged
                self._log.warning("task_close_failed", error=str(exc))
        if stores is not None:
            stores.close()

    def _snapshot_on_close(self) -> None:
        if self._stores is None:
            return
        try:
            self._stores.snapshot_on_close()
        except Exception as exc:  # noqa: BLE001 - a snapshot costs warmth, never the close
            self._log.warning("snapshot_on_close_failed", error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """The task leaves this process: close it, its producer and consumer, free its lock.

        A close is clean (the run ended, the task moved to another worker): its stores are
        snapshotted at its last commit first. A task dropped on a failure, a fencing or an
        abandoned epoch has no stores left open here, so nothing is snapshotted for it.
        """
        started = time.monotonic()
        try:
            self._snapshot_on_close()
            self._abandon_open_batch()
            self._drop_task()
            self._guarantee.close()
            if self._global is not None and self._shared_global is None:
                self._global.close()  # a worker host's shared copy closes with its run
            self._global = None
            self._input.close()
        finally:
            self._lock.__exit__(None, None, None)
        self._log.info("task_closed", duration_ms=round((time.monotonic() - started) * 1000, 1))
