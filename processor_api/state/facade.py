"""Shared plumbing of the typed window and session stores."""

from __future__ import annotations

from typing import Any, TypeVar

from processor_api.logging import get_logger
from processor_api.serde import Serde
from processor_api.state.base import BytesStore
from processor_api.state.segments import SegmentedBytesStore
from processor_api.state.typed_store import TypedStore

_log = get_logger(__name__)

T = TypeVar("T")

INVALID_RANGE_WARNING = (
    "Returning empty iterator for fetch with invalid key range: from > to. This may be due to "
    "range arguments set in the wrong order, or serdes that don't preserve ordering when "
    "lexicographically comparing the serialized bytes. Note that the built-in numerical "
    "serdes do not follow this for negative numbers"
)


def find_layer(layer: Any, kind: type[T]) -> T | None:
    """Follow the ``inner`` links of a layer stack down to the first ``kind`` layer."""
    seen = 0
    while layer is not None and seen < 16:
        if isinstance(layer, kind):
            return layer
        layer = getattr(layer, "inner", None)
        seen += 1
    return None


class TimeOrderedStore(TypedStore):
    """Base of the typed window and session stores: serdes, retention and lifecycle.

    The observed stream time is the largest timestamp put so far (window start, session end),
    or the one the innermost segmented store recorded (after a reopen or a restore).
    """

    def __init__(
        self,
        name: str,
        bytes_store: BytesStore,
        key_serde: Serde,
        value_serde: Serde,
        retention_period: int,
    ) -> None:
        super().__init__(name, bytes_store, key_serde, value_serde)
        self.retention_period = retention_period
        self._segments = find_layer(bytes_store, SegmentedBytesStore)
        self._observed = -1
        self._undo: list[tuple[Any, bytes, bytes | None]] | None = None

    # ------------------------------------------------------------------ undo journal
    def track_writes(self, log: Any) -> None:
        """Journal every write's previous value in ``log`` (an ``UndoLog``; None: stop)."""
        self._undo = None if log is None else log.entries

    def forget_last_read(self) -> None:
        """Nothing is remembered between calls (every journaled write reads its old value)."""

    def undo_write(self, stored_key: bytes, previous: bytes | None) -> None:
        """Write ``previous`` back under ``stored_key`` through every layer (an ``UndoLog`` entry)."""
        self.bytes_store.put(stored_key, previous)

    def _write(self, stored_key: bytes, value_bytes: bytes | None) -> None:
        """Write one stored record, journaling its previous value when a log tracks us."""
        undo = self._undo
        if undo is not None:
            undo.append((self, stored_key, self.bytes_store.get(stored_key)))
        self.bytes_store.put(stored_key, value_bytes)

    @property
    def observed_stream_time(self) -> int:
        """The largest timestamp this store has seen (``-1`` before the first write)."""
        segments = self._segments
        if segments is not None and segments.observed_stream_time > self._observed:
            self._observed = segments.observed_stream_time
        return self._observed

    def _observe(self, timestamp: int) -> int:
        observed = max(self.observed_stream_time, timestamp)
        self._observed = observed
        return observed

    def _expired(self, timestamp: int) -> bool:
        """Kafka Streams' rule: dropped once ``timestamp <= observed - retention``."""
        return timestamp <= self.observed_stream_time - self.retention_period

    def _invalid_range(self, lo: bytes | None, hi: bytes | None) -> bool:
        if lo is not None and hi is not None and lo > hi:
            _log.warning("store_range_inverted", store=self._name, detail=INVALID_RANGE_WARNING)
            return True
        return False

    def approximate_num_entries(self) -> int:
        """An estimate of the number of stored records (exact for in-memory stores)."""
        self._check_open()
        return self.bytes_store.approximate_num_entries()
