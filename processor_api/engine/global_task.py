"""The global stores of one runtime copy and the processors that keep them up to date
(Kafka Streams' ``GlobalStateUpdateTask`` and ``GlobalProcessorContextImpl``).

The runtime feeds :meth:`GlobalTask.process` the records of every partition of each global
store's topic, in offset order per partition; the task deserializes each with its source's
serdes (failures go to the deserialization exception handler), stamps it (the source's
timestamp extractor, else the Kafka timestamp) and calls its global processor, which writes
its store. ``positions`` is the next offset to read per topic-partition.

While *restoring* (filling the stores before any task runs, from the checkpoint or the
beginning), records with a null key are skipped, as Kafka Streams' global restore does;
afterwards every record reaches the processor.

A global processor has no children and no schedule: ``forward`` and ``schedule`` raise;
``commit`` does nothing (the runtime decides when global state is flushed and checkpointed).
Its ``get_state_store`` returns any global store, writable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.context import InitErrorHandler, RecordContext, init_error
from processor_api.engine.error_handling import ErrorHandling
from processor_api.engine.records import InputRecord, OutputRecord
from processor_api.errors import ProcessingError, StoreError, StreamsError
from processor_api.logging import get_logger
from processor_api.processor import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from processor_api.serde import Serde
from processor_api.state.builder import StoreBuilder, StoreStack
from processor_api.topology.nodes import GlobalStoreNode, SourceNode

#: Kafka Streams' task id of the global state update task.
GLOBAL_TASK_ID = "-1_-1"

StoreFactory = Callable[[StoreBuilder, Callable[[], int]], StoreStack]
GlobalContextFactory = Callable[["GlobalTask", str], "GlobalProcessorContext"]
"""``factory(task, processor_name) -> GlobalProcessorContext``: a global processor's context."""


class GlobalProcessorContext(ProcessorContext):
    """The context of the processor of one global store."""

    def __init__(self, task: GlobalTask, processor_name: str) -> None:
        self._task = task
        self._name = processor_name
        self.application_id = task.config.application_id
        self.task_id = GLOBAL_TASK_ID
        self.partition = -1

    def forward(self, record: Record, child: str | None = None) -> None:
        """Refused: the processor of a global store has no children."""
        raise StreamsError(
            f"global store processor {self._name!r} cannot forward records: the processor of a "
            "global store has no children"
        )

    def schedule(
        self,
        interval: int | timedelta,
        type: PunctuationType = PunctuationType.STREAM_TIME,
        punctuator: Callable[[int], None] | None = None,
        *,
        start_time: datetime | int | None = None,
    ) -> Cancellable:
        """Refused, as in Kafka Streams: a global processor has no punctuation."""
        raise StreamsError(
            f"global store processor {self._name!r} cannot schedule punctuations: global "
            "processors have none (as in Kafka Streams)"
        )

    def commit(self) -> None:
        """Nothing to do: the runtime flushes and checkpoints global stores itself."""

    def get_state_store(self, name: str) -> Any:
        """The global store ``name`` (writable: this processor keeps it up to date)."""
        stack = self._task.stores.get(name)
        if stack is None:
            raise StoreError(
                f"global store processor {self._name!r} cannot access state store {name!r}: "
                f"no such global store (global stores: {sorted(self._task.stores)})"
            )
        return stack.store

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the global record being processed."""
        return self._task.record_context.record_metadata()

    def current_stream_time_ms(self) -> int:
        """Refused, as in Kafka Streams: there is no stream time for a global processor."""
        raise StreamsError(
            f"global store processor {self._name!r}: there is no stream time for a global processor"
        )

    def current_system_time_ms(self) -> int:
        """The runtime's clock."""
        return self._task.clock()


@dataclass
class _GlobalNode:
    store_name: str
    source: SourceNode
    key_serde: Serde
    value_serde: Serde
    processor_name: str
    processor: Processor
    context: GlobalProcessorContext


class GlobalTask:
    """The global stores and their processors (see the module docs)."""

    def __init__(
        self,
        *,
        global_stores: Iterable[GlobalStoreNode],
        store_factory: StoreFactory,
        config: StreamsConfig | None = None,
        clock: Callable[[], int] = lambda: 0,
        context_factory: GlobalContextFactory | None = None,
    ) -> None:
        self.config = config or StreamsConfig()
        self.clock = clock
        make_context = context_factory or GlobalProcessorContext
        self.record_context = RecordContext()
        self.positions: dict[tuple[str, int], int] = {}
        self.records_processed = 0
        self.dead_letters: list[OutputRecord] = []
        self._partition_times: dict[tuple[str, int], int] = {}
        self._log = get_logger("processor_api.global_task", task=GLOBAL_TASK_ID)
        self.errors = ErrorHandling(
            self.config, GLOBAL_TASK_ID, self.dead_letters.append, self.record_context
        )
        self.stores: dict[str, StoreStack] = {}
        self._by_topic: dict[str, _GlobalNode] = {}
        self._initialized = False
        self._closed = False
        definitions = list(global_stores)
        for definition in definitions:
            # a global store's changelog is its source topic
            builder = definition.builder.bound_to(definition.topic, self.config.schema_registry)
            self.stores[definition.store_name] = store_factory(builder, self._record_timestamp)
        for definition in definitions:
            name = definition.processor.name
            processor = definition.processor.supplier()
            if not isinstance(processor, Processor):
                raise StreamsError(
                    f"supplier of global store processor {name!r} returned {processor!r}, "
                    "expected a Processor instance"
                )
            source = definition.source
            self._by_topic[definition.topic] = _GlobalNode(
                definition.store_name,
                source,
                source.key_serde.for_topic(definition.topic, True, self.config.schema_registry),
                source.value_serde.for_topic(definition.topic, False, self.config.schema_registry),
                name,
                processor,
                make_context(self, name),
            )

    def _record_timestamp(self) -> int:
        return self.record_context.timestamp

    def processor_of(self, store_name: str) -> str:
        """The name of the processor that keeps global store ``store_name`` up to date."""
        for node in self._by_topic.values():
            if node.store_name == store_name:
                return node.processor_name
        raise StoreError(f"no global store named {store_name!r}")

    @property
    def topics(self) -> list[str]:
        """The topics of the global stores."""
        return list(self._by_topic)

    def initialize(self, on_init_error: InitErrorHandler | None = None) -> None:
        """Call ``init(context)`` of every global processor (once); a failure stops it, unless
        ``on_init_error`` is given (as :meth:`Task.initialize
        <processor_api.engine.task.Task.initialize>`)."""
        if self._initialized:
            return
        for node in self._by_topic.values():
            try:
                node.processor.init(node.context)
            except Exception as exc:
                error = init_error(exc, node.processor_name, GLOBAL_TASK_ID)
                if on_init_error is None:
                    if error is exc:
                        raise
                    raise error from exc
                on_init_error(node.processor_name, error, exc)
        self._initialized = True

    def process(self, raw: InputRecord, *, restoring: bool = False) -> None:
        """Hand one record of a global topic to its store's processor; advance the position."""
        node = self._by_topic.get(raw.topic)
        if node is None:
            raise StreamsError(
                f"topic {raw.topic!r} feeds no global store (global topics: {self.topics})"
            )
        if not self._initialized:
            self.initialize()
        key = (raw.topic, raw.partition)
        if not (restoring and raw.key is None):
            record = self._stamp(node, raw)
            if record is not None:
                self._call(node, raw, record)
        self.positions[key] = raw.offset + 1

    def _stamp(self, node: _GlobalNode, raw: InputRecord) -> Record | None:
        source = node.source
        try:
            key = node.key_serde.deserialize(raw.key)
            value = node.value_serde.deserialize(raw.value)
        except Exception as exc:
            self.errors.on_deserialization_error(raw, source.name, exc)  # raises to fail
            return None
        timestamp = raw.timestamp
        extractor = source.timestamp_extractor
        if extractor is not None:
            partition_time = self._partition_times.get((raw.topic, raw.partition), -1)
            try:
                timestamp = extractor(
                    Record(key, value, max(timestamp, 0), raw.headers), partition_time
                )
            except Exception as exc:
                raise ProcessingError(
                    f"timestamp extractor raised {type(exc).__name__}: {exc}",
                    topic=raw.topic,
                    partition=raw.partition,
                    offset=raw.offset,
                    processor=source.name,
                    task_id=GLOBAL_TASK_ID,
                ) from exc
        if not isinstance(timestamp, int) or timestamp < 0:
            self._log.warning(
                "record_skipped_invalid_timestamp",
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                timestamp=timestamp,
                store=node.store_name,
            )
            return None
        part = (raw.topic, raw.partition)
        if timestamp > self._partition_times.get(part, -1):
            self._partition_times[part] = timestamp
        return Record(key, value, timestamp, raw.headers)

    def _call(self, node: _GlobalNode, raw: InputRecord, record: Record) -> None:
        context = self.record_context
        context.raw, context.metadata, context.timestamp = raw, None, record.timestamp
        try:
            node.processor.process(record)
        except Exception as exc:
            reason = (
                exc.reason
                if isinstance(exc, ProcessingError)
                else f"process() raised {type(exc).__name__}: {exc}"
            )
            raise ProcessingError(
                f"global store {node.store_name!r}: {reason}",
                topic=raw.topic,
                partition=raw.partition,
                offset=raw.offset,
                processor=node.processor_name,
                task_id=GLOBAL_TASK_ID,
            ) from exc
        finally:
            context.raw = context.metadata = None
        self.records_processed += 1

    def set_position(self, topic: str, partition: int, offset: int) -> None:
        """Move a partition's position to ``offset`` (a read range ended past its last record:
        transaction markers, compacted offsets)."""
        key = (topic, partition)
        if offset > self.positions.get(key, 0):
            self.positions[key] = offset

    def take_dead_letters(self) -> list[OutputRecord]:
        """The dead-letter records the deserialization handler asked for since the last call."""
        taken = list(self.dead_letters)
        self.dead_letters.clear()
        return taken

    def flush(self) -> None:
        """Flush every global store (caches, then the stores)."""
        for stack in self.stores.values():
            stack.flush()

    def close(self) -> None:
        """Close the global processors, then the stores."""
        if self._closed:
            return
        self._closed = True
        errors = []
        if self._initialized:
            for node in self._by_topic.values():
                try:
                    node.processor.close()
                except Exception as exc:  # keep closing the others
                    errors.append((node.processor_name, exc))
        for stack in self.stores.values():
            stack.close()
        if errors:
            name, first = errors[0]
            raise ProcessingError(
                f"close() raised {type(first).__name__}: {first}",
                processor=name,
                task_id=GLOBAL_TASK_ID,
            ) from first
