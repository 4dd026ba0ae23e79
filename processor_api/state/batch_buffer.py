"""A layer that keeps a task's store writes in memory until its next commit.

The runtime puts it right above the innermost store, so RocksDB only ever holds committed
state: reads see the batch's own writes, ``commit()`` applies them in one atomic write batch
once the batch's changelog (and, under exactly-once, its transaction) is durable, and
``discard()`` drops them when the batch fails. A failed or killed batch therefore leaves the
local store exactly at the last committed position: no restore is needed to retry it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from processor_api.state.base import BytesStore
from processor_api.state.caching import CachingBytesStore


class BatchBufferBytesStore(CachingBytesStore):
    """Write buffer over ``inner`` with explicit :meth:`commit` and :meth:`discard`."""

    def __init__(self, inner: BytesStore) -> None:
        super().__init__(inner, max_entries=sys.maxsize)

    def flush(self) -> None:
        """No-op: buffered writes reach the inner store only through :meth:`commit`."""

    def pending(self) -> dict[bytes, bytes | None]:
        """A copy of the buffered writes: what a commit cut now covers (see :meth:`commit`)."""
        return dict(self._dirty)

    def commit(self, covered: Mapping[bytes, bytes | None] | None = None) -> int:
        """Apply the buffered writes to the inner store (one ``put_all``); returns how many.

        ``covered`` (a :meth:`pending` copy taken at a commit cut) applies only those writes,
        for a commit that completes while the next batch is already being processed: a key
        written again since the cut stays buffered with its newer value (it belongs to the
        next batch; :meth:`discard` then drops it and leaves the cut's value).
        """
        self._check_open()
        if covered is None:
            count = self._write_back()
        else:
            count = len(covered)
            if count:
                self.inner.put_all(sorted(covered.items()))
                dirty = self._dirty
                for key, value in covered.items():
                    if key in dirty and dirty[key] is value:  # not written since the cut
                        del dirty[key]
                self._sorted = sorted(dirty)
                self._new = []
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
