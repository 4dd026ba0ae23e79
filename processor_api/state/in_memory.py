"""In-memory byte store: a dict plus a lazily maintained sorted key index."""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Iterable, Iterator

from processor_api.logging import get_logger
from processor_api.state.base import BytesStore

_log = get_logger(__name__)

# Up to this many new keys are merged into the index one by one (bisect + list insert, a
# memmove); more are appended and the index re-sorted (Timsort merges the two sorted runs).
_INSORT_LIMIT = 32


class InMemoryBytesStore(BytesStore):
    """A non-persistent byte store, like Kafka Streams' ``InMemoryKeyValueStore``.

    Values live in a dict (O(1) get/put/delete). Key order is kept in a sorted list that is
    brought up to date lazily, only when an ordered read (range, prefix scan) is asked:

    * a new key goes to a ``pending`` set, not into the sorted list;
    * a deleted key that is in the sorted list is only marked ``stale`` (scans skip it; the
      list is compacted when stale keys are a large share of it).

    A range iterator is a snapshot of the keys in range: it holds the sorted list and two
    positions (O(log n) to create, nothing copied), and looks each value up when it gets
    there, skipping keys deleted meanwhile. The list is copy-on-write: if it must change while
    an iterator still reads it, the store switches to a copy. So writes during iteration are
    safe, never extend the iteration, and a scan that stops early costs only what it read.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: dict[bytes, bytes] = {}
        self._index: list[bytes] = []  # sorted; = live keys not pending, plus stale keys
        self._pending: set[bytes] = set()  # live keys not yet in the index
        self._stale: set[bytes] = set()  # keys in the index that were deleted
        self._readers: weakref.WeakSet[_SnapshotIterator] = weakref.WeakSet()
        self._open = True

    @property
    def persistent(self) -> bool:
        """Always ``False``: the data is lost when the process ends."""
        return False

    @property
    def is_open(self) -> bool:
        """True until :meth:`close`."""
        return self._open

    def get(self, key: bytes) -> bytes | None:
        """Return the value under ``key`` or ``None``."""
        if not self._open:
            self._check_open()
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Store ``value`` under ``key``; ``None`` deletes."""
        if not self._open:
            self._check_open()
        if value is None:
            self._remove(key)
            return
        data = self._data
        if key not in data:
            if key in self._stale:
                self._stale.discard(key)  # still in the index: live again
            else:
                self._pending.add(key)
        data[key] = value

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply every ``(key, value)`` in order; ``None`` values delete."""
        self._check_open()
        put = self.put
        for key, value in entries:
            put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key`` and return its old value, or ``None``."""
        self._check_open()
        return self._remove(key)

    def _remove(self, key: bytes) -> bytes | None:
        old = self._data.pop(key, None)
        if old is not None:
            if key in self._pending:
                self._pending.discard(key)
            else:
                self._stale.add(key)
        return old

    def _sorted_index(self) -> list[bytes]:
        """Bring the sorted index up to date and return it."""
        index = self._index
        compact = bool(self._stale) and len(self._stale) * 4 > len(index)
        if not (compact or self._pending):
            return index
        if compact:
            stale = self._stale
            index = [k for k in index if k not in stale]  # a new list: readers keep theirs
            self._stale = set()
        elif any(reader.keys is index for reader in self._readers):
            index = list(index)  # copy-on-write: an open iterator reads the current list
        pending = self._pending
        if pending:
            if len(pending) <= _INSORT_LIMIT:
                insort = bisect.insort
                for key in pending:
                    insort(index, key)
            else:
                index.extend(pending)
                index.sort()
            self._pending = set()
        self._index = index
        return index

    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Iterate entries with ``lo <= key <= hi`` (``None`` = open) in key order."""
        self._check_open()
        if lo is not None and hi is not None and lo > hi:
            return iter(())
        index = self._sorted_index()
        start = 0 if lo is None else bisect.bisect_left(index, lo)
        stop = len(index) if hi is None else bisect.bisect_right(index, hi)
        if start >= stop:
            return iter(())
        reader = _SnapshotIterator(self, index, start, stop, reverse)
        self._readers.add(reader)
        return reader

    def approximate_num_entries(self) -> int:
        """Return the exact number of entries."""
        self._check_open()
        return len(self._data)

    def flush(self) -> None:
        """Nothing to flush: the data only lives in memory."""
        self._check_open()

    def close(self) -> None:
        """Drop the data and mark the store closed. Idempotent."""
        if not self._open:
            return
        self._open = False
        self._data = {}
        self._index = []
        self._pending = set()
        self._stale = set()
        self._readers = weakref.WeakSet()
        _log.debug("store_closed", store=self.name, kind="in_memory")


class _SnapshotIterator(Iterator[tuple[bytes, bytes]]):
    """Walks ``keys[start:stop]`` (a sorted list the store no longer mutates while read)."""

    __slots__ = ("_store", "keys", "_pos", "_end", "_step", "__weakref__")

    def __init__(
        self, store: InMemoryBytesStore, keys: list[bytes], start: int, stop: int, reverse: bool
    ) -> None:
        self._store = store
        self.keys: list[bytes] | None = keys
        if reverse:
            self._pos, self._end, self._step = stop - 1, start - 1, -1
        else:
            self._pos, self._end, self._step = start, stop, 1

    def __iter__(self) -> _SnapshotIterator:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        store = self._store
        if not store._open:
            store._check_open()
        keys = self.keys
        if keys is None:
            raise StopIteration
        data = store._data
        pos, end, step = self._pos, self._end, self._step
        while pos != end:
            key = keys[pos]
            pos += step
            value = data.get(key)
            if value is not None:  # skip keys deleted since the snapshot
                self._pos = pos
                return key, value
        self.keys = None  # exhausted: stop pinning the list
        raise StopIteration

    def close(self) -> None:
        """Stop early and let the store reuse its index without copying."""
        self.keys = None
