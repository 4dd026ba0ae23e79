"""Time to live for key-value stores: entries whose last write is older than ``ttl``.

:class:`TtlBytesStore` is the top byte layer of a store built with
``StoreBuilder.with_ttl(ttl, clock=...)``, right under the typed facade. Every value it writes
below carries its write time (8 bytes, big-endian, before the value bytes), so the cache, the
changelog topic and a restored store all hold it: an entry is visible while
``write_time >= now - ttl`` and a restore agrees with the store that wrote it.

Clocks (the runtime attaches them, :meth:`TtlBytesStore.attach`):

* ``"stream_time"``: ``now`` is the task's stream time and the write time is the timestamp
  of the record (or punctuation) being processed, so a replay gives the same result;
* ``"wall_clock"``: both are the task's wall clock.

Expired entries are hidden from ``get``/``range``/``all``/``prefix_scan`` at once and deleted
physically by :meth:`TtlBytesStore.expire` (the task calls it at each commit) through the
layers below, so the changelog gets a tombstone. Expiry finds old entries in a time-ordered
index (a heap of ``(write_time, key)`` pushed per write, checked against the store when
popped: a key written again keeps its newer entry), never by a scan per record; the index is
built by one scan of the store at the first expiry after the store opens or is restored.

``read-store`` (:mod:`processor_api.kafka.store_reader`) has no task: it takes ``now`` from
the task's last commit marker (its stream time then) under ``"stream_time"``, and its own
system clock when it reads the markers under ``"wall_clock"``, and drops what
:func:`live_value` hides.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta

from processor_api.errors import StoreError
from processor_api.state.base import BytesStore, InnerLayer

CLOCKS = ("stream_time", "wall_clock")
_TIME = struct.Struct(">q")
_pack = _TIME.pack
_unpack_from = _TIME.unpack_from
_NEVER = -(2**62)  # "now" of a store no task drives: nothing expires


def live_value(data: bytes | None, cutoff: int) -> bytes | None:
    """The value bytes of a stored (stamped) entry, or ``None`` when it is absent or was
    written before ``cutoff`` (``now - ttl``): what the store shows for it."""
    if data is None or _unpack_from(data)[0] < cutoff:
        return None
    return data[8:]


def ttl_ms(store: str, ttl: int | timedelta) -> int:
    """``ttl`` in milliseconds (an int as it is), at least 1; else ``StoreError``."""
    if isinstance(ttl, timedelta):
        value = ttl // timedelta(milliseconds=1)
    elif isinstance(ttl, int) and not isinstance(ttl, bool):
        value = ttl
    else:
        raise StoreError(f"state store {store!r}: ttl must be ms (int) or timedelta, got {ttl!r}")
    if value < 1:
        raise StoreError(f"state store {store!r}: ttl must be at least 1 ms, got {ttl!r}")
    return value


class TtlBytesStore(InnerLayer, BytesStore):
    """Stamps writes with their write time, hides and expires old entries (module docs)."""

    def __init__(self, inner: BytesStore, ttl: int, clock: str) -> None:
        if clock not in CLOCKS:
            raise StoreError(f"state store {inner.name!r}: ttl clock must be one of {CLOCKS}")
        self.inner = inner
        self.name = inner.name
        self.ttl = ttl
        self.clock = clock
        self.now: Callable[[], int] = lambda: _NEVER
        self.write_time: Callable[[], int] = lambda: 0
        self._index: list[tuple[int, bytes]] | None = None  # built at the first expire()
        self.expired_total = 0

    def attach(
        self,
        stream_time: Callable[[], int],
        record_time: Callable[[], int],
        wall: Callable[[], int],
    ) -> None:
        """Take the task's clocks: what ``now`` and the write time are (see the module docs)."""
        if self.clock == "stream_time":
            self.now, self.write_time = stream_time, record_time
        else:
            self.now = self.write_time = wall

    def invalidate_index(self) -> None:
        """The store changed below this layer (restore, rollback): rebuild the index."""
        self._index = None

    # ------------------------------------------------------------------ reads
    def get(self, key: bytes) -> bytes | None:
        """The value under ``key`` unless absent or expired."""
        data = self.inner.get(key)
        if data is None or _unpack_from(data)[0] < self.now() - self.ttl:
            return None
        return data[8:]

    def _live(self, entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        cutoff = self.now() - self.ttl
        for key, data in entries:
            if _unpack_from(data)[0] >= cutoff:
                yield key, data[8:]

    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The live entries of the range."""
        return self._live(self.inner.range(lo, hi, reverse))

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The live entries whose key starts with ``prefix``."""
        return self._live(self.inner.prefix_scan(prefix))

    def approximate_num_entries(self) -> int:
        """The layers' estimate (expired entries not deleted yet count)."""
        return self.inner.approximate_num_entries()

    # ------------------------------------------------------------------ writes
    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``value`` stamped with the write time (``None`` deletes)."""
        if value is None:
            self.inner.put(key, None)
            return
        written = self.write_time()
        self.inner.put(key, _pack(written) + value)
        if self._index is not None:
            heapq.heappush(self._index, (written, key))

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write all entries, stamped with the write time, as one bulk write."""
        written = self.write_time()
        stamp = _pack(written)
        batch = [(k, None if v is None else stamp + v) for k, v in entries]
        self.inner.put_all(batch)
        if self._index is not None:
            push = heapq.heappush
            for key, value in batch:
                if value is not None:
                    push(self._index, (written, key))

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key``; returns its value if it was live."""
        return live_value(self.inner.delete(key), self.now() - self.ttl)

    # ------------------------------------------------------------------ expiry
    def expire(self) -> int:
        """Delete (with a changelog tombstone) every entry expired by now; returns how many."""
        cutoff = self.now() - self.ttl
        if cutoff <= _NEVER:
            return 0
        index = self._index
        if index is None:
            index = self._index = [
                (_unpack_from(data)[0], key) for key, data in self.inner.range(None, None)
            ]
            heapq.heapify(index)
        doomed: dict[bytes, None] = {}
        get = self.inner.get
        pop = heapq.heappop
        while index and index[0][0] < cutoff:
            written, key = pop(index)
            data = get(key)
            # absent, or written again since (its newer index entry stays): nothing to do
            if data is not None and _unpack_from(data)[0] < cutoff:
                doomed[key] = None
        if doomed:
            self.inner.put_all(list(doomed.items()))
            self.expired_total += len(doomed)
        return len(doomed)

    def index_size(self) -> int:
        """Entries in the time index (-1: not built yet)."""
        return -1 if self._index is None else len(self._index)

    def flush(self) -> None:
        """Flush the layers below."""
        self.inner.flush()

    def close(self) -> None:
        """Close the layers below and drop the index."""
        self._index = None
        self.inner.close()
