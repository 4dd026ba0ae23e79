"""The typed session store handed to processors (Kafka Streams' ``SessionStore``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.serde import Serde
from processor_api.state.base import BytesStore, KeyValue
from processor_api.state.facade import TimeOrderedStore
from processor_api.state.iterators import StoreIterator
from processor_api.state.key_schemas import (
    SESSION_SUFFIX,
    session_key,
    session_key_parts,
    upper_bound_for_keys_up_to,
)
from processor_api.state.typed_store import check_time
from processor_api.state.windowed_types import MAX_TIMESTAMP, SessionWindow, Windowed

_log = get_logger(__name__)


class SessionStore(TimeOrderedStore):
    """Aggregates per key and session window ``[start, end]``, kept for ``retention_period`` ms.

    Keys are ``Windowed(key, SessionWindow(start, end))``. Records are ordered by serialized
    key bytes, then session end, then session start. Retention follows the observed stream
    time (the largest session end put so far): a session with ``end <= observed -
    retention_period`` is never returned, and putting one is ignored.
    """

    def __init__(
        self,
        name: str,
        bytes_store: BytesStore,
        key_serde: Serde,
        value_serde: Serde,
        *,
        retention_period: int,
    ) -> None:
        super().__init__(name, bytes_store, key_serde, value_serde, retention_period)

    def _session(self, windowed: Any) -> tuple[bytes, int, int]:
        if not isinstance(windowed, Windowed):
            raise StoreError(
                f"state store {self.name!r}: a session store key must be "
                f"Windowed(key, SessionWindow(start, end)), got {windowed!r}"
            )
        window = windowed.window
        start = check_time(self.name, "session start", window.start)
        end = check_time(self.name, "session end", window.end)
        if start > end:
            raise StoreError(
                f"state store {self.name!r}: session start {start} is after its end {end}"
            )
        return self._key_bytes(windowed.key), start, end

    # ------------------------------------------------------------------ writes

    def put(self, session: Windowed, aggregate: Any) -> None:
        """Store ``aggregate`` for the session; ``None`` removes it. Expired sessions are dropped."""
        self._check_open()
        key_bytes, start, end = self._session(session)
        value_bytes = self.value_serde.serialize(aggregate)
        self._observe(end)
        if self._expired(end):
            _log.warning(
                "skipping_record_for_expired_session",
                store=self.name,
                session_end=end,
                observed_stream_time=self.observed_stream_time,
            )
            return
        self._write(session_key(key_bytes, start, end), value_bytes)

    def remove(self, session: Windowed) -> None:
        """Remove the session (no-op when it is not there)."""
        self.put(session, None)

    # ------------------------------------------------------------------ reads

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        """The aggregate of exactly that session, or ``None``."""
        self._check_open()
        key_bytes, start, end = self._session(
            Windowed(key, SessionWindow(session_start, session_end))
        )
        if self._expired(end):
            return None
        data = self.bytes_store.get(session_key(key_bytes, start, end))
        return None if data is None else self.value_serde.deserialize(data)

    @overload
    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int, /
    ) -> StoreIterator: ...
    @overload
    def find_sessions(
        self, key_from: Any, key_to: Any, earliest_session_end: int, latest_session_start: int, /
    ) -> StoreIterator: ...

    def find_sessions(self, *args: Any) -> StoreIterator:
        """Sessions with ``end >= earliest_session_end`` and ``start <= latest_session_start``.

        ``find_sessions(key, earliest_end, latest_start)`` for one key, or
        ``find_sessions(key_from, key_to, earliest_end, latest_start)`` for a key range
        (``None`` leaves a bound open). Entries are ``KeyValue(Windowed(key, SessionWindow),
        aggregate)``, by key, then end, then start.
        """
        return self._find(args, reverse=False)

    @overload
    def backward_find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int, /
    ) -> StoreIterator: ...
    @overload
    def backward_find_sessions(
        self, key_from: Any, key_to: Any, earliest_session_end: int, latest_session_start: int, /
    ) -> StoreIterator: ...

    def backward_find_sessions(self, *args: Any) -> StoreIterator:
        """Like :meth:`find_sessions`, in descending order."""
        return self._find(args, reverse=True)

    def fetch(self, key_or_from: Any, key_to: Any = ..., /) -> StoreIterator:
        """Every session of ``key``, or (two arguments) of the keys in ``[key_from, key_to]``."""
        if key_to is ...:
            return self._find((key_or_from, 0, MAX_TIMESTAMP), reverse=False)
        return self._find((key_or_from, key_to, 0, MAX_TIMESTAMP), reverse=False)

    def backward_fetch(self, key_or_from: Any, key_to: Any = ..., /) -> StoreIterator:
        """Like :meth:`fetch`, in descending order."""
        if key_to is ...:
            return self._find((key_or_from, 0, MAX_TIMESTAMP), reverse=True)
        return self._find((key_or_from, key_to, 0, MAX_TIMESTAMP), reverse=True)

    def _find(self, args: tuple[Any, ...], reverse: bool) -> StoreIterator:
        self._check_open()
        if len(args) == 3:
            key, earliest_end, latest_start = args
            return self._find_key(self._key_bytes(key), earliest_end, latest_start, reverse)
        if len(args) == 4:
            key_from, key_to, earliest_end, latest_start = args
            lo = None if key_from is None else self._key_bytes(key_from, "key_from")
            hi = None if key_to is None else self._key_bytes(key_to, "key_to")
            if self._invalid_range(lo, hi):
                return StoreIterator(self, iter(()), _skip)
            return self._find_range(lo, hi, earliest_end, latest_start, reverse)
        raise StoreError(
            f"state store {self.name!r}: find_sessions takes 3 or 4 arguments, got {len(args)}"
        )

    def _bounds(self, earliest_end: Any, latest_start: Any) -> tuple[int, int]:
        for what, value in (
            ("earliest_session_end", earliest_end),
            ("latest_session_start", latest_start),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise StoreError(
                    f"state store {self.name!r}: {what} must be an int (epoch ms), got {value!r}"
                )
        live_from = self.observed_stream_time - self.retention_period + 1
        return max(earliest_end, live_from, 0), min(latest_start, MAX_TIMESTAMP)

    def _decoder(
        self, lo: bytes | None, hi: bytes | None, min_end: int, max_start: int, size: int | None
    ) -> Callable[[bytes, bytes], Any]:
        deserialize_key = self.key_serde.deserialize
        deserialize = self.value_serde.deserialize

        def decode(stored: bytes, data: bytes) -> KeyValue | None:
            if len(stored) < SESSION_SUFFIX or (size is not None and len(stored) != size):
                return None
            key_bytes, start, end = session_key_parts(stored)
            if (
                end < min_end
                or start > max_start
                or (lo is not None and key_bytes < lo)
                or (hi is not None and key_bytes > hi)
            ):
                return None
            window = SessionWindow(start, end)
            return KeyValue(Windowed(deserialize_key(key_bytes), window), deserialize(data))

        return decode

    def _find_key(
        self, key_bytes: bytes, earliest_end: Any, latest_start: Any, reverse: bool
    ) -> StoreIterator:
        min_end, max_start = self._bounds(earliest_end, latest_start)
        if max_start < 0:
            return StoreIterator(self, iter(()), _skip)
        lo = session_key(key_bytes, 0, min_end)
        hi = session_key(key_bytes, max_start, MAX_TIMESTAMP)
        decode = self._decoder(None, None, min_end, max_start, len(key_bytes) + SESSION_SUFFIX)
        return StoreIterator(self, self.bytes_store.range(lo, hi, reverse), decode)

    def _find_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        earliest_end: Any,
        latest_start: Any,
        reverse: bool,
    ) -> StoreIterator:
        min_end, max_start = self._bounds(earliest_end, latest_start)
        if max_start < 0:
            return StoreIterator(self, iter(()), _skip)
        upper = None if hi is None else upper_bound_for_keys_up_to(hi, SESSION_SUFFIX)
        decode = self._decoder(lo, hi, min_end, max_start, None)
        return StoreIterator(self, self.bytes_store.range(lo, upper, reverse), decode)


def _skip(stored: bytes, data: bytes) -> KeyValue | None:
    return None
