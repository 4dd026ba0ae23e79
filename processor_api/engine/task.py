"""The task engine: runs one sub-topology on one partition.

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

Outputs go to the :class:`RecordCollector` as they are produced.
"""

from __future__ import annotations

import heapq
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.metadata import TaskMetadata
from processor_api.engine.punctuation import (
    NEVER,
    PunctuationQueue,
    PunctuationSchedule,
    ScheduleState,
)
from processor_api.engine.records import InputRecord, OutputRecord, RecordCollector
from processor_api.errors import ProcessingError, StoreError, StreamsError
from processor_api.logging import get_logger
from processor_api.processor import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
    _check_timestamp,
)
from processor_api.serdes import Serde
from processor_api.state.builder import StoreBuilder, StoreStack
from processor_api.state.changelogging import ChangeRecord
from processor_api.state.key_value import KeyValueIterator, KeyValueStore
from processor_api.topology import ProcessorNode, SinkNode, SourceNode, SubTopology

StoreFactory = Callable[[StoreBuilder, Callable[[], int]], StoreStack]
"""``factory(builder, timestamp_fn) -> StoreStack``: how the runtime materializes a store."""

ERROR_HEADER_PREFIX = "__streams.errors."


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _interval_ms(interval: int | timedelta) -> int:
    if isinstance(interval, timedelta):
        ms = interval // timedelta(milliseconds=1)
    elif isinstance(interval, int) and not isinstance(interval, bool):
        ms = interval
    else:
        raise TypeError(
            f"punctuation interval must be int milliseconds or timedelta, got {interval!r}"
        )
    if ms < 1:
        raise ValueError(f"punctuation interval must be at least 1 ms, got {interval!r}")
    return ms


def _sink_error(sink: SinkNode, exc: Exception) -> ProcessingError:
    """The error a sink raises when it cannot serialize or route a record (``exc``)."""
    return ProcessingError(
        f"sink could not serialize or route the record: {exc}", processor=sink.name
    )


def _same_wire_format(a: Serde, b: Serde) -> bool:
    """Whether bytes written with serde ``a`` can go out as serde ``b`` would write them."""
    return a.passthrough and a.__class__ is b.__class__


def _passthrough_topics(targets: list[_Node], store: KeyValueStore) -> list[str] | None:
    """The topics of ``targets`` when all are sinks that may take ``store``'s raw bytes.

    That is: a fixed topic, no partitioner, and key and value serdes of the store's built-in
    kind (see ``Serde.passthrough``). ``None`` otherwise.
    """
    topics = []
    for target in targets:
        sink = target.sink
        if (
            sink is None
            or sink.topic is None
            or sink.partitioner is not None
            or not _same_wire_format(store.key_serde, sink.key_serde)
            or not _same_wire_format(store.value_serde, sink.value_serde)
        ):
            return None
        topics.append(sink.topic)
    return topics


class _Node:
    """A node of the running sub-topology with its processor instance and context."""

    __slots__ = (
        "name",
        "processor",
        "children",
        "children_by_name",
        "sink",
        "stores",
        "context",
        "schedule_count",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.processor: Processor | None = None
        self.children: list[_Node] = []
        self.children_by_name: dict[str, _Node] = {}
        self.sink: SinkNode | None = None
        self.stores: frozenset[str] = frozenset()
        self.context: _NodeContext | None = None
        self.schedule_count = 0


class _NodeContext(ProcessorContext):
    """The ProcessorContext handed to one processor of one task."""

    def __init__(self, task: Task, node: _Node) -> None:
        self._task = task
        self._node = node
        self.application_id = task.application_id
        self.task_id = task.task_id
        self.partition = task.partition

    def forward(self, record: Record, child: str | None = None) -> None:
        self._task._forward(self._node, record, child)

    def forward_all(
        self, entries: Iterable[tuple[Any, Any]], timestamp: int, child: str | None = None
    ) -> int:
        return self._task._forward_all(self._node, entries, timestamp, child)

    def schedule(
        self,
        interval: int | timedelta,
        type: PunctuationType = PunctuationType.STREAM_TIME,
        punctuator: Callable[[int], None] | None = None,
    ) -> Cancellable:
        return self._task._schedule(self._node, interval, type, punctuator)

    def commit(self) -> None:
        self._task.commit_requested = True

    def get_state_store(self, name: str) -> KeyValueStore:
        if name not in self._node.stores:
            known = self._task.stores.keys()
            why = "it is not connected to this processor" if name in known else "no such store"
            raise StoreError(
                f"processor {self._node.name!r} cannot access state store {name!r}: {why} "
                f"(connected stores: {sorted(self._node.stores)})"
            )
        return self._task.stores[name].store

    def record_metadata(self) -> RecordMetadata | None:
        task = self._task
        metadata = task._current_metadata
        if metadata is None:
            raw = task._current_raw
            if raw is None:
                return None  # in punctuation, init() or close()
            # Made on first use only: most processors never ask.
            metadata = RecordMetadata(raw.topic, raw.partition, raw.offset)
            task._current_metadata = metadata
        return metadata

    def current_stream_time_ms(self) -> int:
        return self._task.stream_time

    def current_system_time_ms(self) -> int:
        return self._task.clock()


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
    ) -> None:
        self.config = config or StreamsConfig()
        self.application_id = self.config.application_id
        self.subtopology = subtopology
        self.partition = partition
        self.task_id = subtopology.task_id(partition)
        self.collector = collector
        self.clock = clock
        self.commit_requested = False
        self._log = get_logger("processor_api.task", task=self.task_id)

        persisted = metadata or TaskMetadata()
        self.stream_time = persisted.stream_time
        self._partition_times = dict(persisted.partition_times)
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
        self._current_node: _Node | None = None
        # The input record being processed (None in punctuation) and its RecordMetadata,
        # made from it when a processor first asks for it.
        self._current_raw: InputRecord | None = None
        self._current_metadata: RecordMetadata | None = None
        self._record_timestamp = 0
        self._initialized = False
        self._closed = False
        self.records_processed = 0
        self.records_skipped = 0

        self.stores: dict[str, StoreStack] = {}
        for store_name in subtopology.store_names:
            self.stores[store_name] = store_factory(
                store_builders[store_name], self._current_record_timestamp
            )
        self._nodes = self._build_nodes()
        self._source_by_topic: dict[str, tuple[SourceNode, _Node]] = {
            topic: (source, self._nodes[source.name])
            for source in subtopology.sources
            for topic in source.topics
        }

    # ------------------------------------------------------------------ setup
    def _build_nodes(self) -> dict[str, _Node]:
        nodes = {name: _Node(name) for name in self.subtopology.node_names}
        definitions: dict[str, SourceNode | ProcessorNode | SinkNode] = {}
        for source in self.subtopology.sources:
            definitions[source.name] = source
        for processor in self.subtopology.processors:
            definitions[processor.name] = processor
        for sink in self.subtopology.sinks:
            definitions[sink.name] = sink
        for name, definition in definitions.items():
            node = nodes[name]
            if isinstance(definition, SinkNode):
                node.sink = definition
                continue
            node.children = [nodes[child] for child in definition.children]
            node.children_by_name = {child.name: child for child in node.children}
            if isinstance(definition, ProcessorNode):
                node.stores = frozenset(definition.stores)
                processor = definition.supplier()
                if not isinstance(processor, Processor):
                    raise StreamsError(
                        f"supplier of processor {name!r} returned {processor!r}, "
                        "expected a Processor instance"
                    )
                node.processor = processor
                node.context = _NodeContext(self, node)
        return nodes

    def _current_record_timestamp(self) -> int:
        return self._record_timestamp

    def initialize(self) -> None:
        """Call ``init(context)`` on every processor, in topology order."""
        if self._initialized:
            return
        for name in self.subtopology.node_names:
            node = self._nodes[name]
            if node.processor is None:
                continue
            self._current_node = node
            try:
                node.processor.init(node.context)  # type: ignore[arg-type]
            except StreamsError:
                raise
            except Exception as exc:
                raise ProcessingError(
                    f"init() raised {type(exc).__name__}: {exc}",
                    processor=name,
                    task_id=self.task_id,
                ) from exc
            finally:
                self._current_node = None
        self._initialized = True

    # ------------------------------------------------------------- processing
    def process_batch(self, records: Iterable[InputRecord]) -> int:
        """Process records of this task's partition; returns how many were processed.

        Records of one topic are taken in offset order. With several co-partitioned topics,
        the record whose (deserialized, extracted) timestamp is smallest goes first.
        Records below the persisted input position are skipped (already processed).
        """
        if not self._initialized:
            self.initialize()
        by_topic: dict[str, list[InputRecord]] = {}
        for record in records:
            if record.topic not in self._source_by_topic:
                raise StreamsError(
                    f"task {self.task_id} got a record of topic {record.topic!r}, which no "
                    f"source of sub-topology {self.subtopology.id} reads"
                )
            by_topic.setdefault(record.topic, []).append(record)
        count = 0
        if len(by_topic) == 1:
            (batch,) = by_topic.values()
            batch.sort(key=lambda r: r.offset)
            for raw in batch:
                count += self._process_raw(raw)
            return count
        queues = []
        for batch in by_topic.values():
            batch.sort(key=lambda r: r.offset)
            queues.append(iter(batch))
        heap: list[tuple[int, int, InputRecord]] = []
        for index, queue in enumerate(queues):
            first = next(queue, None)
            if first is not None:
                heap.append((first.timestamp, index, first))
        heapq.heapify(heap)
        while heap:
            _, index, raw = heapq.heappop(heap)
            count += self._process_raw(raw)
            following = next(queues[index], None)
            if following is not None:
                heapq.heappush(heap, (following.timestamp, index, following))
        return count

    def _process_raw(self, raw: InputRecord) -> int:
        position = self._positions.get(raw.topic)
        if position is not None and raw.offset < position:
            return 0  # already processed in an earlier (committed) batch
        processed = self._process_one(raw)
        # Only reached when the record was handled (processed or skipped by a handler): a
        # failing record leaves the position on itself, so nothing past it is committed.
        self._positions[raw.topic] = raw.offset + 1
        if processed:
            self.records_processed += 1
            if self.stream_time >= self._stream_due:
                self.maybe_punctuate_stream_time()
        return processed

    def _process_one(self, raw: InputRecord) -> int:
        source, source_node = self._source_by_topic[raw.topic]
        try:
            key = source.key_serde.deserialize(raw.key)
            value = source.value_serde.deserialize(raw.value)
        except Exception as exc:
            self._on_deserialization_error(raw, source.name, exc)
            return 0
        timestamp = raw.timestamp
        headers = raw.headers
        if source.timestamp_extractor is not None:
            partition_time = self._partition_times.get(raw.topic, -1)
            base = Record(key, value, max(timestamp, 0), headers)
            timestamp = source.timestamp_extractor(base, partition_time)
        if timestamp < 0:
            self._log.warning(
                "record_skipped_invalid_timestamp",
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                timestamp=timestamp,
            )
            self.records_skipped += 1
            return 0
        if timestamp > self._partition_times.get(raw.topic, -1):
            self._partition_times[raw.topic] = timestamp
        if timestamp > self.stream_time:
            self.stream_time = timestamp
        record = Record(key, value, timestamp, headers)
        self._record_timestamp = timestamp
        self._current_raw = raw  # record_metadata() makes its RecordMetadata when asked
        try:
            self._forward(source_node, record, None)
        except ProcessingError as error:
            self._on_processing_error(error, raw)
        finally:
            self._current_raw = None
            self._current_metadata = None
        return 1

    def _forward(self, node: _Node, record: Record, child: str | None) -> None:
        if not isinstance(record, Record):
            raise TypeError(
                f"processor {node.name!r} forwarded {type(record).__name__}, expected a Record"
            )
        if child is None:
            for target in node.children:
                self._deliver(target, record)
            return
        target = node.children_by_name.get(child)
        if target is None:
            raise ProcessingError(
                f"processor {node.name!r} forwarded to unknown child {child!r}; its children "
                f"are {sorted(node.children_by_name)}",
                processor=node.name,
            )
        self._deliver(target, record)

    def _forward_all(
        self, node: _Node, entries: Iterable[tuple[Any, Any]], timestamp: int, child: str | None
    ) -> int:
        """``ProcessorContext.forward_all``: a raw store-to-sink path, else one record each."""
        _check_timestamp(timestamp)
        if child is None:
            targets = node.children
        else:
            target = node.children_by_name.get(child)
            targets = [] if target is None else [target]
        if targets and entries.__class__ is KeyValueIterator:
            raw = entries.raw_entries()  # type: ignore[attr-defined]
            if raw is not None:
                store, raw_entries = raw
                topics = _passthrough_topics(targets, store)
                if topics is not None:
                    return self._send_raw(store, raw_entries, timestamp, targets, topics)
        forward = self._forward
        count = 0
        for key, value in entries:
            forward(node, Record(key, value, timestamp), child)
            count += 1
        return count

    def _send_raw(
        self,
        store: KeyValueStore,
        entries: Iterator[tuple[bytes, bytes]],
        timestamp: int,
        targets: list[_Node],
        topics: list[str],
    ) -> int:
        """Produce raw store entries to sinks whose serdes equal the store's (no round trip).

        An entry whose bytes the serde does not pass through as they are (e.g. not UTF-8 for
        a string serde) takes the normal path, so it fails (or not) exactly as it would there.
        """
        key_check = store.key_serde.passthrough_check
        value_check = store.value_serde.passthrough_check
        send = self.collector.send
        topic = topics[0] if len(topics) == 1 else None
        count = 0
        for key, value in entries:
            count += 1
            if (key_check is None or key_check(key)) and (
                value_check is None or value_check(value)
            ):
                if topic is not None:  # one sink, the usual case
                    send(OutputRecord(topic, key, value, timestamp, (), None))
                else:
                    for each in topics:
                        send(OutputRecord(each, key, value, timestamp, (), None))
                continue
            # The serde would not give these bytes back as they are (or would raise): take
            # the normal path, which fails (or not) exactly as forward() does.
            record = Record(store._deserialize_key(key), store._deserialize_value(value), timestamp)
            for target in targets:
                self._deliver(target, record)
        return count

    def _deliver(self, target: _Node, record: Record) -> None:
        if target.sink is not None:
            self._send_to_sink(target.sink, record)
            return
        previous = self._current_node
        self._current_node = target
        try:
            target.processor.process(record)  # type: ignore[union-attr]
        except ProcessingError:
            raise
        except Exception as exc:
            raise ProcessingError(
                f"process() raised {type(exc).__name__}: {exc}", processor=target.name
            ) from exc
        finally:
            self._current_node = previous

    def _send_to_sink(self, sink: SinkNode, record: Record) -> None:
        topic = sink.topic
        if topic is not None and sink.partitioner is None:
            # The common sink: a fixed topic, the default partitioner.
            try:
                key = sink.key_serde.serialize(record.key)
                value = sink.value_serde.serialize(record.value)
            except ProcessingError:
                raise
            except Exception as exc:
                raise _sink_error(sink, exc) from exc
            self.collector.send(
                OutputRecord(topic, key, value, record.timestamp, record.headers, None)
            )
            return
        try:
            topic = sink.topic_for(record)
            key = sink.key_serde.serialize(record.key)
            value = sink.value_serde.serialize(record.value)
            partition = None
            if sink.partitioner is not None:
                count = self.collector.partition_count(topic)
                partition = sink.partitioner(topic, record.key, record.value, count)
                if partition is not None and not 0 <= partition < count:
                    raise StreamsError(
                        f"partitioner returned partition {partition} for topic {topic!r} "
                        f"with {count} partitions"
                    )
        except ProcessingError:
            raise
        except Exception as exc:
            raise _sink_error(sink, exc) from exc
        self.collector.send(
            OutputRecord(topic, key, value, record.timestamp, record.headers, partition)
        )

    # --------------------------------------------------------- error handling
    def _on_deserialization_error(self, raw: InputRecord, source: str, exc: Exception) -> None:
        error = ProcessingError(
            f"cannot deserialize record: {type(exc).__name__}: {exc}",
            topic=raw.topic,
            partition=raw.partition,
            offset=raw.offset,
            processor=source,
            task_id=self.task_id,
        )
        error.__cause__ = exc
        if self.config.deserialization_exception_handler == "log_and_fail":
            self._log.error("deserialization_failed", error=str(error))
            raise error
        self._log.warning("deserialization_failed_record_skipped", error=str(error))
        self.records_skipped += 1
        self._dead_letter(raw, error)

    def _on_processing_error(self, error: ProcessingError, raw: InputRecord | None) -> None:
        located = error.with_coordinates(
            topic=raw.topic if raw else None,
            partition=raw.partition if raw else None,
            offset=raw.offset if raw else None,
            task_id=self.task_id,
        )
        if self.config.processing_exception_handler == "log_and_fail":
            self._log.error("processing_failed", error=str(located))
            raise located from error.__cause__
        self._log.warning("processing_failed_continuing", error=str(located))
        if raw is not None:
            self._dead_letter(raw, located)

    def _dead_letter(self, raw: InputRecord, error: ProcessingError) -> None:
        topic = self.config.dead_letter_topic
        if not topic:
            return
        cause = error.__cause__ or error
        headers = tuple(raw.headers) + tuple(
            (ERROR_HEADER_PREFIX + name, str(value).encode("utf-8"))
            for name, value in (
                ("exception", type(cause).__name__),
                ("message", error.reason),
                ("stacktrace", "".join(traceback.format_exception(cause)).strip()),
                ("topic", raw.topic),
                ("partition", raw.partition),
                ("offset", raw.offset),
                ("processor", error.processor),
                ("task", self.task_id),
            )
            if value is not None
        )
        self.collector.send(
            OutputRecord(topic, raw.key, raw.value, max(raw.timestamp, 0), headers, None)
        )

    # ------------------------------------------------------------ punctuation
    def _schedule(
        self,
        node: _Node,
        interval: int | timedelta,
        type: PunctuationType,
        punctuator: Callable[[int], None] | None,
    ) -> Cancellable:
        if not isinstance(type, PunctuationType):
            raise TypeError(f"punctuation type must be a PunctuationType, got {type!r}")
        interval_ms = _interval_ms(interval)
        callback = punctuator if punctuator is not None else node.processor.punctuate  # type: ignore[union-attr]
        if not callable(callback):
            raise TypeError(f"punctuator of processor {node.name!r} is not callable")
        key = f"{node.name}#{node.schedule_count}"
        node.schedule_count += 1
        state = self._persisted_schedules.pop(key, None)
        if state is None or state.type is not type or state.interval != interval_ms:
            first_due = 0 if type is PunctuationType.STREAM_TIME else self.clock() + interval_ms
            state = ScheduleState(type, interval_ms, first_due)
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
        return self._wall_queue.may_punctuate(self.clock() if now is None else now, self._fire)

    def next_wall_clock_due(self) -> int | None:
        """When the next WALL_CLOCK_TIME punctuation is due (None: no schedule)."""
        return self._wall_queue.next_due()

    def _fire(self, schedule: PunctuationSchedule, timestamp: int) -> None:
        node = self._nodes[schedule.node_name]
        saved = (
            self._current_node,
            self._current_raw,
            self._current_metadata,
            self._record_timestamp,
        )
        self._current_node, self._current_raw, self._current_metadata = node, None, None
        self._record_timestamp = timestamp
        try:
            schedule.punctuator(timestamp)
        except Exception as exc:
            if isinstance(exc, ProcessingError):
                error = exc
            else:
                error = ProcessingError(
                    f"punctuator ({schedule.state.type.name}, every {schedule.state.interval} "
                    f"ms) raised {type(exc).__name__}: {exc}",
                    processor=node.name,
                )
                error.__cause__ = exc
            self._on_processing_error(error, None)
        finally:
            (
                self._current_node,
                self._current_raw,
                self._current_metadata,
                self._record_timestamp,
            ) = saved

    # ----------------------------------------------------------------- commit
    def flush(self) -> dict[str, list[ChangeRecord]]:
        """Flush store caches and return, per logged store, the changes since the last flush."""
        changes: dict[str, list[ChangeRecord]] = {}
        for name, stack in self.stores.items():
            stack.flush()
            if stack.changelog is not None:
                drained = stack.changelog.drain_changes()
                if drained:
                    changes[name] = drained
        self.commit_requested = False
        return changes

    def metadata(self) -> TaskMetadata:
        """A snapshot of what must be persisted to resume this task."""
        schedules = {key: state.to_json() for key, state in self._persisted_schedules.items()}
        schedules.update({key: s.state.to_json() for key, s in self._schedules.items()})
        return TaskMetadata(
            stream_time=self.stream_time,
            partition_times=dict(self._partition_times),
            input_positions=dict(self._positions),
            schedules=schedules,
            changelog_offsets=dict(self._changelog_offsets),
            extra=dict(self._extra),
        )

    def set_changelog_offsets(self, offsets: Mapping[str, int]) -> None:
        self._changelog_offsets.update(offsets)

    @property
    def extra(self) -> dict[str, Any]:
        return self._extra

    def close(self, close_stores: bool = True) -> None:
        """Call ``close()`` on every processor, then close the stores."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for name in self.subtopology.node_names:
            node = self._nodes[name]
            if node.processor is not None and self._initialized:
                try:
                    node.processor.close()
                except Exception as exc:  # keep closing the others
                    errors.append((name, exc))
        if close_stores:
            for stack in self.stores.values():
                stack.close()
        if errors:
            name, exc = errors[0]
            raise ProcessingError(
                f"close() raised {type(exc).__name__}: {exc}", processor=name, task_id=self.task_id
            ) from exc
