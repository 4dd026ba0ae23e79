"""The typed window store handed to processors (Kafka Streams' ``WindowStore``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, overload

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.serde import Serde
from processor_api.state.base import BytesStore, KeyValue
from processor_api.state.facade import TimeOrderedStore
from processor_api.state.iterators import StoreIterator, WindowStoreIterator
from processor_api.state.key_schemas import (
    MAX_SEQNUM,
    WINDOW_SUFFIX,
    upper_bound_for_keys_up_to,
    window_key,
    window_key_parts,
    window_start_of,
)
from processor_api.state.typed_store import check_time
from processor_api.state.windowed_types import MAX_TIMESTAMP, Windowed

_log = get_logger(__name__)


def _time_bound(store: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StoreError(f"state store {store!r}: {what} must be an int (epoch ms), got {value!r}")
    return value


class WindowStore(TimeOrderedStore):
    """Values per key and fixed-size time window, kept for ``retention_period`` ms.

    A window is identified by its start time; ``all()`` and the key-range fetches return
    ``KeyValue(Windowed(key, TimeWindow(start, start + window_size)), value)``. Records are
    ordered by serialized key bytes, then window start (then insertion, for duplicates).

    Retention follows the observed stream time (the largest window start put so far): a
    window with ``start <= observed - retention_period`` is never returned, and putting one
    is ignored, as in Kafka Streams' segmented stores. With ``retain_duplicates`` every put
    adds a new record (sequence numbered) instead of replacing, and ``put(k, None, t)`` is
    ignored.

    Key ranges compare serialized keys (unsigned bytes), as in Kafka Streams.
    """

    def __init__(
        self,
        name: str,
        bytes_store: BytesStore,
        key_serde: Serde,
        value_serde: Serde,
        *,
        window_size: int,
        retention_period: int,
        retain_duplicates: bool = False,
    ) -> None:
        super().__init__(name, bytes_store, key_serde, value_serde, retention_period)
        self.window_size = window_size
        self.retain_duplicates = retain_duplicates
        self._seqnum = 0

    def _serialize_value(self, value: Any) -> bytes | None:
        return self.value_serde.serialize(value)

    def _deserialize_value(self, data: bytes) -> Any:
        return self.value_serde.deserialize(data)

    # ------------------------------------------------------------------ writes

    def put(self, key: Any, value: Any, window_start_ms: int) -> None:
        """Store ``value`` for ``key`` in the window starting at ``window_start_ms``.

        ``value=None`` deletes that window (ignored with ``retain_duplicates``). A window
        older than the observed stream time minus the retention is dropped (logged).
        """
        base = self
        base._check_open()
        key_bytes = base._key_bytes(key)
        start = check_time(base.name, "window start", window_start_ms)
        value_bytes = self._serialize_value(value)
        base._observe(start)
        if base._expired(start):
            _log.warning(
                "skipping_record_for_expired_window",
                store=base.name,
                window_start=start,
                observed_stream_time=base.observed_stream_time,
            )
            return
        if self.retain_duplicates:
            if value_bytes is None:
                return
            self._seqnum = (self._seqnum + 1) & MAX_SEQNUM
        base._write(window_key(key_bytes, start, self._seqnum), value_bytes)

    # ------------------------------------------------------------------ point and range reads

    @overload
    def fetch(self, key: Any, window_start_ms: int, /) -> Any: ...
    @overload
    def fetch(self, key: Any, time_from: int, time_to: int, /) -> WindowStoreIterator: ...
    @overload
    def fetch(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int, /
    ) -> StoreIterator: ...

    def fetch(self, *args: Any) -> Any:
        """Kafka Streams' three ``fetch`` forms, chosen by the number of arguments.

        * ``fetch(key, window_start_ms)`` -> the value of that window, or ``None``;
        * ``fetch(key, time_from, time_to)`` -> :class:`WindowStoreIterator` of
          ``KeyValue(window_start, value)`` for the windows starting in ``[time_from, time_to]``;
        * ``fetch(key_from, key_to, time_from, time_to)`` -> iterator of
          ``KeyValue(Windowed(key, TimeWindow), value)``; ``None`` leaves a key bound open.
        """
        return self._fetch(args, reverse=False)

    @overload
    def backward_fetch(self, key: Any, time_from: int, time_to: int, /) -> WindowStoreIterator: ...
    @overload
    def backward_fetch(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int, /
    ) -> StoreIterator: ...

    def backward_fetch(self, *args: Any) -> Any:
        """Like the range forms of :meth:`fetch`, in descending order."""
        if len(args) == 2:
            raise StoreError(
                f"state store {self.name!r}: backward_fetch takes (key, time_from, time_to) "
                "or (key_from, key_to, time_from, time_to)"
            )
        return self._fetch(args, reverse=True)

    def _fetch(self, args: tuple[Any, ...], reverse: bool) -> Any:
        if len(args) == 2:
            return self._fetch_window(*args)
        if len(args) == 3:
            return self._fetch_key(*args, reverse=reverse)
        if len(args) == 4:
            return self._fetch_key_range(*args, reverse=reverse)
        raise StoreError(
            f"state store {self.name!r}: fetch takes 2, 3 or 4 arguments, got {len(args)}"
        )

    def _fetch_window(self, key: Any, window_start_ms: int) -> Any:
        base = self
        base._check_open()
        key_bytes = base._key_bytes(key)
        start = _time_bound(base.name, "window start", window_start_ms)
        if start < 0 or base._expired(start):
            return None
        if not self.retain_duplicates:
            data = base.bytes_store.get(window_key(key_bytes, start, 0))
            return None if data is None else self._deserialize_value(data)
        # The latest duplicate: the highest sequence number in that window.
        lo, hi = window_key(key_bytes, start, 0), window_key(key_bytes, start, MAX_SEQNUM)
        for _, data in base.bytes_store.range(lo, hi, reverse=True):
            return self._deserialize_value(data)
        return None

    def _live_bounds(self, time_from: int, time_to: int) -> tuple[int, int]:
        base = self
        time_from = _time_bound(base.name, "time_from", time_from)
        time_to = _time_bound(base.name, "time_to", time_to)
        live_from = base.observed_stream_time - base.retention_period + 1
        return max(time_from, live_from, 0), min(time_to, MAX_TIMESTAMP)

    def _fetch_key(
        self, key: Any, time_from: int, time_to: int, reverse: bool
    ) -> WindowStoreIterator:
        base = self
        base._check_open()
        key_bytes = base._key_bytes(key)
        low, high = self._live_bounds(time_from, time_to)
        if low > high:
            return WindowStoreIterator(base, iter(()), _skip)
        size = len(key_bytes) + WINDOW_SUFFIX
        deserialize = self._deserialize_value

        def decode(stored: bytes, data: bytes) -> KeyValue | None:
            if len(stored) != size:
                return None  # another key whose bytes extend this one
            return KeyValue(window_start_of(stored), deserialize(data))

        entries = base.bytes_store.time_range(
            window_key(key_bytes, low, 0),
            window_key(key_bytes, high, MAX_SEQNUM),
            low,
            high,
            reverse,
        )
        return WindowStoreIterator(base, entries, decode)

    def _fetch_key_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int, reverse: bool
    ) -> StoreIterator:
        base = self
        base._check_open()
        lo = None if key_from is None else base._key_bytes(key_from)
        hi = None if key_to is None else base._key_bytes(key_to)
        if base._invalid_range(lo, hi):
            return StoreIterator(base, iter(()), _skip)
        return self._windowed(lo, hi, *self._live_bounds(time_from, time_to), reverse)

    def _windowed(
        self, lo: bytes | None, hi: bytes | None, low: int, high: int, reverse: bool
    ) -> StoreIterator:
        base = self
        if low > high:
            return StoreIterator(base, iter(()), _skip)
        deserialize_key = self.key_serde.deserialize
        deserialize = self._deserialize_value
        size = self.window_size

        def decode(stored: bytes, data: bytes) -> KeyValue | None:
            if len(stored) < WINDOW_SUFFIX:
                return None
            key_bytes, start, _ = window_key_parts(stored)
            if (
                start < low
                or start > high
                or (lo is not None and key_bytes < lo)
                or (hi is not None and key_bytes > hi)
            ):
                return None
            return KeyValue(
                Windowed.time_window(deserialize_key(key_bytes), start, size), deserialize(data)
            )

        upper = None if hi is None else upper_bound_for_keys_up_to(hi, WINDOW_SUFFIX)
        entries: Iterator[tuple[bytes, bytes]] = base.bytes_store.time_range(
            lo, upper, low, high, reverse
        )
        return StoreIterator(base, entries, decode)

    def fetch_all(self, time_from: int, time_to: int) -> StoreIterator:
        """Every key's windows starting in ``[time_from, time_to]``, as ``Windowed`` entries."""
        self._check_open()
        return self._windowed(None, None, *self._live_bounds(time_from, time_to), False)

    def backward_fetch_all(self, time_from: int, time_to: int) -> StoreIterator:
        """Like :meth:`fetch_all`, in descending order."""
        self._check_open()
        return self._windowed(None, None, *self._live_bounds(time_from, time_to), True)

    def all(self) -> StoreIterator:
        """Every live window of every key, as ``KeyValue(Windowed(key, TimeWindow), value)``."""
        return self.fetch_all(0, MAX_TIMESTAMP)

    def backward_all(self) -> StoreIterator:
        """Like :meth:`all`, in descending order."""
        return self.backward_fetch_all(0, MAX_TIMESTAMP)


def _skip(stored: bytes, data: bytes) -> KeyValue | None:
    return None
