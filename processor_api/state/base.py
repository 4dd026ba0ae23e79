"""The byte-level store contract every store layer implements.

Keys and values are raw ``bytes``. Keys are ordered lexicographically by their bytes, compared
unsigned (RocksDB's default bytewise comparator, Java's ``Bytes`` comparator in Kafka Streams).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from itertools import takewhile
from pathlib import Path
from typing import Any, NamedTuple

from processor_api.errors import StoreError


class KeyValue(NamedTuple):
    """One entry returned by a store iterator."""

    key: Any
    value: Any


class BytesStore(ABC):
    """A key-value store over raw bytes, ordered by unsigned byte comparison of the keys.

    Implementations: the innermost stores (in-memory, RocksDB) and the wrapping layers
    (caching, change logging) that delegate to an inner ``BytesStore``.
    """

    name: str

    @property
    @abstractmethod
    def persistent(self) -> bool:
        """True when the data lives on disk and survives a process restart."""

    @property
    @abstractmethod
    def is_open(self) -> bool:
        """True until :meth:`close` has been called."""

    @abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """Return the value stored under ``key``, or ``None``."""

    @abstractmethod
    def put(self, key: bytes, value: bytes | None) -> None:
        """Store ``value`` under ``key``; a ``None`` value deletes the key."""

    @abstractmethod
    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply many puts (``None`` values delete) as one bulk operation, in the given order."""

    @abstractmethod
    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key`` and return the value it had, or ``None``."""

    @abstractmethod
    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Iterate the entries with ``lo <= key <= hi`` in key order (descending if ``reverse``).

        ``None`` leaves that side open. ``lo > hi`` yields nothing. Writes made to the store
        while iterating never make the iterator fail.
        """

    def time_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        time_from: int,
        time_to: int,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Like :meth:`range`, for a caller that wants only records whose timestamp (a window
        start, a session end) is in ``[time_from, time_to]``: a time-segmented store reads
        only the segments that can hold them. Other entries may still be returned (callers
        filter by time); a store without segments reads the whole key range."""
        return self.range(lo, hi, reverse)

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Iterate, in key order, the entries whose key starts with ``prefix``."""
        # Every key in [prefix, upper] starts with prefix, except possibly upper itself (last).
        entries = self.range(prefix, prefix_upper_bound(prefix))
        return takewhile(lambda entry: entry[0].startswith(prefix), entries)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete every key with ``lo <= key < hi`` (``hi`` excluded)."""
        doomed = [key for key, _ in self.range(lo, hi) if key < hi]
        self.put_all([(key, None) for key in doomed])

    @abstractmethod
    def approximate_num_entries(self) -> int:
        """Return an estimate of the number of entries (exact for in-memory stores)."""

    @abstractmethod
    def flush(self) -> None:
        """Make buffered writes durable in this layer and the layers below it."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's resources. Idempotent; any later use raises ``StoreError``."""

    def create_checkpoint(self, path: Path) -> None:
        """Write a consistent copy of the store's files to the new directory ``path`` (RocksDB
        checkpoints: hard links on the same disk); stores without files cannot."""
        raise StoreError(f"state store {self.name!r} has no files to checkpoint")

    def _check_open(self) -> None:
        if not self.is_open:
            raise StoreError(f"state store {self.name!r} is closed")

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"{type(self).__name__}({self.name!r}, {state})"


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """Return an inclusive upper bound for the keys starting with ``prefix``, or ``None``.

    The bound is the smallest key greater than every key with that prefix (``b"ab"`` ->
    ``b"ac"``); it may itself be a stored key, so callers filter with ``startswith``. ``None``
    means open above (empty prefix, or one made only of ``0xff`` bytes).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


class InnerLayer:
    """A store layer over ``inner``: persistent and open exactly when ``inner`` is."""

    inner: Any

    @property
    def persistent(self) -> bool:
        """Whether the inner store is persistent."""
        return self.inner.persistent

    @property
    def is_open(self) -> bool:
        """Whether the inner store is open."""
        return self.inner.is_open

    def create_checkpoint(self, path: Path) -> None:
        """Checkpoint the inner store."""
        self.inner.create_checkpoint(path)


def open_state_source(layer: Any) -> Any:
    """The layer of a stack whose ``is_open`` is ``layer``'s: ``layer`` itself, or the first
    layer below it that is not an :class:`InnerLayer` keeping the inherited ``is_open``
    (which is its inner store's by definition). Checking that one layer is the same check
    as going down the stack, one property call per layer fewer."""
    while isinstance(layer, InnerLayer) and type(layer).is_open is InnerLayer.is_open:
        layer = layer.inner
    return layer
