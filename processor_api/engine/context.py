"""The ProcessorContext a task hands to each of its processors (Kafka Streams'
``ProcessorContextImpl``), and the record context it reads from."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from processor_api.engine.read_only import ReadOnlyStoreView
from processor_api.engine.records import InputRecord, KafkaMessage, input_record
from processor_api.errors import ProcessingError, StoreError, StreamsError
from processor_api.processor import (
    Cancellable,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from processor_api.state.key_value import KeyValueStore

if TYPE_CHECKING:
    from processor_api.engine.nodes import ProcessorNode
    from processor_api.engine.task import Task


InitErrorHandler = Callable[[str, StreamsError, Exception], None]
"""``handler(processor, error, raised)``: told of an ``init()`` that raised ``raised``
(``error`` is what the task's ``initialize()`` would raise for it); it raises to stop, or
returns to go on with the next processor's ``init()``."""


def init_error(raised: Exception, processor: str, task_id: str) -> StreamsError:
    """What a failed ``init()`` stops a task with: a :class:`StreamsError` as it was raised
    (unknown store, ...), anything else as a :class:`ProcessingError` naming the processor."""
    if isinstance(raised, StreamsError):
        return raised
    return ProcessingError(
        f"init() raised {type(raised).__name__}: {raised}", processor=processor, task_id=task_id
    )


class RecordContext:
    """What the task is working on: the input record (``None`` in punctuation, ``init()`` and
    ``close()``) and the timestamp of the record being processed or of the punctuation.

    A task sets ``message`` (the consumed message) and ``source`` (its queue: ``topic`` and
    ``partition``) per record; :attr:`raw`, the :class:`InputRecord` that error handlers get,
    is made from them only when asked. ``metadata`` is the :class:`RecordMetadata` of the
    record, made when a processor first asks.
    """

    __slots__ = ("message", "source", "given", "metadata", "timestamp")

    def __init__(self) -> None:
        self.message: KafkaMessage | None = None
        self.source: Any = None  # what ``message`` came from: has ``topic`` and ``partition``
        self.given: InputRecord | None = None
        self.metadata: RecordMetadata | None = None
        self.timestamp = 0

    @property
    def raw(self) -> InputRecord | None:
        """The input record being processed, or None outside of one."""
        message = self.message
        if message is not None:
            source = self.source
            return input_record(source.topic, source.partition, message)
        return self.given

    @raw.setter
    def raw(self, record: InputRecord | None) -> None:
        self.given = record
        self.message = None

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the input record, or None outside of one."""
        metadata = self.metadata
        if metadata is None:
            # Made on first use only: most processors never ask.
            message = self.message
            if message is not None:
                source = self.source
                metadata = RecordMetadata(source.topic, source.partition, message.offset())
            else:
                raw = self.given
                if raw is None:
                    return None
                metadata = RecordMetadata(raw.topic, raw.partition, raw.offset)
            self.metadata = metadata
        return metadata


class ProcessorContextImpl(ProcessorContext):
    """The :class:`ProcessorContext` of one processor node of one task."""

    def __init__(self, task: Task, node: ProcessorNode) -> None:
        self._task = task
        self._node = node
        self.application_id = task.application_id
        self.task_id = task.task_id
        self.partition = task.partition
        self._global_views: dict[str, Any] = {}

    def forward(self, record: Record, child: str | None = None) -> None:
        """Deliver ``record`` to the children (or ``child``), depth first."""
        self._task.graph.forward(self._node, record, child)

    def forward_all(
        self, entries: Iterable[tuple[Any, Any]], timestamp: int, child: str | None = None
    ) -> int:
        """Forward every ``(key, value)`` with ``timestamp``; store entries to sinks go raw."""
        return self._task.graph.forward_all(self._node, entries, timestamp, child)

    def schedule(
        self,
        interval: int | timedelta,
        type: PunctuationType = PunctuationType.STREAM_TIME,
        punctuator: Callable[[int], None] | None = None,
        *,
        start_time: datetime | int | None = None,
    ) -> Cancellable:
        """Register a punctuation schedule of this processor (see the task's schedules)."""
        return self._task.schedule(self._node, interval, type, punctuator, start_time)

    def commit(self) -> None:
        """Ask the runtime to commit the task as soon as possible."""
        self._task.commit_requested = True

    def get_state_store(self, name: str) -> KeyValueStore:
        """The store ``name``, if it is connected to this processor, or the read-only view
        of the global store ``name`` (global stores need no connection)."""
        node = self._node
        global_task = self._task.global_task
        if global_task is not None and name in global_task.stores:
            view = self._global_views.get(name)
            if view is None:
                store = global_task.stores[name].store
                view = ReadOnlyStoreView(store, node.name, global_task.processor_of(name))
                self._global_views[name] = view
            return view  # type: ignore[return-value]
        if name not in node.stores:
            known = self._task.stores.keys()
            why = "it is not connected to this processor" if name in known else "no such store"
            raise StoreError(
                f"processor {node.name!r} cannot access state store {name!r}: {why} "
                f"(connected stores: {sorted(node.stores)})"
            )
        return self._task.stores[name].store

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the input record; None in punctuation."""
        return self._task.record_context.record_metadata()

    def current_stream_time_ms(self) -> int:
        """The task's stream time (-1 before any record)."""
        return self._task.stream_time

    def current_system_time_ms(self) -> int:
        """The task's clock."""
        return self._task.clock()
