"""The task engine: runs one sub-topology on one partition (Kafka Streams' ``StreamTask``).

Pure Python, no Kafka or Spark import: the test driver and the Spark runner both drive a
:class:`Task` the same way::

    task = Task(...)                 # builds processors and stores, does not call init()
    # (the runtime may restore task.stores here)
    task.initialize()                # init() of every processor, schedules resume
    task.process_batch(records)      # deserialize, order, process, stream-time punctuation
    task.maybe_punctuate_wall_clock()
    changes = task.flush()           # per store: the changelog records of this batch
    metadata = task.metadata()       # persist it; pass it to the next incarnation
    task.close()

Outputs go to the :class:`RecordCollector` as they are produced. The parts: the node graph
and ``forward()`` (:mod:`.nodes`), the processors' context (:mod:`.context`), sinks
(:mod:`.sink`), input order (:mod:`.partition_group`), exception handlers (:mod:`.handlers`);
this module keeps the lifecycle, the process loop, punctuation and the persisted metadata.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.context import (
    InitErrorHandler,
    ProcessorContextImpl,
    RecordContext,
    init_error,
)
from processor_api.engine.error_handling import ErrorHandling
from processor_api.engine.global_task import GlobalTask
from processor_api.engine.idle_time import IdleStreamTime
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.nodes import NodeGraph, ProcessorNode
from processor_api.engine.partition_group import PartitionGroup, RecordQueue
from processor_api.engine.punctuation import (
    NEVER,
    PunctuationQueue,
    PunctuationSchedule,
    ScheduleState,
    interval_ms_of,
    start_time_ms,
)
from processor_api.engine.records import (
    InputRecord,
    KafkaMessage,
    MessageBatch,
    RecordCollector,
)
from processor_api.engine.sink import SinkNode
from processor_api.errors import ProcessingError
from processor_api.kafka.names import changelog_topic
from processor_api.logging import get_logger
from processor_api.processor import Cancellable, PunctuationType, Record
from processor_api.state.builder import StoreBuilder, StoreStack
from processor_api.state.changelogging import ChangeRecord
from processor_api.state.undo import UndoLog
from processor_api.topology.nodes import SubTopology

StoreFactory = Callable[[StoreBuilder, Callable[[], int]], StoreStack]
"""``factory(builder, timestamp_fn) -> StoreStack``: how the runtime materializes a store."""

ContextFactory = Callable[["Task", ProcessorNode], ProcessorContextImpl]
"""``factory(task, node) -> ProcessorContextImpl``: the context a processor node gets."""


def wall_clock_ms() -> int:
    """The system time in epoch milliseconds (the default task clock)."""
    return time.time_ns() // 1_000_000


class Task:
    """One sub-topology running on one partition (task id ``"<subtopology>_<partition>"``)."""

    def __init__(
        self,
        *,
        subtopology: SubTopology,
        partition: int,
        store_builders: Mapping[str, StoreBuilder],
        store_factory: StoreFactory,
        collector: RecordCollector,
        config: StreamsConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        metadata: TaskMetadata | None = None,
        global_task: GlobalTask | None = None,
        context_factory: ContextFactory = ProcessorContextImpl,
    ) -> None:
        self.config = config or StreamsConfig()
        self.application_id = self.config.application_id
        self.subtopology = subtopology
        self.partition = partition
        self.task_id = subtopology.task_id(partition)
        self.collector = collector
        self.clock = clock
        self.commit_requested = False
        # The global stores its processors read (read-only), kept up to date by the runtime.
        self.global_task = global_task
        self._log = get_logger("processor_api.task", task=self.task_id)

        persisted = metadata or TaskMetadata()
        self.stream_time = persisted.stream_time
        self._persisted_partition_times = dict(persisted.partition_times)
        self._positions = dict(persisted.input_positions)
        self._persisted_schedules = {
            key: ScheduleState.from_json(value) for key, value in persisted.schedules.items()
        }
        self._changelog_offsets = dict(persisted.changelog_offsets)
        self._extra = dict(persisted.extra)

        self._schedules: dict[str, PunctuationSchedule] = {}
        self._stream_queue = PunctuationQueue()
        self._wall_queue = PunctuationQueue()
        # Earliest due time of the STREAM_TIME schedules (a lower bound: cancelling does not
        # raise it), so that the check after each record is one comparison.
        self._stream_due = NEVER
        self.idle_time = IdleStreamTime(self.config.stream_time_idle_advance_ms, self.stream_time)
        self.record_context = RecordContext()
        self._initialized = False
        self._closed = False
        self.records_processed = 0
        self.records_skipped = 0

        # Store writes of the record (or punctuator) running now, undone if it fails and
        # the processing handler goes on.
        self.undo = UndoLog()
        self.errors = ErrorHandling(
            self.config, self.task_id, collector.send, self.record_context, self.undo, self._log
        )
        self.stores: dict[str, StoreStack] = {}
        for store_name in subtopology.store_names:
            changelog = changelog_topic(self.application_id, store_name)
            builder = store_builders[store_name].bound_to(changelog, self.config.schema_registry)
            self.stores[store_name] = store_factory(builder, self._current_record_timestamp)
        self._attach_ttl_clocks()
        self.graph = NodeGraph(
            subtopology,
            lambda definition: SinkNode(
                definition,
                collector,
                self.errors.on_serialization_error,
                self.config.schema_registry,
            ),
            lambda node: context_factory(self, node),
        )
        self.partition_group = PartitionGroup(
            self.graph.sources_by_topic,
            self._persisted_partition_times,
            self.errors.on_deserialization_error,
            self._skipped,
            self.task_id,
            self._log,
            self.config.max_task_idle_ms,
            self.config.schema_registry,
            self.partition,
        )

    def _current_record_timestamp(self) -> int:
        return self.record_context.timestamp

    def _stream_time(self) -> int:
        return self.stream_time

    def _attach_ttl_clocks(self) -> None:
        """Give stores with a time to live the task's clocks (again after the runtime
        replaced a store, e.g. wiped and rebuilt it)."""
        for stack in self.stores.values():
            if stack.ttl is not None:
                stack.ttl.attach(self._stream_time, self._current_record_timestamp, self.clock)

    # -------------------------------------------------------------- lifecycle
    def initialize(self, on_init_error: InitErrorHandler | None = None) -> None:
        """Call ``init(context)`` on every processor, in topology order.

        An ``init()`` that raises stops it with that error (a :class:`StreamsError` as it is,
        anything else as a :class:`ProcessingError` naming the processor), unless
        ``on_init_error`` is given: it is called instead and the next processor's ``init()``
        runs if it returns (the driver's setup check, ``engine/setup_check.py``).
        """
        if self._initialized:
            return
        for stack in self.stores.values():  # the runtime may have replaced stores until now
            self.undo.track(stack.store)
            if stack.ttl is not None:
                stack.ttl.invalidate_index()  # restored below it: rebuilt at the first expiry
        self._attach_ttl_clocks()
        for node in self.graph.processor_nodes():
            try:
                node.processor.init(node.context)  # type: ignore[union-attr, arg-type]
            except Exception as exc:
                error = init_error(exc, node.name, self.task_id)
                if on_init_error is None:
                    if error is exc:
                        raise
                    raise error from exc
                on_init_error(node.name, error, exc)
        self._initialized = True
        self.idle_time.active(self.clock(), self.stream_time)  # idle time counts from the start

    def close(self, close_stores: bool = True) -> None:
        """Call ``close()`` on every processor, then close the stores."""
        if self._closed:
            return
        self._closed = True
        errors = []
        if self._initialized:
            for node in self.graph.processor_nodes():
                try:
                    node.processor.close()  # type: ignore[union-attr]
                except Exception as exc:  # keep closing the others
                    errors.append((node.name, exc))
        if close_stores:
            for stack in self.stores.values():
                stack.close()
        if errors:
            name, first = errors[0]
            raise ProcessingError(
                f"close() raised {type(first).__name__}: {first}",
                processor=name,
                task_id=self.task_id,
            ) from first

    # ------------------------------------------------------------- processing
    def process_batch(
        self, records: Iterable[InputRecord] | MessageBatch, limit: int | None = None
    ) -> int:
        """Queue records of this task's partition and process what may be processed now,
        at most ``limit`` records (None: no limit); returns how many were processed.

        ``records`` are :class:`InputRecord`s, or what the consumer handed out for the task
        (a :class:`MessageBatch`: queued as they are, no object made per record).

        Records of one topic are taken in offset order. With several co-partitioned topics,
        the record whose (deserialized, extracted) timestamp is smallest goes first, and the
        task stops when an input runs empty while the broker has more of it, or for up to
        ``max.task.idle.ms`` (:mod:`.idling`); the records left wait in the task for the next
        call (``process_batch([])`` retries). Records below the persisted input position, or
        queued already, are skipped.
        """
        if not self._initialized:
            self.initialize()
        self.undo.forget_reads()  # the stores may have been restored or rolled back since
        group = self.partition_group
        try:
            now = self.clock()
            if records.__class__ is MessageBatch:
                queued = group.add_messages(records, self._positions)
            else:
                queued = group.add_records(records, self._positions)  # type: ignore[arg-type]
            if not group.ready(now):
                if queued:
                    self.idle_time.active(now, self.stream_time)
                return 0
            count = 0
            process = self._process
            only = group.single_queue()
            if only is not None:  # one input has records: offset order, no merging
                if only.head is not None:  # stamped when it was queued
                    process(only, *only.poll())
                    count += 1
                stamp = only.stamp
                raws = only.take_all() if limit is None else only.take(limit - count)
                for raw in raws:
                    record = stamp(raw)
                    if record is None:
                        self._skipped(only, raw)
                    else:
                        process(only, raw, record)
                        count += 1
            else:
                next_record = group.next_record
                while (limit is None or count < limit) and (taken := next_record(now)) is not None:
                    process(*taken)
                    count += 1
            if queued or count:  # input came, or held-back input went: not idle
                self.idle_time.active(now, self.stream_time)
            return count
        except BaseException:
            group.clear()  # the runtime hands the records in again after a failure
            raise

    def advance_idle_stream_time(self, now: int | None = None) -> bool:
        """Move stream time of an idle input (``stream.time.idle.advance.ms``, :mod:`.idle_time`)
        and fire the STREAM_TIME punctuations that makes due; True if it moved."""
        now = self.clock() if now is None else now
        target = self.idle_time.target(now, self.stream_time, bool(self.buffered()))
        if target is None:
            return False
        self._log.debug("stream_time_advanced_on_idle_input", stream_time=target, now=now)
        self.stream_time = target
        self.undo.forget_reads()
        self.maybe_punctuate_stream_time()
        return True

    def next_idle_advance_due(self) -> int | None:
        """When (wall clock) idle stream-time advance makes the next STREAM_TIME punctuation
        due; None when it is off or no such schedule is live."""
        return self.idle_time.next_due(self._stream_queue.next_due())

    def update_lags(self, lags: Mapping[str, int | None]) -> None:
        """Tell the task how many records the broker has, per input topic, past those it was
        handed (None: unknown). It does not process past an input that ran empty while its
        lag is unknown or > 0; a topic never given a lag counts as caught up (lag 0)."""
        self.partition_group.idling.update_lags(lags)

    def buffered(self) -> int:
        """Records handed to the task and not processed yet (it waits for another input)."""
        return self.partition_group.buffered()

    def next_idle_deadline(self) -> int | None:
        """When ``max.task.idle.ms`` runs out for an input the task is waiting for (wall-clock
        ms), so a host with no new input should call ``process_batch([])`` then; None: none."""
        group = self.partition_group
        return group.idling.next_deadline(group.queues)

    def _skipped(self, queue: RecordQueue, raw: KafkaMessage) -> None:
        """A record dropped before processing (handler skipped it, negative timestamp)."""
        self.records_skipped += 1
        self._positions[queue.topic] = raw.offset() + 1

    def _process(self, queue: RecordQueue, raw: KafkaMessage, record: Record) -> None:
        timestamp = record.timestamp
        if timestamp > queue.partition_time:
            queue.partition_time = timestamp
        if timestamp > self.stream_time:
            self.stream_time = timestamp
        context = self.record_context
        context.timestamp = timestamp
        # record_metadata() makes its RecordMetadata when asked, context.raw its InputRecord
        context.message = raw
        context.source = queue
        undo = self.undo.entries
        if undo:
            undo.clear()
        graph = self.graph
        try:
            # graph.forward(queue.node, record, None) without its checks: the record is the
            # queue's own Record and a source forwards to all its children
            deliver = graph.deliver
            for target in queue.node.children:
                deliver(target, record)
        except ProcessingError as error:
            failed, graph.failed_record = graph.failed_record, None
            self.errors.on_processing_error(
                error, queue.input_record(raw), record if failed is None else failed
            )
        finally:
            context.message = None
            context.metadata = None
        # Only reached when the record was handled (processed, or failed and the handler
        # went on): a failing record leaves the position on itself, so nothing past it is
        # committed.
        self._positions[queue.topic] = raw.offset() + 1
        self.records_processed += 1
        if self.stream_time >= self._stream_due:
            self.maybe_punctuate_stream_time()

    # ------------------------------------------------------------ punctuation
    def schedule(
        self,
        node: ProcessorNode,
        interval: int | timedelta,
        type: PunctuationType,
        punctuator: Callable[[int], None] | None,
        start_time: datetime | int | None = None,
    ) -> Cancellable:
        """Register a schedule of ``node`` (``ProcessorContext.schedule``).

        Its key is ``"<processor>#<n>"`` (the processor's n-th call): a schedule persisted
        under that key with the same type and interval (and, when anchored, an anchor on the
        same grid) resumes its due time.
        """
        if not isinstance(type, PunctuationType):
            raise TypeError(f"punctuation type must be a PunctuationType, got {type!r}")
        interval_ms = interval_ms_of(interval)
        anchor = None if start_time is None else start_time_ms(start_time, node.name)
        callback = punctuator if punctuator is not None else node.processor.punctuate  # type: ignore[union-attr]
        if not callable(callback):
            raise TypeError(f"punctuator of processor {node.name!r} is not callable")
        key = f"{node.name}#{node.schedule_count}"
        node.schedule_count += 1
        state = ScheduleState.registered(
            self._persisted_schedules.pop(key, None), type, interval_ms, anchor, self.clock
        )
        schedule = PunctuationSchedule(key, node.name, callback, state)
        self._schedules[key] = schedule
        if type is PunctuationType.STREAM_TIME:
            self._stream_queue.add(schedule)
            self._stream_due = self._stream_queue.earliest_due()
        else:
            self._wall_queue.add(schedule)
        return schedule

    def maybe_punctuate_stream_time(self) -> bool:
        """Fire due STREAM_TIME schedules (no data yet: nothing fires)."""
        if self.stream_time < 0:
            return False
        queue = self._stream_queue
        try:
            return queue.may_punctuate(self.stream_time, self._fire)
        finally:
            self._stream_due = queue.earliest_due()

    def maybe_punctuate_wall_clock(self, now: int | None = None) -> bool:
        """Fire due WALL_CLOCK_TIME schedules against ``now`` (default: the task clock)."""
        if not self._initialized:
            self.initialize()
        self.undo.forget_reads()
        return self._wall_queue.may_punctuate(self.clock() if now is None else now, self._fire)

    def next_wall_clock_due(self) -> int | None:
        """When the next WALL_CLOCK_TIME punctuation is due (None: no schedule)."""
        return self._wall_queue.next_due()

    def _fire(self, schedule: PunctuationSchedule, timestamp: int) -> None:
        context = self.record_context
        saved = (context.message, context.given, context.metadata, context.timestamp)
        context.message = context.given = context.metadata = None
        context.timestamp = timestamp
        self.undo.clear()
        try:
            schedule.punctuator(timestamp)
        except Exception as exc:
            if isinstance(exc, ProcessingError):
                error = exc
            else:
                error = ProcessingError(
                    f"punctuator ({schedule.state.type.name}, every {schedule.state.interval} "
                    f"ms) raised {type(exc).__name__}: {exc}",
                    processor=schedule.node_name,
                )
                error.__cause__ = exc
            self.graph.failed_record = None
            self.errors.on_processing_error(error, None, None)
        finally:
            context.message, context.given, context.metadata, context.timestamp = saved

    # ----------------------------------------------------------------- commit
    def flush(self) -> dict[str, list[ChangeRecord]]:
        """Flush store caches and return, per logged store, the changes since the last flush."""
        changes: dict[str, list[ChangeRecord]] = {}
        for name, stack in self.stores.items():
            if stack.ttl is not None:
                self._expire(name, stack)
            stack.flush()
            if stack.changelog is not None:
                drained = stack.changelog.drain_changes()
                if drained:
                    changes[name] = drained
        self.commit_requested = False
        return changes

    def _expire(self, name: str, stack: StoreStack) -> None:
        """Delete the store's expired entries (tombstones go out with this commit)."""
        ttl = stack.ttl
        ttl.attach(self._stream_time, self._current_record_timestamp, self.clock)  # type: ignore[union-attr]
        started = time.perf_counter()
        expired = ttl.expire()  # type: ignore[union-attr]
        if expired:
            self._log.debug(
                "store_entries_expired",
                store=name,
                expired=expired,
                index=ttl.index_size(),  # type: ignore[union-attr]
                ms=round((time.perf_counter() - started) * 1000, 3),
            )

    def input_positions(self) -> dict[str, int]:
        """The next offset to process per source topic, as the stores stand between two
        records (a copy; cheaper than :meth:`metadata`, which copies the schedules too)."""
        return dict(self._positions)

    def metadata(self) -> TaskMetadata:
        """A snapshot of what must be persisted to resume this task."""
        schedules = {key: state.to_json() for key, state in self._persisted_schedules.items()}
        schedules.update({key: s.state.to_json() for key, s in self._schedules.items()})
        return TaskMetadata(
            stream_time=self.stream_time,
            partition_times={
                **self._persisted_partition_times,
                **self.partition_group.partition_times(),
            },
            input_positions=dict(self._positions),
            schedules=schedules,
            changelog_offsets=dict(self._changelog_offsets),
            extra=dict(self._extra),
        )

    def set_changelog_offsets(self, offsets: Mapping[str, int]) -> None:
        """Record, per store, the changelog end offset the committed state matches."""
        self._changelog_offsets.update(offsets)

    @property
    def extra(self) -> dict[str, Any]:
        """Runtime fields persisted with the metadata, not interpreted by the engine."""
        return self._extra
