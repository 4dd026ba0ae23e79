"""Iterators returned by the stores: the peek/close/context-manager base of every store
iterator, and the decoding iterator of the window and session stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from processor_api.state.base import KeyValue

NO_PEEK = object()
"""What ``_peeked`` holds when nothing was peeked."""

Decoder = Callable[[bytes, bytes], KeyValue | None]
"""Turns one stored ``(key, value)`` into the entry to return, or ``None`` to skip it."""


class _OpenCheck(Protocol):
    def _check_open(self) -> None: ...


class PeekableIterator(Iterator[KeyValue]):
    """Kafka Streams' ``KeyValueIterator`` contract: :meth:`peek_next_key`, :meth:`close`,
    and a context manager. Subclasses set ``_entries`` and ``_peeked`` and define
    ``__next__`` (which returns a peeked entry first)."""

    __slots__ = ()
    _entries: Iterator[tuple[bytes, bytes]]
    _peeked: Any

    def __iter__(self) -> PeekableIterator:
        return self

    def peek_next_key(self) -> Any:
        """The key :func:`next` would return, without consuming it (``StopIteration`` at end)."""
        if self._peeked is NO_PEEK:
            self._peeked = next(self)
        return self._peeked.key

    def close(self) -> None:
        """Release the iterator early (optional: exhausting it releases it too)."""
        close = getattr(self._entries, "close", None)
        if close is not None:
            close()
        self._entries = iter(())
        self._peeked = NO_PEEK

    def __enter__(self) -> PeekableIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoreIterator(PeekableIterator):
    """Iterator of :class:`KeyValue` over a store's raw entries, decoded one by one.

    Like Kafka Streams' ``KeyValueIterator``: :meth:`peek_next_key`, :meth:`close`, and a
    context manager. Using it after its store was closed raises ``StoreError``.
    """

    __slots__ = ("_store", "_entries", "_decode", "_peeked")

    def __init__(
        self, store: _OpenCheck, entries: Iterator[tuple[bytes, bytes]], decode: Decoder
    ) -> None:
        self._store = store
        self._entries = entries
        self._decode = decode
        self._peeked: Any = NO_PEEK

    def __next__(self) -> KeyValue:
        self._store._check_open()
        if self._peeked is not NO_PEEK:
            entry, self._peeked = self._peeked, NO_PEEK
            return entry
        decode = self._decode
        for key, value in self._entries:
            entry = decode(key, value)
            if entry is not None:
                return entry
        raise StopIteration


class WindowStoreIterator(StoreIterator):
    """A single key's windows: entries are ``KeyValue(window_start, value)``, by start time."""

    __slots__ = ()
