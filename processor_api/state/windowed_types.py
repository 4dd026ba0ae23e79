"""Value types of the windowed, session, timestamped and versioned stores (Kafka Streams names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K")

MAX_TIMESTAMP = 2**63 - 1
"""Java's ``Long.MAX_VALUE``: the open upper end of a time range."""


@dataclass(frozen=True)
class TimeWindow:
    """A fixed-size window ``[start, end)`` of a window store (``end = start + window size``)."""

    start: int
    end: int


@dataclass(frozen=True)
class SessionWindow:
    """A session window ``[start, end]``: both ends inclusive, ``start <= end``."""

    start: int
    end: int


@dataclass(frozen=True)
class Windowed(Generic[K]):
    """A record key together with the window it belongs to."""

    key: K
    window: TimeWindow | SessionWindow

    @staticmethod
    def time_window(key: K, start: int, size: int) -> Windowed[K]:
        """``Windowed(key, TimeWindow(start, start + size))``, the end capped at ``MAX_TIMESTAMP``."""
        return Windowed(key, TimeWindow(start, min(start + size, MAX_TIMESTAMP)))


class ValueAndTimestamp(NamedTuple):
    """A value with the timestamp of the record that wrote it (timestamped stores)."""

    value: Any
    timestamp: int


class VersionedRecord(NamedTuple):
    """One version of a key in a versioned store.

    ``valid_to`` is the timestamp of the next newer version (exclusive end of validity), or
    ``None`` when this is the latest version (Kafka Streams' empty ``validTo()``).
    """

    value: Any
    timestamp: int
    valid_to: int | None = None
