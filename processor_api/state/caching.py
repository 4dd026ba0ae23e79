"""Write-back cache layer: coalesces writes to hot keys between flushes."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from processor_api.logging import get_logger
from processor_api.state.base import BytesStore

_log = get_logger(__name__)

DEFAULT_MAX_ENTRIES = 10_000
_ABSENT = object()  # get(): not in the dirty map (None is a cached delete)


class CachingBytesStore(BytesStore):
    """A write-back cache in front of ``inner``, like Kafka Streams' ``CachingKeyValueStore``.

    Puts and deletes only touch a dirty map (a delete is a ``None`` tombstone); reads look at
    the dirty map first. :meth:`flush` writes every dirty entry to ``inner`` with one
    ``put_all`` in key order, then flushes ``inner``; so a key written 1000 times between two
    flushes reaches ``inner`` (and a change log below it) once. When the dirty map grows past
    ``max_entries`` it is written to ``inner`` the same way (evicted) without flushing ``inner``.
    Range reads merge a snapshot of the dirty entries in range with ``inner``'s iterator: the
    cache wins on equal keys and tombstones hide ``inner``'s entries.
    """

    def __init__(self, inner: BytesStore, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.inner = inner
        self.name = inner.name
        self.max_entries = max_entries
        self._dirty: dict[bytes, bytes | None] = {}
        self._sorted: list[bytes] = []  # sorted dirty keys, except those in _new
        self._new: list[bytes] = []  # dirty keys added since _sorted was last brought up to date
        self._open = True

    @property
    def persistent(self) -> bool:
        """Whether the inner store is persistent."""
        return self.inner.persistent

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._open and self.inner.is_open

    @property
    def dirty_count(self) -> int:
        """Number of dirty entries (tombstones included) not yet written to the inner store."""
        return len(self._dirty)

    def get(self, key: bytes) -> bytes | None:
        """Return the cached value (``None`` for a cached delete), else the inner store's.

        Safe from another thread while the owner writes (interactive queries read so): one
        dict lookup, and a write-back fills ``inner`` before it drops the dirty entries, so a
        key is always found in one layer or the other, with its old or its new value."""
        if not self._open or not self.inner.is_open:  # is_open inlined: once per record
            self._check_open()
        value = self._dirty.get(key, _ABSENT)
        if value is not _ABSENT:
            return value  # type: ignore[return-value]
        return self.inner.get(key)

    def _write(self, key: bytes, value: bytes | None) -> None:
        dirty = self._dirty
        if key not in dirty:
            self._new.append(key)
        dirty[key] = value

    def put(self, key: bytes, value: bytes | None) -> None:
        """Cache ``value`` under ``key`` (``None`` caches a delete); evict when over capacity."""
        if not self._open or not self.inner.is_open:
            self._check_open()
        self._write(key, value)
        if len(self._dirty) > self.max_entries:
            self._evict()

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Cache every entry in order; evict when over capacity."""
        self._check_open()
        write = self._write
        for key, value in entries:
            write(key, value)
        if len(self._dirty) > self.max_entries:
            self._evict()

    def delete(self, key: bytes) -> bytes | None:
        """Cache a tombstone for ``key`` and return the value it had, or ``None``."""
        old = self.get(key)
        self.put(key, None)
        return old

    def _sorted_keys(self) -> list[bytes]:
        new = self._new
        if new:
            keys = self._sorted
            if len(new) <= 32:
                for key in new:
                    bisect.insort(keys, key)
            else:
                keys.extend(new)
                keys.sort()
            self._new = []
        return self._sorted

    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Iterate ``lo <= key <= hi`` merging the dirty entries over the inner store's."""
        return self._merged(lo, hi, reverse, lambda: self.inner.range(lo, hi, reverse))

    def time_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        time_from: int,
        time_to: int,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Like :meth:`range`, the inner store read with :meth:`BytesStore.time_range`."""

        def inner() -> Iterator[tuple[bytes, bytes]]:
            return self.inner.time_range(lo, hi, time_from, time_to, reverse)

        return self._merged(lo, hi, reverse, inner)

    def _merged(
        self,
        lo: bytes | None,
        hi: bytes | None,
        reverse: bool,
        inner: Callable[[], Iterator[tuple[bytes, bytes]]],
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        if lo is not None and hi is not None and lo > hi:
            return iter(())
        keys = self._sorted_keys()
        start = 0 if lo is None else bisect.bisect_left(keys, lo)
        stop = len(keys) if hi is None else bisect.bisect_right(keys, hi)
        dirty = self._dirty
        if start == stop:
            return inner()
        cached = [(key, dirty[key]) for key in keys[start:stop]]  # snapshot
        if reverse:
            cached.reverse()
        return _merge(cached, inner(), reverse)

    def approximate_num_entries(self) -> int:
        """The inner store's estimate, corrected for the dirty entries.

        Each dirty entry is checked against the inner store (at most ``max_entries`` reads), so
        the result is exact when the inner store's count is.
        """
        self._check_open()
        count = self.inner.approximate_num_entries()
        inner_get = self.inner.get
        for key, value in self._dirty.items():
            present = inner_get(key) is not None
            if value is None and present:
                count -= 1
            elif value is not None and not present:
                count += 1
        return max(count, 0)

    def _write_back(self) -> int:
        """Write every dirty entry to the inner store in one ``put_all``, in key order."""
        if not self._dirty:
            return 0
        dirty = self._dirty
        entries = [(key, dirty[key]) for key in self._sorted_keys()]
        self.inner.put_all(entries)  # before the entries leave this layer: see get()
        self._dirty = {}
        self._sorted = []
        self._new = []
        return len(entries)

    def _evict(self) -> None:
        count = self._write_back()
        _log.debug("cache_evicted", store=self.name, entries=count)

    def flush(self) -> None:
        """Write all dirty entries to the inner store (one ``put_all``), then flush it."""
        self._check_open()
        self._write_back()
        self.inner.flush()

    def close(self) -> None:
        """Write back the dirty entries, then close the inner store. Idempotent."""
        if not self._open:
            return
        try:
            if self.inner.is_open:
                self._write_back()
        finally:
            self._open = False
            self.inner.close()


def _merge(
    cached: list[tuple[bytes, bytes | None]],
    stored: Iterator[tuple[bytes, bytes]],
    reverse: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """Merge two key-sorted streams; ``cached`` wins on equal keys, ``None`` values hide."""
    ahead = (lambda a, b: a > b) if reverse else (lambda a, b: a < b)
    sentinel: tuple[Any, Any] = (None, None)
    s_key, s_val = next(stored, sentinel)
    for c_key, c_val in cached:
        while s_key is not None and ahead(s_key, c_key):
            yield s_key, s_val
            s_key, s_val = next(stored, sentinel)
        if s_key == c_key:
            s_key, s_val = next(stored, sentinel)
        if c_val is not None:
            yield c_key, c_val
    while s_key is not None:
        yield s_key, s_val
        s_key, s_val = next(stored, sentinel)
