"""The typed key-value store handed to processors."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.serde import Serde
from processor_api.state.base import BytesStore, KeyValue
from processor_api.state.iterators import NO_PEEK, PeekableIterator
from processor_api.state.typed_store import TypedStore

if TYPE_CHECKING:
    from processor_api.state.undo import UndoLog

_log = get_logger(__name__)


class KeyValueIterator(PeekableIterator):
    """Iterator of :class:`KeyValue` returned by the range-type methods of a store.

    Like Kafka Streams' ``KeyValueIterator``: it also offers :meth:`peek_next_key` and
    :meth:`close`, and is a context manager. Using it after its store was closed raises
    ``StoreError``.
    """

    __slots__ = ("_store", "_entries", "_peeked")

    def __init__(self, store: KeyValueStore, entries: Iterator[tuple[bytes, bytes]]) -> None:
        self._store = store
        self._entries = entries
        self._peeked: Any = NO_PEEK

    def __next__(self) -> KeyValue:
        store = self._store
        if not store._open:
            store._check_open()
        if self._peeked is not NO_PEEK:
            entry, self._peeked = self._peeked, NO_PEEK
            return entry
        key, value = next(self._entries)
        return KeyValue(store._deserialize_key(key), store._deserialize_value(value))

    def raw_entries(self) -> tuple[KeyValueStore, Iterator[tuple[bytes, bytes]]] | None:
        """For the runtime's bulk paths: the store and its raw ``(key, value)`` bytes iterator.

        The raw iterator is the one this iterator deserializes (the store's merged view through
        every layer: cache, batch buffer, inner store), so consuming it advances this iterator.
        ``None`` when an entry was peeked (it is already deserialized). Raises ``StoreError``
        when the store is closed, as :func:`next` would.
        """
        store = self._store
        if not store._open:
            store._check_open()
        if self._peeked is not NO_PEEK:
            return None
        return store, self._entries


class KeyValueStore(TypedStore):
    """A key-value state store of Python objects, ordered by their serialized key bytes.

    Keys and values are turned into bytes with ``key_serde`` and ``value_serde``; the order
    of keys in ranges and scans is the unsigned byte order of the serialized keys (so, as in
    Kafka Streams, ``Serdes.long()`` keys sort negative numbers after positive ones). ``None``
    is not a valid key; a ``None`` value means "absent" (``put(k, None)`` deletes).
    """

    def __init__(
        self, name: str, bytes_store: BytesStore, key_serde: Serde, value_serde: Serde
    ) -> None:
        super().__init__(name, bytes_store, key_serde, value_serde)
        # Undo journal of the task (see state.undo), and the last key read or written with
        # its value bytes, so that a put after a get of the same key journals for free.
        self._undo: list[tuple[Any, Any, Any]] | None = None
        self._last_key: bytes | None = None
        self._last_value: bytes | None = None

    # ------------------------------------------------------------------ undo journal

    def track_writes(self, log: UndoLog | None) -> None:
        """Journal every write's previous value in ``log`` (None: stop journaling)."""
        self._undo = None if log is None else log.entries
        self.forget_last_read()

    def forget_last_read(self) -> None:
        """Forget the remembered last read (the store changed below this facade)."""
        self._last_key = self._last_value = None

    def undo_write(self, key: bytes, previous: bytes | None) -> None:
        """Write ``previous`` back under ``key`` through every layer (an ``UndoLog`` entry)."""
        self.bytes_store.put(key, previous)

    # ------------------------------------------------------------------ helpers

    def _serialize_key(self, key: Any) -> bytes:
        if key is None:
            raise StoreError(f"state store {self._name!r}: key must not be None")
        return self.key_serde.serialize(key)  # type: ignore[return-value]

    def _serialize_value(self, value: Any) -> bytes | None:
        return self.value_serde.serialize(value)

    def entry_from_bytes(self, key: bytes, value: bytes | None) -> KeyValue:
        """The typed entry of a raw ``(key, value)`` pair of this store (e.g. from
        :meth:`KeyValueIterator.raw_entries`), deserialized with the store's serdes."""
        return KeyValue(self.key_serde.deserialize(key), self.value_serde.deserialize(value))

    def _deserialize_key(self, data: bytes) -> Any:
        return self.key_serde.deserialize(data)

    def _deserialize_value(self, data: bytes | None) -> Any:
        return self.value_serde.deserialize(data)

    def _bound(self, key: Any) -> bytes | None:
        return None if key is None else self.key_serde.serialize(key)

    def _iterator(self, lo: Any, hi: Any, reverse: bool) -> KeyValueIterator:
        self._check_open()
        lo_bytes, hi_bytes = self._bound(lo), self._bound(hi)
        if lo_bytes is not None and hi_bytes is not None and lo_bytes > hi_bytes:
            _log.warning(
                "store_range_inverted",
                store=self._name,
                detail="lo is after hi once serialized; returning no entries",
            )
            return KeyValueIterator(self, iter(()))
        return KeyValueIterator(self, self.bytes_store.range(lo_bytes, hi_bytes, reverse))

    # ------------------------------------------------------------------ point access

    def get(self, key: Any) -> Any:
        """Return the value stored under ``key``, or ``None`` if there is none."""
        # The checks and serde calls of the helpers inlined: get and put run once or twice
        # per record on the engine's path.
        if not self._open or not self._open_source.is_open:
            self._check_open()
        if key is None:
            self._serialize_key(key)  # raises
        key_bytes = self.key_serde.serialize(key)
        value_bytes = self.bytes_store.get(key_bytes)
        self._last_key = key_bytes
        self._last_value = value_bytes
        return self.value_serde.deserialize(value_bytes)

    def put(self, key: Any, value: Any) -> None:
        """Store ``value`` under ``key``; ``value=None`` deletes the key."""
        if not self._open or not self._open_source.is_open:
            self._check_open()
        if key is None:
            self._serialize_key(key)  # raises
        key_bytes = self.key_serde.serialize(key)
        value_bytes = self.value_serde.serialize(value)
        undo = self._undo
        if undo is not None:
            if key_bytes == self._last_key:  # read-modify-write: the value get() read
                undo.append((self, key_bytes, self._last_value))
            else:
                undo.append((self, key_bytes, self.bytes_store.get(key_bytes)))
        self.bytes_store.put(key_bytes, value_bytes)
        self._last_key = key_bytes
        self._last_value = value_bytes

    def put_if_absent(self, key: Any, value: Any) -> Any:
        """Store ``value`` only if ``key`` has no value; return the existing value or ``None``."""
        self._check_open()
        key_bytes = self._serialize_key(key)
        existing = self.bytes_store.get(key_bytes)
        self._last_key = key_bytes
        self._last_value = existing
        if existing is not None:
            return self._deserialize_value(existing)
        value_bytes = self._serialize_value(value)
        if self._undo is not None:
            self._undo.append((self, key_bytes, None))
        self.bytes_store.put(key_bytes, value_bytes)
        self._last_value = value_bytes
        return None

    def put_all(self, entries: Iterable[tuple[Any, Any]]) -> None:
        """Store every ``(key, value)`` pair, in order, as one bulk write (``None`` deletes)."""
        self._check_open()
        batch = [(self._serialize_key(k), self._serialize_value(v)) for k, v in entries]
        undo = self._undo
        if undo is not None:
            get = self.bytes_store.get
            undo.extend((self, key_bytes, get(key_bytes)) for key_bytes, _ in batch)
        self.forget_last_read()
        self.bytes_store.put_all(batch)

    def delete(self, key: Any) -> Any:
        """Delete ``key`` and return the value it had, or ``None``."""
        self._check_open()
        key_bytes = self._serialize_key(key)
        old = self.bytes_store.delete(key_bytes)
        if self._undo is not None:
            self._undo.append((self, key_bytes, old))
        self._last_key = key_bytes
        self._last_value = None
        return self._deserialize_value(old)

    # ------------------------------------------------------------------ ordered access

    def range(self, lo: Any = None, hi: Any = None) -> KeyValueIterator:
        """Iterate the entries with ``lo <= key <= hi`` in ascending key order.

        Both bounds are inclusive and compared as serialized bytes; ``None`` leaves that side
        open. ``lo`` after ``hi`` gives an empty iterator (with a warning), as in Kafka Streams.
        """
        return self._iterator(lo, hi, False)

    def reverse_range(self, lo: Any = None, hi: Any = None) -> KeyValueIterator:
        """Like :meth:`range` (same bounds, ``lo <= hi``) in descending key order."""
        return self._iterator(lo, hi, True)

    def all(self) -> KeyValueIterator:
        """Iterate every entry in ascending key order."""
        return self._iterator(None, None, False)

    def reverse_all(self) -> KeyValueIterator:
        """Iterate every entry in descending key order."""
        return self._iterator(None, None, True)

    def prefix_scan(
        self,
        prefix: Any,
        prefix_serializer: Serde | Callable[[Any], bytes] | None = None,
    ) -> KeyValueIterator:
        """Iterate, in ascending order, the entries whose serialized key starts with ``prefix``.

        ``prefix`` is serialized with the key serde, or with ``prefix_serializer`` (a ``Serde``
        or a function returning bytes) when given, e.g. to scan ``Serdes.string()`` keys of a
        store whose keys are composite bytes.
        """
        self._check_open()
        if prefix is None:
            raise StoreError(f"state store {self._name!r}: prefix must not be None")
        if prefix_serializer is None:
            prefix_bytes = self.key_serde.serialize(prefix)
        elif hasattr(prefix_serializer, "serialize"):
            prefix_bytes = prefix_serializer.serialize(prefix)
        else:
            prefix_bytes = prefix_serializer(prefix)
        if not isinstance(prefix_bytes, (bytes, bytearray, memoryview)):
            raise StoreError(
                f"state store {self._name!r}: prefix serializer returned "
                f"{type(prefix_bytes).__name__}, expected bytes"
            )
        return KeyValueIterator(self, self.bytes_store.prefix_scan(bytes(prefix_bytes)))

    # ------------------------------------------------------------------ lifecycle

    def approximate_num_entries(self) -> int:
        """Return an estimate of the number of entries (exact for in-memory stores)."""
        self._check_open()
        return self.bytes_store.approximate_num_entries()
