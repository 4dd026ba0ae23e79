"""The test driver's stores: a commit after every piped record that leaves RocksDB in memory.

Kafka Streams' test driver commits after every record, and so does this one: each store's
layers are flushed (a cache writes its dirty entries through the change log, whose records the
driver shows on the changelog topic). Flushed down to RocksDB, that also wrote the memtables to
a new SST file and waited for it, per record: 7.1 of 8.0 s of piping 2,000 records through a
count topology (cProfile: ``Rdict.flush``). On Spark a commit does write them, because the
store's checkpoint must vouch for what is on disk; a driver's store has no checkpoint and is
deleted when the driver closes. :class:`DriverStoreLayer` sits right above a persistent store's
innermost byte store (where the runtime keeps its batch buffer) and ends the flush there: the
writes are in RocksDB all the same, in its memtables, where reads find them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from processor_api.state.base import BytesStore, InnerLayer
from processor_api.state.builder import StoreBuilder, StoreStack


class DriverStoreLayer(InnerLayer, BytesStore):
    """Passes every call to ``inner`` except :meth:`flush`, which stops here."""

    def __init__(self, inner: BytesStore) -> None:
        self.inner = inner
        self.name = inner.name
        # the inner store's own methods, without a call of this layer's: one each per record
        self.get = inner.get  # type: ignore[method-assign]
        self.put = inner.put  # type: ignore[method-assign]

    def get(self, key: bytes) -> bytes | None:
        """The inner store's value under ``key``."""
        return self.inner.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write to the inner store (``None`` deletes)."""
        self.inner.put(key, value)

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write every entry to the inner store at once."""
        self.inner.put_all(entries)

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key`` from the inner store; its old value or ``None``."""
        return self.inner.delete(key)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """The inner store's range delete (``lo <= key < hi``)."""
        self.inner.delete_range(lo, hi)

    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The inner store's range iterator."""
        return self.inner.range(lo, hi, reverse)

    def time_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        time_from: int,
        time_to: int,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """The inner store's time-ranged iterator (a segmented store reads only its segments)."""
        return self.inner.time_range(lo, hi, time_from, time_to, reverse)

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The inner store's prefix scan."""
        return self.inner.prefix_scan(prefix)

    def approximate_num_entries(self) -> int:
        """The inner store's estimate, once it is flushed: in RocksDB's memtables every write
        counts as an entry (200 writes to 5 keys: 200), in a flushed file each key once. Only
        a call pays for the flush, as much as every commit paid before."""
        self.inner.flush()
        return self.inner.approximate_num_entries()

    def flush(self) -> None:
        """Nothing: the driver's store is not kept after the driver, so its memtables need not
        reach disk (its writes are in RocksDB already)."""

    def close(self) -> None:
        """Close the inner store (RocksDB flushes and closes)."""
        self.inner.close()


def driver_store_factory(
    state_dir: Path,
) -> Callable[[StoreBuilder, Callable[[], int]], StoreStack]:
    """The driver's store factory: every store built under ``state_dir``; a persistent one
    with a :class:`DriverStoreLayer` over its innermost store."""

    def build(builder: StoreBuilder, timestamp_fn: Callable[[], int]) -> StoreStack:
        if not builder.persistent:
            return builder.build(state_dir=state_dir, timestamp_fn=timestamp_fn)
        inner = DriverStoreLayer(builder.supplier.get(state_dir))
        return builder.build(state_dir=state_dir, timestamp_fn=timestamp_fn, inner=inner)

    return build
