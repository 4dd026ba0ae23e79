"""Undoing the store writes of one record whose processing failed and was skipped.

Kafka Streams keeps such writes; here a record skipped by the processing exception handler
leaves the stores as they were before it. Each :class:`~processor_api.state.KeyValueStore`
facade of a task appends ``(store, key bytes, previous value bytes)`` to the task's
:class:`UndoLog` before each write; the task clears the log when a record (or punctuator)
starts and, when the handler skips it, :meth:`UndoLog.rollback` writes the previous values
back through the store's layers, newest first. The restoring writes are ordinary writes: a
cache coalesces them, a change log records them (the changelog then holds the skipped write
and its reversal; replaying it gives the same state).

Key-value stores (plain and timestamped), window stores (plain and timestamped) and session
stores are journaled (a window or session store journals the stored record under its
composite key; the observed stream time a skipped write advanced stays advanced, as the
segments it may have dropped stay dropped). Versioned stores are not yet: their writes made by
a skipped record stay, as in Kafka Streams.

The previous value usually costs nothing: a read-modify-write (``get`` then ``put`` of the
same key) reuses the value ``get`` read, so only a blind write reads the store first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from processor_api.state.key_value import KeyValueStore


class UndoLog:
    """The writes made since :meth:`clear` by the stores that :meth:`track` it."""

    __slots__ = ("entries", "_stores")

    def __init__(self) -> None:
        self.entries: list[tuple[KeyValueStore, bytes, bytes | None]] = []
        self._stores: list[KeyValueStore] = []

    def track(self, store: object) -> None:
        """Journal ``store``'s writes here (until it is tracked by another log); stores that
        cannot journal their writes (versioned) are left as they are."""
        track_writes = getattr(store, "track_writes", None)
        if track_writes is None:
            return
        if store not in self._stores:
            self._stores.append(store)  # type: ignore[arg-type]
        track_writes(self)

    def clear(self) -> None:
        """Forget the journaled writes: the unit of work they belong to succeeded."""
        self.entries.clear()

    def forget_reads(self) -> None:
        """Drop what the stores remember of their last read (their content may have changed
        below them, e.g. a restore or a dropped batch): the next blind write reads again."""
        for store in self._stores:
            store.forget_last_read()

    def rollback(self) -> int:
        """Write back the previous values, newest first; returns how many writes were undone."""
        entries = self.entries
        count = len(entries)
        for store, key, previous in reversed(entries):
            store.bytes_store.put(key, previous)
        entries.clear()
        self.forget_reads()
        return count
