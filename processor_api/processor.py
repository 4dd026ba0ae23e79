"""The Processor API: records, processors, their context and punctuation.

Mirrors Kafka Streams' ``org.apache.kafka.streams.processor.api`` in Pythonic form:
subclass :class:`Processor`, keep state in stores obtained from the
:class:`ProcessorContext`, and emit records downstream with ``context.forward``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from processor_api.state.key_value import KeyValueStore

Headers = tuple[tuple[str, bytes | None], ...]  # a header value may be null, as in Kafka


def _check_timestamp(timestamp: int) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError(f"record timestamp must be an int (epoch ms), got {timestamp!r}")
    if timestamp < 0:
        raise ValueError(f"record timestamp must be >= 0 (epoch ms), got {timestamp}")
    return timestamp


def _check_headers(headers: Any) -> Headers:
    if headers is None:
        return ()
    result = []
    for entry in headers:
        name, value = entry
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, got {name!r}")
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"header {name!r} value must be bytes or None, got {value!r}")
        result.append((name, None if value is None else bytes(value)))
    return tuple(result)


@dataclass(frozen=True, slots=True)
class Record:
    """An immutable key-value record with its timestamp (epoch ms, >= 0) and headers.

    ``headers`` is a tuple of ``(name, bytes or None)`` pairs; names may repeat, as in Kafka.
    The ``with_*`` methods return a modified copy.
    """

    key: Any
    value: Any
    timestamp: int = 0
    headers: Headers = ()

    def __post_init__(self) -> None:
        # Fast path for the common case (built per input record and per forward): an exact
        # non-negative int timestamp and no headers need no further checks.
        timestamp, headers = self.timestamp, self.headers
        if timestamp.__class__ is int and headers.__class__ is tuple:
            if timestamp >= 0 and not headers:
                return
        _check_timestamp(timestamp)
        if not isinstance(self.headers, tuple) or any(
            not (isinstance(h, tuple) and len(h) == 2) for h in self.headers
        ):
            object.__setattr__(self, "headers", _check_headers(self.headers))

    def with_key(self, key: Any) -> Record:
        """A copy of this record with another key."""
        return checked_record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: Any) -> Record:
        """A copy of this record with another value."""
        return checked_record(self.key, value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record:
        """A copy of this record with another timestamp (epoch ms, >= 0)."""
        return Record(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: Any) -> Record:
        """A copy of this record with other headers (an iterable of ``(str, bytes)``)."""
        return Record(self.key, self.value, self.timestamp, _check_headers(headers))


# the slots' own setters: a frozen dataclass refuses ``setattr``
_new = object.__new__
_set_key = Record.__dict__["key"].__set__
_set_value = Record.__dict__["value"].__set__
_set_timestamp = Record.__dict__["timestamp"].__set__
_set_headers = Record.__dict__["headers"].__set__


def checked_record(key: Any, value: Any, timestamp: int, headers: Headers) -> Record:
    """A :class:`Record` of fields already known to be valid: a timestamp that is an
    ``int >= 0`` and headers that are a tuple of ``(str, bytes or None)`` pairs (a Kafka
    record's, or another record's). Skips the dataclass ``__init__`` and its checks, which
    cost a few microseconds per record on the engine's per-record path."""
    record = _new(Record)
    _set_key(record, key)
    _set_value(record, value)
    _set_timestamp(record, timestamp)
    _set_headers(record, headers)
    return record


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the input record being processed came from."""

    topic: str
    partition: int
    offset: int


class PunctuationType(Enum):
    """What drives a punctuation schedule."""

    STREAM_TIME = "stream_time"
    """Record timestamps: fires only as data arrives (Kafka Streams ``STREAM_TIME``)."""

    WALL_CLOCK_TIME = "wall_clock_time"
    """System time: fires even when no data arrives (``WALL_CLOCK_TIME``)."""


class Cancellable(ABC):
    """Handle of a punctuation schedule; ``cancel()`` stops it (also from its own punctuator)."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the schedule. Calling it again does nothing."""

    @property
    @abstractmethod
    def cancelled(self) -> bool:
        """Whether ``cancel()`` was called."""


class ProcessorContext(ABC):
    """What a processor can see and do: forward, schedule, commit, reach its stores.

    The runtime passes one to :meth:`Processor.init`. Attributes ``application_id``,
    ``task_id`` (``"<subtopology>_<partition>"``) and ``partition`` identify the task.
    """

    application_id: str
    task_id: str
    partition: int

    @abstractmethod
    def forward(self, record: Record, child: str | None = None) -> None:
        """Send ``record`` to every child processor or sink, or only to ``child``.

        The call is synchronous and depth-first: it returns after the children (and their
        descendants) have processed the record. An unknown ``child`` raises an error naming it.
        """

    def forward_all(
        self,
        entries: Iterable[tuple[Any, Any]],
        timestamp: int,
        child: str | None = None,
    ) -> int:
        """Forward every ``(key, value)`` of ``entries`` as a record with ``timestamp``, in order.

        A processor_api extension (Kafka Streams has no equivalent) for punctuations that emit
        a whole store: ``entries`` is any iterable of pairs, e.g. ``KeyValue`` entries from
        ``store.all()`` or ``store.range(lo, hi)``. The effect, errors included, is that of::

            for key, value in entries:
                self.forward(Record(key, value, timestamp), child)

        except that ``timestamp`` is checked once, before the first entry. Returns the number
        of entries forwarded.

        The runtime makes it fast when the records go straight to sinks: if ``entries`` is a
        store iterator and every target is a sink with a fixed topic, no partitioner, and the
        store's built-in key and value serdes (string, bytes, integer, long or double), the
        stored bytes are produced as they are, without a deserialize/serialize round trip.
        """
        _check_timestamp(timestamp)
        forward = self.forward
        count = 0
        for key, value in entries:
            forward(Record(key, value, timestamp), child)
            count += 1
        return count

    @abstractmethod
    def schedule(
        self,
        interval: int | timedelta,
        type: PunctuationType = PunctuationType.STREAM_TIME,
        punctuator: Callable[[int], None] | None = None,
        *,
        start_time: datetime | int | None = None,
    ) -> Cancellable:
        """Call ``punctuator(timestamp)`` (default: the processor's ``punctuate``) periodically.

        ``interval`` is in milliseconds (>= 1) or a ``timedelta``. STREAM_TIME schedules fire
        on the grid ``k * interval`` once stream time reaches it; WALL_CLOCK_TIME schedules
        fire at registration time + ``k * interval`` of system time. Missed intervals are
        skipped: a punctuator fires at most once per check.

        ``start_time`` (Kafka Streams 4.2's anchored punctuation, KIP-1146) anchors the grid
        instead, for either type: first due at ``start_time``, then ``start_time + k *
        interval``. It is a timezone-aware ``datetime`` or epoch milliseconds (>= 0); a start
        time already passed is due at the first check. The grid is fixed milliseconds: an
        anchor "on the hour in a time zone" stays on the hour only where the zone's offset
        changes by whole intervals.
        """

    @abstractmethod
    def commit(self) -> None:
        """Ask the runtime to commit as soon as possible (flush stores, outputs, positions)."""

    @abstractmethod
    def get_state_store(self, name: str) -> KeyValueStore:
        """The store ``name``; it must be connected to this processor."""

    @abstractmethod
    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the input record being processed; None in punctuation."""

    @abstractmethod
    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest record timestamp seen (-1 before any record)."""

    @abstractmethod
    def current_system_time_ms(self) -> int:
        """The wall-clock time as the runtime sees it (mocked by the test driver)."""


class Processor:
    """Base class of user processors.

    Override :meth:`process` (required); :meth:`init` to keep the context and stores and to
    register punctuation schedules; :meth:`punctuate` for schedules made without a callback;
    :meth:`close` to release resources. Processors are created per task by the topology's
    supplier, so instance attributes are per-task state (stores are what survives restarts).
    """

    def init(self, context: ProcessorContext) -> None:
        """Called once when the task starts (again after each restart). Default: keep nothing."""

    def process(self, record: Record) -> None:
        """Handle one record. Must be overridden."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(record)")

    def punctuate(self, timestamp: int) -> None:
        """Called by schedules registered without a ``punctuator``."""
        raise NotImplementedError(
            f"{type(self).__name__} scheduled a punctuation without a punctuator "
            "but does not implement punctuate(timestamp)"
        )

    def close(self) -> None:
        """Called when the task is closed."""
