"""A layer that keeps a task's store writes in memory until its next commit.

The runtime puts it right above the innermost store, so RocksDB only ever holds committed
state: reads see the batch's own writes, ``commit()`` applies them in one atomic write batch
once the batch's changelog (and, under exactly-once, its transaction) is durable, and
``discard()`` drops them when the batch fails. A failed or killed batch therefore leaves the
local store exactly at the last committed position: no restore is needed to retry it.
"""

from __future__ import annotations

import sys

from processor_api.state.base import BytesStore
from processor_api.state.caching import CachingBytesStore


class BatchBufferBytesStore(CachingBytesStore):
    """Write buffer over ``inner`` with explicit :meth:`commit` and :meth:`discard`."""

    def __init__(self, inner: BytesStore) -> None:
        super().__init__(inner, max_entries=sys.maxsize)

    def flush(self) -> None:
        """No-op: buffered writes reach the inner store only through :meth:`commit`."""

    def commit(self) -> int:
        """Apply the buffered writes to the inner store (one ``put_all``); returns how many."""
        self._check_open()
        count = self._write_back()
        self.inner.flush()
        return count

    def discard(self) -> int:
        """Drop the buffered writes; returns how many were dropped."""
        count = len(self._dirty)
        self._dirty = {}
        self._sorted = []
        self._new = []
        return count

    def close(self) -> None:
        """Drop uncommitted writes and close the inner store."""
        if not self._open:
            return
        self.discard()
        self._open = False
        self.inner.close()
